//! E-mail to the buyer: which facts are mailed, how often a message is tried and for how long,
//! and what an SMTP server's answer means for the next try.

use super::OrderStatus;
use super::refusal::Refusal;
use super::retry::doubling_backoff_ms;

/// Tries of one message before it is given up (and an alert raised).
pub const MAIL_TRIES_MAX: i64 = 10;
/// A message not sent within this time is given up, however few its tries (e-mail turned off for
/// days, then on again, does not send stale news).
pub const MAIL_AGE_MAX_MS: i64 = 3 * 24 * 3_600_000;
/// The first pause after a failed try; it doubles up to [`MAIL_BACKOFF_MS_MAX`].
pub const MAIL_BACKOFF_MS_FIRST: i64 = 30_000;
pub const MAIL_BACKOFF_MS_MAX: i64 = 3_600_000;
/// Messages sent per step of the mail worker.
pub const MAIL_BATCH_MAX: i64 = 20;
/// Longest error kept with a message, in characters.
pub const MAIL_ERROR_LEN_MAX: usize = 500;

/// What a message tells the buyer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailKind {
    Paid,
    Delivered,
    Refunded,
    /// The link a lookup asked for.
    LookupLink,
    /// The operator's *Send test message*.
    Test,
}

impl MailKind {
    pub const ALL: [MailKind; 5] =
        [MailKind::Paid, MailKind::Delivered, MailKind::Refunded, MailKind::LookupLink, MailKind::Test];

    pub fn as_str(self) -> &'static str {
        match self {
            MailKind::Paid => "paid",
            MailKind::Delivered => "delivered",
            MailKind::Refunded => "refunded",
            MailKind::LookupLink => "lookup_link",
            MailKind::Test => "test",
        }
    }

    pub fn parse(text: &str) -> Option<MailKind> {
        MailKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// Whether the message carries a link to its order.
    pub fn has_link(self) -> bool {
        self != MailKind::Test
    }
}

/// The message an order's change `from -> to` mails its buyer, if any: paid, delivered (which
/// stands in for a pending *paid* of the same order: a digital order is both at once) and
/// refunded in full.
pub fn mail_of_change(from: OrderStatus, to: OrderStatus) -> Option<MailKind> {
    match to {
        _ if from == to => None,
        OrderStatus::Paid => Some(MailKind::Paid),
        OrderStatus::Delivered => Some(MailKind::Delivered),
        OrderStatus::Refunded => Some(MailKind::Refunded),
        _ => None,
    }
}

/// A message's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailStatus {
    Pending,
    Sent,
    /// Given up: too many tries, too old, or refused for good.
    Failed,
    /// A newer message about the same order says more (a *delivered* after a *paid* not yet sent).
    Superseded,
}

impl MailStatus {
    pub const ALL: [MailStatus; 4] =
        [MailStatus::Pending, MailStatus::Sent, MailStatus::Failed, MailStatus::Superseded];

    pub fn as_str(self) -> &'static str {
        match self {
            MailStatus::Pending => "pending",
            MailStatus::Sent => "sent",
            MailStatus::Failed => "failed",
            MailStatus::Superseded => "superseded",
        }
    }

    pub fn parse(text: &str) -> Result<MailStatus, Refusal> {
        MailStatus::ALL.into_iter().find(|s| s.as_str() == text).ok_or_else(|| {
            Refusal::unprocessable("invalid_status", "status is one of pending, sent, failed, superseded")
        })
    }
}

/// How a try went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Sent,
    /// The server could not be reached or answered 4xx: try again later.
    Transient(String),
    /// The server refused the message for good (5xx: no such mailbox, rejected content).
    Permanent(String),
}

/// What to do with a message after try number `tries` went as `outcome`, the message being
/// `age_ms` old.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Sent,
    /// Try again after this many milliseconds.
    Retry {
        after_ms: i64,
        error: String,
    },
    GiveUp {
        error: String,
    },
}

/// Whether a message `age_ms` old is still sent: news older than [`MAIL_AGE_MAX_MS`] is given up
/// untried (e-mail was off, or failing, all that time).
pub fn before_try(age_ms: i64) -> Option<Next> {
    (age_ms >= MAIL_AGE_MAX_MS)
        .then(|| Next::GiveUp { error: "not sent within 3 days (e-mail was off or failing)".into() })
}

pub fn after_try(outcome: Outcome, tries: i64, age_ms: i64) -> Next {
    match outcome {
        Outcome::Sent => Next::Sent,
        Outcome::Permanent(error) => Next::GiveUp { error },
        Outcome::Transient(error) if tries >= MAIL_TRIES_MAX || age_ms >= MAIL_AGE_MAX_MS => Next::GiveUp { error },
        Outcome::Transient(error) => Next::Retry {
            after_ms: doubling_backoff_ms(MAIL_BACKOFF_MS_FIRST, tries.max(1) - 1, MAIL_BACKOFF_MS_MAX),
            error,
        },
    }
}

/// An error as kept with a message: at most [`MAIL_ERROR_LEN_MAX`] characters, no controls.
pub fn kept_error(error: &str) -> String {
    error.chars().map(|c| if c.is_control() { ' ' } else { c }).take(MAIL_ERROR_LEN_MAX).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_mailed() {
        use OrderStatus::*;
        assert_eq!(mail_of_change(PendingPayment, Paid), Some(MailKind::Paid));
        assert_eq!(mail_of_change(Paid, Delivered), Some(MailKind::Delivered));
        assert_eq!(mail_of_change(Refunding, Refunded), Some(MailKind::Refunded));
        assert_eq!(mail_of_change(PendingPayment, Expired), None);
        assert_eq!(mail_of_change(Paid, Refunding), None);
        assert_eq!(mail_of_change(Paid, Paid), None);
        for k in MailKind::ALL {
            assert_eq!(MailKind::parse(k.as_str()), Some(k));
        }
    }

    #[test]
    fn tries_back_off_then_give_up() {
        let t = |e: &str| Outcome::Transient(e.to_string());
        assert_eq!(after_try(Outcome::Sent, 1, 0), Next::Sent);
        assert_eq!(after_try(t("down"), 1, 0), Next::Retry { after_ms: 30_000, error: "down".into() });
        assert_eq!(after_try(t("down"), 2, 0), Next::Retry { after_ms: 60_000, error: "down".into() });
        assert_eq!(after_try(t("down"), 9, 0), Next::Retry { after_ms: MAIL_BACKOFF_MS_MAX, error: "down".into() });
        assert_eq!(after_try(t("down"), MAIL_TRIES_MAX, 0), Next::GiveUp { error: "down".into() });
        assert_eq!(after_try(t("down"), 1, MAIL_AGE_MAX_MS), Next::GiveUp { error: "down".into() });
        assert_eq!(after_try(Outcome::Permanent("550".into()), 1, 0), Next::GiveUp { error: "550".into() });
        assert_eq!(kept_error("a\r\nb"), "a  b");
        assert_eq!(before_try(0), None);
        assert!(matches!(before_try(MAIL_AGE_MAX_MS), Some(Next::GiveUp { .. })));
        assert_eq!(kept_error(&"x".repeat(900)).len(), MAIL_ERROR_LEN_MAX);
    }
}

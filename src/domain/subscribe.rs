//! WeChat mini-program subscribe messages (订阅消息, docs/gateways/wechat-subscribe.md): which of
//! kassa's facts a template's field may carry, each value cut to what its field's kind takes, and
//! what WeChat's answer to a send means.

use super::OrderStatus;

/// Tries of one message before it is given up (and an alert raised).
pub const SUBSCRIBE_TRIES_MAX: i64 = 8;
/// The first pause after a failed try; it doubles up to [`SUBSCRIBE_BACKOFF_MS_MAX`].
pub const SUBSCRIBE_BACKOFF_MS_FIRST: i64 = 10_000;
pub const SUBSCRIBE_BACKOFF_MS_MAX: i64 = 600_000;
/// Messages sent per step of the worker.
pub const SUBSCRIBE_BATCH_MAX: i64 = 20;
/// Longest `page` (with the order number in it) sent, in characters.
pub const PAGE_LEN_MAX: usize = 256;

/// What a message tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscribeKind {
    Paid,
    Delivered,
}

impl SubscribeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SubscribeKind::Paid => "paid",
            SubscribeKind::Delivered => "delivered",
        }
    }

    pub fn parse(text: &str) -> Option<SubscribeKind> {
        [SubscribeKind::Paid, SubscribeKind::Delivered].into_iter().find(|k| k.as_str() == text)
    }

    /// The message an order reaching `to` sends, if any.
    pub fn of_change(from: OrderStatus, to: OrderStatus) -> Option<SubscribeKind> {
        match to {
            _ if from == to => None,
            OrderStatus::Paid => Some(SubscribeKind::Paid),
            OrderStatus::Delivered => Some(SubscribeKind::Delivered),
            _ => None,
        }
    }
}

/// A fact of kassa's a template field may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fact {
    /// The order number.
    OrderNo,
    /// The order's total.
    Amount,
    /// What was bought: the order's subject (its first line's name, and how many more).
    Items,
    /// When it happened, Beijing time.
    Time,
    /// What happened, in a few Chinese characters (已支付, 已发货).
    Status,
}

impl Fact {
    pub const NAMES: &'static str = "order_no, amount, items, time, status";

    pub fn parse(name: &str) -> Option<Fact> {
        Some(match name {
            "order_no" => Fact::OrderNo,
            "amount" => Fact::Amount,
            "items" => Fact::Items,
            "time" => Fact::Time,
            "status" => Fact::Status,
            _ => return None,
        })
    }
}

/// The kind of a template field, named by its key without the number (`thing3` is a `thing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// 20 characters of any kind.
    Thing,
    /// 32 letters, digits or symbols.
    CharacterString,
    /// A currency sign and at most 10 digits, with a decimal point.
    Amount,
    /// A time (`2026年12月06日 21:40`).
    Time,
    /// A date, with a time (`2026年12月06日 21:40`).
    Date,
    /// At most 5 Chinese characters.
    Phrase,
}

impl FieldKind {
    /// The kind of field `key` (`thing3`, `character_string12`), if kassa fills that kind.
    pub fn of_key(key: &str) -> Option<FieldKind> {
        Some(match key.trim_end_matches(|c: char| c.is_ascii_digit()) {
            "thing" => FieldKind::Thing,
            "character_string" => FieldKind::CharacterString,
            "amount" => FieldKind::Amount,
            "time" => FieldKind::Time,
            "date" => FieldKind::Date,
            "phrase" => FieldKind::Phrase,
            _ => return None,
        })
    }

    /// Whether a field of this kind can carry `fact` within its limits.
    pub fn carries(self, fact: Fact) -> bool {
        matches!(
            (self, fact),
            (FieldKind::CharacterString, Fact::OrderNo)
                | (FieldKind::Amount | FieldKind::Thing, Fact::Amount)
                | (FieldKind::Thing, Fact::Items | Fact::Status)
                | (FieldKind::Time | FieldKind::Date, Fact::Time)
                | (FieldKind::Phrase, Fact::Status)
        )
    }
}

/// A field mapping of the configuration checked: each key a kind kassa fills, each fact one the
/// kind can carry. The error names the key.
pub fn check_field(key: &str, fact: &str) -> Result<(FieldKind, Fact), String> {
    let kind = FieldKind::of_key(key).ok_or_else(|| {
        format!("field {key:?}: kassa fills thing, character_string, amount, time, date and phrase fields")
    })?;
    let fact = Fact::parse(fact).ok_or_else(|| format!("field {key:?}: {fact:?} is not one of {}", Fact::NAMES))?;
    if !kind.carries(fact) {
        return Err(format!("field {key:?} cannot carry {fact:?} within its limits"));
    }
    Ok((kind, fact))
}

/// What a message's fields are made from.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    pub order_no: &'a str,
    pub total_minor: i64,
    pub currency: &'a str,
    pub subject: &'a str,
    /// `YYYY-MM-DD HH:MM`, Beijing time.
    pub at_beijing: &'a str,
    pub kind: SubscribeKind,
}

/// `text` cut to `max` characters, the last one `…` when anything was cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The value of a field of `kind` carrying `fact`, within the kind's limits.
pub fn value(kind: FieldKind, fact: Fact, f: &Facts<'_>) -> String {
    let decimal = super::money::decimal_minor(f.total_minor, f.currency);
    match (fact, kind) {
        (Fact::OrderNo, _) => f.order_no.chars().filter(char::is_ascii_graphic).take(32).collect(),
        (Fact::Amount, FieldKind::Amount) => {
            let sign = match f.currency {
                "CNY" | "JPY" => "¥",
                "USD" | "HKD" | "SGD" | "AUD" | "CAD" => "$",
                "EUR" => "€",
                "GBP" => "£",
                _ => "",
            };
            format!("{sign}{decimal}")
        }
        (Fact::Amount, _) => cut(&format!("{decimal} {}", f.currency), 20),
        (Fact::Items, _) => cut(f.subject, 20),
        (Fact::Time, _) => {
            // `2026-12-06 21:40` as WeChat writes dates: 2026年12月06日 21:40.
            let (date, time) = f.at_beijing.split_once(' ').unwrap_or((f.at_beijing, ""));
            let mut parts = date.split('-');
            match (parts.next(), parts.next(), parts.next()) {
                (Some(y), Some(m), Some(d)) => format!("{y}年{m}月{d}日 {time}").trim_end().to_string(),
                _ => f.at_beijing.to_string(),
            }
        }
        (Fact::Status, _) => match f.kind {
            SubscribeKind::Paid => "已支付".to_string(),
            SubscribeKind::Delivered => "已发货".to_string(),
        },
    }
}

/// What WeChat's answer to a send means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Sent,
    /// 43101: the buyer gave no consent, or used it up. Recorded, never tried again, no alert.
    NoConsent,
    /// The token is stale (40001, 42001, 40014): a fresh one, and one more try.
    TokenStale,
    /// The message as configured cannot be sent (47003 a field, 40037 the template, 41030 the
    /// page, 40003 the openid): given up at once, with an alert.
    Refused,
    /// Anything else (-1 busy, 45009 the daily quota): tried again later.
    Retry,
}

pub fn classify(errcode: i64) -> Answer {
    match errcode {
        0 => Answer::Sent,
        43_101 => Answer::NoConsent,
        40_001 | 42_001 | 40_014 => Answer::TokenStale,
        47_003 | 40_037 | 41_030 | 40_003 => Answer::Refused,
        _ => Answer::Retry,
    }
}

/// The pause before try `tries + 1` of a message.
pub fn backoff_ms(tries: i64) -> i64 {
    super::retry::doubling_backoff_ms(SUBSCRIBE_BACKOFF_MS_FIRST, tries.max(1) - 1, SUBSCRIBE_BACKOFF_MS_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(kind: SubscribeKind) -> Facts<'static> {
        Facts {
            order_no: "KS1M95SAGM5RBAY8A4NR7HN",
            total_minor: 12_800,
            currency: "CNY",
            subject: "West Lake Longjing tea, 100 g and 2 more",
            at_beijing: "2026-12-06 21:40",
            kind,
        }
    }

    #[test]
    fn fields_carry_what_fits_them() {
        assert_eq!(check_field("character_string1", "order_no").unwrap(), (FieldKind::CharacterString, Fact::OrderNo));
        assert!(check_field("thing1", "order_no").is_err(), "23 characters do not fit a thing");
        assert!(check_field("phrase2", "items").is_err());
        assert!(check_field("name3", "items").unwrap_err().contains("name3"));
        assert!(check_field("thing4", "price").unwrap_err().contains("price"));
        assert_eq!(check_field("time12", "time").unwrap().0, FieldKind::Time);
    }

    #[test]
    fn values_stay_within_their_kinds_limits() {
        let f = facts(SubscribeKind::Paid);
        assert_eq!(value(FieldKind::CharacterString, Fact::OrderNo, &f), "KS1M95SAGM5RBAY8A4NR7HN");
        assert_eq!(value(FieldKind::Amount, Fact::Amount, &f), "¥128.00");
        assert_eq!(value(FieldKind::Thing, Fact::Amount, &f), "128.00 CNY");
        let items = value(FieldKind::Thing, Fact::Items, &f);
        assert_eq!(items.chars().count(), 20);
        assert!(items.ends_with('…'));
        assert_eq!(value(FieldKind::Time, Fact::Time, &f), "2026年12月06日 21:40");
        assert_eq!(value(FieldKind::Phrase, Fact::Status, &f), "已支付");
        assert_eq!(value(FieldKind::Phrase, Fact::Status, &facts(SubscribeKind::Delivered)), "已发货");
        assert_eq!(cut("短", 20), "短");
    }

    #[test]
    fn answers() {
        assert_eq!(classify(0), Answer::Sent);
        assert_eq!(classify(43_101), Answer::NoConsent);
        assert_eq!(classify(42_001), Answer::TokenStale);
        assert_eq!(classify(47_003), Answer::Refused);
        assert_eq!(classify(-1), Answer::Retry);
        assert_eq!(backoff_ms(1), 10_000);
        assert_eq!(backoff_ms(20), SUBSCRIBE_BACKOFF_MS_MAX);
        assert_eq!(SubscribeKind::of_change(OrderStatus::PendingPayment, OrderStatus::Paid), Some(SubscribeKind::Paid));
        assert_eq!(SubscribeKind::of_change(OrderStatus::Paid, OrderStatus::Refunding), None);
    }
}

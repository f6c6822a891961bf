//! Statuses and the one transition table. Every status change in kassa is checked here first and
//! then written, together with its event-log row, by the store.

use std::fmt;

macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }

            pub fn parse(text: &str) -> Option<Self> {
                match text { $($text => Some($name::$variant),)+ _ => None }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        /// As its text, as stored and as the API shows it.
        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// Status of an order (docs/DESIGN.md; the API shows these exact strings).
    OrderStatus {
        PendingPayment => "pending_payment",
        Paid => "paid",
        Delivered => "delivered",
        Expired => "expired",
        Cancelled => "cancelled",
        PaidAfterExpiry => "paid_after_expiry",
        Refunding => "refunding",
        Refunded => "refunded",
    }
);

string_enum!(
    /// Status of one payment attempt (one merchant reference at the gateway).
    AttemptStatus {
        Created => "created",
        Redirected => "redirected",
        Succeeded => "succeeded",
        Failed => "failed",
        Cancelled => "cancelled",
        Expired => "expired",
        Superseded => "superseded",
        Unknown => "unknown",
    }
);

string_enum!(
    /// Status of a stock reservation; it follows its order (invariant I2).
    ReservationStatus {
        Active => "active",
        Consumed => "consumed",
        Released => "released",
    }
);

string_enum!(
    /// Status of a refund: sent to the gateway outside any transaction, settled by its answer or
    /// its refund notification.
    RefundStatus {
        Requested => "requested",
        Processing => "processing",
        Succeeded => "succeeded",
        Failed => "failed",
    }
);

string_enum!(
    /// Status of a webhook message to the shop (the outbox): queued, delivered, or given up.
    MessageStatus {
        Pending => "pending",
        Delivered => "delivered",
        Dead => "dead",
    }
);

string_enum!(
    /// Status of an order's WeChat shipping report: queued, reported, or given up.
    ReportStatus {
        Pending => "pending",
        Reported => "reported",
        Failed => "failed",
    }
);

string_enum!(
    /// Outcome of one notification arrival in the inbox.
    NotificationStatus {
        Received => "received",
        Applied => "applied",
        Ignored => "ignored",
        IgnoredDuplicate => "ignored_duplicate",
        Rejected => "rejected",
    }
);

/// The legal order transitions (docs/DESIGN.md). Anything not listed is an error.
const ORDER_TRANSITIONS: &[(OrderStatus, OrderStatus)] = {
    use OrderStatus::*;
    &[
        (PendingPayment, Paid),
        (PendingPayment, Expired),
        (PendingPayment, Cancelled),
        (Expired, PaidAfterExpiry),
        (Cancelled, PaidAfterExpiry),
        (PaidAfterExpiry, Paid),
        (PaidAfterExpiry, Refunding),
        (Paid, Delivered),
        (Paid, Refunding),
        (Delivered, Refunding),
        (Refunding, Refunded),
        (Refunding, Paid),
        (Refunding, Delivered),
        // An automatic refund of a late payment that fails goes back to review.
        (Refunding, PaidAfterExpiry),
    ]
};

/// The legal attempt transitions. A closed attempt may still turn `succeeded`: the gateway is the
/// truth about money, and a late success must be recorded (it becomes a late or duplicate payment).
const ATTEMPT_TRANSITIONS: &[(AttemptStatus, AttemptStatus)] = {
    use AttemptStatus::*;
    &[
        (Created, Redirected),
        (Created, Succeeded),
        (Created, Failed),
        (Created, Cancelled),
        (Created, Expired),
        (Created, Superseded),
        (Created, Unknown),
        (Redirected, Succeeded),
        (Redirected, Failed),
        (Redirected, Cancelled),
        (Redirected, Expired),
        (Redirected, Superseded),
        (Redirected, Unknown),
        (Unknown, Succeeded),
        (Unknown, Failed),
        (Unknown, Cancelled),
        (Unknown, Expired),
        (Unknown, Superseded),
        (Failed, Succeeded),
        (Cancelled, Succeeded),
        (Expired, Succeeded),
        (Superseded, Succeeded),
    ]
};

const REFUND_TRANSITIONS: &[(RefundStatus, RefundStatus)] = {
    use RefundStatus::*;
    &[
        (Requested, Processing),
        (Requested, Succeeded),
        (Requested, Failed),
        (Processing, Succeeded),
        (Processing, Failed),
    ]
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("illegal {entity} transition {from} -> {to}")]
pub struct IllegalTransition {
    pub entity: &'static str,
    pub from: String,
    pub to: String,
}

impl OrderStatus {
    /// Checks `self -> to` against the transition table.
    pub fn transition(self, to: OrderStatus) -> Result<OrderStatus, IllegalTransition> {
        if ORDER_TRANSITIONS.contains(&(self, to)) {
            Ok(to)
        } else {
            Err(IllegalTransition { entity: "order", from: self.to_string(), to: to.to_string() })
        }
    }

    /// The reservation status every reservation of an order in this status must have (I2).
    /// `ever_paid`: whether the order was ever `paid` (holding its stock); a late payment that is
    /// refunded without being re-allocated never took its stock back.
    pub fn reservation_status(self, ever_paid: bool) -> ReservationStatus {
        use OrderStatus::*;
        match self {
            PendingPayment => ReservationStatus::Active,
            Paid | Delivered => ReservationStatus::Consumed,
            Refunding | Refunded if ever_paid => ReservationStatus::Consumed,
            Expired | Cancelled | PaidAfterExpiry | Refunding | Refunded => ReservationStatus::Released,
        }
    }

    /// Terminal for the buyer's polling: nothing more will happen without an operator.
    pub fn is_settled(self) -> bool {
        !matches!(self, OrderStatus::PendingPayment | OrderStatus::Refunding)
    }
}

impl AttemptStatus {
    pub fn transition(self, to: AttemptStatus) -> Result<AttemptStatus, IllegalTransition> {
        if ATTEMPT_TRANSITIONS.contains(&(self, to)) {
            Ok(to)
        } else {
            Err(IllegalTransition { entity: "attempt", from: self.to_string(), to: to.to_string() })
        }
    }

    /// Active attempts can still be paid normally; at most one per order (I5).
    pub fn is_active(self) -> bool {
        matches!(self, AttemptStatus::Created | AttemptStatus::Redirected | AttemptStatus::Unknown)
    }

    /// The SQL condition "`column` is active", written as the partial unique index
    /// `payment_attempts_one_active` states it, so SQLite's planner can read active attempts
    /// through that index (and compares in place: an `IN` list of three or more constants is a
    /// temporary b-tree built on every run; `migrations/sqlite/0009_check_comparisons.sql`).
    pub fn active_sql(column: &str) -> String {
        format!("({column} = 'created' OR {column} = 'redirected' OR {column} = 'unknown')")
    }
}

impl RefundStatus {
    pub fn transition(self, to: RefundStatus) -> Result<RefundStatus, IllegalTransition> {
        if REFUND_TRANSITIONS.contains(&(self, to)) {
            Ok(to)
        } else {
            Err(IllegalTransition { entity: "refund", from: self.to_string(), to: to.to_string() })
        }
    }

    /// Still owed an answer by the gateway.
    pub fn is_open(self) -> bool {
        matches!(self, RefundStatus::Requested | RefundStatus::Processing)
    }
}

/// Replays a refund's log (see [`replay_order_log`]).
pub fn replay_refund_log(log: &[(Option<String>, String)]) -> Result<Option<RefundStatus>, String> {
    replay(log, RefundStatus::parse, RefundStatus::Requested, RefundStatus::transition)
}

/// Replays a log of `(from, to)` transitions from `initial` through `transition`; returns the
/// status it ends in, or the first broken link.
fn replay<S: Copy + PartialEq + fmt::Display, E: fmt::Display>(
    log: &[(Option<String>, String)],
    parse: fn(&str) -> Option<S>,
    initial: S,
    transition: fn(S, S) -> Result<S, E>,
) -> Result<Option<S>, String> {
    let mut current: Option<S> = None;
    for (i, (from, to)) in log.iter().enumerate() {
        let to_status = parse(to).ok_or_else(|| format!("event {i}: unknown status {to:?}"))?;
        match (current, from.as_deref()) {
            (None, None) if to_status == initial => {}
            (None, _) => return Err(format!("event {i}: log does not start at creation")),
            (Some(cur), Some(f)) if f == cur.to_string() => {
                transition(cur, to_status).map_err(|e| format!("event {i}: {e}"))?;
            }
            (Some(cur), f) => return Err(format!("event {i}: from {f:?} but status was {cur}")),
        }
        current = Some(to_status);
    }
    Ok(current)
}

/// Replays a log of `(from, to)` order transitions and returns the status it ends in, or the first
/// broken link. Used by `kassa check` (I7).
pub fn replay_order_log(log: &[(Option<String>, String)]) -> Result<Option<OrderStatus>, String> {
    replay(log, OrderStatus::parse, OrderStatus::PendingPayment, OrderStatus::transition)
}

/// Same as [`replay_order_log`] for an attempt.
pub fn replay_attempt_log(log: &[(Option<String>, String)]) -> Result<Option<AttemptStatus>, String> {
    replay(log, AttemptStatus::parse, AttemptStatus::Created, AttemptStatus::transition)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_round_trips_through_its_string() {
        for s in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(s.as_str()), Some(*s));
        }
        for s in AttemptStatus::ALL {
            assert_eq!(AttemptStatus::parse(s.as_str()), Some(*s));
        }
        assert_eq!(OrderStatus::parse("PAID"), None);
    }

    #[test]
    fn order_table_is_exactly_the_design() {
        use OrderStatus::*;
        // Exhaustive: every pair not in the table is refused.
        let mut legal = 0;
        for from in OrderStatus::ALL {
            for to in OrderStatus::ALL {
                if from.transition(*to).is_ok() {
                    legal += 1;
                }
            }
        }
        assert_eq!(legal, ORDER_TRANSITIONS.len());
        assert!(PendingPayment.transition(Paid).is_ok());
        assert!(Expired.transition(Paid).is_err(), "a late payment never skips paid_after_expiry");
        assert!(Paid.transition(Expired).is_err(), "a paid order is never expired");
        assert!(Paid.transition(PendingPayment).is_err());
        assert!(Expired.transition(PaidAfterExpiry).is_ok());
    }

    #[test]
    fn attempts_only_move_forward() {
        use AttemptStatus::*;
        assert!(Succeeded.transition(Failed).is_err());
        assert!(Succeeded.transition(Expired).is_err());
        assert!(Expired.transition(Succeeded).is_ok());
        assert!(Created.transition(Created).is_err());
        assert!(Created.is_active() && Unknown.is_active() && !Expired.is_active());
    }

    #[test]
    fn reservations_follow_the_order() {
        assert_eq!(OrderStatus::PendingPayment.reservation_status(false), ReservationStatus::Active);
        assert_eq!(OrderStatus::Paid.reservation_status(true), ReservationStatus::Consumed);
        assert_eq!(OrderStatus::Expired.reservation_status(false), ReservationStatus::Released);
        assert_eq!(OrderStatus::Refunded.reservation_status(true), ReservationStatus::Consumed);
        assert_eq!(OrderStatus::Refunded.reservation_status(false), ReservationStatus::Released);
    }

    #[test]
    fn replay_finds_the_current_status_and_broken_links() {
        let s = |x: &str| x.to_string();
        let good = vec![(None, s("pending_payment")), (Some(s("pending_payment")), s("paid"))];
        assert_eq!(replay_order_log(&good), Ok(Some(OrderStatus::Paid)));
        let gap = vec![(None, s("pending_payment")), (Some(s("paid")), s("delivered"))];
        assert!(replay_order_log(&gap).is_err());
        let illegal = vec![(None, s("pending_payment")), (Some(s("pending_payment")), s("refunded"))];
        assert!(replay_order_log(&illegal).is_err());
        assert_eq!(replay_order_log(&[]), Ok(None));
    }
}

//! Pure decisions: given what the store read under lock, what must change. No I/O here, so every
//! branch is unit-tested exhaustively.

use super::refusal::Refusal;
use super::status::{AttemptStatus, OrderStatus};

/// What a verified payment success does to an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuccessDecision {
    /// `pending_payment -> paid`, attempt succeeded, reservations consumed.
    Pay,
    /// The order was expired or cancelled: `-> paid_after_expiry`, attempt succeeded, alert.
    LatePayment,
    /// Another attempt already paid this order: record the second capture and alert.
    DuplicatePayment,
    /// This very attempt is already recorded as succeeded with this transaction (a retry, or
    /// close answered "paid" first).
    AlreadyApplied,
    /// This attempt is already recorded as succeeded, and the gateway reports another
    /// transaction on it: the money was taken twice. Record the second capture, alert, and
    /// refund it.
    SecondCapture,
}

/// `recorded_txn` is the transaction the attempt's success was recorded with, `txn` the one this
/// success names.
pub fn decide_success(
    order: OrderStatus,
    attempt: AttemptStatus,
    recorded_txn: Option<&str>,
    txn: Option<&str>,
) -> SuccessDecision {
    use OrderStatus::*;
    if attempt == AttemptStatus::Succeeded {
        return match (recorded_txn, txn) {
            (Some(recorded), Some(txn)) if recorded != txn => SuccessDecision::SecondCapture,
            _ => SuccessDecision::AlreadyApplied,
        };
    }
    match order {
        PendingPayment => SuccessDecision::Pay,
        Expired | Cancelled => SuccessDecision::LatePayment,
        Paid | Delivered | PaidAfterExpiry | Refunding | Refunded => SuccessDecision::DuplicatePayment,
    }
}

/// What happens to a payment that arrives after its order expired or was cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LatePolicy {
    /// Take the stock again if it is there (then `paid`), otherwise refund automatically.
    #[default]
    Reallocate,
    /// Always refund automatically.
    Refund,
    /// Hold in `paid_after_expiry` for an operator to accept or refund.
    Manual,
}

impl LatePolicy {
    pub fn parse(s: &str) -> Option<LatePolicy> {
        match s {
            "reallocate" => Some(LatePolicy::Reallocate),
            "refund" => Some(LatePolicy::Refund),
            "manual" => Some(LatePolicy::Manual),
            _ => None,
        }
    }
}

/// What a verified failure or buyer-cancel at the gateway does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureDecision {
    /// The attempt ends; the order stays `pending_payment` so the buyer can retry until the hold
    /// runs out.
    CloseAttempt(AttemptStatus),
    /// The attempt is no longer active (it succeeded, expired, …): a stale event changes nothing.
    Ignore,
}

pub fn decide_failure(attempt: AttemptStatus, outcome: AttemptStatus) -> FailureDecision {
    if attempt.is_active() && attempt.transition(outcome).is_ok() {
        FailureDecision::CloseAttempt(outcome)
    } else {
        FailureDecision::Ignore
    }
}

/// Whether the caller may see and act on an order: a buyer (`caller`: their session) their own
/// orders only, an operator (`None`) any. To anyone else the order does not exist.
pub fn may_act_on(caller: Option<&str>, order_session: &str) -> Result<(), Refusal> {
    match caller {
        Some(session) if session != order_session => Err(Refusal::not_found("order")),
        _ => Ok(()),
    }
}

/// Whether an order may be cancelled (by its buyer or an operator): only while it awaits payment.
pub fn may_cancel(order: OrderStatus) -> Result<(), Refusal> {
    if order == OrderStatus::PendingPayment {
        Ok(())
    } else {
        Err(Refusal::conflict("not_cancellable", format!("the order is {order}")))
    }
}

/// Whether a buyer may start a new payment attempt: the order awaits payment and still holds its
/// stock.
pub fn may_retry(order: OrderStatus, hold_expires_at_ms: i64, now_ms: i64) -> Result<(), Refusal> {
    if order != OrderStatus::PendingPayment {
        return Err(Refusal::conflict("not_payable", format!("the order is {order}"))
            .with_details(serde_json::json!({"status": order.as_str()})));
    }
    if hold_expires_at_ms <= now_ms {
        return Err(Refusal::conflict("order_expired", "the order's hold has run out"));
    }
    Ok(())
}

/// Whether the buyer is offered *Try again* on an attempt: the order still waits for its
/// payment, and that attempt ended without one.
pub fn offers_try_again(order: OrderStatus, attempt: AttemptStatus) -> bool {
    order == OrderStatus::PendingPayment && matches!(attempt, AttemptStatus::Failed | AttemptStatus::Cancelled)
}

/// Whether an operator may accept a late payment (take the stock again and fulfil the order).
pub fn may_accept_late(order: OrderStatus) -> Result<(), Refusal> {
    if order == OrderStatus::PaidAfterExpiry {
        Ok(())
    } else {
        Err(Refusal::conflict("not_late_payment", format!("the order is {order}")))
    }
}

/// Refusal when a late payment's stock could not be taken again.
pub fn late_stock_gone() -> Refusal {
    Refusal::conflict("out_of_stock", "the stock is no longer there; refund the payment instead")
}

/// A late payment's order whose promotion code has no use left for it (in all, or for its buyer).
pub fn late_promotion_gone() -> Refusal {
    Refusal::conflict(
        "promotion_used_up",
        "the order's promotion code has no use left for it; refund the payment instead",
    )
}

/// Whether an operator may mark an order shipped (`paid -> delivered`).
pub fn may_mark_shipped(order: OrderStatus) -> Result<(), Refusal> {
    if order == OrderStatus::Paid {
        Ok(())
    } else {
        Err(Refusal::conflict("not_deliverable", format!("the order is {order}, not paid")))
    }
}

/// Whether the sweeper may expire an order it has locked and re-read.
pub fn may_expire(order: OrderStatus, hold_expires_at_ms: i64, now_ms: i64) -> bool {
    order == OrderStatus::PendingPayment && hold_expires_at_ms <= now_ms
}

/// If the gateway cannot be reached to close an attempt, an order is expired anyway this long
/// after its hold ended. A payment that still slips through arrives as `paid_after_expiry`.
pub const CLOSE_GRACE_MS: i64 = 10 * 60 * 1000;

/// Whether an order whose attempt could not be closed at its gateway is expired anyway: only once
/// [`CLOSE_GRACE_MS`] has passed since its hold ended.
pub fn may_expire_unclosed(hold_expires_at_ms: i64, now_ms: i64) -> bool {
    now_ms >= hold_expires_at_ms.saturating_add(CLOSE_GRACE_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unclosed_order_waits_out_the_grace() {
        assert!(!may_expire_unclosed(1_000, 1_000));
        assert!(!may_expire_unclosed(1_000, 1_000 + CLOSE_GRACE_MS - 1));
        assert!(may_expire_unclosed(1_000, 1_000 + CLOSE_GRACE_MS));
    }

    #[test]
    fn a_buyer_acts_on_their_own_orders_and_an_operator_on_any() {
        assert!(may_act_on(None, "S-1").is_ok());
        assert!(may_act_on(Some("S-1"), "S-1").is_ok());
        let other = may_act_on(Some("S-2"), "S-1").unwrap_err();
        assert_eq!((other.code, other.message.as_str()), ("not_found", "order not found"));
    }

    #[test]
    fn success_decisions_cover_every_pair() {
        for order in OrderStatus::ALL {
            for attempt in AttemptStatus::ALL {
                let d = decide_success(*order, *attempt, Some("T1"), Some("T1"));
                if *attempt == AttemptStatus::Succeeded {
                    assert_eq!(d, SuccessDecision::AlreadyApplied);
                    let other = decide_success(*order, *attempt, Some("T1"), Some("T2"));
                    assert_eq!(other, SuccessDecision::SecondCapture, "another transaction on a paid attempt");
                    assert_eq!(decide_success(*order, *attempt, None, Some("T2")), SuccessDecision::AlreadyApplied);
                    continue;
                }
                assert_eq!(d, decide_success(*order, *attempt, None, Some("T2")), "only a succeeded attempt compares");
                match d {
                    SuccessDecision::Pay => {
                        assert_eq!(*order, OrderStatus::PendingPayment);
                        assert!(order.transition(OrderStatus::Paid).is_ok());
                    }
                    SuccessDecision::LatePayment => {
                        assert!(order.transition(OrderStatus::PaidAfterExpiry).is_ok());
                    }
                    SuccessDecision::DuplicatePayment => {
                        assert!(!matches!(
                            order,
                            OrderStatus::PendingPayment | OrderStatus::Expired | OrderStatus::Cancelled
                        ));
                    }
                    SuccessDecision::AlreadyApplied | SuccessDecision::SecondCapture => unreachable!("handled above"),
                }
                // Whatever the decision, the attempt itself may become succeeded.
                assert!(attempt.transition(AttemptStatus::Succeeded).is_ok());
            }
        }
    }

    #[test]
    fn failures_only_close_active_attempts() {
        use AttemptStatus::*;
        assert_eq!(decide_failure(Created, Failed), FailureDecision::CloseAttempt(Failed));
        assert_eq!(decide_failure(Unknown, Cancelled), FailureDecision::CloseAttempt(Cancelled));
        assert_eq!(decide_failure(Succeeded, Failed), FailureDecision::Ignore);
        assert_eq!(decide_failure(Expired, Failed), FailureDecision::Ignore);
    }

    #[test]
    fn only_pending_orders_may_be_cancelled() {
        for order in OrderStatus::ALL {
            match may_cancel(*order) {
                Ok(()) => {
                    assert_eq!(*order, OrderStatus::PendingPayment);
                    assert!(order.transition(OrderStatus::Cancelled).is_ok());
                }
                Err(r) => assert_eq!(r.code, "not_cancellable"),
            }
        }
    }

    #[test]
    fn retries_need_a_pending_order_that_still_holds_its_stock() {
        assert!(may_retry(OrderStatus::PendingPayment, 101, 100).is_ok());
        assert_eq!(may_retry(OrderStatus::PendingPayment, 100, 100).unwrap_err().code, "order_expired");
        assert_eq!(may_retry(OrderStatus::Paid, 101, 100).unwrap_err().code, "not_payable");
        assert!(may_accept_late(OrderStatus::PaidAfterExpiry).is_ok());
        assert_eq!(may_accept_late(OrderStatus::Paid).unwrap_err().code, "not_late_payment");
        assert!(may_mark_shipped(OrderStatus::Paid).is_ok());
        for order in OrderStatus::ALL.iter().filter(|o| **o != OrderStatus::Paid) {
            assert_eq!(may_mark_shipped(*order).unwrap_err().code, "not_deliverable");
        }
    }

    #[test]
    fn expiry_needs_pending_and_elapsed_hold() {
        assert!(may_expire(OrderStatus::PendingPayment, 100, 100));
        assert!(!may_expire(OrderStatus::PendingPayment, 101, 100));
        assert!(!may_expire(OrderStatus::Paid, 0, 100));
    }
}

//! The contract between gateways and the core: what a gateway said happened, once its signature
//! has been verified, and what it answered when asked (query, close, refund). Adapters produce
//! these; the core decides what they do to an order.

use super::Money;

/// What a gateway said happened to one attempt, after its signature was verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Succeeded {
        gateway_txn_id: String,
        amount: Money,
    },
    Failed,
    Cancelled,
    /// Verified, but nothing happened yet (Alipay `WAIT_BUYER_PAY`, a Stripe delayed payment).
    Pending,
    /// A refund of this attempt went through (`refund_no` is ours). Some gateways do not say how
    /// much in the notification (Alipay); when they do, it must match.
    RefundSucceeded {
        refund_no: String,
        amount: Option<Money>,
    },
    RefundFailed {
        refund_no: String,
    },
}

/// A verified gateway event, ready to be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedEvent {
    pub gateway: String,
    /// The gateway's own event id; unique per gateway (I6).
    pub event_id: String,
    pub attempt_ref: String,
    pub outcome: Outcome,
    pub raw_body: Vec<u8>,
}

/// What an event is whose gateway and event id are claimed already, by the attempt that claimed
/// them: the same event again (a gateway's retry, acknowledged and dropped), or the id reused for
/// another attempt. A gateway names each of its events once, so a reuse is never a copy: the event
/// is weighed on its own, under a key of its id and attempt, and the operator is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    Again,
    Reused { key: String },
}

/// See [`Claimed`]; `claimed_by` is the claiming notification's attempt.
pub fn on_claimed(event_id: &str, attempt_ref: &str, claimed_by: Option<&str>) -> Claimed {
    if claimed_by == Some(attempt_ref) {
        Claimed::Again
    } else {
        Claimed::Reused { key: format!("{event_id}@{attempt_ref}") }
    }
}

/// A verified event whose content does not match kassa's records: refused and alerted, never
/// applied (a gateway never pays other than what was asked; a mismatch is a forged or mis-sent
/// notification, or a bug).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    pub code: &'static str,
    pub reason: String,
}

/// A payment reported for an attempt that asked for `asked`: the same currency and amount.
pub fn check_payment(paid: Money, asked: Money) -> Result<(), Mismatch> {
    if paid.currency() != asked.currency() {
        let reason = format!("currency {} but attempt is in {}", paid.currency(), asked.currency());
        return Err(Mismatch { code: "currency_mismatch", reason });
    }
    if paid.amount_minor() != asked.amount_minor() {
        let reason = format!("amount {} but attempt is {}", paid.amount_minor(), asked.amount_minor());
        return Err(Mismatch { code: "amount_mismatch", reason });
    }
    Ok(())
}

/// A refund reported done: where the gateway says how much (`reported`), it is what was asked.
pub fn check_refund(refund_no: &str, reported: Option<Money>, asked: Money) -> Result<(), Mismatch> {
    match reported {
        Some(amount) if amount != asked => Err(Mismatch {
            code: "amount_mismatch",
            reason: format!("refund {refund_no} reported as {}", amount.display_major()),
        }),
        _ => Ok(()),
    }
}

/// What an active query says about an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentState {
    /// Paid (possibly refunded since): the event to apply, with a stable id per payment so
    /// repeated queries de-duplicate.
    Paid(VerifiedEvent),
    /// Not paid yet, and still payable at the gateway.
    Pending,
    /// Closed or expired at the gateway: it will never be paid.
    Closed,
    /// The payment failed at the gateway.
    Failed,
    /// The gateway has no such payment (e.g. an Alipay page pay nobody opened).
    NotFound,
}

/// What a refund query says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundState {
    Succeeded,
    Processing,
    Failed { reason: String },
    NotFound,
}

/// What closing an attempt at its gateway found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseOutcome {
    /// The gateway will not take a payment for this attempt any more.
    Closed,
    /// Too late: the buyer paid. The caller applies it as a verified success.
    AlreadyPaid(VerifiedEvent),
    /// The gateway never saw the attempt; nothing can be paid.
    NotFound,
}

/// What a gateway answered a refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundAnswer {
    /// Taken; the result follows by notification (or query).
    Accepted { gateway_refund_id: String },
    /// Done synchronously.
    Succeeded { gateway_refund_id: String },
    /// Refused for good (e.g. more than was paid, refund window over).
    Rejected { reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_reused_for_another_attempt_is_not_a_copy() {
        assert_eq!(on_claimed("evt_1", "A-1", Some("A-1")), Claimed::Again);
        assert_eq!(on_claimed("evt_1", "B-1", Some("A-1")), Claimed::Reused { key: "evt_1@B-1".into() });
        assert_eq!(on_claimed("evt_1", "B-1", None), Claimed::Reused { key: "evt_1@B-1".into() });
    }

    #[test]
    fn a_payment_or_refund_other_than_asked_is_a_mismatch() {
        let cny = |minor| Money::new(minor, super::super::Currency::parse("CNY").unwrap()).unwrap();
        let usd = Money::new(100, super::super::Currency::parse("USD").unwrap()).unwrap();
        assert!(check_payment(cny(100), cny(100)).is_ok());
        assert_eq!(check_payment(cny(99), cny(100)).unwrap_err().code, "amount_mismatch");
        assert_eq!(check_payment(usd, cny(100)).unwrap_err().code, "currency_mismatch");
        assert!(check_refund("R1", None, cny(100)).is_ok());
        assert!(check_refund("R1", Some(cny(100)), cny(100)).is_ok());
        assert_eq!(check_refund("R1", Some(usd), cny(100)).unwrap_err().code, "amount_mismatch");
    }
}

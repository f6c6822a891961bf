//! The contract between gateways and the core: what a gateway said happened, once its signature
//! has been verified. Adapters produce these; the core decides what they do to an order.

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

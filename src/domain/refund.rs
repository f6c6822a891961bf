//! Refunds as facts of their own. An order keeps its status through a partial refund (the capture
//! stays; what was refunded grows beside it); it moves to `refunding` only when refunds in flight
//! cover everything captured, and to `refunded` only when they all went through. Which messages
//! a status change sends to the shop is decided here too, so a refund never re-sends a payment or
//! a fulfilment request.

use super::status::OrderStatus;

/// What the order's refunds add up to, read under the order's lock. Refunds of a second capture
/// (a duplicate payment) are not the order's and are left out by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefundTotals {
    /// What the order's payment captured.
    pub captured: i64,
    /// Refunds not failed: requested, processing or succeeded.
    pub committed: i64,
    /// Refunds that went through.
    pub succeeded: i64,
    /// Refunds still requested or processing.
    pub open: i64,
}

/// Why a refund request is refused (nothing is stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundRefusal {
    /// The order is in a status that has no capture to refund.
    NotRefundable,
    /// The amount is zero or negative.
    InvalidAmount,
    /// The refunds would add up to more than was captured.
    ExceedsCaptured { total: i64 },
    /// The sum does not fit in 64 bits.
    Overflow,
}

/// Whether an order in `status` holds a capture a merchant may refund.
pub fn refundable(status: OrderStatus) -> bool {
    use OrderStatus::*;
    matches!(status, Paid | Delivered | Refunding | PaidAfterExpiry)
}

/// A new refund of `amount` on an order in `status`: refused, or accepted with the order's new
/// status (`refunding` when the refunds in flight now cover the whole capture).
pub fn decide_request(
    status: OrderStatus,
    totals: RefundTotals,
    amount: i64,
) -> Result<Option<OrderStatus>, RefundRefusal> {
    if !refundable(status) {
        return Err(RefundRefusal::NotRefundable);
    }
    if amount <= 0 {
        return Err(RefundRefusal::InvalidAmount);
    }
    let total = totals.committed.checked_add(amount).ok_or(RefundRefusal::Overflow)?;
    if total > totals.captured {
        return Err(RefundRefusal::ExceedsCaptured { total });
    }
    Ok((total == totals.captured && status != OrderStatus::Refunding).then_some(OrderStatus::Refunding))
}

/// After a refund settled (the totals include it): the order's new status, if it changes. A
/// `refunding` order becomes `refunded` once every refund went through and they cover the
/// capture; when a failure leaves part of the capture unrefunded it goes back to where it was
/// (`back`). An order not in `refunding` keeps its status.
pub fn decide_settled(status: OrderStatus, back: OrderStatus, totals: RefundTotals) -> Option<OrderStatus> {
    if status != OrderStatus::Refunding {
        return None;
    }
    if totals.committed < totals.captured {
        return Some(back);
    }
    (totals.open == 0 && totals.succeeded >= totals.captured).then_some(OrderStatus::Refunded)
}

/// The messages a status change sends to the shop's systems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusMessages {
    /// `order.<to>`.
    pub status: bool,
    /// `fulfilment.requested` (physical goods to ship).
    pub fulfilment: bool,
}

/// An order is paid once: `order.paid` and `fulfilment.requested` go out when it first becomes
/// paid, never when it returns to `paid` or `delivered` after a refund that did not cover it all.
pub fn status_messages(from: OrderStatus, to: OrderStatus) -> StatusMessages {
    use OrderStatus::*;
    let returning = from == Refunding && matches!(to, Paid | Delivered | PaidAfterExpiry);
    StatusMessages { status: !returning, fulfilment: to == Paid && matches!(from, PendingPayment | PaidAfterExpiry) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OrderStatus::*;

    fn totals(captured: i64, committed: i64, succeeded: i64, open: i64) -> RefundTotals {
        RefundTotals { captured, committed, succeeded, open }
    }

    #[test]
    fn a_partial_refund_keeps_the_status_and_a_full_one_starts_refunding() {
        assert_eq!(decide_request(Paid, totals(1000, 0, 0, 0), 300), Ok(None));
        assert_eq!(decide_request(Delivered, totals(1000, 300, 300, 0), 700), Ok(Some(Refunding)));
        assert_eq!(decide_request(PaidAfterExpiry, totals(500, 0, 0, 0), 500), Ok(Some(Refunding)));
        assert_eq!(
            decide_request(Paid, totals(1000, 300, 0, 1), 701),
            Err(RefundRefusal::ExceedsCaptured { total: 1001 })
        );
        assert_eq!(
            decide_request(Refunding, totals(1000, 1000, 0, 1), 1),
            Err(RefundRefusal::ExceedsCaptured { total: 1001 })
        );
        assert_eq!(decide_request(Paid, totals(1000, 0, 0, 0), 0), Err(RefundRefusal::InvalidAmount));
        assert_eq!(decide_request(Paid, totals(1000, i64::MAX, 0, 0), 1), Err(RefundRefusal::Overflow));
        for status in [PendingPayment, Expired, Cancelled, Refunded] {
            assert_eq!(decide_request(status, totals(1000, 0, 0, 0), 1), Err(RefundRefusal::NotRefundable));
        }
    }

    #[test]
    fn every_accepted_request_is_a_legal_transition() {
        for status in OrderStatus::ALL {
            for (committed, amount) in [(0, 1), (0, 1000), (999, 1), (500, 200)] {
                if let Ok(Some(to)) = decide_request(*status, totals(1000, committed, 0, 0), amount) {
                    assert!(status.transition(to).is_ok(), "{status} -> {to}");
                }
            }
        }
    }

    #[test]
    fn settling_moves_only_a_refunding_order() {
        assert_eq!(decide_settled(Paid, Paid, totals(1000, 300, 300, 0)), None);
        assert_eq!(decide_settled(Refunding, Paid, totals(1000, 1000, 600, 1)), None, "one still in flight");
        assert_eq!(decide_settled(Refunding, Paid, totals(1000, 1000, 1000, 0)), Some(Refunded));
        assert_eq!(decide_settled(Refunding, Delivered, totals(1000, 700, 700, 0)), Some(Delivered));
        assert_eq!(decide_settled(Refunding, Paid, totals(1000, 700, 0, 1)), Some(Paid), "a failure reopens it");
        assert_eq!(decide_settled(Refunding, PaidAfterExpiry, totals(500, 0, 0, 0)), Some(PaidAfterExpiry));
        for back in [Paid, Delivered, PaidAfterExpiry] {
            for t in [totals(1000, 1000, 1000, 0), totals(1000, 10, 10, 0)] {
                if let Some(to) = decide_settled(Refunding, back, t) {
                    assert!(Refunding.transition(to).is_ok(), "refunding -> {to}");
                }
            }
        }
    }

    #[test]
    fn payment_and_fulfilment_messages_go_out_once() {
        let first = status_messages(PendingPayment, Paid);
        assert_eq!(first, StatusMessages { status: true, fulfilment: true });
        assert_eq!(status_messages(PaidAfterExpiry, Paid), StatusMessages { status: true, fulfilment: true });
        for to in [Paid, Delivered, PaidAfterExpiry] {
            assert_eq!(status_messages(Refunding, to), StatusMessages { status: false, fulfilment: false });
        }
        assert_eq!(status_messages(Paid, Refunding), StatusMessages { status: true, fulfilment: false });
        assert_eq!(status_messages(Refunding, Refunded), StatusMessages { status: true, fulfilment: false });
        assert_eq!(status_messages(Paid, Delivered), StatusMessages { status: true, fulfilment: false });
    }
}

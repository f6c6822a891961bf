//! A refund in the model: asked for, answered by the gateway at once, and what it does to the
//! order.

use kassa::clock::Clock as _;
use kassa::domain::ids::RefundNo;
use kassa::store::refunds;
use proptest::test_runner::TestCaseError;

use super::{Model, Real, fail};

/// A refund of `amount` asked for order `i` under `refund_no`, the gateway answering at once
/// (`succeed`); answers whether it was made.
pub(super) async fn refund(
    real: &Real,
    model: &mut Model,
    i: usize,
    refund_no: RefundNo,
    amount: i64,
    succeed: bool,
) -> Result<bool, TestCaseError> {
    let (db, now) = (&real.db, real.clock.now_ms());
    let o = model.orders[i].clone();
    let result = refunds::request(db, Default::default(), &o.order_no, &refund_no, amount, "model", now).await;
    let refundable = matches!(o.status, "paid" | "delivered" | "paid_after_expiry");
    if amount <= 0 {
        match result {
            Err(e) if e.code() == "invalid_amount" => Ok(false),
            other => Err(fail(format!("refund of {amount}: {other:?}"))),
        }
    } else if refundable && o.refunded + amount <= o.captured {
        result.map_err(|e| fail(format!("refund: {e}")))?;
        refunds::settle(db, &refund_no, succeed, "refused", None, now).await.map_err(|e| fail(e.to_string()))?;
        let o = &mut model.orders[i];
        o.refunds.push((refund_no, amount, succeed));
        if succeed {
            o.refunded += amount;
        }
        // A partial refund keeps the status; refunded once everything captured went back.
        if o.refunded == o.captured {
            o.status = "refunded";
        }
        Ok(true)
    } else {
        match result {
            Err(e) if ["refund_exceeds_captured", "not_refundable"].contains(&e.code()) => Ok(false),
            other => {
                Err(fail(format!("refund of {amount} on {} ({}/{}): {other:?}", o.status, o.refunded, o.captured)))
            }
        }
    }
}

//! Expiry: the stock of unpaid orders whose hold has elapsed goes back on sale. Each due order's
//! attempt is first closed at its gateway (outside any transaction), then the order is expired
//! under its row lock, its state re-checked. A success that wins the race makes the order paid,
//! and it is skipped.

use super::Context;
use super::payment::{Closed, close_attempt};
use crate::domain::decide::may_expire_unclosed;
use crate::domain::ids::AttemptKey;
use crate::error::Result;
use crate::store::expiry::{self, Expiry};
use crate::store::payments::Applied;

/// Orders handled per pass: bounds the work (and gateway calls) of one pass.
pub const SWEEP_BATCH_MAX: i64 = 200;
/// How long a claimed order is reserved for this instance. Longer than one pass takes; if the
/// instance dies, another one picks the order up when the lease runs out.
pub const SWEEP_LEASE_MS: i64 = 30_000;

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub examined: usize,
    pub expired: usize,
    /// Close answered "already paid" and the payment was applied.
    pub paid_on_close: usize,
    /// Re-checked under lock and no longer due (e.g. paid meanwhile).
    pub skipped: usize,
    /// Gateway unreachable and still within the grace period.
    pub deferred: usize,
}

/// Expires the due orders, at most [`SWEEP_BATCH_MAX`].
pub async fn sweep(cx: &Context) -> Result<SweepReport> {
    let now = cx.now_ms();
    let due = expiry::claim_due_orders(&cx.db, now, SWEEP_LEASE_MS, SWEEP_BATCH_MAX).await?;
    let mut report = SweepReport { examined: due.len(), ..Default::default() };
    for order in due {
        if let (Some(attempt_ref), Some(gateway)) = (&order.attempt_ref, order.gateway.as_deref()) {
            let key = AttemptKey::new(attempt_ref, order.gateway_ref.as_deref());
            match close_attempt(cx, gateway, &key).await? {
                Closed::Closed => {}
                Closed::Paid(applied) => {
                    if matches!(applied, Applied::Changed { .. }) {
                        report.paid_on_close += 1;
                    } else {
                        report.skipped += 1;
                    }
                    continue;
                }
                Closed::Failed(e) if !may_expire_unclosed(order.hold_expires_at, now) => {
                    tracing::warn!(order_no = %order.order_no, %attempt_ref, error = %e, "close failed; expiry deferred");
                    report.deferred += 1;
                    continue;
                }
                Closed::Failed(e) => {
                    tracing::warn!(order_no = %order.order_no, %attempt_ref, error = %e, "close failed past the grace; expiring anyway");
                }
            }
        }
        match expiry::expire_order(&cx.db, &order.order_no, cx.now_ms()).await? {
            Expiry::Expired => {
                tracing::info!(order_no = %order.order_no, "order expired; stock released");
                report.expired += 1;
            }
            Expiry::Skipped(_) => report.skipped += 1,
        }
    }
    Ok(report)
}

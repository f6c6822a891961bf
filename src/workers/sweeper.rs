//! The expiry sweeper: releases the stock of unpaid orders whose hold has elapsed. For each due
//! order it first closes the attempt at the gateway (outside any transaction), then expires the
//! order under its row lock, re-checking state. A success that wins the race makes the order paid,
//! and the sweeper skips it.

use crate::clock::{Millis, SharedClock};
use crate::domain::decide::LatePolicy;
use crate::error::Result;
use crate::gateway::{CloseOutcome, Gateways};
use crate::store::Db;
use crate::store::expiry::{self, Expiry};
use crate::store::payments::{self, Applied};

/// Orders handled per step: bounds the work (and gateway calls) of one pass.
pub const SWEEP_BATCH_MAX: i64 = 200;
/// How long a claimed order is reserved for this instance's sweeper. Longer than one step takes;
/// if the instance dies, another one picks the order up when the lease runs out.
pub const SWEEP_LEASE_MS: Millis = 30_000;
/// If the gateway cannot be reached to close an attempt, the order is expired anyway this long
/// after its hold ended. A payment that still slips through arrives as `paid_after_expiry`.
pub const CLOSE_GRACE_MS: Millis = 10 * 60 * 1000;

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

pub struct Sweeper {
    pub db: Db,
    pub late_policy: LatePolicy,
    pub gateways: Gateways,
    pub clock: SharedClock,
}

impl Sweeper {
    pub async fn step(&self) -> Result<SweepReport> {
        let now = self.clock.now_ms();
        let due = expiry::claim_due_orders(&self.db, now, SWEEP_LEASE_MS, SWEEP_BATCH_MAX).await?;
        let mut report = SweepReport { examined: due.len(), ..Default::default() };
        for order in due {
            if let (Some(attempt_ref), Some(gateway)) =
                (&order.attempt_ref, order.gateway.as_deref().and_then(|g| self.gateways.get(g)))
            {
                let key = crate::gateway::AttemptKey::new(attempt_ref, order.gateway_ref.as_deref());
                match gateway.close(&key).await {
                    Ok(CloseOutcome::Closed | CloseOutcome::NotFound) => {}
                    Ok(CloseOutcome::AlreadyPaid(event)) => {
                        let applied =
                            payments::apply_event(&self.db, &event, self.late_policy, self.clock.now_ms()).await?;
                        if matches!(applied, Applied::Changed { .. }) {
                            report.paid_on_close += 1;
                        } else {
                            report.skipped += 1;
                        }
                        continue;
                    }
                    Err(e) if now < order.hold_expires_at.saturating_add(CLOSE_GRACE_MS) => {
                        tracing::warn!(order_no = %order.order_no, %attempt_ref, error = %e, "close failed; expiry deferred");
                        report.deferred += 1;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(order_no = %order.order_no, %attempt_ref, error = %e, "close failed past the grace; expiring anyway");
                    }
                }
            }
            match expiry::expire_order(&self.db, &order.order_no, self.clock.now_ms()).await? {
                Expiry::Expired => {
                    tracing::info!(order_no = %order.order_no, "order expired; stock released");
                    report.expired += 1;
                }
                Expiry::Skipped(_) => report.skipped += 1,
            }
        }
        Ok(report)
    }
}

//! The refund sender: refunds are requested in a transaction and sent to the gateway here, outside
//! any transaction. A refund survives a crash between the two: it stays `requested` and is sent
//! (again, with the same refund number, which the gateway de-duplicates) by the next step.

use crate::clock::SharedClock;
use crate::error::Result;
use crate::gateway::{Gateways, RefundAnswer, RefundRequest};
use crate::store::Db;
use crate::store::refunds::{self, Outgoing};

/// Refunds sent per step.
pub const REFUND_BATCH_MAX: i64 = 50;
/// How long a claimed refund is reserved for this instance.
const REFUND_LEASE_MS: i64 = 30_000;

pub struct Refunder {
    pub db: Db,
    pub gateways: Gateways,
    pub clock: SharedClock,
}

impl Refunder {
    /// Sends every due refund; returns how many were sent.
    pub async fn step(&self) -> Result<usize> {
        let due = refunds::claim(&self.db, None, self.clock.now_ms(), REFUND_LEASE_MS, REFUND_BATCH_MAX).await?;
        let n = due.len();
        for refund in due {
            self.send(refund).await?;
        }
        Ok(n)
    }

    /// Sends one refund right after it was requested (the worker catches it if this fails).
    pub async fn send_now(&self, refund_no: &str) -> Result<()> {
        for refund in refunds::claim(&self.db, Some(refund_no), self.clock.now_ms(), REFUND_LEASE_MS, 1).await? {
            self.send(refund).await?;
        }
        Ok(())
    }

    async fn send(&self, refund: Outgoing) -> Result<()> {
        let now = self.clock.now_ms();
        let Some(gateway) = self.gateways.get(&refund.gateway) else {
            let why = format!("gateway {} is not configured", refund.gateway);
            return refunds::retry_later(&self.db, &refund.refund_no, refund.tries + 1, now + 60_000, &why, now).await;
        };
        let req = request_of(&refund);
        match gateway.refund(&req).await {
            Ok(RefundAnswer::Accepted { gateway_refund_id }) => {
                refunds::mark_processing(&self.db, &refund.refund_no, &gateway_refund_id, self.clock.now_ms()).await
            }
            Ok(RefundAnswer::Succeeded { gateway_refund_id }) => {
                refunds::mark_processing(&self.db, &refund.refund_no, &gateway_refund_id, self.clock.now_ms()).await?;
                refunds::settle(&self.db, &refund.refund_no, true, "", None, self.clock.now_ms()).await.map(|_| ())
            }
            Ok(RefundAnswer::Rejected { reason }) => {
                tracing::warn!(refund_no = %refund.refund_no, order_no = %refund.order_no, %reason, "refund refused by the gateway");
                refunds::settle(&self.db, &refund.refund_no, false, &reason, None, self.clock.now_ms())
                    .await
                    .map(|_| ())
            }
            Err(e) => {
                let tries = refund.tries + 1;
                let next_at = now.saturating_add(super::retry_backoff_ms(tries));
                tracing::warn!(refund_no = %refund.refund_no, error = %e, tries, "refund not sent; will retry");
                refunds::retry_later(&self.db, &refund.refund_no, tries, next_at, &e.to_string(), now).await
            }
        }
    }
}

/// What the gateway is asked for a refund kassa recorded.
pub fn request_of(refund: &Outgoing) -> RefundRequest {
    RefundRequest {
        attempt_ref: refund.attempt_ref.clone(),
        refund_no: refund.refund_no.clone(),
        amount: refund.amount,
        reason: refund.reason.clone(),
        captured: refund.captured,
        gateway_txn_id: refund.gateway_txn_id.clone(),
        second_capture: refund.second_capture,
    }
}

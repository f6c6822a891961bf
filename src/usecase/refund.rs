//! Refunds: requested in a transaction, sent to the gateway outside any transaction. A refund
//! survives a crash between the two: it stays `requested` and is sent again (with the same refund
//! number, which the gateway de-duplicates) by the refund worker's next pass.

use super::Context;
use crate::domain::ids::{OrderNo, RefundNo};
use crate::domain::retry::retry_backoff_ms;
use crate::error::Result;
use crate::gateway::{RefundAnswer, RefundRequest};
use crate::store::refunds::{self, Outgoing, RefundAsk, RefundView};

/// Refunds sent per pass of the worker.
pub const REFUND_BATCH_MAX: i64 = 50;
/// How long a claimed refund is reserved for this instance.
const REFUND_LEASE_MS: i64 = 30_000;
/// How long a refund whose gateway is not configured waits before it is tried again.
const UNCONFIGURED_RETRY_MS: i64 = 60_000;

/// Requests a refund and sends it right away, outside the transaction (the refund worker catches
/// it if that fails). Returns the refund and whether this call created it.
pub async fn request(
    cx: &Context,
    order_no: &OrderNo,
    refund_no: &RefundNo,
    amount_minor: i64,
    reason: &str,
) -> Result<(RefundView, bool)> {
    let (refund, created) =
        refunds::request(&cx.db, cx.refund_policy, order_no, refund_no, amount_minor, reason, cx.now_ms()).await?;
    if created && let Err(e) = send_now(cx, refund_no).await {
        tracing::warn!(refund_no = %refund.refund_no, error = %e, "refund send deferred to the worker");
    }
    Ok((refunds::get(&cx.db, refund_no).await?, created))
}

/// [`request`] of an amount or of units of lines, and whether a full refund gives the order's
/// promotion use back ([`RefundAsk`]).
pub async fn request_asked(
    cx: &Context,
    order_no: &OrderNo,
    refund_no: &RefundNo,
    ask: &RefundAsk,
) -> Result<(RefundView, bool)> {
    let (refund, created) =
        refunds::request_asked(&cx.db, cx.refund_policy, order_no, refund_no, ask, cx.now_ms()).await?;
    if created && let Err(e) = send_now(cx, refund_no).await {
        tracing::warn!(refund_no = %refund.refund_no, error = %e, "refund send deferred to the worker");
    }
    Ok((refunds::get(&cx.db, refund_no).await?, created))
}

/// Sends one refund right after it was requested (the worker catches it if this fails).
pub async fn send_now(cx: &Context, refund_no: &RefundNo) -> Result<()> {
    for refund in refunds::claim(&cx.db, Some(refund_no), cx.now_ms(), REFUND_LEASE_MS, 1).await? {
        send(cx, refund).await?;
    }
    Ok(())
}

/// Sends every due refund, at most [`REFUND_BATCH_MAX`]; returns how many were sent.
pub async fn send_due(cx: &Context) -> Result<usize> {
    let due = refunds::claim(&cx.db, None, cx.now_ms(), REFUND_LEASE_MS, REFUND_BATCH_MAX).await?;
    let n = due.len();
    for refund in due {
        send(cx, refund).await?;
    }
    Ok(n)
}

async fn send(cx: &Context, refund: Outgoing) -> Result<()> {
    let now = cx.now_ms();
    let Some(gateway) = cx.gateways.get(&refund.gateway) else {
        let why = format!("gateway {} is not configured", refund.gateway);
        let next_at = now.saturating_add(UNCONFIGURED_RETRY_MS);
        return refunds::retry_later(&cx.db, &refund.refund_no, refund.tries + 1, next_at, &why, now).await;
    };
    match gateway.refund(&request_of(&refund)).await {
        Ok(RefundAnswer::Accepted { gateway_refund_id }) => {
            refunds::mark_processing(&cx.db, &refund.refund_no, &gateway_refund_id, cx.now_ms()).await
        }
        Ok(RefundAnswer::Succeeded { gateway_refund_id }) => {
            refunds::mark_processing(&cx.db, &refund.refund_no, &gateway_refund_id, cx.now_ms()).await?;
            refunds::settle(&cx.db, &refund.refund_no, true, "", None, cx.now_ms()).await.map(|_| ())
        }
        Ok(RefundAnswer::Rejected { reason }) => {
            tracing::warn!(refund_no = %refund.refund_no, order_no = %refund.order_no, %reason, "refund refused by the gateway");
            refunds::settle(&cx.db, &refund.refund_no, false, &reason, None, cx.now_ms()).await.map(|_| ())
        }
        Err(e) => {
            let tries = refund.tries + 1;
            let next_at = now.saturating_add(retry_backoff_ms(tries));
            tracing::warn!(refund_no = %refund.refund_no, error = %e, tries, "refund not sent; will retry");
            refunds::retry_later(&cx.db, &refund.refund_no, tries, next_at, &e.to_string(), now).await
        }
    }
}

/// What the gateway is asked for a refund kassa recorded.
pub fn request_of(refund: &Outgoing) -> RefundRequest {
    RefundRequest {
        attempt_ref: refund.attempt_ref.to_string(),
        refund_no: refund.refund_no.to_string(),
        amount: refund.amount,
        reason: refund.reason.clone(),
        captured: refund.captured,
        gateway_txn_id: refund.gateway_txn_id.clone(),
        second_capture: refund.second_capture,
    }
}

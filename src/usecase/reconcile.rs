//! Active query and reconciliation. Notifications are not guaranteed (WeChat says so outright), so
//! kassa asks the gateway itself about attempts with no notification after a while, attempts in
//! `unknown`, late payments and refunds still processing, and brings each to its true state
//! through the same code paths a notification takes. Every difference is recorded and alerted.
//! Remote calls happen outside transactions; each result is applied in its own.

use serde::Serialize;

use super::Context;
use crate::clock::Millis;
use crate::domain::event::{Outcome, VerifiedEvent};
use crate::error::Result;
use crate::gateway::{AttemptKey, Gateway, PaymentState, RefundAnswer, RefundQuery, RefundRequest, RefundState};
use crate::store::events::Severity;
use crate::store::payments::Applied;
use crate::store::reconcile::{self, AttemptToQuery, Due, Finding, RefundToQuery};
use crate::store::refunds;

/// Rows handled per claim.
pub const RECONCILE_BATCH_MAX: i64 = 100;
/// Rows a forced (command line) pass takes at most.
pub const FORCED_PASS_MAX: i64 = 10_000;
/// How long a claimed row is reserved for this instance.
const LEASE_MS: Millis = 60_000;
/// Longest wait between two queries of the same row.
const BACKOFF_MAX_MS: Millis = 3_600_000;

#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct ReconcileReport {
    pub attempts_queried: usize,
    pub refunds_queried: usize,
    /// Payments found at the gateway and applied (their notification never came).
    pub payments_applied: usize,
    /// Attempts the gateway had closed or failed, closed here too.
    pub attempts_closed: usize,
    pub refunds_settled: usize,
    pub refunds_resent: usize,
    /// Still open at the gateway: asked again later.
    pub unchanged: usize,
    /// Gateway unreachable or unconfigured: asked again later.
    pub errors: usize,
    pub findings: Vec<Finding>,
}

/// The reconciliation of one instance: its context, and how long an attempt is left to its
/// notification before it is queried.
pub struct Reconciler {
    pub cx: Context,
    /// Attempts younger than this are left to their notification.
    pub after_ms: Millis,
}

/// Wait before the next query: the threshold, doubled per try, capped at an hour.
fn backoff(after_ms: Millis, tries: i64) -> Millis {
    crate::domain::retry::doubling_backoff_ms(after_ms, tries, BACKOFF_MAX_MS)
}

impl Reconciler {
    /// One pass over what is due. With `force` the backoff is ignored (the `kassa reconcile`
    /// command), so everything that qualifies is queried now.
    pub async fn pass(&self, force: bool) -> Result<ReconcileReport> {
        let mut report = ReconcileReport::default();
        let now = self.cx.clock.now_ms();
        let due = Due {
            now,
            due_at: if force { Millis::MAX } else { now },
            created_before: now.saturating_sub(self.after_ms),
            lease_until: now.saturating_add(LEASE_MS),
            limit: if force { FORCED_PASS_MAX } else { RECONCILE_BATCH_MAX },
        };
        for a in reconcile::claim_attempts(&self.cx.db, due).await? {
            report.attempts_queried += 1;
            self.attempt(&a, &mut report).await?;
        }
        for r in reconcile::claim_refunds(&self.cx.db, due).await? {
            report.refunds_queried += 1;
            self.refund(&r, &mut report).await?;
        }
        if !report.findings.is_empty() || report.errors > 0 {
            tracing::info!(?report, "reconciliation pass");
        }
        Ok(report)
    }

    async fn finding(&self, f: Finding, severity: Severity, report: &mut ReconcileReport) -> Result<()> {
        reconcile::record_finding(&self.cx.db, &f, severity, self.cx.clock.now_ms()).await?;
        metrics::counter!("kassa_reconcile_findings_total", "kind" => f.kind).increment(1);
        report.findings.push(f);
        Ok(())
    }

    fn gateway(&self, name: &str) -> Option<&std::sync::Arc<dyn Gateway>> {
        self.cx.gateways.get(name)
    }

    async fn later_attempt(&self, a: &AttemptToQuery) -> Result<()> {
        let tries = a.tries + 1;
        reconcile::reschedule_attempt(
            &self.cx.db,
            &a.attempt_ref,
            tries,
            self.cx.clock.now_ms() + backoff(self.after_ms, tries),
        )
        .await
    }

    async fn attempt(&self, a: &AttemptToQuery, report: &mut ReconcileReport) -> Result<()> {
        let Some(gateway) = self.gateway(&a.gateway) else {
            report.errors += 1;
            return self.later_attempt(a).await;
        };
        let key = AttemptKey::new(&a.attempt_ref, a.gateway_ref.as_deref());
        let state = match gateway.query(&key).await {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(attempt_ref = %a.attempt_ref, error = %e, "reconcile query failed");
                report.errors += 1;
                return self.later_attempt(a).await;
            }
        };
        let finding = |kind: &'static str, theirs: &str, action: &str| Finding {
            kind,
            gateway: a.gateway.clone(),
            order_no: a.order_no.to_string(),
            attempt_ref: a.attempt_ref.to_string(),
            refund_no: None,
            ours: format!("order {}, attempt {}", a.order_status, a.status),
            theirs: theirs.to_string(),
            action: action.to_string(),
        };
        let late = a.order_status == crate::domain::OrderStatus::PaidAfterExpiry;
        match state {
            PaymentState::Paid(_) if late => {
                // The late payment is real: nothing to change; never asked again.
                reconcile::reschedule_attempt(&self.cx.db, &a.attempt_ref, a.tries + 1, Millis::MAX).await?;
                report.unchanged += 1;
            }
            PaymentState::Paid(event) => {
                let applied = super::payment::apply_verified(&self.cx, &event).await?;
                let action = match &applied {
                    Applied::Changed { effect, .. } => format!("payment applied ({effect})"),
                    Applied::Rejected { code, reason } => format!("payment refused: {code}: {reason}"),
                    Applied::Ignored { .. } | Applied::Duplicate => "already known".to_string(),
                };
                if matches!(applied, Applied::Changed { .. }) {
                    report.payments_applied += 1;
                }
                let severity =
                    if matches!(applied, Applied::Rejected { .. }) { Severity::Critical } else { Severity::Warning };
                self.finding(finding("missed_payment_notification", "paid", &action), severity, report).await?;
                reconcile::reschedule_attempt(&self.cx.db, &a.attempt_ref, a.tries + 1, Millis::MAX).await?;
            }
            other if late => {
                let theirs = format!("{other:?}").to_lowercase();
                let f = finding("late_payment_not_confirmed", &theirs, "left for the operator; asked again later");
                self.finding(f, Severity::Critical, report).await?;
                self.later_attempt(a).await?;
            }
            PaymentState::Pending => {
                report.unchanged += 1;
                self.later_attempt(a).await?;
            }
            PaymentState::NotFound if a.status != crate::domain::AttemptStatus::Unknown => {
                // Normal for a page pay nobody opened; the hold's expiry takes care of it.
                report.unchanged += 1;
                self.later_attempt(a).await?;
            }
            state @ (PaymentState::Closed | PaymentState::Failed | PaymentState::NotFound) => {
                let (outcome, theirs) = match state {
                    PaymentState::Failed => (Outcome::Failed, "failed"),
                    PaymentState::NotFound => (Outcome::Cancelled, "no such payment"),
                    _ => (Outcome::Cancelled, "closed"),
                };
                let event = VerifiedEvent {
                    gateway: a.gateway.clone(),
                    event_id: format!("query_{theirs}_{}", a.attempt_ref).replace(' ', "_"),
                    attempt_ref: a.attempt_ref.to_string(),
                    outcome,
                    raw_body: format!("{{\"query\":\"{}\",\"state\":\"{theirs}\"}}", a.attempt_ref).into_bytes(),
                };
                let applied = super::payment::apply_verified(&self.cx, &event).await?;
                if matches!(applied, Applied::Changed { .. }) {
                    report.attempts_closed += 1;
                    let f = finding("attempt_closed_at_gateway", theirs, "attempt closed; the order can be paid again");
                    self.finding(f, Severity::Warning, report).await?;
                }
                reconcile::reschedule_attempt(&self.cx.db, &a.attempt_ref, a.tries + 1, Millis::MAX).await?;
            }
        }
        Ok(())
    }

    async fn refund(&self, r: &RefundToQuery, report: &mut ReconcileReport) -> Result<()> {
        let later = |tries: i64| {
            reconcile::reschedule_refund(
                &self.cx.db,
                &r.refund_no,
                tries,
                self.cx.clock.now_ms() + backoff(self.after_ms, tries),
            )
        };
        let Some(gateway) = self.gateway(&r.gateway) else {
            report.errors += 1;
            return later(r.tries + 1).await;
        };
        let query = RefundQuery {
            attempt_ref: r.attempt_ref.to_string(),
            refund_no: r.refund_no.to_string(),
            gateway_refund_id: r.gateway_refund_id.clone(),
        };
        let state = match gateway.query_refund(&query).await {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(refund_no = %r.refund_no, error = %e, "reconcile refund query failed");
                report.errors += 1;
                return later(r.tries + 1).await;
            }
        };
        let finding = |kind: &'static str, theirs: &str, action: &str| Finding {
            kind,
            gateway: r.gateway.clone(),
            order_no: r.order_no.to_string(),
            attempt_ref: r.attempt_ref.to_string(),
            refund_no: Some(r.refund_no.to_string()),
            ours: "refund processing".to_string(),
            theirs: theirs.to_string(),
            action: action.to_string(),
        };
        let now = self.cx.clock.now_ms();
        match state {
            RefundState::Processing => {
                report.unchanged += 1;
                later(r.tries + 1).await?;
            }
            RefundState::Succeeded => {
                refunds::settle(&self.cx.db, &r.refund_no, true, "", None, now).await?;
                report.refunds_settled += 1;
                let f = finding("missed_refund_notification", "succeeded", "refund settled as succeeded");
                self.finding(f, Severity::Warning, report).await?;
            }
            RefundState::Failed { reason } => {
                refunds::settle(&self.cx.db, &r.refund_no, false, &reason, None, now).await?;
                report.refunds_settled += 1;
                let f = finding("missed_refund_notification", &reason, "refund settled as failed");
                self.finding(f, Severity::Critical, report).await?;
            }
            RefundState::NotFound => {
                // The gateway never got it: send it again with the same number (idempotent there).
                let req = RefundRequest {
                    attempt_ref: r.attempt_ref.to_string(),
                    refund_no: r.refund_no.to_string(),
                    amount: r.amount,
                    reason: r.reason.clone(),
                    captured: r.captured,
                    gateway_txn_id: r.gateway_txn_id.clone(),
                    second_capture: r.second_capture,
                };
                let action = match gateway.refund(&req).await {
                    Ok(RefundAnswer::Succeeded { .. }) => {
                        refunds::settle(&self.cx.db, &r.refund_no, true, "", None, self.cx.clock.now_ms()).await?;
                        report.refunds_settled += 1;
                        "re-sent; succeeded".to_string()
                    }
                    Ok(RefundAnswer::Accepted { .. }) => {
                        later(r.tries + 1).await?;
                        "re-sent; processing".to_string()
                    }
                    Ok(RefundAnswer::Rejected { reason }) => {
                        refunds::settle(&self.cx.db, &r.refund_no, false, &reason, None, self.cx.clock.now_ms())
                            .await?;
                        report.refunds_settled += 1;
                        format!("re-sent; refused: {reason}")
                    }
                    Err(e) => {
                        report.errors += 1;
                        later(r.tries + 1).await?;
                        format!("re-send failed ({e}); asked again later")
                    }
                };
                report.refunds_resent += 1;
                self.finding(
                    finding("refund_unknown_at_gateway", "no such refund", &action),
                    Severity::Critical,
                    report,
                )
                .await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(120_000, 0), 120_000);
        assert_eq!(backoff(120_000, 1), 240_000);
        assert_eq!(backoff(120_000, 20), BACKOFF_MAX_MS);
        assert_eq!(backoff(0, 0), 1000);
    }
}

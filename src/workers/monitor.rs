//! The monitor: keeps the operational gauges current, raises the alerts that come from looking
//! at the whole database (orders stuck past their hold, attempts in `unknown`, a sweeper falling
//! behind), and pushes new or repeated alerts to the alert webhook when one is configured.

use crate::store::sql;
use std::time::Duration;

use serde_json::json;

use crate::clock::{Millis, SharedClock, rfc3339};
use crate::error::Result;
use crate::store::events::{self, Severity};
use crate::store::{Db, col};

/// A pending order still pending this long after its hold ended is stuck (the sweeper should have
/// expired it long ago).
pub const STUCK_GRACE_MS: Millis = 15 * 60 * 1000;
/// The sweeper is behind when the oldest due order waits longer than this.
pub const SWEEPER_BEHIND_MS: Millis = 2 * 60 * 1000;
/// Attempts in `unknown` for longer than this are alerted.
pub const UNKNOWN_ALERT_MS: Millis = 10 * 60 * 1000;
/// Alerts raised or pushed per step.
const MONITOR_BATCH_MAX: i64 = 100;
/// Attempts left in `unknown` since before `$1`, oldest first (by `payment_attempts_unknown`).
pub const UNKNOWN_ATTEMPTS_SQL: &str = "SELECT attempt_ref, order_no FROM payment_attempts WHERE status = 'unknown' AND updated_at < $1 ORDER BY updated_at LIMIT $2";

pub struct Monitor {
    pub db: Db,
    pub clock: SharedClock,
    pub alert_webhook: Option<String>,
    /// Whether the shop's webhook URL is configured (without it the outbox has no backlog).
    pub webhook_configured: bool,
    http: reqwest::Client,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MonitorReport {
    pub sweeper_lag_ms: Millis,
    pub stuck_orders: usize,
    pub unknown_attempts: usize,
    pub alerts_pushed: usize,
}

impl Monitor {
    pub fn new(db: Db, clock: SharedClock, alert_webhook: Option<String>, webhook_configured: bool) -> Monitor {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap_or_default();
        Monitor { db, clock, alert_webhook, webhook_configured, http }
    }

    pub async fn step(&self) -> Result<MonitorReport> {
        let now = self.clock.now_ms();
        let pool = self.db.read_pool();
        let mut report = MonitorReport::default();
        crate::store::gauges::refresh(&self.db, self.webhook_configured).await?;

        let oldest_due: Option<i64> = sql::query_scalar(
            "SELECT MIN(hold_expires_at) FROM orders WHERE status = 'pending_payment' AND hold_expires_at <= $1",
        )
        .bind(now)
        .fetch_one(pool)
        .await?;
        report.sweeper_lag_ms = oldest_due.map(|t| now - t).unwrap_or(0);
        // Seconds for Prometheus; whole seconds avoid float arithmetic (not money, but the rule is simple).
        metrics::gauge!("kassa_sweeper_lag_seconds").set((report.sweeper_lag_ms / 1000) as f64);

        let stuck: Vec<String> = sql::query_scalar(
            "SELECT order_no FROM orders WHERE status = 'pending_payment' AND hold_expires_at < $1 ORDER BY hold_expires_at LIMIT $2",
        )
        .bind(now - STUCK_GRACE_MS)
        .bind(MONITOR_BATCH_MAX)
        .fetch_all(pool)
        .await?;
        let unknown = sql::query(UNKNOWN_ATTEMPTS_SQL)
            .bind(now - UNKNOWN_ALERT_MS)
            .bind(MONITOR_BATCH_MAX)
            .fetch_all(pool)
            .await?;
        report.stuck_orders = stuck.len();
        report.unknown_attempts = unknown.len();
        let behind = report.sweeper_lag_ms > SWEEPER_BEHIND_MS;
        if behind || !stuck.is_empty() || !unknown.is_empty() {
            let lag = report.sweeper_lag_ms;
            crate::write_tx!(self.db, |tx| {
                if behind {
                    let details = format!("the oldest due order has waited {} s for the sweeper", lag / 1000);
                    events::raise_alert(tx, "sweeper_behind", Severity::Warning, "sweeper", None, &details, now)
                        .await?;
                }
                for order_no in &stuck {
                    let details = "still pending payment long after its hold ended";
                    events::raise_alert(tx, "order_stuck", Severity::Warning, order_no, Some(order_no), details, now)
                        .await?;
                }
                for r in &unknown {
                    let (attempt_ref, order_no): (String, String) = (col(r, "attempt_ref")?, col(r, "order_no")?);
                    let details = format!("attempt {attempt_ref} has been in unknown state; query the gateway");
                    events::raise_alert(
                        tx,
                        "attempt_unknown",
                        Severity::Warning,
                        &attempt_ref,
                        Some(&order_no),
                        &details,
                        now,
                    )
                    .await?;
                }
                Ok(())
            })?;
        }
        if let Some(url) = &self.alert_webhook {
            report.alerts_pushed = self.push_alerts(url).await?;
        }
        Ok(report)
    }

    /// Pushes alerts raised (or raised again) since their last push. Outside any transaction.
    async fn push_alerts(&self, url: &str) -> Result<usize> {
        let rows = sql::query(
            "SELECT id, kind, severity, order_no, details, first_seen, last_seen, count FROM alerts \
             WHERE pushed_count < count AND acknowledged = 0 ORDER BY last_seen LIMIT $1",
        )
        .bind(MONITOR_BATCH_MAX)
        .fetch_all(self.db.read_pool())
        .await?;
        let mut pushed = 0;
        for r in &rows {
            let (id, count): (String, i64) = (col(r, "id")?, col(r, "count")?);
            let body = json!({
                "id": id,
                "kind": col::<String>(r, "kind")?,
                "severity": col::<String>(r, "severity")?,
                "order_no": col::<Option<String>>(r, "order_no")?,
                "details": col::<String>(r, "details")?,
                "first_seen": rfc3339(col(r, "first_seen")?),
                "last_seen": rfc3339(col(r, "last_seen")?),
                "count": count,
            });
            match self.http.post(url).json(&body).send().await {
                Ok(resp) if resp.status().is_success() => {
                    crate::write_tx!(self.db, |tx| {
                        sql::query("UPDATE alerts SET pushed_count = $1 WHERE id = $2")
                            .bind(count)
                            .bind(&id)
                            .execute(&mut **tx)
                            .await?;
                        Ok(())
                    })?;
                    pushed += 1;
                }
                Ok(resp) => tracing::warn!(status = %resp.status(), "alert webhook refused an alert; will retry"),
                Err(e) => tracing::warn!(error = %e, "alert webhook unreachable; will retry"),
            }
        }
        Ok(pushed)
    }
}

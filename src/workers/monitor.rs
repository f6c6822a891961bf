//! The monitor: keeps the sweeper's lag gauge current (the database's gauges are read at each
//! scrape of `/metrics`, and only then: counting a long history's orders is not free), raises the
//! alerts that come from looking at the whole database (orders stuck past their hold, attempts in
//! `unknown`, a sweeper falling behind), and pushes new or repeated alerts to the alert webhook
//! when one is configured.

use std::time::Duration;

use serde_json::json;

use crate::clock::{Millis, SharedClock, rfc3339};
use crate::error::Result;
use crate::store::Db;
use crate::store::monitor::{self, Watch};

/// A pending order still pending this long after its hold ended is stuck (the sweeper should have
/// expired it long ago).
pub const STUCK_GRACE_MS: Millis = 15 * 60 * 1000;
/// The sweeper is behind when the oldest due order waits longer than this.
pub const SWEEPER_BEHIND_MS: Millis = 2 * 60 * 1000;
/// Attempts in `unknown` for longer than this are alerted.
pub const UNKNOWN_ALERT_MS: Millis = 10 * 60 * 1000;
/// Alerts raised or pushed per step.
const MONITOR_BATCH_MAX: i64 = 100;
pub use crate::store::monitor::UNKNOWN_ATTEMPTS_SQL;

pub struct Monitor {
    pub db: Db,
    pub clock: SharedClock,
    pub alert_webhook: Option<String>,
    /// How long before a case's deadline the operator is warned.
    pub case_due_margin_ms: Millis,
    http: reqwest::Client,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MonitorReport {
    pub sweeper_lag_ms: Millis,
    pub stuck_orders: usize,
    pub unknown_attempts: usize,
    pub alerts_pushed: usize,
    /// Deadline alerts raised on complaints and disputes.
    pub case_alerts: usize,
}

impl Monitor {
    pub fn new(db: Db, clock: SharedClock, alert_webhook: Option<String>, case_due_margin_ms: Millis) -> Monitor {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap_or_default();
        Monitor { db, clock, alert_webhook, case_due_margin_ms, http }
    }

    pub async fn step(&self) -> Result<MonitorReport> {
        let now = self.clock.now_ms();
        let mut report = MonitorReport {
            sweeper_lag_ms: monitor::oldest_due(&self.db, now).await?.map(|t| now - t).unwrap_or(0),
            ..MonitorReport::default()
        };
        // Seconds for Prometheus; whole seconds avoid float arithmetic (not money, but the rule is simple).
        metrics::gauge!("kassa_sweeper_lag_seconds").set((report.sweeper_lag_ms / 1000) as f64);
        let watch = Watch {
            sweeper_behind_ms: (report.sweeper_lag_ms > SWEEPER_BEHIND_MS).then_some(report.sweeper_lag_ms),
            stuck: monitor::stuck_orders(&self.db, now - STUCK_GRACE_MS, MONITOR_BATCH_MAX).await?,
            unknown: monitor::unknown_attempts(&self.db, now - UNKNOWN_ALERT_MS, MONITOR_BATCH_MAX).await?,
        };
        report.stuck_orders = watch.stuck.len();
        report.unknown_attempts = watch.unknown.len();
        if watch.sweeper_behind_ms.is_some() || !watch.stuck.is_empty() || !watch.unknown.is_empty() {
            monitor::raise_watch_alerts(&self.db, &watch, now).await?;
        }
        report.case_alerts = crate::store::cases::alert_deadlines(&self.db, now, self.case_due_margin_ms).await?;
        if let Some(url) = &self.alert_webhook {
            report.alerts_pushed = self.push_alerts(url).await?;
        }
        Ok(report)
    }

    /// Pushes alerts raised (or raised again) since their last push. Outside any transaction.
    async fn push_alerts(&self, url: &str) -> Result<usize> {
        let mut pushed = 0;
        for a in monitor::alerts_to_push(&self.db, MONITOR_BATCH_MAX).await? {
            let body = json!({
                "id": a.id,
                "kind": a.kind,
                "severity": a.severity,
                "order_no": a.order_no,
                "details": a.details,
                "first_seen": rfc3339(a.first_seen),
                "last_seen": rfc3339(a.last_seen),
                "count": a.count,
            });
            match self.http.post(url).json(&body).send().await {
                Ok(resp) if resp.status().is_success() => {
                    monitor::mark_pushed(&self.db, &a.id, a.count).await?;
                    pushed += 1;
                }
                Ok(resp) => tracing::warn!(status = %resp.status(), "alert webhook refused an alert; will retry"),
                Err(e) => tracing::warn!(error = %e, "alert webhook unreachable; will retry"),
            }
        }
        Ok(pushed)
    }
}

//! What the monitor reads of the whole database (orders past their hold, attempts left in
//! `unknown`, the sweeper's lag), the alerts it raises from them, and the alerts it pushes.

use crate::clock::Millis;
use crate::error::Result;
use crate::store::events::{self, Severity};
use crate::store::{Db, col, sql};

/// Attempts left in `unknown` since before `$1`, oldest first (by `payment_attempts_unknown`).
pub const UNKNOWN_ATTEMPTS_SQL: &str = "SELECT attempt_ref, order_no FROM payment_attempts WHERE status = 'unknown' AND updated_at < $1 ORDER BY updated_at LIMIT $2";

/// When the oldest order awaiting payment whose hold ended by `now` ended it, if there is one.
pub async fn oldest_due(db: &Db, now: Millis) -> Result<Option<Millis>> {
    sql::query_scalar(
        "SELECT MIN(hold_expires_at) FROM orders WHERE status = 'pending_payment' AND hold_expires_at <= $1",
    )
    .bind(now)
    .fetch_one(db.read_pool())
    .await
}

/// Orders still awaiting payment whose hold ended before `before`, oldest first, at most `limit`.
pub async fn stuck_orders(db: &Db, before: Millis, limit: i64) -> Result<Vec<String>> {
    sql::query_scalar(
        "SELECT order_no FROM orders WHERE status = 'pending_payment' AND hold_expires_at < $1 ORDER BY hold_expires_at LIMIT $2",
    )
    .bind(before)
    .bind(limit)
    .fetch_all(db.read_pool())
    .await
}

/// Attempts in `unknown` since before `before` (attempt, order), oldest first, at most `limit`.
pub async fn unknown_attempts(db: &Db, before: Millis, limit: i64) -> Result<Vec<(String, String)>> {
    let rows = sql::query(UNKNOWN_ATTEMPTS_SQL).bind(before).bind(limit).fetch_all(db.read_pool()).await?;
    rows.iter().map(|r| Ok((col(r, "attempt_ref")?, col(r, "order_no")?))).collect()
}

/// What the monitor found to alert about in one look.
#[derive(Debug, Default)]
pub struct Watch {
    /// The sweeper's lag, when it is behind.
    pub sweeper_behind_ms: Option<Millis>,
    pub stuck: Vec<String>,
    /// (attempt, order)
    pub unknown: Vec<(String, String)>,
}

/// Raises (or raises again) the alerts of one look, in one transaction.
pub async fn raise_watch_alerts(db: &Db, watch: &Watch, now: Millis) -> Result<()> {
    crate::write_tx!(db, |tx| {
        if let Some(lag) = watch.sweeper_behind_ms {
            let details = format!("the oldest due order has waited {} s for the sweeper", lag / 1000);
            events::raise_alert(tx, "sweeper_behind", Severity::Warning, "sweeper", None, &details, now).await?;
        }
        for order_no in &watch.stuck {
            let details = "still pending payment long after its hold ended";
            events::raise_alert(tx, "order_stuck", Severity::Warning, order_no, Some(order_no), details, now).await?;
        }
        for (attempt_ref, order_no) in &watch.unknown {
            let details = format!("attempt {attempt_ref} has been in unknown state; query the gateway");
            events::raise_alert(tx, "attempt_unknown", Severity::Warning, attempt_ref, Some(order_no), &details, now)
                .await?;
        }
        Ok(())
    })
}

/// An alert raised (or raised again) since it was last pushed.
#[derive(Debug, Clone)]
pub struct AlertToPush {
    pub id: String,
    pub kind: String,
    pub severity: String,
    pub order_no: Option<String>,
    pub details: String,
    pub first_seen: Millis,
    pub last_seen: Millis,
    /// Times raised; pushed up to this count once the push is taken.
    pub count: i64,
}

/// Unacknowledged alerts raised since their last push, the longest unpushed first, at most `limit`.
pub async fn alerts_to_push(db: &Db, limit: i64) -> Result<Vec<AlertToPush>> {
    let rows = sql::query(
        "SELECT id, kind, severity, order_no, details, first_seen, last_seen, count FROM alerts \
         WHERE pushed_count < count AND acknowledged = 0 ORDER BY last_seen LIMIT $1",
    )
    .bind(limit)
    .fetch_all(db.read_pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(AlertToPush {
                id: col(r, "id")?,
                kind: col(r, "kind")?,
                severity: col(r, "severity")?,
                order_no: col(r, "order_no")?,
                details: col(r, "details")?,
                first_seen: col(r, "first_seen")?,
                last_seen: col(r, "last_seen")?,
                count: col(r, "count")?,
            })
        })
        .collect()
}

/// Records that alert `id` was pushed as raised `count` times.
pub async fn mark_pushed(db: &Db, id: &str, count: i64) -> Result<()> {
    crate::write_tx!(db, |tx| {
        sql::query("UPDATE alerts SET pushed_count = $1 WHERE id = $2").bind(count).bind(id).execute(&mut **tx).await?;
        Ok(())
    })
}

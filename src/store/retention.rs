//! Retention: what a shop no longer needs is pruned — buyer sessions that never ordered, baskets
//! left open, the raw bodies of old processed notifications, old rejected notifications, stale
//! sign-in failure counts, webhook messages delivered long ago, idempotency keys past their window.
//! Orders, payments, refunds and the status log are kept. Nothing an open order or an unsettled refund needs is touched: sessions
//! with orders stay (their orders reference them), a frozen basket stays with its order, and a
//! notification keeps its body while its order is open or a refund of it is unsettled.

use crate::store::sql;
use serde::Serialize;

use crate::clock::Millis;
use crate::error::Result;
use crate::store::{Db, col};

/// What the retention worker prunes, by age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Buyer sessions that never ordered and open baskets, after this long unused.
    pub idle_ms: i64,
    /// Raw bodies of processed notifications, after this long.
    pub notification_body_ms: i64,
    /// Notifications that failed verification (their digests), after this long.
    pub rejected_notification_ms: i64,
    /// Webhook messages, this long after they were delivered (a message not delivered stays).
    pub delivered_message_ms: i64,
    /// Idempotency keys, this long after the checkout that named them. A checkout repeated later
    /// still finds its order by its basket, which is frozen with it.
    pub idempotency_key_ms: i64,
}

/// The setting that holds the newest delivery time before which webhook messages were pruned:
/// `kassa check` does not expect a message older than it to be there.
pub const MESSAGES_PRUNED_BEFORE: &str = "messages_pruned_before";

/// Rows pruned per kind in one transaction.
pub const PRUNE_BATCH: i64 = 500;
/// Transactions per kind in one pass; what is left waits for the next pass.
pub const PRUNE_ROUNDS_MAX: usize = 20;
/// Buyer sessions looked at in one round of pruning sessions, oldest first from where the last
/// round stopped: what a round reads stays the same however many sessions a long history kept
/// (those with orders stay, and are looked at again only once the walk reaches the idle cutoff
/// and starts over).
pub const SESSIONS_SCAN_MAX: i64 = 20_000;
/// The setting that holds the creation time the walk over buyer sessions has reached.
pub const SESSIONS_WALKED_THROUGH: &str = "retention_sessions_walked_through";
/// Sign-in failure counts are forgotten this long after their window started (and any lockout ended).
const SIGNIN_FAILURES_KEPT_MS: Millis = 24 * 3600 * 1000;

/// What one pass pruned.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Pruned {
    pub baskets: u64,
    pub sessions: u64,
    pub notification_bodies: u64,
    pub rejected_notifications: u64,
    pub signin_failures: u64,
    pub delivered_messages: u64,
    pub idempotency_keys: u64,
}

impl Pruned {
    pub fn any(&self) -> bool {
        self.baskets
            + self.sessions
            + self.notification_bodies
            + self.rejected_notifications
            + self.signin_failures
            + self.delivered_messages
            + self.idempotency_keys
            > 0
    }
}

/// Order statuses whose notifications no decision can still need: the order is settled and no
/// operator is asked about it.
const SETTLED_ORDER_STATUSES: &str = "'paid', 'delivered', 'expired', 'cancelled', 'refunded'";

/// One retention pass at `now`.
pub async fn prune(db: &Db, retention: Retention, now: Millis) -> Result<Pruned> {
    let idle_before = now.saturating_sub(retention.idle_ms);
    // Baskets first: a session whose last basket goes is pruned in the same pass.
    let baskets = rounds(|| prune_baskets(db, idle_before)).await?;
    Ok(Pruned {
        baskets,
        sessions: prune_sessions(db, idle_before).await?,
        notification_bodies: rounds(|| {
            prune_notification_bodies(db, now.saturating_sub(retention.notification_body_ms), now)
        })
        .await?,
        rejected_notifications: rounds(|| {
            prune_rejected_notifications(db, now.saturating_sub(retention.rejected_notification_ms))
        })
        .await?,
        signin_failures: rounds(|| prune_signin_failures(db, now)).await?,
        delivered_messages: rounds(|| prune_delivered_messages(db, now.saturating_sub(retention.delivered_message_ms)))
            .await?,
        idempotency_keys: rounds(|| prune_idempotency_keys(db, now.saturating_sub(retention.idempotency_key_ms)))
            .await?,
    })
}

/// Runs a batch until one prunes less than a full batch, for at most [`PRUNE_ROUNDS_MAX`] rounds.
async fn rounds<F, Fut>(mut batch: F) -> Result<u64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64>>,
{
    let mut total = 0;
    for _ in 0..PRUNE_ROUNDS_MAX {
        let n = batch().await?;
        total += n;
        if n < PRUNE_BATCH.unsigned_abs() {
            break;
        }
    }
    Ok(total)
}

/// Open baskets last changed before `idle_before`, with their lines.
async fn prune_baskets(db: &Db, idle_before: Millis) -> Result<u64> {
    let claim = format!(
        "SELECT id FROM baskets WHERE status = 'open' AND updated_at < $1 ORDER BY updated_at LIMIT $2{}",
        db.skip_locked()
    );
    crate::write_tx!(db, |tx| {
        let rows = sql::query(&claim).bind(idle_before).bind(PRUNE_BATCH).fetch_all(&mut **tx).await?;
        let mut n = 0;
        for row in &rows {
            let id: String = col(row, "id")?;
            sql::query("DELETE FROM basket_lines WHERE basket_id = $1").bind(&id).execute(&mut **tx).await?;
            n += sql::query("DELETE FROM baskets WHERE id = $1 AND status = 'open'")
                .bind(&id)
                .execute(&mut **tx)
                .await?
                .rows_affected();
        }
        Ok(n)
    })
}

/// Buyer sessions created before `idle_before` that have no order and no basket left, looked at
/// [`SESSIONS_SCAN_MAX`] at a time from where the walk stopped, for at most [`PRUNE_ROUNDS_MAX`]
/// rounds.
async fn prune_sessions(db: &Db, idle_before: Millis) -> Result<u64> {
    let mut total = 0;
    for _ in 0..PRUNE_ROUNDS_MAX {
        let (n, walked_on) = prune_sessions_round(db, idle_before).await?;
        total += n;
        if !walked_on {
            break;
        }
    }
    Ok(total)
}

/// One round of [`prune_sessions`]: the pruned count, and whether sessions are left to look at.
async fn prune_sessions_round(db: &Db, idle_before: Millis) -> Result<(u64, bool)> {
    crate::write_tx!(db, |tx| {
        let after: Millis = sql::query_scalar::<String>("SELECT value FROM settings WHERE name = $1")
            .bind(SESSIONS_WALKED_THROUGH)
            .fetch_optional(&mut **tx)
            .await?
            .and_then(|v| v.parse().ok())
            .unwrap_or(Millis::MIN);
        // The round's last session (by the creation-time index), or none: the walk reaches the cutoff.
        let last: Option<Millis> = sql::query_scalar(
            "SELECT created_at FROM sessions WHERE created_at > $1 AND created_at < $2 ORDER BY created_at LIMIT 1 OFFSET $3",
        )
        .bind(after)
        .bind(idle_before)
        .bind(SESSIONS_SCAN_MAX - 1)
        .fetch_optional(&mut **tx)
        .await?;
        let through = last.unwrap_or(idle_before - 1);
        // A frozen basket has its order; an open one is read by its status's index.
        let pruned: Vec<Millis> = sql::query_scalar(
            "DELETE FROM sessions WHERE id IN (SELECT s.id FROM sessions s WHERE s.created_at > $1 AND s.created_at <= $2 \
             AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.session_id = s.id) \
             AND NOT EXISTS (SELECT 1 FROM baskets b WHERE b.session_id = s.id AND b.status = 'open') \
             ORDER BY s.created_at LIMIT $3) RETURNING created_at",
        )
        .bind(after)
        .bind(through)
        .bind(PRUNE_BATCH)
        .fetch_all(&mut **tx)
        .await?;
        let n = pruned.len() as u64;
        // A full batch may leave prunable sessions of the round: the walk goes on from the last
        // one pruned. Past the cutoff it starts over (sessions that have since lost their last
        // basket are looked at again).
        let walked = match (n == PRUNE_BATCH.unsigned_abs(), last) {
            (true, _) => pruned.iter().copied().max(),
            (false, Some(last)) => Some(last),
            (false, None) => None,
        };
        sql::query(
            "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        )
        .bind(SESSIONS_WALKED_THROUGH)
        .bind(walked.map_or_else(|| Millis::MIN.to_string(), |w| w.to_string()))
        .execute(&mut **tx)
        .await?;
        Ok((n, walked.is_some()))
    })
}

/// The statement of [`prune_notification_bodies`]. A refund not yet settled is looked for by
/// each of its two statuses, whose partial indexes hold only the unsettled ones: with one test of
/// both, PostgreSQL read every refund the shop ever made at each round (9,400 pages at ten million
/// orders).
pub fn prune_notification_bodies_sql() -> String {
    format!(
        "UPDATE notifications SET raw_body = $1, body_pruned_at = $2 WHERE id IN (SELECT n.id FROM notifications n \
         WHERE n.body_pruned_at IS NULL AND n.received_at < $3 AND n.status <> 'received' \
         AND (n.order_no IS NULL OR EXISTS (SELECT 1 FROM orders o WHERE o.order_no = n.order_no \
         AND o.status IN ({SETTLED_ORDER_STATUSES}))) \
         AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.order_no = n.order_no AND r.status = 'requested') \
         AND NOT EXISTS (SELECT 1 FROM refunds r WHERE r.order_no = n.order_no AND r.status = 'processing') \
         ORDER BY n.received_at LIMIT $4)"
    )
}

/// Empties the raw bodies of notifications received before `before` that were processed, whose
/// order (if any) is settled and has no unsettled refund.
async fn prune_notification_bodies(db: &Db, before: Millis, now: Millis) -> Result<u64> {
    let sql = prune_notification_bodies_sql();
    crate::write_tx!(db, |tx| {
        let done =
            sql::query(&sql).bind(Vec::<u8>::new()).bind(now).bind(before).bind(PRUNE_BATCH).execute(&mut **tx).await?;
        Ok(done.rows_affected())
    })
}

/// Notifications that failed verification (the digests `record_rejected` keeps, with their
/// `body_sha256`), received before `before`: nothing refers to them. A verified notification that
/// was refused (an amount that does not match) is a decision record, and stays.
async fn prune_rejected_notifications(db: &Db, before: Millis) -> Result<u64> {
    crate::write_tx!(db, |tx| {
        let done = sql::query(
            "DELETE FROM notifications WHERE id IN (SELECT id FROM notifications WHERE status = 'rejected' \
             AND body_sha256 IS NOT NULL AND received_at < $1 ORDER BY received_at LIMIT $2)",
        )
        .bind(before)
        .bind(PRUNE_BATCH)
        .execute(&mut **tx)
        .await?;
        Ok(done.rows_affected())
    })
}

/// Sign-in failure counts whose window is long over and whose lockout (if any) has ended.
async fn prune_signin_failures(db: &Db, now: Millis) -> Result<u64> {
    crate::write_tx!(db, |tx| {
        let done = sql::query(
            "DELETE FROM signin_failures WHERE address IN (SELECT address FROM signin_failures \
             WHERE window_started_at < $1 AND (locked_until IS NULL OR locked_until < $2) LIMIT $3)",
        )
        .bind(now.saturating_sub(SIGNIN_FAILURES_KEPT_MS))
        .bind(now)
        .bind(PRUNE_BATCH)
        .execute(&mut **tx)
        .await?;
        Ok(done.rows_affected())
    })
}

/// Webhook messages delivered before `before`, oldest first; the time is recorded for `kassa check`
/// in the same transaction.
async fn prune_delivered_messages(db: &Db, before: Millis) -> Result<u64> {
    crate::write_tx!(db, |tx| {
        let done = sql::query(
            "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE status = 'delivered' \
             AND delivered_at < $1 ORDER BY delivered_at LIMIT $2)",
        )
        .bind(before)
        .bind(PRUNE_BATCH)
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() > 0 {
            sql::query(
                "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = \
                 CASE WHEN CAST(settings.value AS BIGINT) < CAST(excluded.value AS BIGINT) THEN excluded.value \
                 ELSE settings.value END",
            )
            .bind(MESSAGES_PRUNED_BEFORE)
            .bind(before.to_string())
            .execute(&mut **tx)
            .await?;
        }
        Ok(done.rows_affected())
    })
}

/// Idempotency keys of checkouts before `before`, oldest first.
async fn prune_idempotency_keys(db: &Db, before: Millis) -> Result<u64> {
    crate::write_tx!(db, |tx| {
        let done = sql::query(
            "DELETE FROM idempotency_keys WHERE (session_id, idem_key) IN (SELECT session_id, idem_key \
             FROM idempotency_keys WHERE created_at < $1 ORDER BY created_at LIMIT $2)",
        )
        .bind(before)
        .bind(PRUNE_BATCH)
        .execute(&mut **tx)
        .await?;
        Ok(done.rows_affected())
    })
}

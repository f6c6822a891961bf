//! Read models and small commands of the admin console.

use crate::clock::{Millis, rfc3339};
use crate::domain::ids;
use crate::domain::signin::{ALL_ADDRESSES, LockoutPolicy};
use crate::error::Result;
use crate::store::catalog::{SkuView, list_skus, token_hash};
use crate::store::listing::{self, Cursor, Page};
use crate::store::sql;
use crate::store::{Db, Tx, col, new_id};

/// How long an admin console session lasts at most, however busy its operator.
pub const ADMIN_SESSION_MS: Millis = 12 * 3600 * 1000;
/// A session's expiry is moved on by a request only when it moves by more than this: an
/// operator's every click is not a write.
const SESSION_SLIDE_MIN_MS: Millis = 60_000;
/// Rows shown per list page.
pub const LIST_LIMIT: i64 = 200;

pub use crate::domain::money::format_minor as money;

/// A new console session, ending after `idle_ms` without use (and after [`ADMIN_SESSION_MS`]).
pub async fn create_session(db: &Db, now: Millis, idle_ms: Millis) -> Result<(String, String)> {
    let token = ids::new_secret_token();
    let csrf = ids::new_secret_token();
    crate::write_tx!(db, |tx| {
        sql::query("DELETE FROM admin_sessions WHERE expires_at < $1").bind(now).execute(&mut **tx).await?;
        sql::query(
            "INSERT INTO admin_sessions (token_hash, csrf_token, created_at, expires_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(token_hash(&token))
        .bind(&csrf)
        .bind(now)
        .bind(now.saturating_add(idle_ms.min(ADMIN_SESSION_MS)))
        .execute(&mut **tx)
        .await?;
        Ok(())
    })?;
    Ok((token, csrf))
}

/// The CSRF token of a live admin session; using it keeps it alive for `idle_ms` more.
pub async fn session_csrf(db: &Db, token: &str, now: Millis, idle_ms: Millis) -> Result<Option<String>> {
    if token.is_empty() || token.len() > 128 {
        return Ok(None);
    }
    let hash = token_hash(token);
    let row = sql::query(
        "SELECT csrf_token, created_at, expires_at FROM admin_sessions WHERE token_hash = $1 AND expires_at > $2",
    )
    .bind(&hash)
    .bind(now)
    .fetch_optional(db.read_pool())
    .await?;
    let Some(row) = row else { return Ok(None) };
    let (created_at, expires_at): (Millis, Millis) = (col(&row, "created_at")?, col(&row, "expires_at")?);
    let slid = now.saturating_add(idle_ms).min(created_at.saturating_add(ADMIN_SESSION_MS));
    if slid.saturating_sub(expires_at) > SESSION_SLIDE_MIN_MS {
        crate::write_tx!(db, |tx| {
            sql::query("UPDATE admin_sessions SET expires_at = $1 WHERE token_hash = $2 AND expires_at < $1")
                .bind(slid)
                .bind(&hash)
                .execute(&mut **tx)
                .await?;
            Ok(())
        })?;
    }
    Ok(Some(col(&row, "csrf_token")?))
}

pub async fn end_session(db: &Db, token: &str) -> Result<()> {
    crate::write_tx!(db, |tx| {
        sql::query("DELETE FROM admin_sessions WHERE token_hash = $1")
            .bind(token_hash(token))
            .execute(&mut **tx)
            .await?;
        Ok(())
    })
}

/// Until when `address` is locked out of signing in (its own lockout, or all addresses'), if it is.
pub async fn signin_locked_until(db: &Db, address: &str, now: Millis) -> Result<Option<Millis>> {
    let rows = sql::query(
        "SELECT failures, window_started_at, locked_until FROM signin_failures WHERE address = $1 OR address = $2",
    )
    .bind(address)
    .bind(ALL_ADDRESSES)
    .fetch_all(db.read_pool())
    .await?;
    let mut until = None;
    for row in &rows {
        until = until.max(failures_of(row)?.may_try(now).err());
    }
    Ok(until)
}

fn failures_of(row: &sql::Row) -> Result<crate::domain::signin::Failures> {
    Ok(crate::domain::signin::Failures {
        failures: col(row, "failures")?,
        window_started_at: col(row, "window_started_at")?,
        locked_until: col(row, "locked_until")?,
    })
}

/// Counts a failed sign-in from `address`, and among all addresses'. Returns the end of the
/// lockout when this failure locked the address (or every address) out, and raises an alert then.
pub async fn record_signin_failure(
    db: &Db,
    address: &str,
    now: Millis,
    policy: LockoutPolicy,
) -> Result<Option<Millis>> {
    crate::write_tx!(db, |tx| {
        let mine = count_signin_failure(tx, address, now, policy).await?;
        let all = count_signin_failure(tx, ALL_ADDRESSES, now, policy.all_addresses()).await?;
        Ok(mine.max(all))
    })
}

/// One more failure under `key` (an address, or all of them), by `policy`; alerts a lockout.
async fn count_signin_failure(
    tx: &mut Tx<'_>,
    key: &str,
    now: Millis,
    policy: LockoutPolicy,
) -> Result<Option<Millis>> {
    let row = sql::query("SELECT failures, window_started_at, locked_until FROM signin_failures WHERE address = $1")
        .bind(key)
        .fetch_optional(&mut **tx)
        .await?;
    let before = row.as_ref().map(failures_of).transpose()?;
    let after = crate::domain::signin::after_failure(before, now, policy);
    sql::query(
        "INSERT INTO signin_failures (address, failures, window_started_at, locked_until) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (address) DO UPDATE SET failures = excluded.failures, \
         window_started_at = excluded.window_started_at, locked_until = excluded.locked_until",
    )
    .bind(key)
    .bind(after.failures)
    .bind(after.window_started_at)
    .bind(after.locked_until)
    .execute(&mut **tx)
    .await?;
    if let Some(until) = after.locked_until {
        let from = if key == ALL_ADDRESSES { "all addresses together".to_string() } else { key.to_string() };
        let details = format!(
            "{} failed admin sign-ins from {from}; wrong tokens backed off until {} (the right token still signs in)",
            policy.max_failures,
            rfc3339(until)
        );
        crate::store::events::raise_alert(
            tx,
            "admin_signin_lockout",
            crate::store::events::Severity::Warning,
            key,
            None,
            &details,
            now,
        )
        .await?;
    }
    Ok(after.locked_until)
}

/// Forgets the failures of an address that signed in.
pub async fn clear_signin_failures(db: &Db, address: &str) -> Result<()> {
    crate::write_tx!(db, |tx| {
        sql::query("DELETE FROM signin_failures WHERE address = $1").bind(address).execute(&mut **tx).await?;
        Ok(())
    })
}

#[derive(Debug, Clone)]
pub struct Totals {
    pub currency: String,
    pub captured: String,
    pub refunded: String,
}

#[derive(Debug, Clone)]
pub struct Dashboard {
    pub by_status: Vec<(String, i64)>,
    pub open_alerts: i64,
    pub today: Vec<Totals>,
}

pub async fn dashboard(db: &Db, now: Millis) -> Result<Dashboard> {
    let pool = db.read_pool();
    let day_start = now - now.rem_euclid(86_400_000);
    let by_status = crate::store::status_counts::by_status(db).await?;
    let open_alerts: i64 =
        sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE acknowledged = 0").fetch_one(pool).await?;
    let captured = sql::query(
        "SELECT a.currency, CAST(COALESCE(SUM(a.captured_minor), 0) AS BIGINT) AS total FROM payment_attempts a \
         JOIN status_events e ON e.entity = 'attempt' AND e.entity_id = a.attempt_ref AND e.to_status = 'succeeded' \
         WHERE e.at >= $1 GROUP BY a.currency ORDER BY a.currency",
    )
    .bind(day_start)
    .fetch_all(pool)
    .await?;
    let refunded = sql::query(
        "SELECT r.currency, CAST(COALESCE(SUM(r.amount_minor), 0) AS BIGINT) AS total FROM refunds r \
         JOIN status_events e ON e.entity = 'refund' AND e.entity_id = r.refund_no AND e.to_status = 'succeeded' \
         WHERE e.at >= $1 GROUP BY r.currency ORDER BY r.currency",
    )
    .bind(day_start)
    .fetch_all(pool)
    .await?;
    let mut today: Vec<Totals> = Vec::new();
    let mut amounts: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
    for r in &captured {
        amounts.entry(col(r, "currency")?).or_default().0 = col(r, "total")?;
    }
    for r in &refunded {
        amounts.entry(col(r, "currency")?).or_default().1 = col(r, "total")?;
    }
    for (currency, (c, f)) in amounts {
        today.push(Totals { captured: money(c, &currency), refunded: money(f, &currency), currency });
    }
    Ok(Dashboard { by_status, open_alerts, today })
}

#[derive(Debug, Clone)]
pub struct OrderRow {
    pub order_no: String,
    pub status: String,
    pub total: String,
    pub created_at: String,
}

/// Orders, newest first, optionally of one status and/or matching an order number, attempt
/// reference or gateway transaction id exactly.
pub async fn list_orders(db: &Db, status: Option<&str>, query: Option<&str>) -> Result<Vec<OrderRow>> {
    let status = match status.filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => match crate::domain::OrderStatus::parse(s) {
            Some(status) => Some(status),
            None => return Ok(Vec::new()),
        },
    };
    let filter = super::listing::OrderFilter { status, q: query.map(str::to_string), ..Default::default() };
    let (sql, args) = super::listing::order_query(
        "o.order_no, o.status, o.total_minor, o.currency, o.created_at",
        "orders o",
        &filter,
        None,
        LIST_LIMIT,
    );
    let rows = sql::query(&sql).bind_all(args).fetch_all(db.read_pool()).await?;
    rows.iter()
        .map(|r| {
            Ok(OrderRow {
                order_no: col(r, "order_no")?,
                status: col(r, "status")?,
                total: money(col(r, "total_minor")?, &col::<String>(r, "currency")?),
                created_at: rfc3339(col(r, "created_at")?),
            })
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct NotificationRow {
    pub id: String,
    pub received_at_ms: Millis,
    pub received_at: String,
    pub gateway: String,
    pub event_id: String,
    pub attempt_ref: String,
    pub status: String,
    pub reason: String,
}

/// Stored notifications, newest first, a page of [`LIST_LIMIT`] after `cursor`: of one order,
/// and/or only the rejected ones.
pub async fn notifications(
    db: &Db,
    order_no: Option<&ids::OrderNo>,
    only_rejected: bool,
    cursor: Option<&Cursor>,
) -> Result<Page<NotificationRow>> {
    let (at, key) = cursor.map_or((Millis::MAX, String::new()), |c| (c.at, c.key.clone()));
    let rows = sql::query(
        "SELECT n.id, n.received_at, n.gateway, n.claimed_event_id, n.attempt_ref, n.status, n.reason FROM notifications n \
         WHERE ($1 = '' OR n.order_no = $1 OR n.attempt_ref IN (SELECT attempt_ref FROM payment_attempts WHERE order_no = $1)) \
         AND ($2 = 0 OR n.status = 'rejected') AND (n.received_at < $3 OR (n.received_at = $3 AND n.id < $4)) \
         ORDER BY n.received_at DESC, n.id DESC LIMIT $5",
    )
    .bind(order_no.map_or("", ids::OrderNo::as_str))
    .bind(i64::from(only_rejected))
    .bind(at)
    .bind(key)
    .bind(LIST_LIMIT + 1)
    .fetch_all(db.read_pool())
    .await?;
    let items = rows
        .iter()
        .map(|r| {
            Ok(NotificationRow {
                id: col(r, "id")?,
                received_at_ms: col(r, "received_at")?,
                received_at: rfc3339(col(r, "received_at")?),
                gateway: col(r, "gateway")?,
                event_id: col::<Option<String>>(r, "claimed_event_id")?.unwrap_or_default(),
                attempt_ref: col::<Option<String>>(r, "attempt_ref")?.unwrap_or_default(),
                status: col(r, "status")?,
                reason: col::<Option<String>>(r, "reason")?.unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(listing::page(items, LIST_LIMIT, |n| Cursor { at: n.received_at_ms, key: n.id.clone() }))
}

#[derive(Debug, Clone)]
pub struct AlertRow {
    pub last_seen_ms: Millis,
    pub id: String,
    pub kind: String,
    pub severity: String,
    pub order_no: String,
    pub details: String,
    pub first_seen: String,
    pub last_seen: String,
    pub count: i64,
    pub acknowledged: bool,
}

/// Alerts, most recently seen first, a page of [`LIST_LIMIT`] after `cursor` (an alert seen again
/// meanwhile moves to the top, and is not shown twice on later pages).
pub async fn alerts(db: &Db, include_acknowledged: bool, cursor: Option<&Cursor>) -> Result<Page<AlertRow>> {
    let (at, key) = cursor.map_or((Millis::MAX, String::new()), |c| (c.at, c.key.clone()));
    let rows = sql::query(
        "SELECT id, kind, severity, order_no, details, first_seen, last_seen, count, acknowledged FROM alerts \
         WHERE ($1 = 1 OR acknowledged = 0) AND (last_seen < $2 OR (last_seen = $2 AND id < $3)) \
         ORDER BY last_seen DESC, id DESC LIMIT $4",
    )
    .bind(i64::from(include_acknowledged))
    .bind(at)
    .bind(key)
    .bind(LIST_LIMIT + 1)
    .fetch_all(db.read_pool())
    .await?;
    let items = rows
        .iter()
        .map(|r| {
            Ok(AlertRow {
                last_seen_ms: col(r, "last_seen")?,
                id: col(r, "id")?,
                kind: col(r, "kind")?,
                severity: col(r, "severity")?,
                order_no: col::<Option<String>>(r, "order_no")?.unwrap_or_default(),
                details: col(r, "details")?,
                first_seen: rfc3339(col(r, "first_seen")?),
                last_seen: rfc3339(col(r, "last_seen")?),
                count: col(r, "count")?,
                acknowledged: col::<i64>(r, "acknowledged")? != 0,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(listing::page(items, LIST_LIMIT, |a| Cursor { at: a.last_seen_ms, key: a.id.clone() }))
}

pub async fn acknowledge_alert(db: &Db, id: &str) -> Result<()> {
    crate::write_tx!(db, |tx| {
        sql::query("UPDATE alerts SET acknowledged = 1 WHERE id = $1").bind(id).execute(&mut **tx).await?;
        Ok(())
    })
}

#[derive(Debug, Clone)]
pub struct SkuRow {
    pub sku: SkuView,
    pub keys_unsold: Option<i64>,
    pub keys_delivered: Option<i64>,
}

impl SkuRow {
    /// The price in major units without the currency (`12.50`), as the edit form takes it.
    pub fn price_decimal(&self) -> String {
        crate::domain::money::decimal_minor(self.sku.price_minor, &self.sku.currency)
    }
}

pub async fn skus(db: &Db) -> Result<Vec<SkuRow>> {
    let mut out = Vec::new();
    for sku in list_skus(db).await? {
        let (keys_unsold, keys_delivered) = if sku.kind == "digital" {
            let count = |status: &'static str| {
                sql::query_scalar::<i64>(
                    "SELECT CAST(COUNT(*) AS BIGINT) FROM card_keys WHERE sku = $1 AND status = $2",
                )
                .bind(sku.sku.clone())
                .bind(status)
                .fetch_one(db.read_pool())
            };
            (Some(count("available").await?), Some(count("delivered").await?))
        } else {
            (None, None)
        };
        out.push(SkuRow { sku, keys_unsold, keys_delivered });
    }
    Ok(out)
}

/// A fresh refund number for the console's refund form (stable across a double submit).
pub fn suggest_refund_no() -> String {
    format!("ADM-{}", new_id().replace('-', ""))
}

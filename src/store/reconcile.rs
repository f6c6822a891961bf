//! What the reconciler looks at (attempts with no notification, attempts in `unknown`, late
//! payments, refunds still processing), claimed with a lease so a fleet shares the work, and the
//! findings it records.

use crate::store::sql;
use serde::Serialize;

use crate::clock::{Millis, rfc3339};
use crate::domain::ids::{AttemptRef, OrderNo, RefundNo};
use crate::domain::{AttemptStatus, Currency, Money, OrderStatus};
use crate::error::Result;
use crate::store::events::{self, Severity};
use crate::store::{Db, DbKind, col};

/// An attempt to query at its gateway.
#[derive(Debug, Clone)]
pub struct AttemptToQuery {
    pub attempt_ref: AttemptRef,
    pub order_no: OrderNo,
    pub gateway: String,
    pub gateway_ref: Option<String>,
    pub status: AttemptStatus,
    pub order_status: OrderStatus,
    pub tries: i64,
}

/// A refund to query at its gateway.
#[derive(Debug, Clone)]
pub struct RefundToQuery {
    pub refund_no: RefundNo,
    pub attempt_ref: AttemptRef,
    pub order_no: OrderNo,
    pub gateway: String,
    pub gateway_refund_id: Option<String>,
    pub gateway_txn_id: Option<String>,
    /// The refund returns a second capture (`gateway_txn_id` is that capture's).
    pub second_capture: bool,
    pub amount: Money,
    pub captured: Money,
    pub reason: String,
    pub tries: i64,
}

/// Which rows are due: `due_at` bounds `next_query_at` (`Millis::MAX` ignores the backoff), and
/// active attempts must be older than `created_before`.
#[derive(Debug, Clone, Copy)]
pub struct Due {
    pub now: Millis,
    pub due_at: Millis,
    pub created_before: Millis,
    pub lease_until: Millis,
    pub limit: i64,
}

/// Claims attempts to query: active ones older than the threshold or in `unknown`, and the
/// captured attempts of orders in `paid_after_expiry`.
pub async fn claim_attempts(db: &Db, due: Due) -> Result<Vec<AttemptToQuery>> {
    let refs = claim(db, &claim_attempts_sql(db.kind()), due).await?;
    let mut out = Vec::with_capacity(refs.len());
    for attempt_ref in refs {
        out.push(load_attempt(db, AttemptRef::stored(attempt_ref)).await?);
    }
    Ok(out)
}

/// Runs a claim (`UPDATE … SET next_query_at = $1 … RETURNING <key>` over rows due by `$2`,
/// older than `$3`, at most `$4`) and returns the claimed keys.
async fn claim(db: &Db, sql: &str, due: Due) -> Result<Vec<String>> {
    crate::write_tx!(db, |tx| {
        let rows = sql::query(sql)
            .bind(due.lease_until)
            .bind(due.due_at)
            .bind(due.created_before)
            .bind(due.limit)
            .fetch_all(&mut **tx)
            .await?;
        rows.iter().map(|r| r.try_get::<String>(0)).collect()
    })
}

/// An attempt with what a query needs, read after it was claimed.
async fn load_attempt(db: &Db, attempt_ref: AttemptRef) -> Result<AttemptToQuery> {
    let r = sql::query(
        "SELECT a.order_no, a.gateway, a.gateway_ref, a.status, a.query_tries, o.status AS order_status \
         FROM payment_attempts a JOIN orders o ON o.order_no = a.order_no WHERE a.attempt_ref = $1",
    )
    .bind(&attempt_ref)
    .fetch_one(db.read_pool())
    .await?;
    Ok(AttemptToQuery {
        order_no: OrderNo::stored(col::<String>(&r, "order_no")?),
        gateway: col(&r, "gateway")?,
        gateway_ref: col(&r, "gateway_ref")?,
        status: crate::store::payments::parse_attempt_status(&col::<String>(&r, "status")?)?,
        order_status: crate::store::payments::parse_order_status(&col::<String>(&r, "order_status")?)?,
        tries: col(&r, "query_tries")?,
        attempt_ref,
    })
}

/// The statement [`claim_attempts`] runs on a database of `kind`. Each half of the union
/// reaches its rows by a partial index (`payment_attempts_one_active` — the open attempts, which
/// also keeps one per order — and `orders_paid_after_expiry`), so a claim costs what is open or
/// due, not the shop's history; the plan is checked in `tests/api/plans.rs`.
pub fn claim_attempts_sql(kind: DbKind) -> String {
    let due = kind.claimed(
        "attempt_ref",
        &format!(
            "SELECT attempt_ref FROM payment_attempts WHERE attempt_ref IN (\
               SELECT attempt_ref FROM payment_attempts WHERE {active} AND next_query_at <= $2 \
                 AND (status = 'unknown' OR created_at <= $3) \
               UNION ALL \
               SELECT a.attempt_ref FROM orders o JOIN payment_attempts a ON a.attempt_ref = o.captured_attempt_ref \
                 WHERE o.status = 'paid_after_expiry' AND a.status = 'succeeded' AND a.next_query_at <= $2) \
             ORDER BY next_query_at LIMIT $4",
            active = AttemptStatus::active_sql("status")
        ),
    );
    format!("UPDATE payment_attempts SET next_query_at = $1 WHERE {due} RETURNING attempt_ref")
}

/// The statement [`claim_refunds`] runs on a database of `kind`, by `refunds_processing`.
pub fn claim_refunds_sql(kind: DbKind) -> String {
    let due = kind.claimed(
        "refund_no",
        "SELECT refund_no FROM refunds \
         WHERE status = 'processing' AND next_query_at <= $2 AND updated_at <= $3 ORDER BY next_query_at LIMIT $4",
    );
    format!("UPDATE refunds SET next_query_at = $1 WHERE {due} RETURNING refund_no")
}

/// Claims refunds still `processing` whose last change is older than the threshold.
pub async fn claim_refunds(db: &Db, due: Due) -> Result<Vec<RefundToQuery>> {
    let numbers = claim(db, &claim_refunds_sql(db.kind()), due).await?;
    let mut out = Vec::with_capacity(numbers.len());
    for refund_no in numbers {
        let r = sql::query(
            "SELECT r.attempt_ref, r.order_no, r.gateway_refund_id, r.amount_minor, r.currency, r.reason, r.query_tries, \
             a.gateway, COALESCE(r.gateway_txn_id, a.gateway_txn_id) AS gateway_txn_id, a.amount_minor AS captured_minor, \
             CAST(CASE WHEN r.gateway_txn_id IS NULL THEN 0 ELSE 1 END AS BIGINT) AS second_capture \
             FROM refunds r JOIN payment_attempts a ON a.attempt_ref = r.attempt_ref WHERE r.refund_no = $1",
        )
        .bind(&refund_no)
        .fetch_one(db.read_pool())
        .await?;
        let currency = Currency::parse(&col::<String>(&r, "currency")?)?;
        out.push(RefundToQuery {
            attempt_ref: AttemptRef::stored(col::<String>(&r, "attempt_ref")?),
            order_no: OrderNo::stored(col::<String>(&r, "order_no")?),
            gateway: col(&r, "gateway")?,
            gateway_refund_id: col(&r, "gateway_refund_id")?,
            gateway_txn_id: col(&r, "gateway_txn_id")?,
            second_capture: col::<i64>(&r, "second_capture")? == 1,
            amount: Money::new(col(&r, "amount_minor")?, currency)?,
            captured: Money::new(col(&r, "captured_minor")?, currency)?,
            reason: col(&r, "reason")?,
            tries: col(&r, "query_tries")?,
            refund_no: RefundNo::stored(refund_no),
        });
    }
    Ok(out)
}

/// When to look at an attempt again (`Millis::MAX`: settled, never again).
pub async fn reschedule_attempt(db: &Db, attempt_ref: &AttemptRef, tries: i64, next_at: Millis) -> Result<()> {
    reschedule(
        db,
        "UPDATE payment_attempts SET query_tries = $1, next_query_at = $2 WHERE attempt_ref = $3",
        attempt_ref,
        tries,
        next_at,
    )
    .await
}

/// When to look at a refund again.
pub async fn reschedule_refund(db: &Db, refund_no: &RefundNo, tries: i64, next_at: Millis) -> Result<()> {
    reschedule(
        db,
        "UPDATE refunds SET query_tries = $1, next_query_at = $2 WHERE refund_no = $3",
        refund_no,
        tries,
        next_at,
    )
    .await
}

async fn reschedule(db: &Db, sql: &str, key: &str, tries: i64, next_at: Millis) -> Result<()> {
    crate::write_tx!(db, |tx| {
        sql::query(sql).bind(tries).bind(next_at).bind(key).execute(&mut **tx).await?;
        Ok(())
    })
}

/// A difference between kassa and a gateway, and what was done about it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Finding {
    pub kind: &'static str,
    pub gateway: String,
    pub order_no: String,
    pub attempt_ref: String,
    pub refund_no: Option<String>,
    pub ours: String,
    pub theirs: String,
    pub action: String,
}

/// Records a finding and raises (or re-raises) its alert, in one transaction.
pub async fn record_finding(db: &Db, f: &Finding, severity: Severity, now: Millis) -> Result<()> {
    crate::write_tx!(db, |tx| {
        sql::query(
            "INSERT INTO reconciliation_findings (kind, gateway, order_no, attempt_ref, refund_no, ours, theirs, action, found_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(f.kind)
        .bind(&f.gateway)
        .bind(&f.order_no)
        .bind(&f.attempt_ref)
        .bind(&f.refund_no)
        .bind(&f.ours)
        .bind(&f.theirs)
        .bind(&f.action)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        let key = format!("{}:{}", f.kind, f.refund_no.as_deref().unwrap_or(&f.attempt_ref));
        let details = format!(
            "{} {}: kassa had {}, {} says {}; {}",
            f.kind,
            f.refund_no.as_deref().unwrap_or(&f.attempt_ref),
            f.ours,
            f.gateway,
            f.theirs,
            f.action
        );
        events::raise_alert(tx, "reconcile_discrepancy", severity, &key, Some(&f.order_no), &details, now).await?;
        Ok(())
    })
}

/// A stored finding, newest first, for the operator.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct FindingView {
    pub kind: String,
    pub gateway: String,
    pub order_no: Option<String>,
    pub attempt_ref: Option<String>,
    pub refund_no: Option<String>,
    pub ours: String,
    pub theirs: String,
    pub action: String,
    pub found_at: String,
}

pub async fn list_findings(db: &Db, order_no: Option<&OrderNo>, limit: i64) -> Result<Vec<FindingView>> {
    let filter = if order_no.is_some() { "WHERE order_no = $2" } else { "" };
    let sql = format!(
        "SELECT kind, gateway, order_no, attempt_ref, refund_no, ours, theirs, action, found_at \
         FROM reconciliation_findings {filter} ORDER BY id DESC LIMIT $1"
    );
    let mut q = sql::query(&sql).bind(limit);
    if let Some(o) = order_no {
        q = q.bind(o);
    }
    let rows = q.fetch_all(db.read_pool()).await?;
    rows.iter()
        .map(|r| {
            Ok(FindingView {
                kind: col(r, "kind")?,
                gateway: col(r, "gateway")?,
                order_no: col(r, "order_no")?,
                attempt_ref: col(r, "attempt_ref")?,
                refund_no: col(r, "refund_no")?,
                ours: col(r, "ours")?,
                theirs: col(r, "theirs")?,
                action: col(r, "action")?,
                found_at: rfc3339(col(r, "found_at")?),
            })
        })
        .collect()
}

/// Claims an active attempt for an on-demand query (the buyer is waiting on the return page or
/// polling with `refresh`): at most once per `min_gap_ms` per attempt, across the fleet.
pub async fn claim_for_buyer(
    db: &Db,
    attempt_ref: &AttemptRef,
    now: Millis,
    min_gap_ms: Millis,
) -> Result<Option<AttemptToQuery>> {
    let claimed = crate::write_tx!(db, |tx| {
        let r = sql::query(&format!(
            "UPDATE payment_attempts SET next_query_at = $1 WHERE attempt_ref = $2 AND next_query_at <= $3 AND {}",
            AttemptStatus::active_sql("status")
        ))
        .bind(now.saturating_add(min_gap_ms))
        .bind(attempt_ref)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        Ok(r.rows_affected() == 1)
    })?;
    if !claimed {
        return Ok(None);
    }
    load_attempt(db, attempt_ref.clone()).await.map(Some)
}

//! Refunds: requested under the order lock (never more than captured), sent to the gateway outside
//! any transaction by the refund worker, settled by the gateway's answer or refund notification.
//! The same refund number always means the same refund, so it pays out once.

use crate::store::sql;
use serde::Serialize;

use crate::args;
use crate::clock::{Millis, rfc3339};
use crate::domain::ids::{AttemptRef, OrderNo, RefundNo};
use crate::domain::refund::{self, RefundPolicy, RefundRequest, RefundTotals};
use crate::domain::status::RefundStatus;
use crate::domain::{Money, OrderStatus};
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::events::{self, Cause, Severity};
use crate::store::outbox::{self, RefundFacts};
use crate::store::promotion_uses;
use crate::store::{Db, Tx, col};

use crate::domain::refund::RefundKind;
/// Send tries before a refund is given up as failed (and alerted).
pub const REFUND_TRIES_MAX: i64 = 10;

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RefundView {
    pub refund_no: String,
    pub order_no: String,
    pub attempt_ref: String,
    #[schema(schema_with = crate::store::views::refund_status_schema)]
    pub status: RefundStatus,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    pub kind: String,
    /// The gateway's fee returned (negative) or charged on this refund, from its statement
    /// (absent until a statement showed the refund).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fee_minor: Option<i64>,
    pub created_at: String,
}

impl RefundView {
    /// The gateway's fee on the refund as money (negative: returned), empty until a statement
    /// showed it.
    pub fn fee_display(&self) -> String {
        self.fee_minor.map(|f| crate::domain::money::format_minor(f, &self.currency)).unwrap_or_default()
    }

    pub fn amount_display(&self) -> String {
        crate::domain::money::format_minor(self.amount_minor, &self.currency)
    }
}

fn view(r: &sql::Row) -> Result<RefundView> {
    Ok(RefundView {
        refund_no: col(r, "refund_no")?,
        order_no: col(r, "order_no")?,
        attempt_ref: col(r, "attempt_ref")?,
        status: col(r, "status")?,
        amount_minor: col(r, "amount_minor")?,
        currency: col(r, "currency")?,
        reason: col(r, "reason")?,
        kind: col(r, "kind")?,
        fee_minor: col(r, "fee_minor")?,
        created_at: rfc3339(col(r, "created_at")?),
    })
}

const COLUMNS: &str =
    "refund_no, order_no, attempt_ref, status, amount_minor, currency, reason, kind, fee_minor, created_at";

pub async fn list_for_order(db: &Db, order_no: &OrderNo) -> Result<Vec<RefundView>> {
    let rows = sql::query(&format!("SELECT {COLUMNS} FROM refunds WHERE order_no = $1 ORDER BY created_at, refund_no"))
        .bind(order_no)
        .fetch_all(db.read_pool())
        .await?;
    rows.iter().map(view).collect()
}

pub async fn get(db: &Db, refund_no: &RefundNo) -> Result<RefundView> {
    let row = sql::query(&format!("SELECT {COLUMNS} FROM refunds WHERE refund_no = $1"))
        .bind(refund_no)
        .fetch_optional(db.read_pool())
        .await?
        .ok_or_else(|| Error::not_found("refund"))?;
    view(&row)
}

/// A merchant refund of a paid order. Idempotent on `refund_no`: the same number with the same
/// terms (order, amount, reason) answers the refund made first; with other terms it is refused
/// (`refund_no_reused`). Refused, and not stored, when the order's refunds would exceed what was
/// captured; checked under the order lock, so concurrent requests cannot together exceed it.
/// The order keeps its status unless the refunds in flight now cover the whole capture. The
/// shop's [`RefundPolicy`] decides, with the other rules, whether it may go ahead.
pub async fn request(
    db: &Db,
    policy: RefundPolicy,
    order_no: &OrderNo,
    refund_no: &RefundNo,
    amount_minor: i64,
    reason: &str,
    now: Millis,
) -> Result<(RefundView, bool)> {
    let ask = RefundAsk { amount_minor: Some(amount_minor), reason: reason.to_string(), ..RefundAsk::default() };
    request_asked(db, policy, order_no, refund_no, &ask, now).await
}

/// What a merchant's refund asks for: an amount, or units of named lines (line number, units:
/// what was paid for them, the discount shared out); and whether the refund, once it leaves
/// nothing captured, gives the order's promotion use back.
#[derive(Debug, Clone, Default)]
pub struct RefundAsk {
    pub amount_minor: Option<i64>,
    pub lines: Vec<(i64, i64)>,
    pub reason: String,
    pub return_promotion: bool,
}

/// [`request`] of an amount or of lines ([`RefundAsk`]).
pub async fn request_asked(
    db: &Db,
    policy: RefundPolicy,
    order_no: &OrderNo,
    refund_no: &RefundNo,
    ask: &RefundAsk,
    now: Millis,
) -> Result<(RefundView, bool)> {
    match (ask.amount_minor, ask.lines.is_empty()) {
        (Some(amount), true) => refund::check_amount(amount)?,
        (None, false) => {}
        _ => {
            return Err(Error::unprocessable("invalid_amount", "give either amount_minor or lines"));
        }
    }
    let reason = refund::clean_reason(&ask.reason);
    let mut asked_lines = ask.lines.clone();
    asked_lines.sort_unstable();
    let lock = db.for_update();
    let created = crate::write_tx!(db, |tx| {
        let order = sql::query(&format!("SELECT status FROM orders WHERE order_no = $1{lock}"))
            .bind(order_no)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| Error::not_found("order"))?;
        let existing = sql::query(
            "SELECT order_no, amount_minor, reason, kind, return_promotion FROM refunds WHERE refund_no = $1",
        )
        .bind(refund_no)
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(r) = existing {
            let stored_lines: Vec<(i64, i64)> =
                sql::query("SELECT line_no, quantity FROM refund_lines WHERE refund_no = $1 ORDER BY line_no")
                    .bind(refund_no)
                    .fetch_all(&mut **tx)
                    .await?
                    .iter()
                    .map(|l| Ok((col(l, "line_no")?, col(l, "quantity")?)))
                    .collect::<Result<_>>()?;
            let same_ask = match ask.amount_minor {
                Some(amount) => stored_lines.is_empty() && col::<i64>(&r, "amount_minor")? == amount,
                None => stored_lines == asked_lines,
            };
            let same = col::<String>(&r, "order_no")? == order_no.as_str()
                && same_ask
                && (col::<i64>(&r, "return_promotion")? == 1) == ask.return_promotion
                && col::<String>(&r, "reason")? == reason
                && col::<String>(&r, "kind")? == RefundKind::Merchant.as_str();
            refund::may_repeat_refund_no(same)?;
            return Ok(false);
        }
        let status =
            OrderStatus::parse(&col::<String>(&order, "status")?).ok_or_else(|| Error::internal("bad status"))?;
        let totals = order_totals(tx, order_no).await?;
        let parts = match ask.amount_minor {
            Some(_) => Vec::new(),
            None => refund::line_refund(&paid_lines(tx, order_no).await?, &ask.lines)?,
        };
        let amount_minor = ask.amount_minor.unwrap_or_else(|| parts.iter().map(|p| p.2).sum());
        // When the payment was captured: only the window needs it, so only then is it read.
        let paid_at = match policy.window_days {
            Some(_) => paid_at(tx, order_no).await?,
            None => None,
        };
        let asked = RefundRequest { status, totals, amount: amount_minor, paid_at, now };
        let to = refund::decide_request(policy, asked)?;
        let attempt = paid_attempt(tx, order_no).await?;
        insert(tx, order_no, &attempt, refund_no, amount_minor, &reason, RefundKind::Merchant, now).await?;
        add_lines(tx, refund_no, &parts, ask.return_promotion).await?;
        if let Some(to) = to {
            let cause = Cause { trigger: "refund_requested", notification_id: None, at: now };
            start_refunding(tx, order_no, status, to, cause).await?;
        }
        Ok(true)
    })?;
    Ok((get(db, refund_no).await?, created))
}

/// The order's lines as a refund by line reads them: units, what was paid for them, and the units
/// refunded by line already (refunds not failed).
async fn paid_lines(tx: &mut Tx<'_>, order_no: &str) -> Result<Vec<refund::PaidLine>> {
    let rows = sql::query(
        "SELECT l.line_no, l.quantity, l.line_total_minor - l.discount_minor AS paid, \
         CAST(COALESCE((SELECT SUM(rl.quantity) FROM refund_lines rl JOIN refunds r ON r.refund_no = rl.refund_no \
         WHERE r.order_no = $1 AND r.status <> 'failed' AND rl.line_no = l.line_no), 0) AS BIGINT) AS refunded \
         FROM order_lines l WHERE l.order_no = $1 ORDER BY l.line_no",
    )
    .bind(order_no)
    .fetch_all(&mut **tx)
    .await?;
    rows.iter()
        .map(|r| {
            Ok(refund::PaidLine {
                line_no: col(r, "line_no")?,
                quantity: col(r, "quantity")?,
                paid_minor: col(r, "paid")?,
                refunded_units: col(r, "refunded")?,
            })
        })
        .collect()
}

/// A refund's lines (line, units, amount), and whether it gives the promotion use back.
async fn add_lines(tx: &mut Tx<'_>, refund_no: &str, parts: &[(i64, i64, i64)], return_promotion: bool) -> Result<()> {
    let mut batch = Batch::new();
    for (line_no, units, amount) in parts {
        batch.expect(
            "INSERT INTO refund_lines (refund_no, line_no, quantity, amount_minor) VALUES ($1, $2, $3, $4)",
            args![refund_no, *line_no, *units, *amount],
            1,
            "refund line insert",
        );
    }
    if return_promotion {
        batch.expect(
            "UPDATE refunds SET return_promotion = 1 WHERE refund_no = $1",
            args![refund_no],
            1,
            "refund promotion flag",
        );
    }
    batch.run_checked(tx).await
}

/// When the order's payment was captured: its capturing attempt's `succeeded` event.
async fn paid_at(tx: &mut Tx<'_>, order_no: &str) -> Result<Option<Millis>> {
    sql::query_scalar(
        "SELECT MIN(e.at) FROM status_events e JOIN orders o ON o.captured_attempt_ref = e.entity_id \
         WHERE o.order_no = $1 AND e.order_no = $1 AND e.entity = 'attempt' AND e.to_status = 'succeeded'",
    )
    .bind(order_no)
    .fetch_one(&mut **tx)
    .await
}

/// What the order's own refunds add up to (a duplicate payment's refund is not the order's).
pub(super) async fn order_totals(tx: &mut Tx<'_>, order_no: &str) -> Result<RefundTotals> {
    let row = sql::query(
        "SELECT o.captured_minor, \
         CAST(COALESCE(SUM(CASE WHEN r.status <> 'failed' THEN r.amount_minor ELSE 0 END), 0) AS BIGINT) AS committed, \
         CAST(COALESCE(SUM(CASE WHEN r.status = 'succeeded' THEN r.amount_minor ELSE 0 END), 0) AS BIGINT) AS succeeded, \
         CAST(COALESCE(SUM(CASE WHEN r.status IN ('requested', 'processing') THEN 1 ELSE 0 END), 0) AS BIGINT) AS open \
         FROM orders o LEFT JOIN refunds r ON r.order_no = o.order_no AND r.kind <> 'duplicate_payment' \
         WHERE o.order_no = $1 GROUP BY o.order_no, o.captured_minor",
    )
    .bind(order_no)
    .fetch_one(&mut **tx)
    .await?;
    Ok(RefundTotals {
        captured: col::<Option<i64>>(&row, "captured_minor")?.unwrap_or(0),
        committed: col(&row, "committed")?,
        succeeded: col(&row, "succeeded")?,
        open: col(&row, "open")?,
    })
}

/// The attempt that captured the order's money.
async fn paid_attempt(tx: &mut Tx<'_>, order_no: &str) -> Result<String> {
    let captured: Option<String> = sql::query_scalar("SELECT captured_attempt_ref FROM orders WHERE order_no = $1")
        .bind(order_no)
        .fetch_one(&mut **tx)
        .await?;
    captured.ok_or_else(|| refund::nothing_captured().into())
}

/// Inserts a refund after checking that the attempt's refunds (not failed) stay within what it
/// captured. The caller holds the order lock.
#[allow(clippy::too_many_arguments)]
pub(super) async fn insert(
    tx: &mut Tx<'_>,
    order_no: &str,
    attempt_ref: &str,
    refund_no: &str,
    amount_minor: i64,
    reason: &str,
    kind: RefundKind,
    now: Millis,
) -> Result<()> {
    let refund = NewRefund {
        order_no,
        attempt_ref,
        refund_no,
        amount_minor,
        reason,
        kind,
        returns: None,
        notification_id: None,
    };
    insert_refund(tx, &refund, now).await
}

/// A refund to record.
pub struct NewRefund<'a> {
    pub order_no: &'a str,
    pub attempt_ref: &'a str,
    pub refund_no: &'a str,
    pub amount_minor: i64,
    pub reason: &'a str,
    pub kind: RefundKind,
    /// The second capture it returns, when it is not the attempt's own: its gateway transaction
    /// id, and whether it is being recorded in this transaction (then it is not counted yet).
    pub returns: Option<(&'a str, bool)>,
    /// The gateway notification that made kassa refund, if one did (its creation is that
    /// notification's one transition).
    pub notification_id: Option<&'a str>,
}

/// Records a refund: within what its attempt captured (its own capture and any second ones), and
/// with its `refund.requested` message.
pub async fn insert_refund(tx: &mut Tx<'_>, new: &NewRefund<'_>, now: Millis) -> Result<()> {
    let NewRefund { order_no, attempt_ref, refund_no, amount_minor, reason, kind, returns, notification_id } = *new;
    let a = sql::query(
        "SELECT captured_minor, currency,          CAST((SELECT COALESCE(SUM(c.amount_minor), 0) FROM second_captures c WHERE c.attempt_ref = $1) AS BIGINT) AS again          FROM payment_attempts WHERE attempt_ref = $1",
    )
    .bind(attempt_ref)
    .fetch_one(&mut **tx)
    .await?;
    let being_recorded = if matches!(returns, Some((_, true))) { amount_minor } else { 0 };
    let captured: i64 =
        col::<Option<i64>>(&a, "captured_minor")?.unwrap_or(0) + col::<i64>(&a, "again")? + being_recorded;
    let committed: i64 = sql::query_scalar(
        "SELECT CAST(COALESCE(SUM(amount_minor), 0) AS BIGINT) FROM refunds WHERE attempt_ref = $1 AND status <> 'failed'",
    )
    .bind(attempt_ref)
    .fetch_one(&mut **tx)
    .await?;
    refund::check_within_capture(captured, committed, amount_minor)?;
    let reason = refund::clean_reason(reason);
    let currency: String = col(&a, "currency")?;
    sql::query(
        "INSERT INTO refunds (refund_no, order_no, attempt_ref, amount_minor, currency, reason, kind, status, tries, next_at, lease_until, created_at, updated_at, gateway_txn_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, 'requested', 0, $8, 0, $8, $8, $9)",
    )
    .bind(refund_no)
    .bind(order_no)
    .bind(attempt_ref)
    .bind(amount_minor)
    .bind(&currency)
    .bind(&reason)
    .bind(kind.as_str())
    .bind(now)
    .bind(returns.map(|(txn, _)| txn))
    .execute(&mut **tx)
    .await?;
    events::log_refund_created(tx, order_no, refund_no, Cause { trigger: kind.as_str(), notification_id, at: now })
        .await?;
    let refunded_minor = order_totals(tx, order_no).await?.succeeded;
    let facts = RefundFacts {
        refund_no,
        order_no,
        status: RefundStatus::Requested,
        amount_minor,
        currency: &currency,
        kind: kind.as_str(),
        refunded_minor,
    };
    let mut batch = Batch::new();
    outbox::add_refund_event(tx, &mut batch, &facts, now).await?;
    batch.run_checked(tx).await?;
    metrics::counter!("kassa_refunds_total", "result" => "requested").increment(1);
    Ok(())
}

/// Moves an order into `to` (`refunding`), remembering where it returns if the refunds end up
/// not covering the capture.
pub(super) async fn start_refunding(
    tx: &mut Tx<'_>,
    order_no: &str,
    from: OrderStatus,
    to: OrderStatus,
    cause: Cause<'_>,
) -> Result<()> {
    sql::query("UPDATE orders SET pre_refund_status = $1 WHERE order_no = $2")
        .bind(from.as_str())
        .bind(order_no)
        .execute(&mut **tx)
        .await?;
    events::set_order_status(tx, order_no, from, to, cause).await
}

/// A refund to send now.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub refund_no: RefundNo,
    pub order_no: OrderNo,
    pub attempt_ref: AttemptRef,
    pub gateway: String,
    pub amount: Money,
    pub reason: String,
    pub tries: i64,
    /// What the attempt captured, and the gateway's transaction id of that capture.
    pub captured: Money,
    pub gateway_txn_id: Option<String>,
    /// The refund returns a second capture on the attempt (`gateway_txn_id` is that capture's),
    /// so the gateway must be told the transaction, not only the merchant reference.
    pub second_capture: bool,
}

/// Claims requested refunds that are due, for `lease_ms`.
pub async fn claim(db: &Db, only: Option<&RefundNo>, now: Millis, lease_ms: i64, limit: i64) -> Result<Vec<Outgoing>> {
    let filter = if only.is_some() { " AND refund_no = $4" } else { "" };
    let due = db.kind().claimed(
        "refund_no",
        &format!(
            "SELECT refund_no FROM refunds WHERE status = 'requested' \
             AND next_at <= $2 AND lease_until <= $2{filter} ORDER BY next_at LIMIT $3"
        ),
    );
    let sql = format!("UPDATE refunds SET lease_until = $1 WHERE {due} RETURNING refund_no");
    let rows = crate::write_tx!(db, |tx| {
        let mut q = sql::query(&sql).bind(now.saturating_add(lease_ms)).bind(now).bind(limit);
        if let Some(no) = only {
            q = q.bind(no);
        }
        let rows = q.fetch_all(&mut **tx).await?;
        rows.iter().map(|r| col::<String>(r, "refund_no")).collect::<Result<Vec<_>>>()
    })?;
    let mut out = Vec::with_capacity(rows.len());
    for refund_no in rows {
        let r = sql::query(
            "SELECT r.refund_no, r.order_no, r.attempt_ref, r.amount_minor, r.currency, r.reason, r.tries, a.gateway, \
             a.amount_minor AS captured_minor, COALESCE(r.gateway_txn_id, a.gateway_txn_id) AS gateway_txn_id, \
             CAST(CASE WHEN r.gateway_txn_id IS NULL THEN 0 ELSE 1 END AS BIGINT) AS second_capture \
             FROM refunds r JOIN payment_attempts a ON a.attempt_ref = r.attempt_ref WHERE r.refund_no = $1",
        )
        .bind(&refund_no)
        .fetch_one(db.read_pool())
        .await?;
        let currency = crate::domain::Currency::parse(&col::<String>(&r, "currency")?)?;
        out.push(Outgoing {
            captured: Money::new(col(&r, "captured_minor")?, currency)?,
            gateway_txn_id: col(&r, "gateway_txn_id")?,
            second_capture: col::<i64>(&r, "second_capture")? == 1,
            refund_no: RefundNo::stored(refund_no),
            order_no: OrderNo::stored(col::<String>(&r, "order_no")?),
            attempt_ref: AttemptRef::stored(col::<String>(&r, "attempt_ref")?),
            gateway: col(&r, "gateway")?,
            amount: Money::new(
                col(&r, "amount_minor")?,
                crate::domain::Currency::parse(&col::<String>(&r, "currency")?)?,
            )?,
            reason: col(&r, "reason")?,
            tries: col(&r, "tries")?,
        });
    }
    Ok(out)
}

/// The gateway accepted the refund for processing (its result comes by notification or query).
pub async fn mark_processing(db: &Db, refund_no: &RefundNo, gateway_refund_id: &str, now: Millis) -> Result<()> {
    let lock = db.for_update();
    crate::write_tx!(db, |tx| {
        let order_no = lock_refund_order(tx, lock, refund_no).await?;
        let status = refund_status(tx, refund_no).await?;
        if status == RefundStatus::Requested {
            sql::query("UPDATE refunds SET gateway_refund_id = $1, lease_until = 0 WHERE refund_no = $2")
                .bind(gateway_refund_id)
                .bind(refund_no)
                .execute(&mut **tx)
                .await?;
            let cause = Cause { trigger: "sent_to_gateway", notification_id: None, at: now };
            events::set_refund_status(tx, &order_no, refund_no, status, RefundStatus::Processing, cause).await?;
        }
        Ok(())
    })
}

/// The send failed in transit: try again later, or give up after [`REFUND_TRIES_MAX`].
pub async fn retry_later(
    db: &Db,
    refund_no: &RefundNo,
    tries: i64,
    next_at: Millis,
    error: &str,
    now: Millis,
) -> Result<()> {
    if tries >= REFUND_TRIES_MAX {
        return settle(db, refund_no, false, &format!("gateway unreachable after {tries} tries: {error}"), None, now)
            .await
            .map(|_| ());
    }
    crate::write_tx!(db, |tx| {
        sql::query("UPDATE refunds SET tries = $1, next_at = $2, lease_until = 0, failure = $3 WHERE refund_no = $4")
            .bind(tries)
            .bind(next_at)
            .bind(error)
            .bind(refund_no)
            .execute(&mut **tx)
            .await?;
        Ok(())
    })
}

async fn lock_refund_order(tx: &mut Tx<'_>, lock: &str, refund_no: &str) -> Result<String> {
    let order_no: String = sql::query_scalar("SELECT order_no FROM refunds WHERE refund_no = $1")
        .bind(refund_no)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or_else(|| Error::not_found("refund"))?;
    sql::query(&format!("SELECT status FROM orders WHERE order_no = $1{lock}"))
        .bind(&order_no)
        .fetch_one(&mut **tx)
        .await?;
    Ok(order_no)
}

async fn refund_status(tx: &mut Tx<'_>, refund_no: &str) -> Result<RefundStatus> {
    let s: String = sql::query_scalar("SELECT status FROM refunds WHERE refund_no = $1")
        .bind(refund_no)
        .fetch_one(&mut **tx)
        .await?;
    RefundStatus::parse(&s).ok_or_else(|| Error::internal("bad refund status"))
}

/// Settles a refund in its own transaction (used by the worker for synchronous answers).
pub async fn settle(
    db: &Db,
    refund_no: &RefundNo,
    succeeded: bool,
    detail: &str,
    notification_id: Option<&str>,
    now: Millis,
) -> Result<bool> {
    let lock = db.for_update();
    crate::write_tx!(db, |tx| {
        let order_no = lock_refund_order(tx, lock, refund_no).await?;
        settle_locked(tx, &order_no, refund_no, succeeded, detail, notification_id, now).await
    })
}

/// Settles a refund; the caller holds the order lock. Returns whether anything changed (a refund
/// already settled is left alone: a duplicated refund notification pays out nothing).
pub(super) async fn settle_locked(
    tx: &mut Tx<'_>,
    order_no: &str,
    refund_no: &str,
    succeeded: bool,
    detail: &str,
    notification_id: Option<&str>,
    now: Millis,
) -> Result<bool> {
    let status = refund_status(tx, refund_no).await?;
    if !status.is_open() {
        return Ok(false);
    }
    let to = if succeeded { RefundStatus::Succeeded } else { RefundStatus::Failed };
    let cause =
        Cause { trigger: if succeeded { "refund_succeeded" } else { "refund_failed" }, notification_id, at: now };
    events::set_refund_status(tx, order_no, refund_no, status, to, cause).await?;
    sql::query("UPDATE refunds SET lease_until = 0, failure = $1 WHERE refund_no = $2")
        .bind(if succeeded { None } else { Some(detail) })
        .bind(refund_no)
        .execute(&mut **tx)
        .await?;
    metrics::counter!("kassa_refunds_total", "result" => to.as_str()).increment(1);
    if !succeeded {
        events::raise_alert(tx, "refund_failed", Severity::Critical, refund_no, Some(order_no), detail, now).await?;
    }
    let refund = sql::query("SELECT amount_minor, currency, kind FROM refunds WHERE refund_no = $1")
        .bind(refund_no)
        .fetch_one(&mut **tx)
        .await?;
    let totals = order_totals(tx, order_no).await?;
    let facts = RefundFacts {
        refund_no,
        order_no,
        status: to,
        amount_minor: col(&refund, "amount_minor")?,
        currency: &col::<String>(&refund, "currency")?,
        kind: &col::<String>(&refund, "kind")?,
        refunded_minor: totals.succeeded,
    };
    let mut batch = Batch::new();
    outbox::add_refund_event(tx, &mut batch, &facts, now).await?;
    batch.run_checked(tx).await?;
    // The order moves only when it is refunding: to `refunded` once everything captured went
    // back, or back to where it was when a failure leaves part of the capture unrefunded.
    let order = sql::query("SELECT status, pre_refund_status FROM orders WHERE order_no = $1")
        .bind(order_no)
        .fetch_one(&mut **tx)
        .await?;
    let status =
        OrderStatus::parse(&col::<String>(&order, "status")?).ok_or_else(|| Error::internal("bad order status"))?;
    let back = col::<Option<String>>(&order, "pre_refund_status")?
        .as_deref()
        .and_then(OrderStatus::parse)
        .unwrap_or(OrderStatus::Paid);
    if let Some(next) = refund::decide_settled(status, back, totals) {
        let cause = Cause { trigger: "refunds_settled", notification_id: None, at: now };
        events::set_order_status(tx, order_no, status, next, cause).await?;
        if next == OrderStatus::Refunded && returns_promotion(tx, order_no).await? {
            promotion_uses::give_back(tx, order_no, now).await?;
        }
    }
    Ok(true)
}

/// Whether a refund of the order that went through asked to give its promotion use back.
async fn returns_promotion(tx: &mut Tx<'_>, order_no: &str) -> Result<bool> {
    let found: Option<i64> = sql::query_scalar(
        "SELECT 1 FROM refunds WHERE order_no = $1 AND return_promotion = 1 AND status = 'succeeded' LIMIT 1",
    )
    .bind(order_no)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(found.is_some())
}

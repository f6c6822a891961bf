//! Status changes and alerts. The only place that writes `status` columns of orders and attempts:
//! each change is checked against the transition table and logged in the same transaction.

use crate::store::Conn;
use crate::store::sql;

use crate::args;
use crate::clock::Millis;
use crate::domain::status::RefundStatus;
use crate::domain::{AttemptStatus, OrderStatus};
use crate::error::{Error, Result};
use crate::store::batch::{Arg, Batch};

/// Other columns a status update sets in the same statement (one statement, not two, for a
/// change that always comes with its status: a capture with `succeeded`, with `paid`):
/// `set` is `column = $5, …`, numbered after the status update's own four parameters.
#[derive(Debug, Default)]
pub struct Also<'a> {
    pub set: &'a str,
    pub args: Vec<Arg>,
}

/// The status update's SQL with `also`'s columns, and all its values.
fn status_update(table: &str, key: &str, also: Also<'_>, base: Vec<Arg>) -> (String, Vec<Arg>) {
    let extra = if also.set.is_empty() { String::new() } else { format!(", {}", also.set) };
    let sql = format!("UPDATE {table} SET status = $1, updated_at = $2{extra} WHERE {key} = $3 AND status = $4");
    let mut args = base;
    args.extend(also.args);
    (sql, args)
}

/// Why a status changed; stored in the event log.
#[derive(Debug, Clone, Copy)]
pub struct Cause<'a> {
    pub trigger: &'a str,
    pub notification_id: Option<&'a str>,
    pub at: Millis,
}

pub async fn log_order_created(conn: &mut Conn, order_no: &str, cause: Cause<'_>) -> Result<()> {
    insert_event(conn, order_no, "order", order_no, None, OrderStatus::PendingPayment.as_str(), cause).await
}

pub(super) async fn log_attempt_created(
    conn: &mut Conn,
    order_no: &str,
    attempt_ref: &str,
    cause: Cause<'_>,
) -> Result<()> {
    insert_event(conn, order_no, "attempt", attempt_ref, None, AttemptStatus::Created.as_str(), cause).await
}

/// Moves an order `from -> to`; fails if the table forbids it or the row is not in `from` any more.
pub(super) async fn set_order_status(
    conn: &mut Conn,
    order_no: &str,
    from: OrderStatus,
    to: OrderStatus,
    cause: Cause<'_>,
) -> Result<()> {
    let mut batch = Batch::new();
    add_order_status(conn, &mut batch, order_no, from, to, cause).await?;
    batch.run_checked(conn).await
}

/// [`set_order_status`] as part of a batch: checks the transition, reads what the outbox message
/// carries, and adds the update, its log row and the message.
pub(super) async fn add_order_status(
    conn: &mut Conn,
    batch: &mut Batch,
    order_no: &str,
    from: OrderStatus,
    to: OrderStatus,
    cause: Cause<'_>,
) -> Result<()> {
    add_order_update(batch, order_no, from, to, cause, Also::default())?;
    // The shop's own systems hear about it through the outbox, in this same transaction.
    super::outbox::add_order_event(conn, batch, order_no, from, to, cause.at).await
}

/// [`add_order_status`] when the caller already knows what the outbox message carries (which must
/// then include what `also` sets).
pub(super) fn add_order_status_with(
    batch: &mut Batch,
    order_no: &str,
    from: OrderStatus,
    to: OrderStatus,
    cause: Cause<'_>,
    facts: &super::outbox::OrderFacts<'_>,
    also: Also<'_>,
) -> Result<()> {
    add_order_update(batch, order_no, from, to, cause, also)?;
    super::outbox::add_order_event_with(batch, order_no, from, to, facts, cause.at);
    Ok(())
}

/// The checked transition, the status update and its log row.
fn add_order_update(
    batch: &mut Batch,
    order_no: &str,
    from: OrderStatus,
    to: OrderStatus,
    cause: Cause<'_>,
    also: Also<'_>,
) -> Result<()> {
    from.transition(to)?;
    let (sql, values) =
        status_update("orders", "order_no", also, args![to.as_str(), cause.at, order_no, from.as_str()]);
    batch.expect(&sql, values, 1, format!("order {order_no} was not in {from} when moving to {to}"));
    add_event(batch, order_no, "order", order_no, Some(from.as_str()), to.as_str(), cause);
    Ok(())
}

pub(super) async fn log_refund_created(
    conn: &mut Conn,
    order_no: &str,
    refund_no: &str,
    cause: Cause<'_>,
) -> Result<()> {
    insert_event(conn, order_no, "refund", refund_no, None, RefundStatus::Requested.as_str(), cause).await
}

pub(super) async fn set_refund_status(
    conn: &mut Conn,
    order_no: &str,
    refund_no: &str,
    from: RefundStatus,
    to: RefundStatus,
    cause: Cause<'_>,
) -> Result<()> {
    from.transition(to)?;
    let mut batch = Batch::new();
    batch.add(
        "UPDATE refunds SET status = $1, updated_at = $2 WHERE refund_no = $3 AND status = $4",
        args![to.as_str(), cause.at, refund_no, from.as_str()],
    );
    add_event(&mut batch, order_no, "refund", refund_no, Some(from.as_str()), to.as_str(), cause);
    if batch.run(conn).await? != 2 {
        return Err(Error::internal(format!("refund {refund_no} was not in {from} when moving to {to}")));
    }
    Ok(())
}

pub(super) async fn set_attempt_status(
    conn: &mut Conn,
    order_no: &str,
    attempt_ref: &str,
    from: AttemptStatus,
    to: AttemptStatus,
    cause: Cause<'_>,
) -> Result<()> {
    let mut batch = Batch::new();
    add_attempt_status(&mut batch, order_no, attempt_ref, from, to, cause, Also::default())?;
    batch.run_checked(conn).await
}

/// [`set_attempt_status`] as part of a batch, setting `also`'s columns in the same statement.
pub(super) fn add_attempt_status(
    batch: &mut Batch,
    order_no: &str,
    attempt_ref: &str,
    from: AttemptStatus,
    to: AttemptStatus,
    cause: Cause<'_>,
    also: Also<'_>,
) -> Result<()> {
    from.transition(to)?;
    let base = args![to.as_str(), cause.at, attempt_ref, from.as_str()];
    let (sql, values) = status_update("payment_attempts", "attempt_ref", also, base);
    batch.expect(&sql, values, 1, format!("attempt {attempt_ref} was not in {from} when moving to {to}"));
    add_event(batch, order_no, "attempt", attempt_ref, Some(from.as_str()), to.as_str(), cause);
    Ok(())
}

/// Adds the log row of a status change to a batch (the caller runs it in its transaction).
pub(super) fn add_event(
    batch: &mut Batch,
    order_no: &str,
    entity: &str,
    entity_id: &str,
    from: Option<&str>,
    to: &str,
    cause: Cause<'_>,
) {
    // Appended: a command's log rows go in as one INSERT, in the order of its changes.
    batch.append(
        "INSERT INTO status_events (order_no, entity, entity_id, from_status, to_status, trigger_name, notification_id, at)",
        "($1, $2, $3, $4, $5, $6, $7, $8)",
        args![order_no, entity, entity_id, from, to, cause.trigger, cause.notification_id, cause.at],
        "status event insert",
    );
}

async fn insert_event(
    conn: &mut Conn,
    order_no: &str,
    entity: &str,
    entity_id: &str,
    from: Option<&str>,
    to: &str,
    cause: Cause<'_>,
) -> Result<()> {
    let mut batch = Batch::new();
    add_event(&mut batch, order_no, entity, entity_id, from, to, cause);
    batch.run_checked(conn).await
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Warning,
    Critical,
}

/// Records (or bumps) a de-duplicated alert and counts it. Alerts about money (late and duplicate
/// payments, mismatches) are written in the same transaction as the fact they describe.
pub async fn raise_alert(
    conn: &mut Conn,
    kind: &'static str,
    severity: Severity,
    dedupe_key: &str,
    order_no: Option<&str>,
    details: &str,
    now: Millis,
) -> Result<()> {
    let severity = match severity {
        Severity::Warning => "warning",
        Severity::Critical => "critical",
    };
    sql::query(
        "INSERT INTO alerts (id, kind, dedupe_key, severity, order_no, details, first_seen, last_seen, count, acknowledged) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $7, 1, 0) \
         ON CONFLICT (kind, dedupe_key) DO UPDATE SET count = alerts.count + 1, last_seen = excluded.last_seen, \
         details = excluded.details, acknowledged = 0",
    )
    .bind(super::new_id())
    .bind(kind)
    .bind(dedupe_key)
    .bind(severity)
    .bind(order_no)
    .bind(details)
    .bind(now)
    .execute(conn)
    .await?;
    metrics::counter!("kassa_alerts_total", "kind" => kind).increment(1);
    tracing::warn!(alert = kind, severity, order_no, details, "alert raised");
    Ok(())
}

//! A payment taken: what paying an order changes — the attempt succeeded, the others superseded,
//! the stock taken, the order paid with its messages and card keys — or, for a payment that came
//! late, twice, or again on a paid attempt, what the domain decides instead. Called under the
//! order's lock by `store::payments` (a verified event) and by the confirm (a zero total).

use crate::args;
use crate::clock::Millis;
use crate::domain::decide::{LatePolicy, SuccessDecision, decide_success};
use crate::domain::refund::{AutomaticRefund, second_capture_refund_no};
use crate::domain::{AttemptStatus, Money, OrderStatus, ReservationStatus};
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::events::{self, Also, Cause, Severity};
use crate::store::lines::OrderLine;
use crate::store::outbox::{OrderContext, OrderFacts};
use crate::store::refunds::{self, NewRefund};
use crate::store::reservations::{add_moves, reallocate};
use crate::store::{Tx, col, fulfilment, sql};

/// The effect of a notification that paid a pending order.
pub(super) const PAID: &str = "paid";

/// The notification's outcome, on the row that claimed its event id.
pub(super) fn add_notification_outcome(batch: &mut Batch, id: &str, status: &str, order_no: &str) {
    batch.expect(
        "UPDATE notifications SET status = $1, order_no = $2 WHERE id = $3",
        args![status, order_no, id],
        1,
        "notification outcome update",
    );
}

/// A verified success, as checked against the attempt.
pub(super) struct Success<'a> {
    pub(super) order_no: &'a str,
    pub(super) attempt_ref: &'a str,
    /// `None` for a zero-total order, completed without a gateway.
    pub(super) gateway_txn_id: Option<&'a str>,
    /// The transaction the attempt's success was recorded with, if it was.
    pub(super) recorded_txn: Option<&'a str>,
    pub(super) amount: Money,
    /// The order's total (it never changes).
    pub(super) order_total: Money,
    /// The order's other active attempts, with their status, read under the order lock.
    pub(super) others: &'a [(String, AttemptStatus)],
    /// The order's reservations and lines, read under the order lock.
    pub(super) parts: &'a OrderParts,
    /// What the order's messages carry besides: the shop's data and this attempt.
    pub(super) context: OrderContext<'a>,
}

/// What a payment changes on an order, read in one statement under the order's lock.
pub(super) struct OrderParts {
    /// Every attempt: reference and status.
    pub(super) attempts: Vec<(String, String)>,
    /// The active reservations (SKU, quantity), in SKU order (the database's, as every command
    /// that locks stock rows uses).
    pub(super) reservations: Vec<(String, i64)>,
    /// The lines, in line order.
    pub(super) lines: Vec<OrderLine>,
}

/// [`OrderParts`] of order `$1`: a row per attempt (`part` 'a'), active reservation ('r') and
/// line ('l'), each read by key.
pub const ORDER_PARTS_SQL: &str = "SELECT 'a' AS part, attempt_ref AS k, status AS v, CAST(NULL AS TEXT) AS name, CAST(0 AS BIGINT) AS n, \
         CAST(0 AS BIGINT) AS line_no FROM payment_attempts WHERE order_no = $1 \
         UNION ALL SELECT 'r', sku, status, NULL, quantity, 0 FROM reservations WHERE order_no = $1 AND status = 'active' \
         UNION ALL SELECT 'l', sku, kind, name, quantity, line_no FROM order_lines WHERE order_no = $1 \
         ORDER BY part, line_no, k";

/// [`ORDER_PARTS_SQL`] for the order of attempt `$1`.
pub fn order_parts_of_attempt_sql() -> &'static str {
    static SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        ORDER_PARTS_SQL
            .replace("order_no = $1", "order_no = (SELECT order_no FROM payment_attempts WHERE attempt_ref = $1)")
    });
    &SQL
}

/// [`OrderParts`] from the rows of [`ORDER_PARTS_SQL`].
pub(super) fn order_parts(rows: &[sql::Row]) -> Result<OrderParts> {
    let mut parts = OrderParts { attempts: Vec::new(), reservations: Vec::new(), lines: Vec::new() };
    for r in rows {
        match col::<String>(r, "part")?.as_str() {
            "a" => parts.attempts.push((col(r, "k")?, col(r, "v")?)),
            "r" => parts.reservations.push((col(r, "k")?, col(r, "n")?)),
            _ => parts.lines.push(OrderLine {
                line_no: col(r, "line_no")?,
                sku: col(r, "k")?,
                name: col::<Option<String>>(r, "name")?.unwrap_or_default(),
                kind: col(r, "v")?,
                quantity: col(r, "n")?,
            }),
        }
    }
    Ok(parts)
}

pub(super) async fn apply_success(
    tx: &mut Tx<'_>,
    s: &Success<'_>,
    order_status: OrderStatus,
    attempt_status: AttemptStatus,
    policy: LatePolicy,
    cause: Cause<'_>,
) -> Result<Option<&'static str>> {
    let (order_no, attempt_ref, amount) = (s.order_no, s.attempt_ref, s.amount);
    let decision = decide_success(order_status, attempt_status, s.recorded_txn, s.gateway_txn_id);
    match decision {
        SuccessDecision::AlreadyApplied => return Ok(None),
        SuccessDecision::SecondCapture => return record_second_capture(tx, s, cause).await,
        _ => {}
    }
    let cause = Cause { trigger: if cause.trigger.is_empty() { "payment_succeeded" } else { cause.trigger }, ..cause };
    // The attempt's success, in one batch with what a payment of a pending order changes.
    let mut batch = Batch::new();
    // The capture in the status update's own statement.
    let capture =
        Also { set: "gateway_txn_id = $5, captured_minor = $6", args: args![s.gateway_txn_id, amount.amount_minor()] };
    events::add_attempt_status(
        &mut batch,
        order_no,
        attempt_ref,
        attempt_status,
        AttemptStatus::Succeeded,
        cause,
        capture,
    )?;
    if decision != SuccessDecision::Pay {
        std::mem::take(&mut batch).run_checked(tx).await?;
    }
    match decision {
        SuccessDecision::Pay => {
            // Another attempt still open on this order must not be paid too (I5 on a paid order).
            for (other_ref, from) in s.others {
                let cause = Cause { notification_id: None, ..cause };
                events::add_attempt_status(
                    &mut batch,
                    order_no,
                    other_ref,
                    *from,
                    AttemptStatus::Superseded,
                    cause,
                    Also::default(),
                )?;
            }
            // The stock before `-> paid`: leaving `pending_payment` moves the session's count of
            // open orders (a trigger), and a confirm locks its stock rows before its session's row;
            // a payment taking the two the other way round deadlocks with its buyer's next confirm.
            add_moves(&mut batch, order_no, &s.parts.reservations, ReservationStatus::Consumed, cause.at)?;
            // `-> paid` in the same batch, with the order's capture in the same statement: what
            // its outbox messages carry is known here, and the lines serve the fulfilment after.
            let lines = &s.parts.lines;
            let facts = OrderFacts {
                total_minor: s.order_total.amount_minor(),
                currency: s.order_total.currency().code(),
                captured_minor: Some(amount.amount_minor()),
                // A pending order has had nothing refunded.
                refunded_minor: 0,
                lines,
                context: s.context,
            };
            let captured = Also {
                set: "captured_minor = $5, captured_currency = $6, captured_attempt_ref = $7",
                args: args![amount.amount_minor(), amount.currency().code(), attempt_ref],
            };
            events::add_order_status_with(
                &mut batch,
                order_no,
                order_status,
                OrderStatus::Paid,
                cause,
                &facts,
                captured,
            )?;
            if let Some(id) = cause.notification_id {
                add_notification_outcome(&mut batch, id, "applied", order_no);
            }
            // The digital lines' card keys in the same batch and, when nothing is left to ship,
            // `paid -> delivered` after them.
            let digital_only = fulfilment::add_key_delivery(&mut batch, tx.kind(), order_no, lines, cause.at);
            if digital_only {
                let delivered = Cause { trigger: fulfilment::KEYS_DELIVERED, notification_id: None, ..cause };
                events::add_order_status_with(
                    &mut batch,
                    order_no,
                    OrderStatus::Paid,
                    OrderStatus::Delivered,
                    delivered,
                    &facts,
                    Also::default(),
                )?;
                fulfilment::add_delivered_digitally(&mut batch, order_no, cause.at);
            }
            // With the commit on PostgreSQL: the stock rows it sells and the keys it hands out are
            // locked for no round trip of their own.
            batch.run_checked_by_commit(tx).await?;
            if digital_only {
                fulfilment::count_digital_delivery();
            }
            Ok(Some(PAID))
        }
        SuccessDecision::LatePayment => {
            set_captured(tx, order_no, attempt_ref, amount).await?;
            let late = Cause { trigger: "late_payment", ..cause };
            events::set_order_status(tx, order_no, order_status, OrderStatus::PaidAfterExpiry, late).await?;
            let details =
                format!("attempt {attempt_ref} paid {} after the order was {order_status}", amount.display_major());
            events::raise_alert(
                tx,
                "late_payment",
                Severity::Critical,
                attempt_ref,
                Some(order_no),
                &details,
                cause.at,
            )
            .await?;
            let follow_up = Cause { notification_id: None, ..cause };
            match policy {
                LatePolicy::Manual => Ok(Some("paid_after_expiry")),
                LatePolicy::Reallocate if reallocate(tx, order_no, follow_up.at).await?.is_none() => {
                    let cause = Cause { trigger: "reallocated", ..follow_up };
                    events::set_order_status(tx, order_no, OrderStatus::PaidAfterExpiry, OrderStatus::Paid, cause)
                        .await?;
                    fulfilment::after_paid(tx, order_no, cause).await?;
                    Ok(Some("paid_after_expiry_reallocated"))
                }
                LatePolicy::Reallocate | LatePolicy::Refund => {
                    refund_automatically(tx, s, AutomaticRefund::LatePayment, cause.at).await?;
                    let cause = Cause { trigger: "late_payment_refund", ..follow_up };
                    refunds::start_refunding(tx, order_no, OrderStatus::PaidAfterExpiry, OrderStatus::Refunding, cause)
                        .await?;
                    Ok(Some("paid_after_expiry_refunding"))
                }
            }
        }
        SuccessDecision::DuplicatePayment => {
            let details =
                format!("attempt {attempt_ref} paid {} on an order already {order_status}", amount.display_major());
            events::raise_alert(
                tx,
                "duplicate_payment",
                Severity::Critical,
                attempt_ref,
                Some(order_no),
                &details,
                cause.at,
            )
            .await?;
            refund_automatically(tx, s, AutomaticRefund::DuplicatePayment, cause.at).await?;
            Ok(Some("duplicate_payment"))
        }
        SuccessDecision::AlreadyApplied | SuccessDecision::SecondCapture => Ok(None),
    }
}

/// Refunds what the success's attempt paid, under the terms of `kind` (a late or a duplicate
/// payment): its refund number and reason.
async fn refund_automatically(tx: &mut Tx<'_>, s: &Success<'_>, kind: AutomaticRefund, at: Millis) -> Result<()> {
    let (refund_no, reason) = kind.terms(s.attempt_ref);
    let amount = s.amount.amount_minor();
    refunds::insert(tx, s.order_no, s.attempt_ref, &refund_no, amount, reason, kind.into(), at).await
}

/// The gateway took the money a second time on an attempt already paid, under another
/// transaction: kept once per transaction, alerted, and refunded automatically (the order keeps
/// its status; the refund is a `duplicate_payment` that names the transaction it returns).
async fn record_second_capture(tx: &mut Tx<'_>, s: &Success<'_>, cause: Cause<'_>) -> Result<Option<&'static str>> {
    let (Some(txn), Some(gateway)) = (s.gateway_txn_id, s.context.gateway) else { return Ok(None) };
    let seen: Option<String> =
        sql::query_scalar("SELECT refund_no FROM second_captures WHERE gateway = $1 AND gateway_txn_id = $2")
            .bind(gateway)
            .bind(txn)
            .fetch_optional(&mut **tx)
            .await?;
    if seen.is_some() {
        return Ok(None);
    }
    let refund_no = second_capture_refund_no(txn);
    let details = format!(
        "attempt {} was paid again, {} under transaction {txn} after {}; refunded as {refund_no}",
        s.attempt_ref,
        s.amount.display_major(),
        s.recorded_txn.unwrap_or("its first"),
    );
    events::raise_alert(tx, "duplicate_payment", Severity::Critical, txn, Some(s.order_no), &details, cause.at).await?;
    let refund = NewRefund {
        order_no: s.order_no,
        attempt_ref: s.attempt_ref,
        refund_no: &refund_no,
        amount_minor: s.amount.amount_minor(),
        reason: "second capture on a paid payment",
        kind: AutomaticRefund::DuplicatePayment.into(),
        returns: Some((txn, true)),
        notification_id: cause.notification_id,
    };
    refunds::insert_refund(tx, &refund, cause.at).await?;
    sql::query(
        "INSERT INTO second_captures (gateway, gateway_txn_id, order_no, attempt_ref, amount_minor, currency, refund_no, notification_id, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(gateway)
    .bind(txn)
    .bind(s.order_no)
    .bind(s.attempt_ref)
    .bind(s.amount.amount_minor())
    .bind(s.amount.currency().code())
    .bind(&refund_no)
    .bind(cause.notification_id)
    .bind(cause.at)
    .execute(&mut **tx)
    .await?;
    metrics::counter!("kassa_second_captures_total").increment(1);
    Ok(Some("second_capture"))
}

/// Completes a zero-total order just confirmed in `tx` (pending, its one attempt `created`):
/// paid with nothing captured, its reservations consumed, its keys delivered and its messages
/// sent, as a payment would, without a gateway (which would refuse a zero amount).
pub async fn complete_free(
    tx: &mut Tx<'_>,
    order_no: &str,
    attempt_ref: &str,
    total: Money,
    lines: Vec<OrderLine>,
    context: OrderContext<'_>,
    now: Millis,
) -> Result<()> {
    if total.amount_minor() != 0 {
        return Err(Error::internal("only a zero total completes without a gateway"));
    }
    let mut reservations: Vec<(String, i64)> = lines.iter().map(|l| (l.sku.clone(), l.quantity)).collect();
    reservations.sort();
    let parts = OrderParts {
        attempts: vec![(attempt_ref.to_string(), AttemptStatus::Created.as_str().into())],
        reservations,
        lines,
    };
    let success = Success {
        order_no,
        attempt_ref,
        gateway_txn_id: None,
        recorded_txn: None,
        amount: total,
        order_total: total,
        others: &[],
        parts: &parts,
        context: OrderContext { attempt_ref: Some(attempt_ref), ..context },
    };
    let cause = Cause { trigger: "zero_total", notification_id: None, at: now };
    let status = OrderStatus::PendingPayment;
    apply_success(tx, &success, status, AttemptStatus::Created, LatePolicy::Manual, cause).await?;
    metrics::counter!("kassa_zero_total_orders_total").increment(1);
    Ok(())
}

async fn set_captured(tx: &mut Tx<'_>, order_no: &str, attempt_ref: &str, amount: Money) -> Result<()> {
    let mut batch = Batch::new();
    add_captured(&mut batch, order_no, attempt_ref, amount);
    batch.run_checked(tx).await
}

fn add_captured(batch: &mut Batch, order_no: &str, attempt_ref: &str, amount: Money) {
    batch.expect(
        "UPDATE orders SET captured_minor = $1, captured_currency = $2, captured_attempt_ref = $3 WHERE order_no = $4",
        args![amount.amount_minor(), amount.currency().code(), attempt_ref, order_no],
        1,
        format!("order {order_no} missing when recording its capture"),
    );
}

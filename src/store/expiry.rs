//! Expiry: an unpaid order whose hold ran out releases its stock, and the claims that hand due
//! orders to one sweeper at a time.

use crate::clock::Millis;
use crate::domain::decide::may_expire;
use crate::domain::ids::{AttemptRef, OrderNo};
use crate::domain::{AttemptStatus, OrderStatus};
use crate::error::{Error, Result};
use crate::store::events::{self, Cause};
use crate::store::payments::{parse_attempt_status, parse_order_status};
use crate::store::reservations::release_reservations;
use crate::store::sql;
use crate::store::{Db, col};

/// What the sweeper did to one order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    Expired,
    /// Locked and re-read: the order was no longer due (paid, cancelled, or extended).
    Skipped(OrderStatus),
}

/// Expires an unpaid order whose hold has elapsed: attempt closed, reservations released. Runs under
/// the order lock and re-checks, so running it twice never returns stock twice.
pub async fn expire_order(db: &Db, order_no: &OrderNo, now: Millis) -> Result<Expiry> {
    let lock = db.for_update();
    let result = crate::write_tx!(db, |tx| {
        let order = sql::query(&format!("SELECT status, hold_expires_at FROM orders WHERE order_no = $1{lock}"))
            .bind(order_no)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| Error::not_found("order"))?;
        let status = parse_order_status(&col::<String>(&order, "status")?)?;
        if !may_expire(status, col(&order, "hold_expires_at")?, now) {
            return Ok(Expiry::Skipped(status));
        }
        let cause = Cause { trigger: "hold_expired", notification_id: None, at: now };
        let active = sql::query(&format!(
            "SELECT attempt_ref, status FROM payment_attempts WHERE order_no = $1 AND {}",
            AttemptStatus::active_sql("status")
        ))
        .bind(order_no)
        .fetch_all(&mut **tx)
        .await?;
        for a in &active {
            let attempt_ref: String = col(a, "attempt_ref")?;
            let from = parse_attempt_status(&col::<String>(a, "status")?)?;
            events::set_attempt_status(tx, order_no, &attempt_ref, from, AttemptStatus::Expired, cause).await?;
        }
        release_reservations(tx, order_no, now).await?;
        events::set_order_status(tx, order_no, status, OrderStatus::Expired, cause).await?;
        Ok(Expiry::Expired)
    });
    if let Ok(Expiry::Expired) = result {
        metrics::counter!("kassa_expiries_total").increment(1);
    }
    result
}

/// Claims up to `limit` orders whose hold has elapsed (oldest first) for `lease_ms`, so that no
/// other instance's sweeper handles them meanwhile, and returns them with their active attempt.
pub async fn claim_due_orders(db: &Db, now: Millis, lease_ms: i64, limit: i64) -> Result<Vec<DueOrder>> {
    let due = db.kind().claimed(
        "order_no",
        "SELECT order_no FROM orders WHERE status = 'pending_payment' AND hold_expires_at <= $2 \
         AND sweep_lease_until <= $2 ORDER BY hold_expires_at LIMIT $3",
    );
    let claimed: Vec<OrderNo> = crate::write_tx!(db, |tx| {
        let rows = sql::query(&format!("UPDATE orders SET sweep_lease_until = $1 WHERE {due} RETURNING order_no"))
            .bind(now.saturating_add(lease_ms))
            .bind(now)
            .bind(limit)
            .fetch_all(&mut **tx)
            .await?;
        rows.iter().map(|r| col::<String>(r, "order_no").map(OrderNo::stored)).collect()
    })?;
    let mut due = Vec::with_capacity(claimed.len());
    for order_no in claimed {
        let r = sql::query(&format!(
            "SELECT o.hold_expires_at, a.attempt_ref, a.gateway, a.gateway_ref FROM orders o \
             LEFT JOIN payment_attempts a ON a.order_no = o.order_no AND {} WHERE o.order_no = $1",
            AttemptStatus::active_sql("a.status")
        ))
        .bind(&order_no)
        .fetch_one(db.read_pool())
        .await?;
        due.push(DueOrder {
            hold_expires_at: col(&r, "hold_expires_at")?,
            attempt_ref: col::<Option<String>>(&r, "attempt_ref")?.map(AttemptRef::stored),
            gateway: col(&r, "gateway")?,
            gateway_ref: col(&r, "gateway_ref")?,
            order_no,
        });
    }
    due.sort_by_key(|d| d.hold_expires_at);
    Ok(due)
}

#[derive(Debug, Clone)]
pub struct DueOrder {
    pub order_no: OrderNo,
    pub hold_expires_at: Millis,
    pub attempt_ref: Option<AttemptRef>,
    pub gateway: Option<String>,
    pub gateway_ref: Option<String>,
}

//! Order commands after checkout: a new payment attempt (retry), cancel with an optional new
//! basket, and an operator accepting a late payment.

use crate::clock::Millis;
use crate::domain::ids::{self, OrderNo, SessionId};
use crate::domain::{AttemptStatus, OrderStatus, decide};
use crate::error::{Error, Result};
use crate::store::checkout::{Placed, load_placed};
use crate::store::events::{self, Cause};
use crate::store::reservations::{reallocate, release_reservations};
use crate::store::sql;
use crate::store::{Db, Tx, col, fulfilment, new_id};

/// An attempt that was closed locally and must also be closed at its gateway (after commit).
#[derive(Debug, Clone)]
pub struct ToClose {
    pub attempt_ref: String,
    pub gateway: String,
    /// The gateway's own id for the attempt, when it issued one.
    pub gateway_ref: Option<String>,
}

impl ToClose {
    pub fn key(&self) -> crate::domain::ids::AttemptKey {
        crate::domain::ids::AttemptKey::new(&self.attempt_ref, self.gateway_ref.as_deref())
    }
}

async fn lock_order(
    tx: &mut Tx<'_>,
    lock: &str,
    order_no: &str,
    session_id: Option<&SessionId>,
) -> Result<(OrderStatus, i64)> {
    let row = sql::query(&format!("SELECT status, hold_expires_at, session_id FROM orders WHERE order_no = $1{lock}"))
        .bind(order_no)
        .fetch_optional(&mut **tx)
        .await?
        .ok_or_else(|| Error::not_found("order"))?;
    // Decided again under the lock: the caller's check ran on a read before it.
    crate::domain::decide::may_act_on(session_id.map(SessionId::as_str), &col::<String>(&row, "session_id")?)?;
    let status: String = col(&row, "status")?;
    Ok((OrderStatus::parse(&status).ok_or_else(|| Error::internal("bad status"))?, col(&row, "hold_expires_at")?))
}

async fn active_attempts(tx: &mut Tx<'_>, order_no: &str) -> Result<Vec<(ToClose, AttemptStatus)>> {
    let rows = sql::query(&format!(
        "SELECT attempt_ref, gateway, gateway_ref, status FROM payment_attempts WHERE order_no = $1 AND {} ORDER BY seq",
        AttemptStatus::active_sql("status")
    ))
    .bind(order_no)
    .fetch_all(&mut **tx)
    .await?;
    rows.iter()
        .map(|r| {
            let status: String = col(r, "status")?;
            Ok((
                ToClose {
                    attempt_ref: col(r, "attempt_ref")?,
                    gateway: col(r, "gateway")?,
                    gateway_ref: col(r, "gateway_ref")?,
                },
                AttemptStatus::parse(&status).ok_or_else(|| Error::internal("bad status"))?,
            ))
        })
        .collect()
}

/// Retry: supersedes the active attempt (to be closed at its gateway by the caller) and creates a
/// new one with its own merchant reference. The order is never re-created.
pub async fn new_attempt(
    db: &Db,
    session_id: Option<&SessionId>,
    order_no: &OrderNo,
    gateway: &str,
    channel: &str,
    payer: Option<&super::checkout::AttemptPayer>,
    now: Millis,
) -> Result<(Placed, Vec<ToClose>)> {
    let lock = db.for_update();
    crate::write_tx!(db, |tx| {
        let (status, hold_expires_at) = lock_order(tx, lock, order_no, session_id).await?;
        decide::may_retry(status, hold_expires_at, now)?;
        let cause = Cause { trigger: "retry", notification_id: None, at: now };
        let mut to_close = Vec::new();
        for (attempt, from) in active_attempts(tx, order_no).await? {
            events::set_attempt_status(tx, order_no, &attempt.attempt_ref, from, AttemptStatus::Superseded, cause)
                .await?;
            to_close.push(attempt);
        }
        let seq: i64 = sql::query_scalar(
            "SELECT CAST(COALESCE(MAX(seq), 0) + 1 AS BIGINT) FROM payment_attempts WHERE order_no = $1",
        )
        .bind(order_no)
        .fetch_one(&mut **tx)
        .await?;
        let attempt_ref = ids::attempt_ref(order_no, seq);
        sql::query(
            "INSERT INTO payment_attempts (attempt_ref, order_no, seq, gateway, channel, status, amount_minor, currency, created_at, updated_at, payer_openid, payer_appid) \
             SELECT $1, order_no, $2, $3, $4, 'created', total_minor, currency, $5, $5, $7, $8 FROM orders WHERE order_no = $6",
        )
        .bind(&attempt_ref)
        .bind(seq)
        .bind(gateway)
        .bind(channel)
        .bind(now)
        .bind(order_no)
        .bind(payer.map(|p| p.openid.as_str()))
        .bind(payer.map(|p| p.appid.as_str()))
        .execute(&mut **tx)
        .await?;
        events::log_attempt_created(tx, order_no, &attempt_ref, cause).await?;
        Ok((load_placed(tx, order_no, true).await?, to_close))
    })
}

/// The active attempt of a pending order, to close at the gateway before cancelling.
pub async fn active_attempt(db: &Db, order_no: &OrderNo) -> Result<Option<ToClose>> {
    let sql = format!(
        "SELECT attempt_ref, gateway, gateway_ref FROM payment_attempts WHERE order_no = $1 AND {} ORDER BY seq DESC LIMIT 1",
        AttemptStatus::active_sql("status")
    );
    let row = sql::query(&sql).bind(order_no).fetch_optional(db.read_pool()).await?;
    row.map(|r| {
        Ok(ToClose {
            attempt_ref: col(&r, "attempt_ref")?,
            gateway: col(&r, "gateway")?,
            gateway_ref: col(&r, "gateway_ref")?,
        })
    })
    .transpose()
}

/// Cancels a pending order (its attempt already closed at the gateway by the caller): attempts
/// cancelled, stock released; with `rebasket`, a new editable basket with the order's lines.
pub async fn cancel(
    db: &Db,
    session_id: Option<&SessionId>,
    order_no: &OrderNo,
    rebasket: bool,
    now: Millis,
) -> Result<Option<String>> {
    let lock = db.for_update();
    crate::write_tx!(db, |tx| {
        let (status, _) = lock_order(tx, lock, order_no, session_id).await?;
        decide::may_cancel(status)?;
        let cause = Cause { trigger: "cancel", notification_id: None, at: now };
        for (attempt, from) in active_attempts(tx, order_no).await? {
            events::set_attempt_status(tx, order_no, &attempt.attempt_ref, from, AttemptStatus::Cancelled, cause)
                .await?;
        }
        release_reservations(tx, order_no, now).await?;
        events::set_order_status(tx, order_no, status, OrderStatus::Cancelled, cause).await?;
        if !rebasket {
            return Ok(None);
        }
        // A frozen basket is never edited: the buyer gets a new one, quoted at today's prices.
        let session: String = sql::query_scalar("SELECT session_id FROM orders WHERE order_no = $1")
            .bind(order_no)
            .fetch_one(&mut **tx)
            .await?;
        let basket_id = new_id();
        sql::query(
            "INSERT INTO baskets (id, session_id, status, created_at, updated_at, promotion_code) \
             VALUES ($1, $2, 'open', $3, $3, (SELECT promotion_code FROM orders WHERE order_no = $4))",
        )
        .bind(&basket_id)
        .bind(&session)
        .bind(now)
        .bind(order_no)
        .execute(&mut **tx)
        .await?;
        sql::query(
            "INSERT INTO basket_lines (basket_id, sku, quantity, quoted_unit_minor, currency) \
             SELECT $1, l.sku, l.quantity, s.price_minor, s.currency FROM order_lines l JOIN skus s ON s.sku = l.sku WHERE l.order_no = $2",
        )
        .bind(&basket_id)
        .bind(order_no)
        .execute(&mut **tx)
        .await?;
        Ok(Some(basket_id))
    })
}

/// An operator accepts a late payment: stock is taken again (refused when it is not there) and
/// the order is paid and fulfilled as usual.
pub async fn accept_late_payment(db: &Db, order_no: &OrderNo, now: Millis) -> Result<()> {
    let lock = db.for_update();
    crate::write_tx!(db, |tx| {
        let (status, _) = lock_order(tx, lock, order_no, None).await?;
        decide::may_accept_late(status)?;
        if let Some(refused) = reallocate(tx, order_no, now).await? {
            return Err(refused.into());
        }
        let cause = Cause { trigger: "manual_accept", notification_id: None, at: now };
        events::set_order_status(tx, order_no, status, OrderStatus::Paid, cause).await?;
        fulfilment::after_paid(tx, order_no, cause).await
    })
}

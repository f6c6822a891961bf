//! Stock held by an order: its reservations moved on (consumed by a payment, released by an expiry
//! or a cancel) with the stock rows they count in, each row changed once; and stock taken again
//! for an order whose holds were released (a late payment).

use crate::args;
use crate::clock::Millis;
use crate::domain::ReservationStatus;
use crate::domain::decide;
use crate::domain::refusal::Refusal;
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::sql;
use crate::store::{Tx, col};

/// Takes stock again for an order whose reservations were released (a late payment): every line
/// or none, and its promotion's use within the promotion's limits. Returns why it could not
/// (nothing changed then), or `None`: the reservations and the use count as consumed.
pub(super) async fn reallocate(tx: &mut Tx<'_>, order_no: &str, now: Millis) -> Result<Option<Refusal>> {
    let rows =
        sql::query("SELECT sku, quantity FROM reservations WHERE order_no = $1 AND status = 'released' ORDER BY sku")
            .bind(order_no)
            .fetch_all(&mut **tx)
            .await?;
    let mut taken: Vec<(String, i64)> = Vec::new();
    for r in &rows {
        let (sku, quantity): (String, i64) = (col(r, "sku")?, col(r, "quantity")?);
        let done = sql::query(
            "UPDATE skus SET on_hand = on_hand - $1, sold = sold + $1, updated_at = $2 WHERE sku = $3 AND on_hand - reserved >= $1",
        )
        .bind(quantity)
        .bind(now)
        .bind(&sku)
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() != 1 {
            // Put back what this attempt took; nothing changes.
            for (sku, quantity) in &taken {
                sql::query("UPDATE skus SET on_hand = on_hand + $1, sold = sold - $1 WHERE sku = $2")
                    .bind(quantity)
                    .bind(sku)
                    .execute(&mut **tx)
                    .await?;
            }
            return Ok(Some(decide::late_stock_gone()));
        }
        taken.push((sku, quantity));
    }
    if !crate::store::promotion_uses::retake(tx, order_no, now).await? {
        // The promotion's uses are all taken now: the stock goes back too.
        for (sku, quantity) in &taken {
            sql::query("UPDATE skus SET on_hand = on_hand + $1, sold = sold - $1 WHERE sku = $2")
                .bind(quantity)
                .bind(sku)
                .execute(&mut **tx)
                .await?;
        }
        return Ok(Some(decide::late_promotion_gone()));
    }
    sql::query(
        "UPDATE reservations SET status = 'consumed', updated_at = $1 WHERE order_no = $2 AND status = 'released'",
    )
    .bind(now)
    .bind(order_no)
    .execute(&mut **tx)
    .await?;
    Ok(None)
}

/// Active reservations go back on the shelf (a reserved promotion use goes back with the order's
/// status change: migration 21's trigger).
pub(super) async fn release_reservations(tx: &mut Tx<'_>, order_no: &str, now: Millis) -> Result<()> {
    move_reservations(tx, order_no, ReservationStatus::Released, now).await
}

async fn move_reservations(tx: &mut Tx<'_>, order_no: &str, to: ReservationStatus, now: Millis) -> Result<()> {
    let mut batch = Batch::new();
    add_move_reservations(tx, &mut batch, order_no, to, now).await?;
    batch.run_checked(tx).await
}

/// Adds the stock and reservation updates of moving an order's active reservations to a batch
/// (each stock row changes once, and so does each active reservation).
async fn add_move_reservations(
    tx: &mut Tx<'_>,
    batch: &mut Batch,
    order_no: &str,
    to: ReservationStatus,
    now: Millis,
) -> Result<()> {
    let rows =
        sql::query("SELECT sku, quantity FROM reservations WHERE order_no = $1 AND status = 'active' ORDER BY sku")
            .bind(order_no)
            .fetch_all(&mut **tx)
            .await?;
    let reservations =
        rows.iter().map(|r| Ok((col::<String>(r, "sku")?, col::<i64>(r, "quantity")?))).collect::<Result<Vec<_>>>()?;
    add_moves(batch, order_no, &reservations, to, now)
}

/// [`add_move_reservations`] for reservations already read under the order's lock, in SKU order.
pub(crate) fn add_moves(
    batch: &mut Batch,
    order_no: &str,
    reservations: &[(String, i64)],
    to: ReservationStatus,
    now: Millis,
) -> Result<()> {
    let stock_sql = match to {
        ReservationStatus::Consumed => {
            "UPDATE skus SET reserved = reserved - $1, on_hand = on_hand - $1, sold = sold + $1, updated_at = $2 WHERE sku = $3 AND reserved >= $1"
        }
        ReservationStatus::Released => {
            "UPDATE skus SET reserved = reserved - $1, updated_at = $2 WHERE sku = $3 AND reserved >= $1"
        }
        ReservationStatus::Active => return Err(Error::internal("reservations never return to active")),
    };
    for (sku, quantity) in reservations {
        let what = format!("stock of {sku} does not cover the reservation of {order_no}");
        batch.expect(stock_sql, args![*quantity, now, sku], 1, what);
    }
    batch.expect(
        "UPDATE reservations SET status = $1, updated_at = $2 WHERE order_no = $3 AND status = 'active'",
        args![to.as_str(), now, order_no],
        u64::try_from(reservations.len()).unwrap_or(u64::MAX),
        format!("reservations of {order_no} changed under the lock"),
    );
    Ok(())
}

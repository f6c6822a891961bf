//! The checks of the buyer's way back (part of `kassa check`): every reveal of card keys was of
//! keys the order had been delivered by then (never of an unpaid order's), and every delivered
//! order placed with an address while e-mail was on has its *delivered* message.

use crate::error::Result;
use crate::store::{Tx, col, sql};

/// The violations found among the orders in scope (`since`: as [`super::check`] scopes them),
/// as (invariant, detail).
pub(super) async fn check(tx: &mut Tx<'_>, since: Option<i64>, changed: &str) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    // B1: a reveal shows keys the order had at that time; an order never paid has none.
    let rows = sql::query(&format!(
        "SELECT k.order_no, k.channel, k.revealed_at FROM key_reveals k WHERE {} AND NOT EXISTS \
         (SELECT 1 FROM card_keys c WHERE c.order_no = k.order_no AND c.delivered_at <= k.revealed_at) \
         ORDER BY k.order_no, k.revealed_at",
        changed.replace("{col}", "k.order_no")
    ))
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (order_no, channel, at): (String, String, i64) =
            (col(r, "order_no")?, col(r, "channel")?, col(r, "revealed_at")?);
        out.push((
            "B1",
            format!("order {order_no}: keys revealed ({channel}, at {at}) that it had not been delivered"),
        ));
    }
    // B2: a delivered order that asked for e-mail has its message (in any status: sent, failed
    // and retried, or given up — each is on the console).
    let rows = sql::query(&format!(
        "SELECT o.order_no FROM orders o WHERE o.mail_enabled = 1 AND o.contact_email IS NOT NULL AND {} \
         AND EXISTS (SELECT 1 FROM status_events e WHERE e.order_no = o.order_no AND e.entity = 'order' \
         AND e.to_status = 'delivered') \
         AND NOT EXISTS (SELECT 1 FROM mail_messages m WHERE m.order_no = o.order_no AND m.kind = 'delivered') \
         ORDER BY o.order_no",
        changed.replace("{col}", "o.order_no")
    ))
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let order_no: String = col(r, "order_no")?;
        out.push(("B2", format!("order {order_no} was delivered and asked for e-mail, but has no delivered message")));
    }
    Ok(out)
}

//! `kassa check`'s I4 on money: a paid order captured exactly its total, an attempt's refunds
//! stay within what it captured, every capture is tied to a gateway event and every gateway
//! transaction that took money is one payment or one second capture; a zero-total order moves
//! no money. Scoped as [`super::check`] scopes the orders.

use super::check_scope::{Scope, in_scope};
use crate::error::Result;
use crate::store::{Tx, col, sql};

/// The violations found among the orders in `scope`, as (invariant, detail).
pub(super) async fn check(tx: &mut Tx<'_>, scope: Scope) -> Result<Vec<(&'static str, String)>> {
    let since = scope.arg();
    let changed = |col: &str, n: usize| in_scope(scope, col, n);
    let mut out = Vec::new();
    // I4 money: a paid order captured exactly its total; each attempt's refunds (not failed) stay
    // within what it captured; every capture is tied to a gateway event.
    let rows = sql::query(&format!(
        "SELECT order_no, status, total_minor, currency, captured_minor, captured_currency FROM orders \
         WHERE status IN ('paid', 'delivered', 'refunding', 'refunded', 'paid_after_expiry') AND {} \
         AND (captured_minor IS NULL OR captured_minor <> total_minor OR captured_currency IS NULL \
           OR captured_currency <> currency) ORDER BY order_no",
        changed("order_no", 1)
    ))
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (order_no, total, currency): (String, i64, String) =
            (col(r, "order_no")?, col(r, "total_minor")?, col(r, "currency")?);
        let (captured, captured_currency): (Option<i64>, Option<String>) =
            (col(r, "captured_minor")?, col(r, "captured_currency")?);
        if captured != Some(total) || captured_currency.as_deref() != Some(currency.as_str()) {
            out.push((
                "I4",
                format!("order {order_no} totals {total} {currency} but captured {captured:?} {captured_currency:?}"),
            ));
        }
    }
    let rows = sql::query(&format!(
        "SELECT a.attempt_ref, a.captured_minor, \
           CAST(COALESCE((SELECT SUM(r.amount_minor) FROM refunds r WHERE r.order_no = a.order_no \
             AND r.attempt_ref = a.attempt_ref AND r.status <> 'failed'), 0) AS BIGINT) AS refunded, \
           CAST(COALESCE((SELECT SUM(c.amount_minor) FROM second_captures c WHERE c.attempt_ref = a.attempt_ref), 0) AS BIGINT) AS again \
         FROM payment_attempts a WHERE a.attempt_ref IN (SELECT r.attempt_ref FROM refunds r WHERE {}) \
         ORDER BY a.attempt_ref",
        changed("r.order_no", 1)
    ))
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (attempt_ref, captured, refunded, again): (String, Option<i64>, i64, i64) =
            (col(r, "attempt_ref")?, col(r, "captured_minor")?, col(r, "refunded")?, col(r, "again")?);
        // What the attempt captured: its payment and any second capture the gateway made on it.
        let captured = captured.map(|c| c + again);
        if refunded > captured.unwrap_or(0) {
            out.push((
                "I4",
                format!("attempt {attempt_ref}: refunds total {refunded} but {} was captured", captured.unwrap_or(0)),
            ));
        }
    }
    let rows = sql::query(&format!(
        "SELECT a.attempt_ref FROM payment_attempts a WHERE a.status = 'succeeded' AND {} \
         AND NOT (a.gateway = $1 AND a.captured_minor = 0) AND NOT EXISTS \
         (SELECT 1 FROM status_events e JOIN notifications n ON n.id = e.notification_id \
          WHERE e.entity = 'attempt' AND e.entity_id = a.attempt_ref AND e.to_status = 'succeeded' AND n.status = 'applied') \
         ORDER BY a.attempt_ref",
        changed("a.order_no", 2)
    ))
    .bind(crate::domain::checkout::FREE_GATEWAY)
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let attempt_ref: String = col(r, "attempt_ref")?;
        out.push(("I4", format!("attempt {attempt_ref} succeeded without an applied gateway event")));
    }
    // Every gateway transaction that took money is one payment or one second capture, and a
    // second capture is on a succeeded attempt of its order, with its refund returning it.
    let rows = sql::query(&format!(
        "SELECT gateway, gateway_txn_id FROM (SELECT gateway, gateway_txn_id FROM payment_attempts \
           WHERE status = 'succeeded' AND gateway_txn_id IS NOT NULL AND {txns} \
           UNION ALL SELECT gateway, gateway_txn_id FROM second_captures WHERE {txns}) t \
         GROUP BY gateway, gateway_txn_id HAVING COUNT(*) > 1 ORDER BY gateway, gateway_txn_id",
        // The transactions of the changed orders, each looked up by its index.
        txns = match scope {
            Scope::Full => changed("", 1),
            Scope::Since(_) => format!(
                "gateway_txn_id IN (SELECT c.gateway_txn_id FROM payment_attempts c WHERE {} \
                 AND c.gateway_txn_id IS NOT NULL UNION SELECT d.gateway_txn_id FROM second_captures d WHERE {})",
                changed("c.order_no", 1),
                changed("d.order_no", 1)
            ),
        }
    ))
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (gateway, txn): (String, String) = (col(r, "gateway")?, col(r, "gateway_txn_id")?);
        out.push(("I4", format!("{gateway} transaction {txn} is recorded as more than one payment")));
    }
    let rows = sql::query(&format!(
        "SELECT c.gateway_txn_id FROM second_captures c JOIN payment_attempts a ON a.attempt_ref = c.attempt_ref \
         JOIN refunds r ON r.refund_no = c.refund_no \
         WHERE (a.status <> 'succeeded' OR a.order_no <> c.order_no OR a.gateway <> c.gateway \
           OR r.attempt_ref <> c.attempt_ref OR r.amount_minor <> c.amount_minor OR r.kind <> 'duplicate_payment' \
           OR r.gateway_txn_id IS NULL OR r.gateway_txn_id <> c.gateway_txn_id) AND {} \
         ORDER BY c.gateway_txn_id",
        changed("c.order_no", 1)
    ))
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let txn: String = col(r, "gateway_txn_id")?;
        out.push(("I4", format!("second capture {txn} is not on a paid attempt of its order, returned by its refund")));
    }

    // A zero-total order is completed without a gateway: its attempt moves no money.
    let rows = sql::query(&format!(
        "SELECT attempt_ref, amount_minor, captured_minor FROM payment_attempts \
         WHERE gateway = $1 AND (amount_minor <> 0 OR COALESCE(captured_minor, 0) <> 0) AND {} ORDER BY attempt_ref",
        changed("order_no", 2)
    ))
    .bind(crate::domain::checkout::FREE_GATEWAY)
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let attempt_ref: String = col(r, "attempt_ref")?;
        out.push(("I4", format!("attempt {attempt_ref} was completed without a gateway but is not for zero")));
    }
    Ok(out)
}

//! The checks of the complaints and disputes desk (part of `kassa check`), over every case (a shop
//! has few): a linked case names its payment's own order at the provider that took it (C1); a
//! case kassa could not link is alerted (C2); a case's state is the one its latest logged change
//! gave it (C3); a case's refunds (numbered `case-<id>-<amount>`) are on its own order and never
//! more than that order captured (C4). That a case names a provider kassa takes cases from is the
//! schema's own check.

use crate::error::Result;
use crate::store::{Tx, col, sql};

/// Cases checked at most in one run, oldest first (past it the rest waits for a later run).
const CASES_CHECKED_MAX: i64 = 100_000;

pub(super) async fn check(tx: &mut Tx<'_>) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    let rows = sql::query(
        "SELECT c.id, c.order_no, a.order_no AS attempt_order, a.gateway, c.provider FROM cases c \
         JOIN payment_attempts a ON a.attempt_ref = c.attempt_ref \
         WHERE a.order_no <> c.order_no OR a.gateway <> c.provider ORDER BY c.id LIMIT $1",
    )
    .bind(CASES_CHECKED_MAX)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (id, order_no, attempt_order): (String, String, String) =
            (col(r, "id")?, col(r, "order_no")?, col(r, "attempt_order")?);
        let (gateway, provider): (String, String) = (col(r, "gateway")?, col(r, "provider")?);
        out.push((
            "C1",
            format!("case {id} names order {order_no} at {provider}, but its payment is order {attempt_order}'s at {gateway}"),
        ));
    }
    let rows = sql::query(
        "SELECT c.id FROM cases c WHERE c.order_no IS NULL AND NOT EXISTS \
         (SELECT 1 FROM alerts l WHERE l.kind = 'case_unlinked' AND l.dedupe_key = c.id) ORDER BY c.id LIMIT $1",
    )
    .bind(CASES_CHECKED_MAX)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let id: String = col(r, "id")?;
        out.push(("C2", format!("case {id} names no payment kassa knows and was never alerted")));
    }
    let rows = sql::query(
        "SELECT c.id, c.state, (SELECT e.to_state FROM case_events e WHERE e.case_id = c.id ORDER BY e.id DESC LIMIT 1) \
         AS logged FROM cases c ORDER BY c.id LIMIT $1",
    )
    .bind(CASES_CHECKED_MAX)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (id, state, logged): (String, String, Option<String>) =
            (col(r, "id")?, col(r, "state")?, col(r, "logged")?);
        if logged.as_deref() != Some(state.as_str()) {
            let logged = logged.unwrap_or_else(|| "no change at all".to_string());
            out.push(("C3", format!("case {id} is {state}, but its latest logged change is {logged}")));
        }
    }
    out.extend(refunds(tx).await?);
    Ok(out)
}

/// C4's refunds numbered after a case (`case-{case id}-{amount}`), each with its case found by
/// the case's key (a case id is a UUID, 36 characters): a pattern built from every case and tested
/// against every refund took a time growing with the product of the two.
pub const CASE_REFUNDS_SQL: &str = "SELECT r.refund_no, r.order_no, r.amount_minor, r.status, c.id, \
     c.order_no AS case_order, o.captured_minor FROM refunds r \
     LEFT JOIN cases c ON c.id = substr(r.refund_no, 6, 36) AND substr(r.refund_no, 42, 1) = '-' \
     LEFT JOIN orders o ON o.order_no = c.order_no \
     WHERE substr(r.refund_no, 1, 5) = 'case-' ORDER BY c.id, r.refund_no LIMIT $1";

/// C4: each refund numbered after a case, against the case (its order, what that order captured).
async fn refunds(tx: &mut Tx<'_>) -> Result<Vec<(&'static str, String)>> {
    let rows = sql::query(CASE_REFUNDS_SQL).bind(CASES_CHECKED_MAX).fetch_all(&mut **tx).await?;
    let mut out = Vec::new();
    // (case, what its refunds take back so far, what its order captured)
    let mut sums: Vec<(String, i64, i64)> = Vec::new();
    for r in &rows {
        let (refund_no, order_no): (String, String) = (col(r, "refund_no")?, col(r, "order_no")?);
        let (case_id, case_order): (Option<String>, Option<String>) = (col(r, "id")?, col(r, "case_order")?);
        let Some(case_id) = case_id else {
            out.push(("C4", format!("refund {refund_no} is numbered after a case kassa does not have")));
            continue;
        };
        if case_order.as_deref() != Some(order_no.as_str()) {
            let case_order = case_order.unwrap_or_else(|| "no order".to_string());
            out.push((
                "C4",
                format!("refund {refund_no} of case {case_id} is on order {order_no}, the case on {case_order}"),
            ));
            continue;
        }
        let amount: i64 = if col::<String>(r, "status")? == "failed" { 0 } else { col(r, "amount_minor")? };
        let captured: Option<i64> = col(r, "captured_minor")?;
        match sums.last_mut() {
            Some(last) if last.0 == case_id => last.1 += amount,
            _ => sums.push((case_id, amount, captured.unwrap_or(0))),
        }
    }
    for (case_id, refunded, captured) in sums {
        if refunded > captured {
            out.push(("C4", format!("case {case_id}'s refunds take back {refunded}, its order captured {captured}")));
        }
    }
    Ok(out)
}

//! The checks of the complaints and disputes desk (part of `kassa check`), over every case (a shop
//! has few): a linked case names its payment's own order at the provider that took it (C1); a
//! case kassa could not link is alerted (C2); a case's state is the one its latest logged change
//! gave it (C3).

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
    Ok(out)
}

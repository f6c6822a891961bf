//! kassa's rows behind a statement day, read for `store::statements` and
//! `store::second_captures`: by the day's window or by the references the statement names, a
//! chunk of references per statement.

use crate::clock::Millis;
use crate::domain::statement::OurPayment;
use crate::error::Result;
use crate::store::{Db, col, sql};

/// References looked up in one statement (an `IN` list's length).
const LOOKUP_CHUNK: usize = 500;

fn placeholders(from: usize, n: usize) -> String {
    (from..from + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// Rows of `select` for `keys`, a chunk at a time: `select` ends in `… IN` and takes the gateway
/// as `$1`.
pub(super) async fn rows_for(db: &Db, select: &str, gateway: &str, keys: &[&str]) -> Result<Vec<sql::Row>> {
    let mut rows = Vec::new();
    for chunk in keys.chunks(LOOKUP_CHUNK) {
        let sql = format!("{select} ({})", placeholders(2, chunk.len()));
        let mut q = sql::query(&sql).bind(gateway);
        for key in chunk {
            q = q.bind(*key);
        }
        rows.extend(q.fetch_all(db.read_pool()).await?);
    }
    Ok(rows)
}

/// Rows of `select` for the day's window `[$1, $2)`, the gateway as `$3`.
pub(super) async fn rows_in(
    db: &Db,
    select: &str,
    gateway: &str,
    (from, to): (Millis, Millis),
) -> Result<Vec<sql::Row>> {
    sql::query(select).bind(from).bind(to).bind(gateway).fetch_all(db.read_pool()).await
}

/// A payment as the statement is compared with it.
pub(super) fn payment(r: &sql::Row) -> Result<OurPayment> {
    Ok(OurPayment {
        order_no: col(r, "order_no")?,
        attempt_ref: col(r, "attempt_ref")?,
        gateway_txn_id: col(r, "gateway_txn_id")?,
        amount_minor: col(r, "amount")?,
        currency: col(r, "currency")?,
        discount_minor: col::<Option<i64>>(r, "discount")?.unwrap_or(0),
    })
}

//! kassa's rows behind a statement day, read for `store::statements` and
//! `store::second_captures`: by the day's window or by the references the statement names, a
//! chunk of references per statement; and the day's row written with both sides' totals.

use std::collections::{BTreeMap, BTreeSet};

use crate::clock::Millis;
use crate::domain::statement::{OurCase, OurPayment, Statement, Totals};
use crate::error::Result;
use crate::store::{Conn, Db, col, sql};

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

/// kassa's cases of the disputes the statement's dispute lines name, by dispute id (the provider
/// case id), whatever day they were opened.
pub(super) async fn dispute_cases(db: &Db, gateway: &str, statement: &Statement) -> Result<BTreeMap<String, OurCase>> {
    let ids: BTreeSet<&str> = statement
        .lines
        .iter()
        .filter(|l| l.kind.is_dispute() && !l.gateway_txn_id.is_empty())
        .map(|l| l.gateway_txn_id.as_str())
        .collect();
    let select = "SELECT id, provider_case_id, order_no, amount_minor, currency, state, outcome FROM cases \
                  WHERE provider = $1 AND kind = 'dispute' AND provider_case_id IN";
    let mut cases = BTreeMap::new();
    for r in &rows_for(db, select, gateway, &ids.into_iter().collect::<Vec<_>>()).await? {
        let case = OurCase {
            case_id: col(r, "id")?,
            order_no: col(r, "order_no")?,
            amount_minor: col(r, "amount_minor")?,
            currency: col(r, "currency")?,
            open: col::<String>(r, "state")? != "closed",
            outcome: col(r, "outcome")?,
        };
        cases.insert(col(r, "provider_case_id")?, case);
    }
    Ok(cases)
}

/// One side's totals columns (`gateway_…`, `kassa_…`), in the order of [`side_values`].
const TOTALS_FIELDS: [&str; 8] = [
    "count",
    "gross_minor",
    "refunds_minor",
    "fees_minor",
    "net_minor",
    "disputes_minor",
    "reinstated_minor",
    "dispute_fees_minor",
];

fn side_values(t: &Totals) -> [i64; 8] {
    [
        t.count,
        t.gross_minor,
        t.refunds_minor,
        t.fees_minor,
        t.net_minor,
        t.disputes_minor,
        t.reinstated_minor,
        t.dispute_fees_minor,
    ]
}

/// Writes a day's row: its state, and both sides' totals (kassa's with its discounts).
#[allow(clippy::too_many_arguments)]
pub(super) async fn upsert_day(
    tx: &mut Conn,
    gateway: &str,
    day: &str,
    status: &str,
    detail: Option<&str>,
    currency: &str,
    lines: i64,
    (theirs, ours): (&Totals, &Totals),
    (tries, now): (i64, Millis),
) -> Result<()> {
    let columns: Vec<String> = ["gateway", "kassa"]
        .iter()
        .flat_map(|side| TOTALS_FIELDS.iter().map(move |f| format!("{side}_{f}")))
        .chain(["kassa_discounts_minor".to_string()])
        .collect();
    // $1 to $8 are the day's own values; the totals follow.
    let params = (0..columns.len()).map(|i| format!("${}", i + 9)).collect::<Vec<_>>().join(", ");
    let updates = columns.iter().map(|c| format!("{c} = excluded.{c}")).collect::<Vec<_>>().join(", ");
    let sql = format!(
        "INSERT INTO statement_days (gateway, day, status, detail, currency, lines, tries, next_at, created_at, \
         updated_at, {}) VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $8, {params}) \
         ON CONFLICT (gateway, day) DO UPDATE SET status = excluded.status, detail = excluded.detail, \
         currency = excluded.currency, lines = excluded.lines, tries = excluded.tries, next_at = 0, \
         updated_at = excluded.updated_at, {updates}",
        columns.join(", ")
    );
    let mut args = crate::args![gateway, day, status, detail, currency, lines, tries, now];
    let values = side_values(theirs).into_iter().chain(side_values(ours)).chain([ours.discounts_minor]);
    args.extend(values.map(sql::Arg::from));
    sql::query(&sql).bind_all(args).execute(tx).await?;
    Ok(())
}

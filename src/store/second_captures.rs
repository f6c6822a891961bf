//! Second captures on paid attempts, as a statement day sees them (`payments::apply_event`
//! records them; `check` verifies them).

use std::collections::{BTreeMap, BTreeSet};

use crate::clock::Millis;
use crate::domain::statement::{LineKind, OurPayment, Statement};
use crate::error::Result;
use crate::store::Db;
use crate::store::statements::{payment, rows_for, rows_in};

const SELECT: &str =
    "SELECT attempt_ref, order_no, gateway_txn_id, amount_minor AS amount, currency FROM second_captures";

/// The second captures at `gateway` that kassa recorded in the day's `window` (their transaction
/// ids, the second value) and those the statement's payment lines name.
pub async fn of_day(
    db: &Db,
    gateway: &str,
    window: (Millis, Millis),
    statement: &Statement,
) -> Result<(Vec<OurPayment>, BTreeSet<String>)> {
    let mut found: BTreeMap<String, OurPayment> = BTreeMap::new();
    let mut of_day = BTreeSet::new();
    let recorded = format!("{SELECT} WHERE created_at >= $1 AND created_at < $2 AND gateway = $3");
    for r in &rows_in(db, &recorded, gateway, window).await? {
        let p = payment(r)?;
        let txn = p.gateway_txn_id.clone().unwrap_or_default();
        of_day.insert(txn.clone());
        found.insert(txn, p);
    }
    let txns: Vec<&str> = statement
        .lines
        .iter()
        .filter(|l| l.kind == LineKind::Payment && !l.gateway_txn_id.is_empty())
        .map(|l| l.gateway_txn_id.as_str())
        .collect();
    for r in &rows_for(db, &format!("{SELECT} WHERE gateway = $1 AND gateway_txn_id IN"), gateway, &txns).await? {
        let p = payment(r)?;
        found.insert(p.gateway_txn_id.clone().unwrap_or_default(), p);
    }
    Ok((found.into_values().collect(), of_day))
}

//! Second captures on paid attempts, as the operator and a statement day see them
//! (`payments::apply_event` records them; `check` verifies them).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::clock::{Millis, rfc3339};
use crate::domain::ids::OrderNo;
use crate::domain::statement::{LineKind, OurPayment, Statement};
use crate::error::Result;
use crate::store::statement_rows::{payment, rows_for, rows_in};
use crate::store::{Db, col, sql};

/// A second capture on one of an order's attempts: money the gateway took again, and the refund
/// that returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SecondCaptureView {
    pub gateway: String,
    /// The transaction that took the money again (not the attempt's own).
    pub gateway_txn_id: String,
    pub attempt_ref: String,
    pub amount_minor: i64,
    pub currency: String,
    /// The automatic `duplicate_payment` refund of it, and that refund's status.
    pub refund_no: String,
    pub refund_status: String,
    pub recorded_at: String,
}

/// The second captures on `order_no`'s attempts, oldest first.
pub async fn of_order(db: &Db, order_no: &OrderNo) -> Result<Vec<SecondCaptureView>> {
    let rows = sql::query(
        "SELECT c.gateway, c.gateway_txn_id, c.attempt_ref, c.amount_minor, c.currency, c.refund_no, \
         r.status AS refund_status, c.created_at FROM second_captures c JOIN refunds r ON r.refund_no = c.refund_no \
         WHERE c.order_no = $1 ORDER BY c.created_at, c.gateway_txn_id",
    )
    .bind(order_no)
    .fetch_all(db.read_pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(SecondCaptureView {
                gateway: col(r, "gateway")?,
                gateway_txn_id: col(r, "gateway_txn_id")?,
                attempt_ref: col(r, "attempt_ref")?,
                amount_minor: col(r, "amount_minor")?,
                currency: col(r, "currency")?,
                refund_no: col(r, "refund_no")?,
                refund_status: col(r, "refund_status")?,
                recorded_at: rfc3339(col(r, "created_at")?),
            })
        })
        .collect()
}

impl SecondCaptureView {
    /// The amount, for people (`88.88 CNY`).
    pub fn amount_display(&self) -> String {
        crate::domain::money::format_minor(self.amount_minor, &self.currency)
    }
}

const SELECT: &str = "SELECT attempt_ref, order_no, gateway_txn_id, amount_minor AS amount, currency, 0 AS discount FROM second_captures";

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

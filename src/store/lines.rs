//! An order's line snapshot as fulfilment and the shop's messages read it.

use crate::error::Result;
use crate::store::sql;
use crate::store::{Conn, col};

/// One line of an order, as fulfilment and the outbox need it.
#[derive(Debug, Clone)]
pub struct OrderLine {
    pub line_no: i64,
    pub sku: String,
    pub name: String,
    pub kind: String,
    pub quantity: i64,
}

impl OrderLine {
    /// Line `line_no` of an order being placed, as priced at confirm.
    pub fn of_priced(line: &crate::domain::checkout::PricedLine, line_no: i64) -> OrderLine {
        OrderLine {
            line_no,
            sku: line.sku.clone(),
            name: line.name.clone(),
            kind: line.kind.clone(),
            quantity: line.quantity,
        }
    }
}

/// An order's lines, in line order.
pub(super) async fn order_lines(conn: &mut Conn, order_no: &str) -> Result<Vec<OrderLine>> {
    sql::query("SELECT line_no, sku, name, kind, quantity FROM order_lines WHERE order_no = $1 ORDER BY line_no")
        .bind(order_no)
        .fetch_all(conn)
        .await?
        .iter()
        .map(|r| {
            Ok(OrderLine {
                line_no: col(r, "line_no")?,
                sku: col(r, "sku")?,
                name: col(r, "name")?,
                kind: col(r, "kind")?,
                quantity: col(r, "quantity")?,
            })
        })
        .collect()
}

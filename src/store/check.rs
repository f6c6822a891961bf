//! `kassa check`: verifies the invariants of DESIGN.md §3 on a consistent snapshot. Each query
//! returns the rows that break an invariant; an empty result means it holds.

use std::collections::BTreeMap;

use crate::domain::OrderStatus;
use crate::domain::status::{replay_attempt_log, replay_order_log};
use crate::error::Result;
use crate::store::{Db, col};

/// `(from, to)` status pairs of one entity, oldest first.
type StatusLog = Vec<(Option<String>, String)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// Runs every implemented check and returns all violations found.
pub async fn run(db: &Db) -> Result<Vec<Violation>> {
    let mut tx = db.snapshot().await?;
    let mut out = Vec::new();
    let mut add = |invariant: &'static str, detail: String| out.push(Violation { invariant, detail });

    // I1 stock: counters equal the reservations they summarise; never more held than on hand.
    let rows = sqlx::query(
        "SELECT s.sku, s.on_hand, s.reserved, s.sold, \
           CAST(COALESCE((SELECT SUM(r.quantity) FROM reservations r WHERE r.sku = s.sku AND r.status = 'active'), 0) AS BIGINT) AS active_qty, \
           CAST(COALESCE((SELECT SUM(r.quantity) FROM reservations r WHERE r.sku = s.sku AND r.status = 'consumed'), 0) AS BIGINT) AS consumed_qty \
         FROM skus s ORDER BY s.sku",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let sku: String = col(r, "sku")?;
        let (on_hand, reserved, sold): (i64, i64, i64) = (col(r, "on_hand")?, col(r, "reserved")?, col(r, "sold")?);
        let (active, consumed): (i64, i64) = (col(r, "active_qty")?, col(r, "consumed_qty")?);
        if reserved != active {
            add("I1", format!("sku {sku}: reserved={reserved} but active reservations hold {active}"));
        }
        if sold != consumed {
            add("I1", format!("sku {sku}: sold={sold} but consumed reservations total {consumed}"));
        }
        if reserved > on_hand || on_hand < 0 {
            add("I1", format!("sku {sku}: reserved={reserved} exceeds on_hand={on_hand} (oversold)"));
        }
    }

    // I2 reservations follow their order.
    let rows = sqlx::query(
        "SELECT r.order_no, r.sku, r.status AS r_status, o.status AS o_status FROM reservations r \
         JOIN orders o ON o.order_no = r.order_no ORDER BY r.order_no, r.sku",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let o_status: String = col(r, "o_status")?;
        let r_status: String = col(r, "r_status")?;
        let expected = OrderStatus::parse(&o_status).map(|s| s.reservation_status().as_str());
        if expected != Some(r_status.as_str()) {
            let (order_no, sku): (String, String) = (col(r, "order_no")?, col(r, "sku")?);
            add("I2", format!("order {order_no} is {o_status} but its reservation of {sku} is {r_status}"));
        }
    }

    // I5 attempts: at most one active per order, and none on an order that is not pending.
    let rows = sqlx::query(
        "SELECT a.order_no, o.status, CAST(COUNT(*) AS BIGINT) AS n FROM payment_attempts a JOIN orders o ON o.order_no = a.order_no \
         WHERE a.status IN ('created','redirected','unknown') GROUP BY a.order_no, o.status ORDER BY a.order_no",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (order_no, status, n): (String, String, i64) = (col(r, "order_no")?, col(r, "status")?, col(r, "n")?);
        if n > 1 {
            add("I5", format!("order {order_no} has {n} active attempts"));
        }
        if status != OrderStatus::PendingPayment.as_str() {
            add("I5", format!("order {order_no} is {status} but still has an active attempt"));
        }
    }

    // I6 events: event ids unique per gateway; an applied event caused exactly one attempt
    // transition (and at most one order transition); other arrivals caused none.
    let rows = sqlx::query(
        "SELECT gateway, event_id, CAST(COUNT(*) AS BIGINT) AS n FROM notifications WHERE event_id IS NOT NULL \
         GROUP BY gateway, event_id HAVING COUNT(*) > 1",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (gateway, event_id): (String, String) = (col(r, "gateway")?, col(r, "event_id")?);
        add("I6", format!("event {gateway}/{event_id} stored more than once"));
    }
    let rows = sqlx::query(
        "SELECT n.id, n.gateway, n.claimed_event_id, n.status, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.notification_id = n.id AND e.entity = 'attempt') AS BIGINT) AS attempt_events, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.notification_id = n.id AND e.entity = 'order') AS BIGINT) AS order_events \
         FROM notifications n ORDER BY n.received_at, n.id",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let status: String = col(r, "status")?;
        let (a, o): (i64, i64) = (col(r, "attempt_events")?, col(r, "order_events")?);
        let ok = match status.as_str() {
            "applied" => a == 1 && o <= 1,
            "received" => false,
            _ => a == 0 && o == 0,
        };
        if !ok {
            let (gateway, event): (String, Option<String>) = (col(r, "gateway")?, col(r, "claimed_event_id")?);
            add(
                "I6",
                format!(
                    "notification {gateway}/{} is {status} with {a} attempt and {o} order transitions",
                    event.unwrap_or_default()
                ),
            );
        }
    }

    // I7 audit: replaying each log gives the current status.
    let logs = sqlx::query(
        "SELECT entity, entity_id, from_status, to_status FROM status_events ORDER BY entity, entity_id, id",
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut grouped: BTreeMap<(String, String), StatusLog> = BTreeMap::new();
    for r in &logs {
        grouped
            .entry((col(r, "entity")?, col(r, "entity_id")?))
            .or_default()
            .push((col(r, "from_status")?, col(r, "to_status")?));
    }
    let orders = sqlx::query("SELECT order_no AS id, status FROM orders").fetch_all(&mut *tx).await?;
    let attempts = sqlx::query("SELECT attempt_ref AS id, status FROM payment_attempts").fetch_all(&mut *tx).await?;
    for (entity, rows) in [("order", &orders), ("attempt", &attempts)] {
        for r in rows {
            let (id, status): (String, String) = (col(r, "id")?, col(r, "status")?);
            let log = grouped.remove(&(entity.to_string(), id.clone())).unwrap_or_default();
            let replayed = if entity == "order" {
                replay_order_log(&log).map(|s| s.map(|s| s.as_str()))
            } else {
                replay_attempt_log(&log).map(|s| s.map(|s| s.as_str()))
            };
            match replayed {
                Ok(Some(s)) if s == status => {}
                Ok(other) => add("I7", format!("{entity} {id} is {status} but its log replays to {other:?}")),
                Err(e) => add("I7", format!("{entity} {id}: {e}")),
            }
        }
    }
    for ((entity, id), _) in grouped {
        add("I7", format!("log rows for {entity} {id}, which does not exist"));
    }
    tx.rollback().await?;
    Ok(out)
}

/// Counts used by tests and operators: orders by status.
pub async fn orders_by_status(db: &Db) -> Result<Vec<(String, i64)>> {
    let rows = sqlx::query("SELECT status, CAST(COUNT(*) AS BIGINT) AS n FROM orders GROUP BY status ORDER BY status")
        .fetch_all(db.read_pool())
        .await?;
    rows.iter().map(|r| Ok((col(r, "status")?, col(r, "n")?))).collect()
}

//! `kassa check`: verifies the invariants of docs/DESIGN.md, and the references between the rows of a
//! checkout, on a consistent snapshot. Each query returns the rows that break an invariant; an
//! empty result means it holds.

use crate::store::sql;
use std::collections::BTreeMap;

use crate::domain::OrderStatus;
use crate::domain::status::{replay_attempt_log, replay_order_log, replay_refund_log};
use crate::error::Result;
use crate::store::{Db, col, fulfilment};
use crate::vault::Vault;

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

/// Every row of a checkout whose parent is missing: what it is, its key, and the parent it names.
const REFERENCES_SQL: &str = "\
    SELECT 'basket' AS row_kind, b.id AS id, 'session' AS parent, b.session_id AS missing FROM baskets b \
      WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = b.session_id) \
    UNION ALL SELECT 'basket line', l.basket_id || '/' || l.sku, 'basket', l.basket_id FROM basket_lines l \
      WHERE NOT EXISTS (SELECT 1 FROM baskets b WHERE b.id = l.basket_id) \
    UNION ALL SELECT 'basket line', l.basket_id || '/' || l.sku, 'sku', l.sku FROM basket_lines l \
      WHERE NOT EXISTS (SELECT 1 FROM skus s WHERE s.sku = l.sku) \
    UNION ALL SELECT 'order', o.order_no, 'session', o.session_id FROM orders o \
      WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = o.session_id) \
    UNION ALL SELECT 'order', o.order_no, 'basket', o.basket_id FROM orders o \
      WHERE NOT EXISTS (SELECT 1 FROM baskets b WHERE b.id = o.basket_id) \
    UNION ALL SELECT 'order line', l.order_no || '/' || CAST(l.line_no AS TEXT), 'order', l.order_no FROM order_lines l \
      WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_no = l.order_no) \
    UNION ALL SELECT 'order line', l.order_no || '/' || CAST(l.line_no AS TEXT), 'sku', l.sku FROM order_lines l \
      WHERE NOT EXISTS (SELECT 1 FROM skus s WHERE s.sku = l.sku) \
    UNION ALL SELECT 'reservation', r.order_no || '/' || r.sku, 'order', r.order_no FROM reservations r \
      WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_no = r.order_no) \
    UNION ALL SELECT 'reservation', r.order_no || '/' || r.sku, 'sku', r.sku FROM reservations r \
      WHERE NOT EXISTS (SELECT 1 FROM skus s WHERE s.sku = r.sku) \
    UNION ALL SELECT 'attempt', a.attempt_ref, 'order', a.order_no FROM payment_attempts a \
      WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_no = a.order_no) \
    ORDER BY 1, 2, 3";

/// Most unreadable keys listed one by one; past it the count says how many more.
const UNREADABLE_LISTED_MAX: usize = 1_000;

/// Runs every check that needs no keys secret and returns all violations found.
pub async fn run(db: &Db) -> Result<Vec<Violation>> {
    run_with(db, None).await
}

/// Runs every check; with the keys secret (`vault`), also that it is the one the database's card
/// keys were sealed with and that every stored key decrypts under it (I9).
pub async fn run_with(db: &Db, vault: Option<&Vault>) -> Result<Vec<Violation>> {
    let mut out = run_snapshot(db).await?;
    if let Some(vault) = vault {
        if fulfilment::keys_check_matches(db, vault).await? == Some(false) {
            out.push(Violation {
                invariant: "I9",
                detail: "the keys secret given does not match the check value stored with the keys".into(),
            });
        }
        let unreadable = fulfilment::unreadable_keys(db, vault, UNREADABLE_LISTED_MAX + 1).await?;
        for (id, sku, order_no) in unreadable.iter().take(UNREADABLE_LISTED_MAX) {
            let whose = order_no.as_deref().map_or("unsold".to_string(), |o| format!("delivered to order {o}"));
            out.push(Violation {
                invariant: "I9",
                detail: format!("key {id} of sku {sku} ({whose}) does not decrypt under the keys secret"),
            });
        }
        if unreadable.len() > UNREADABLE_LISTED_MAX {
            out.push(Violation {
                invariant: "I9",
                detail: "more keys do not decrypt; only the first are listed".into(),
            });
        }
    }
    Ok(out)
}

async fn run_snapshot(db: &Db) -> Result<Vec<Violation>> {
    let mut tx = db.snapshot().await?;
    let mut out = Vec::new();
    let mut add = |invariant: &'static str, detail: String| out.push(Violation { invariant, detail });

    // refs: the rows of a checkout name parents that exist. Foreign keys keep them (migration
    // 0010), unless someone switched them off for a hand-made repair; the checks below join
    // through them and would pass over a row whose parent is missing.
    let rows = sql::query(REFERENCES_SQL).fetch_all(&mut *tx).await?;
    for r in &rows {
        let (row, id, parent, missing): (String, String, String, String) =
            (col(r, "row_kind")?, col(r, "id")?, col(r, "parent")?, col(r, "missing")?);
        add("refs", format!("{row} {id} names {parent} {missing}, which does not exist"));
    }

    // I1 stock: counters equal the reservations they summarise; never more held than on hand.
    let rows = sql::query(
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

    // open orders: each buyer session's count of its orders awaiting payment (what the
    // open-orders limit reads) equals those orders.
    let rows = sql::query(
        "SELECT s.id, s.open_orders, CAST(COUNT(o.order_no) AS BIGINT) AS pending FROM sessions s \
         LEFT JOIN orders o ON o.session_id = s.id AND o.status = 'pending_payment' \
         GROUP BY s.id, s.open_orders HAVING s.open_orders <> COUNT(o.order_no) ORDER BY s.id",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (session, counted, pending): (String, i64, i64) =
            (col(r, "id")?, col(r, "open_orders")?, col(r, "pending")?);
        add(
            "open_orders",
            format!("session {session} counts {counted} open orders but has {pending} awaiting payment"),
        );
    }

    // I2 reservations follow their order.
    let rows = sql::query(
        "SELECT r.order_no, r.sku, r.status AS r_status, o.status AS o_status, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.entity = 'order' AND e.entity_id = r.order_no AND e.to_status = 'paid') AS BIGINT) AS paid_events \
         FROM reservations r JOIN orders o ON o.order_no = r.order_no ORDER BY r.order_no, r.sku",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let o_status: String = col(r, "o_status")?;
        let r_status: String = col(r, "r_status")?;
        let ever_paid = col::<i64>(r, "paid_events")? > 0;
        let expected = OrderStatus::parse(&o_status).map(|s| s.reservation_status(ever_paid).as_str());
        if expected != Some(r_status.as_str()) {
            let (order_no, sku): (String, String) = (col(r, "order_no")?, col(r, "sku")?);
            add("I2", format!("order {order_no} is {o_status} but its reservation of {sku} is {r_status}"));
        }
    }

    // I5 attempts: at most one active per order, and none on an order that is not pending.
    let rows = sql::query(
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
    let rows = sql::query(
        "SELECT gateway, event_id, CAST(COUNT(*) AS BIGINT) AS n FROM notifications WHERE event_id IS NOT NULL \
         GROUP BY gateway, event_id HAVING COUNT(*) > 1",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (gateway, event_id): (String, String) = (col(r, "gateway")?, col(r, "event_id")?);
        add("I6", format!("event {gateway}/{event_id} stored more than once"));
    }
    let rows = sql::query(
        "SELECT n.id, n.gateway, n.claimed_event_id, n.status, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.notification_id = n.id AND e.entity IN ('attempt', 'refund')) AS BIGINT) AS own_events, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.notification_id = n.id AND e.entity = 'order') AS BIGINT) AS order_events \
         FROM notifications n ORDER BY n.received_at, n.id",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let status: String = col(r, "status")?;
        let (a, o): (i64, i64) = (col(r, "own_events")?, col(r, "order_events")?);
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
                    "notification {gateway}/{} is {status} with {a} attempt/refund and {o} order transitions",
                    event.unwrap_or_default()
                ),
            );
        }
    }

    // I3 keys: a delivered digital line has exactly its quantity of keys; no key for an order that
    // was never paid; unsold keys match the SKU's stock. (One row per key with one order line, so
    // a key can never belong to two lines.)
    let rows = sql::query(
        "SELECT l.order_no, l.line_no, l.quantity, o.status, \
           CAST((SELECT COUNT(*) FROM card_keys k WHERE k.order_no = l.order_no AND k.line_no = l.line_no) AS BIGINT) AS keys \
         FROM order_lines l JOIN orders o ON o.order_no = l.order_no WHERE l.kind = 'digital' ORDER BY l.order_no, l.line_no",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (order_no, line_no, quantity, status, keys): (String, i64, i64, String, i64) =
            (col(r, "order_no")?, col(r, "line_no")?, col(r, "quantity")?, col(r, "status")?, col(r, "keys")?);
        let delivered = matches!(status.as_str(), "delivered");
        if delivered && keys != quantity {
            add("I3", format!("order {order_no} line {line_no} is delivered with {keys} keys for quantity {quantity}"));
        }
        if keys > quantity {
            add("I3", format!("order {order_no} line {line_no} holds {keys} keys for quantity {quantity}"));
        }
    }
    let rows = sql::query(
        "SELECT k.id, k.order_no FROM card_keys k WHERE k.order_no IS NOT NULL AND NOT EXISTS \
         (SELECT 1 FROM payment_attempts a WHERE a.order_no = k.order_no AND a.status = 'succeeded') ORDER BY k.id",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (id, order_no): (String, String) = (col(r, "id")?, col(r, "order_no")?);
        add("I3", format!("key {id} was delivered to order {order_no}, which was never paid"));
    }
    let rows = sql::query(
        "SELECT s.sku, s.on_hand, CAST((SELECT COUNT(*) FROM card_keys k WHERE k.sku = s.sku AND k.status = 'available') AS BIGINT) AS unsold \
         FROM skus s WHERE s.kind = 'digital' ORDER BY s.sku",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (sku, on_hand, unsold): (String, i64, i64) = (col(r, "sku")?, col(r, "on_hand")?, col(r, "unsold")?);
        if on_hand != unsold {
            add("I9", format!("digital sku {sku}: on_hand={on_hand} but {unsold} keys are unsold"));
        }
    }

    // I4 money: a paid order captured exactly its total; each attempt's refunds (not failed) stay
    // within what it captured; every capture is tied to a gateway event.
    let rows = sql::query(
        "SELECT order_no, status, total_minor, currency, captured_minor, captured_currency FROM orders \
         WHERE status IN ('paid', 'delivered', 'refunding', 'refunded', 'paid_after_expiry') ORDER BY order_no",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (order_no, total, currency): (String, i64, String) =
            (col(r, "order_no")?, col(r, "total_minor")?, col(r, "currency")?);
        let (captured, captured_currency): (Option<i64>, Option<String>) =
            (col(r, "captured_minor")?, col(r, "captured_currency")?);
        if captured != Some(total) || captured_currency.as_deref() != Some(currency.as_str()) {
            add(
                "I4",
                format!("order {order_no} totals {total} {currency} but captured {captured:?} {captured_currency:?}"),
            );
        }
    }
    let rows = sql::query(
        "SELECT a.attempt_ref, a.captured_minor, \
           CAST(COALESCE((SELECT SUM(r.amount_minor) FROM refunds r WHERE r.attempt_ref = a.attempt_ref AND r.status <> 'failed'), 0) AS BIGINT) AS refunded, \
           CAST(COALESCE((SELECT SUM(c.amount_minor) FROM second_captures c WHERE c.attempt_ref = a.attempt_ref), 0) AS BIGINT) AS again \
         FROM payment_attempts a WHERE EXISTS (SELECT 1 FROM refunds r WHERE r.attempt_ref = a.attempt_ref) ORDER BY a.attempt_ref",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (attempt_ref, captured, refunded, again): (String, Option<i64>, i64, i64) =
            (col(r, "attempt_ref")?, col(r, "captured_minor")?, col(r, "refunded")?, col(r, "again")?);
        // What the attempt captured: its payment and any second capture the gateway made on it.
        let captured = captured.map(|c| c + again);
        if refunded > captured.unwrap_or(0) {
            add(
                "I4",
                format!("attempt {attempt_ref}: refunds total {refunded} but {} was captured", captured.unwrap_or(0)),
            );
        }
    }
    let rows = sql::query(
        "SELECT a.attempt_ref FROM payment_attempts a WHERE a.status = 'succeeded' \
         AND NOT (a.gateway = $1 AND a.captured_minor = 0) AND NOT EXISTS \
         (SELECT 1 FROM status_events e JOIN notifications n ON n.id = e.notification_id \
          WHERE e.entity = 'attempt' AND e.entity_id = a.attempt_ref AND e.to_status = 'succeeded' AND n.status = 'applied') \
         ORDER BY a.attempt_ref",
    )
    .bind(crate::domain::checkout::FREE_GATEWAY)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let attempt_ref: String = col(r, "attempt_ref")?;
        add("I4", format!("attempt {attempt_ref} succeeded without an applied gateway event"));
    }
    // Every gateway transaction that took money is one payment or one second capture, and a
    // second capture is on a succeeded attempt of its order, with its refund returning it.
    let rows = sql::query(
        "SELECT gateway, gateway_txn_id FROM (SELECT gateway, gateway_txn_id FROM payment_attempts \
           WHERE status = 'succeeded' AND gateway_txn_id IS NOT NULL \
           UNION ALL SELECT gateway, gateway_txn_id FROM second_captures) t \
         GROUP BY gateway, gateway_txn_id HAVING COUNT(*) > 1 ORDER BY gateway, gateway_txn_id",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (gateway, txn): (String, String) = (col(r, "gateway")?, col(r, "gateway_txn_id")?);
        add("I4", format!("{gateway} transaction {txn} is recorded as more than one payment"));
    }
    let rows = sql::query(
        "SELECT c.gateway_txn_id FROM second_captures c JOIN payment_attempts a ON a.attempt_ref = c.attempt_ref \
         JOIN refunds r ON r.refund_no = c.refund_no \
         WHERE a.status <> 'succeeded' OR a.order_no <> c.order_no OR a.gateway <> c.gateway \
           OR r.attempt_ref <> c.attempt_ref OR r.amount_minor <> c.amount_minor OR r.kind <> 'duplicate_payment' \
           OR r.gateway_txn_id IS NULL OR r.gateway_txn_id <> c.gateway_txn_id \
         ORDER BY c.gateway_txn_id",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let txn: String = col(r, "gateway_txn_id")?;
        add("I4", format!("second capture {txn} is not on a paid attempt of its order, returned by its refund"));
    }

    // A zero-total order is completed without a gateway: its attempt moves no money.
    let rows = sql::query(
        "SELECT attempt_ref, amount_minor, captured_minor FROM payment_attempts \
         WHERE gateway = $1 AND (amount_minor <> 0 OR COALESCE(captured_minor, 0) <> 0) ORDER BY attempt_ref",
    )
    .bind(crate::domain::checkout::FREE_GATEWAY)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let attempt_ref: String = col(r, "attempt_ref")?;
        add("I4", format!("attempt {attempt_ref} was completed without a gateway but is not for zero"));
    }

    // I8 effects: no fulfilment or "paid" message for an order that was never paid; at most one
    // `order.paid` and one `fulfilment.requested` per order, ever; a refund message for every
    // refund and for how it ended.
    let rows = sql::query(
        "SELECT m.id, m.order_no, m.topic FROM outbox m WHERE m.topic IN ('order.paid', 'order.delivered', 'fulfilment.requested') \
         AND NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.order_no = m.order_no AND a.status = 'succeeded') ORDER BY m.id",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (id, order_no, topic): (String, String, String) = (col(r, "id")?, col(r, "order_no")?, col(r, "topic")?);
        add("I8", format!("outbox message {id} ({topic}) for order {order_no}, which was never paid"));
    }
    let rows = sql::query(
        "SELECT order_no, topic, CAST(COUNT(*) AS BIGINT) AS n FROM outbox \
         WHERE topic IN ('order.paid', 'order.delivered', 'fulfilment.requested') \
         GROUP BY order_no, topic HAVING COUNT(*) > 1 ORDER BY order_no, topic",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (order_no, topic, n): (String, String, i64) = (col(r, "order_no")?, col(r, "topic")?, col(r, "n")?);
        add("I8", format!("order {order_no} has {n} {topic} messages (at most one ever)"));
    }
    let rows = sql::query("SELECT topic, payload FROM outbox WHERE topic LIKE 'refund.%'").fetch_all(&mut *tx).await?;
    let mut sent = std::collections::BTreeSet::new();
    for r in &rows {
        let (topic, payload): (String, String) = (col(r, "topic")?, col(r, "payload")?);
        let refund_no = serde_json::from_str::<serde_json::Value>(&payload)
            .ok()
            .and_then(|v| v["refund_no"].as_str().map(str::to_string))
            .unwrap_or_default();
        sent.insert((refund_no, topic));
    }
    // Retention deletes messages delivered before a time it records: a message written before that
    // time may be gone (it was delivered when it was written, or later).
    let pruned_before: i64 = sql::query_scalar::<String>("SELECT value FROM settings WHERE name = $1")
        .bind(crate::store::retention::MESSAGES_PRUNED_BEFORE)
        .fetch_optional(&mut *tx)
        .await?
        .and_then(|v| v.parse().ok())
        .unwrap_or(i64::MIN);
    let rows = sql::query("SELECT refund_no, order_no, status, created_at, updated_at FROM refunds ORDER BY refund_no")
        .fetch_all(&mut *tx)
        .await?;
    for r in &rows {
        let (refund_no, order_no, status): (String, String, String) =
            (col(r, "refund_no")?, col(r, "order_no")?, col(r, "status")?);
        let (created_at, updated_at): (i64, i64) = (col(r, "created_at")?, col(r, "updated_at")?);
        let mut due = Vec::new();
        if created_at >= pruned_before {
            due.push("refund.requested".to_string());
        }
        if matches!(status.as_str(), "succeeded" | "failed") && updated_at >= pruned_before {
            due.push(format!("refund.{status}"));
        }
        for topic in due {
            if !sent.contains(&(refund_no.clone(), topic.clone())) {
                add(
                    "I8",
                    format!("refund {refund_no} of order {order_no} is {status} but no {topic} message was sent"),
                );
            }
        }
    }

    // S1 shipping reports: one per order that was delivered, of the payment that paid it, a
    // mini-program (JSAPI) payment with its payer known.
    let rows = sql::query(
        "SELECT s.order_no, s.attempt_ref, o.captured_attempt_ref, a.gateway, a.channel, a.payer_openid, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.entity = 'order' AND e.entity_id = s.order_no \
             AND e.to_status = 'delivered') AS BIGINT) AS delivered_events \
         FROM shipping_reports s JOIN orders o ON o.order_no = s.order_no \
         JOIN payment_attempts a ON a.attempt_ref = s.attempt_ref ORDER BY s.order_no",
    )
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let order_no: String = col(r, "order_no")?;
        let attempt_ref: String = col(r, "attempt_ref")?;
        if col::<i64>(r, "delivered_events")? == 0 {
            add("S1", format!("order {order_no} has a shipping report but was never delivered"));
        }
        if col::<Option<String>>(r, "captured_attempt_ref")?.as_deref() != Some(attempt_ref.as_str()) {
            add("S1", format!("order {order_no}'s shipping report names {attempt_ref}, which did not pay it"));
        }
        let (gateway, channel): (String, String) = (col(r, "gateway")?, col(r, "channel")?);
        let payer_known = col::<Option<String>>(r, "payer_openid")?.is_some();
        if !crate::domain::shipping::is_reported(&gateway, &channel, payer_known) {
            add("S1", format!("order {order_no} has a shipping report for a {gateway} {channel} payment"));
        }
    }

    // I7 audit: replaying each log gives the current status.
    let logs = sql::query(
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
    let orders = sql::query("SELECT order_no AS id, status FROM orders").fetch_all(&mut *tx).await?;
    let attempts = sql::query("SELECT attempt_ref AS id, status FROM payment_attempts").fetch_all(&mut *tx).await?;
    let refunds = sql::query("SELECT refund_no AS id, status FROM refunds").fetch_all(&mut *tx).await?;
    for (entity, rows) in [("order", &orders), ("attempt", &attempts), ("refund", &refunds)] {
        for r in rows {
            let (id, status): (String, String) = (col(r, "id")?, col(r, "status")?);
            let log = grouped.remove(&(entity.to_string(), id.clone())).unwrap_or_default();
            let replayed = match entity {
                "order" => replay_order_log(&log).map(|s| s.map(|s| s.as_str())),
                "attempt" => replay_attempt_log(&log).map(|s| s.map(|s| s.as_str())),
                _ => replay_refund_log(&log).map(|s| s.map(|s| s.as_str())),
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
    let rows = sql::query("SELECT status, CAST(COUNT(*) AS BIGINT) AS n FROM orders GROUP BY status ORDER BY status")
        .fetch_all(db.read_pool())
        .await?;
    rows.iter().map(|r| Ok((col(r, "status")?, col(r, "n")?))).collect()
}

//! `kassa check`: verifies the invariants of docs/DESIGN.md, and the references between the rows of a
//! checkout, on a consistent snapshot. Each query returns the rows that break an invariant; an
//! empty result means it holds.
//!
//! A full run reads every row. A run [`Scope::Since`] a clean run reads what changed after it: the
//! orders with a status change logged since (and their lines, reservations, payments, refunds,
//! notifications, keys, messages and logs, each joined to the changed orders by index), beside
//! what is shared and bounded (each SKU's held stock, the open-order counts of the sessions with
//! an order awaiting payment, unsold keys) — so its time follows the shop's recent activity, not
//! its history. What only a full run looks at: the units each SKU sold against every
//! consumed reservation, rows whose parent is gone that no changed order names, and a gateway event
//! id stored twice (the database's unique index refuses it anyway).

use crate::store::sql;
use std::collections::BTreeMap;

use crate::domain::OrderStatus;
use crate::domain::status::{replay_attempt_log, replay_order_log, replay_refund_log};
use crate::error::Result;
use crate::store::{Db, col};
use crate::vault::Vault;

pub use super::check_scope::{Scope, Violation};
use super::check_scope::{in_scope, settled_log_id};

/// `(from, to)` status pairs of one entity, oldest first.
type StatusLog = Vec<(Option<String>, String)>;

/// Every row of a checkout whose parent is missing: what it is, its key, and the parent it names;
/// `$1` the scope (see [`in_scope`]).
const REFERENCES_SQL: &str = "\
    SELECT 'basket' AS row_kind, b.id AS id, 'session' AS parent, b.session_id AS missing FROM baskets b \
      WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = b.session_id) AND b.status = 'open' \
    UNION ALL SELECT 'basket', b.id, 'session', b.session_id FROM baskets b \
      WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = b.session_id) AND b.status <> 'open' AND {b} \
    UNION ALL SELECT 'basket line', l.basket_id || '/' || l.sku, 'basket', l.basket_id FROM basket_lines l \
      WHERE NOT EXISTS (SELECT 1 FROM baskets b WHERE b.id = l.basket_id) AND $1 IS NULL \
    UNION ALL SELECT 'basket line', l.basket_id || '/' || l.sku, 'sku', l.sku FROM basket_lines l \
      WHERE NOT EXISTS (SELECT 1 FROM skus s WHERE s.sku = l.sku) AND $1 IS NULL \
    UNION ALL SELECT 'order', o.order_no, 'session', o.session_id FROM orders o \
      WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = o.session_id) AND {o} \
    UNION ALL SELECT 'order', o.order_no, 'basket', o.basket_id FROM orders o \
      WHERE NOT EXISTS (SELECT 1 FROM baskets b WHERE b.id = o.basket_id) AND {o} \
    UNION ALL SELECT 'order line', l.order_no || '/' || CAST(l.line_no AS TEXT), 'order', l.order_no FROM order_lines l \
      WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_no = l.order_no) AND {l} \
    UNION ALL SELECT 'order line', l.order_no || '/' || CAST(l.line_no AS TEXT), 'sku', l.sku FROM order_lines l \
      WHERE NOT EXISTS (SELECT 1 FROM skus s WHERE s.sku = l.sku) AND {l} \
    UNION ALL SELECT 'reservation', r.order_no || '/' || r.sku, 'order', r.order_no FROM reservations r \
      WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_no = r.order_no) AND {r} \
    UNION ALL SELECT 'reservation', r.order_no || '/' || r.sku, 'sku', r.sku FROM reservations r \
      WHERE NOT EXISTS (SELECT 1 FROM skus s WHERE s.sku = r.sku) AND {r} \
    UNION ALL SELECT 'attempt', a.attempt_ref, 'order', a.order_no FROM payment_attempts a \
      WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_no = a.order_no) AND {a} \
    ORDER BY 1, 2, 3";

/// The setting that holds the last status-log id a clean run had read.
pub const CHECKED_THROUGH: &str = "check_clean_through";

/// Most rows of one kind of violation listed one by one; past it a count says how many more.
const LISTED_MAX: i64 = 1_000;

/// Runs every check that needs no keys secret on every row and returns all violations found.
pub async fn run(db: &Db) -> Result<Vec<Violation>> {
    run_with(db, None).await
}

/// Runs every check on every row; with the keys secret (`vault`), also that it is the one the
/// database's card keys were sealed with and that every stored key decrypts under it (I9).
pub async fn run_with(db: &Db, vault: Option<&Vault>) -> Result<Vec<Violation>> {
    Ok(run_scoped(db, vault, Scope::Full).await?.0)
}

/// The scope of a run that reads what changed since the last clean one: [`Scope::Since`] the
/// status-log id it recorded, or [`Scope::Full`] when none did.
pub async fn since_last_clean(db: &Db) -> Result<Scope> {
    let through: Option<String> = sql::query_scalar("SELECT value FROM settings WHERE name = $1")
        .bind(CHECKED_THROUGH)
        .fetch_optional(db.read_pool())
        .await?;
    Ok(through.and_then(|v| v.parse().ok()).map_or(Scope::Full, Scope::Since))
}

/// Records that every row up to status-log id `checked.through` was found consistent (and
/// every card key read decrypted), for the next run [`since_last_clean`].
pub async fn record_clean(db: &Db, checked: Checked) -> Result<()> {
    if let Some(keys) = checked.keys {
        super::check_keys::record_clean(db, keys).await?;
    }
    super::settings::set(db, CHECKED_THROUGH, Some(&checked.through.to_string())).await
}

/// What a clean run read, for [`record_clean`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checked {
    /// The last status-log id the snapshot held.
    pub through: i64,
    /// The card keys' reading, when a keys secret was given.
    pub keys: Option<super::check_keys::KeysRead>,
}

/// The full run's open-orders statement: every session's count against its orders awaiting
/// payment, those orders counted once per session first (joined to the sessions by an index
/// built for the join; a join that looked each session's orders up by status read every order
/// awaiting payment once per session).
pub const OPEN_ORDERS_FULL_SQL: &str = "SELECT s.id, s.open_orders, CAST(COALESCE(p.n, 0) AS BIGINT) AS pending \
     FROM sessions s LEFT JOIN (SELECT session_id, COUNT(*) AS n FROM orders WHERE status = 'pending_payment' \
     GROUP BY session_id) p ON p.session_id = s.id \
     WHERE CAST($1 AS BIGINT) IS NULL AND s.open_orders <> COALESCE(p.n, 0) ORDER BY s.id";

/// Runs the checks on `scope`; returns the violations and what was read (what a clean run
/// covered).
pub async fn run_scoped(db: &Db, vault: Option<&Vault>, scope: Scope) -> Result<(Vec<Violation>, Checked)> {
    let (mut out, through) = run_snapshot(db, scope).await?;
    let mut keys = None;
    if let Some(vault) = vault {
        let (found, read) = super::check_keys::check(db, vault, scope).await?;
        out.extend(found);
        keys = Some(read);
    }
    Ok((out, Checked { through, keys }))
}

async fn run_snapshot(db: &Db, scope: Scope) -> Result<(Vec<Violation>, i64)> {
    // What the run records as read: on PostgreSQL the log's settled id, taken before the snapshot
    // (which sees every row up to it, and perhaps more, read again next time); where none was
    // settled, where the run began (a full run: nothing).
    let settled = settled_log_id(db).await?;
    let mut tx = db.snapshot().await?;
    if matches!(scope, Scope::Since(_)) && db.kind() == crate::store::DbKind::Postgres {
        // What changed is a few orders of a long history: each is looked up by index, so that the
        // run's time follows the changes. PostgreSQL's estimate of how many orders a stretch of
        // the log names runs high, and would rather read a whole table (a ten-million-order
        // history: 3 s for a page of the audit, against 0.07 s by index).
        for off in ["enable_hashjoin", "enable_mergejoin", "enable_seqscan"] {
            sql::query(&format!("SET LOCAL {off} = off")).execute(&mut *tx).await?;
        }
    }
    let mut out = Vec::new();
    let mut add = |invariant: &'static str, detail: String| out.push(Violation { invariant, detail });
    let through: i64 = match (db.kind(), settled) {
        (_, Some(id)) => id,
        (crate::store::DbKind::Postgres, None) => scope.arg().unwrap_or(0),
        (crate::store::DbKind::Sqlite, None) => {
            sql::query_scalar("SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM status_events")
                .fetch_one(&mut *tx)
                .await?
        }
    };
    let since = scope.arg();
    let changed = |col: &str, n: usize| in_scope(scope, col, n);

    // refs: the rows of a checkout name parents that exist. Foreign keys keep them (migration
    // 0010), unless someone switched them off for a hand-made repair; the checks below join
    // through them and would pass over a row whose parent is missing.
    let refs = REFERENCES_SQL
        .replace("{b}", &changed("b.order_no", 1))
        .replace("{o}", &changed("o.order_no", 1))
        .replace("{l}", &changed("l.order_no", 1))
        .replace("{r}", &changed("r.order_no", 1))
        .replace("{a}", &changed("a.order_no", 1));
    let rows = sql::query(&refs).bind(since).fetch_all(&mut *tx).await?;
    for r in &rows {
        let (row, id, parent, missing): (String, String, String, String) =
            (col(r, "row_kind")?, col(r, "id")?, col(r, "parent")?, col(r, "missing")?);
        add("refs", format!("{row} {id} names {parent} {missing}, which does not exist"));
    }

    // I1 stock: counters equal the reservations they summarise; never more held than on hand.
    let rows = sql::query(
        "SELECT s.sku, s.on_hand, s.reserved, s.sold, \
           CAST(COALESCE((SELECT SUM(r.quantity) FROM reservations r WHERE r.sku = s.sku AND r.status = 'active'), 0) AS BIGINT) AS active_qty, \
           CAST(CASE WHEN $1 IS NULL THEN COALESCE((SELECT SUM(r.quantity) FROM reservations r \
             WHERE r.sku = s.sku AND r.status = 'consumed'), 0) ELSE 0 END AS BIGINT) AS consumed_qty \
         FROM skus s ORDER BY s.sku",
    )
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let sku: String = col(r, "sku")?;
        let (on_hand, reserved, sold): (i64, i64, i64) = (col(r, "on_hand")?, col(r, "reserved")?, col(r, "sold")?);
        let (active, consumed): (i64, i64) = (col(r, "active_qty")?, col(r, "consumed_qty")?);
        if reserved != active {
            add("I1", format!("sku {sku}: reserved={reserved} but active reservations hold {active}"));
        }
        if sold != consumed && scope == Scope::Full {
            add("I1", format!("sku {sku}: sold={sold} but consumed reservations total {consumed}"));
        }
        if reserved > on_hand || on_hand < 0 {
            add("I1", format!("sku {sku}: reserved={reserved} exceeds on_hand={on_hand} (oversold)"));
        }
    }

    // open orders: each buyer session's count of its orders awaiting payment (what the
    // open-orders limit reads) equals those orders; beyond a full run, the sessions of the orders
    // awaiting payment and of the changed ones (an order moves its session's count as it is
    // placed and as it leaves `pending_payment`, both logged).
    let rows = sql::query(&match scope {
        Scope::Full => OPEN_ORDERS_FULL_SQL.to_string(),
        // Each session's orders read by the session's index (the status tested on the rows, not
        // by the index of the orders awaiting payment, which a stale estimate may pick).
        Scope::Since(_) => format!(
            "SELECT t.* FROM (SELECT s.id, s.open_orders, CAST((SELECT COALESCE(SUM(CASE WHEN o.status = 'pending_payment' \
             THEN 1 ELSE 0 END), 0) FROM orders o WHERE o.session_id = s.id) AS BIGINT) AS pending FROM sessions s \
             WHERE s.id IN (SELECT p.session_id FROM orders p WHERE p.status = 'pending_payment' \
             UNION SELECT c.session_id FROM orders c WHERE {})) t WHERE t.open_orders <> t.pending ORDER BY t.id",
            changed("c.order_no", 1)
        ),
    })
    .bind(since)
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

    // I2 reservations follow their order. Counted by the statuses that decide it, so a run holds
    // a few rows however long the history; the reservations of a combination the domain refuses
    // are then listed.
    let ever_paid = "CASE WHEN EXISTS (SELECT 1 FROM status_events e WHERE e.entity = 'order' \
         AND e.entity_id = r.order_no AND e.to_status = 'paid') THEN 1 ELSE 0 END";
    let rows = sql::query(&format!(
        "SELECT o.status AS o_status, r.status AS r_status, {ever_paid} AS ever_paid, CAST(COUNT(*) AS BIGINT) AS n \
         FROM reservations r JOIN orders o ON o.order_no = r.order_no WHERE {} GROUP BY o.status, r.status, {ever_paid}",
        changed("r.order_no", 1)
    ))
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (o_status, r_status, ever): (String, String, i64) =
            (col(r, "o_status")?, col(r, "r_status")?, col(r, "ever_paid")?);
        let expected = OrderStatus::parse(&o_status).map(|s| s.reservation_status(ever == 1).as_str());
        if expected == Some(r_status.as_str()) {
            continue;
        }
        let listed = sql::query(&format!(
            "SELECT r.order_no, r.sku FROM reservations r JOIN orders o ON o.order_no = r.order_no \
             WHERE {} AND o.status = $2 AND r.status = $3 AND {ever_paid} = $4 ORDER BY r.order_no, r.sku LIMIT $5",
            changed("r.order_no", 1)
        ))
        .bind_all(crate::args![since, &o_status, &r_status, ever, LISTED_MAX])
        .fetch_all(&mut *tx)
        .await?;
        for l in &listed {
            let (order_no, sku): (String, String) = (col(l, "order_no")?, col(l, "sku")?);
            add("I2", format!("order {order_no} is {o_status} but its reservation of {sku} is {r_status}"));
        }
        let n: i64 = col(r, "n")?;
        if n > LISTED_MAX {
            add("I2", format!("{} more reservations of {o_status} orders are {r_status}", n - LISTED_MAX));
        }
    }

    // I5 attempts: at most one active per order, and none on an order that is not pending.
    let rows = sql::query(&format!(
        "SELECT a.order_no, o.status, CAST(COUNT(*) AS BIGINT) AS n FROM payment_attempts a JOIN orders o ON o.order_no = a.order_no \
         WHERE a.status IN ('created','redirected','unknown') AND {} GROUP BY a.order_no, o.status ORDER BY a.order_no",
        changed("a.order_no", 1)
    ))
    .bind(since)
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
         AND $1 IS NULL GROUP BY gateway, event_id HAVING COUNT(*) > 1",
    )
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (gateway, event_id): (String, String) = (col(r, "gateway")?, col(r, "event_id")?);
        add("I6", format!("event {gateway}/{event_id} stored more than once"));
    }
    // Only the notifications that break it come back (an applied one caused one attempt or refund
    // transition and at most one order transition; one received and never decided is stuck; any
    // other caused none), so a run holds few rows however many arrived.
    let rows = sql::query(&format!(
        "SELECT t.* FROM (SELECT n.id, n.received_at, n.gateway, n.claimed_event_id, n.status, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.notification_id = n.id AND e.entity IN ('attempt', 'refund')) AS BIGINT) AS own_events, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.notification_id = n.id AND e.entity = 'order') AS BIGINT) AS order_events \
         FROM notifications n WHERE {}) t \
         WHERE NOT (t.status = 'applied' AND t.own_events = 1 AND t.order_events <= 1) \
         AND NOT (t.status <> 'applied' AND t.status <> 'received' AND t.own_events = 0 AND t.order_events = 0) \
         ORDER BY t.received_at, t.id",
        match scope {
            Scope::Full => changed("n.order_no", 1),
            Scope::Since(_) => format!(
                "n.id IN (SELECT nc.id FROM notifications nc WHERE {} \
                 UNION SELECT sn.notification_id FROM status_events sn WHERE sn.id > CAST($1 AS BIGINT))",
                changed("nc.order_no", 1)
            ),
        }
    ))
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let status: String = col(r, "status")?;
        let (a, o): (i64, i64) = (col(r, "own_events")?, col(r, "order_events")?);
        let (gateway, event): (String, Option<String>) = (col(r, "gateway")?, col(r, "claimed_event_id")?);
        add(
            "I6",
            format!(
                "notification {gateway}/{} is {status} with {a} attempt/refund and {o} order transitions",
                event.unwrap_or_default()
            ),
        );
    }

    // I3 keys: a delivered digital line has exactly its quantity of keys; no key for an order that
    // was never paid; unsold keys match the SKU's stock. (One row per key with one order line, so
    // a key can never belong to two lines.)
    let rows = sql::query(&format!(
        "SELECT t.* FROM (SELECT l.order_no, l.line_no, l.quantity, o.status, \
           CAST((SELECT COUNT(*) FROM card_keys k WHERE k.order_no = l.order_no AND k.line_no = l.line_no) AS BIGINT) AS keys \
         FROM order_lines l JOIN orders o ON o.order_no = l.order_no WHERE l.kind = 'digital' AND {}) t \
         WHERE t.keys > t.quantity OR (t.status = 'delivered' AND t.keys <> t.quantity) ORDER BY t.order_no, t.line_no",
        changed("l.order_no", 1)
    ))
    .bind(since)
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
    let rows = sql::query(&format!(
        "SELECT k.id, k.order_no FROM card_keys k WHERE k.order_no IS NOT NULL AND {} AND NOT EXISTS \
         (SELECT 1 FROM payment_attempts a WHERE a.order_no = k.order_no AND a.status = 'succeeded') ORDER BY k.id",
        changed("k.order_no", 1)
    ))
    .bind(since)
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

    for (invariant, detail) in super::check_money::check(&mut tx, scope).await? {
        add(invariant, detail);
    }

    // I8 effects: no fulfilment or "paid" message for an order that was never paid; at most one
    // `order.paid` and one `fulfilment.requested` per order, ever; a refund message for every
    // refund and for how it ended.
    let rows = sql::query(&format!(
        "SELECT m.id, m.order_no, m.topic FROM outbox m WHERE m.topic IN ('order.paid', 'order.delivered', 'fulfilment.requested') \
         AND {} AND NOT EXISTS (SELECT 1 FROM payment_attempts a WHERE a.order_no = m.order_no AND a.status = 'succeeded') ORDER BY m.id",
        changed("m.order_no", 1)
    ))
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (id, order_no, topic): (String, String, String) = (col(r, "id")?, col(r, "order_no")?, col(r, "topic")?);
        add("I8", format!("outbox message {id} ({topic}) for order {order_no}, which was never paid"));
    }
    let rows = sql::query(&format!(
        "SELECT order_no, topic, CAST(COUNT(*) AS BIGINT) AS n FROM outbox \
         WHERE topic IN ('order.paid', 'order.delivered', 'fulfilment.requested') AND {} \
         GROUP BY order_no, topic HAVING COUNT(*) > 1 ORDER BY order_no, topic",
        changed("order_no", 1)
    ))
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
    for r in &rows {
        let (order_no, topic, n): (String, String, i64) = (col(r, "order_no")?, col(r, "topic")?, col(r, "n")?);
        add("I8", format!("order {order_no} has {n} {topic} messages (at most one ever)"));
    }
    let rows = sql::query(&format!(
        "SELECT topic, payload FROM outbox WHERE topic LIKE 'refund.%' AND {}",
        changed("order_no", 1)
    ))
    .bind(since)
    .fetch_all(&mut *tx)
    .await?;
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
    let rows = sql::query(&format!(
        "SELECT refund_no, order_no, status, created_at, updated_at FROM refunds WHERE {} ORDER BY refund_no",
        changed("order_no", 1)
    ))
    .bind(since)
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
    let rows = sql::query(&format!(
        "SELECT s.order_no, s.attempt_ref, o.captured_attempt_ref, a.gateway, a.channel, a.payer_openid, \
           CAST((SELECT COUNT(*) FROM status_events e WHERE e.entity = 'order' AND e.entity_id = s.order_no \
             AND e.to_status = 'delivered') AS BIGINT) AS delivered_events \
         FROM shipping_reports s JOIN orders o ON o.order_no = s.order_no \
         JOIN payment_attempts a ON a.attempt_ref = s.attempt_ref WHERE {} ORDER BY s.order_no",
        changed("s.order_no", 1)
    ))
    .bind(since)
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

    // I7 audit: replaying each log gives the current status; a page of orders at a time, so that
    // what a run holds stays the same however long the history.
    let mut after = String::new();
    loop {
        let page: Vec<String> = sql::query_scalar(&format!(
            "SELECT o.order_no FROM orders o WHERE o.order_no > $2 AND {} ORDER BY o.order_no LIMIT $3",
            changed("o.order_no", 1)
        ))
        .bind(since)
        .bind(&after)
        .bind(AUDIT_PAGE)
        .fetch_all(&mut *tx)
        .await?;
        let Some(last) = page.last() else { break };
        audit_page(&mut tx, &page, &mut add).await?;
        after.clone_from(last);
    }
    for (invariant, detail) in super::check_buyer::check(&mut tx, since, &changed("{col}", 1)).await? {
        add(invariant, detail);
    }
    for (invariant, detail) in super::check_promotions::check(&mut tx, since, &changed("{col}", 1)).await? {
        add(invariant, detail);
    }
    for (invariant, detail) in super::check_cases::check(&mut tx).await? {
        add(invariant, detail);
    }
    if scope == Scope::Full {
        let orphans: Vec<String> = sql::query_scalar(
            "SELECT DISTINCT e.order_no FROM status_events e \
             WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.order_no = e.order_no) ORDER BY e.order_no",
        )
        .fetch_all(&mut *tx)
        .await?;
        for order_no in orphans {
            add("I7", format!("log rows for order {order_no}, which does not exist"));
        }
    }
    tx.rollback().await?;
    Ok((out, through))
}

/// Orders whose logs one step of the audit replays.
const AUDIT_PAGE: i64 = 500;

/// Replays the logs of the orders `page` names, their attempts' and refunds', against their rows.
async fn audit_page(
    tx: &mut crate::store::Tx<'static>,
    page: &[String],
    add: &mut impl FnMut(&'static str, String),
) -> Result<()> {
    let marks: Vec<String> = (1..=page.len()).map(|i| format!("${i}")).collect();
    let marks = marks.join(", ");
    let args: Vec<sql::Arg> = page.iter().map(|o| sql::Arg::from(o.as_str())).collect();
    let logs = sql::query(&format!(
        "SELECT entity, entity_id, from_status, to_status FROM status_events WHERE order_no IN ({marks}) \
         ORDER BY entity, entity_id, id"
    ))
    .bind_all(args.clone())
    .fetch_all(&mut **tx)
    .await?;
    let mut grouped: BTreeMap<(String, String), StatusLog> = BTreeMap::new();
    for r in &logs {
        grouped
            .entry((col(r, "entity")?, col(r, "entity_id")?))
            .or_default()
            .push((col(r, "from_status")?, col(r, "to_status")?));
    }
    for (entity, table, key) in [
        ("order", "orders", "order_no"),
        ("attempt", "payment_attempts", "attempt_ref"),
        ("refund", "refunds", "refund_no"),
    ] {
        let rows = sql::query(&format!("SELECT {key} AS id, status FROM {table} WHERE order_no IN ({marks})"))
            .bind_all(args.clone())
            .fetch_all(&mut **tx)
            .await?;
        for r in &rows {
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
    Ok(())
}

//! Query plans: the hot and periodic queries read by index, and SQLite's `IN` lists rewritten by
//! migration 9 with their tables rebuilt.

use kassa::store::sql;

use crate::store::{fresh_sqlite, number};
use kassa::store::engine::EngineConfig;

/// The plan SQLite chose for `sql` (its parameters unbound: the plan does not depend on them).
async fn plan_of(url: &str, sql: &str) -> Vec<String> {
    let path = url.strip_prefix("sqlite://").unwrap().split('?').next().unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let mut rows = plan.raw_query();
    let mut details = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        details.push(row.get::<_, String>("detail").unwrap());
    }
    details
}

/// Asserts a plan reaches its rows by key or by a (partial) index, never by reading a whole table
/// that grows with the shop's history.
fn assert_no_table_scan(what: &str, plan: &[String]) {
    assert!(!plan.is_empty(), "{what}: no plan");
    for step in plan {
        let scans_table = step.starts_with("SCAN") && !step.contains(" USING ");
        assert!(!scans_table && !step.starts_with("MATERIALIZE"), "{what} plan: {plan:?}");
    }
}

/// The basket view is read on every basket change and checkout page, its lines re-priced on every
/// confirm, an order's parts and a digital line's card keys on every payment, and the reconciler's claims
/// and the monitor's alert query run on every tick (the claims inside a write command, holding up
/// every other writer on SQLite): each must reach its rows by key or by a partial index, never by
/// scanning a table that grows with the shop's history (a scan in the basket view once cut the
/// HTTP benchmark's throughput by two thirds).
#[tokio::test]
async fn hot_and_periodic_queries_read_by_index() {
    let (_dir, url, _db) = fresh_sqlite(EngineConfig::default()).await;
    let queries = [
        ("basket view", kassa::store::catalog::BASKET_VIEW_SQL.to_string(), None),
        ("order parts of a payment", kassa::store::payments::ORDER_PARTS_SQL.to_string(), None),
        ("order parts of a notification", kassa::store::payments::order_parts_of_attempt_sql().to_string(), None),
        ("a basket's lines re-priced", kassa::store::checkout::PRICE_LINES_SQL.to_string(), None),
        (
            "a digital line's card keys handed out",
            kassa::store::fulfilment::key_delivery_sql(kassa::store::DbKind::Sqlite),
            Some("card_keys_available"),
        ),
        (
            "attempt claim",
            kassa::store::reconcile::claim_attempts_sql(kassa::store::DbKind::Sqlite),
            Some("payment_attempts_one_active"),
        ),
        (
            "refund claim",
            kassa::store::reconcile::claim_refunds_sql(kassa::store::DbKind::Sqlite),
            Some("refunds_processing"),
        ),
        (
            "unknown attempts",
            kassa::workers::monitor::UNKNOWN_ATTEMPTS_SQL.to_string(),
            Some("payment_attempts_unknown"),
        ),
    ];
    for (what, sql, index) in queries {
        let plan = plan_of(&url, &sql).await;
        assert_no_table_scan(what, &plan);
        if let Some(index) = index {
            assert!(plan.iter().any(|s| s.contains(index)), "{what} does not use {index}: {plan:?}");
        }
    }
}

/// `kassa check --full` compares every session's open-orders count with its orders awaiting
/// payment: those orders are counted once, grouped by session, before the sessions are read, and
/// never looked up again for each session (which reads every order awaiting payment once per
/// session: a time that grows with the product of the two).
#[tokio::test]
async fn the_full_checks_open_orders_count_reads_the_orders_once() {
    let (_dir, url, _db) = fresh_sqlite(EngineConfig::default()).await;
    let plan = plan_of(&url, kassa::store::check::OPEN_ORDERS_FULL_SQL).await;
    let orders = plan.iter().position(|s| s.contains("orders")).expect("orders read");
    let sessions = plan.iter().position(|s| s.contains(" s ") || s.ends_with(" s")).expect("sessions read");
    assert!(plan[..orders].iter().any(|s| s.starts_with("MATERIALIZE")), "{plan:?}");
    assert!(orders < sessions, "the orders are counted before the sessions are read: {plan:?}");
}

/// `kassa check`'s C4 finds the case of each refund numbered after one by the case's key, not by
/// testing a pattern built from every case against every refund.
#[tokio::test]
async fn the_case_refunds_find_their_case_by_key() {
    let (_dir, url, _db) = fresh_sqlite(EngineConfig::default()).await;
    let plan = plan_of(&url, kassa::store::check_cases::CASE_REFUNDS_SQL).await;
    let cases = plan.iter().find(|s| s.contains(" c ")).expect("cases read");
    assert!(cases.starts_with("SEARCH") && cases.contains("(id=?)"), "{plan:?}");
}

/// A statement day reads the day's succeeded payments from the day's changes (by their time)
/// and each payment by its key, never every payment of the gateway; a refund's fee finds the
/// refund's payment by its key.
#[tokio::test]
async fn a_statement_day_reads_the_days_rows() {
    let (_dir, url, _db) = fresh_sqlite(EngineConfig::default()).await;
    let plan = plan_of(&url, &kassa::store::statements::day_payments_sql()).await;
    assert!(plan[0].contains("status_events_succeeded"), "{plan:?}");
    assert!(plan.iter().all(|s| !s.contains("payment_attempts_by_gateway")), "{plan:?}");
    // The keys of a day's lines, 500 to a statement: each looked up by its key, never every
    // payment of the gateway by the gateway's index.
    let keys = (2..502).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ");
    for lookup in kassa::store::statements::key_lookups() {
        let plan = plan_of(&url, &format!("{lookup} ({keys})")).await;
        assert_no_table_scan("a statement line's lookup", &plan);
        assert!(plan.iter().all(|s| !s.contains("by_gateway")), "{lookup}: {plan:?}");
    }
    let plan = plan_of(&url, kassa::store::statements::REFUND_FEE_SQL).await;
    assert_no_table_scan("a refund's fee", &plan);
    assert!(plan.iter().all(|s| !s.contains("LIST SUBQUERY") && !s.contains("by_gateway")), "{plan:?}");
}

/// The schema an older kassa left: SQLite's migrations 1 to 8, as it applied them.
const SQLITE_MIGRATIONS_1_TO_8: [&str; 8] = [
    include_str!("../../migrations/sqlite/0001_init.sql"),
    include_str!("../../migrations/sqlite/0002_sweep_claims.sql"),
    include_str!("../../migrations/sqlite/0003_fulfilment_refunds.sql"),
    include_str!("../../migrations/sqlite/0004_admin.sql"),
    include_str!("../../migrations/sqlite/0005_event_index.sql"),
    include_str!("../../migrations/sqlite/0006_captured_attempt.sql"),
    include_str!("../../migrations/sqlite/0007_reconciliation.sql"),
    include_str!("../../migrations/sqlite/0008_periodic_indexes.sql"),
];

/// How many tables and indexes of a SQLite schema still state a condition as an `IN` list.
const IN_LISTS_LEFT: &str = "SELECT CAST(COUNT(*) AS BIGINT) FROM sqlite_schema WHERE sql LIKE '% IN (''%'";

/// Migration 9 rewrites SQLite's `IN` lists (CHECK constraints, the one-active-attempt index) as
/// comparisons, rebuilding each table that holds one. On a database migrated to version 8, with
/// rows in it: every row stays, no list is left, the database is intact, its references hold, and
/// the rewritten conditions refuse what they refused —
/// a status outside the list, a second active attempt — while the reconciler's claim still
/// reads the active attempts through their index.
#[tokio::test]
async fn sqlite_in_lists_are_rewritten_by_rebuilding_their_tables() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("old.db").display());
    {
        let mut script =
            "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL);".to_string();
        for (i, sql) in SQLITE_MIGRATIONS_1_TO_8.iter().enumerate() {
            script.push_str(sql);
            script
                .push_str(&format!(";\nINSERT INTO schema_migrations (version, applied_at) VALUES ({}, 0);\n", i + 1));
        }
        script.push_str(crate::schema::OLDER_DATABASE_ROWS);
        crate::common::run_script(&url, &script).await;
    }
    let db = kassa::store::Db::connect(&url, 2).await.unwrap();
    db.migrate().await.unwrap();
    let pool = db.read_pool();
    assert_eq!(number(pool, "SELECT MAX(version) FROM schema_migrations").await, crate::schema::LATEST);
    assert_eq!(number(pool, IN_LISTS_LEFT).await, 0);
    let integrity: String = sql::query_scalar("PRAGMA integrity_check").fetch_one(pool).await.unwrap();
    assert_eq!(integrity, "ok");
    for table in ["orders", "payment_attempts", "reservations", "status_events", "baskets", "skus"] {
        assert_eq!(number(pool, &format!("SELECT CAST(COUNT(*) AS BIGINT) FROM {table}")).await, 1, "{table}");
    }
    // Through the writer, as kassa writes.
    let write = |sql: &'static str| {
        let db = db.clone();
        async move { db.write_one(|| sql::query(sql)).await }
    };
    assert!(write("UPDATE orders SET status = 'bogus' WHERE order_no = 'O-1'").await.is_err());
    assert!(write("UPDATE reservations SET status = 'held' WHERE order_no = 'O-1'").await.is_err());
    assert!(write("INSERT INTO status_events (order_no, entity, entity_id, to_status, trigger_name, at) VALUES ('O-1', 'basket', 'B', 'x', 't', 0)").await.is_err());
    // I5: a second active attempt is refused, an ended one is not.
    let second = "INSERT INTO payment_attempts (attempt_ref, order_no, seq, gateway, channel, status, amount_minor, currency, created_at, updated_at) \
                  VALUES ('O-1_2', 'O-1', 2, 'sandbox', 'form', 'redirected', 500, 'CNY', 0, 0)";
    assert!(write(second).await.is_err());
    let ended = "INSERT INTO payment_attempts (attempt_ref, order_no, seq, gateway, channel, status, amount_minor, currency, created_at, updated_at) \
                 VALUES ('O-1_3', 'O-1', 3, 'sandbox', 'form', 'failed', 500, 'CNY', 0, 0)";
    assert_eq!(write(ended).await.unwrap(), 1);
    assert_eq!(write("UPDATE orders SET status = 'paid' WHERE order_no = 'O-1'").await.unwrap(), 1);
    // The references of the rebuilt tables still hold both ways.
    assert_eq!(number(pool, "SELECT CAST(COUNT(*) AS BIGINT) FROM pragma_foreign_key_check").await, 0);
    assert!(write("INSERT INTO reservations (order_no, sku, quantity, status, expires_at, updated_at) VALUES ('NO-SUCH', 'S', 1, 'active', 0, 0)").await.is_err());
    assert!(write("DELETE FROM orders WHERE order_no = 'O-1'").await.is_err(), "its attempts name it");
    let plan = plan_of(&url, &kassa::store::reconcile::claim_attempts_sql(kassa::store::DbKind::Sqlite)).await;
    assert!(plan.iter().any(|s| s.contains("payment_attempts_one_active")), "{plan:?}");
    // The sandbox's own file gets the same rewrite.
    let sandbox = db.open_sandbox(&url).await.unwrap();
    assert_eq!(number(sandbox.read_pool(), IN_LISTS_LEFT).await, 0);
    sandbox.close().await;
    db.close().await;
}

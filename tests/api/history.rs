//! A shop's history: `kassa bench seed` writes one that `kassa check` finds consistent (card keys
//! decrypting included), that the admin lists page through and search, on both databases.

use serde_json::Value;

use crate::common::{Backend, KEYS_SECRET, fresh_database, kassa_command};
use crate::on_both;
use kassa::store::listing::{self, OrderFilter};

const ORDERS: u64 = 3_000;

fn run(args: &[&str]) -> (bool, String, String) {
    let out = kassa_command().args(args).output().expect("kassa runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn seeded_history_holds_the_invariants(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let db = fresh_database(&backend, dir.path()).await;
    let orders = ORDERS.to_string();
    let (ok, out, err) = run(&[
        "bench",
        "seed",
        "--orders",
        &orders,
        "--days",
        "90",
        "--database-url",
        &db.url,
        "--keys-secret",
        KEYS_SECRET,
    ]);
    assert!(ok, "seed failed: {out}\n{err}");
    let report: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(report["orders"], ORDERS);
    assert_eq!(report["card_keys"], true);
    let by_status = report["by_status"].as_object().unwrap();
    assert_eq!(by_status.values().map(|n| n.as_u64().unwrap()).sum::<u64>(), ORDERS);
    for status in ["delivered", "expired", "cancelled", "paid", "refunded"] {
        assert!(by_status[status].as_u64().unwrap() > 0, "no {status} order in {report}");
    }

    let (ok, out, err) = run(&["check", "--full", "--database-url", &db.url, "--keys-secret", KEYS_SECRET]);
    assert!(ok && out.contains("ok: invariants") && out.contains("every row"), "check: {out}\n{err}");
    // Recorded as read: the next run reads what changed since.
    let (ok, out, err) = run(&["check", "--database-url", &db.url, "--keys-secret", KEYS_SECRET]);
    assert!(ok && out.contains("what changed after status-log row"), "check: {out}\n{err}");

    let store = kassa::store::Db::connect(&db.url, 2).await.unwrap();
    let pool = store.read_pool();
    let count =
        |sql: &'static str| async move { kassa::store::sql::query_scalar::<i64>(sql).fetch_one(pool).await.unwrap() };
    assert_eq!(count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 3_000);
    assert_eq!(count("SELECT CAST(COUNT(*) AS BIGINT) FROM sessions").await, 1_500, "two orders a buyer");
    assert_eq!(
        count("SELECT CAST(COUNT(*) AS BIGINT) FROM outbox WHERE status <> 'delivered'").await,
        0,
        "history's messages went out"
    );
    assert!(count("SELECT CAST(COUNT(*) AS BIGINT) FROM card_keys WHERE status = 'delivered'").await > 0);

    // Newest first, page after page, every order once; found by its reference.
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = None;
    let mut last = i64::MAX;
    loop {
        let page = listing::orders(&store, &OrderFilter::default(), cursor.as_ref(), 500).await.unwrap();
        for o in &page.items {
            assert!(o.created_at_ms <= last, "newest first");
            last = o.created_at_ms;
            assert!(seen.insert(o.order_no.clone()), "{} listed twice", o.order_no);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(listing::Cursor::parse(&next).unwrap()),
            None => break,
        }
    }
    assert_eq!(seen.len(), 3_000);
    let filter = OrderFilter { q: Some("shop-1234".into()), ..OrderFilter::default() };
    let found = listing::orders(&store, &filter, None, 10).await.unwrap();
    assert_eq!(found.items.len(), 1);
    assert_eq!(found.items[0].merchant_reference.as_deref(), Some("shop-1234"));
    store.close().await;
}

on_both!(seeded_history_holds_the_invariants, seeded_history_holds_the_invariants);

/// Each shape of the admin order list: what an operator filters by, first page and after a cursor.
fn list_shapes() -> Vec<(&'static str, OrderFilter, Option<listing::Cursor>)> {
    let cursor = Some(listing::Cursor { at: 1_700_000_000_000, key: "KS00000000000000000000".into() });
    let q = |q: &str| OrderFilter { q: Some(q.into()), ..OrderFilter::default() };
    let gateway = |g: &str| OrderFilter { gateway: Some(g.into()), ..OrderFilter::default() };
    vec![
        ("first page", OrderFilter::default(), None),
        ("a page deep down", OrderFilter::default(), cursor.clone()),
        ("search", q("shop-1234"), None),
        (
            "status",
            OrderFilter { status: Some(kassa::domain::OrderStatus::Refunding), ..OrderFilter::default() },
            cursor.clone(),
        ),
        ("SKU", OrderFilter { sku: Some("HIST-P-07".into()), ..OrderFilter::default() }, cursor.clone()),
        ("gateway", gateway("stripe"), None),
        ("gateway, a page deep down", gateway("sandbox"), cursor.clone()),
        ("a month", OrderFilter { created_from: Some(1), created_to: Some(2), ..OrderFilter::default() }, cursor),
    ]
}

/// PostgreSQL's plan for `sql`, one line a step.
async fn explain(client: &tokio_postgres::Client, sql: &str) -> String {
    let rows = client.query(&format!("EXPLAIN {sql}"), &[]).await.unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>().join("\n")
}

/// On a history, each list shape reads a page by index on PostgreSQL, with the plan the statement
/// cache settles on (generic: planned once for every value): no scan of a table that grows with
/// the history, and the deep page seeks to its cursor instead of reading up to it.
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_lists_read_by_index_on_a_postgresql_history() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = fresh_database(&backend, dir.path()).await;
    let (ok, out, err) = run(&["bench", "seed", "--orders", "20000", "--database-url", &db.url]);
    assert!(ok, "seed failed: {out}\n{err}");
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls).await.unwrap();
    let driver = tokio::spawn(connection);
    client.batch_execute("SET plan_cache_mode = force_generic_plan").await.unwrap();
    for (n, (what, filter, cursor)) in list_shapes().into_iter().enumerate() {
        let (sql, args) = listing::order_query("o.order_no", "orders o", &filter, cursor.as_ref(), 51);
        let types: Vec<&str> = args
            .iter()
            .map(|a| match a {
                kassa::store::sql::Arg::Int(_) => "bigint",
                _ => "text",
            })
            .collect();
        client.batch_execute(&format!("PREPARE shape{n} ({}) AS {sql}", types.join(", "))).await.unwrap();
        let values: Vec<String> = args
            .iter()
            .map(|a| match a {
                kassa::store::sql::Arg::Int(Some(v)) => v.to_string(),
                kassa::store::sql::Arg::Text(Some(v)) => format!("'{v}'"),
                other => panic!("{other:?}"),
            })
            .collect();
        let plan = explain(&client, &format!("EXECUTE shape{n} ({})", values.join(", "))).await;
        for table in ["orders", "order_lines", "payment_attempts"] {
            assert!(!plan.contains(&format!("Seq Scan on {table}")), "{what}: {plan}");
        }
        if what == "SKU" {
            // The SKU's own lines, newest first, seeking to the cursor's order number.
            assert!(plan.contains("order_lines_by_sku") && plan.contains("order_no <"), "{what}: {plan}");
        } else if what.starts_with("gateway") {
            // The gateway's own attempts, newest first, seeking to the cursor's order number.
            assert!(plan.contains("payment_attempts_by_gateway"), "{what}: {plan}");
            assert!(cursor.is_none() || plan.contains("order_no <"), "{what} seeks to its cursor: {plan}");
        } else if cursor.is_some() {
            assert!(plan.contains("Index Cond") && plan.contains("ROW("), "{what} seeks to its cursor: {plan}");
        }
        if matches!(what, "search" | "status" | "SKU") || what.starts_with("gateway") {
            // Not every order newest first, each tested against the filter.
            assert!(!plan.contains("orders_by_created"), "{what} walks every order: {plan}");
        }
    }
    // Retention's round of notification bodies finds the unsettled refunds by their statuses'
    // partial indexes, never by reading every refund the shop made.
    let prune = kassa::store::retention::prune_notification_bodies_sql();
    client.batch_execute(&format!("PREPARE prune (bytea, bigint, bigint, bigint) AS {prune}")).await.unwrap();
    let plan = explain(&client, "EXECUTE prune ('', 1, 9000000000000, 500)").await;
    assert!(!plan.contains("Seq Scan on refunds"), "notification bodies: {plan}");
    drop(client);
    let _ = driver.await;
}

/// The same shapes on SQLite: each reaches its rows by index, a search and a SKU by key.
#[tokio::test]
async fn the_admin_lists_read_by_index_on_sqlite() {
    let (_dir, url, _db) = crate::store::fresh_sqlite(kassa::store::engine::EngineConfig::default()).await;
    let path = url.strip_prefix("sqlite://").unwrap().split('?').next().unwrap().to_string();
    let conn = rusqlite::Connection::open(path).unwrap();
    for (what, filter, cursor) in list_shapes() {
        let (sql, _) = listing::order_query("o.order_no", "orders o", &filter, cursor.as_ref(), 51);
        let mut plan = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let mut rows = plan.raw_query();
        let mut steps = Vec::new();
        while let Some(row) = rows.next().unwrap() {
            steps.push(row.get::<_, String>("detail").unwrap());
        }
        for step in &steps {
            let full_scan = step.starts_with("SCAN") && !step.contains(" USING ") && step != "SCAN CONSTANT ROW";
            assert!(!full_scan, "{what}: {steps:?}");
        }
        if matches!(what, "search" | "status" | "SKU") || what.starts_with("gateway") {
            assert!(!steps.iter().any(|s| s.starts_with("SCAN o ")), "{what} walks every order: {steps:?}");
        }
        if what.starts_with("gateway") {
            assert!(steps.iter().any(|s| s.contains("payment_attempts_by_gateway")), "{what}: {steps:?}");
        }
    }
}

/// A check reads what changed since the last clean one: an order broken by hand without a change
/// logged is seen by a full run only; an order with a change logged since is read again.
async fn a_check_reads_what_changed_since_the_last_clean_one(backend: Backend) {
    use kassa::store::check::{self, Scope};
    let t = crate::common::TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 100, 50).await;
    let (_, old, old_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&old_ref, "succeeded", 1).await;
    t.settle().await;
    let db = &t.app.state.db;
    assert_eq!(check::since_last_clean(db).await.unwrap(), Scope::Full, "no clean run yet");
    let (violations, checked) = check::run_scoped(db, None, Scope::Full).await.unwrap();
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(checked.keys, None, "no keys secret given: no key read");
    check::record_clean(db, checked).await.unwrap();
    let since = check::since_last_clean(db).await.unwrap();
    assert_eq!(since, Scope::Since(checked.through));

    let break_capture = |order_no: String| async move {
        db.write_one(move || {
            kassa::store::sql::query("UPDATE orders SET captured_minor = 1 WHERE order_no = $1").bind(order_no.clone())
        })
        .await
        .unwrap()
    };
    break_capture(old.clone()).await;
    let (violations, _) = check::run_scoped(db, None, since).await.unwrap();
    assert!(violations.is_empty(), "unchanged since the clean run: not read ({violations:?})");
    let (violations, _) = check::run_scoped(db, None, Scope::Full).await.unwrap();
    assert!(violations.iter().any(|v| v.invariant == "I4" && v.detail.contains(&old)), "{violations:?}");

    let (_, new, new_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&new_ref, "succeeded", 1).await;
    t.settle().await;
    break_capture(new.clone()).await;
    let (violations, _) = check::run_scoped(db, None, since).await.unwrap();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].invariant == "I4" && violations[0].detail.contains(&new), "{violations:?}");
    // A changed order's session is read for its count of open orders.
    kassa::store::sql::query(
        "UPDATE sessions SET open_orders = 5 WHERE id = (SELECT session_id FROM orders WHERE order_no = $1)",
    )
    .bind(&new)
    .execute(db.read_pool())
    .await
    .unwrap();
    let (violations, _) = check::run_scoped(db, None, since).await.unwrap();
    assert!(violations.iter().any(|v| v.invariant == "open_orders" && v.detail.contains("counts 5")), "{violations:?}");
}

on_both!(a_check_reads_what_changed_since_the_last_clean_one, a_check_reads_what_changed_since_the_last_clean_one);

/// A check that reads what changed decrypts the card keys made since the last clean run that
/// decrypted keys began (less an hour's margin); a full run, or one after no such run, decrypts
/// every key.
async fn a_check_decrypts_the_keys_made_since_the_last_clean_one(backend: Backend) {
    use kassa::store::check::{self, Scope};
    use kassa::store::check_keys::KEYS_CHECKED_FROM;
    use kassa::store::sql;
    let t = crate::common::TestApp::spawn(backend).await;
    let (status, body) = t
        .admin_post(
            "/api/v1/admin/skus",
            serde_json::json!({"sku": "GAME", "name": "Key", "price_minor": 100, "currency": "CNY", "kind": "digital"}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let (status, body) = t.admin_post("/api/v1/admin/skus/GAME/keys", serde_json::json!({"keys": ["A", "B"]})).await;
    assert!(status.is_success(), "{body}");
    let db = &t.app.state.db;
    let vault = kassa::vault::Vault::from_hex(KEYS_SECRET).unwrap();
    let i9 = |v: &[check::Violation]| v.iter().filter(|v| v.invariant == "I9").count();

    // No clean run decrypted keys: a run that reads what changed decrypts them all.
    let (v, checked) = check::run_scoped(db, None, Scope::Full).await.unwrap();
    assert!(v.is_empty(), "{v:?}");
    check::record_clean(db, checked).await.unwrap();
    let since = check::since_last_clean(db).await.unwrap();
    let broken: String =
        sql::query_scalar("SELECT id FROM card_keys ORDER BY id LIMIT 1").fetch_one(db.read_pool()).await.unwrap();
    let good: Vec<u8> = sql::query_scalar("SELECT ciphertext FROM card_keys WHERE id = $1")
        .bind(&broken)
        .fetch_one(db.read_pool())
        .await
        .unwrap();
    let set_ciphertext = |ct: Vec<u8>| {
        let id = broken.clone();
        async move {
            sql::query("UPDATE card_keys SET ciphertext = $1 WHERE id = $2")
                .bind(ct)
                .bind(id)
                .execute(db.read_pool())
                .await
                .unwrap();
        }
    };
    set_ciphertext(vec![0; good.len()]).await;
    let (v, _) = check::run_scoped(db, Some(&vault), since).await.unwrap();
    assert_eq!(i9(&v), 1, "no run had decrypted the keys: {v:?}");
    set_ciphertext(good.clone()).await;

    // A clean run with the secret records when it began.
    let (v, checked) = check::run_scoped(db, Some(&vault), since).await.unwrap();
    assert!(v.is_empty(), "{v:?}");
    let began = checked.keys.expect("keys read").began_at;
    check::record_clean(db, checked).await.unwrap();
    let recorded: String = sql::query_scalar("SELECT value FROM settings WHERE name = $1")
        .bind(KEYS_CHECKED_FROM)
        .fetch_one(db.read_pool())
        .await
        .unwrap();
    assert_eq!(recorded, began.to_string());
    set_ciphertext(vec![0; good.len()]).await;
    // Made within the margin before that run began: read again.
    let (v, _) = check::run_scoped(db, Some(&vault), since).await.unwrap();
    assert_eq!(i9(&v), 1, "{v:?}");
    // As though the clean run had begun two hours after the keys were made: not read, but a
    // full run reads it.
    sql::query("UPDATE settings SET value = $1 WHERE name = $2")
        .bind((began + 2 * 3_600_000).to_string())
        .bind(KEYS_CHECKED_FROM)
        .execute(db.read_pool())
        .await
        .unwrap();
    let (v, _) = check::run_scoped(db, Some(&vault), since).await.unwrap();
    assert_eq!(i9(&v), 0, "{v:?}");
    let (v, _) = check::run_scoped(db, Some(&vault), Scope::Full).await.unwrap();
    assert!(v.iter().any(|v| v.invariant == "I9" && v.detail.contains(&broken)), "{v:?}");
}

on_both!(
    a_check_decrypts_the_keys_made_since_the_last_clean_one,
    a_check_decrypts_the_keys_made_since_the_last_clean_one
);

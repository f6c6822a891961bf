use kassa::store::sql;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::{Backend, TestApp};
use kassa::domain::ids::Sku;
use kassa::error::Error;
use kassa::store::engine::EngineConfig;

/// A fresh, migrated SQLite database in a temporary directory: the directory (deleted when
/// dropped), the database's URL and the handle, with the engine configured as given.
async fn fresh_sqlite(engine: EngineConfig) -> (tempfile::TempDir, String, kassa::store::Db) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shop.db").display());
    let db = kassa::store::Db::connect_with(&url, 2, engine).await.unwrap();
    db.migrate().await.unwrap();
    (dir, url, db)
}

/// The one number `sql` answers, read on `pool`.
async fn number(pool: kassa::store::Reader<'_>, sql: &str) -> i64 {
    sql::query_scalar::<i64>(sql).fetch_one(pool).await.unwrap()
}

/// Two commands that lock the same rows in opposite order deadlock on PostgreSQL; the one the
/// database aborts (40P01) is re-run by `write_tx!` and both commit. (PostgreSQL only: SQLite has
/// a single writer, so the two could not even interleave.)
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlocked_transactions_are_retried() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    t.create_sku("A", "A", 100, 10).await;
    t.create_sku("B", "B", 100, 10).await;
    let db = t.app.state.db.clone();
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let runs = Arc::new(AtomicU32::new(0));
    let command = |first: &'static str, second: &'static str| {
        let (db, barrier, runs) = (db.clone(), barrier.clone(), runs.clone());
        async move {
            kassa::write_tx!(db, |tx| {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                sql::query("UPDATE skus SET on_hand = on_hand + 1 WHERE sku = $1")
                    .bind(first)
                    .execute(&mut **tx)
                    .await?;
                if run < 2 {
                    // Only the first two runs meet, so the retry does not wait for a partner.
                    barrier.wait().await;
                }
                sql::query("UPDATE skus SET on_hand = on_hand + 1 WHERE sku = $1")
                    .bind(second)
                    .execute(&mut **tx)
                    .await?;
                Ok::<(), Error>(())
            })
        }
    };
    let (a, b) = tokio::join!(tokio::spawn(command("A", "B")), tokio::spawn(command("B", "A")));
    a.unwrap().unwrap();
    b.unwrap().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3, "one of the two was aborted and re-run once");
    assert_eq!(t.sku("A").await["on_hand"], 12);
    assert_eq!(t.sku("B").await["on_hand"], 12);
}

/// Group commit (SQLite): in batches shared by many concurrent commands, a command that fails
/// after writing, and one cancelled midway, leave nothing behind, while every other command of
/// the same batches commits.
/// Connections are handed out without a round trip to test them, except one that sat idle for a
/// while: the server may have dropped it meanwhile, and it is tested and replaced before use.
/// (PostgreSQL only: a connection to a SQLite file does not drop.)
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test]
async fn a_connection_dropped_while_idle_is_replaced_before_use() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    let pool = t.app.state.db.read_pool();
    assert_eq!(number(pool, "SELECT CAST(1 AS BIGINT)").await, 1);
    // The server ends every connection of this database (as a restart or an idle timeout would).
    let admin = kassa::store::Db::connect(&t.database_url, 2).await.unwrap();
    let ended: Vec<bool> = sql::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = ''",
    )
    .fetch_all(admin.read_pool())
    .await
    .unwrap();
    assert!(!ended.is_empty() && ended.iter().all(|e| *e), "{ended:?}");
    // Idle past the threshold: every reader that comes next must find a live connection.
    tokio::time::sleep(std::time::Duration::from_millis(1_200)).await;
    for _ in 0..4 {
        assert_eq!(number(pool, "SELECT CAST(2 AS BIGINT)").await, 2);
    }
    t.create_sku("MUG", "Mug", 100, 3).await;
    assert_eq!(t.sku("MUG").await["on_hand"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_isolates_failed_and_cancelled_commands() {
    let t = TestApp::spawn(Backend::Sqlite).await;
    let db = t.app.state.db.clone();
    // A cancelled command reports that it has written, then waits forever until it is aborted.
    let (written_tx, mut written_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let command = |i: u32| {
        let (db, written) = (db.clone(), written_tx.clone());
        async move {
            kassa::write_tx!(db, |tx| {
                sql::query("INSERT INTO settings (name, value) VALUES ($1, 'x')")
                    .bind(format!("cmd-{i}"))
                    .execute(&mut **tx)
                    .await?;
                match i % 3 {
                    // Fails after its write: the write must be undone.
                    1 => Err(Error::conflict("test_failure", "on purpose")),
                    // Abandoned after its write (its request went away): the write must be undone.
                    2 => {
                        let _ = written.send(i);
                        std::future::pending::<()>().await;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            })
        }
    };
    let mut handles = std::collections::HashMap::new();
    for i in 0..90_u32 {
        handles.insert(i, tokio::spawn(command(i)));
    }
    let mut results = Vec::new();
    for i in 0..90_u32 {
        if i % 3 == 2 {
            continue;
        }
        // Abort the abandoned ones as they report, so the others behind them can run.
        loop {
            let handle = &handles[&i];
            if handle.is_finished() {
                break;
            }
            tokio::select! {
                Some(n) = written_rx.recv() => handles[&n].abort(),
                _ = tokio::time::sleep(std::time::Duration::from_millis(5)) => {}
            }
        }
        results.push((i, handles.remove(&i).unwrap().await.unwrap()));
    }
    for (i, result) in results {
        if i % 3 == 0 {
            assert!(result.is_ok(), "command {i}: {result:?}");
        } else {
            assert_eq!(result.unwrap_err().code(), "test_failure", "command {i}");
        }
    }
    for (i, handle) in handles {
        assert!(handle.await.unwrap_err().is_cancelled(), "command {i} should have been cancelled");
    }
    // One more command makes sure any batch left open is committed.
    command(300).await.unwrap();
    let names: Vec<String> = sql::query_scalar("SELECT name FROM settings WHERE name LIKE 'cmd-%' ORDER BY name")
        .fetch_all(t.app.state.db.read_pool())
        .await
        .unwrap();
    let mut expected: Vec<String> = (0..90).filter(|i| i % 3 == 0).map(|i| format!("cmd-{i}")).collect();
    expected.push("cmd-300".into());
    expected.sort();
    assert_eq!(names, expected);
}

/// On SQLite the sandbox gateway keeps its records in a file of its own beside kassa's; the first
/// open copies what an older version kept in kassa's file, and the copy happens once.
#[tokio::test]
async fn sandbox_records_move_to_their_own_sqlite_file() {
    let (dir, url, main) = fresh_sqlite(EngineConfig::default()).await;
    // What an older kassa left in its own file: a payment and its pending notification.
    sql::query(
        "INSERT INTO sandbox_payments (attempt_ref, merchant_id, amount_minor, currency, subject, notify_url, return_url, \
         expires_at, status, created_at, updated_at) VALUES ('A-1', 'm', 500, 'CNY', 's', 'http://n', 'http://r', 9, 'succeeded', 1, 1)",
    )
    .execute(main.read_pool())
    .await
    .unwrap();
    sql::query(
        "INSERT INTO sandbox_deliveries (id, attempt_ref, event_id, body, notify_url, status, tries, next_at, lease_until, created_at) \
         VALUES ('D-1', 'A-1', 'E-1', '{}', 'http://n', 'pending', 2, 5, 77, 1)",
    )
    .execute(main.read_pool())
    .await
    .unwrap();

    let records = main.open_sandbox(&url).await.unwrap();
    assert!(dir.path().join("shop-sandbox.db").exists());
    let pool = records.read_pool();
    assert_eq!(
        number(pool, "SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_payments WHERE attempt_ref = 'A-1'").await,
        1
    );
    // Copied pending, with its tries, and free to be sent at once (no lease of a dead process).
    assert_eq!(
        number(
            pool,
            "SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries WHERE status = 'pending' AND tries = 2 AND lease_until = 0"
        )
        .await,
        1
    );
    // A second open (the next start) copies nothing again.
    records.close().await;
    let records = main.open_sandbox(&url).await.unwrap();
    assert_eq!(number(records.read_pool(), "SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries").await, 1);
    // A running kassa writes the sandbox's records to that file, none to its own.
    let t = TestApp::spawn(Backend::Sqlite).await;
    t.create_sku("S", "S", 500, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("S", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    assert_eq!(t.status(&order_no).await, "paid");
    assert_eq!(t.sandbox_count("SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_payments").await, 1);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_payments").await, 0);
}

/// The CPUs the current thread may run on, as Linux lists them (`0-1`).
fn cpus_allowed() -> String {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap().trim().to_string()
}

/// SQLite's hot write commands run on the writer thread (whose CPU the write connection's driver
/// thread shares); PostgreSQL runs them where they are called. The sandbox's records have a
/// writer thread of their own, not held on kassa's writer's CPU.
#[tokio::test]
async fn write_commands_run_on_the_sqlite_writer_thread() {
    let (_dir, url, db) = fresh_sqlite(EngineConfig::default()).await;
    let name = db.on_writer(async { std::thread::current().name().map(str::to_string) }).await.unwrap();
    assert_eq!(name.as_deref(), Some("kassa-sqlite-writer"));
    let records = db.open_sandbox(&url).await.unwrap();
    let (name, cpus) =
        records.on_writer(async { (std::thread::current().name().map(str::to_string), cpus_allowed()) }).await.unwrap();
    assert_eq!(name.as_deref(), Some("sandbox-writer"));
    assert_eq!(cpus, cpus_allowed(), "the sandbox's writer may run wherever the process may");
    // Its batches run in the group commit.
    assert!(db.group().is_some());
    // A command on it commits like any other, and a failing one reports its own error.
    let session = kassa::store::catalog::create_session(&db, 1).await.unwrap().1.id;
    let basket = kassa::store::catalog::create_basket(&db, &session, 1).await.unwrap();
    let e = kassa::store::catalog::set_basket_line(&db, &session, &basket, &Sku::parse("NOPE").unwrap(), 1, 1)
        .await
        .unwrap_err();
    assert_eq!(e.code(), "not_found");
    if let Some(backend @ Backend::Postgres(_)) = Backend::postgres() {
        let t = TestApp::spawn(backend).await;
        let here = std::thread::current().id();
        let ran = t.app.state.db.on_writer(async move { std::thread::current().id() == here }).await.unwrap();
        assert!(ran, "PostgreSQL commands run in place");
    }
}

/// A gateway flooding a slow shop with notifications keeps a bounded number of POSTs in flight
/// (each would hold a connection of its own) and still delivers every one.
#[tokio::test]
async fn sandbox_keeps_its_notification_posts_in_flight_bounded() {
    use std::collections::BTreeMap;
    use std::sync::atomic::AtomicUsize;
    let (_dir, url, main) = fresh_sqlite(EngineConfig::default()).await;
    let records = main.open_sandbox(&url).await.unwrap();
    let clock: kassa::clock::SharedClock = Arc::new(kassa::clock::SystemClock);
    let sandbox = kassa::sandbox::Sandbox::init(&main, records, clock, false).await.unwrap();

    // A shop that takes 20 ms over each notification, counting how many it holds at once.
    #[derive(Clone, Default)]
    struct Shop {
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        seen: Arc<AtomicUsize>,
    }
    let shop = Shop::default();
    let app = axum::Router::new()
        .route(
            "/notify",
            axum::routing::post(|axum::extract::State(s): axum::extract::State<Shop>| async move {
                let n = s.now.fetch_add(1, Ordering::SeqCst) + 1;
                s.most.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                s.now.fetch_sub(1, Ordering::SeqCst);
                s.seen.fetch_add(1, Ordering::SeqCst);
                "ok"
            }),
        )
        .with_state(shop.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let notify_url = format!("http://{}/notify", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let payments = 2 * kassa::sandbox::SENDS_MAX;
    let mut done = tokio::task::JoinSet::new();
    for i in 0..payments {
        let (sandbox, notify_url) = (sandbox.clone(), notify_url.clone());
        done.spawn(async move {
            let mut fields = BTreeMap::new();
            for (k, v) in [
                ("merchant_id", sandbox.merchant_id().to_string()),
                ("attempt_ref", format!("FLOOD-{i}")),
                ("amount_minor", "100".to_string()),
                ("currency", "CNY".to_string()),
                ("expires_at", "99999999999".to_string()),
                ("subject", "flood".to_string()),
                ("notify_url", notify_url),
                ("return_url", "http://shop/return".to_string()),
            ] {
                fields.insert(k.to_string(), v);
            }
            let sign = kassa::sandbox::protocol::sign_fields(&sandbox.merchant_key(), &fields);
            fields.insert("sign".to_string(), sign);
            let attempt_ref = sandbox.register(&fields).await.unwrap();
            sandbox.complete(&attempt_ref, kassa::sandbox::SandboxOutcome::Succeeded, 2, 0).await.unwrap();
        });
    }
    while let Some(r) = done.join_next().await {
        r.unwrap();
    }
    // Every copy arrives (polled, bounded: a slow machine only waits longer).
    for _ in 0..3000 {
        if shop.seen.load(Ordering::SeqCst) >= 2 * payments {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(shop.seen.load(Ordering::SeqCst), 2 * payments);
    let most = shop.most.load(Ordering::SeqCst);
    assert!(most <= kassa::sandbox::SENDS_MAX, "{most} notification POSTs were in flight at once");
    assert!(most > 1, "the POSTs still run in parallel");
}

/// A buyer session, once found, is served from memory while it is younger than a day (sessions
/// never change, and retention prunes none that young); a token that names no session is looked
/// up every time, so a session created later is found.
#[tokio::test]
async fn found_buyer_sessions_are_kept_in_memory() {
    let (_dir, _, db) = fresh_sqlite(EngineConfig::default()).await;
    let (token, session) = kassa::store::catalog::create_session(&db, 1).await.unwrap();
    let found = kassa::store::catalog::session_by_token(&db, &token, 1).await.unwrap().expect("the session");
    assert_eq!((found.id.as_str(), found.csrf_token.as_str()), (session.id.as_str(), session.csrf_token.as_str()));
    // Gone from the table behind kassa's back: still served, from memory.
    sql::query("DELETE FROM sessions").execute(db.read_pool()).await.unwrap();
    assert_eq!(kassa::store::catalog::session_by_token(&db, &token, 1).await.unwrap().map(|s| s.id), Some(session.id));
    // A day old, it may have been pruned by retention: read again, and found gone.
    let day = kassa::store::catalog::SESSION_CACHE_AGE_MAX_MS;
    assert!(kassa::store::catalog::session_by_token(&db, &token, 1 + day).await.unwrap().is_none());
    // Not found is not remembered: the session appears (created by another instance), and is found.
    assert!(kassa::store::catalog::session_by_token(&db, "tok-late", 1).await.unwrap().is_none());
    sql::query("INSERT INTO sessions (id, token_hash, csrf_token, created_at) VALUES ('S-LATE', $1, 'c', 2)")
        .bind(kassa::store::catalog::token_hash("tok-late"))
        .execute(db.read_pool())
        .await
        .unwrap();
    let late = kassa::store::catalog::session_by_token(&db, "tok-late", 1).await.unwrap();
    assert_eq!(late.map(|s| s.id).as_deref(), Some("S-LATE"));
}

/// Every configuration of the engine (`EngineConfig`: SQLite with and without group commit, its
/// writer pinned or not; PostgreSQL with batches pipelined or sent one by one) places orders the
/// same way: concurrent confirms, one failing command among them undoing only itself, invariants
/// intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_engine_configuration_commits_the_same_way() {
    use kassa::domain::{Currency, Money};
    use kassa::store::catalog::{self, NewSku, SkuKind};
    let dir = tempfile::tempdir().unwrap();
    let mut runs: Vec<(EngineConfig, crate::common::TestDb)> = Vec::new();
    for writer in EngineConfig::all() {
        if writer.pg_pipeline {
            // SQLite: the PostgreSQL setting changes nothing.
            let file = dir.path().join(format!("shop-{}", runs.len()));
            std::fs::create_dir_all(&file).unwrap();
            runs.push((writer, crate::common::fresh_database(&Backend::Sqlite, &file).await));
        }
        if let Some(pg) = Backend::postgres()
            && writer.sqlite_group_commit
            && writer.sqlite_pin_writer
        {
            runs.push((writer, crate::common::fresh_database(&pg, dir.path()).await));
        }
    }
    for (writer, url) in runs {
        let db = kassa::store::Db::connect_with(&url, 4, writer).await.unwrap();
        db.migrate().await.unwrap();
        let sqlite = db.kind() == kassa::store::DbKind::Sqlite;
        assert_eq!(db.group().is_some(), sqlite && writer.sqlite_group_commit);
        let price = Money::new(250, Currency::parse("CNY").unwrap()).unwrap();
        let sku = NewSku {
            sku: Sku::parse("W").unwrap(),
            name: "W".into(),
            kind: SkuKind::Physical,
            price,
            stock: 10,
            limits: Default::default(),
        };
        catalog::create_sku(&db, &sku, false, 1).await.unwrap();
        let mut buyers = tokio::task::JoinSet::new();
        for i in 0..12 {
            let db = db.clone();
            buyers.spawn(async move {
                let session = catalog::create_session(&db, 1).await.unwrap().1.id;
                let basket = catalog::create_basket(&db, &session, 1).await.unwrap();
                // Every third buyer also asks for a SKU that does not exist: that command fails alone.
                if i % 3 == 0 {
                    let e = catalog::set_basket_line(&db, &session, &basket, &Sku::parse("NOPE").unwrap(), 1, 1)
                        .await
                        .unwrap_err();
                    assert_eq!(e.code(), "not_found");
                }
                catalog::set_basket_line(&db, &session, &basket, &Sku::parse("W").unwrap(), 1, 1).await.unwrap();
                let req = kassa::store::checkout::ConfirmRequest {
                    hold_ms: 60_000,
                    ..kassa::store::checkout::ConfirmRequest::new(&session, basket.clone(), "sandbox", "web", 2)
                };
                kassa::store::checkout::confirm(&db, &req).await.map(|p| p.order_no).map_err(|e| e.code().to_string())
            });
        }
        let mut placed = 0;
        let mut sold_out = 0;
        while let Some(r) = buyers.join_next().await {
            match r.unwrap() {
                Ok(_) => placed += 1,
                Err(code) => {
                    assert_eq!(code, "out_of_stock", "{writer:?}");
                    sold_out += 1;
                }
            }
        }
        assert_eq!((placed, sold_out), (10, 2), "{writer:?}: ten units, twelve buyers");
        let orders: i64 =
            sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").fetch_one(db.read_pool()).await.unwrap();
        assert_eq!(orders, 10, "{writer:?}");
        let lines: i64 = sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM basket_lines WHERE sku = 'NOPE'")
            .fetch_one(db.read_pool())
            .await
            .unwrap();
        assert_eq!(lines, 0, "{writer:?}");
        assert!(kassa::store::check::run(&db).await.unwrap().is_empty(), "{writer:?}");
        db.close().await;
        if !sqlite {
            crate::common::drop_pg_database(&url).await;
        }
    }
}

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
/// confirm, an order's parts on every payment, and the reconciler's claims
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
        ("attempt claim", kassa::store::reconcile::claim_attempts_sql(""), Some("payment_attempts_one_active")),
        ("refund claim", kassa::store::reconcile::claim_refunds_sql(""), Some("refunds_processing")),
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
    let plan = plan_of(&url, &kassa::store::reconcile::claim_attempts_sql("")).await;
    assert!(plan.iter().any(|s| s.contains("payment_attempts_one_active")), "{plan:?}");
    // The sandbox's own file gets the same rewrite.
    let sandbox = db.open_sandbox(&url).await.unwrap();
    assert_eq!(number(sandbox.read_pool(), IN_LISTS_LEFT).await, 0);
    sandbox.close().await;
    db.close().await;
}

// A lone write statement (`Db::write_one`) changes its rows durably and says how many, whichever
// way the database commits it: PostgreSQL on its own (no BEGIN/COMMIT), SQLite in the group
// commit; a failing one changes nothing and is an error.
crate::on_both!(a_lone_write_statement_reports_its_rows, lone_write);
async fn lone_write(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    let db = t.app.state.db.clone();
    let insert = |name: &'static str| {
        let db = db.clone();
        async move {
            db.write_one(|| {
                sql::query("INSERT INTO settings (name, value) VALUES ($1, 'v') ON CONFLICT (name) DO NOTHING")
                    .bind(name)
            })
            .await
        }
    };
    assert_eq!(insert("lone.a").await.unwrap(), 1);
    assert_eq!(insert("lone.a").await.unwrap(), 0, "the second insert meets the first");
    let changed =
        db.write_one(|| sql::query("UPDATE settings SET value = 'w' WHERE name LIKE $1").bind("lone.%")).await.unwrap();
    assert_eq!(changed, 1);
    let failed = db.write_one(|| sql::query("INSERT INTO settings (name, value) VALUES ('lone.b', NULL)")).await;
    assert!(failed.is_err(), "a NOT NULL column refuses NULL");
    let value: String =
        sql::query_scalar("SELECT value FROM settings WHERE name = 'lone.a'").fetch_one(db.read_pool()).await.unwrap();
    assert_eq!(value, "w");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM settings WHERE name LIKE 'lone.%'").await, 1);
}

/// The settings whose names start with `prefix` (no `%` or `_` in it), as (name, value), by name.
async fn settings_named(db: &kassa::store::Db, prefix: &str) -> Vec<(String, String)> {
    sql::query_as("SELECT name, value FROM settings WHERE name LIKE $1 ORDER BY name")
        .bind(format!("{prefix}%"))
        .fetch_all(db.read_pool())
        .await
        .unwrap()
}

// A script (`Db::pg_script`: on PostgreSQL one round trip with no BEGIN/COMMIT, which PostgreSQL
// runs as one implicit transaction) is all or nothing: a failing statement undoes the ones before
// it. SQLite has no such scripts (`None`): its commands go through the group commit.
crate::on_both!(a_postgresql_script_is_all_or_nothing, pg_script);
async fn pg_script(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    let db = t.app.state.db.clone();
    let insert = "INSERT INTO settings (name, value) VALUES ($1, $2)";
    let ok = vec![(insert, kassa::args!["script.a", "1"]), (insert, kassa::args!["script.b", "it's \\ quoted"])];
    let Some(out) = db.pg_script(ok).await.unwrap() else {
        assert_eq!(db.kind(), kassa::store::DbKind::Sqlite);
        return;
    };
    assert_eq!(out.iter().map(|o| o.changed).collect::<Vec<_>>(), vec![1, 1]);
    let failing = vec![(insert, kassa::args!["script.c", "1"]), (insert, kassa::args!["script.a", "again"])];
    assert!(db.pg_script(failing).await.is_err(), "a name already taken");
    let stored = settings_named(&db, "script.").await;
    let want = [("script.a", "1"), ("script.b", "it's \\ quoted")].map(|(n, v)| (n.to_string(), v.to_string()));
    assert_eq!(stored, want, "the failed script left nothing, the first kept its text exactly");
    // The same with every statement a round trip of its own (`KASSA_PG_PIPELINE=0`), on a pool of
    // one connection: the failed script's transaction is not left open on it.
    let one_by_one = EngineConfig { pg_pipeline: false, ..EngineConfig::default() };
    let single = kassa::store::Db::connect_with(&t.database_url, 1, one_by_one).await.unwrap();
    let failing = vec![(insert, kassa::args!["script.d", "1"]), (insert, kassa::args!["script.a", "again"])];
    assert!(single.pg_script(failing).await.is_err(), "a name already taken");
    let ok = vec![(insert, kassa::args!["script.e", "1"])];
    assert_eq!(single.pg_script(ok).await.unwrap().unwrap()[0].changed, 1);
    let names: Vec<String> = settings_named(&single, "script.").await.into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["script.a", "script.b", "script.e"]);
    single.close().await;
}

/// PostgreSQL: a batch's statements are pipelined (one round trip) and still run in order, each
/// seeing what the one before it wrote; every value is bound, so text that looks like SQL or
/// quoting is stored exactly; a failing statement in the middle fails the batch and, with the
/// transaction, undoes everything before it; the connection is clean afterwards.
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelined_batches_run_in_order_with_bound_values() {
    use kassa::store::batch::Batch;
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    let db = t.app.state.db.clone();
    let tricky = "it's \\ $1 '); DROP TABLE settings; --";
    kassa::write_tx!(db, |tx| {
        let mut batch = Batch::new();
        batch.expect("INSERT INTO settings (name, value) VALUES ($1, $2)", kassa::args!["pipe.a", "v"], 1, "insert");
        // Reads the row the statement before it wrote.
        batch.expect(
            "UPDATE settings SET value = value || $1 WHERE name = $2",
            kassa::args![tricky, "pipe.a"],
            1,
            "update",
        );
        batch.expect(
            "INSERT INTO settings (name, value) SELECT $1, value FROM settings WHERE name = $2",
            kassa::args!["pipe.b", "pipe.a"],
            1,
            "copy",
        );
        batch.run_checked(tx).await
    })
    .unwrap();
    let want = format!("v{tricky}");
    let stored = settings_named(&db, "pipe.").await;
    assert_eq!(stored, vec![("pipe.a".to_string(), want.clone()), ("pipe.b".to_string(), want)]);

    // The second of three fails: the first is undone with it, the third never ran.
    let failed = kassa::write_tx!(db, |tx| {
        let mut batch = Batch::new();
        batch.add("INSERT INTO settings (name, value) VALUES ($1, 'x')", kassa::args!["pipe.c"]);
        batch.add("INSERT INTO settings (name, value) VALUES ($1, 'x')", kassa::args!["pipe.a"]);
        batch.add("INSERT INTO settings (name, value) VALUES ($1, 'x')", kassa::args!["pipe.d"]);
        batch.run(tx).await
    });
    assert!(failed.is_err(), "a name already taken");
    assert_eq!(settings_named(&db, "pipe.").await.len(), 2, "nothing of the failed batch stayed");
    // Every connection answers its own questions afterwards.
    for n in 0..8_i64 {
        let got: i64 =
            sql::query_scalar("SELECT CAST($1 AS BIGINT) + 1").bind(n).fetch_one(db.read_pool()).await.unwrap();
        assert_eq!(got, n + 1);
    }
}

/// PostgreSQL on the same host is reached over its Unix socket when the URL says so
/// (`?host=/var/run/postgresql`: each round trip skips the TCP stack on both sides, docs/postgresql.md): a
/// purchase runs end to end on such a connection, and the server sees a socket client (no client
/// address). Skipped loudly where the local server has no socket there, except in CI.
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_local_postgresql_is_reached_over_its_unix_socket() {
    const SOCKET_DIR: &str = "/var/run/postgresql";
    let Some(Backend::Postgres(server)) = Backend::postgres() else { return };
    // `postgres://user[:password]@host[:port]/db`: the same credentials, port and database, over
    // the socket.
    let (path, _) = server.split_once('?').unwrap_or((&server, ""));
    let (authority, database) = path.trim_start_matches("postgres://").split_once('/').unwrap();
    let (credentials, host) = authority.split_once('@').unwrap_or(("postgres", authority));
    let port = host.rsplit_once(':').map_or("5432", |(_, p)| p);
    if !std::path::Path::new(SOCKET_DIR).join(format!(".s.PGSQL.{port}")).exists() {
        assert!(
            !std::env::var("CI").is_ok_and(|v| v == "true"),
            "CI=true but PostgreSQL has no socket in {SOCKET_DIR}"
        );
        eprintln!("SKIPPING: no PostgreSQL socket in {SOCKET_DIR}");
        return;
    }
    let socket = format!("postgres://{credentials}@localhost/{database}?host={SOCKET_DIR}&port={port}");
    let t = TestApp::spawn(Backend::Postgres(socket)).await;
    let over_socket =
        "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity WHERE pid = pg_backend_pid() AND client_addr IS NULL";
    assert_eq!(t.count(over_socket).await, 1, "the connection went over TCP");
    t.create_sku("MUG", "Mug", 990, 3).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 2)]).await;
    let (status, body) = t.complete(&attempt_ref, "succeeded", 2).await;
    assert!(status.is_success(), "{body}");
    t.settle().await;
    assert_eq!(t.status(&order_no).await, "paid");
    assert_eq!(t.sku("MUG").await["sold"], 2);
    t.assert_clean().await;
}

/// The PostgreSQL backend serving `db`'s next read.
async fn backend_pid(db: &kassa::store::Db) -> i64 {
    let row =
        sql::query("SELECT CAST(pg_backend_pid() AS BIGINT)").fetch_optional(db.read_pool()).await.unwrap().unwrap();
    row.get::<i64>(0)
}

/// PostgreSQL (`store::engine::pg`): a command that ends cleanly hands its connection back to the
/// pool with no round trip, and the next command takes it; a transaction dropped open (a
/// cancelled request) closes its connection, which ends the transaction on the server and leaves
/// nothing behind; a read cancelled midway leaves its connection answering the next command's
/// own questions.
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgresql_connections_are_kept_between_commands() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    // A handle of its own: the app's workers would take connections in between.
    let db = kassa::store::Db::connect(&t.database_url, 4).await.unwrap();
    let first = backend_pid(&db).await;
    assert_eq!(backend_pid(&db).await, first, "a read ended cleanly: its connection is kept");
    assert_eq!(db.connections(), (1, 1), "one connection, idle in the pool");
    let committed = kassa::write_tx!(db, |tx| {
        sql::query("INSERT INTO settings (name, value) VALUES ('held.kept', 'v')").execute(&mut **tx).await?;
        sql::query_scalar::<i64>("SELECT CAST(pg_backend_pid() AS BIGINT)").fetch_one(&mut **tx).await
    })
    .unwrap();
    assert_eq!(committed, first, "the transaction took the kept connection");
    assert_eq!(backend_pid(&db).await, first, "and kept it once committed");

    // Dropped open, as a cancelled request drops its command.
    let mut tx = db.begin().await.unwrap();
    sql::query("INSERT INTO settings (name, value) VALUES ('held.dropped', 'v')").execute(&mut *tx).await.unwrap();
    drop(tx);
    let gone = "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity WHERE pid = $1";
    let mut waited = 0;
    while sql::query_scalar::<i64>(gone).bind(first).fetch_one(t.app.state.db.read_pool()).await.unwrap() > 0 {
        assert!(waited < 100, "the connection of the transaction dropped open was not closed");
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let other = backend_pid(&db).await;
    assert_ne!(other, first);
    let names: Vec<String> = sql::query_scalar("SELECT name FROM settings WHERE name LIKE 'held.%' ORDER BY name")
        .fetch_all(t.app.state.db.read_pool())
        .await
        .unwrap();
    assert_eq!(names, vec!["held.kept".to_string()], "the dropped transaction left nothing");

    // Cancelled mid-read: no answer reaches the next command.
    let slow = sql::query("SELECT CAST(1 AS BIGINT) FROM pg_sleep(0.3)").fetch_optional(db.read_pool());
    assert!(tokio::time::timeout(std::time::Duration::from_millis(50), slow).await.is_err());
    for n in 2..6_i64 {
        let row =
            sql::query("SELECT CAST($1 AS BIGINT)").bind(n).fetch_optional(db.read_pool()).await.unwrap().unwrap();
        assert_eq!(row.get::<i64>(0), n);
    }
    db.close().await;
}

/// PostgreSQL (`store::engine::pg::PgTx`): a transaction's BEGIN goes in front of its first reads (one
/// round trip less), and they and everything after are one transaction: the same transaction
/// time throughout, and a failing command undoes its writes. A transaction that sends nothing
/// sends no BEGIN and keeps its connection.
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgresql_transaction_begins_with_its_first_reads() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    let db = kassa::store::Db::connect(&t.database_url, 4).await.unwrap();
    let now = "SELECT CAST(EXTRACT(EPOCH FROM now()) * 1000000 AS BIGINT)";
    let failed = kassa::write_tx!(db, |tx| {
        let first = kassa::store::batch::together(tx, vec![(now, Vec::new())]).await?;
        let first: i64 = first[0].rows[0].get(0);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let second: i64 = sql::query_scalar(now).fetch_one(&mut **tx).await?;
        assert_eq!(first, second, "one transaction: its time stands still");
        sql::query("INSERT INTO settings (name, value) VALUES ('begin.undone', 'v')").execute(&mut **tx).await?;
        Err::<(), Error>(Error::invalid("on_purpose", "a command that fails after writing"))
    });
    assert!(matches!(failed, Err(e) if e.to_string().contains("a command that fails")));
    let left: i64 = sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM settings WHERE name = 'begin.undone'")
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    assert_eq!(left, 0, "the failed command's write was undone");
    let mut tx = db.begin().await.unwrap();
    assert!(tx.begin_pending(), "nothing sent yet");
    kassa::store::batch::together(&mut tx, vec![(now, Vec::new())]).await.unwrap();
    assert!(!tx.begin_pending(), "sent in front of the first reads");
    tx.rollback().await.unwrap();

    let before = backend_pid(&db).await;
    kassa::write_tx!(db, |_tx| { Ok::<(), Error>(()) }).unwrap();
    drop(db.begin().await.unwrap());
    assert_eq!(backend_pid(&db).await, before, "transactions that sent nothing kept their connection");
    db.close().await;
}

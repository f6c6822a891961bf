//! The store's engine on both databases: the group commit, the sandbox's own SQLite file and
//! writer thread, buyer sessions in memory, every engine configuration, lone write statements.
//! The query plans are in `plans.rs`, PostgreSQL's connections and transactions in `postgres.rs`.

use kassa::store::sql;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::common::{Backend, TestApp};
use kassa::domain::ids::Sku;
use kassa::error::Error;
use kassa::store::engine::EngineConfig;

/// A fresh, migrated SQLite database in a temporary directory: the directory (deleted when
/// dropped), the database's URL and the handle, with the engine configured as given.
pub(crate) async fn fresh_sqlite(engine: EngineConfig) -> (tempfile::TempDir, String, kassa::store::Db) {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shop.db").display());
    let db = kassa::store::Db::connect_with(&url, 2, engine).await.unwrap();
    db.migrate().await.unwrap();
    (dir, url, db)
}

/// The one number `sql` answers, read on `pool`.
pub(crate) async fn number(pool: kassa::store::Reader<'_>, sql: &str) -> i64 {
    sql::query_scalar::<i64>(sql).fetch_one(pool).await.unwrap()
}

/// Group commit (SQLite): in batches shared by many concurrent commands, a command that fails
/// after writing, and one cancelled midway, leave nothing behind, while every other command of
/// the same batches commits.
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

/// A buyer session, once made or found, is served from memory while it is younger than a day (sessions
/// never change, and retention prunes none that young); a token that names no session is looked
/// up every time, so a session created later is found.
#[tokio::test]
async fn found_buyer_sessions_are_kept_in_memory() {
    let (_dir, _, db) = fresh_sqlite(EngineConfig::default()).await;
    let (token, session) = kassa::store::catalog::create_session(&db, 1).await.unwrap();
    // Made by this instance, gone from the table behind kassa's back: served from memory, never
    // read back.
    sql::query("DELETE FROM sessions").execute(db.read_pool()).await.unwrap();
    let found = kassa::store::catalog::session_by_token(&db, &token, 1).await.unwrap().expect("the session");
    assert_eq!((found.id.as_str(), found.csrf_token.as_str()), (session.id.as_str(), session.csrf_token.as_str()));
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
    // Found once, it is kept too.
    sql::query("DELETE FROM sessions").execute(db.read_pool()).await.unwrap();
    let late = kassa::store::catalog::session_by_token(&db, "tok-late", 1).await.unwrap();
    assert_eq!(late.map(|s| s.id).as_deref(), Some("S-LATE"));
}

/// Every configuration of the engine (`EngineConfig`: SQLite with and without group commit, its
/// writer pinned or not; PostgreSQL with batches pipelined, with or without their inserts folded,
/// or sent one by one) places orders the
/// same way: concurrent confirms, one failing command among them undoing only itself, invariants
/// intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_engine_configuration_commits_the_same_way() {
    use kassa::domain::{Currency, Money};
    use kassa::store::catalog::{self, NewSku, SkuKind};
    let dir = tempfile::tempdir().unwrap();
    let mut runs: Vec<(EngineConfig, crate::common::TestDb)> = Vec::new();
    for writer in EngineConfig::all() {
        if writer.pg_pipeline && writer.pg_fold_inserts {
            // SQLite: the PostgreSQL settings change nothing.
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
                    ..kassa::store::checkout::ConfirmRequest::new(session.clone(), basket.clone(), "sandbox", "web", 2)
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

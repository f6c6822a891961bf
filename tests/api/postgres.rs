//! PostgreSQL's engine: a deadlock re-run, connections kept, replaced and closed, pipelined
//! batches and scripts, the Unix socket, BEGIN sent with a transaction's first reads.

use kassa::store::sql;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::{Backend, TestApp};
use crate::store::number;
use kassa::error::Error;
use kassa::store::engine::EngineConfig;

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

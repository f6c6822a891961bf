//! A command's last writes go with its commit (PostgreSQL: in one round trip, their row counts
//! checked by the database; SQLite: run at once): they commit when every count is right; a count
//! that is not fails the command and undoes all of it; a named statement that falls short is
//! answered by its name, and the transaction can still be read; the connection is clean after.
//! On PostgreSQL every way of sending statements is run: pipelined with consecutive inserts
//! folded, pipelined one statement each, and one round trip per statement.

use kassa::error::Error;
use kassa::store::batch::{Batch, Named};
use kassa::store::engine::EngineConfig;
use kassa::store::{DbKind, sql};

use crate::common::{Backend, TestApp};

crate::on_both!(a_commands_last_writes_go_with_its_commit, last_writes);
async fn last_writes(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    let configs: &[EngineConfig] = if t.app.state.db.kind() == DbKind::Sqlite {
        &[EngineConfig::default()]
    } else {
        &[
            EngineConfig::default(),
            EngineConfig { pg_fold_inserts: false, ..EngineConfig::default() },
            EngineConfig { pg_pipeline: false, pg_fold_inserts: false, ..EngineConfig::default() },
        ]
    };
    for (n, config) in configs.iter().enumerate() {
        // One connection: a transaction left open on it would block the next command.
        let db = kassa::store::Db::connect_with(&t.database_url, 1, *config).await.unwrap();
        let name = |what: &str| format!("flight{n}.{what}");
        let count = |prefix: String| {
            let db = db.clone();
            async move {
                sql::query_scalar::<i64>("SELECT CAST(COUNT(*) AS BIGINT) FROM settings WHERE name LIKE $1")
                    .bind(format!("{prefix}%"))
                    .fetch_one(db.read_pool())
                    .await
                    .unwrap()
            }
        };
        let insert = "INSERT INTO settings (name, value) VALUES ($1, 'v')";
        let insert_new = "INSERT INTO settings (name, value) VALUES ($1, 'v') ON CONFLICT (name) DO NOTHING";
        let update = "UPDATE settings SET value = 'w' WHERE name = $1";

        // Right counts: committed; a read after the deferred writes sees them.
        let seen = kassa::write_tx!(db, |tx| {
            let mut batch = Batch::new();
            batch.expect(insert, kassa::args![name("a")], 1, "insert a");
            batch.expect(insert, kassa::args![name("b")], 1, "insert b");
            batch.expect(update, kassa::args![name("a")], 1, "update a");
            batch.run_checked_by_commit(tx).await?;
            let value: String = sql::query_scalar("SELECT value FROM settings WHERE name = $1")
                .bind(name("a"))
                .fetch_one(&mut **tx)
                .await?;
            let mut last = Batch::new();
            last.expect(update, kassa::args![name("b")], 1, "update b");
            last.run_checked_by_commit(tx).await?;
            Ok::<_, Error>(value)
        })
        .unwrap();
        assert_eq!(seen, "w", "{config:?}");
        assert_eq!(count(name("")).await, 2, "{config:?}");

        // A short update: the command fails by its name, and nothing of it stays.
        let failed = kassa::write_tx!(db, |tx| {
            let mut batch = Batch::new();
            batch.expect(insert, kassa::args![name("c")], 1, "insert c");
            batch.expect(update, kassa::args![name("missing")], 1, "the missing row");
            batch.expect(insert, kassa::args![name("d")], 1, "insert d");
            batch.run_checked_by_commit(tx).await?;
            Ok::<_, Error>(())
        });
        assert!(matches!(&failed, Err(e) if e.to_string().contains("the missing row")), "{config:?}: {failed:?}");
        assert_eq!(count(name("")).await, 2, "{config:?}");

        // A short insert among inserts (folded on PostgreSQL): the same.
        let failed = kassa::write_tx!(db, |tx| {
            let mut batch = Batch::new();
            batch.expect(insert_new, kassa::args![name("a")], 1, "a taken");
            batch.expect(insert_new, kassa::args![name("e")], 1, "insert e");
            batch.run_checked_by_commit(tx).await?;
            Ok::<_, Error>(())
        });
        assert!(matches!(&failed, Err(e) if e.to_string().contains("a taken")), "{config:?}: {failed:?}");
        assert_eq!(count(name("e")).await, 0, "{config:?}");

        // A statement whose count the database cannot check (a WITH of its own): checked on its
        // way back instead.
        let failed = kassa::write_tx!(db, |tx| {
            let mut batch = Batch::new();
            batch.expect(insert, kassa::args![name("f")], 1, "insert f");
            batch.expect(
                "WITH x AS (SELECT CAST($1 AS TEXT) AS name) UPDATE settings SET value = 'w' FROM x WHERE settings.name = x.name",
                kassa::args![name("missing")],
                1,
                "the missing row, by a WITH",
            );
            batch.run_checked_by_commit(tx).await?;
            Ok::<_, Error>(())
        });
        assert!(matches!(&failed, Err(e) if e.to_string().contains("by a WITH")), "{config:?}: {failed:?}");
        assert_eq!(count(name("f")).await, 0, "{config:?}");

        // Named statements and the commit: a short one is answered by its name, the rest undone,
        // and what the refusal says can still be read.
        let refused = kassa::write_tx!(db, |tx| {
            let mut batch = Batch::new();
            let mut named = Named::new();
            batch.expect(insert, kassa::args![name("g")], 1, "insert g");
            named.add(&mut batch, update, kassa::args![name("a")], 1, 'a');
            named.add(&mut batch, update, kassa::args![name("missing")], 1, 'm');
            batch.expect(insert, kassa::args![name("h")], 1, "insert h");
            let Some(short) = batch.run_named_and_commit(tx, &named).await? else {
                return Ok::<Option<char>, Error>(None);
            };
            let value: String = sql::query_scalar("SELECT value FROM settings WHERE name = $1")
                .bind(name("a"))
                .fetch_one(&mut **tx)
                .await?;
            Err(Error::invalid("refused", format!("{short} {value}")))
        });
        assert!(matches!(&refused, Err(e) if e.to_string().contains("m w")), "{config:?}: {refused:?}");
        assert_eq!(count(name("g")).await + count(name("h")).await, 0, "{config:?}");

        // Every count right: committed.
        let placed = kassa::write_tx!(db, |tx| {
            let mut batch = Batch::new();
            let mut named = Named::new();
            named.add(&mut batch, update, kassa::args![name("b")], 1, 'b');
            batch.expect(insert, kassa::args![name("i")], 1, "insert i");
            batch.expect(insert, kassa::args![name("j")], 1, "insert j");
            batch.run_named_and_commit(tx, &named).await
        })
        .unwrap();
        assert_eq!(placed, None, "{config:?}");
        assert_eq!(count(name("")).await, 4, "{config:?}");
        if db.kind() == DbKind::Postgres {
            // Nothing more runs in a transaction that committed with its last writes.
            let after = kassa::write_tx!(db, |tx| {
                let mut batch = Batch::new();
                batch.expect(insert, kassa::args![name("k")], 1, "insert k");
                batch.run_named_and_commit(tx, &Named::<char>::new()).await?;
                sql::query("DELETE FROM settings WHERE name = $1").bind(name("k")).execute(&mut **tx).await?;
                Ok::<_, Error>(())
            });
            assert!(matches!(&after, Err(e) if e.to_string().contains("after its transaction committed")), "{after:?}");
            assert_eq!(count(name("k")).await, 1, "{config:?}");
        }
        // The one connection answers cleanly afterwards.
        let got: i64 =
            sql::query_scalar("SELECT CAST($1 AS BIGINT) + 1").bind(41_i64).fetch_one(db.read_pool()).await.unwrap();
        assert_eq!(got, 42, "{config:?}");
        db.close().await;
    }
}

/// PostgreSQL: an `INSERT … VALUES` with no `ON CONFLICT` goes in whole or fails, so the engine
/// does not have the database check its count (`store/engine/fold.rs`). That holds while no
/// table of kassa's has a `BEFORE INSERT` trigger or a rule, either of which could skip a row.
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_table_skips_an_inserted_row() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    let pool = t.app.state.db.read_pool();
    let before_insert: Vec<String> = sql::query_scalar(
        "SELECT CAST(trigger_name AS TEXT) FROM information_schema.triggers \
         WHERE trigger_schema = current_schema() AND action_timing <> 'AFTER' AND event_manipulation = 'INSERT'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(before_insert.is_empty(), "{before_insert:?}");
    let rules: Vec<String> =
        sql::query_scalar("SELECT CAST(rulename AS TEXT) FROM pg_rules WHERE schemaname = current_schema()")
            .fetch_all(pool)
            .await
            .unwrap();
    assert!(rules.is_empty(), "{rules:?}");
    let after_insert: i64 = sql::query_scalar(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM information_schema.triggers \
         WHERE trigger_schema = current_schema() AND action_timing = 'AFTER' AND event_manipulation = 'INSERT'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(after_insert > 0, "the query reads kassa's triggers");
}

//! Migrations: the versions of `migrations/sqlite/` and `migrations/postgres/` (the same version
//! is the same change in both) applied in order, each in its own transaction, once, however many
//! instances start at once; and the sandbox's own SQLite file.

use anyhow::Context as _;

use super::sql::{query, query_scalar};
use super::{Db, DbKind, Engine, sandbox_url, writer};

impl Db {
    /// Applies the migrations of this database kind that have not been applied yet. Safe when
    /// several instances start at once.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        let migrations: &[(i64, &str)] = match self.kind {
            DbKind::Sqlite => &[
                (1, include_str!("../../migrations/sqlite/0001_init.sql")),
                (2, include_str!("../../migrations/sqlite/0002_sweep_claims.sql")),
                (3, include_str!("../../migrations/sqlite/0003_fulfilment_refunds.sql")),
                (4, include_str!("../../migrations/sqlite/0004_admin.sql")),
                (5, include_str!("../../migrations/sqlite/0005_event_index.sql")),
                (6, include_str!("../../migrations/sqlite/0006_captured_attempt.sql")),
                (7, include_str!("../../migrations/sqlite/0007_reconciliation.sql")),
                (8, include_str!("../../migrations/sqlite/0008_periodic_indexes.sql")),
                (9, include_str!("../../migrations/sqlite/0009_check_comparisons.sql")),
                (10, include_str!("../../migrations/sqlite/0010_checkout_references.sql")),
                (11, include_str!("../../migrations/sqlite/0011_abuse_limits.sql")),
            ],
            DbKind::Postgres => &[
                (1, include_str!("../../migrations/postgres/0001_init.sql")),
                (2, include_str!("../../migrations/postgres/0002_sweep_claims.sql")),
                (3, include_str!("../../migrations/postgres/0003_fulfilment_refunds.sql")),
                (4, include_str!("../../migrations/postgres/0004_admin.sql")),
                (5, include_str!("../../migrations/postgres/0005_event_index.sql")),
                (6, include_str!("../../migrations/postgres/0006_captured_attempt.sql")),
                (7, include_str!("../../migrations/postgres/0007_reconciliation.sql")),
                (8, include_str!("../../migrations/postgres/0008_periodic_indexes.sql")),
                (9, include_str!("../../migrations/postgres/0009_check_comparisons.sql")),
                (10, include_str!("../../migrations/postgres/0010_checkout_references.sql")),
                (11, include_str!("../../migrations/postgres/0011_abuse_limits.sql")),
            ],
        };
        match &self.engine {
            Engine::Postgres(pool) => {
                // One migrator at a time across the fleet: a session lock, held on a connection of
                // its own while the migrations run on others.
                let lock = pool.get().await?;
                lock.exec("SELECT pg_advisory_lock(7285937001)").await?;
                let result = self.apply(migrations).await;
                lock.exec("SELECT pg_advisory_unlock(7285937001)").await?;
                result
            }
            Engine::Sqlite(_) => self.apply(migrations).await,
        }
    }

    /// Applies the listed migrations not applied yet, each in a transaction of its own with its
    /// `schema_migrations` row. On SQLite the transaction takes the write lock before looking, so
    /// two processes starting on one file cannot both decide to apply the same migration.
    async fn apply(&self, migrations: &[(i64, &str)]) -> anyhow::Result<()> {
        let mut tx = self.begin().await?;
        tx.exec(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
        )
        .await?;
        tx.commit().await?;
        for (version, sql) in migrations {
            let mut tx = self.begin().await?;
            let applied: Option<i64> = query_scalar("SELECT version FROM schema_migrations WHERE version = $1")
                .bind(*version)
                .fetch_optional(&mut *tx)
                .await?;
            if applied.is_some() {
                tx.rollback().await?;
                continue;
            }
            tx.exec(sql).await.with_context(|| format!("applying migration {version}"))?;
            query("INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)")
                .bind(*version)
                .bind(crate::clock::Clock::now_ms(&crate::clock::SystemClock))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            tracing::info!(version, "applied migration");
        }
        Ok(())
    }

    /// The database the built-in sandbox gateway keeps its records in. On PostgreSQL that is
    /// kassa's own (many writers; every instance of a fleet must see the sandbox's records). On
    /// SQLite it is a file of its own beside kassa's ([`sandbox_url`]): the sandbox stands in for
    /// a remote gateway, and on one shared file its writes — about as many as kassa's own per
    /// purchase — would queue on kassa's single writer. Opening it the first time copies the
    /// records an older version kept in kassa's file. `main_url` is the URL `self` was opened with.
    pub async fn open_sandbox(&self, main_url: &str) -> anyhow::Result<Db> {
        let Some((url, main_path)) = sandbox_url(main_url) else {
            return Ok(self.clone());
        };
        // Its writer thread is not held on kassa's writer's CPU: the two would queue for it.
        let db = Db::open(&url, 1, self.config, writer::Role::Sandbox).await?;
        let Engine::Sqlite(sqlite) = &db.engine else {
            anyhow::bail!("the sandbox's own database is SQLite");
        };
        // Outside any transaction (SQLite attaches no database inside one), on the connection the
        // migrations then run on.
        sqlite.writer.lock().await.run(
            "ATTACH DATABASE $1 AS kassa_main",
            &[super::sql::Arg::from(main_path.as_str())],
            None,
        )?;
        let result = db
            .apply(&[
                (1, include_str!("../../migrations/sqlite-sandbox/0001_sandbox.sql")),
                (2, include_str!("../../migrations/sqlite-sandbox/0002_check_comparisons.sql")),
            ])
            .await;
        let detached = sqlite.writer.lock().await.exec("DETACH DATABASE kassa_main");
        result.context("preparing the sandbox's database")?;
        detached?;
        Ok(db)
    }
}

//! Migrations: the versions of `migrations/sqlite/` and `migrations/postgres/` (the same version
//! is the same change in both) applied in order, each in its own transaction, once, however many
//! instances start at once; and the sandbox's own SQLite file.
//!
//! Kept by hand rather than with a migration crate (refinery, say), because what it must do is
//! kassa's own: run SQLite's migrations on kassa's writer connection through the store's seam
//! (the same lock discipline as every other write, no second connection on the file), take one
//! PostgreSQL advisory lock on a connection of its own for the whole fleet while the migrations
//! run on others, attach the main file to migrate the sandbox's, and answer the readiness probe
//! from the read pool with what is pending. The `schema_migrations` table (version, applied_at)
//! predates any such choice; a crate keeping checksums and names in a table of its own would
//! mean migrating the migration table under a rolling upgrade. The runner is the sixty lines
//! below; `tests/api/schema.rs` migrates both databases from empty and compares them.

use anyhow::Context as _;

use super::sql::{query, query_scalar};
use super::{Db, DbKind, Engine, sandbox_url, writer};

/// A migration: its version, its name (the file's, without `.sql`) and its SQL.
pub type Migration = (i64, &'static str, &'static str);

/// SQLite's migrations, in order.
const SQLITE: &[Migration] = &[
    (1, "0001_init", include_str!("../../migrations/sqlite/0001_init.sql")),
    (2, "0002_sweep_claims", include_str!("../../migrations/sqlite/0002_sweep_claims.sql")),
    (3, "0003_fulfilment_refunds", include_str!("../../migrations/sqlite/0003_fulfilment_refunds.sql")),
    (4, "0004_admin", include_str!("../../migrations/sqlite/0004_admin.sql")),
    (5, "0005_event_index", include_str!("../../migrations/sqlite/0005_event_index.sql")),
    (6, "0006_captured_attempt", include_str!("../../migrations/sqlite/0006_captured_attempt.sql")),
    (7, "0007_reconciliation", include_str!("../../migrations/sqlite/0007_reconciliation.sql")),
    (8, "0008_periodic_indexes", include_str!("../../migrations/sqlite/0008_periodic_indexes.sql")),
    (9, "0009_check_comparisons", include_str!("../../migrations/sqlite/0009_check_comparisons.sql")),
    (10, "0010_checkout_references", include_str!("../../migrations/sqlite/0010_checkout_references.sql")),
    (11, "0011_abuse_limits", include_str!("../../migrations/sqlite/0011_abuse_limits.sql")),
    (12, "0012_shop_references", include_str!("../../migrations/sqlite/0012_shop_references.sql")),
    (13, "0013_shipping_reports", include_str!("../../migrations/sqlite/0013_shipping_reports.sql")),
    (14, "0014_statements", include_str!("../../migrations/sqlite/0014_statements.sql")),
    (15, "0015_second_captures", include_str!("../../migrations/sqlite/0015_second_captures.sql")),
    (16, "0016_open_orders", include_str!("../../migrations/sqlite/0016_open_orders.sql")),
    (17, "0017_rejected_notifications", include_str!("../../migrations/sqlite/0017_rejected_notifications.sql")),
    (18, "0018_history_retention", include_str!("../../migrations/sqlite/0018_history_retention.sql")),
    (19, "0019_buyer_lookup", include_str!("../../migrations/sqlite/0019_buyer_lookup.sql")),
    (20, "0020_subscribe_messages", include_str!("../../migrations/sqlite/0020_subscribe_messages.sql")),
    (21, "0021_promotions", include_str!("../../migrations/sqlite/0021_promotions.sql")),
    (22, "0022_statement_discounts", include_str!("../../migrations/sqlite/0022_statement_discounts.sql")),
    (23, "0023_cases", include_str!("../../migrations/sqlite/0023_cases.sql")),
    (24, "0024_order_lines_by_sku", include_str!("../../migrations/sqlite/0024_order_lines_by_sku.sql")),
    (25, "0025_statement_disputes", include_str!("../../migrations/sqlite/0025_statement_disputes.sql")),
    (26, "0026_attempts_by_gateway", include_str!("../../migrations/sqlite/0026_attempts_by_gateway.sql")),
    (27, "0027_rows_short", include_str!("../../migrations/sqlite/0027_rows_short.sql")),
];
/// PostgreSQL's migrations, in order: version N is the same change as SQLite's.
const POSTGRES: &[Migration] = &[
    (1, "0001_init", include_str!("../../migrations/postgres/0001_init.sql")),
    (2, "0002_sweep_claims", include_str!("../../migrations/postgres/0002_sweep_claims.sql")),
    (3, "0003_fulfilment_refunds", include_str!("../../migrations/postgres/0003_fulfilment_refunds.sql")),
    (4, "0004_admin", include_str!("../../migrations/postgres/0004_admin.sql")),
    (5, "0005_event_index", include_str!("../../migrations/postgres/0005_event_index.sql")),
    (6, "0006_captured_attempt", include_str!("../../migrations/postgres/0006_captured_attempt.sql")),
    (7, "0007_reconciliation", include_str!("../../migrations/postgres/0007_reconciliation.sql")),
    (8, "0008_periodic_indexes", include_str!("../../migrations/postgres/0008_periodic_indexes.sql")),
    (9, "0009_check_comparisons", include_str!("../../migrations/postgres/0009_check_comparisons.sql")),
    (10, "0010_checkout_references", include_str!("../../migrations/postgres/0010_checkout_references.sql")),
    (11, "0011_abuse_limits", include_str!("../../migrations/postgres/0011_abuse_limits.sql")),
    (12, "0012_shop_references", include_str!("../../migrations/postgres/0012_shop_references.sql")),
    (13, "0013_shipping_reports", include_str!("../../migrations/postgres/0013_shipping_reports.sql")),
    (14, "0014_statements", include_str!("../../migrations/postgres/0014_statements.sql")),
    (15, "0015_second_captures", include_str!("../../migrations/postgres/0015_second_captures.sql")),
    (16, "0016_open_orders", include_str!("../../migrations/postgres/0016_open_orders.sql")),
    (17, "0017_rejected_notifications", include_str!("../../migrations/postgres/0017_rejected_notifications.sql")),
    (18, "0018_history_retention", include_str!("../../migrations/postgres/0018_history_retention.sql")),
    (19, "0019_buyer_lookup", include_str!("../../migrations/postgres/0019_buyer_lookup.sql")),
    (20, "0020_subscribe_messages", include_str!("../../migrations/postgres/0020_subscribe_messages.sql")),
    (21, "0021_promotions", include_str!("../../migrations/postgres/0021_promotions.sql")),
    (22, "0022_statement_discounts", include_str!("../../migrations/postgres/0022_statement_discounts.sql")),
    (23, "0023_cases", include_str!("../../migrations/postgres/0023_cases.sql")),
    (24, "0024_order_lines_by_sku", include_str!("../../migrations/postgres/0024_order_lines_by_sku.sql")),
    (25, "0025_statement_disputes", include_str!("../../migrations/postgres/0025_statement_disputes.sql")),
    (26, "0026_attempts_by_gateway", include_str!("../../migrations/postgres/0026_attempts_by_gateway.sql")),
    (27, "0027_rows_short", include_str!("../../migrations/postgres/0027_rows_short.sql")),
];

impl Db {
    /// SQLite's migrations, in order (what a new SQLite database takes).
    pub fn sqlite_migrations() -> &'static [Migration] {
        SQLITE
    }

    /// The migrations of this database kind, in order.
    pub fn migrations(&self) -> &'static [Migration] {
        match self.kind {
            DbKind::Sqlite => SQLITE,
            DbKind::Postgres => POSTGRES,
        }
    }

    /// The migrations not applied yet, in order (all of them on an empty database). Reads only.
    pub async fn pending_migrations(&self) -> crate::error::Result<Vec<Migration>> {
        let applied: Vec<i64> =
            match query_scalar("SELECT version FROM schema_migrations").fetch_all(self.read_pool()).await {
                Ok(applied) => applied,
                // No table yet: nothing was ever applied.
                Err(_) if !self.has_table("schema_migrations").await? => Vec::new(),
                Err(e) => return Err(e),
            };
        Ok(self.migrations().iter().filter(|(v, ..)| !applied.contains(v)).copied().collect())
    }

    /// Whether the database has a table of this name.
    async fn has_table(&self, name: &str) -> crate::error::Result<bool> {
        let sql = match self.kind {
            DbKind::Sqlite => "SELECT CAST(COUNT(*) AS BIGINT) FROM sqlite_schema WHERE type = 'table' AND name = $1",
            DbKind::Postgres => {
                "SELECT CAST(COUNT(*) AS BIGINT) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1"
            }
        };
        Ok(query_scalar::<i64>(sql).bind(name).fetch_one(self.read_pool()).await? > 0)
    }

    /// Applies the migrations of this database kind that have not been applied yet. Safe when
    /// several instances start at once.
    pub async fn migrate(&self) -> anyhow::Result<()> {
        let migrations: Vec<(i64, &str)> = self.migrations().iter().map(|(v, _, sql)| (*v, *sql)).collect();
        let migrations = migrations.as_slice();
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
        let mut applied_now: Vec<i64> = Vec::new();
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
            tracing::debug!(version, "applied migration");
            applied_now.push(*version);
        }
        // One line for the lot: a new database applies every migration at once.
        if let (Some(first), Some(last)) = (applied_now.first(), applied_now.last()) {
            tracing::info!(count = applied_now.len(), first, last, "applied migrations");
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

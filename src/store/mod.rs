//! The store: one database handle for SQLite and PostgreSQL, migrations, and the commands that each
//! run in one transaction. Per-database differences live here and nowhere else:
//! `BEGIN IMMEDIATE` versus `SELECT … FOR UPDATE`, the pool shape, and the migration folder.

pub mod admin;
pub mod batch;
pub mod cases;
pub mod catalog;
pub mod check;
mod check_buyer;
pub mod check_cases;
pub mod check_keys;
mod check_money;
mod check_promotions;
mod check_scope;
pub mod checkout;
pub mod dialect;
pub mod engine;
pub mod events;
pub mod expiry;
pub mod files;
pub mod fulfilment;
pub mod gauges;
pub mod lines;
pub mod listing;
pub mod lookup;
pub mod mail;
mod migrate;
pub mod monitor;
pub mod orders;
pub mod outbox;
pub mod paid;
pub mod payments;
pub mod promotion_uses;
pub mod promotions;
pub mod reconcile;
pub mod refunds;
pub mod rejected;
pub mod reservations;
pub mod retention;
pub mod second_captures;
pub mod settings;
pub mod shipping;
pub mod sql;
pub mod statement_rows;
pub mod statements;
pub mod status_counts;
pub mod subscribe;
pub mod views;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::error::Result;
use engine::pg::PgPool;
use engine::pg_tx::PgTx;
use engine::sqlite::{Location, NativeConn, Readers};
use engine::{EngineConfig, group, writer};
use sql::{Arg, Executor, Output};

pub use engine::conn::{Conn, NativeTx, Tx};

/// Runs one command in one write transaction: `write_tx!(db, |tx| { ...; Ok(value) })`.
/// Commits on `Ok`, rolls back on `Err`; serialization failures and deadlocks re-run the whole
/// body, a bounded number of times. The body is an async block, so `return` leaves the command.
/// (A macro rather than a closure-taking method: async closures borrowing the transaction are not
/// yet provably `Send` for every lifetime, which spawned tasks need.)
#[macro_export]
macro_rules! write_tx {
    ($db:expr, |$tx:ident| $body:block) => {{
        let db: &$crate::store::Db = &$db;
        match db.group() {
            // SQLite: group commit (see `store::engine::group`); one writer, so nothing to retry.
            Some(group) => {
                let mut member = group.join().await;
                let outcome: $crate::error::Result<_> = match member.savepoint().await {
                    Ok(batch_tx) => {
                        let $tx = batch_tx;
                        async { $body }.await
                    }
                    Err(e) => Err(e),
                };
                // A failed command undoes its own writes; the batch goes on.
                let outcome = match outcome {
                    Err(e) => member.rollback().await.and(Err(e)),
                    ok => ok,
                };
                member.finish(outcome).await
            }
            None => {
                let mut tries: u32 = 0;
                loop {
                    tries += 1;
                    let outcome: $crate::error::Result<_> = match db.begin().await {
                        Ok(mut owned) => {
                            let outcome: $crate::error::Result<_> = {
                                let $tx = &mut owned;
                                async { $body }.await
                            };
                            db.finish(owned, outcome).await
                        }
                        Err(e) => Err(e),
                    };
                    match outcome {
                        Err(e) if e.is_retryable() && tries < $crate::store::TX_RETRIES_MAX => {
                            ::tracing::debug!(tries, error = %e, "retrying transaction");
                            $crate::store::Db::retry_pause(tries).await;
                        }
                        other => break other,
                    }
                }
            }
        }
    }};
}

/// Runs a write that is atomic on its own (one statement or script, outside any transaction)
/// again after a serialization failure or deadlock, as [`write_tx!`] does a transaction.
async fn retrying<T, F, Fut>(write: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut tries: u32 = 0;
    loop {
        tries += 1;
        match write().await {
            Err(e) if e.is_retryable() && tries < TX_RETRIES_MAX => {
                ::tracing::debug!(tries, error = %e, "retrying write");
                Db::retry_pause(tries).await;
            }
            other => return other,
        }
    }
}

/// Retries of a whole transaction after a serialization failure or deadlock. Bounded so a
/// pathological conflict surfaces as an error instead of spinning.
pub const TX_RETRIES_MAX: u32 = 8;
/// SQLite: concurrent readers (the writer is one connection, see [`Db::connect`]).
const SQLITE_READERS_MAX: usize = 4;

pub use dialect::DbKind;

#[derive(Debug, Clone)]
pub struct Db {
    kind: DbKind,
    engine: Engine,
    /// How the engine runs (the sandbox's database runs the same way).
    config: EngineConfig,
    /// Buyer sessions already read ([`catalog::session_by_token`]).
    sessions: Arc<catalog::SessionCache>,
    /// The orders' count by status, carried on from the status log ([`status_counts`]).
    status_counts: Arc<status_counts::StatusCounts>,
}

#[derive(Debug, Clone)]
enum Engine {
    Sqlite(Arc<Sqlite>),
    Postgres(PgPool),
}

/// SQLite's connections: one writer, run in place, and a few readers.
#[derive(Debug)]
struct Sqlite {
    writer: Arc<tokio::sync::Mutex<NativeConn>>,
    readers: Arc<Readers>,
    /// The group-commit writer over `writer` ([`EngineConfig::sqlite_group_commit`]).
    group: Option<group::GroupCommit>,
    /// The thread that runs the hot write commands ([`Db::on_writer`]).
    thread: writer::WriterThread,
}

/// Where the store's reads run: the readers (SQLite) or the pool (PostgreSQL), outside any
/// transaction. Statements run on it like on a transaction's connection.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'d>(&'d Db);

impl Executor for Reader<'_> {
    async fn run(self, sql: &str, args: Vec<Arg>, limit: Option<usize>) -> Result<Output> {
        match &self.0.engine {
            Engine::Sqlite(s) => s.readers.run(sql, args, limit).await,
            Engine::Postgres(pool) => pool.get().await?.run(sql, &args, limit).await,
        }
    }
}

/// Which database a URL names, changing nothing.
pub fn normalize_url_kind(url: &str) -> anyhow::Result<DbKind> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(DbKind::Postgres)
    } else if url.starts_with("sqlite:") {
        Ok(DbKind::Sqlite)
    } else {
        anyhow::bail!("unsupported database URL scheme (use sqlite:// or postgres://)")
    }
}

/// Which database a URL names; for a SQLite file, creates its directory when missing.
pub fn normalize_url(url: &str) -> anyhow::Result<DbKind> {
    if normalize_url_kind(url)? == DbKind::Postgres {
        return Ok(DbKind::Postgres);
    }
    if let Some((_, path, _)) = sqlite_file_parts(url)
        && let Some(parent) = std::path::Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).with_context(|| format!("creating database directory {}", parent.display()))?;
    }
    Ok(DbKind::Sqlite)
}

/// A SQLite file URL's parts: the slashes after `sqlite:`, the file's path, the query (without
/// `?`); `None` for PostgreSQL and for an in-memory database.
fn sqlite_file_parts(url: &str) -> Option<(&str, &str, &str)> {
    let rest = url.strip_prefix("sqlite:")?;
    let slashes = if rest.starts_with("//") { "//" } else { "" };
    let (path, query) = rest[slashes.len()..].split_once('?').unwrap_or((&rest[slashes.len()..], ""));
    (!path.is_empty() && !path.contains(":memory:") && !query.contains("mode=memory")).then_some((slashes, path, query))
}

/// The file of a SQLite URL; `None` for PostgreSQL and for an in-memory database.
pub fn sqlite_path(url: &str) -> Option<&str> {
    sqlite_file_parts(url).map(|(_, path, _)| path)
}

/// For a SQLite database file, the URL of the sandbox gateway's file beside it (`shop.db` →
/// `shop-sandbox.db`, same query options) and the path of the file itself; `None` for PostgreSQL
/// and for an in-memory SQLite database.
pub fn sandbox_url(url: &str) -> Option<(String, String)> {
    let (slashes, path, query) = sqlite_file_parts(url)?;
    let sandbox = match path.strip_suffix(".db") {
        Some(stem) => format!("{stem}-sandbox.db"),
        None => format!("{path}-sandbox"),
    };
    let query = if query.is_empty() { String::new() } else { format!("?{query}") };
    Some((format!("sqlite:{slashes}{sandbox}{query}"), path.to_string()))
}

impl Db {
    /// Opens the database with the engine's defaults. `max_connections` bounds the PostgreSQL
    /// pool.
    pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<Db> {
        Db::connect_with(url, max_connections, EngineConfig::default()).await
    }

    /// [`Db::connect`] with the engine configured.
    pub async fn connect_with(url: &str, max_connections: u32, engine: EngineConfig) -> anyhow::Result<Db> {
        Db::open(url, max_connections, engine, writer::Role::Kassa).await
    }

    /// [`Db::connect_with`] for commands that only read: a SQLite file that is not there is an error
    /// naming it, not a new empty database.
    pub async fn connect_existing(url: &str, max_connections: u32, engine: EngineConfig) -> anyhow::Result<Db> {
        if let Some(path) = sqlite_path(url)
            && !std::path::Path::new(path).exists()
        {
            anyhow::bail!("no kassa database at {path} (kassa serve or kassa migrate creates one)");
        }
        Db::connect_with(url, max_connections, engine).await
    }

    /// `role`: whose writes SQLite's writer thread runs ([`writer::Role`]).
    async fn open(url: &str, max_connections: u32, config: EngineConfig, role: writer::Role) -> anyhow::Result<Db> {
        let kind = normalize_url(url)?;
        let engine = match kind {
            DbKind::Sqlite => {
                let at = Location::of(url);
                let thread = writer::WriterThread::start(role, config.sqlite_pin_writer)?;
                let conn = NativeConn::open(&at).with_context(|| format!("opening SQLite database {url}"))?;
                let writer = Arc::new(tokio::sync::Mutex::new(conn));
                let group = config.sqlite_group_commit.then(|| group::GroupCommit::new(Arc::clone(&writer)));
                let readers = Arc::new(Readers::new(at, SQLITE_READERS_MAX));
                Engine::Sqlite(Arc::new(Sqlite { writer, readers, group, thread }))
            }
            DbKind::Postgres => {
                let max = usize::try_from(max_connections.max(2)).unwrap_or(2);
                Engine::Postgres(
                    PgPool::connect(url, max, config.pg_flight()).await.context("connecting to PostgreSQL")?,
                )
            }
        };
        Ok(Db { kind, engine, config, sessions: Default::default(), status_counts: Default::default() })
    }

    /// Runs a write command on SQLite's writer thread ([`writer`]); elsewhere, here.
    pub async fn on_writer<F>(&self, command: F) -> Result<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.engine {
            Engine::Sqlite(s) => s.thread.run(command).await,
            Engine::Postgres(_) => Ok(command.await),
        }
    }

    /// Runs a write command with a handle of its own on the database: on SQLite's writer thread
    /// ([`writer`]), elsewhere here.
    pub async fn command<T, F, Fut>(&self, command: F) -> Result<T>
    where
        F: FnOnce(Db) -> Fut,
        Fut: std::future::Future<Output = Result<T>> + Send + 'static,
        T: Send + 'static,
    {
        self.on_writer(command(self.clone())).await?
    }

    pub(crate) fn sessions(&self) -> &catalog::SessionCache {
        &self.sessions
    }

    /// The group-commit writer (SQLite only).
    pub fn group(&self) -> Option<&group::GroupCommit> {
        match &self.engine {
            Engine::Sqlite(s) => s.group.as_ref(),
            Engine::Postgres(_) => None,
        }
    }

    /// Whether the database answers a read.
    pub async fn ping(&self) -> Result<()> {
        sql::query_scalar::<i64>("SELECT 1").fetch_one(self.read_pool()).await.map(drop)
    }

    fn status_counts(&self) -> &status_counts::StatusCounts {
        &self.status_counts
    }

    pub fn kind(&self) -> DbKind {
        self.kind
    }

    /// Where reads outside a transaction run.
    pub fn read_pool(&self) -> Reader<'_> {
        Reader(self)
    }

    /// [`DbKind::for_update`] of this database.
    pub fn for_update(&self) -> &'static str {
        self.kind.for_update()
    }

    /// [`DbKind::for_update_of`] of this database.
    pub fn for_update_of(&self, alias: &str) -> String {
        self.kind.for_update_of(alias)
    }

    /// [`DbKind::skip_locked`] of this database.
    pub fn skip_locked(&self) -> &'static str {
        self.kind.skip_locked()
    }

    /// Starts a write transaction.
    pub async fn begin(&self) -> Result<Tx<'static>> {
        match &self.engine {
            Engine::Sqlite(s) => Tx::begin_native(&s.writer).await,
            Engine::Postgres(pool) => Ok(Conn::Pg(pool.begin("BEGIN").await?).into()),
        }
    }

    /// One write statement, durably: on PostgreSQL on its own (autocommit: one round trip instead
    /// of three with BEGIN and COMMIT, and one statement is atomic anyway), on SQLite as a write
    /// command of the group commit. `build` makes the statement (again, should PostgreSQL ask for
    /// a retry). Returns the number of rows it changed.
    pub async fn write_one<'q, F>(&self, build: F) -> Result<u64>
    where
        F: Fn() -> sql::Query<'q>,
    {
        if self.kind == DbKind::Sqlite {
            return crate::write_tx!(self, |tx| { Ok(build().execute(&mut **tx).await?.rows_affected()) });
        }
        retrying(|| async { Ok(build().execute(self.read_pool()).await?.rows_affected()) }).await
    }

    /// PostgreSQL: `run` outside any transaction as one transaction of its own, all of it or none,
    /// in one round trip (`BEGIN`, the statements and `COMMIT` pipelined). What each statement
    /// gave, in order. `None` on SQLite.
    pub async fn pg_script(&self, run: Vec<(&str, Vec<Arg>)>) -> Result<Option<Vec<Output>>> {
        let Engine::Postgres(pool) = &self.engine else { return Ok(None) };
        let run: Vec<(String, Vec<Arg>)> = run.into_iter().map(|(sql, args)| (sql.to_string(), args)).collect();
        retrying(|| async { Ok(Some(pool.get().await?.pipeline(Some("BEGIN"), &run, Some("COMMIT")).await?)) }).await
    }

    /// Starts a read-only transaction on a consistent snapshot (safe while kassa serves).
    pub async fn snapshot(&self) -> Result<Tx<'static>> {
        Ok(match &self.engine {
            Engine::Sqlite(s) => Conn::Read(s.readers.begin().await?).into(),
            Engine::Postgres(pool) => {
                let tx: PgTx = pool.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?;
                Conn::Pg(tx).into()
            }
        })
    }

    /// Commits on `Ok`, rolls back on `Err`; used by [`write_tx!`].
    pub async fn finish<T>(&self, tx: Tx<'static>, outcome: Result<T>) -> Result<T> {
        match outcome {
            Ok(value) => {
                tx.commit().await?;
                Ok(value)
            }
            Err(e) => {
                // Dropping would roll back too; doing it here returns the connection clean.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    /// Pause before retry number `tries` of a transaction that hit a serialization failure.
    pub async fn retry_pause(tries: u32) {
        tokio::time::sleep(Duration::from_millis(u64::from(tries) * 5)).await;
    }

    /// SQLite: a consistent copy of the database in a new file at `to` (`VACUUM INTO` on a read
    /// snapshot, taken beside the writer without stopping it). Not for PostgreSQL.
    pub async fn copy_to(&self, to: &std::path::Path) -> Result<()> {
        let Engine::Sqlite(s) = &self.engine else {
            return Err(crate::error::Error::internal("a PostgreSQL database is copied with its own tools"));
        };
        let to = to.to_str().ok_or_else(|| crate::error::Error::internal("the backup path is not UTF-8"))?.to_string();
        s.readers.with(move |conn| conn.run("VACUUM INTO $1", &[Arg::from(to)], None).map(|_| ())).await
    }

    /// The newest migration applied (0 on an empty database).
    pub async fn schema_version(&self) -> Result<i64> {
        let newest: Option<i64> =
            sql::query_scalar("SELECT MAX(version) FROM schema_migrations").fetch_one(self.read_pool()).await?;
        Ok(newest.unwrap_or(0))
    }

    /// Read connections open, and of those idle (the pool's on PostgreSQL, the readers' on
    /// SQLite).
    pub fn connections(&self) -> (usize, usize) {
        match &self.engine {
            Engine::Sqlite(s) => s.readers.connections(),
            Engine::Postgres(pool) => pool.connections(),
        }
    }

    pub async fn close(&self) {
        if let Engine::Postgres(pool) = &self.engine {
            pool.close();
        }
    }
}

/// Reads a column, turning a decode problem into an internal error with the column's name.
pub(crate) fn col<T: sql::FromValue>(row: &sql::Row, name: &str) -> Result<T> {
    row.try_get(name)
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::sandbox_url;

    #[test]
    fn sandbox_file_sits_beside_the_database() {
        assert_eq!(
            sandbox_url("sqlite://data/kassa.db?mode=rwc"),
            Some(("sqlite://data/kassa-sandbox.db?mode=rwc".to_string(), "data/kassa.db".to_string()))
        );
        assert_eq!(
            sandbox_url("sqlite:///var/lib/kassa/shop"),
            Some(("sqlite:///var/lib/kassa/shop-sandbox".to_string(), "/var/lib/kassa/shop".to_string()))
        );
        assert_eq!(sandbox_url("sqlite:shop.db"), Some(("sqlite:shop-sandbox.db".to_string(), "shop.db".to_string())));
        assert_eq!(sandbox_url("sqlite::memory:"), None);
        assert_eq!(sandbox_url("sqlite://x.db?mode=memory"), None);
        assert_eq!(sandbox_url("postgres://postgres@127.0.0.1/test"), None);
    }
}

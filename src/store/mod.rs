//! The store: one database handle for SQLite and PostgreSQL, migrations, and the commands that each
//! run in one transaction. Per-database differences live here and nowhere else:
//! `BEGIN IMMEDIATE` versus `SELECT … FOR UPDATE`, the pool shape, and the migration folder.

pub mod admin;
pub mod batch;
pub mod catalog;
pub mod check;
pub mod checkout;
pub mod conn;
pub mod events;
pub mod expiry;
pub mod fulfilment;
pub mod group;
pub mod held;
pub mod lines;
mod migrate;
pub mod native;
pub mod orders;
pub mod outbox;
pub mod payments;
pub mod prepared;
pub mod reconcile;
pub mod refunds;
pub mod retention;
pub mod settings;
pub mod views;
pub mod writer;

use std::time::Duration;

use anyhow::Context as _;
use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{Any, AnyPool, Executor as _};

use crate::error::{Error, Result};

pub use conn::{Conn, NativeTx, Tx};

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
            // SQLite: group commit (see `store::group`); one writer, so nothing to retry.
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
                            let mut recoveries: u32 = 0;
                            let outcome = loop {
                                let outcome: $crate::error::Result<_> = {
                                    let $tx = &mut owned;
                                    async { $body }.await
                                };
                                match outcome {
                                    // The connection lacked a prepared batch statement: it has
                                    // been given them all and a new transaction opened on it
                                    // (`store::prepared::recover_in_transaction`); run again there.
                                    Err(e) if e.is_unprepared() => {
                                        recoveries += 1;
                                        if recoveries >= $crate::store::prepared::RECOVERIES_MAX {
                                            $crate::store::prepared::give_up();
                                        }
                                        if recoveries > $crate::store::prepared::RECOVERIES_MAX {
                                            break Err(e);
                                        }
                                    }
                                    other => break other,
                                }
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
/// SQLite: how long a connection waits for another process's write lock before giving up.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 5_000;
/// SQLite: concurrent readers (the writer is a pool of one, see [`Db::connect`]).
const SQLITE_READERS_MAX: u32 = 4;
/// A PostgreSQL connection idle this long is pinged before it is used again.
const PG_PING_IDLE: Duration = Duration::from_secs(1);

/// How SQLite's write commands reach the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteWriter {
    /// Group commit on the native writer ([`native`]): the default.
    Native,
    /// Group commit on sqlx's write connection (`KASSA_SQLITE_NATIVE=0`, for benchmarking).
    Sqlx,
    /// One transaction and one durable commit per command, on sqlx's write connection
    /// (`KASSA_SQLITE_GROUP_COMMIT=0`, for benchmarking group commit's effect).
    Single,
}

impl SqliteWriter {
    pub fn from_env() -> SqliteWriter {
        let off = |name: &str| std::env::var(name).is_ok_and(|v| v == "0");
        if off("KASSA_SQLITE_GROUP_COMMIT") {
            SqliteWriter::Single
        } else if off("KASSA_SQLITE_NATIVE") {
            SqliteWriter::Sqlx
        } else {
            SqliteWriter::Native
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone)]
pub struct Db {
    kind: DbKind,
    /// Writes. For SQLite a single connection: SQLite has one writer anyway, and queueing in the
    /// pool is fair and cheap where SQLite's busy handler would sleep and poll.
    write: AnyPool,
    /// Reads and `kassa check`. The same pool as `write` on PostgreSQL.
    read: AnyPool,
    /// SQLite: the group-commit writer over `write`.
    group: Option<std::sync::Arc<group::GroupCommit>>,
    /// SQLite: the thread that runs the hot write commands ([`Db::on_writer`]).
    writer: Option<writer::WriterThread>,
    /// Buyer sessions already read ([`catalog::session_by_token`]).
    sessions: std::sync::Arc<catalog::SessionCache>,
    /// PostgreSQL: connections kept between commands ([`held`]).
    held: Option<std::sync::Arc<held::HeldConns>>,
}

/// Turns the configured URL into one sqlx can open, creating the SQLite file when missing.
pub fn normalize_url(url: &str) -> anyhow::Result<(DbKind, String)> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return Ok((DbKind::Postgres, url.to_string()));
    }
    let Some(rest) = url.strip_prefix("sqlite:") else {
        anyhow::bail!("unsupported database URL scheme (use sqlite:// or postgres://)");
    };
    let path = rest.trim_start_matches("//");
    let path = path.split('?').next().unwrap_or_default();
    if let Some(parent) = std::path::Path::new(path).parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent).with_context(|| format!("creating database directory {}", parent.display()))?;
    }
    let url = if url.contains("mode=") {
        url.to_string()
    } else if url.contains('?') {
        format!("{url}&mode=rwc")
    } else {
        format!("{url}?mode=rwc")
    };
    Ok((DbKind::Sqlite, url))
}

/// The file of a SQLite URL; `None` for an in-memory database (which only sqlx's own connections
/// can share).
fn sqlite_file(url: &str) -> Option<String> {
    sqlite_file_parts(url).map(|(_, path, _)| path.to_string())
}

/// A SQLite file URL's parts: the slashes after `sqlite:`, the file's path, the query (without
/// `?`); `None` for PostgreSQL and for an in-memory database.
fn sqlite_file_parts(url: &str) -> Option<(&str, &str, &str)> {
    let rest = url.strip_prefix("sqlite:")?;
    let slashes = if rest.starts_with("//") { "//" } else { "" };
    let (path, query) = rest[slashes.len()..].split_once('?').unwrap_or((&rest[slashes.len()..], ""));
    (!path.is_empty() && !path.contains(":memory:") && !query.contains("mode=memory")).then_some((slashes, path, query))
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
    /// Opens the database. `max_connections` bounds the PostgreSQL pool.
    pub async fn connect(url: &str, max_connections: u32) -> anyhow::Result<Db> {
        Db::connect_with(url, max_connections, SqliteWriter::from_env()).await
    }

    /// [`Db::connect`] with SQLite's writer chosen (tests reach every kind; ignored for PostgreSQL).
    pub async fn connect_with(url: &str, max_connections: u32, sqlite_writer: SqliteWriter) -> anyhow::Result<Db> {
        Db::open(url, max_connections, sqlite_writer, writer::Role::Kassa).await
    }

    /// `role`: whose writes SQLite's writer thread runs ([`writer::Role`]).
    async fn open(
        url: &str,
        max_connections: u32,
        sqlite_writer: SqliteWriter,
        role: writer::Role,
    ) -> anyhow::Result<Db> {
        install_default_drivers();
        let (kind, url) = normalize_url(url)?;
        match kind {
            DbKind::Sqlite => {
                let writer = writer::WriterThread::start(role)?;
                // Opened from the writer thread, so the driver's thread for this connection shares
                // its CPU (see `store::writer`); kept open for good, so it is never re-opened
                // elsewhere.
                let write = {
                    let url = url.clone();
                    writer.run(async move { sqlite_pool(&url, 1, true).await }).await??
                };
                let read = sqlite_pool(&url, SQLITE_READERS_MAX, false).await?;
                let group = match (sqlite_writer, sqlite_file(&url)) {
                    (SqliteWriter::Single, _) => None,
                    (SqliteWriter::Native, Some(path)) => Some(group::GroupCommit::native(
                        native::NativeConn::open(&path, SQLITE_BUSY_TIMEOUT_MS)
                            .with_context(|| format!("opening SQLite database {path} for writing"))?,
                    )),
                    // An in-memory database is shared only by sqlx's own connections.
                    (SqliteWriter::Native | SqliteWriter::Sqlx, _) => Some(group::GroupCommit::new(write.clone())),
                }
                .map(std::sync::Arc::new);
                Ok(Db { kind, write, read, group, writer: Some(writer), sessions: Default::default(), held: None })
            }
            DbKind::Postgres => {
                let max_connections = max_connections.max(2);
                let pool = AnyPoolOptions::new()
                    .max_connections(max_connections)
                    .acquire_timeout(Duration::from_secs(30))
                    .after_connect(|conn, _meta| Box::pin(prepared::on_connect(conn)))
                    // sqlx pings every connection it hands out, a round trip per acquire (several
                    // per purchase); only one idle for a while can have been dropped by the server.
                    .test_before_acquire(false)
                    .before_acquire(|conn, meta| {
                        Box::pin(async move {
                            if meta.idle_for >= PG_PING_IDLE {
                                sqlx::Connection::ping(conn).await?;
                            }
                            Ok(true)
                        })
                    })
                    .connect(&url)
                    .await
                    .context("connecting to PostgreSQL")?;
                Ok(Db {
                    kind,
                    held: Some(held::HeldConns::new(pool.clone(), max_connections, PG_PING_IDLE)),
                    write: pool.clone(),
                    read: pool,
                    group: None,
                    writer: None,
                    sessions: Default::default(),
                })
            }
        }
    }

    /// Runs a write command on SQLite's writer thread ([`writer`]); elsewhere, here.
    pub async fn on_writer<F>(&self, command: F) -> Result<F::Output>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.writer {
            Some(w) => w.run(command).await,
            None => Ok(command.await),
        }
    }

    pub(crate) fn sessions(&self) -> &catalog::SessionCache {
        &self.sessions
    }

    /// The group-commit writer (SQLite only).
    pub fn group(&self) -> Option<&group::GroupCommit> {
        self.group.as_deref()
    }

    pub fn kind(&self) -> DbKind {
        self.kind
    }

    pub fn read_pool(&self) -> &AnyPool {
        &self.read
    }

    /// The rows of one read: on PostgreSQL on a held connection ([`held`]: no round trip to hand
    /// it back), else from the read pool.
    pub async fn fetch_all<'q, E>(&self, query: E) -> Result<Vec<sqlx::any::AnyRow>>
    where
        E: 'q + sqlx::Execute<'q, Any>,
    {
        match &self.held {
            Some(held) => held.with(async |conn| Ok(conn.fetch_all(query).await?)).await,
            None => Ok(self.read.fetch_all(query).await?),
        }
    }

    /// The row of one read, if any ([`Db::fetch_all`]).
    pub async fn fetch_optional<'q, E>(&self, query: E) -> Result<Option<sqlx::any::AnyRow>>
    where
        E: 'q + sqlx::Execute<'q, Any>,
    {
        match &self.held {
            Some(held) => held.with(async |conn| Ok(conn.fetch_optional(query).await?)).await,
            None => Ok(self.read.fetch_optional(query).await?),
        }
    }

    /// Row-lock suffix for reading a row the transaction will change. SQLite needs none: its write
    /// transaction (`BEGIN IMMEDIATE`) already excludes every other writer.
    pub fn for_update(&self) -> &'static str {
        match self.kind {
            DbKind::Sqlite => "",
            DbKind::Postgres => " FOR UPDATE",
        }
    }

    /// [`Db::for_update`] for a join: locks the rows of `alias` only.
    pub fn for_update_of(&self, alias: &str) -> String {
        match self.kind {
            DbKind::Sqlite => String::new(),
            DbKind::Postgres => format!(" FOR UPDATE OF {alias}"),
        }
    }

    /// Suffix of a sub-select that claims queue rows: PostgreSQL skips rows another instance has
    /// locked; SQLite has one writer, so there is nothing to skip.
    pub fn skip_locked(&self) -> &'static str {
        match self.kind {
            DbKind::Sqlite => "",
            DbKind::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// Starts a write transaction.
    pub async fn begin(&self) -> Result<Tx<'static>> {
        let tx = match self.kind {
            DbKind::Sqlite => self.write.begin_with("BEGIN IMMEDIATE").await?,
            DbKind::Postgres => match &self.held {
                Some(held) => return Ok(held::PgTx::begin(held).await?.into()),
                None => self.write.begin().await?,
            },
        };
        Ok(tx.into())
    }

    /// One write statement, durably: on PostgreSQL on its own (autocommit: one round trip instead
    /// of three with BEGIN and COMMIT, and one statement is atomic anyway), on SQLite as a write
    /// command of the group commit. `build` makes the statement (again, should PostgreSQL ask for
    /// a retry). Returns the number of rows it changed.
    pub async fn write_one<'q, F>(&self, build: F) -> Result<u64>
    where
        F: Fn() -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    {
        if self.group.is_some() {
            return crate::write_tx!(self, |tx| { Ok(build().execute(&mut **tx).await?.rows_affected()) });
        }
        retrying(|| async {
            match &self.held {
                Some(held) => held.with(async |conn| Ok(build().execute(conn).await?.rows_affected())).await,
                None => Ok(build().execute(&self.write).await?.rows_affected()),
            }
        })
        .await
    }

    /// PostgreSQL: `run` as one script outside any transaction, on a held connection: one round
    /// trip and one implicit transaction, all of it or none ([`batch::script_outputs`]). What each
    /// statement gave, in order. `None` on SQLite.
    pub async fn pg_script(&self, run: Vec<(&str, Vec<batch::Arg>)>) -> Result<Option<Vec<batch::Output>>> {
        let Some(held) = self.held.as_ref() else { return Ok(None) };
        retrying(|| held.with(async |conn| Ok(Some(batch::script_outputs(conn, run.clone()).await?)))).await
    }

    /// Starts a read-only transaction on a consistent snapshot (safe while kassa serves).
    pub async fn snapshot(&self) -> Result<Tx<'static>> {
        let tx = match self.kind {
            DbKind::Sqlite => self.read.begin().await?,
            DbKind::Postgres => self.read.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").await?,
        };
        Ok(tx.into())
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

    pub async fn close(&self) {
        if let Some(held) = &self.held {
            held.release_all();
        }
        self.write.close().await;
        self.read.close().await;
    }
}

async fn sqlite_pool(url: &str, max: u32, for_good: bool) -> anyhow::Result<AnyPool> {
    let options = AnyPoolOptions::new();
    let options = if for_good { options.min_connections(max).idle_timeout(None).max_lifetime(None) } else { options };
    options
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(30))
        // A connection to a file does not drop: no ping (a round trip to its driver thread) each
        // time one is handed out.
        .test_before_acquire(false)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                // WAL lets readers run beside the writer; synchronous=FULL makes every
                // acknowledged commit survive a power loss (durability is not traded for speed).
                // Temporary storage (a savepoint's sub-journal) in memory: see `native::open`.
                conn.execute(
                    format!(
                        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY; PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS};"
                    )
                    .as_str(),
                )
                .await?;
                Ok(())
            })
        })
        .connect(url)
        .await
        .context("opening SQLite database")
}

/// Reads a column, turning a decode problem into an internal error with the column's name.
pub(crate) fn col<T>(row: &sqlx::any::AnyRow, name: &str) -> Result<T>
where
    T: for<'r> sqlx::Decode<'r, Any> + sqlx::Type<Any>,
{
    use sqlx::Row as _;
    row.try_get::<T, _>(name).map_err(Error::from)
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

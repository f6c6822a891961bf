//! SQLite through rusqlite, called in place. A driver that runs each connection on a thread of its
//! own pays a hand-off to that thread and back for every statement; on the single writer those
//! hand-offs, not SQLite, set the pace (BENCHMARKS.md). The writer ([`NativeConn`]) is called
//! directly by whoever holds the writer's turn — on SQLite's writer thread for the hot commands —
//! so a command's statements run back to back. The readers ([`Readers`]) run each statement on a
//! blocking thread, off the async workers.
//!
//! Every connection is opened the same way: WAL, `synchronous=FULL` (an acknowledged commit
//! survives a power loss), foreign keys on, a busy timeout, and temporary storage in memory.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use crate::error::{DbError, Error, Result};
use crate::store::sql::{Arg, Output, Row, Value};

/// Statements kept prepared per connection: every distinct statement the store writes, with room
/// to spare.
const STATEMENT_CACHE: usize = 512;
/// How long a connection waits for another process's write lock before giving up.
pub const BUSY_TIMEOUT_MS: u32 = 5_000;

/// What one statement's text needs worked out once, not on every run: which argument each of its
/// parameters takes (`$N` → index N−1) and its columns' names.
struct Shape {
    arguments: Vec<usize>,
    names: Arc<[String]>,
}

impl Shape {
    fn of(stmt: &rusqlite::Statement<'_>, sql: &str) -> Result<Shape> {
        let arguments = (1..=stmt.parameter_count())
            .map(|i| {
                stmt.parameter_name(i)
                    .and_then(|name| name.strip_prefix('$'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| *n >= 1)
                    .map(|n| n - 1)
                    .ok_or_else(|| Error::internal(format!("parameter {i} is not $N in: {sql}")))
            })
            .collect::<Result<Vec<_>>>()?;
        let names = stmt.column_names().into_iter().map(str::to_string).collect();
        Ok(Shape { arguments, names })
    }
}

/// One SQLite connection, run where it is called.
pub struct NativeConn {
    conn: Connection,
    shapes: HashMap<String, Arc<Shape>>,
}

impl std::fmt::Debug for NativeConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NativeConn")
    }
}

/// SQLite's primary result codes of a database file that is not there for now: SQLITE_IOERR,
/// SQLITE_FULL, SQLITE_CANTOPEN.
const SQLITE_UNAVAILABLE: [i32; 3] = [10, 13, 14];

impl From<rusqlite::Error> for DbError {
    /// The extended result code as the error's code, so callers classify it (busy, constraint).
    fn from(e: rusqlite::Error) -> Self {
        match &e {
            // The database file cannot be opened, read or written (gone, unmounted, a disk
            // error, the disk full): the database is not there for now, as a PostgreSQL server
            // that does not answer.
            rusqlite::Error::SqliteFailure(f, _) if SQLITE_UNAVAILABLE.contains(&(f.extended_code & 0xff)) => {
                DbError::unreachable(e.to_string())
            }
            rusqlite::Error::SqliteFailure(f, _) => DbError::new(Some(f.extended_code.to_string()), e.to_string()),
            _ => DbError::new(None, e.to_string()),
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Db(e.into())
    }
}

/// An argument as SQLite takes it.
fn to_sql(v: &Arg) -> ToSqlOutput<'_> {
    use rusqlite::types::Value as V;
    match v {
        Arg::Text(Some(t)) => ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes())),
        Arg::Int(Some(i)) => ToSqlOutput::Owned(V::Integer(*i)),
        Arg::Bytes(Some(b)) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        Arg::Bool(Some(b)) => ToSqlOutput::Owned(V::Integer(i64::from(*b))),
        Arg::Text(None) | Arg::Int(None) | Arg::Bytes(None) | Arg::Bool(None) => ToSqlOutput::Owned(V::Null),
    }
}

fn value(v: ValueRef<'_>) -> Result<Value> {
    Ok(match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => Value::Int(i),
        ValueRef::Real(r) => Value::Real(r),
        ValueRef::Text(t) => Value::Text(
            std::str::from_utf8(t).map_err(|e| Error::internal(format!("text not UTF-8: {e}")))?.to_string(),
        ),
        ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
    })
}

/// Where a SQLite URL's database lives, as rusqlite opens it: a file's path, or a named in-memory
/// database shared by every connection of this process that opens the same name.
#[derive(Debug, Clone)]
pub struct Location {
    target: String,
    uri: bool,
}

impl Location {
    /// `sqlite://path?…`, `sqlite:path`, or an in-memory `sqlite::memory:` / `?mode=memory`.
    pub fn of(url: &str) -> Location {
        let rest = url.strip_prefix("sqlite:").unwrap_or(url).trim_start_matches("//");
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if path.is_empty() || path.contains(":memory:") || query.contains("mode=memory") {
            // One private name per URL opened: every connection of this Db sees the same data.
            let name = format!("file:kassa-{}?mode=memory&cache=shared", uuid::Uuid::now_v7().simple());
            return Location { target: name, uri: true };
        }
        Location { target: path.to_string(), uri: false }
    }

    /// The file's path; `None` for an in-memory database.
    pub fn file(&self) -> Option<&str> {
        (!self.uri).then_some(self.target.as_str())
    }
}

impl NativeConn {
    /// Opens a connection to `at`, creating the file when missing.
    pub fn open(at: &Location) -> Result<NativeConn> {
        let mut flags =
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        if at.uri {
            flags |= OpenFlags::SQLITE_OPEN_URI;
        }
        let conn = Connection::open_with_flags(&at.target, flags)?;
        conn.busy_timeout(Duration::from_millis(u64::from(BUSY_TIMEOUT_MS)))?;
        if !at.uri {
            // Readable by kassa's user only, whatever the umask, before WAL mode creates the
            // companions (which take the database file's mode).
            crate::store::files::private_sqlite_files(std::path::Path::new(&at.target))
                .map_err(|e| Error::internal(format!("making {} private: {e}", at.target)))?;
            let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(Error::internal(format!("SQLite refused WAL mode (got {mode})")));
            }
        }
        // Every group-commit member runs in a savepoint, whose sub-journal holds the first change
        // of each page it touches; it only ever serves a rollback to the savepoint, so it needs
        // no durability (the WAL carries every commit) and stays in memory however large
        // (`temp_store=MEMORY`). Kept only up to SQLITE_STMTJRNL_SPILL, it would move to a
        // temporary file in one write, which SQLite's unix VFS cuts at 0x1ffff bytes: a command
        // that changed more than 63 pages (a confirm or payment of a large basket over a large
        // catalogue) would fail with "database or disk is full".
        conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;")?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(NativeConn { conn, shapes: HashMap::new() })
    }

    /// Opens a reader's connection to `at`. A reader never writes, so it has no savepoint
    /// journals to keep in memory: its temporary b-trees and sorts (a `GROUP BY` over a whole
    /// table in `kassa check --full`, say) stay in the page cache up to its size and spill to a
    /// temporary file past it (`temp_store=FILE`), instead of growing with the table in memory.
    pub fn open_reader(at: &Location) -> Result<NativeConn> {
        let mut conn = NativeConn::open(at)?;
        conn.exec("PRAGMA temp_store=FILE;")?;
        Ok(conn)
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// Runs one statement with `$N` parameters from `args`; with `limit`, keeps at most that many
    /// rows.
    pub fn run(&mut self, sql: &str, args: &[Arg], limit: Option<usize>) -> Result<Output> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let shape = match self.shapes.get(sql) {
            Some(shape) => Arc::clone(shape),
            None => {
                let shape = Arc::new(Shape::of(&stmt, sql)?);
                if self.shapes.len() >= STATEMENT_CACHE {
                    // Bounded like the statement cache; rebuilt on the next use.
                    self.shapes.clear();
                }
                self.shapes.insert(sql.to_string(), Arc::clone(&shape));
                shape
            }
        };
        for (i, &n) in shape.arguments.iter().enumerate() {
            let arg = args.get(n).ok_or_else(|| Error::internal(format!("no argument for ${} in: {sql}", n + 1)))?;
            stmt.raw_bind_parameter(i + 1, to_sql(arg))?;
        }
        let readonly = stmt.readonly();
        let mut out = Output::default();
        {
            let mut rows = stmt.raw_query();
            while limit.is_none_or(|l| out.rows.len() < l) {
                let Some(row) = rows.next()? else { break };
                let values = (0..shape.names.len()).map(|i| value(row.get_ref(i)?)).collect::<Result<Vec<_>>>()?;
                out.rows.push(Row::new(Arc::clone(&shape.names), values));
            }
        }
        out.changed = if readonly { 0 } else { self.conn.changes() };
        Ok(out)
    }

    /// Runs statements without arguments or results (`BEGIN`, `COMMIT`, a migration).
    pub fn exec(&mut self, sql: &str) -> Result<()> {
        Ok(self.conn.execute_batch(sql)?)
    }
}

/// SQLite's readers: up to a bound of connections, opened when first needed, each statement run on
/// a blocking thread.
#[derive(Debug)]
pub struct Readers {
    at: Location,
    max: usize,
    idle: Mutex<Vec<NativeConn>>,
    permits: Semaphore,
}

impl Readers {
    pub fn new(at: Location, max: usize) -> Readers {
        Readers { at, max, idle: Mutex::new(Vec::with_capacity(max)), permits: Semaphore::new(max) }
    }

    /// Readers at work and idle, an upper bound of those open (idle ones closed by a failure are
    /// not tracked).
    pub fn connections(&self) -> (usize, usize) {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).len();
        let busy = self.max.saturating_sub(self.permits.available_permits());
        (idle + busy, idle)
    }

    /// An idle connection, or a new one; the caller holds a permit.
    fn take(&self) -> Option<NativeConn> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop()
    }

    fn put(&self, conn: NativeConn) {
        // A connection handed back inside a transaction (a snapshot dropped midway) is closed.
        if !conn.in_transaction() {
            self.idle.lock().unwrap_or_else(PoisonError::into_inner).push(conn);
        }
    }

    /// Runs `work` on a reader's connection on a blocking thread.
    pub async fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut NativeConn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let _permit = self.permits.acquire().await.map_err(|_| Error::internal("readers closed"))?;
        let idle = self.take();
        let at = self.at.clone();
        let (conn, out) = tokio::task::spawn_blocking(move || {
            let mut conn = match idle {
                Some(conn) => conn,
                None => NativeConn::open_reader(&at)?,
            };
            let out = work(&mut conn);
            Ok::<_, Error>((conn, out))
        })
        .await
        .map_err(|e| Error::internal(format!("reader thread: {e}")))??;
        self.put(conn);
        out
    }

    /// Runs one statement.
    pub async fn run(&self, sql: &str, args: Vec<Arg>, limit: Option<usize>) -> Result<Output> {
        let sql = sql.to_string();
        self.with(move |conn| conn.run(&sql, &args, limit)).await
    }

    /// A connection of its own for a read transaction ([`ReadTx`]).
    pub async fn begin(self: &Arc<Self>) -> Result<ReadTx> {
        let permit = Arc::clone(self).acquire_owned().await?;
        let conn = match self.take() {
            Some(conn) => conn,
            None => NativeConn::open_reader(&self.at)?,
        };
        let mut tx = ReadTx { conn: Some(conn), home: Arc::clone(self), _permit: permit };
        tx.conn()?.exec("BEGIN")?;
        Ok(tx)
    }

    async fn acquire_owned(self: Arc<Self>) -> Result<ReadPermit> {
        let permit = self.permits.acquire().await.map_err(|_| Error::internal("readers closed"))?;
        permit.forget();
        Ok(ReadPermit(self))
    }
}

/// A reader's place, given back when dropped.
#[derive(Debug)]
struct ReadPermit(Arc<Readers>);

impl Drop for ReadPermit {
    fn drop(&mut self) {
        self.0.permits.add_permits(1);
    }
}

/// A read transaction on a reader of its own: one snapshot for all its statements (`kassa check`).
/// Its statements run where it is used (a short command's reads).
#[derive(Debug)]
pub struct ReadTx {
    conn: Option<NativeConn>,
    home: Arc<Readers>,
    _permit: ReadPermit,
}

impl ReadTx {
    pub fn conn(&mut self) -> Result<&mut NativeConn> {
        self.conn.as_mut().ok_or_else(|| Error::internal("read transaction ended"))
    }

    /// Ends the transaction and hands the connection back.
    pub fn end(mut self) -> Result<()> {
        if let Some(mut conn) = self.conn.take() {
            conn.exec("COMMIT")?;
            self.home.put(conn);
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::useless_vec)]
mod tests {
    use super::{Location, NativeConn};
    use crate::args;

    fn open(dir: &tempfile::TempDir, name: &str) -> NativeConn {
        NativeConn::open(&Location::of(&format!("sqlite://{}", dir.path().join(name).display()))).unwrap()
    }

    /// A command whose savepoint changes hundreds of pages (some 1.6 MB of sub-journal) runs,
    /// and a rollback to its savepoint restores every page.
    #[test]
    fn a_savepoint_of_hundreds_of_pages_runs_and_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = open(&dir, "big.db");
        c.exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)").unwrap();
        c.exec(
            "INSERT INTO t (k, v) WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400) \
             SELECT i, randomblob(3000) FROM n",
        )
        .unwrap();
        let digest = |c: &mut NativeConn| -> String {
            c.run("SELECT group_concat(hex(substr(v, 1, 4)), '') FROM t", &[], None).unwrap().rows[0].get(0)
        };
        let before = digest(&mut c);
        for undo in [true, false] {
            c.exec("BEGIN IMMEDIATE").unwrap();
            c.exec("SAVEPOINT kassa_m").unwrap();
            // 400 rows of 3 KB, one to a page: every page of the table changes.
            c.exec("UPDATE t SET v = randomblob(3000)").unwrap();
            if undo {
                c.exec("ROLLBACK TO SAVEPOINT kassa_m").unwrap();
            }
            c.exec("RELEASE SAVEPOINT kassa_m").unwrap();
            c.exec("COMMIT").unwrap();
            assert_eq!(digest(&mut c) == before, undo, "rolled back: {undo}");
        }
    }

    /// Rows read by name and type; each statement reports the rows it changed; parameters bind by
    /// number in any order; constraint errors carry SQLite's extended code.
    #[test]
    fn runs_statements_with_bound_parameters() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = open(&dir, "n.db");
        // Durable: WAL with synchronous=FULL (2), foreign keys on; savepoint journals in memory
        // (temp_store 2).
        for (pragma, want) in [("synchronous", 2), ("foreign_keys", 1), ("temp_store", 2)] {
            let got: i64 = c.run(&format!("PRAGMA {pragma}"), &[], None).unwrap().rows[0].get(0);
            assert_eq!(got, want, "{pragma}");
        }
        let mode: String = c.run("PRAGMA journal_mode", &[], None).unwrap().rows[0].get(0);
        assert_eq!(mode, "wal");
        // SQLite as `.cargo/config.toml` builds it: no memory-statistics mutex.
        let options: Vec<String> =
            c.run("PRAGMA compile_options", &[], None).unwrap().rows.iter().map(|r| r.get(0)).collect();
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "SQLite built with its memory statistics: {options:?}"
        );
        // Never a spill threshold past what SQLite writes to a file in one call.
        let spill = options.iter().find_map(|o| o.strip_prefix("STMTJRNL_SPILL=")).map(|v| v.parse::<i64>().unwrap());
        assert!(spill.is_none_or(|v| v <= 0x1ffff), "STMTJRNL_SPILL={spill:?}");
        c.exec("CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT NOT NULL, note TEXT)").unwrap();
        assert_eq!(c.run("INSERT INTO t (k, n, note) VALUES ($1, $2, NULL)", &args!["a", 7], None).unwrap().changed, 1);
        let note: Option<&str> = Some("x;y");
        assert_eq!(
            c.run("INSERT INTO t (k, n, note) VALUES ($2, $1, $3)", &args![-3, "b", note], None).unwrap().changed,
            1
        );
        assert_eq!(c.run("UPDATE t SET n = n + 1 WHERE k = $1", &args!["a"], None).unwrap().changed, 1);
        let rows = c
            .run("SELECT k, n, note, CAST(COUNT(*) OVER () AS BIGINT) AS total FROM t ORDER BY k", &[], None)
            .unwrap()
            .rows;
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].get::<String>("k"), "a");
        assert_eq!(rows[0].get::<i64>("n"), 8);
        assert_eq!(rows[0].get::<Option<String>>("note"), None);
        assert_eq!(rows[1].get::<i64>("n"), -3);
        assert_eq!(rows[1].get::<Option<String>>("note").as_deref(), Some("x;y"));
        assert_eq!(rows[1].get::<i64>("total"), 2);
        assert_eq!(c.run("SELECT k FROM t ORDER BY k", &[], Some(1)).unwrap().rows.len(), 1);

        let Err(crate::error::Error::Db(e)) = c.run("INSERT INTO t (k, n) VALUES ($1, 1)", &args!["a"], None) else {
            panic!("a second row with the same key")
        };
        assert_eq!(e.code(), Some("1555"));
        let Err(e) = c.run("INSERT INTO t (k, n) VALUES ($1, $2)", &args!["z"], None) else {
            panic!("a missing argument")
        };
        assert!(e.to_string().contains("no argument for $2"), "{e}");
    }

    /// A reader's temporary b-trees and sorts spill to a file past its page cache; the writer's
    /// savepoint journals stay in memory.
    #[test]
    fn readers_spill_their_sorts_and_the_writer_keeps_its_journals_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let at = Location::of(&format!("sqlite://{}", dir.path().join("t.db").display()));
        let mut reader = NativeConn::open_reader(&at).unwrap();
        let mut writer = NativeConn::open(&at).unwrap();
        for (conn, want) in [(&mut reader, 1), (&mut writer, 2)] {
            let got: i64 = conn.run("PRAGMA temp_store", &[], None).unwrap().rows[0].get(0);
            assert_eq!(got, want);
        }
        // A sort bigger than the reader's page cache still answers.
        writer.exec("CREATE TABLE t (k BIGINT, pad TEXT)").unwrap();
        writer
            .exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 40000) INSERT INTO t SELECT i % 7919, printf('%0200d', i) FROM n")
            .unwrap();
        let out = reader.run("SELECT k, COUNT(*), MAX(pad) FROM t GROUP BY k ORDER BY k", &[], None).unwrap();
        assert_eq!(out.rows.len(), 7919);
    }

    /// An in-memory URL is one database for every connection that opens the same location.
    #[test]
    fn an_in_memory_location_is_shared_by_its_connections() {
        let at = Location::of("sqlite::memory:");
        assert_eq!(at.file(), None);
        let mut a = NativeConn::open(&at).unwrap();
        let mut b = NativeConn::open(&at).unwrap();
        a.exec("CREATE TABLE t (k BIGINT)").unwrap();
        a.run("INSERT INTO t (k) VALUES ($1)", &args![5], None).unwrap();
        let k: i64 = b.run("SELECT k FROM t", &[], None).unwrap().rows[0].get(0);
        assert_eq!(k, 5);
        assert_eq!(Location::of("sqlite://data/kassa.db?mode=rwc").file(), Some("data/kassa.db"));
    }
}

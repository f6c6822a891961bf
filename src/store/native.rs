//! SQLite's write connection, run in place. sqlx's SQLite driver runs every connection on a thread
//! of its own, and each statement is a hand-off to that thread and back; on the single writer those
//! hand-offs, not SQLite, set the pace (BENCHMARKS.md: more than half of the driver thread's time
//! went to switching threads). This connection is the same libsqlite3 called directly by whoever
//! holds the writer's turn — on SQLite's writer thread for the hot commands — so a command's
//! statements run back to back with no hand-off at all.
//!
//! It speaks sqlx's `Any` types (arguments in, rows and results out, `$N` parameters) so the
//! store's commands run on it unchanged; see [`super::Conn`]. Values map as sqlx's SQLite driver
//! maps them: by the stored value's type (integer → `BIGINT`, real → `DOUBLE`, text, blob, null).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Connection, OpenFlags};
use sqlx::Either;
use sqlx::any::{AnyArguments, AnyQueryResult, AnyRow, AnyTypeInfo, AnyTypeInfoKind, AnyValue};
use sqlx::error::{DatabaseError, ErrorKind};
use sqlx_core::any::{AnyColumn, AnyValueKind};
use sqlx_core::ext::ustr::UStr;

/// Statements kept prepared: every distinct statement the store writes, with room to spare.
const STATEMENT_CACHE: usize = 512;

/// The column names and positions of one statement's rows.
struct Shape {
    columns: Vec<AnyColumn>,
    names: Arc<sqlx_core::HashMap<UStr, usize>>,
}

/// One statement of a query: its text and, from its first run on, which argument each of its
/// parameters takes (`$N` → index N−1) and its rows' shape.
struct Piece {
    sql: String,
    bound: std::sync::OnceLock<Bound>,
}

struct Bound {
    arguments: Vec<usize>,
    shape: Shape,
}

/// What a query's text needs working out once, not on every run (its statements, their parameter
/// names, their column names): kept per distinct text, as prepared statements are. A statement's
/// part is worked out when it first runs, after the statements before it (one may create what
/// the next refers to).
struct Plan {
    pieces: Vec<Piece>,
}

impl Bound {
    fn of(stmt: &rusqlite::Statement<'_>, sql: &str) -> Result<Bound, sqlx::Error> {
        let arguments = (1..=stmt.parameter_count())
            .map(|i| {
                stmt.parameter_name(i)
                    .and_then(|name| name.strip_prefix('$'))
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| *n >= 1)
                    .map(|n| n - 1)
                    .ok_or_else(|| sqlx::Error::Protocol(format!("parameter {i} is not $N in: {sql}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let names: Vec<String> = stmt.column_names().into_iter().map(str::to_string).collect();
        let columns = names
            .iter()
            .enumerate()
            .map(|(ordinal, name)| AnyColumn {
                ordinal,
                name: UStr::from(name.clone()),
                type_info: AnyTypeInfo { kind: AnyTypeInfoKind::Null },
            })
            .collect();
        let positions = names.into_iter().enumerate().map(|(i, n)| (UStr::from(n), i)).collect();
        Ok(Bound { arguments, shape: Shape { columns, names: Arc::new(positions) } })
    }
}

pub struct NativeConn {
    conn: Connection,
    plans: sqlx_core::HashMap<String, Arc<Plan>>,
}

impl std::fmt::Debug for NativeConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NativeConn")
    }
}

/// A SQLite error as sqlx reports one: the extended result code as the error's code, so callers
/// classify it the same way (busy, constraint) whichever connection raised it.
#[derive(Debug)]
pub struct NativeDbError {
    message: String,
    code: Option<i32>,
}

impl std::fmt::Display for NativeDbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for NativeDbError {}

impl DatabaseError for NativeDbError {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<Cow<'_, str>> {
        self.code.map(|c| Cow::Owned(c.to_string()))
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> ErrorKind {
        match self.code {
            Some(2067 | 1555) => ErrorKind::UniqueViolation,
            Some(787) => ErrorKind::ForeignKeyViolation,
            Some(1299) => ErrorKind::NotNullViolation,
            Some(275) => ErrorKind::CheckViolation,
            _ => ErrorKind::Other,
        }
    }
}

fn db_error(e: rusqlite::Error) -> sqlx::Error {
    let code = match &e {
        rusqlite::Error::SqliteFailure(f, _) => Some(f.extended_code),
        _ => None,
    };
    sqlx::Error::Database(Box::new(NativeDbError { message: e.to_string(), code }))
}

/// An argument as SQLite takes it (sqlx's SQLite driver maps them the same way).
fn to_sql<'a>(v: &'a AnyValueKind<'_>) -> Result<ToSqlOutput<'a>, sqlx::Error> {
    Ok(match v {
        AnyValueKind::Null(_) => ToSqlOutput::Owned(Value::Null),
        AnyValueKind::Bool(b) => ToSqlOutput::Owned(Value::Integer(i64::from(*b))),
        AnyValueKind::SmallInt(i) => ToSqlOutput::Owned(Value::Integer(i64::from(*i))),
        AnyValueKind::Integer(i) => ToSqlOutput::Owned(Value::Integer(i64::from(*i))),
        AnyValueKind::BigInt(i) => ToSqlOutput::Owned(Value::Integer(*i)),
        AnyValueKind::Real(r) => ToSqlOutput::Owned(Value::Real(f64::from(*r))),
        AnyValueKind::Double(d) => ToSqlOutput::Owned(Value::Real(*d)),
        AnyValueKind::Text(t) => ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes())),
        AnyValueKind::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        other => return Err(sqlx::Error::Protocol(format!("unsupported argument {other:?}"))),
    })
}

fn to_any(v: ValueRef<'_>) -> Result<AnyValueKind<'static>, sqlx::Error> {
    Ok(match v {
        ValueRef::Null => AnyValueKind::Null(AnyTypeInfoKind::Null),
        ValueRef::Integer(i) => AnyValueKind::BigInt(i),
        ValueRef::Real(r) => AnyValueKind::Double(r),
        ValueRef::Text(t) => AnyValueKind::Text(Cow::Owned(
            std::str::from_utf8(t).map_err(|e| sqlx::Error::Decode(Box::new(e)))?.to_string(),
        )),
        ValueRef::Blob(b) => AnyValueKind::Blob(Cow::Owned(b.to_vec())),
    })
}

fn kind_of(v: &AnyValueKind<'_>) -> AnyTypeInfoKind {
    match v {
        AnyValueKind::BigInt(_) => AnyTypeInfoKind::BigInt,
        AnyValueKind::Double(_) => AnyTypeInfoKind::Double,
        AnyValueKind::Text(_) => AnyTypeInfoKind::Text,
        AnyValueKind::Blob(_) => AnyTypeInfoKind::Blob,
        _ => AnyTypeInfoKind::Null,
    }
}

/// Splits SQL into its statements at the semicolons outside quotes (kassa's multi-statement
/// queries: a write batch, `RELEASE …; SAVEPOINT …`).
fn statements(sql: &str) -> impl Iterator<Item = &str> {
    let mut parts = Vec::new();
    let (mut start, mut quote) = (0, None::<char>);
    for (i, c) in sql.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ';') => {
                parts.push(&sql[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&sql[start..]);
    parts.into_iter().map(str::trim).filter(|s| !s.is_empty())
}

impl NativeConn {
    /// Opens the database file as kassa's SQLite pools do: WAL, `synchronous=FULL` (an
    /// acknowledged commit survives a power loss), foreign keys on, and a busy timeout.
    pub fn open(path: &str, busy_timeout_ms: u32) -> anyhow::Result<NativeConn> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(Duration::from_millis(u64::from(busy_timeout_ms)))?;
        let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
        anyhow::ensure!(mode.eq_ignore_ascii_case("wal"), "SQLite refused WAL mode (got {mode})");
        // Every group-commit member runs in a savepoint, whose sub-journal holds the first change
        // of each page it touches; it only ever serves a rollback to the savepoint, so it needs
        // no durability (the WAL carries every commit) and stays in memory however large
        // (`temp_store=MEMORY`, as on the sqlx pools). Kept only up to SQLITE_STMTJRNL_SPILL, it
        // would move to a temporary file in one write, which SQLite's unix VFS cuts at 0x1ffff
        // bytes: a command that changed more than 63 pages (a confirm or payment of a large basket
        // over a large catalogue) would fail with "database or disk is full" (BENCHMARKS.md).
        conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY;")?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        Ok(NativeConn { conn, plans: sqlx_core::HashMap::default() })
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }

    /// The plan of `sql`, kept from its first run.
    fn plan(&mut self, sql: &str) -> Arc<Plan> {
        if let Some(plan) = self.plans.get(sql) {
            return Arc::clone(plan);
        }
        let pieces = statements(sql).map(|one| Piece { sql: one.to_string(), bound: Default::default() }).collect();
        let plan = Arc::new(Plan { pieces });
        if self.plans.len() >= STATEMENT_CACHE {
            // Bounded like the statement cache; rebuilt on the next use.
            self.plans.clear();
        }
        self.plans.insert(sql.to_string(), Arc::clone(&plan));
        plan
    }

    /// Runs `sql` (one statement or several) with `$N` parameters from `arguments`; returns, per
    /// statement, its rows and then its result (rows changed), as sqlx's drivers stream them.
    /// With `limit`, stops after that many rows.
    pub fn run(
        &mut self,
        sql: &str,
        arguments: Option<AnyArguments<'_>>,
        limit: Option<usize>,
    ) -> Result<Vec<Either<AnyQueryResult, AnyRow>>, sqlx::Error> {
        let values = arguments.map(|a| a.values.0).unwrap_or_default();
        let plan = self.plan(sql);
        let mut out = Vec::new();
        let mut rows_seen = 0;
        for piece in &plan.pieces {
            let mut stmt = self.conn.prepare_cached(&piece.sql).map_err(db_error)?;
            let bound = match piece.bound.get() {
                Some(b) => b,
                None => {
                    let b = Bound::of(&stmt, &piece.sql)?;
                    piece.bound.get_or_init(|| b)
                }
            };
            for (i, &n) in bound.arguments.iter().enumerate() {
                let value = values
                    .get(n)
                    .ok_or_else(|| sqlx::Error::Protocol(format!("no argument for ${} in: {}", n + 1, piece.sql)))?;
                stmt.raw_bind_parameter(i + 1, to_sql(value)?).map_err(db_error)?;
            }
            let readonly = stmt.readonly();
            let shape = &bound.shape;
            {
                let mut rows = stmt.raw_query();
                while limit.is_none_or(|l| rows_seen < l) {
                    let Some(row) = rows.next().map_err(db_error)? else { break };
                    let mut values = Vec::with_capacity(shape.columns.len());
                    let mut columns = shape.columns.clone();
                    for (i, column) in columns.iter_mut().enumerate() {
                        let kind = to_any(row.get_ref(i).map_err(db_error)?)?;
                        column.type_info = AnyTypeInfo { kind: kind_of(&kind) };
                        values.push(AnyValue { kind });
                    }
                    out.push(Either::Right(AnyRow { column_names: Arc::clone(&shape.names), columns, values }));
                    rows_seen += 1;
                }
            }
            let rows_affected = if readonly { 0 } else { self.conn.changes() };
            out.push(Either::Left(AnyQueryResult { rows_affected, last_insert_id: None }));
        }
        Ok(out)
    }

    /// Runs statements without arguments or results (`BEGIN`, `COMMIT`, …).
    pub fn exec(&mut self, sql: &str) -> Result<(), sqlx::Error> {
        self.conn.execute_batch(sql).map_err(db_error)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::Row as _;

    use super::{NativeConn, statements};

    fn args(values: Vec<sqlx_core::any::AnyValueKind<'static>>) -> Option<sqlx::any::AnyArguments<'static>> {
        let mut a = sqlx::any::AnyArguments::default();
        a.values.0 = values;
        Some(a)
    }

    /// A command whose savepoint changes hundreds of pages (some 1.6 MB of sub-journal) runs,
    /// and a rollback to its savepoint restores every page.
    #[test]
    fn a_savepoint_of_hundreds_of_pages_runs_and_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = NativeConn::open(dir.path().join("big.db").to_str().unwrap(), 1000).unwrap();
        c.exec("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB NOT NULL)").unwrap();
        c.exec(
            "INSERT INTO t (k, v) WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 400) \
             SELECT i, randomblob(3000) FROM n",
        )
        .unwrap();
        let digest = |c: &mut NativeConn| -> String {
            let rows = c.run("SELECT group_concat(hex(substr(v, 1, 4)), '') FROM t", None, None).unwrap();
            rows.into_iter().find_map(|e| e.right()).unwrap().try_get::<String, _>(0).unwrap()
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

    /// Rows decode through sqlx as the SQLite driver's do; a batch reports each statement's rows
    /// changed; constraint errors carry SQLite's extended code.
    #[test]
    fn runs_statements_as_the_sqlx_driver_does() {
        use sqlx_core::any::AnyValueKind as V;
        let dir = tempfile::tempdir().unwrap();
        let mut c = NativeConn::open(dir.path().join("n.db").to_str().unwrap(), 1000).unwrap();
        // Durable as the sqlx pools are: WAL with synchronous=FULL (2), foreign keys on; savepoint
        // journals in memory (temp_store 2).
        for (pragma, want) in [("synchronous", 2), ("foreign_keys", 1), ("temp_store", 2)] {
            let rows = c.run(&format!("PRAGMA {pragma}"), None, None).unwrap();
            let row = rows.into_iter().find_map(|e| e.right()).unwrap();
            assert_eq!(row.try_get::<i64, _>(0).unwrap(), want, "{pragma}");
        }
        let mode = c.run("PRAGMA journal_mode", None, None).unwrap().into_iter().find_map(|e| e.right()).unwrap();
        assert_eq!(mode.try_get::<String, _>(0).unwrap(), "wal");
        // SQLite as `.cargo/config.toml` builds it: no memory-statistics mutex.
        let options: Vec<String> = c
            .run("PRAGMA compile_options", None, None)
            .unwrap()
            .into_iter()
            .filter_map(|e| e.right())
            .map(|r| r.try_get::<String, _>(0).unwrap())
            .collect();
        assert!(
            options.iter().any(|o| o == "DEFAULT_MEMSTATUS=0"),
            "SQLite built with its memory statistics: {options:?}"
        );
        // Never a spill threshold past what SQLite writes to a file in one call.
        let spill = options.iter().find_map(|o| o.strip_prefix("STMTJRNL_SPILL=")).map(|v| v.parse::<i64>().unwrap());
        assert!(spill.is_none_or(|v| v <= 0x1ffff), "STMTJRNL_SPILL={spill:?}");
        c.exec("CREATE TABLE t (k TEXT PRIMARY KEY, n BIGINT NOT NULL, note TEXT)").unwrap();
        let out = c
            .run(
                "INSERT INTO t (k, n, note) VALUES ($1, $2, NULL); INSERT INTO t (k, n, note) VALUES ($4, $3, $5); \
                 UPDATE t SET n = n + 1 WHERE k = $1",
                args(vec![
                    V::Text("a".into()),
                    V::BigInt(7),
                    V::BigInt(-3),
                    V::Text("b".into()),
                    V::Text("x;y".into()),
                ]),
                None,
            )
            .unwrap();
        let changed: Vec<u64> = out.iter().filter_map(|e| e.as_ref().left().map(|r| r.rows_affected)).collect();
        assert_eq!(changed, [1, 1, 1]);
        let rows: Vec<sqlx::any::AnyRow> = c
            .run("SELECT k, n, note, CAST(COUNT(*) OVER () AS BIGINT) AS total FROM t ORDER BY k", None, None)
            .unwrap()
            .into_iter()
            .filter_map(|e| e.right())
            .collect();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].try_get::<String, _>("k").unwrap(), "a");
        assert_eq!(rows[0].try_get::<i64, _>("n").unwrap(), 8);
        assert_eq!(rows[0].try_get::<Option<String>, _>("note").unwrap(), None);
        assert_eq!(rows[1].try_get::<i64, _>("n").unwrap(), -3);
        assert_eq!(rows[1].try_get::<Option<String>, _>("note").unwrap().as_deref(), Some("x;y"));
        assert_eq!(rows[1].try_get::<i64, _>("total").unwrap(), 2);
        let limited = c.run("SELECT k FROM t ORDER BY k", None, Some(1)).unwrap();
        assert_eq!(limited.iter().filter(|e| e.is_right()).count(), 1);

        let Err(e) = c.run("INSERT INTO t (k, n) VALUES ($1, 1)", args(vec![V::Text("a".into())]), None) else {
            panic!("a second row with the same key")
        };
        let db = e.as_database_error().expect("a database error");
        assert_eq!(db.code().as_deref(), Some("1555"));
        assert!(db.is_unique_violation());
        let Err(e) = c.run("INSERT INTO t (k, n) VALUES ($1, $2)", args(vec![V::Text("z".into())]), None) else {
            panic!("a missing argument")
        };
        assert!(e.to_string().contains("no argument for $2"), "{e}");
    }

    #[test]
    fn splits_statements_outside_quotes() {
        let got: Vec<&str> = statements("RELEASE SAVEPOINT a; SAVEPOINT a").collect();
        assert_eq!(got, ["RELEASE SAVEPOINT a", "SAVEPOINT a"]);
        let got: Vec<&str> = statements("UPDATE t SET v = 'x;y' WHERE k = $1;\n INSERT INTO t VALUES ($2);").collect();
        assert_eq!(got, ["UPDATE t SET v = 'x;y' WHERE k = $1", "INSERT INTO t VALUES ($2)"]);
    }
}

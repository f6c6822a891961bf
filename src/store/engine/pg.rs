//! PostgreSQL through tokio-postgres, with a pool (deadpool-postgres) and statements prepared once
//! per connection (its statement cache). Every value is a bound parameter of a prepared statement.
//!
//! A command's statements that need nothing computed between them go in one round trip: the client
//! pipelines requests sent before their answers are awaited, so a batch is sent as one flight of
//! `Bind`/`Execute` messages and read back in order ([`PgClient::pipeline`]). A transaction's
//! `BEGIN` is no round trip of its own either: it goes in front of the transaction's first
//! statement(s) ([`PgTx`]); a transaction that sends nothing sends no `BEGIN` and no `COMMIT`.
//! A flight's consecutive inserts go as one statement ([`super::fold`]).
//! Connections go back to the pool with no round trip (deadpool's fast recycling: a closed
//! connection is dropped, nothing is sent); a transaction dropped midway (a cancelled request)
//! takes its connection out of the pool and closes it, which rolls it back on the server.
//!
//! Parameter types are declared by the client (`BIGINT`, `TEXT`, `BYTEA`, `BOOLEAN`), so the
//! server casts as it does for any client that declares them; rows are read by each column's type
//! into [`Value`]s (integers, floating point, text, bytes, booleans; a domain as its base type).

use std::error::Error as StdError;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures_util::future::{join_all, join3, try_join_all};
use tokio_postgres::types::{FromSql, IsNull, Kind, ToSql, Type, to_sql_checked};
use tokio_postgres::{NoTls, Statement};

use super::fold::{Check, SHORT_SQLSTATE, checkable};
use crate::error::{DbError, Error, Result};
use crate::store::sql::{Arg, Output, Row, Value};

/// Distinct statements a connection keeps prepared; past this its cache starts again empty.
pub const STATEMENTS_MAX: usize = 512;
/// How long a command waits for a connection before the database counts as unavailable.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long opening a connection may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Counts a round trip to the server (`kassa_db_round_trips_total`): a flight of requests sent
/// together and their answers awaited. Preparing a statement a connection has not seen yet is not
/// counted (once per connection and statement).
pub(super) fn round_trip() {
    metrics::counter!("kassa_db_round_trips_total").increment(1);
}

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        match e.code() {
            Some(code) => {
                let message = e.as_db_error().map_or_else(|| e.to_string(), |d| d.message().to_string());
                DbError::new(Some(code.code().to_string()), message)
            }
            // No SQLSTATE: the connection failed, closed, timed out or spoke out of turn (a
            // server going away mid-answer) — all of them the database not being there — or a
            // value did not convert, which is the one kind that carries a source of its own
            // that is not an I/O error.
            None if e.is_closed() || e.source().is_none_or(|s| s.is::<std::io::Error>()) => {
                DbError::unreachable(e.to_string())
            }
            None => DbError::new(None, e.to_string()),
        }
    }
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        Error::Db(e.into())
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => e.into(),
            other => Error::Db(DbError::unreachable(format!("no PostgreSQL connection: {other}"))),
        }
    }
}

impl Arg {
    /// The type the parameter is declared with.
    fn pg_type(&self) -> Type {
        match self {
            Arg::Text(_) => Type::TEXT,
            Arg::Int(_) => Type::INT8,
            Arg::Bytes(_) => Type::BYTEA,
            Arg::Bool(_) => Type::BOOL,
        }
    }
}

impl ToSql for Arg {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self {
            Arg::Text(Some(t)) => t.as_str().to_sql(ty, out),
            Arg::Int(Some(i)) => i.to_sql(ty, out),
            Arg::Bytes(Some(b)) => b.as_slice().to_sql(ty, out),
            Arg::Bool(Some(b)) => b.to_sql(ty, out),
            Arg::Text(None) | Arg::Int(None) | Arg::Bytes(None) | Arg::Bool(None) => Ok(IsNull::Yes),
        }
    }

    fn accepts(ty: &Type) -> bool {
        [Type::TEXT, Type::INT8, Type::BYTEA, Type::BOOL].contains(ty)
    }

    to_sql_checked!();
}

/// A column's value, read by its type.
struct PgValue(Value);

impl<'a> FromSql<'a> for PgValue {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Self, Box<dyn StdError + Sync + Send>> {
        let value = match *ty {
            Type::BOOL => Value::Bool(bool::from_sql(ty, raw)?),
            Type::INT2 => Value::Int(i64::from(i16::from_sql(ty, raw)?)),
            Type::INT4 => Value::Int(i64::from(i32::from_sql(ty, raw)?)),
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::OID => Value::Int(i64::from(u32::from_sql(ty, raw)?)),
            Type::FLOAT4 => Value::Real(f64::from(f32::from_sql(ty, raw)?)),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::BYTEA => Value::Bytes(Vec::<u8>::from_sql(ty, raw)?),
            _ if <&str as FromSql>::accepts(ty) => Value::Text(<&str as FromSql>::from_sql(ty, raw)?.to_string()),
            _ => match ty.kind() {
                Kind::Domain(base) => return PgValue::from_sql(base, raw),
                _ => return Err(format!("kassa reads no column of type {ty} (cast it)").into()),
            },
        };
        Ok(PgValue(value))
    }

    fn from_sql_null(_: &Type) -> std::result::Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(PgValue(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// The pool.
#[derive(Clone)]
pub struct PgPool {
    pool: Pool,
    /// How a batch's statements are sent.
    flight: Flight,
}

/// How a batch's statements are sent ([`crate::store::engine::EngineConfig`]).
#[derive(Debug, Clone, Copy)]
pub struct Flight {
    /// In one round trip (`pg_pipeline`); else one each.
    pub pipeline: bool,
    /// Consecutive inserts as one statement (`pg_fold_inserts`, [`super::fold`]; pipelined only).
    pub fold_inserts: bool,
}

impl std::fmt::Debug for PgPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PgPool")
    }
}

impl PgPool {
    /// A pool of at most `max` connections to `url`; one is opened now, to fail early.
    pub async fn connect(url: &str, max: usize, flight: Flight) -> anyhow::Result<PgPool> {
        let mut config: tokio_postgres::Config =
            libpq_url(url).parse().map_err(|e| anyhow::anyhow!("PostgreSQL URL: {e}"))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(manager)
            .max_size(max)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(ACQUIRE_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| anyhow::anyhow!("PostgreSQL pool: {e}"))?;
        let first = pool.get().await.map_err(|e| anyhow::anyhow!("connecting to PostgreSQL: {e}"))?;
        drop(first);
        Ok(PgPool { pool, flight })
    }

    /// A connection from the pool.
    pub async fn get(&self) -> Result<PgClient> {
        Ok(PgClient { obj: self.pool.get().await?, flight: self.flight })
    }

    /// Connections open, and of those idle.
    pub fn connections(&self) -> (usize, usize) {
        let status = self.pool.status();
        (status.size, status.available)
    }

    /// Closes every connection.
    pub fn close(&self) {
        self.pool.close();
    }
}

/// `url` as libpq reads it: a `host` in the query (a Unix socket's directory, say) stands in for
/// the host named before the path, rather than joining it as a second host to try.
fn libpq_url(url: &str) -> String {
    let Some((path, query)) = url.split_once('?') else { return url.to_string() };
    if !query.split('&').any(|p| p.starts_with("host=")) {
        return url.to_string();
    }
    let Some((scheme, rest)) = path.split_once("://") else { return url.to_string() };
    let (authority, database) = rest.split_once('/').unwrap_or((rest, ""));
    let credentials = authority.rsplit_once('@').map_or("", |(c, _)| c);
    let at = if credentials.is_empty() { "" } else { "@" };
    format!("{scheme}://{credentials}{at}/{database}?{query}")
}

/// One connection taken from the pool; back to it when dropped.
pub struct PgClient {
    pub(super) obj: Object,
    pub(super) flight: Flight,
}

impl PgClient {
    /// The prepared statement for `sql` with `args`' types: from the connection's cache, else
    /// prepared now (a round trip, once per connection).
    pub(super) async fn prepare(&self, sql: &str, args: &[Arg]) -> Result<Statement> {
        let types: Vec<Type> = args.iter().map(Arg::pg_type).collect();
        if self.obj.statement_cache.size() >= STATEMENTS_MAX {
            self.obj.statement_cache.clear();
        }
        Ok(self.obj.prepare_typed_cached(sql, &types).await?)
    }

    /// Runs a prepared statement; with `limit`, keeps at most that many rows.
    pub(super) async fn execute(&self, stmt: &Statement, args: &[Arg], limit: Option<usize>) -> Result<Output> {
        use futures_util::TryStreamExt as _;
        let names: Arc<[String]> = stmt.columns().iter().map(|c| c.name().to_string()).collect();
        let stream = self.obj.query_raw(stmt, args.iter()).await?;
        futures_util::pin_mut!(stream);
        let mut out = Output::default();
        while let Some(row) = stream.try_next().await? {
            if limit.is_none_or(|l| out.rows.len() < l) {
                let values = (0..row.len())
                    .map(|i| row.try_get::<_, PgValue>(i).map(|v| v.0))
                    .collect::<std::result::Result<Vec<_>, _>>()?;
                out.rows.push(Row::new(Arc::clone(&names), values));
            }
        }
        out.changed = stream.rows_affected().unwrap_or(0);
        Ok(out)
    }

    /// Runs one statement (on its own, autocommitted, when no transaction is open).
    pub async fn run(&self, sql: &str, args: &[Arg], limit: Option<usize>) -> Result<Output> {
        let stmt = self.prepare(sql, args).await?;
        round_trip();
        self.execute(&stmt, args, limit).await
    }

    /// Runs statements without parameters or results (`BEGIN`, a migration's script).
    pub async fn exec(&self, sql: &str) -> Result<()> {
        round_trip();
        self.simple(sql).await
    }

    /// Sends `sql` by the simple protocol, in a flight counted by the caller.
    pub(super) async fn simple(&self, sql: &str) -> Result<()> {
        Ok(self.obj.batch_execute(sql).await?)
    }

    async fn exec_some(&self, sql: Option<&str>) -> Result<()> {
        match sql {
            Some(s) => self.simple(s).await,
            None => Ok(()),
        }
    }

    /// Runs `statements` in order, preceded by `before` and followed by `after` (`BEGIN`,
    /// `COMMIT`), and returns what each statement gave ([`PgClient::flight`] with no checks).
    pub async fn pipeline(
        &self,
        before: Option<&str>,
        statements: &[(String, Vec<Arg>)],
        after: Option<&str>,
    ) -> Result<Vec<Output>> {
        match self.flight(before, statements, &[], after).await.landed? {
            Landed::Ran(outputs) => Ok(outputs),
            Landed::Short(_) => Err(Error::internal("a count was checked that no statement asked for")),
        }
    }

    /// Runs `statements` in order, preceded by `before` and followed by `after` (`BEGIN`,
    /// `COMMIT`). Pipelined (unless configured off): every statement is prepared (those this
    /// connection has not prepared yet, together), then everything is sent before anything is
    /// awaited — one round trip. The statements still run one after another, each with a snapshot
    /// of its own. A statement with a check ([`Check`]) must change that many rows; the database
    /// checks it ([`super::fold`]), so that a `COMMIT` in the same flight rolls back when it did
    /// not. Every answer is read, so the connection is left clean; the first statement's failure
    /// is the flight's (after it, in a transaction, PostgreSQL refuses the rest, and a `COMMIT`
    /// rolls back).
    pub async fn flight(
        &self,
        before: Option<&str>,
        statements: &[(String, Vec<Arg>)],
        checks: &[Check],
        after: Option<&str>,
    ) -> Flown {
        if !self.flight.pipeline {
            return self.one_by_one(before, statements, checks, after).await;
        }
        let checked_by_database = statements.iter().zip(checks).all(|((sql, _), c)| c.is_none() || checkable(sql));
        if !checked_by_database {
            // Checked here, then ended: a round trip more.
            let flown = self.pipelined(before, statements, &[], None).await;
            let landed = match flown.landed {
                Ok(Landed::Ran(outputs)) => {
                    match outputs.iter().zip(checks).position(|(o, c)| c.is_some_and(|rows| rows != o.changed)) {
                        Some(at) => Ok(Landed::Short(vec![at])),
                        None => Ok(Landed::Ran(outputs)),
                    }
                }
                other => other,
            };
            let Some(after) = after else { return Flown { landed, ended: false } };
            let end = if matches!(landed, Ok(Landed::Ran(_))) { after } else { "ROLLBACK" };
            return match self.exec(end).await {
                Ok(()) => Flown { landed, ended: true },
                Err(e) => Flown { landed: landed.and(Err(e)), ended: false },
            };
        }
        self.pipelined(before, statements, checks, after).await
    }

    /// [`PgClient::flight`] pipelined, every check ([`checkable`]) made by the database.
    async fn pipelined(
        &self,
        before: Option<&str>,
        statements: &[(String, Vec<Arg>)],
        checks: &[Check],
        after: Option<&str>,
    ) -> Flown {
        let planned = super::fold::plan(statements, checks, self.flight.fold_inserts);
        let sent = planned.as_ref().map_or(statements, |p| p.statements.as_slice());
        let prepared = match try_join_all(sent.iter().map(|(sql, args)| self.prepare(sql, args))).await {
            Ok(prepared) => prepared,
            Err(e) => return Flown { landed: Err(e), ended: false },
        };
        round_trip();
        // Polled in this order, each sending its request on its first poll.
        let (began, outputs, ended) = join3(
            self.exec_some(before),
            join_all(sent.iter().zip(&prepared).map(|((_, args), stmt)| self.execute(stmt, args, None))),
            self.exec_some(after),
        )
        .await;
        let acknowledged = after.is_some() && ended.is_ok();
        let landed = (|| {
            began?;
            let mut ran = Vec::with_capacity(outputs.len());
            for (at, output) in outputs.into_iter().enumerate() {
                match output {
                    Ok(o) => ran.push(o),
                    Err(e) => {
                        let checked = planned.as_ref().map_or(&[][..], |p| p.checked_in(at));
                        return match &e {
                            Error::Db(db) if db.code() == Some(SHORT_SQLSTATE) && !checked.is_empty() => {
                                Ok(Landed::Short(checked.to_vec()))
                            }
                            _ => Err(e),
                        };
                    }
                }
            }
            ended?;
            Ok(Landed::Ran(match &planned {
                Some(p) => p.unfold(ran),
                None => ran,
            }))
        })();
        Flown { landed, ended: acknowledged }
    }

    /// [`PgClient::flight`] a statement at a time, each count checked as it comes back; after a
    /// failure, a flight that was to end in `after` is rolled back instead.
    async fn one_by_one(
        &self,
        before: Option<&str>,
        statements: &[(String, Vec<Arg>)],
        checks: &[Check],
        after: Option<&str>,
    ) -> Flown {
        if let Some(b) = before
            && let Err(e) = self.exec(b).await
        {
            return self.failed(Err(e), after).await;
        }
        let mut out = Vec::with_capacity(statements.len());
        for (at, (sql, args)) in statements.iter().enumerate() {
            match self.run(sql, args, None).await {
                Ok(o) if checks.get(at).copied().flatten().is_some_and(|rows| rows != o.changed) => {
                    return self.failed(Ok(Landed::Short(vec![at])), after).await;
                }
                Ok(o) => out.push(o),
                Err(e) => return self.failed(Err(e), after).await,
            }
        }
        match after {
            Some(a) => match self.exec(a).await {
                Ok(()) => Flown { landed: Ok(Landed::Ran(out)), ended: true },
                Err(e) => Flown { landed: Err(e), ended: false },
            },
            None => Flown { landed: Ok(Landed::Ran(out)), ended: false },
        }
    }
}

impl PgClient {
    /// A flight one statement at a time that failed: one that was to end in `after` is rolled
    /// back instead.
    async fn failed(&self, landed: Result<Landed>, after: Option<&str>) -> Flown {
        let ended = after.is_some() && self.exec("ROLLBACK").await.is_ok();
        Flown { landed, ended }
    }
}

/// How a flight's statements landed.
#[derive(Debug)]
pub enum Landed {
    /// Every statement ran: what each gave, in the order written.
    Ran(Vec<Output>),
    /// These statements (as written) did not change the rows their checks expect; PostgreSQL
    /// refused the rest of the transaction, and a `COMMIT` in the flight rolled it back.
    Short(Vec<usize>),
}

/// A flight's answers.
#[derive(Debug)]
pub struct Flown {
    pub landed: Result<Landed>,
    /// Its `after` (`COMMIT`) was acknowledged: no transaction is open any more, committed, or
    /// rolled back after a failure.
    pub ended: bool,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_host_in_the_query_stands_in_for_the_one_before_the_path() {
        use super::libpq_url;
        assert_eq!(
            libpq_url("postgres://me:pw@localhost/shop?host=/var/run/postgresql&port=5433"),
            "postgres://me:pw@/shop?host=/var/run/postgresql&port=5433"
        );
        assert_eq!(libpq_url("postgres://localhost/shop?host=/tmp"), "postgres:///shop?host=/tmp");
        let plain = "postgres://me@127.0.0.1:5432/shop?application_name=kassa";
        assert_eq!(libpq_url(plain), plain);
        let config: tokio_postgres::Config = libpq_url("postgres://me@localhost/shop?host=/tmp").parse().unwrap();
        assert_eq!(config.get_hosts().len(), 1);
    }
}

//! The store's one way to speak SQL, whichever database carries it: a statement with its values
//! bound as parameters (`$1…$n`, never spliced into the text), and rows read by column name into
//! Rust types. The statements run on an [`Executor`]: a command's transaction (`&mut **tx`, a
//! [`Conn`](super::Conn)) or the readers (`db.read_pool()`, a [`Reader`](super::Reader)); the
//! engine ([`super::engine`]) carries them to SQLite (rusqlite, in place) or PostgreSQL
//! (tokio-postgres, pipelined).
//!
//! Values cross as four kinds, on both databases: 64-bit integers, text, bytes and booleans
//! (booleans come back from SQLite as integers, and read as either).

use std::future::Future;
use std::sync::Arc;

use crate::domain::ids;
use crate::error::{Error, Result};

/// One bound value.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Text(Option<String>),
    Int(Option<i64>),
    Bytes(Option<Vec<u8>>),
    Bool(Option<bool>),
}

impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Arg::Text(Some(v.to_string()))
    }
}

impl From<&&str> for Arg {
    fn from(v: &&str) -> Self {
        Arg::Text(Some((*v).to_string()))
    }
}

impl From<String> for Arg {
    fn from(v: String) -> Self {
        Arg::Text(Some(v))
    }
}

impl From<&String> for Arg {
    fn from(v: &String) -> Self {
        Arg::Text(Some(v.clone()))
    }
}

impl From<Option<&str>> for Arg {
    fn from(v: Option<&str>) -> Self {
        Arg::Text(v.map(str::to_string))
    }
}

impl From<Option<String>> for Arg {
    fn from(v: Option<String>) -> Self {
        Arg::Text(v)
    }
}

impl From<&Option<String>> for Arg {
    fn from(v: &Option<String>) -> Self {
        Arg::Text(v.clone())
    }
}

impl From<i64> for Arg {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}

impl From<&i64> for Arg {
    fn from(v: &i64) -> Self {
        Arg::Int(Some(*v))
    }
}

impl From<i32> for Arg {
    fn from(v: i32) -> Self {
        Arg::Int(Some(i64::from(v)))
    }
}

impl From<u32> for Arg {
    fn from(v: u32) -> Self {
        Arg::Int(Some(i64::from(v)))
    }
}

impl From<Option<i64>> for Arg {
    fn from(v: Option<i64>) -> Self {
        Arg::Int(v)
    }
}

impl From<bool> for Arg {
    fn from(v: bool) -> Self {
        Arg::Bool(Some(v))
    }
}

impl From<Vec<u8>> for Arg {
    fn from(v: Vec<u8>) -> Self {
        Arg::Bytes(Some(v))
    }
}

impl From<&[u8]> for Arg {
    fn from(v: &[u8]) -> Self {
        Arg::Bytes(Some(v.to_vec()))
    }
}

impl From<&Vec<u8>> for Arg {
    fn from(v: &Vec<u8>) -> Self {
        Arg::Bytes(Some(v.clone()))
    }
}

impl From<Option<Vec<u8>>> for Arg {
    fn from(v: Option<Vec<u8>>) -> Self {
        Arg::Bytes(v)
    }
}

/// Identifiers bind as their text.
macro_rules! id_args {
    ($($id:ty),*) => {$(
        impl From<&$id> for Arg {
            fn from(v: &$id) -> Self {
                Arg::Text(Some(v.as_str().to_string()))
            }
        }

        impl From<Option<&$id>> for Arg {
            fn from(v: Option<&$id>) -> Self {
                Arg::Text(v.map(|v| v.as_str().to_string()))
            }
        }

        impl From<$id> for Arg {
            fn from(v: $id) -> Self {
                Arg::Text(Some(v.as_str().to_string()))
            }
        }
    )*};
}

id_args!(ids::OrderNo, ids::AttemptRef, ids::RefundNo, ids::Sku, ids::BasketId, ids::IdempotencyKey, ids::SessionId);

/// `args![a, b, c]`: the values of one statement, in `$1, $2, …` order.
#[macro_export]
macro_rules! args {
    ($($v:expr),* $(,)?) => { vec![$($crate::store::sql::Arg::from($v)),*] };
}

/// One value read from a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Bytes(Vec<u8>),
    Bool(bool),
}

/// One row: its columns' names (shared by the rows of a statement) and values.
#[derive(Debug, Clone)]
pub struct Row {
    names: Arc<[String]>,
    values: Vec<Value>,
}

impl Row {
    pub fn new(names: Arc<[String]>, values: Vec<Value>) -> Row {
        Row { names, values }
    }

    /// The value of a column, by name or position.
    pub fn try_get<T: FromValue>(&self, column: impl ColumnIndex) -> Result<T> {
        let i = column.index(self)?;
        let value = self.values.get(i).ok_or_else(|| Error::internal(format!("no column {i}")))?;
        T::from_value(value).map_err(|why| Error::internal(format!("column {}: {why}", column.describe())))
    }

    /// [`Row::try_get`] for tests and values whose absence is a bug: panics on a decode problem.
    #[allow(clippy::panic)]
    pub fn get<T: FromValue>(&self, column: impl ColumnIndex) -> T {
        match self.try_get(column) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The columns' names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// A column named or numbered.
pub trait ColumnIndex: Copy {
    fn index(&self, row: &Row) -> Result<usize>;
    fn describe(&self) -> String;
}

impl ColumnIndex for &str {
    fn index(&self, row: &Row) -> Result<usize> {
        row.names.iter().position(|n| n == self).ok_or_else(|| Error::internal(format!("no column {self}")))
    }
    fn describe(&self) -> String {
        (*self).to_string()
    }
}

impl ColumnIndex for usize {
    fn index(&self, _row: &Row) -> Result<usize> {
        Ok(*self)
    }
    fn describe(&self) -> String {
        format!("#{self}")
    }
}

/// A Rust type a column reads into.
pub trait FromValue: Sized {
    fn from_value(v: &Value) -> std::result::Result<Self, String>;
}

fn mismatch<T>(want: &str, v: &Value) -> std::result::Result<T, String> {
    Err(format!("expected {want}, found {v:?}"))
}

impl FromValue for i64 {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Int(i) => Ok(*i),
            Value::Bool(b) => Ok(i64::from(*b)),
            other => mismatch("an integer", other),
        }
    }
}

impl FromValue for i32 {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        i32::try_from(i64::from_value(v)?).map_err(|e| e.to_string())
    }
}

impl FromValue for u64 {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        u64::try_from(i64::from_value(v)?).map_err(|e| e.to_string())
    }
}

impl FromValue for bool {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Bool(b) => Ok(*b),
            Value::Int(i) => Ok(*i != 0),
            other => mismatch("a boolean", other),
        }
    }
}

impl FromValue for f64 {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Real(r) => Ok(*r),
            #[allow(clippy::cast_precision_loss)]
            Value::Int(i) => Ok(*i as f64),
            other => mismatch("a number", other),
        }
    }
}

impl FromValue for String {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Text(t) => Ok(t.clone()),
            other => mismatch("text", other),
        }
    }
}

/// A status column read as its type: a text that is none of its statuses is refused.
macro_rules! status_from_value {
    ($($status:ty),+) => {$(
        impl FromValue for $status {
            fn from_value(v: &Value) -> std::result::Result<Self, String> {
                let text = String::from_value(v)?;
                <$status>::parse(&text).ok_or_else(|| format!("unknown {} {text:?}", stringify!($status)))
            }
        }
    )+};
}

status_from_value!(
    crate::domain::OrderStatus,
    crate::domain::AttemptStatus,
    crate::domain::status::RefundStatus,
    crate::domain::status::NotificationStatus,
    crate::domain::status::MessageStatus,
    crate::domain::status::ReportStatus,
    crate::domain::basket::BasketStatus,
    crate::domain::catalog::SkuKind
);

impl FromValue for Vec<u8> {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Bytes(b) => Ok(b.clone()),
            Value::Text(t) => Ok(t.as_bytes().to_vec()),
            other => mismatch("bytes", other),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: &Value) -> std::result::Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// A row read into a tuple, column by column ([`query_as`]).
pub trait FromRow: Sized {
    fn from_row(row: &Row) -> Result<Self>;
}

impl FromRow for Row {
    fn from_row(row: &Row) -> Result<Self> {
        Ok(row.clone())
    }
}

macro_rules! tuple_from_row {
    ($($t:ident $i:tt),+) => {
        impl<$($t: FromValue),+> FromRow for ($($t,)+) {
            fn from_row(row: &Row) -> Result<Self> {
                Ok(($(row.try_get::<$t>($i)?,)+))
            }
        }
    };
}

tuple_from_row!(A 0);
tuple_from_row!(A 0, B 1);
tuple_from_row!(A 0, B 1, C 2);
tuple_from_row!(A 0, B 1, C 2, D 3);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_from_row!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);

/// What one statement gave: the rows it changed (meaningful for writes only), and the rows it
/// returned.
#[derive(Debug, Default)]
pub struct Output {
    pub changed: u64,
    pub rows: Vec<Row>,
}

/// The result of a statement run for its effect.
#[derive(Debug, Clone, Copy)]
pub struct Done {
    changed: u64,
}

impl Done {
    pub fn rows_affected(&self) -> u64 {
        self.changed
    }
}

/// Where a statement runs: a transaction's connection or the readers.
pub trait Executor: Send + Sized {
    /// Runs one statement with its values; with `limit`, keeps at most that many rows.
    fn run(self, sql: &str, args: Vec<Arg>, limit: Option<usize>) -> impl Future<Output = Result<Output>> + Send;
}

/// A statement and its values, in `$1…$n` order.
#[derive(Debug, Clone)]
#[must_use = "a query does nothing until it runs"]
pub struct Query<'q> {
    sql: &'q str,
    args: Vec<Arg>,
}

pub fn query(sql: &str) -> Query<'_> {
    Query { sql, args: Vec::new() }
}

impl<'q> Query<'q> {
    /// The next parameter's value.
    pub fn bind(mut self, v: impl Into<Arg>) -> Self {
        self.args.push(v.into());
        self
    }

    /// Binds each of `args`, in order, after those bound already.
    pub fn bind_all(mut self, args: Vec<Arg>) -> Self {
        self.args.extend(args);
        self
    }

    pub async fn execute(self, ex: impl Executor) -> Result<Done> {
        Ok(Done { changed: ex.run(self.sql, self.args, None).await?.changed })
    }

    pub async fn fetch_all(self, ex: impl Executor) -> Result<Vec<Row>> {
        Ok(ex.run(self.sql, self.args, None).await?.rows)
    }

    pub async fn fetch_optional(self, ex: impl Executor) -> Result<Option<Row>> {
        Ok(ex.run(self.sql, self.args, Some(1)).await?.rows.into_iter().next())
    }

    pub async fn fetch_one(self, ex: impl Executor) -> Result<Row> {
        let sql = self.sql;
        self.fetch_optional(ex).await?.ok_or_else(|| Error::internal(format!("no row from: {sql}")))
    }
}

/// A statement whose rows are read as one value each: their first column.
#[must_use = "a query does nothing until it runs"]
pub struct QueryScalar<'q, T> {
    query: Query<'q>,
    _t: std::marker::PhantomData<fn() -> T>,
}

pub fn query_scalar<T: FromValue>(sql: &str) -> QueryScalar<'_, T> {
    QueryScalar { query: query(sql), _t: std::marker::PhantomData }
}

impl<'q, T: FromValue> QueryScalar<'q, T> {
    pub fn bind(mut self, v: impl Into<Arg>) -> Self {
        self.query = self.query.bind(v);
        self
    }

    pub fn bind_all(mut self, args: Vec<Arg>) -> Self {
        self.query = self.query.bind_all(args);
        self
    }

    pub async fn fetch_all(self, ex: impl Executor) -> Result<Vec<T>> {
        self.query.fetch_all(ex).await?.iter().map(|r| r.try_get(0)).collect()
    }

    pub async fn fetch_optional(self, ex: impl Executor) -> Result<Option<T>> {
        self.query.fetch_optional(ex).await?.map(|r| r.try_get(0)).transpose()
    }

    pub async fn fetch_one(self, ex: impl Executor) -> Result<T> {
        self.query.fetch_one(ex).await?.try_get(0)
    }
}

/// A statement whose rows are read as tuples ([`FromRow`]).
#[must_use = "a query does nothing until it runs"]
pub struct QueryAs<'q, T> {
    query: Query<'q>,
    _t: std::marker::PhantomData<fn() -> T>,
}

pub fn query_as<T: FromRow>(sql: &str) -> QueryAs<'_, T> {
    QueryAs { query: query(sql), _t: std::marker::PhantomData }
}

impl<'q, T: FromRow> QueryAs<'q, T> {
    pub fn bind(mut self, v: impl Into<Arg>) -> Self {
        self.query = self.query.bind(v);
        self
    }

    pub async fn fetch_all(self, ex: impl Executor) -> Result<Vec<T>> {
        self.query.fetch_all(ex).await?.iter().map(T::from_row).collect()
    }

    pub async fn fetch_optional(self, ex: impl Executor) -> Result<Option<T>> {
        self.query.fetch_optional(ex).await?.as_ref().map(T::from_row).transpose()
    }

    pub async fn fetch_one(self, ex: impl Executor) -> Result<T> {
        T::from_row(&self.query.fetch_one(ex).await?)
    }
}

/// Every `$N` in `sql`, in order: where it stands (byte range) and N. A `$` without digits is not
/// one. The SQL kassa writes has no `$` in literals.
fn placeholders(sql: &str) -> impl Iterator<Item = (std::ops::Range<usize>, usize)> + '_ {
    let bytes = sql.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        while let Some(offset) = bytes.get(at..)?.iter().position(|b| *b == b'$') {
            let start = at + offset;
            let digits = bytes[start + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
            at = start + 1 + digits;
            if digits > 0 {
                let n = bytes[start + 1..at]
                    .iter()
                    .fold(0_usize, |n, d| n.saturating_mul(10).saturating_add(usize::from(d - b'0')));
                return Some((start..at, n));
            }
        }
        None
    })
}

/// `sql` with each `$N` replaced by what `with` makes of N.
fn replace_placeholders<E>(
    sql: &str,
    mut with: impl FnMut(usize) -> std::result::Result<String, E>,
) -> std::result::Result<String, E> {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut copied = 0;
    for (range, n) in placeholders(sql) {
        out.push_str(&sql[copied..range.start]);
        out.push_str(&with(n)?);
        copied = range.end;
    }
    out.push_str(&sql[copied..]);
    Ok(out)
}

/// Shifts every `$N` in `sql` by `offset`.
pub(crate) fn renumber(sql: &str, offset: usize) -> String {
    let Ok(out) = replace_placeholders::<std::convert::Infallible>(sql, |n| Ok(format!("${}", n + offset)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renumbers_parameters() {
        assert_eq!(
            renumber("UPDATE t SET a = $1, b = $2 WHERE c = $10", 3),
            "UPDATE t SET a = $4, b = $5 WHERE c = $13"
        );
        assert_eq!(renumber("SELECT 1", 5), "SELECT 1");
        assert_eq!(renumber("x $ y", 2), "x $ y");
    }

    #[test]
    fn rows_read_by_name_and_position_into_types() {
        let names: Arc<[String]> = ["n", "t", "b", "z"].iter().map(|s| s.to_string()).collect();
        let row = Row::new(names, vec![Value::Int(7), Value::Text("x".into()), Value::Int(1), Value::Null]);
        assert_eq!(row.try_get::<i64>("n").unwrap(), 7);
        assert_eq!(row.try_get::<String>(1).unwrap(), "x");
        assert!(row.try_get::<bool>("b").unwrap());
        assert_eq!(row.try_get::<Option<i64>>("z").unwrap(), None);
        assert!(row.try_get::<i64>("z").is_err(), "NULL is not an integer");
        assert!(row.try_get::<String>("n").is_err(), "an integer is not text");
        assert!(row.try_get::<i64>("missing").is_err());
        let (n, t) = <(i64, String)>::from_row(&row).unwrap();
        assert_eq!((n, t.as_str()), (7, "x"));
    }
}

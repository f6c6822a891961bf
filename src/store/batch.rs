//! Write statements sent together. The SQLite driver runs every statement on its own thread, and
//! each statement is a round trip to it; on the single writer those round trips, not SQLite, set
//! the pace (BENCHMARKS.md). A batch goes to SQLite as one multi-statement query — one round trip,
//! each statement taking its own numbered parameters — and to PostgreSQL as one simple-query
//! message of `EXECUTE`s of statements prepared once per connection ([`super::prepared`]). Either
//! way the statements run in order inside the caller's transaction, and the caller gets the rows
//! each one changed to check.

use crate::store::{Conn, prepared};

use crate::error::{Error, Result};

/// One bound value.
#[derive(Debug, Clone)]
pub enum Arg {
    Text(Option<String>),
    Int(Option<i64>),
}

impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Arg::Text(Some(v.to_string()))
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

impl From<i64> for Arg {
    fn from(v: i64) -> Self {
        Arg::Int(Some(v))
    }
}

/// `args![a, b, c]`: the values of one statement, in `$1, $2, …` order.
#[macro_export]
macro_rules! args {
    ($($v:expr),* $(,)?) => { vec![$($crate::store::batch::Arg::from($v)),*] };
}

/// A statement as written, with its values.
type Statement = (String, Vec<Arg>);
/// Rows an added item must change, and what it means if not.
type Expected = Option<(u64, String)>;

#[derive(Debug, Default, Clone)]
pub struct Batch {
    /// The statements added with [`Batch::add`], as written, with their values.
    statements: Vec<Statement>,
    /// The rows added with [`Batch::append`], grouped by table and columns.
    appended: Vec<Appended>,
    /// What was added, in order: a statement (its index) or an appended row (its group's).
    items: Vec<Item>,
    /// For [`Batch::run_checked`]: rows each item must change, and what it means if not.
    expected: Vec<Expected>,
}

#[derive(Debug, Clone, Copy)]
enum Item {
    Statement(usize),
    Row(usize),
}

/// Rows for one `INSERT INTO table (columns) VALUES …`, each with its own `$1…$n` values.
#[derive(Debug, Clone)]
struct Appended {
    into: String,
    tuple: String,
    rows: Vec<Vec<Arg>>,
}

impl Batch {
    pub fn new() -> Self {
        Batch::default()
    }

    /// Adds a statement with its own `$1…$n` parameters.
    pub fn add(&mut self, sql: &str, args: Vec<Arg>) -> &mut Self {
        self.items.push(Item::Statement(self.statements.len()));
        self.statements.push((sql.to_string(), args));
        self.expected.push(None);
        self
    }

    /// Adds a statement that must change exactly `rows` rows; `what` names the failure.
    pub fn expect(&mut self, sql: &str, args: Vec<Arg>, rows: u64, what: impl Into<String>) -> &mut Self {
        self.add(sql, args);
        if let Some(last) = self.expected.last_mut() {
            *last = Some((rows, what.into()));
        }
        self
    }

    /// Adds one row to insert: `into` is `INSERT INTO table (columns)`, `tuple` its values as
    /// `($1, $2, 'literal', …)` with its own parameters. The rows appended to one batch with the
    /// same `into` and `tuple` go in as one multi-row INSERT, after the batch's statements and in
    /// the order they were appended — one statement where there were several (a status change's
    /// log rows, a payment's outbox messages). Only for rows that nothing else in the batch reads
    /// or depends on. The row must go in (`what` names the failure).
    pub fn append(&mut self, into: &str, tuple: &str, args: Vec<Arg>, what: impl Into<String>) -> &mut Self {
        let group = match self.appended.iter().position(|g| g.into == into && g.tuple == tuple) {
            Some(g) => g,
            None => {
                self.appended.push(Appended { into: into.to_string(), tuple: tuple.to_string(), rows: Vec::new() });
                self.appended.len() - 1
            }
        };
        if let Some(g) = self.appended.get_mut(group) {
            g.rows.push(args);
        }
        self.items.push(Item::Row(group));
        self.expected.push(Some((1, what.into())));
        self
    }

    /// Runs the statements; fails (the caller's transaction then rolls back) on the first one
    /// that did not change the rows it had to.
    pub async fn run_checked(self, conn: &mut Conn) -> Result<()> {
        let (run, tally, expected) = self.executed();
        check(&tally.per_item(&run_statements(run, conn).await?), expected)
    }

    /// The statements as they run — those added, then one INSERT per group of appended rows —
    /// with how their results map back to what was added, and what each added item must change.
    fn executed(self) -> (Vec<Statement>, Tally, Vec<Expected>) {
        let tally = Tally {
            items: self.items,
            first_group: self.statements.len(),
            group_rows: self.appended.iter().map(|g| g.rows.len() as u64).collect(),
        };
        let mut statements = self.statements;
        for group in self.appended {
            let mut sql = group.into;
            sql.push_str(" VALUES ");
            let mut args = Vec::new();
            for (i, row) in group.rows.into_iter().enumerate() {
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&renumber(&group.tuple, args.len()));
                args.extend(row);
            }
            statements.push((sql, args));
        }
        (statements, tally, self.expected)
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Statements and rows added so far.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Runs the statements in order; returns the rows they changed, summed.
    pub async fn run(self, conn: &mut Conn) -> Result<u64> {
        Ok(self.run_each(conn).await?.iter().sum())
    }

    /// Runs the statements in order; returns the rows each one changed, in the order they were
    /// added (an appended row: 1 if its group's INSERT put in all of its rows).
    pub async fn run_each(self, conn: &mut Conn) -> Result<Vec<u64>> {
        let (run, tally, _) = self.executed();
        Ok(tally.per_item(&run_statements(run, conn).await?))
    }
}

/// How the rows each executed statement changed map back to what was added.
struct Tally {
    items: Vec<Item>,
    /// Where the appended rows' INSERTs start among the executed statements.
    first_group: usize,
    /// Rows in each group of appended rows.
    group_rows: Vec<u64>,
}

impl Tally {
    /// The rows each added item changed: a statement its own count; an appended row 1 if its
    /// group's INSERT put in all the group's rows, else 0.
    fn per_item(&self, changed: &[u64]) -> Vec<u64> {
        self.items
            .iter()
            .map(|item| match item {
                Item::Statement(i) => changed.get(*i).copied().unwrap_or(0),
                Item::Row(g) => u64::from(changed.get(self.first_group + g) == self.group_rows.get(*g)),
            })
            .collect()
    }
}

/// Runs statements in order, inside the connection's transaction; returns the rows each changed.
async fn run_statements(run: Vec<Statement>, conn: &mut Conn) -> Result<Vec<u64>> {
    let count = run.len();
    if matches!(conn, Conn::Sqlx(_)) && conn.backend_name() == "SQLite" {
        // Joined into one query, each statement's `$N` shifted past the values before it.
        let mut sql = String::new();
        let mut args: Vec<Arg> = Vec::new();
        for (plain, values) in run {
            if !sql.is_empty() {
                sql.push_str(";\n");
            }
            sql.push_str(&renumber(&plain, args.len()));
            args.extend(values);
        }
        // One result per statement, in order (these statements return no rows). sqlx 0.8
        // deprecates multi-statement queries in favour of `raw_sql`, which cannot bind values;
        // the SQLite driver still runs them, and this is the one place that relies on it.
        #[allow(deprecated)]
        return rows_changed(bind(sqlx::query(&sql), args).fetch_many(conn), count).await;
    }
    if conn.backend_name() == "PostgreSQL" && count > 1 && pg_one_trip() {
        return Ok(pg_script(&run, conn).await?.iter().map(|r| r.changed).collect());
    }
    // The native SQLite writer (no round trips to save) and single statements: one by one.
    Ok(one_by_one(run, conn).await?.iter().map(|r| r.changed).collect())
}

/// What one statement of [`together`] gave: the rows it changed (meaningful for writes only), and
/// the rows it returned.
pub struct Output {
    pub changed: u64,
    pub rows: Vec<sqlx::any::AnyRow>,
}

/// PostgreSQL, outside any transaction: `run` as one script in one round trip, which PostgreSQL
/// runs as one implicit transaction (all of it, or on the first failure none of it), and what
/// each statement gave — its rows (`RETURNING`) and the rows it changed. A connection that lacks
/// a prepared statement is given it, and the script (nothing of which ran) runs again on it.
pub async fn script_outputs(conn: &mut sqlx::AnyConnection, run: Vec<(&str, Vec<Arg>)>) -> Result<Vec<Output>> {
    let run: Vec<Statement> = run.into_iter().map(|(sql, args)| (sql.to_string(), args)).collect();
    let mut recovered = false;
    loop {
        let (sql, named) = script(&run)?;
        match outputs(sqlx::raw_sql(&sql).fetch_many(&mut *conn), run.len()).await {
            Err(Error::Db(e)) if prepared::is_unprepared(&e) && prepared::in_use() => {
                if recovered {
                    // Prepared on this connection a moment ago, and gone: a pooler in between.
                    prepared::give_up();
                } else {
                    recovered = true;
                    prepared::prepare_missing(&mut *conn, &named).await?;
                }
            }
            other => return other,
        }
    }
}

/// Runs statements one after another inside the connection's transaction, and returns what each
/// gave — on PostgreSQL in one round trip (one simple-query message), on SQLite one by one (the
/// native writer has no round trips to save). For statements where nothing is computed between
/// one and the next: a lock, then reads made under it. Each statement starts after the one
/// before has finished, waits included, and on PostgreSQL reads with a snapshot of its own taken
/// then, so a read after a `FOR UPDATE` sees what the lock's holder committed. The first failure
/// fails the call (and on PostgreSQL aborts the transaction).
pub async fn together(conn: &mut Conn, run: Vec<(&str, Vec<Arg>)>) -> Result<Vec<Output>> {
    let run: Vec<Statement> = run.into_iter().map(|(sql, args)| (sql.to_string(), args)).collect();
    // A transaction's first reads take its BEGIN along (`held::PgTx`), even a single one.
    if conn.backend_name() == "PostgreSQL" && (run.len() > 1 || conn.begin_pending()) && pg_one_trip() {
        return pg_script(&run, conn).await;
    }
    one_by_one(run, conn).await
}

/// The statements one after another, each with its values bound.
async fn one_by_one(run: Vec<Statement>, conn: &mut Conn) -> Result<Vec<Output>> {
    let mut out = Vec::with_capacity(run.len());
    for (sql, args) in run {
        let results = sqlx::Executor::fetch_many(&mut *conn, bind(sqlx::query(&sql), args));
        out.extend(outputs(results, 1).await?);
    }
    Ok(out)
}

/// PostgreSQL: the statements in one round trip — the simple-query protocol runs several
/// statements of one message in order, inside the open transaction (the first failure aborts it).
async fn pg_script(run: &[Statement], conn: &mut Conn) -> Result<Vec<Output>> {
    let (sql, named) = script(run)?;
    let begin = conn.take_begin();
    let sql = if begin { format!("BEGIN;\n{sql}") } else { sql };
    match outputs(sqlx::raw_sql(&sql).fetch_many(&mut *conn), run.len() + usize::from(begin)).await {
        // BEGIN's own (empty) output is not the caller's.
        Ok(out) if begin => Ok(out.into_iter().skip(1).collect()),
        Err(Error::Db(e)) if prepared::is_unprepared(&e) => {
            // The transaction is aborted: prepare what this connection lacks, and have the
            // caller run its transaction again (`write_tx!` retries this error).
            prepared::recover_in_transaction(conn, &named).await?;
            Err(Error::Db(e))
        }
        other => other,
    }
}

/// Binds a statement's values, in `$1…$n` order.
fn bind<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    args: Vec<Arg>,
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for a in args {
        q = match a {
            Arg::Text(v) => q.bind(v),
            Arg::Int(v) => q.bind(v),
        };
    }
    q
}

/// Statements as one PostgreSQL simple query, which takes no bound values: each one `EXECUTE`d
/// under its prepared name with its values as literals ([`prepared`]), or, where it has no name,
/// its own text with the values as literals (see [`literal`]). Also returns the texts that went
/// by name.
fn script(run: &[Statement]) -> Result<(String, Vec<&str>)> {
    let mut sql = String::new();
    let mut named = Vec::new();
    for (plain, args) in run {
        match (pg_prepared() && prepared::in_use()).then(|| prepared::form(plain)) {
            Some(prepared::Form::Named { name, params }) if args.len() >= params => {
                sql.push_str("EXECUTE ");
                sql.push_str(&name);
                for (i, arg) in args.iter().take(params).enumerate() {
                    sql.push_str(if i == 0 { "(" } else { ", " });
                    sql.push_str(&literal(arg)?);
                }
                if params > 0 {
                    sql.push(')');
                }
                named.push(plain.as_str());
            }
            _ => sql.push_str(&inline(plain, args)?),
        }
        sql.push_str(";\n");
    }
    Ok((sql, named))
}

/// Every `$N` in `sql`, in order: where it stands (byte range) and N. A `$` without digits is not
/// one. The SQL kassa writes has no `$` in literals.
pub(crate) fn placeholders(sql: &str) -> impl Iterator<Item = (std::ops::Range<usize>, usize)> + '_ {
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
fn renumber(sql: &str, offset: usize) -> String {
    let Ok(out) = replace_placeholders::<std::convert::Infallible>(sql, |n| Ok(format!("${}", n + offset)));
    out
}

/// Fails on the first statement that did not change the rows it had to.
fn check(changed: &[u64], expected: Vec<Expected>) -> Result<()> {
    for (n, e) in changed.iter().zip(expected) {
        if let Some((rows, what)) = e
            && *n != rows
        {
            return Err(Error::internal(what));
        }
    }
    Ok(())
}

/// The rows each statement of a multi-statement query changed, from its results in order; there
/// must be one per statement (batch statements return no rows).
async fn rows_changed(results: Results<'_>, count: usize) -> Result<Vec<u64>> {
    Ok(outputs(results, count).await?.iter().map(|o| o.changed).collect())
}

/// The results of a multi-statement query as they stream in.
type Results<'a> = futures_util::stream::BoxStream<
    'a,
    std::result::Result<sqlx::Either<sqlx::any::AnyQueryResult, sqlx::any::AnyRow>, sqlx::Error>,
>;

/// What each statement of a multi-statement query gave, in order: its rows come first, then its
/// result. There must be one result per statement.
async fn outputs(mut results: Results<'_>, count: usize) -> Result<Vec<Output>> {
    use futures_util::TryStreamExt as _;
    let mut out = Vec::with_capacity(count);
    let mut rows = Vec::new();
    while let Some(item) = results.try_next().await? {
        match item {
            sqlx::Either::Left(done) => {
                out.push(Output { changed: done.rows_affected(), rows: std::mem::take(&mut rows) });
            }
            sqlx::Either::Right(row) => rows.push(row),
        }
    }
    if out.len() != count || !rows.is_empty() {
        return Err(Error::internal("a statement of a multi-statement query gave no result"));
    }
    Ok(out)
}

/// Whether PostgreSQL batches go in one round trip (`KASSA_PG_BATCH_ONE_TRIP=0` sends them
/// statement by statement, for benchmarking the difference).
pub(crate) fn pg_one_trip() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KASSA_PG_BATCH_ONE_TRIP").map_or(true, |v| v != "0"))
}

/// Whether PostgreSQL batch statements go as prepared statements (`KASSA_PG_PREPARED=0` writes
/// them with literals, for benchmarking the difference).
fn pg_prepared() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("KASSA_PG_PREPARED").map_or(true, |v| v != "0"))
}

/// A value as a PostgreSQL literal. Text is an escape-string constant (`E'…'`, backslash and
/// quote escaped), whose meaning does not depend on `standard_conforming_strings`; PostgreSQL
/// text cannot hold NUL, so a value with one is refused as it would be when bound.
fn literal(a: &Arg) -> Result<String> {
    Ok(match a {
        Arg::Int(Some(v)) => v.to_string(),
        Arg::Text(Some(v)) => {
            if v.contains('\0') {
                return Err(Error::invalid("invalid_text", "text may not contain NUL characters"));
            }
            let mut out = String::with_capacity(v.len() + 4);
            out.push_str("E'");
            for c in v.chars() {
                match c {
                    '\'' => out.push_str("''"),
                    '\\' => out.push_str("\\\\"),
                    c => out.push(c),
                }
            }
            out.push('\'');
            out
        }
        Arg::Int(None) | Arg::Text(None) => "NULL".to_string(),
    })
}

/// `sql` with every `$N` replaced by the literal of `args[N-1]`.
fn inline(sql: &str, args: &[Arg]) -> Result<String> {
    replace_placeholders(sql, |n| {
        let arg = args
            .get(n.wrapping_sub(1))
            .ok_or_else(|| Error::internal(format!("batch statement has no value for ${n}")))?;
        literal(arg)
    })
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

    /// Appended rows run after the statements, as one INSERT per table and columns, in the order
    /// they were appended; each added item gets its own count back, in the order it was added.
    #[test]
    fn appended_rows_go_in_as_one_insert_per_table() {
        let mut b = Batch::new();
        b.add("UPDATE a SET x = $1 WHERE k = $2", vec![Arg::Int(Some(1)), Arg::Text(Some("k".into()))]);
        b.append("INSERT INTO log (a, b)", "($1, 'x', $2)", vec![Arg::Int(Some(10)), Arg::Int(Some(11))], "log");
        b.append("INSERT INTO out (m)", "($1)", vec![Arg::Text(Some("m1".into()))], "out");
        b.add("DELETE FROM c WHERE k = $1", vec![Arg::Int(Some(2))]);
        b.append("INSERT INTO log (a, b)", "($1, 'x', $2)", vec![Arg::Int(Some(20)), Arg::Int(Some(21))], "log");
        assert_eq!(b.len(), 5);
        let (run, tally, expected) = b.executed();
        let sql: Vec<&str> = run.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            sql,
            [
                "UPDATE a SET x = $1 WHERE k = $2",
                "DELETE FROM c WHERE k = $1",
                "INSERT INTO log (a, b) VALUES ($1, 'x', $2), ($3, 'x', $4)",
                "INSERT INTO out (m) VALUES ($1)",
            ]
        );
        let log_args: Vec<i64> = run[2].1.iter().map(|a| if let Arg::Int(Some(v)) = a { *v } else { -1 }).collect();
        assert_eq!(log_args, [10, 11, 20, 21]);
        // Both log rows in: each counts 1; a short group counts 0 for each of its rows.
        assert_eq!(tally.per_item(&[1, 0, 2, 1]), [1, 1, 1, 0, 1]);
        assert_eq!(tally.per_item(&[1, 1, 1, 1]), [1, 0, 1, 1, 0]);
        assert!(check(&tally.per_item(&[1, 0, 2, 1]), expected.clone()).is_ok());
        assert!(check(&tally.per_item(&[1, 1, 1, 1]), expected).is_err());
    }

    #[test]
    fn inlines_values_as_literals() {
        let sql = inline(
            "UPDATE t SET a = $1, b = $2, c = $3 WHERE d = $10 AND e = $4",
            &[
                Arg::Int(Some(-5)),
                Arg::Text(Some("it's \\' OR 1=1 --".into())),
                Arg::Text(None),
                Arg::Text(Some("茶".into())),
                Arg::Int(None),
                Arg::Int(None),
                Arg::Int(None),
                Arg::Int(None),
                Arg::Int(None),
                Arg::Int(Some(42)),
            ],
        )
        .unwrap();
        assert_eq!(sql, "UPDATE t SET a = -5, b = E'it''s \\\\'' OR 1=1 --', c = NULL WHERE d = 42 AND e = E'茶'");
        assert!(inline("x = $2", &[Arg::Int(Some(1))]).is_err());
        assert!(literal(&Arg::Text(Some("a\0b".into()))).is_err());
        assert_eq!(inline("x $ y", &[]).unwrap(), "x $ y");
    }

    #[test]
    fn scripts_execute_prepared_statements_with_literal_values() {
        let update = "UPDATE batch_unit_test SET a = $1, b = $2 WHERE c = $3";
        let constant = "DELETE FROM batch_unit_test WHERE c = 'x'";
        let run: Vec<Statement> = vec![
            (update.into(), vec![Arg::Int(Some(7)), Arg::Text(Some("it's".into())), Arg::Text(None)]),
            (constant.into(), vec![]),
        ];
        let (sql, named) = script(&run).unwrap();
        let name = |text: &str| match prepared::form(text) {
            prepared::Form::Named { name, .. } => name.to_string(),
            prepared::Form::Literal => panic!("a new text gets a name"),
        };
        assert_eq!(sql, format!("EXECUTE {}(7, E'it''s', NULL);\nEXECUTE {};\n", name(update), name(constant)));
        assert_eq!(named, vec![update, constant]);
        // Too few values: written out, which names the missing one.
        let short: Vec<Statement> = vec![(update.into(), vec![Arg::Int(Some(1))])];
        assert!(script(&short).is_err());
        // Once prepared statements are found not to stay on their connections, written out.
        prepared::give_up();
        let (sql, named) = script(&run).unwrap();
        assert_eq!(
            sql,
            "UPDATE batch_unit_test SET a = 7, b = E'it''s' WHERE c = NULL;\nDELETE FROM batch_unit_test WHERE c = 'x';\n"
        );
        assert!(named.is_empty());
    }
}

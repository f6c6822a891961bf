//! Write statements sent together. The SQLite driver runs every statement on its own thread, and
//! each statement is a round trip to it; on the single writer those round trips, not SQLite, set
//! the pace (BENCHMARKS.md). A batch goes to SQLite as one multi-statement query — one round trip,
//! each statement taking its own numbered parameters — and to PostgreSQL one statement at a time
//! (its protocol prepares one statement per query). Either way the statements run in order inside
//! the caller's transaction, and the caller gets the total of rows changed to check.

use crate::store::Conn;

use crate::error::Result;

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

#[derive(Debug, Default)]
pub struct Batch {
    /// (SQL as written, SQL with parameters renumbered for the joined form, its values).
    statements: Vec<(String, String, Vec<Arg>)>,
    /// For [`Batch::run_checked`]: rows each statement must change, and what it means if not.
    expected: Vec<Option<(u64, String)>>,
    bound: usize,
}

/// Shifts every `$N` in `sql` by `offset`. The SQL kassa writes has no `$` in literals.
fn renumber(sql: &str, offset: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        out.push(c);
        if c != '$' {
            continue;
        }
        let mut n = 0_usize;
        let mut digits = false;
        while let Some(&(_, d)) = chars.peek() {
            let Some(v) = d.to_digit(10) else { break };
            n = n * 10 + v as usize;
            digits = true;
            chars.next();
        }
        if digits {
            out.push_str(&(n + offset).to_string());
        }
    }
    out
}

impl Batch {
    pub fn new() -> Self {
        Batch::default()
    }

    /// Adds a statement with its own `$1…$n` parameters.
    pub fn add(&mut self, sql: &str, args: Vec<Arg>) -> &mut Self {
        let shifted = renumber(sql, self.bound);
        self.bound += args.len();
        self.statements.push((sql.to_string(), shifted, args));
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

    /// Runs the statements; fails (the caller's transaction then rolls back) on the first one
    /// that did not change the rows it had to.
    pub async fn run_checked(mut self, conn: &mut Conn) -> Result<()> {
        let expected = std::mem::take(&mut self.expected);
        let changed = self.run_each(conn).await?;
        for (n, e) in changed.iter().zip(expected) {
            if let Some((rows, what)) = e
                && *n != rows
            {
                return Err(crate::error::Error::internal(what));
            }
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }

    /// Statements added so far.
    pub fn len(&self) -> usize {
        self.statements.len()
    }

    /// Runs the statements in order; returns the rows they changed, summed.
    pub async fn run(self, conn: &mut Conn) -> Result<u64> {
        Ok(self.run_each(conn).await?.iter().sum())
    }

    /// Runs the statements in order; returns the rows each one changed.
    pub async fn run_each(self, conn: &mut Conn) -> Result<Vec<u64>> {
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
        let count = self.statements.len();
        if conn.backend_name() == "SQLite" {
            use futures_util::TryStreamExt as _;
            let sql = self.statements.iter().map(|s| s.1.as_str()).collect::<Vec<_>>().join(";\n");
            let args: Vec<Arg> = self.statements.into_iter().flat_map(|s| s.2).collect();
            // One result per statement, in order (these statements return no rows). sqlx 0.8
            // deprecates multi-statement queries in favour of `raw_sql`, which cannot bind values;
            // the SQLite driver still runs them, and this is the one place that relies on it.
            #[allow(deprecated)]
            let mut results = bind(sqlx::query(&sql), args).fetch_many(conn);
            let mut rows = Vec::with_capacity(count);
            while let Some(item) = results.try_next().await? {
                if let sqlx::Either::Left(done) = item {
                    rows.push(done.rows_affected());
                }
            }
            if rows.len() != count {
                return Err(crate::error::Error::internal("a batch statement gave no result"));
            }
            return Ok(rows);
        }
        let mut rows = Vec::with_capacity(count);
        for (sql, _, args) in self.statements {
            rows.push(bind(sqlx::query(&sql), args).execute(&mut *conn).await?.rows_affected());
        }
        Ok(rows)
    }
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
}

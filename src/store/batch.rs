//! Write statements sent together. On PostgreSQL a batch goes in one round trip (pipelined bound
//! statements, [`super::engine::pg`]); on SQLite its statements run one after another in place
//! (there are no round trips to save). Either way the statements run in order inside the
//! caller's transaction, and the caller gets the rows each one changed to check.

use crate::error::{Error, Result};
use crate::store::Conn;
pub use crate::store::sql::{Arg, Output};

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
                sql.push_str(&crate::store::sql::renumber(&group.tuple, args.len()));
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

/// Statements of a batch whose rows changed decide the command, each with the caller's name for
/// it (a stock hold, a limit's count): after the run, the first of them that did not change the
/// rows it had to, by name, so the caller never counts statement positions.
#[derive(Debug)]
pub struct Named<T> {
    /// The item's place in the batch, the rows it must change, its name.
    expected: Vec<(usize, u64, T)>,
}

impl<T: Copy> Named<T> {
    pub fn new() -> Self {
        Named { expected: Vec::new() }
    }

    /// Adds `sql` to `batch`: it must change `rows` rows, or `name` is what fell short.
    pub fn add(&mut self, batch: &mut Batch, sql: &str, args: Vec<Arg>, rows: u64, name: T) {
        self.expected.push((batch.len(), rows, name));
        batch.add(sql, args);
    }

    /// The first named statement, in the order added, that did not change its rows.
    fn first_short(&self, changed: &[u64]) -> Option<T> {
        self.expected.iter().find(|(at, rows, _)| changed.get(*at) != Some(rows)).map(|(_, _, name)| *name)
    }
}

impl<T: Copy> Default for Named<T> {
    fn default() -> Self {
        Named::new()
    }
}

impl Batch {
    /// Runs the statements in order. A named statement ([`Named`]) that did not change its rows
    /// is answered by its name (the caller decides what it means, and rolls back); then, as
    /// [`Batch::run_checked`], the first other statement that did not change the rows it had to
    /// fails the command.
    pub async fn run_named<T: Copy>(self, conn: &mut Conn, named: &Named<T>) -> Result<Option<T>> {
        let (run, tally, expected) = self.executed();
        let changed = tally.per_item(&run_statements(run, conn).await?);
        if let Some(short) = named.first_short(&changed) {
            return Ok(Some(short));
        }
        check(&changed, expected).map(|()| None)
    }
}

impl Batch {
    /// Runs the statements as [`Batch::run_checked`] does, at the latest with the transaction's
    /// commit: on PostgreSQL they go in front of the transaction's next statements, or with its
    /// `COMMIT`, in the same round trip ([`PgTx::defer`]), so the row locks they take are held
    /// for no round trip of their own. A statement that did not change the rows it had to fails
    /// whatever is sent next, and the transaction. For a command's last writes: nothing between
    /// this call and the commit may depend on their having succeeded, other than by reading the
    /// database (which sends them first). On SQLite they run now.
    ///
    /// [`PgTx::defer`]: crate::store::engine::pg_tx::PgTx::defer
    pub async fn run_checked_by_commit(self, conn: &mut Conn) -> Result<()> {
        let Conn::Pg(tx) = conn else { return self.run_checked(conn).await };
        let (run, tally, expected) = self.executed();
        let checks = tally.per_statement(expected);
        tx.defer(run, checks).await
    }

    /// [`Batch::run_named`], then the commit: on PostgreSQL in the same round trip, each count
    /// checked by the database ([`PgTx::commit_with`]). `Some(name)`: that named statement fell
    /// short and the transaction was rolled back; a statement after this begins a new one (to
    /// read what the refusal says). `None`: on PostgreSQL committed, and nothing more may run in
    /// the transaction; on SQLite committed when the command ends, as always.
    ///
    /// [`PgTx::commit_with`]: crate::store::engine::pg_tx::PgTx::commit_with
    pub async fn run_named_and_commit<T: Copy>(self, conn: &mut Conn, named: &Named<T>) -> Result<Option<T>> {
        let Conn::Pg(tx) = conn else { return self.run_named(conn, named).await };
        let (run, tally, expected) = self.executed();
        let mut checks = tally.per_statement(expected);
        let statement_of = |at: usize| match tally.items.get(at) {
            Some(Item::Statement(i)) => Some(*i),
            _ => None,
        };
        for (at, rows, _) in &named.expected {
            if let Some(slot) = statement_of(*at).and_then(|i| checks.get_mut(i)) {
                *slot = Some((*rows, String::new()));
            }
        }
        let counts = checks.iter().map(|c| c.as_ref().map(|(rows, _)| *rows)).collect();
        let Some(short) = tx.commit_with(run, counts).await? else { return Ok(None) };
        let first = short.first().copied();
        if let Some((_, _, name)) = named.expected.iter().find(|(at, _, _)| statement_of(*at) == first) {
            return Ok(Some(*name));
        }
        let what = first.and_then(|i| checks.get_mut(i)).and_then(Option::take).map(|(_, what)| what);
        Err(Error::internal(what.unwrap_or_else(|| "a statement fell short".to_string())))
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
    /// What each executed statement must change: a statement what was expected of it; a group's
    /// INSERT all of its rows, named by its first row's failure.
    fn per_statement(&self, expected: Vec<Expected>) -> Vec<Expected> {
        let mut out: Vec<Expected> = vec![None; self.first_group + self.group_rows.len()];
        for (item, e) in self.items.iter().zip(expected) {
            match item {
                Item::Statement(i) => {
                    if let Some(slot) = out.get_mut(*i) {
                        *slot = e;
                    }
                }
                Item::Row(g) => {
                    let rows = self.group_rows.get(*g).copied().unwrap_or(0);
                    if let Some(slot) = out.get_mut(self.first_group + g)
                        && slot.is_none()
                    {
                        *slot = e.map(|(_, what)| (rows, what));
                    }
                }
            }
        }
        out
    }

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
    Ok(conn.run_all(&run).await?.iter().map(|r| r.changed).collect())
}

/// Runs statements one after another inside the connection's transaction, and returns what each
/// gave — on PostgreSQL in one round trip. For statements where nothing is computed between one
/// and the next: a lock, then reads made under it. Each statement starts after the one before
/// has finished, waits included, and on PostgreSQL reads with a snapshot of its own taken then,
/// so a read after a `FOR UPDATE` sees what the lock's holder committed. The first failure fails
/// the call (and on PostgreSQL aborts the transaction).
pub async fn together(conn: &mut Conn, run: Vec<(&str, Vec<Arg>)>) -> Result<Vec<Output>> {
    let run: Vec<Statement> = run.into_iter().map(|(sql, args)| (sql.to_string(), args)).collect();
    conn.run_all(&run).await
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_statement_that_changed_too_few_rows_is_answered_by_its_name() {
        let mut b = Batch::new();
        let mut named = Named::new();
        named.add(&mut b, "UPDATE s SET r = r + 1 WHERE k = 'a'", vec![], 1, 'a');
        b.expect("INSERT INTO o (k) VALUES ('x')", vec![], 1, "order insert");
        named.add(&mut b, "UPDATE s SET r = r + 1 WHERE k = 'b'", vec![], 1, 'b');
        assert_eq!(named.first_short(&[1, 1, 1]), None);
        assert_eq!(named.first_short(&[1, 1, 0]), Some('b'));
        assert_eq!(named.first_short(&[0, 1, 0]), Some('a'));
        assert_eq!(named.first_short(&[1, 1]), Some('b'));
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
}

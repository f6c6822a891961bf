//! A PostgreSQL transaction on a pooled connection, with as few round trips as its statements
//! allow: `BEGIN` goes in front of its first statements, and checked writes it defers
//! ([`PgTx::defer`]) go in front of its next statements or with its `COMMIT`.
//!
//! Why defer: a write that takes a row lock holds it until the `COMMIT` is done. Sent on their
//! own, the writes come back to kassa, and the `COMMIT` goes out only when kassa has read them —
//! on a busy machine, milliseconds in which every other buyer of that stock row or order waits.
//! Sent with the `COMMIT`, the lock is held for the writes and the commit's flush alone, and the
//! transaction costs one round trip less. What the writes must change is then checked by the
//! database ([`super::fold`]): a shortfall fails the statement, and the `COMMIT` after it rolls
//! back.

use futures_util::future::join;

use super::pg::{Flown, Landed, PgClient, PgPool, round_trip};
use crate::error::{Error, Result};
use crate::store::sql::{Arg, Output};

/// A statement as written, with its values.
type Statement = (String, Vec<Arg>);
/// Rows a deferred statement must change, and what it means if not.
pub type Expected = Option<(u64, String)>;

/// Most statements deferred at once; past this they are sent (a named limit on what a
/// transaction holds back).
const DEFERRED_MAX: usize = 256;

/// A transaction on a pooled connection. `BEGIN` goes with its first statement(s); committed or
/// rolled back, the connection goes back to the pool; dropped once `BEGIN` may have gone (a
/// cancelled request), the connection is closed, which rolls the transaction back on the server.
pub struct PgTx {
    client: Option<PgClient>,
    begin: &'static str,
    begun: bool,
    /// Committed by a flight that ended in its `COMMIT` ([`PgTx::commit_with`]): nothing more
    /// runs in it.
    committed: bool,
    /// Statements deferred to the next flight, with what each must change.
    deferred: Vec<(Statement, Expected)>,
}

impl std::fmt::Debug for PgTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTx")
            .field("begun", &self.begun)
            .field("committed", &self.committed)
            .field("deferred", &self.deferred.len())
            .finish()
    }
}

/// What a flight of the transaction's own statements came to, after the deferred ones went in
/// front of them.
enum Sent {
    Ran(Vec<Output>),
    /// The transaction's own statements (their places) that fell short of their checks.
    Short(Vec<usize>),
}

impl PgPool {
    /// A transaction on a connection of its own, begun with `begin` (sent with its first
    /// statements).
    pub async fn begin(&self, begin: &'static str) -> Result<PgTx> {
        Ok(PgTx { client: Some(self.get().await?), begin, begun: false, committed: false, deferred: Vec::new() })
    }
}

impl PgTx {
    fn client(&self) -> Result<&PgClient> {
        if self.committed {
            return Err(Error::internal("a statement after its transaction committed"));
        }
        self.client.as_ref().ok_or_else(|| Error::internal("the transaction has ended"))
    }

    /// Whether `BEGIN` is still to be sent.
    pub fn begin_pending(&self) -> bool {
        !self.begun
    }

    /// `BEGIN` to send in front of the next statements, once.
    fn take_begin(&mut self) -> Option<&'static str> {
        (!std::mem::replace(&mut self.begun, true)).then_some(self.begin)
    }

    /// Defers `statements`, each to change the rows `expected` says, to the transaction's next
    /// flight: its next statements, or its `COMMIT`. A shortfall fails that flight with the
    /// statement's `what` (and the transaction). Sent now where the database cannot check them,
    /// or one statement at a time is configured.
    pub async fn defer(&mut self, statements: Vec<Statement>, expected: Vec<Expected>) -> Result<()> {
        self.client()?;
        self.deferred.extend(statements.into_iter().zip(expected.into_iter().chain(std::iter::repeat(None))));
        if self.deferred.is_empty() {
            return Ok(());
        }
        let by_database = self.deferred.iter().all(|((sql, _), e)| e.is_none() || super::fold::checkable(sql));
        if !self.client()?.flight.pipeline || !by_database || self.deferred.len() > DEFERRED_MAX {
            self.send(&[], Vec::new(), None).await?;
        }
        Ok(())
    }

    /// Sends the deferred statements and then `statements` (each to change the rows `checks`
    /// says) in one flight, followed by `after`. A deferred statement's shortfall is its error.
    async fn send(&mut self, statements: &[Statement], checks: Vec<Option<u64>>, after: Option<&str>) -> Result<Sent> {
        let deferred = std::mem::take(&mut self.deferred);
        let first = deferred.len();
        let mut whats = Vec::with_capacity(first);
        let (all, all_checks) = if deferred.is_empty() {
            (std::borrow::Cow::Borrowed(statements), checks)
        } else {
            let mut all = Vec::with_capacity(first + statements.len());
            let mut all_checks = Vec::with_capacity(first + statements.len());
            for (statement, expected) in deferred {
                all.push(statement);
                all_checks.push(expected.as_ref().map(|(rows, _)| *rows));
                whats.push(expected.map(|(_, what)| what));
            }
            all.extend_from_slice(statements);
            all_checks.extend(checks);
            (std::borrow::Cow::Owned(all), all_checks)
        };
        let begin = self.take_begin();
        let Flown { landed, ended } = self.client()?.flight(begin, &all, &all_checks, after).await;
        if ended {
            // Committed, or rolled back after a failure: the connection is clean.
            self.begun = false;
        }
        match landed? {
            Landed::Ran(mut outputs) => {
                self.committed = ended && after == Some("COMMIT");
                Ok(Sent::Ran(outputs.split_off(first.min(outputs.len()))))
            }
            Landed::Short(at) => match at.iter().find_map(|a| whats.get(*a)) {
                Some(what) => {
                    let what = what.clone().unwrap_or_else(|| "a deferred statement fell short".to_string());
                    Err(Error::internal(what))
                }
                None => Ok(Sent::Short(at.iter().map(|a| a - first).collect())),
            },
        }
    }

    /// Runs one statement in the transaction.
    pub async fn run(&mut self, sql: &str, args: Vec<Arg>, limit: Option<usize>) -> Result<Output> {
        if !self.deferred.is_empty() {
            let Sent::Ran(mut outputs) = self.send(&[(sql.to_string(), args)], Vec::new(), None).await? else {
                return Err(Error::internal("an unchecked statement fell short"));
            };
            let mut out = outputs.pop().unwrap_or_default();
            if let Some(limit) = limit {
                out.rows.truncate(limit);
            }
            return Ok(out);
        }
        let begin = self.take_begin();
        let client = self.client()?;
        match begin {
            None => client.run(sql, &args, limit).await,
            Some(begin) => {
                let stmt = client.prepare(sql, &args).await?;
                round_trip();
                let (began, out) = join(client.simple(begin), client.execute(&stmt, &args, limit)).await;
                began?;
                out
            }
        }
    }

    /// Runs statements in the transaction in one round trip ([`PgClient::flight`]).
    pub async fn pipeline(&mut self, statements: &[Statement]) -> Result<Vec<Output>> {
        match self.send(statements, Vec::new(), None).await? {
            Sent::Ran(outputs) => Ok(outputs),
            Sent::Short(_) => Err(Error::internal("an unchecked statement fell short")),
        }
    }

    /// Runs statements without parameters or results in the transaction.
    pub async fn exec(&mut self, sql: &str) -> Result<()> {
        if !self.deferred.is_empty() {
            self.send(&[], Vec::new(), None).await?;
        }
        match self.take_begin() {
            Some(begin) => self.client()?.exec(&format!("{begin}; {sql}")).await,
            None => self.client()?.exec(sql).await,
        }
    }

    /// Runs `statements` and commits, in one flight with whatever was deferred: the statements
    /// at the places `Some` returns fell short of their `checks`, and the transaction was rolled
    /// back (a statement after this begins a new one); `None`: committed, and nothing more runs
    /// in this transaction.
    pub async fn commit_with(
        &mut self,
        statements: Vec<Statement>,
        checks: Vec<Option<u64>>,
    ) -> Result<Option<Vec<usize>>> {
        match self.send(&statements, checks, Some("COMMIT")).await? {
            Sent::Ran(_) => Ok(None),
            Sent::Short(at) => Ok(Some(at)),
        }
    }

    /// Commits, with whatever was deferred.
    pub async fn commit(mut self) -> Result<()> {
        if self.committed {
            self.client = None;
            return Ok(());
        }
        if !self.deferred.is_empty() {
            // On an error not acknowledged as the end, `self` is dropped begun: closed.
            self.send(&[], Vec::new(), Some("COMMIT")).await?;
            self.client = None;
            return Ok(());
        }
        self.end("COMMIT").await
    }

    /// Rolls back; what was deferred is never sent.
    pub async fn rollback(mut self) -> Result<()> {
        self.deferred.clear();
        if self.committed {
            self.client = None;
            return Err(Error::internal("a rollback after its transaction committed"));
        }
        self.end("ROLLBACK").await
    }

    /// On an error (or if cancelled) before the end is acknowledged, `self` is dropped begun and
    /// its connection closed.
    async fn end(mut self, statement: &str) -> Result<()> {
        if self.begun {
            self.client()?.exec(statement).await?;
            self.begun = false;
        }
        self.client = None;
        Ok(())
    }
}

impl Drop for PgTx {
    fn drop(&mut self) {
        if self.begun
            && let Some(client) = self.client.take()
        {
            // Out of the pool, and closed: the server rolls the transaction back.
            drop(deadpool_postgres::Object::take(client.obj));
        }
    }
}

//! The transaction the store's commands run on, whichever database carries it: PostgreSQL's on a
//! pooled connection ([`PgTx`]), SQLite's on the writer connection ([`NativeTx`]) or, for a
//! consistent read, on a reader of its own ([`ReadTx`]). `&mut **tx` is a [`Conn`], which the
//! store's statements run on (`query(…).execute(&mut **tx)`).

use super::pg_tx::PgTx;
use super::sqlite::{NativeConn, ReadTx};
use crate::error::{Error, Result};
use crate::store::dialect::DbKind;
use crate::store::sql::{Arg, Executor, Output};

/// A transaction: its [`Conn`], borrowed for as long as the command runs.
#[derive(Debug)]
pub struct Tx<'c> {
    conn: Conn,
    _borrow: std::marker::PhantomData<&'c mut ()>,
}

/// The connection of a [`Tx`].
#[derive(Debug)]
pub enum Conn {
    Pg(PgTx),
    Native(NativeTx),
    Read(ReadTx),
}

/// The SQLite writer, held for the length of one transaction; rolled back if dropped open.
#[derive(Debug)]
pub struct NativeTx(tokio::sync::OwnedMutexGuard<NativeConn>);

impl Drop for NativeTx {
    fn drop(&mut self) {
        if self.0.in_transaction() {
            // Best effort: the next BEGIN would fail on a connection left in a transaction.
            if let Err(e) = self.0.exec("ROLLBACK") {
                tracing::error!(error = %e, "rolling back an abandoned SQLite write transaction failed");
            }
        }
    }
}

impl std::ops::Deref for Tx<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl std::ops::DerefMut for Tx<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        &mut self.conn
    }
}

impl From<Conn> for Tx<'static> {
    fn from(conn: Conn) -> Self {
        Tx { conn, _borrow: std::marker::PhantomData }
    }
}

impl Tx<'static> {
    /// Opens a write transaction (`BEGIN IMMEDIATE`) on the SQLite writer, waiting for it.
    pub async fn begin_native(writer: &std::sync::Arc<tokio::sync::Mutex<NativeConn>>) -> Result<Self> {
        let mut guard = std::sync::Arc::clone(writer).lock_owned().await;
        guard.exec("BEGIN IMMEDIATE")?;
        Ok(Conn::Native(NativeTx(guard)).into())
    }
}

impl Tx<'_> {
    pub async fn commit(self) -> Result<()> {
        match self.conn {
            Conn::Pg(tx) => tx.commit().await,
            // The commit waits for the disk; on a thread of its own, so the commands behind it
            // keep running up to their turn (and gather into the next batch) meanwhile.
            Conn::Native(mut n) => tokio::task::spawn_blocking(move || n.0.exec("COMMIT"))
                .await
                .map_err(|e| Error::internal(format!("commit thread: {e}")))?,
            Conn::Read(r) => r.end(),
        }
    }

    pub async fn rollback(self) -> Result<()> {
        match self.conn {
            Conn::Pg(tx) => tx.rollback().await,
            Conn::Native(mut n) => n.0.exec("ROLLBACK"),
            Conn::Read(r) => r.end(),
        }
    }
}

impl Conn {
    /// Which database the transaction is on ([`DbKind`]: its row locks).
    pub fn kind(&self) -> DbKind {
        match self {
            Conn::Pg(_) => DbKind::Postgres,
            Conn::Native(_) | Conn::Read(_) => DbKind::Sqlite,
        }
    }

    /// PostgreSQL: whether this transaction's BEGIN is still to be sent (it goes with the first
    /// statements).
    pub fn begin_pending(&self) -> bool {
        matches!(self, Conn::Pg(tx) if tx.begin_pending())
    }

    /// Runs statements without parameters or results (`SAVEPOINT …`, a migration's script).
    pub async fn exec(&mut self, sql: &str) -> Result<()> {
        match self {
            Conn::Pg(tx) => tx.exec(sql).await,
            Conn::Native(n) => n.0.exec(sql),
            Conn::Read(r) => r.conn()?.exec(sql),
        }
    }

    /// Runs statements in order and returns what each gave: on PostgreSQL in one round trip
    /// ([`PgTx::pipeline`]), on SQLite one after another (in place: there are no round trips to
    /// save).
    pub async fn run_all(&mut self, statements: &[(String, Vec<Arg>)]) -> Result<Vec<Output>> {
        match self {
            Conn::Pg(tx) => tx.pipeline(statements).await,
            Conn::Native(n) => statements.iter().map(|(sql, args)| n.0.run(sql, args, None)).collect(),
            Conn::Read(r) => {
                let conn = r.conn()?;
                statements.iter().map(|(sql, args)| conn.run(sql, args, None)).collect()
            }
        }
    }
}

impl Executor for &mut Conn {
    async fn run(self, sql: &str, args: Vec<Arg>, limit: Option<usize>) -> Result<Output> {
        match self {
            Conn::Pg(tx) => tx.run(sql, args, limit).await,
            Conn::Native(n) => n.0.run(sql, &args, limit),
            Conn::Read(r) => r.conn()?.run(sql, &args, limit),
        }
    }
}

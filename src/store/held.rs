//! PostgreSQL connections kept between commands, so a command's end costs no round trip.
//!
//! sqlx's pool sends every connection handed back to it a Sync message and waits for the answer
//! (a ping: after a cancelled query the connection may still owe replies, and the ping drains
//! them). That is one round trip per command on top of the command's own — four of a checkout's
//! eleven, each a wake-up of a PostgreSQL backend and of kassa. [`HeldConns`] keeps the
//! connections of the store's commands checked out between commands, in a stack of its own:
//! - a command that ends cleanly ([`Held::done`]) puts its connection back on the stack, with no
//!   round trip;
//! - one that does not — an error, a request cancelled mid-query — drops it to sqlx, which pings
//!   it as before (or closes it, for a transaction left open: [`PgTx`]);
//! - a connection idle on the stack as long as the pool would ping before handing it out again
//!   goes back to the pool instead, where that check happens.
//!
//! Commands wait for a connection in a fair queue of their own (a semaphore, first come first
//! served, as the pool's own queue is), sized to leave a quarter of the pool (at least one
//! connection) to whatever takes connections from the pool directly: workers, the operator's
//! pages, `kassa check`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Executor as _};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Connections idle in the stack, with when each was put there.
#[derive(Debug)]
pub struct HeldConns {
    pool: AnyPool,
    idle: Mutex<Vec<(PoolConnection<Any>, Instant)>>,
    /// One permit per connection the commands may hold at once, idle or in use.
    permits: Arc<Semaphore>,
    /// Idle this long, a connection is handed back to the pool (which checks it) rather than used.
    stale_after: Duration,
}

impl HeldConns {
    pub fn new(pool: AnyPool, max_connections: u32, stale_after: Duration) -> Arc<HeldConns> {
        let held = usize::try_from(max_connections - (max_connections / 4).max(1)).unwrap_or(1).max(1);
        Arc::new(HeldConns {
            pool,
            idle: Mutex::new(Vec::with_capacity(held)),
            permits: Arc::new(Semaphore::new(held)),
            stale_after,
        })
    }

    /// The most recently used idle connection, or one from the pool; waits its turn when the
    /// commands hold all theirs.
    pub async fn take(self: &Arc<Self>) -> Result<Held, sqlx::Error> {
        let permit = Arc::clone(&self.permits).acquire_owned().await.map_err(|_| sqlx::Error::PoolClosed)?;
        let fresh = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            match idle.pop() {
                Some((conn, since)) if since.elapsed() < self.stale_after => Some(conn),
                // The top is the freshest: when it is stale, so is everything under it.
                Some(stale) => {
                    let rest = std::mem::take(&mut *idle);
                    drop(idle);
                    // Back to the pool, which checks each one.
                    drop((stale, rest));
                    None
                }
                None => None,
            }
        };
        let conn = match fresh {
            Some(conn) => conn,
            None => self.pool.acquire().await?,
        };
        Ok(Held { conn, home: Arc::clone(self), _permit: permit })
    }

    /// Runs `run` on a taken connection, then hands the connection back for the next command. On
    /// an error it goes back to the pool instead, which checks it (a reply may still be owed).
    pub async fn with<T, E>(self: &Arc<Self>, run: impl AsyncFnOnce(&mut AnyConnection) -> Result<T, E>) -> Result<T, E>
    where
        E: From<sqlx::Error>,
    {
        let mut conn = self.take().await?;
        let out = run(&mut conn).await?;
        conn.done();
        Ok(out)
    }

    /// Every connection on the stack has its permit's place: there is always room.
    fn put(&self, conn: PoolConnection<Any>) {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).push((conn, Instant::now()));
    }

    /// Hands every idle connection back to the pool and takes no more (before the pool is
    /// closed, which waits for them all).
    pub fn release_all(&self) {
        self.permits.close();
        let idle = std::mem::take(&mut *self.idle.lock().unwrap_or_else(PoisonError::into_inner));
        drop(idle);
    }
}

/// A connection taken from [`HeldConns`]. Dropped without [`Held::done`], it goes back to the
/// pool, which checks it.
#[derive(Debug)]
pub struct Held {
    conn: PoolConnection<Any>,
    home: Arc<HeldConns>,
    /// Released after the connection is back (fields drop in order).
    _permit: OwnedSemaphorePermit,
}

impl Held {
    /// The command ended cleanly: the connection owes no reply and holds no transaction.
    pub fn done(self) {
        let Held { conn, home, _permit } = self;
        home.put(conn);
    }

    /// Closes the connection when dropped instead of handing it back (a transaction may be open
    /// on it: closing ends it on the server).
    fn close_on_drop(&mut self) {
        self.conn.close_on_drop();
    }
}

impl std::ops::Deref for Held {
    type Target = AnyConnection;
    fn deref(&self) -> &AnyConnection {
        &self.conn
    }
}

impl std::ops::DerefMut for Held {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        &mut self.conn
    }
}

/// A PostgreSQL transaction on a [`Held`] connection. Its BEGIN is not a round trip of its own
/// where that can be helped: it goes in front of the transaction's first statements when they
/// are a script ([`PgTx::take_begin`], as a command's first reads are), else just before its first
/// statement; a transaction that sends nothing sends no BEGIN and no COMMIT. Committed or rolled
/// back, the connection goes back to the stack; dropped once BEGIN may have gone (a cancelled
/// request), the connection is closed, which rolls the transaction back on the server.
#[derive(Debug)]
pub struct PgTx {
    held: Option<Held>,
    /// BEGIN has been sent, or is about to be: from here on the connection may hold a transaction.
    begun: bool,
}

impl PgTx {
    pub async fn begin(conns: &Arc<HeldConns>) -> Result<PgTx, sqlx::Error> {
        Ok(PgTx { held: Some(conns.take().await?), begun: false })
    }

    /// True once, if BEGIN has not been sent: the caller sends it in front of its statements.
    pub fn take_begin(&mut self) -> bool {
        !std::mem::replace(&mut self.begun, true)
    }

    /// Whether BEGIN is still to be sent.
    pub fn begin_pending(&self) -> bool {
        !self.begun
    }

    /// The transaction's connection, BEGIN sent first if it has not been. An error once the
    /// transaction has ended (only [`PgTx::commit`] and [`PgTx::rollback`] end it, and they
    /// consume it).
    pub async fn conn(&mut self) -> Result<&mut AnyConnection, sqlx::Error> {
        let begin = self.take_begin();
        let conn = self.held.as_deref_mut().ok_or_else(ended)?;
        if begin {
            conn.execute(sqlx::raw_sql("BEGIN")).await?;
        }
        Ok(conn)
    }

    pub async fn commit(self) -> Result<(), sqlx::Error> {
        self.end("COMMIT").await
    }

    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        self.end("ROLLBACK").await
    }

    /// On an error (or if cancelled) before the end is acknowledged, `self` is dropped begun and
    /// its connection closed.
    async fn end(mut self, statement: &str) -> Result<(), sqlx::Error> {
        if self.begun {
            self.held.as_deref_mut().ok_or_else(ended)?.execute(sqlx::raw_sql(statement)).await?;
            self.begun = false;
        }
        if let Some(held) = self.held.take() {
            held.done();
        }
        Ok(())
    }
}

/// The error of a statement sent on a transaction that has ended.
pub fn ended() -> sqlx::Error {
    sqlx::Error::Protocol("the transaction has ended".to_string())
}

impl Drop for PgTx {
    fn drop(&mut self) {
        match self.held.take() {
            Some(mut held) if self.begun => held.close_on_drop(),
            // Nothing was sent on it: clean.
            Some(held) => held.done(),
            None => {}
        }
    }
}

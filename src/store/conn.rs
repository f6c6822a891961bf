//! The transaction and connection types the store's commands run on, whichever driver carries
//! them: sqlx's, PostgreSQL's held connections ([`super::held`]) or SQLite's native writer
//! ([`super::native`]).

use sqlx::Any;

use super::{held, native};
use crate::error::Result;

/// A transaction the store's commands run on: sqlx's (reads, SQLite without group commit),
/// PostgreSQL's on a held connection ([`held`]) or SQLite's native writer ([`native`]).
/// `&mut **tx` is a [`Conn`], which sqlx queries run on like on any connection
/// (`.execute(&mut **tx)`).
#[derive(Debug)]
pub struct Tx<'c> {
    conn: Conn,
    _borrow: std::marker::PhantomData<&'c mut ()>,
}

/// The connection of a [`Tx`].
#[derive(Debug)]
pub enum Conn {
    Sqlx(sqlx::Transaction<'static, Any>),
    Pg(held::PgTx),
    Native(NativeTx),
}

/// The native SQLite writer, held for the length of one transaction; rolled back if dropped open.
#[derive(Debug)]
pub struct NativeTx(tokio::sync::OwnedMutexGuard<native::NativeConn>);

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

impl From<sqlx::Transaction<'static, Any>> for Tx<'static> {
    fn from(tx: sqlx::Transaction<'static, Any>) -> Self {
        Tx { conn: Conn::Sqlx(tx), _borrow: std::marker::PhantomData }
    }
}

impl From<held::PgTx> for Tx<'static> {
    fn from(tx: held::PgTx) -> Self {
        Tx { conn: Conn::Pg(tx), _borrow: std::marker::PhantomData }
    }
}

impl Tx<'static> {
    /// Opens a write transaction (`BEGIN IMMEDIATE`) on the native SQLite writer, waiting for it.
    pub async fn begin_native(writer: &std::sync::Arc<tokio::sync::Mutex<native::NativeConn>>) -> Result<Self> {
        let mut guard = std::sync::Arc::clone(writer).lock_owned().await;
        guard.exec("BEGIN IMMEDIATE")?;
        Ok(Tx { conn: Conn::Native(NativeTx(guard)), _borrow: std::marker::PhantomData })
    }
}

impl Tx<'_> {
    pub async fn commit(self) -> std::result::Result<(), sqlx::Error> {
        match self.conn {
            Conn::Sqlx(tx) => tx.commit().await,
            Conn::Pg(tx) => tx.commit().await,
            // The commit waits for the disk; on a thread of its own, so the commands behind it
            // keep running up to their turn (and gather into the next batch) meanwhile.
            Conn::Native(mut n) => tokio::task::spawn_blocking(move || n.0.exec("COMMIT"))
                .await
                .map_err(|e| sqlx::Error::Protocol(format!("commit thread: {e}")))?,
        }
    }

    pub async fn rollback(self) -> std::result::Result<(), sqlx::Error> {
        match self.conn {
            Conn::Sqlx(tx) => tx.rollback().await,
            Conn::Pg(tx) => tx.rollback().await,
            Conn::Native(mut n) => n.0.exec("ROLLBACK"),
        }
    }
}

impl Conn {
    /// PostgreSQL: true once, if this transaction's BEGIN has not been sent — the caller sends it
    /// in front of its statements ([`held::PgTx`]).
    pub fn take_begin(&mut self) -> bool {
        match self {
            Conn::Pg(tx) => tx.take_begin(),
            Conn::Sqlx(_) | Conn::Native(_) => false,
        }
    }

    /// PostgreSQL: whether this transaction's BEGIN is still to be sent.
    pub fn begin_pending(&self) -> bool {
        matches!(self, Conn::Pg(tx) if tx.begin_pending())
    }

    /// `"SQLite"` or `"PostgreSQL"`, as sqlx names them.
    pub fn backend_name(&self) -> &str {
        match self {
            Conn::Sqlx(tx) => tx.backend_name(),
            Conn::Pg(_) => "PostgreSQL",
            Conn::Native(_) => "SQLite",
        }
    }
}

/// Runs a sqlx query on the native writer: its SQL and arguments, at most `limit` rows.
fn run_native<'q, E: sqlx::Execute<'q, Any>>(
    n: &mut NativeTx,
    mut query: E,
    limit: Option<usize>,
) -> std::result::Result<Vec<sqlx::Either<sqlx::any::AnyQueryResult, sqlx::any::AnyRow>>, sqlx::Error> {
    let arguments = query.take_arguments().map_err(sqlx::Error::Encode)?;
    n.0.run(query.sql(), arguments, limit)
}

impl<'c> sqlx::Executor<'c> for &'c mut Conn {
    type Database = Any;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> futures_util::stream::BoxStream<
        'e,
        std::result::Result<sqlx::Either<sqlx::any::AnyQueryResult, sqlx::any::AnyRow>, sqlx::Error>,
    >
    where
        'c: 'e,
        E: 'q + sqlx::Execute<'q, Any>,
    {
        use futures_util::StreamExt as _;
        match self {
            Conn::Sqlx(tx) => (&mut **tx).fetch_many(query),
            Conn::Pg(tx) => {
                use futures_util::TryStreamExt as _;
                futures_util::stream::once(async move { Ok::<_, sqlx::Error>(tx.conn().await?.fetch_many(query)) })
                    .try_flatten()
                    .boxed()
            }
            Conn::Native(n) => match run_native(n, query, None) {
                Ok(items) => futures_util::stream::iter(items.into_iter().map(Ok)).boxed(),
                Err(e) => futures_util::stream::once(std::future::ready(Err(e))).boxed(),
            },
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> futures_util::future::BoxFuture<'e, std::result::Result<Option<sqlx::any::AnyRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + sqlx::Execute<'q, Any>,
    {
        use futures_util::FutureExt as _;
        match self {
            Conn::Sqlx(tx) => (&mut **tx).fetch_optional(query),
            Conn::Pg(tx) => async move { tx.conn().await?.fetch_optional(query).await }.boxed(),
            Conn::Native(n) => {
                let row = run_native(n, query, Some(1)).map(|items| {
                    items.into_iter().find_map(|i| match i {
                        sqlx::Either::Right(row) => Some(row),
                        sqlx::Either::Left(_) => None,
                    })
                });
                std::future::ready(row).boxed()
            }
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [sqlx::any::AnyTypeInfo],
    ) -> futures_util::future::BoxFuture<'e, std::result::Result<sqlx::any::AnyStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        use futures_util::FutureExt as _;
        match self {
            Conn::Sqlx(tx) => (&mut **tx).prepare_with(sql, parameters),
            Conn::Pg(tx) => async move { tx.conn().await?.prepare_with(sql, parameters).await }.boxed(),
            Conn::Native(_) => {
                std::future::ready(Err(sqlx::Error::Protocol("the native SQLite writer prepares by itself".into())))
                    .boxed()
            }
        }
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> futures_util::future::BoxFuture<'e, std::result::Result<sqlx::Describe<Any>, sqlx::Error>>
    where
        'c: 'e,
    {
        use futures_util::FutureExt as _;
        match self {
            Conn::Sqlx(tx) => (&mut **tx).describe(sql),
            Conn::Pg(tx) => async move { tx.conn().await?.describe(sql).await }.boxed(),
            Conn::Native(_) => {
                std::future::ready(Err(sqlx::Error::Protocol("the native SQLite writer does not describe".into())))
                    .boxed()
            }
        }
    }
}

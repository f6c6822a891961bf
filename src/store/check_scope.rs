//! What a run of `kassa check` reads and what it reports, shared by its parts.

use super::{Db, DbKind, sql};
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// What a run of `kassa check` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every row.
    Full,
    /// What changed after the status-log row with this id (the last a clean run had read).
    Since(i64),
}

impl Scope {
    /// The value of the scope's parameter: the log id changes are read after, or NULL (all).
    pub(super) fn arg(self) -> Option<i64> {
        match self {
            Scope::Full => None,
            Scope::Since(id) => Some(id),
        }
    }
}

/// `col` names an order in scope: on a full run (parameter `$n` NULL) every order; otherwise one
/// with a change logged after status-log id `$n`. A condition of its own rather than an `OR` of
/// the two, so that the database joins the few changed orders to their rows by index (an `IN`
/// under an `OR` is tested on every row of the table).
pub(super) fn in_scope(scope: Scope, col: &str, n: usize) -> String {
    match scope {
        Scope::Full => format!("CAST(${n} AS BIGINT) IS NULL"),
        Scope::Since(_) => {
            format!("{col} IN (SELECT sc.order_no FROM status_events sc WHERE sc.id > CAST(${n} AS BIGINT))")
        }
    }
}

/// How long one try waits for the status log's writers in flight to end (below PostgreSQL's
/// `deadlock_timeout`, so that this wait, not a purchase, gives way should the two wait on each
/// other), and how many tries a run makes.
const SETTLE_WAIT_MS: u32 = 100;
const SETTLE_TRIES: u32 = 3;

/// PostgreSQL: the highest status-log id at or below which no transaction is still writing, or
/// `None` when no moment without one was found. Ids are handed out as rows are written and become
/// visible as their transactions commit, in another order: a snapshot may see id 101 while 100's
/// transaction is yet to commit, and a run that recorded 101 as read would leave 100 to no later
/// run. The share lock waits out the writers in flight and holds new ones back for as long as the
/// highest id takes to read (an index's last entry). `None` on SQLite, whose one writer commits
/// in id order, so that a snapshot's highest id is settled.
pub(super) async fn settled_log_id(db: &Db) -> Result<Option<i64>> {
    if db.kind() != DbKind::Postgres {
        return Ok(None);
    }
    for tries in 1..=SETTLE_TRIES {
        let mut tx = db.begin().await?;
        let read = async {
            sql::query(&format!("SET LOCAL lock_timeout = '{SETTLE_WAIT_MS}ms'")).execute(&mut *tx).await?;
            sql::query("LOCK TABLE status_events IN SHARE MODE").execute(&mut *tx).await?;
            sql::query_scalar::<i64>("SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM status_events")
                .fetch_one(&mut *tx)
                .await
        }
        .await;
        match read {
            Ok(id) => {
                tx.commit().await?;
                return Ok(Some(id));
            }
            Err(Error::Db(e)) if e.code() == Some(LOCK_NOT_AVAILABLE) => {
                let _ = tx.rollback().await;
                Db::retry_pause(tries).await;
            }
            // A role that may not lock the log, or a standby: the run goes on, recording nothing
            // past where it began.
            Err(Error::Db(e)) if matches!(e.code(), Some(NOT_PERMITTED | READ_ONLY)) => {
                let _ = tx.rollback().await;
                return Ok(None);
            }
            Err(e) => {
                let _ = tx.rollback().await;
                return Err(e);
            }
        }
    }
    Ok(None)
}

/// PostgreSQL's SQLSTATEs: a lock not granted within `lock_timeout`, a privilege missing, a
/// write refused by a read-only transaction or a standby.
const LOCK_NOT_AVAILABLE: &str = "55P03";
const NOT_PERMITTED: &str = "42501";
const READ_ONLY: &str = "25006";

//! The orders' count by status (the `kassa_orders` gauges, the console's dashboard), kept from the
//! status log: counted once, then moved by the log rows written since, so that a reading costs
//! what changed since the last, not the history's length. Every change of an order's status is
//! logged in its own transaction (I7), its placing as a row from no status, and orders are never
//! deleted, so the count and the log agree at every commit.
//!
//! PostgreSQL hands out the log's ids as rows are written and shows the rows as their transactions
//! commit, in another order: an id missing below the highest one read may belong to a transaction
//! yet to commit. Such ids are looked for again at each reading, until found or until a
//! transaction that wrote them can no longer be running (it rolled back). SQLite's one writer
//! commits in id order, so nothing is missing there.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::check_scope::settled_log_id;
use super::{Db, DbKind, col, sql};
use crate::error::Result;

/// Most log rows one reading applies; a reading that finds more since the last counts again.
const STEP_ROWS_MAX: i64 = 100_000;

/// Most missing ids looked for again; past it, the next reading counts again.
const MISSING_MAX: usize = 10_000;

/// How long a missing id is looked for. A transaction that wrote a log row commits in the same
/// flight (kassa's write commands are one round trip each); one still open after this long has
/// ended without committing.
const MISSING_KEEP: Duration = Duration::from_secs(600);

/// A process's count, shared by its readers (one reading at a time).
#[derive(Debug, Default)]
pub struct StatusCounts(tokio::sync::Mutex<Option<Tally>>);

#[derive(Debug)]
struct Tally {
    counts: BTreeMap<String, i64>,
    /// The highest log id applied: every row at or below it is applied or in `missing`.
    through: i64,
    /// Ids below `through` not seen yet (PostgreSQL), with when each was first missed.
    missing: BTreeMap<i64, Instant>,
}

/// The orders held in each status now, by status name (statuses no order holds left out). The
/// reading runs as a task of its own: a caller that stops waiting (a scrape's time limit) leaves
/// it to finish, so that a first count longer than one scrape waits for still serves the next.
pub async fn by_status(db: &Db) -> Result<Vec<(String, i64)>> {
    let db = db.clone();
    tokio::spawn(async move { read(&db).await })
        .await
        .map_err(|e| crate::error::Error::internal(format!("counting the orders by status: {e}")))?
}

async fn read(db: &Db) -> Result<Vec<(String, i64)>> {
    let mut held = db.status_counts().0.lock().await;
    let kept = match held.take() {
        Some(mut tally) => step(db, &mut tally).await?.then_some(tally),
        None => None,
    };
    let tally = match kept {
        Some(tally) => tally,
        None => match recount(db).await? {
            Ok(tally) => tally,
            // No settled point to count from: this reading's count, and a count again next time.
            Err(counts) => return Ok(counts),
        },
    };
    let counts = tally.counts.iter().filter(|(_, n)| **n != 0).map(|(s, n)| (s.clone(), *n)).collect();
    *held = Some(tally);
    Ok(counts)
}

/// Counts every order on one snapshot. `Err` holds the counts alone when PostgreSQL showed no
/// settled point of the log to carry on from.
async fn recount(db: &Db) -> Result<std::result::Result<Tally, Vec<(String, i64)>>> {
    let settled = settled_log_id(db).await?;
    let mut tx = db.snapshot().await?;
    let rows = sql::query("SELECT status, CAST(COUNT(*) AS BIGINT) AS n FROM orders GROUP BY status ORDER BY status")
        .fetch_all(&mut *tx)
        .await?;
    let counts: BTreeMap<String, i64> =
        rows.iter().map(|r| Ok((col(r, "status")?, col(r, "n")?))).collect::<Result<_>>()?;
    let highest: i64 =
        sql::query_scalar("SELECT CAST(COALESCE(MAX(id), 0) AS BIGINT) FROM status_events").fetch_one(&mut *tx).await?;
    let from = match (db.kind(), settled) {
        (DbKind::Sqlite, _) => highest,
        (DbKind::Postgres, Some(settled)) if highest - settled <= STEP_ROWS_MAX => settled,
        (DbKind::Postgres, _) => {
            tx.rollback().await?;
            return Ok(Err(counts.into_iter().collect()));
        }
    };
    // Above the settled id, the rows this snapshot shows are in the count; the others are missing.
    let seen: Vec<i64> = sql::query_scalar("SELECT id FROM status_events WHERE id > $1 ORDER BY id")
        .bind(from)
        .fetch_all(&mut *tx)
        .await?;
    tx.rollback().await?;
    let mut tally = Tally { counts, through: from, missing: BTreeMap::new() };
    let now = Instant::now();
    for id in seen {
        tally.missing.extend((tally.through + 1..id).map(|gap| (gap, now)));
        tally.through = id;
    }
    Ok(Ok(tally))
}

/// Applies the log rows written since the last reading. `false` when too much changed to apply
/// row by row (the caller counts again).
async fn step(db: &Db, tally: &mut Tally) -> Result<bool> {
    let now = Instant::now();
    tally.missing.retain(|_, first| now.duration_since(*first) < MISSING_KEEP);
    let rows =
        sql::query("SELECT id, entity, from_status, to_status FROM status_events WHERE id > $1 ORDER BY id LIMIT $2")
            .bind(tally.through)
            .bind(STEP_ROWS_MAX + 1)
            .fetch_all(db.read_pool())
            .await?;
    if rows.len() as i64 > STEP_ROWS_MAX {
        return Ok(false);
    }
    let mut found = Vec::new();
    if db.kind() == DbKind::Postgres && !tally.missing.is_empty() {
        let ids = tally.missing.keys().map(i64::to_string).collect::<Vec<_>>().join(",");
        found = sql::query(
            "SELECT id, entity, from_status, to_status FROM status_events \
             WHERE id = ANY (CAST(string_to_array($1, ',') AS BIGINT[]))",
        )
        .bind(ids)
        .fetch_all(db.read_pool())
        .await?;
    }
    for r in found.iter().chain(&rows) {
        let id: i64 = col(r, "id")?;
        if id > tally.through {
            if db.kind() == DbKind::Postgres {
                tally.missing.extend((tally.through + 1..id).map(|gap| (gap, now)));
            }
            tally.through = id;
        } else {
            tally.missing.remove(&id);
        }
        if col::<String>(r, "entity")? == "order" {
            if let Some(from) = col::<Option<String>>(r, "from_status")? {
                *tally.counts.entry(from).or_default() -= 1;
            }
            *tally.counts.entry(col(r, "to_status")?).or_default() += 1;
        }
    }
    Ok(tally.missing.len() <= MISSING_MAX)
}

//! Group commit for SQLite. One durable commit costs a disk flush (about 1 ms here), so one commit
//! per command caps throughput near 1,000 commands/s. Instead, concurrent write commands share one
//! transaction: each runs inside its own SAVEPOINT (a failing command rolls back to it, undoing
//! only itself), and the last command of the batch — the one that finds nobody waiting behind it,
//! or the one that fills the batch — commits for all. Nobody is answered before the commit that
//! makes their command durable, and a lone command commits at once, so an idle server adds no
//! latency.
//!
//! A finished command leaves its savepoint (`kassa_m`) open, and the next command releases it and
//! opens its own (`RELEASE …; SAVEPOINT …`); the batch's COMMIT releases the last one. That keeps
//! the savepoint stack one deep. A command abandoned midway (its request cancelled) is rolled back
//! to its savepoint before anything else runs on the connection.
//!
//! The batch runs on the writer connection (`engine::sqlite`), in place: a command's body runs
//! without yielding, so before a command decides it is the last of its batch it yields once,
//! letting commands that are ready to join do so; and the commit waits for the disk on a blocking
//! thread, so the commands behind it keep running up to their turn meanwhile.
//!
//! PostgreSQL needs none of this: its WAL writer already flushes concurrent commits together, and
//! sharing one transaction would serialise its row locks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Mutex, MutexGuard, watch};

use super::conn::Tx;
use super::sqlite::NativeConn;
use crate::error::{Error, Result};

/// Most commands in one batch: bounds how long the first one waits for its commit.
pub const BATCH_MAX: usize = 64;

type Outcome = Option<std::result::Result<(), String>>;

struct Batch {
    done: watch::Sender<Outcome>,
}

#[derive(Default)]
struct State {
    tx: Option<Tx<'static>>,
    batch: Option<Arc<Batch>>,
    members: usize,
    /// A member was abandoned mid-command: its writes are rolled back before the connection is
    /// used again.
    abandoned: bool,
    /// The previous member's savepoint is still open (released by the next one or the commit).
    open_savepoint: bool,
}

const SAVEPOINT: &str = "kassa_m";

/// Rolls back an abandoned member's writes (its savepoint stays open, empty).
async fn undo_abandoned(state: &mut State) -> Result<()> {
    if let (true, Some(tx)) = (state.abandoned, state.tx.as_mut()) {
        tx.exec(&format!("ROLLBACK TO SAVEPOINT {SAVEPOINT}")).await?;
    }
    state.abandoned = false;
    Ok(())
}

pub struct GroupCommit {
    /// The writer connection: statements run where the command runs.
    writer: Arc<Mutex<NativeConn>>,
    state: Mutex<State>,
    /// Commands waiting for the writer: while there are any, the current batch stays open.
    waiting: AtomicUsize,
}

impl std::fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GroupCommit")
    }
}

/// Decrements the waiting count however the wait ends (a cancelled request included).
struct Waiting<'a>(&'a AtomicUsize);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One command's turn at the writer.
pub struct Member<'g> {
    group: &'g GroupCommit,
    guard: Option<MutexGuard<'g, State>>,
    /// Whether this command's writes may still need undoing.
    savepoint: bool,
}

impl GroupCommit {
    /// Batches on the writer connection.
    pub fn new(writer: Arc<Mutex<NativeConn>>) -> GroupCommit {
        GroupCommit { writer, state: Mutex::new(State::default()), waiting: AtomicUsize::new(0) }
    }

    /// Waits for the writer (fair, first come first served).
    pub async fn join(&self) -> Member<'_> {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let waiting = Waiting(&self.waiting);
        let guard = self.state.lock().await;
        drop(waiting);
        Member { group: self, guard: Some(guard), savepoint: false }
    }
}

fn publish(batch: Option<Arc<Batch>>, result: std::result::Result<(), String>) {
    if let Some(b) = batch {
        b.done.send_replace(Some(result));
    }
}

impl<'g> Member<'g> {
    /// Opens the batch transaction if needed and a savepoint for this command; the command runs
    /// on the batch transaction.
    pub async fn savepoint(&mut self) -> Result<&mut Tx<'static>> {
        let state = self.guard.as_mut().ok_or_else(|| Error::internal("writer turn already finished"))?;
        undo_abandoned(state).await?;
        if state.tx.is_none() {
            state.tx = Some(Tx::begin_native(&self.group.writer).await?);
            state.batch = Some(Arc::new(Batch { done: watch::channel(None).0 }));
            state.members = 0;
            state.open_savepoint = false;
        }
        state.members += 1;
        let sql = if state.open_savepoint {
            format!("RELEASE SAVEPOINT {SAVEPOINT}; SAVEPOINT {SAVEPOINT}")
        } else {
            format!("SAVEPOINT {SAVEPOINT}")
        };
        {
            let tx = state.tx.as_mut().ok_or_else(|| Error::internal("batch transaction missing"))?;
            tx.exec(&sql).await?;
        }
        state.open_savepoint = true;
        self.savepoint = true;
        state.tx.as_mut().ok_or_else(|| Error::internal("batch transaction missing"))
    }

    /// Undoes this command's writes (it failed); the batch goes on without them.
    /// If even that fails, the savepoint stays marked and the batch is never committed with them.
    pub async fn rollback(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.savepoint) {
            return Ok(());
        }
        let state = self.guard.as_mut().ok_or_else(|| Error::internal("writer turn already finished"))?;
        state.abandoned = true;
        undo_abandoned(state).await
    }

    /// Ends this command's turn: commits the batch if it is the last one, else waits for the
    /// commit. Returns the command's own outcome once it is durable (or the commit's error).
    pub async fn finish<T>(mut self, outcome: Result<T>) -> Result<T> {
        // Finished either way: its writes stay (success) or were undone (failure).
        self.savepoint = false;
        let Some(mut state) = self.guard.take() else {
            return Err(Error::internal("writer turn already finished"));
        };
        if self.group.waiting.load(Ordering::SeqCst) == 0 {
            // The writer ran this command without yielding, so commands ready to join have had
            // no chance to; let them, before deciding this one ends the batch.
            tokio::task::yield_now().await;
        }
        let last = self.group.waiting.load(Ordering::SeqCst) == 0 || state.members >= BATCH_MAX;
        if last {
            if let Err(e) = undo_abandoned(&mut state).await {
                // Nothing of this batch may be committed with an abandoned command's writes in it.
                let (tx, batch) = (state.tx.take(), state.batch.take());
                drop(tx);
                publish(batch, Err(e.to_string()));
                return Err(e);
            }
            let (tx, batch) = (state.tx.take(), state.batch.take());
            metrics::counter!("kassa_sqlite_group_commits_total").increment(1);
            metrics::counter!("kassa_sqlite_group_commit_commands_total").increment(state.members as u64);
            // Committed and published in a task of its own: if this request is cancelled while the
            // commit runs, the commit still completes and the batch still hears about it.
            let commit = tokio::spawn(async move {
                let committed = match tx {
                    Some(tx) => tx.commit().await.map_err(|e| e.to_string()),
                    None => Ok(()),
                };
                publish(batch, committed.clone());
                committed
            });
            let committed = commit.await.unwrap_or_else(|e| Err(format!("commit task failed: {e}")));
            drop(state);
            return committed.map_err(|e| Error::internal(format!("group commit failed: {e}"))).and(outcome);
        }
        let batch = state.batch.clone();
        drop(state);
        let Some(batch) = batch else {
            return outcome;
        };
        let mut rx = batch.done.subscribe();
        let committed = match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or(Ok(())),
            Err(_) => Err("the batch ended without a commit".to_string()),
        };
        committed.map_err(|e| Error::internal(format!("group commit failed: {e}"))).and(outcome)
    }
}

impl Drop for Member<'_> {
    /// A turn abandoned mid-way (its request was cancelled): its savepoint is already rolled back;
    /// if nobody else is coming, commit the batch so the commands before it are not left waiting.
    fn drop(&mut self) {
        let Some(mut state) = self.guard.take() else { return };
        // Its writes must not be committed: whoever uses the connection next rolls them back.
        if std::mem::take(&mut self.savepoint) {
            state.abandoned = true;
        }
        if self.group.waiting.load(Ordering::SeqCst) > 0 {
            return;
        }
        let abandoned = std::mem::take(&mut state.abandoned);
        let (tx, batch) = (state.tx.take(), state.batch.take());
        drop(state);
        if let Some(mut tx) = tx {
            tokio::spawn(async move {
                let committed = async {
                    if abandoned {
                        tx.exec(&format!("ROLLBACK TO SAVEPOINT {SAVEPOINT}")).await?;
                    }
                    tx.commit().await
                }
                .await
                .map_err(|e| e.to_string());
                publish(batch, committed);
            });
        }
    }
}

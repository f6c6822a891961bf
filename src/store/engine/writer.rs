//! SQLite's writer thread. The hot write commands (confirm, basket lines, notifications, and the
//! sandbox's on its own database) run on this thread — a single-threaded runtime of their own,
//! held on one CPU — and with the writer connection (`engine::sqlite`) their statements run right
//! here, with no hand-off to another thread; the HTTP layer and the readers use all the other
//! CPUs.
//!
//! The CPU is the first the process may use; [`EngineConfig::sqlite_pin_writer`] off leaves the
//! thread unpinned (for measuring the effect, or where another process owns that CPU). Only
//! kassa's own writer is held there: the sandbox's (a stand-in for a remote gateway, on a database
//! of its own) is left to the scheduler, since two writers held on one CPU queue for it while
//! another has room (BENCHMARKS.md).
//!
//! [`EngineConfig::sqlite_pin_writer`]: super::EngineConfig::sqlite_pin_writer

use std::future::Future;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::error::{Error, Result};

/// Whose writes a writer thread runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// kassa's own: held on the first CPU when so configured.
    Kassa,
    /// The sandbox's, on a database of its own: left to the scheduler (and named apart in
    /// profiles).
    Sandbox,
}

/// A current-thread runtime on a thread of its own, ended when the last [`Db`](super::Db)
/// clone holding it is dropped.
#[derive(Debug, Clone)]
pub struct WriterThread {
    handle: Handle,
    _stop: std::sync::Arc<oneshot::Sender<()>>,
}

impl WriterThread {
    /// Starts the thread for `role`'s writes; kassa's is held on the first CPU if `pin`.
    pub fn start(role: Role, pin: bool) -> anyhow::Result<WriterThread> {
        let (name, pin) = match role {
            Role::Kassa => ("kassa-sqlite-writer", pin),
            Role::Sandbox => ("sandbox-writer", false),
        };
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        std::thread::Builder::new().name(name.into()).spawn(move || {
            if pin && let Some(core) = core_affinity::get_core_ids().and_then(|ids| ids.into_iter().next()) {
                // Best effort: an unpinned writer is slower, not wrong.
                let _ = core_affinity::set_for_current(core);
            }
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => {
                    let _ = ready_tx.send(Ok(runtime.handle().clone()));
                    // Runs until every holder is gone (the sender dropped).
                    let _ = runtime.block_on(stop_rx);
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            }
        })?;
        let handle = ready_rx.recv()??;
        Ok(WriterThread { handle, _stop: std::sync::Arc::new(stop_tx) })
    }

    /// Runs `command` on the writer thread and waits for it. The command runs to its end even if
    /// the caller stops waiting (a cancelled request), like a command already inside a transaction.
    pub async fn run<F>(&self, command: F) -> Result<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle.spawn(command).await.map_err(|e| {
            // The writer thread is gone (its runtime shutting down): no write can be made now.
            Error::Db(crate::error::DbError::unreachable(format!("writer thread: {e}")))
        })
    }
}

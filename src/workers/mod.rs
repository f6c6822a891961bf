//! Background workers, each a `step()` function plus a loop that only decides how long to sleep, so
//! tests drive a step directly.

pub mod monitor;
pub mod outbox;
pub mod reconciler;
pub mod refunds;
pub mod sweeper;

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// Runs `step` every `interval` until `shutdown` flips to true.
pub async fn run_every<F, Fut>(name: &'static str, interval: Duration, mut shutdown: watch::Receiver<bool>, mut step: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    loop {
        step().await;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.changed() => {
                tracing::debug!(worker = name, "stopping");
                return;
            }
        }
        if *shutdown.borrow() {
            return;
        }
    }
}

//! Background workers, each a `step()` function plus a loop that only decides how long to sleep, so
//! tests drive a step directly.

pub mod cases;
pub mod keys;
pub mod mail;
pub mod monitor;
pub mod outbox;
pub mod reconciler;
pub mod refunds;
pub mod retention;
pub mod shipping;
pub mod statements;
pub mod subscribe;
pub mod sweeper;

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

pub use crate::domain::retry::{RETRY_BACKOFF_MS_MAX, doubling_backoff_ms, retry_backoff_ms};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(retry_backoff_ms(1), 1000);
        assert_eq!(retry_backoff_ms(2), 2000);
        assert_eq!(retry_backoff_ms(4), 8000);
        assert_eq!(retry_backoff_ms(30), RETRY_BACKOFF_MS_MAX);
        assert_eq!(retry_backoff_ms(-5), 1000);
    }
}

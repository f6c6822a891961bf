//! Background workers, each a `step()` function plus a loop that only decides how long to sleep, so
//! tests drive a step directly.

pub mod keys;
pub mod monitor;
pub mod outbox;
pub mod reconciler;
pub mod refunds;
pub mod retention;
pub mod shipping;
pub mod statements;
pub mod sweeper;

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// Longest pause between two tries of a delivery or a refund.
pub const RETRY_BACKOFF_MS_MAX: i64 = 60_000;

/// `first_ms` (at least a second) doubled `doublings` times (at most 16), capped at `cap_ms`.
pub fn doubling_backoff_ms(first_ms: i64, doublings: i64, cap_ms: i64) -> i64 {
    let exp = u32::try_from(doublings.clamp(0, 16)).unwrap_or(16);
    first_ms.max(1000).saturating_mul(1_i64 << exp).min(cap_ms)
}

/// Exponential backoff before try `tries + 1`: 1 s, 2 s, 4 s, … capped at
/// [`RETRY_BACKOFF_MS_MAX`].
pub fn retry_backoff_ms(tries: i64) -> i64 {
    doubling_backoff_ms(1000, tries.max(1) - 1, RETRY_BACKOFF_MS_MAX)
}

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

//! How long to wait before trying again: deliveries, refunds, reports and gateway queries back off
//! by doubling.

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

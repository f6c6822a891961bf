//! Admin sign-in lockout: an address that fails too often within the lockout time is locked out
//! for as long, and so is every address when all of them together fail [`ALL_ADDRESSES_FACTOR`]
//! times as often. A lockout backs off wrong tokens only: the right token always signs in, so no
//! one can lock the admin out by failing in their name. The store keeps the counts (shared by
//! every instance). Guessing stays out of reach by the token's length (at least 32 characters).

/// The key the failures of all addresses together are counted under.
pub const ALL_ADDRESSES: &str = "*";
/// All addresses together may fail this many times as often as one before wrong tokens are backed
/// off everywhere (a guess spread over many addresses).
pub const ALL_ADDRESSES_FACTOR: u32 = 10;

/// How many failures lock an address out, and for how long (also the window they are counted in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockoutPolicy {
    pub max_failures: u32,
    pub lockout_ms: i64,
}

impl LockoutPolicy {
    /// The policy of all addresses together.
    pub fn all_addresses(self) -> LockoutPolicy {
        LockoutPolicy { max_failures: self.max_failures.saturating_mul(ALL_ADDRESSES_FACTOR), ..self }
    }
}

/// What a sign-in attempt gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The right token: signed in, whatever failed before.
    Admit,
    /// A wrong token, to be counted.
    Refuse,
    /// A wrong token while locked out, until then: backed off, not counted again.
    BackedOff(i64),
}

/// The verdict on an attempt with a token that is `correct`, from an address locked out until
/// `locked_until` (its own lockout or all addresses'), at `now`.
pub fn verdict(correct: bool, locked_until: Option<i64>, now: i64) -> Verdict {
    match (correct, locked_until) {
        (true, _) => Verdict::Admit,
        (false, Some(until)) if until > now => Verdict::BackedOff(until),
        (false, _) => Verdict::Refuse,
    }
}

/// The failures of one address as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failures {
    pub failures: i64,
    pub window_started_at: i64,
    pub locked_until: Option<i64>,
}

impl Failures {
    /// Whether the address may try at `now`; `Err(until)` while locked out.
    pub fn may_try(&self, now: i64) -> Result<(), i64> {
        match self.locked_until {
            Some(until) if until > now => Err(until),
            _ => Ok(()),
        }
    }
}

/// The failures after one more at `now`: counted in a window of the lockout time that starts at
/// the first failure; the one that reaches the limit locks the address out and starts over.
pub fn after_failure(before: Option<Failures>, now: i64, policy: LockoutPolicy) -> Failures {
    let counting = before.filter(|f| now.saturating_sub(f.window_started_at) < policy.lockout_ms);
    let failures = counting.map_or(0, |f| f.failures).saturating_add(1);
    let window_started_at = counting.map_or(now, |f| f.window_started_at);
    if failures >= i64::from(policy.max_failures) {
        Failures { failures: 0, window_started_at: now, locked_until: Some(now.saturating_add(policy.lockout_ms)) }
    } else {
        Failures { failures, window_started_at, locked_until: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: LockoutPolicy = LockoutPolicy { max_failures: 3, lockout_ms: 1_000 };

    #[test]
    fn the_failure_that_reaches_the_limit_locks_the_address_out() {
        let one = after_failure(None, 0, POLICY);
        let two = after_failure(Some(one), 10, POLICY);
        assert_eq!((two.failures, two.locked_until), (2, None));
        let three = after_failure(Some(two), 20, POLICY);
        assert_eq!(three.locked_until, Some(1_020));
        assert_eq!(three.may_try(500), Err(1_020));
        assert_eq!(three.may_try(1_020), Ok(()));
    }

    #[test]
    fn the_right_token_is_admitted_even_while_locked_out() {
        assert_eq!(verdict(true, Some(1_000), 10), Verdict::Admit);
        assert_eq!(verdict(false, Some(1_000), 10), Verdict::BackedOff(1_000));
        assert_eq!(verdict(false, Some(1_000), 1_000), Verdict::Refuse, "the lockout is over");
        assert_eq!(verdict(false, None, 10), Verdict::Refuse);
        assert_eq!(POLICY.all_addresses(), LockoutPolicy { max_failures: 30, lockout_ms: 1_000 });
    }

    #[test]
    fn failures_outside_the_window_start_over() {
        let two = after_failure(Some(after_failure(None, 0, POLICY)), 10, POLICY);
        let later = after_failure(Some(two), 5_000, POLICY);
        assert_eq!((later.failures, later.window_started_at, later.locked_until), (1, 5_000, None));
    }
}

//! `kassa check`'s I9 on the card keys: the keys secret given is the one the keys were sealed
//! with, and every stored key decrypts under it. A key's sealed value never changes after its
//! import, and its id (a UUIDv7) begins with the time it was made, so a run that reads what
//! changed decrypts only the keys made since the last clean run that decrypted keys began; a
//! full run, or one after no such run, decrypts every key.

use super::check_scope::{Scope, Violation};
use super::{Db, fulfilment, sql};
use crate::clock::{Clock, Millis, SystemClock};
use crate::error::Result;
use crate::vault::Vault;

/// The setting that holds when the last clean run that decrypted the keys began (Unix ms).
pub const KEYS_CHECKED_FROM: &str = "check_keys_clean_from";

/// Keys made this long before that run began are decrypted again: an import that began before
/// the run and committed after it had read past them, and instances whose clocks differ.
const RECHECK_MARGIN_MS: Millis = 3_600_000;

/// Most unreadable keys listed one by one; past it a count says how many more.
const UNREADABLE_LISTED_MAX: usize = 1_000;

/// What a run of the key checks read: the time it began, to record when the run is clean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeysRead {
    pub began_at: Millis,
}

/// The violations of I9 among the keys in `scope`, and when the reading began.
pub(super) async fn check(db: &Db, vault: &Vault, scope: Scope) -> Result<(Vec<Violation>, KeysRead)> {
    let began_at = SystemClock.now_ms();
    let mut out = Vec::new();
    if fulfilment::keys_check_matches(db, vault).await? == Some(false) {
        out.push(Violation {
            invariant: "I9",
            detail: "the keys secret given does not match the check value stored with the keys".into(),
        });
    }
    let from = match scope {
        Scope::Full => None,
        Scope::Since(_) => last_clean_from(db).await?,
    };
    let after = from.map_or_else(String::new, |at| lowest_id_made_at(at - RECHECK_MARGIN_MS));
    let unreadable = fulfilment::unreadable_keys(db, vault, UNREADABLE_LISTED_MAX + 1, &after).await?;
    for (id, sku, order_no) in unreadable.iter().take(UNREADABLE_LISTED_MAX) {
        let whose = order_no.as_deref().map_or("unsold".to_string(), |o| format!("delivered to order {o}"));
        out.push(Violation {
            invariant: "I9",
            detail: format!("key {id} of sku {sku} ({whose}) does not decrypt under the keys secret"),
        });
    }
    if unreadable.len() > UNREADABLE_LISTED_MAX {
        out.push(Violation { invariant: "I9", detail: "more keys do not decrypt; only the first are listed".into() });
    }
    Ok((out, KeysRead { began_at }))
}

/// Records that every key made before `read.began_at` decrypted, for the next run.
pub(super) async fn record_clean(db: &Db, read: KeysRead) -> Result<()> {
    super::settings::set(db, KEYS_CHECKED_FROM, Some(&read.began_at.to_string())).await
}

async fn last_clean_from(db: &Db) -> Result<Option<Millis>> {
    let from: Option<String> = sql::query_scalar("SELECT value FROM settings WHERE name = $1")
        .bind(KEYS_CHECKED_FROM)
        .fetch_optional(db.read_pool())
        .await?;
    Ok(from.and_then(|v| v.parse().ok()))
}

/// The text just below every UUIDv7 made at or after `at` (its first 48 bits are the Unix
/// milliseconds, in hex as the text begins), so that `id > it` reads those keys by the key's index.
fn lowest_id_made_at(at: Millis) -> String {
    let ms = u64::try_from(at.max(0)).unwrap_or(0) & 0xffff_ffff_ffff;
    format!("{:08x}-{:04x}", ms >> 16, ms & 0xffff)
}

#[cfg(test)]
mod tests {
    use super::lowest_id_made_at;

    #[test]
    fn the_bound_sorts_below_ids_made_from_its_time_and_above_those_before() {
        let at = 1_765_000_000_123_i64;
        let made = |ms: i64| {
            let secs = u64::try_from(ms / 1000).unwrap();
            let nanos = u32::try_from((ms % 1000) * 1_000_000).unwrap();
            uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, secs, nanos)).to_string()
        };
        let bound = lowest_id_made_at(at);
        assert!(made(at).as_str() > bound.as_str());
        assert!(made(at + 1).as_str() > bound.as_str());
        assert!(made(at - 1).as_str() < bound.as_str());
        assert!(made(at - 3_600_000).as_str() < bound.as_str());
        assert_eq!(lowest_id_made_at(-5), "00000000-0000");
    }
}

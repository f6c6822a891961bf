//! Notifications that fail verification: anyone's word, so kassa keeps a bounded digest of each
//! for an operator to see (the first bytes, the length, the SHA-256), at most
//! [`REJECTED_NOTIFICATIONS_MAX`] of them, and raises an alert; retention deletes them after their
//! time ([`crate::store::retention`]). Verified notifications go through [`super::payments`].

use crate::clock::Millis;

use crate::error::Result;
use crate::store::events::{self, Severity};
use crate::store::{Db, new_id, sql};

/// Bytes of a rejected notification's body kept (its length and SHA-256 are kept whole).
pub const REJECTED_BODY_KEPT_BYTES: usize = 1024;
/// Rejected notifications kept at most; more are counted, not stored, until retention deletes old
/// ones ([`crate::store::retention`]). With [`REJECTED_BODY_KEPT_BYTES`], a few MiB at most.
pub const REJECTED_NOTIFICATIONS_MAX: i64 = 10_000;
/// Characters kept of a rejected notification's reason and of the event id it claims.
const REJECTED_TEXT_CHARS_MAX: usize = 300;

/// What became of a rejected notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectedRecord {
    /// Its digest is stored for an operator to see.
    Stored,
    /// [`REJECTED_NOTIFICATIONS_MAX`] are stored already: only counted, and alerted.
    Full,
}

fn clip(text: &str) -> &str {
    text.char_indices().nth(REJECTED_TEXT_CHARS_MAX).map_or(text, |(at, _)| &text[..at])
}

/// Keeps a bounded digest of a notification that failed verification (bad signature, malformed
/// body) so an operator can see it — its first [`REJECTED_BODY_KEPT_BYTES`], its length and its
/// SHA-256 — and raises an alert; nothing else changes. A body failing verification is anyone's
/// word: it is never kept whole, and at most [`REJECTED_NOTIFICATIONS_MAX`] are kept at all.
pub async fn record_rejected(
    db: &Db,
    gateway: &str,
    claimed_event_id: Option<&str>,
    reason: &str,
    raw_body: &[u8],
    now: Millis,
) -> Result<RejectedRecord> {
    let kept = &raw_body[..raw_body.len().min(REJECTED_BODY_KEPT_BYTES)];
    let sha256 = hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, raw_body));
    let len = i64::try_from(raw_body.len()).unwrap_or(i64::MAX);
    let (reason, claimed_event_id) = (clip(reason), claimed_event_id.map(clip));
    let recorded = crate::write_tx!(db, |tx| {
        let stored: i64 = sql::query_scalar(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'rejected' AND body_sha256 IS NOT NULL",
        )
        .fetch_one(&mut **tx)
        .await?;
        if stored >= REJECTED_NOTIFICATIONS_MAX {
            let details = format!(
                "{REJECTED_NOTIFICATIONS_MAX} rejected notifications are stored; newer ones are only counted until retention deletes old ones"
            );
            events::raise_alert(tx, "rejected_notifications_full", Severity::Warning, gateway, None, &details, now)
                .await?;
            return Ok(RejectedRecord::Full);
        }
        sql::query(
            "INSERT INTO notifications (id, gateway, event_id, claimed_event_id, status, reason, raw_body, body_len, body_sha256, received_at) \
             VALUES ($1, $2, NULL, $3, 'rejected', $4, $5, $6, $7, $8)",
        )
        .bind(new_id())
        .bind(gateway)
        .bind(claimed_event_id)
        .bind(reason)
        .bind(kept)
        .bind(len)
        .bind(&sha256)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        let kind = if reason.starts_with("invalid_signature") { "signature_failure" } else { "notification_rejected" };
        events::raise_alert(tx, kind, Severity::Warning, gateway, None, reason, now).await?;
        Ok(RejectedRecord::Stored)
    })?;
    let result = match recorded {
        RejectedRecord::Stored => "rejected",
        RejectedRecord::Full => "rejected_unrecorded",
    };
    metrics::counter!("kassa_notifications_total", "gateway" => gateway.to_string(), "result" => result).increment(1);
    Ok(recorded)
}

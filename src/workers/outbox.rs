//! The outbox relay: delivers order events to the merchant's webhook at least once.
//!
//! Each POST carries the event as JSON and these headers, so the shop can verify and de-duplicate:
//!
//! - `Kassa-Event-Id`: the message id (stable across retries: the dedupe id);
//! - `Kassa-Topic`: e.g. `order.paid`;
//! - `Kassa-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(webhook secret, "<t>.<body>")>`.
//!
//! A 2xx answer acknowledges; anything else is retried with exponential backoff, and after
//! [`OUTBOX_TRIES_MAX`] tries the message is `dead` and alerted.

use std::time::Duration;

use crate::clock::{SharedClock, rfc3339};
use crate::error::Result;
use crate::store::events::{self, Severity};
use crate::store::{Db, outbox};

/// Tries before a message is given up (dead).
pub const OUTBOX_TRIES_MAX: i64 = 12;
/// Messages sent per step.
const OUTBOX_BATCH_MAX: i64 = 100;
const OUTBOX_LEASE_MS: i64 = 30_000;
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Relay {
    pub db: Db,
    pub clock: SharedClock,
    pub url: String,
    secret: aws_lc_rs::hmac::Key,
    http: reqwest::Client,
}

/// The `Kassa-Signature` header value for a body signed at `t` (unix seconds).
pub fn signature(secret: &aws_lc_rs::hmac::Key, t: i64, body: &str) -> String {
    let tag = aws_lc_rs::hmac::sign(secret, format!("{t}.{body}").as_bytes());
    format!("t={t},v1={}", hex::encode(tag.as_ref()))
}

impl Relay {
    pub fn new(db: Db, clock: SharedClock, url: String, secret: &str) -> Result<Relay> {
        let http = reqwest::Client::builder()
            .timeout(WEBHOOK_TIMEOUT)
            .build()
            .map_err(|e| crate::error::Error::internal(format!("http client: {e}")))?;
        let secret = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret.as_bytes());
        Ok(Relay { db, clock, url, secret, http })
    }

    /// Sends every due message once; returns how many were tried.
    pub async fn step(&self) -> Result<usize> {
        let messages = outbox::claim(&self.db, self.clock.now_ms(), OUTBOX_LEASE_MS, OUTBOX_BATCH_MAX).await?;
        for m in &messages {
            let data = serde_json::value::RawValue::from_string(m.payload.clone())
                .or_else(|e| {
                    tracing::error!(id = %m.id, error = %e, "an outbox message's payload is not JSON; sending {{}}");
                    serde_json::value::RawValue::from_string("{}".to_string())
                })
                .map_err(|e| crate::error::Error::internal(e.to_string()))?;
            let message = outbox::WebhookMessage {
                id: &m.id,
                topic: &m.topic,
                order_no: &m.order_no,
                created_at: rfc3339(m.created_at),
                data: &data,
            };
            let body = serde_json::to_string(&message).map_err(|e| crate::error::Error::internal(e.to_string()))?;
            let t = self.clock.now_ms() / 1000;
            let result = self
                .http
                .post(&self.url)
                .header("content-type", "application/json")
                .header("kassa-event-id", &m.id)
                .header("kassa-topic", &m.topic)
                .header("kassa-signature", signature(&self.secret, t, &body))
                .body(body)
                .send()
                .await;
            let result = match result {
                Ok(r) if r.status().is_success() => Ok(()),
                Ok(r) => Err(format!("answered {}", r.status())),
                Err(e) => Err(format!("request failed: {e}")),
            };
            let now = self.clock.now_ms();
            let tries = m.tries + 1;
            let dead = result.is_err() && tries >= OUTBOX_TRIES_MAX;
            let next_at = now.saturating_add(super::retry_backoff_ms(tries));
            outbox::finish(&self.db, &m.id, result.clone(), tries, next_at, dead, now).await?;
            if dead {
                let details = format!(
                    "{} for order {} gave up after {tries} tries: {}",
                    m.topic,
                    m.order_no,
                    result.err().unwrap_or_default()
                );
                crate::write_tx!(self.db, |tx| {
                    events::raise_alert(tx, "outbox_dead", Severity::Critical, &m.id, Some(&m.order_no), &details, now)
                        .await
                })?;
            }
        }
        Ok(messages.len())
    }
}

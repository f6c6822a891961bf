//! Gateway adapters behind one trait: build the hand-off, verify and parse a notification, reply
//! the way the gateway expects, and close an attempt. Wire formats stay inside each adapter.

pub mod sandbox;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::http::HeaderMap;
use serde::Serialize;

use crate::clock::Millis;
use crate::domain::Money;
use crate::store::payments::VerifiedEvent;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Everything an adapter needs to hand the buyer over for one attempt.
#[derive(Debug, Clone)]
pub struct HandoffRequest {
    pub attempt_ref: String,
    pub order_no: String,
    pub amount: Money,
    pub subject: String,
    pub expires_at: Millis,
    pub notify_url: String,
    pub return_url: String,
    pub channel: String,
}

/// How the buyer reaches the gateway (CONTRACT.md `payment`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Handoff {
    /// An auto-submitting form: every field generated and signed server-side.
    Form {
        action: String,
        method: String,
        fields: BTreeMap<String, String>,
    },
    Redirect {
        url: String,
    },
    Client {
        params: serde_json::Value,
    },
}

/// Why a notification was refused before it reached the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Stable code: `invalid_signature`, `malformed_body`, `merchant_mismatch`, …
    pub code: &'static str,
    pub detail: String,
    /// The event id the body claims, when it could be read; kept for the operator only.
    pub claimed_event_id: Option<String>,
}

/// The exact HTTP answer a gateway expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseOutcome {
    /// The gateway will not take a payment for this attempt any more.
    Closed,
    /// Too late: the buyer paid. The caller applies it as a verified success.
    AlreadyPaid(VerifiedEvent),
    /// The gateway never saw the attempt; nothing can be paid.
    NotFound,
}

/// A refund to send to the gateway; `refund_no` is its idempotency number there.
#[derive(Debug, Clone)]
pub struct RefundRequest {
    pub attempt_ref: String,
    pub refund_no: String,
    pub amount: Money,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundAnswer {
    /// Taken; the result follows by notification (or query).
    Accepted { gateway_refund_id: String },
    /// Done synchronously.
    Succeeded { gateway_refund_id: String },
    /// Refused for good (e.g. more than was paid, refund window over).
    Rejected { reason: String },
}

#[derive(Debug, thiserror::Error)]
#[error("gateway unavailable: {0}")]
pub struct GatewayError(pub String);

pub trait Gateway: Send + Sync {
    fn name(&self) -> &'static str;
    /// The channel used when the checkout names none.
    fn default_channel(&self) -> &'static str;
    /// Builds the hand-off after the order has committed (may call the provider).
    fn handoff<'a>(&'a self, req: &'a HandoffRequest) -> BoxFuture<'a, Result<Handoff, GatewayError>>;
    /// Verifies a notification's signature and parses it. Pure: no I/O, never panics.
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Result<VerifiedEvent, Rejection>;
    /// The reply for an accepted or duplicate notification.
    fn ack(&self) -> Reply;
    /// The reply for a refused notification.
    fn nack(&self, code: &str, message: &str) -> Reply;
    /// Asks the gateway to stop accepting payment for an attempt.
    fn close<'a>(&'a self, attempt_ref: &'a str) -> BoxFuture<'a, Result<CloseOutcome, GatewayError>>;
    /// Sends a refund. Sending the same `refund_no` again must not refund twice.
    fn refund<'a>(&'a self, req: &'a RefundRequest) -> BoxFuture<'a, Result<RefundAnswer, GatewayError>>;
}

/// The configured gateways by name.
#[derive(Clone, Default)]
pub struct Gateways {
    by_name: HashMap<&'static str, Arc<dyn Gateway>>,
    pub default: Option<&'static str>,
}

impl Gateways {
    pub fn add(&mut self, gateway: Arc<dyn Gateway>) {
        self.by_name.insert(gateway.name(), gateway);
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn Gateway>> {
        self.by_name.get(name)
    }

    pub fn names(&self) -> Vec<&'static str> {
        let mut names: Vec<_> = self.by_name.keys().copied().collect();
        names.sort_unstable();
        names
    }
}

/// JSON error body in the contract's shape, for gateways that take JSON replies.
pub fn json_error_reply(status: u16, code: &str, message: &str) -> Reply {
    Reply {
        status,
        content_type: "application/json",
        body: serde_json::json!({"error": {"code": code, "message": message}}).to_string(),
    }
}

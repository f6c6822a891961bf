//! The merchant side of the built-in sandbox gateway: kassa talks to the simulator in
//! [`crate::sandbox`] exactly as it would to a real form-based gateway — signed form fields out,
//! signed notifications in — and holds only the merchant secret and the sandbox's public key.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;

use super::{
    AttemptKey, BoxFuture, CloseOutcome, Gateway, GatewayError, Handed, Handoff, HandoffRequest, PaymentState,
    RefundAnswer, RefundQuery, RefundRequest, RefundState, Rejection, Reply, StatementError, json_error_reply,
};
use crate::clock::Millis;
use crate::domain::event::{Outcome, VerifiedEvent};
use crate::domain::statement::{self, Statement};
use crate::domain::{Currency, Money};
use crate::sandbox::Sandbox;

use crate::sandbox::protocol::NAME;
use crate::sandbox::protocol::{SIGNATURE_HEADER, sign_fields};
/// Notifications signed further than this from our clock are refused (replay protection).
pub const SIGNATURE_TOLERANCE_MS: i64 = 300_000;

/// The notification body the sandbox sends (its wire format).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireNotification {
    pub event_id: String,
    pub event_type: String,
    pub merchant_id: String,
    pub attempt_ref: String,
    #[serde(default)]
    pub txn_id: Option<String>,
    #[serde(default)]
    pub refund_no: Option<String>,
    pub amount_minor: i64,
    pub currency: String,
    pub created_at: i64,
}

pub struct SandboxGateway {
    merchant_id: String,
    merchant_key: aws_lc_rs::hmac::Key,
    sandbox_public_key: Vec<u8>,
    pay_url: String,
    /// The sandbox's server-side API (create payment, close), reached in-process.
    api: Arc<Sandbox>,
}

impl SandboxGateway {
    pub fn new(api: Arc<Sandbox>, public_url: &str) -> Self {
        SandboxGateway {
            merchant_id: api.merchant_id().to_string(),
            merchant_key: api.merchant_key(),
            sandbox_public_key: api.public_key(),
            pay_url: format!("{}/sandbox/pay", public_url.trim_end_matches('/')),
            api,
        }
    }
}

fn reject(code: &'static str, detail: impl Into<String>, claimed: Option<String>) -> Rejection {
    Rejection { code, detail: detail.into(), claimed_event_id: claimed, unknown_key: None }
}

/// Verifies the signature header over the raw body. Public so the fuzz and unit tests reach it.
pub fn verify_signature(public_key: &[u8], headers: &HeaderMap, body: &[u8], now: Millis) -> Result<(), Rejection> {
    let header = headers
        .get(SIGNATURE_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| reject("invalid_signature", "missing signature header", None))?;
    let mut t = None;
    let mut sig = None;
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => sig = B64.decode(v).ok(),
            _ => {}
        }
    }
    let (Some(t), Some(sig)) = (t, sig) else {
        return Err(reject("invalid_signature", "unreadable signature header", None));
    };
    let signed_ms = t.saturating_mul(1000);
    if now.saturating_sub(signed_ms).abs() > SIGNATURE_TOLERANCE_MS {
        return Err(reject("invalid_signature", "signature timestamp outside the tolerance", None));
    }
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(body);
    aws_lc_rs::signature::UnparsedPublicKey::new(&aws_lc_rs::signature::ED25519, public_key)
        .verify(&message, &sig)
        .map_err(|_| reject("invalid_signature", "signature does not verify", None))
}

/// Parses a verified body into a domain event, checking the merchant id.
pub fn parse_notification(merchant_id: &str, body: &[u8]) -> Result<VerifiedEvent, Rejection> {
    let wire: WireNotification =
        serde_json::from_slice(body).map_err(|e| reject("malformed_body", format!("unreadable body: {e}"), None))?;
    let claimed = Some(wire.event_id.clone());
    let plain = |s: &str| crate::domain::ids::is_plain_id(s);
    if !plain(&wire.event_id) || !plain(&wire.attempt_ref) {
        return Err(reject("malformed_body", "event id or attempt reference is not a plain identifier", None));
    }
    if wire.merchant_id != merchant_id {
        return Err(reject("merchant_mismatch", "notification names another merchant", claimed));
    }
    let outcome = match wire.event_type.as_str() {
        "payment.succeeded" => {
            let currency = Currency::parse(&wire.currency)
                .map_err(|_| reject("currency_mismatch", "unknown currency", claimed.clone()))?;
            let amount = Money::new(wire.amount_minor, currency)
                .map_err(|_| reject("amount_mismatch", "negative amount", claimed.clone()))?;
            let txn = wire
                .txn_id
                .filter(|t| plain(t))
                .ok_or_else(|| reject("malformed_body", "success without a transaction id", claimed.clone()))?;
            Outcome::Succeeded { gateway_txn_id: txn, amount }
        }
        "refund.succeeded" | "refund.failed" => {
            let refund_no = wire
                .refund_no
                .filter(|r| plain(r))
                .ok_or_else(|| reject("malformed_body", "refund event without a refund number", claimed.clone()))?;
            if wire.event_type == "refund.failed" {
                Outcome::RefundFailed { refund_no }
            } else {
                let currency = Currency::parse(&wire.currency)
                    .map_err(|_| reject("currency_mismatch", "unknown currency", claimed.clone()))?;
                let amount = Money::new(wire.amount_minor, currency)
                    .map_err(|_| reject("amount_mismatch", "negative amount", claimed.clone()))?;
                Outcome::RefundSucceeded { refund_no, amount: Some(amount) }
            }
        }
        "payment.failed" => Outcome::Failed,
        "payment.cancelled" => Outcome::Cancelled,
        _ => return Err(reject("unsupported_event", "unknown event type", claimed)),
    };
    Ok(VerifiedEvent {
        gateway: NAME.to_string(),
        event_id: wire.event_id,
        attempt_ref: wire.attempt_ref,
        outcome,
        raw_body: body.to_vec(),
    })
}

impl Gateway for SandboxGateway {
    fn name(&self) -> &'static str {
        NAME
    }

    fn channels(&self) -> &'static [&'static str] {
        &["form"]
    }

    fn handoff<'a>(&'a self, req: &'a HandoffRequest) -> BoxFuture<'a, Result<Handed, GatewayError>> {
        Box::pin(async move {
            let mut fields = BTreeMap::new();
            fields.insert("merchant_id".to_string(), self.merchant_id.clone());
            fields.insert("attempt_ref".to_string(), req.attempt_ref.clone());
            fields.insert("amount_minor".to_string(), req.amount.amount_minor().to_string());
            fields.insert("currency".to_string(), req.amount.currency().code().to_string());
            fields.insert("subject".to_string(), req.subject.clone());
            fields.insert("notify_url".to_string(), req.notify_url.clone());
            fields.insert("return_url".to_string(), req.return_url.clone());
            fields.insert("expires_at".to_string(), (req.expires_at / 1000).to_string());
            let sign = sign_fields(&self.merchant_key, &fields);
            fields.insert("sign".to_string(), sign);
            // Like creating a payment session at a real gateway: the sandbox learns the attempt
            // now, so its `complete` API works even if the buyer never opens the pay page.
            self.api.register(&fields).await.map_err(|e| GatewayError::unavailable(e.to_string()))?;
            let handoff = Handoff::Form { action: self.pay_url.clone(), method: "post".to_string(), fields };
            Ok(Handed { handoff, gateway_ref: None })
        })
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Result<VerifiedEvent, Rejection> {
        verify_signature(&self.sandbox_public_key, headers, body, now)?;
        parse_notification(&self.merchant_id, body)
    }

    fn ack(&self) -> Reply {
        Reply { status: 200, content_type: "application/json", body: r#"{"status":"ok"}"#.to_string() }
    }

    fn nack(&self, code: &str, message: &str) -> Reply {
        json_error_reply(400, code, message)
    }

    fn close<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<CloseOutcome, GatewayError>> {
        Box::pin(
            async move { self.api.close(&key.attempt_ref).await.map_err(|e| GatewayError::unavailable(e.to_string())) },
        )
    }

    fn query<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<PaymentState, GatewayError>> {
        Box::pin(
            async move { self.api.query(&key.attempt_ref).await.map_err(|e| GatewayError::unavailable(e.to_string())) },
        )
    }

    fn query_refund<'a>(&'a self, req: &'a RefundQuery) -> BoxFuture<'a, Result<RefundState, GatewayError>> {
        Box::pin(async move {
            self.api
                .query_refund(&req.attempt_ref, &req.refund_no)
                .await
                .map_err(|e| GatewayError::unavailable(e.to_string()))
        })
    }

    fn refund<'a>(&'a self, req: &'a RefundRequest) -> BoxFuture<'a, Result<RefundAnswer, GatewayError>> {
        Box::pin(async move {
            self.api
                .refund(&req.attempt_ref, &req.refund_no, req.amount)
                .await
                .map_err(|e| GatewayError::unavailable(e.to_string()))
        })
    }

    /// The sandbox's days are cut at UTC midnight; its statement is ready as soon as the day is.
    fn statement_offset(&self) -> Option<time::UtcOffset> {
        Some(time::UtcOffset::UTC)
    }

    fn statement_so_far(&self) -> bool {
        true
    }

    fn statement(&self, day: time::Date) -> BoxFuture<'_, Result<Statement, StatementError>> {
        Box::pin(async move {
            let (from, to) = statement::day_window(day, time::UtcOffset::UTC);
            self.api.statement(from, to).await.map_err(|e| StatementError::Unavailable(e.to_string()))
        })
    }
}

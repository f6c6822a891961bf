//! Stripe Checkout (docs/gateways/stripe.md): a Checkout Session per attempt (its id is kept as the
//! attempt's gateway reference), webhooks verified with `Stripe-Signature` (any `v1` of any
//! configured secret, 300 s tolerance), session expiry as close, refunds keyed by our refund number.

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::keys::{Secret, hmac_sha256_verify_hex};
pub use super::stripe_balance::balance_line;
use super::stripe_cases;
use super::{
    AttemptKey, BoxFuture, CloseOutcome, Gateway, GatewayError, Handed, Handoff, HandoffRequest, IGNORED_EVENT,
    PaymentState, RefundAnswer, RefundQuery, RefundRequest, RefundState, Rejection, Reply, StatementError, http_client,
    json_error_reply, reject, transport_error, unix_seconds,
};
use crate::clock::Millis;
use crate::domain::case::{CaseKind, CaseReport};
use crate::domain::event::{Outcome, VerifiedEvent};
use crate::domain::ids::is_plain_id;
use crate::domain::statement::Statement;
use crate::domain::{Currency, Money};

pub const NAME: &str = "stripe";
pub const SIGNATURE_HEADER: &str = "stripe-signature";
/// stripe-python's default: events signed longer ago than this are refused.
pub const TOLERANCE_S: i64 = 300;
/// Stripe accepts a session `expires_at` from 30 minutes to 24 hours after creation; a shorter
/// hold is enforced by expiring the session when the order expires (close).
const SESSION_MIN_LIFETIME_S: i64 = 31 * 60;
const SESSION_MAX_LIFETIME_S: i64 = 23 * 3600;

/// The `[gateways.stripe]` section of the config file.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StripeConfig {
    pub secret_key: Secret,
    pub webhook_secret: Secret,
    /// Further endpoint secrets accepted while one is being rotated.
    #[serde(default)]
    pub previous_webhook_secrets: Vec<Secret>,
    #[serde(default = "stripe_default_url")]
    pub api_base_url: String,
}

fn stripe_default_url() -> String {
    "https://api.stripe.com".to_string()
}

pub struct Stripe {
    secret_key: String,
    webhook_secrets: Vec<String>,
    base_url: String,
    http: reqwest::Client,
}

/// Checks a `Stripe-Signature` header (`t=…,v1=…[,v1=…]`) against every secret: accepted if any
/// `v1` matches any secret, and `t` is no older than the tolerance.
pub fn verify_stripe_signature(secrets: &[String], header: &str, body: &[u8], now: Millis) -> Result<(), &'static str> {
    let mut t = None;
    let mut signatures = Vec::new();
    for part in header.split(',') {
        match part.trim().split_once('=') {
            Some(("t", v)) => t = v.parse::<i64>().ok(),
            Some(("v1", v)) => signatures.push(v),
            _ => {}
        }
    }
    let Some(t) = t else {
        return Err("no timestamp in Stripe-Signature");
    };
    if signatures.is_empty() {
        return Err("no v1 signature in Stripe-Signature");
    }
    if unix_seconds(now) - t > TOLERANCE_S {
        return Err("Stripe-Signature timestamp outside the tolerance");
    }
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(body);
    let ok = secrets
        .iter()
        .any(|secret| signatures.iter().any(|sig| hmac_sha256_verify_hex(secret.as_bytes(), &message, sig)));
    if ok { Ok(()) } else { Err("no v1 signature matches") }
}

/// Balance transactions asked for per page (Stripe's most).
const BALANCE_PAGE: usize = 100;
/// Pages of one day's balance transactions read at most (a statement's line limit).
const BALANCE_PAGES_MAX: usize = crate::domain::statement::STATEMENT_LINES_MAX / BALANCE_PAGE;

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str).unwrap_or_default()
}

fn money(v: &Value, amount_key: &str) -> Option<Money> {
    let currency = Currency::parse(&text(v, &["currency"]).to_ascii_uppercase()).ok()?;
    Money::new(v.get(amount_key)?.as_i64()?, currency).ok()
}

/// The attempt a session belongs to, from `client_reference_id` (metadata as fallback).
fn session_attempt(session: &Value) -> &str {
    match text(session, &["client_reference_id"]) {
        "" => text(session, &["metadata", "attempt_ref"]),
        r => r,
    }
}

impl Stripe {
    pub fn new(c: &StripeConfig) -> anyhow::Result<Self> {
        let mut webhook_secrets = vec![c.webhook_secret.0.clone()];
        webhook_secrets.extend(c.previous_webhook_secrets.iter().map(|s| s.0.clone()));
        if webhook_secrets.iter().any(String::is_empty) || c.secret_key.0.is_empty() {
            anyhow::bail!("secret_key and webhook_secret must not be empty");
        }
        Ok(Stripe {
            secret_key: c.secret_key.0.clone(),
            webhook_secrets,
            base_url: c.api_base_url.trim_end_matches('/').to_string(),
            http: http_client()?,
        })
    }

    /// Calls the API (form-encoded, bearer key, optional idempotency key); (status, JSON).
    async fn call(
        &self,
        method: &str,
        path: &str,
        form: &[(&str, String)],
        idempotency_key: Option<&str>,
    ) -> Result<(u16, Value), GatewayError> {
        let url = format!("{}{path}", self.base_url);
        let mut request = match method {
            "GET" => self.http.get(&url),
            _ => self.http.post(&url).form(form),
        };
        request = request.bearer_auth(&self.secret_key);
        if let Some(key) = idempotency_key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await.map_err(|e| transport_error(&e))?;
        let status = response.status().as_u16();
        if status >= 500 || status == 429 {
            return Err(GatewayError::unavailable(format!("stripe answered {status}")));
        }
        let body: Value =
            response.json().await.map_err(|_| GatewayError::unavailable("stripe: unreadable response"))?;
        Ok((status, body))
    }

    /// A write to a dispute (`path` under `/v1/disputes/`): the dispute as it stands after.
    async fn dispute_call(&self, path: &str, form: &[(&str, String)], now: Millis) -> Result<CaseReport, GatewayError> {
        let (status, dispute) = self.call("POST", path, form, None).await?;
        match status {
            200 => stripe_cases::fetched_report(&dispute, CaseKind::Dispute, &format!("POST {path}"), now)
                .map_err(|why| GatewayError::unavailable(format!("stripe {path}: {why}"))),
            400 | 404 => Err(GatewayError::invalid(
                "case_refused",
                format!("stripe refused {path}: {}", text(&dispute, &["error", "message"])),
            )),
            _ => Err(GatewayError::unavailable(format!("stripe {path} answered {status}"))),
        }
    }

    fn paid_event(&self, attempt_ref: &str, session: &Value) -> Result<VerifiedEvent, GatewayError> {
        let intent = text(session, &["payment_intent"]);
        let amount = money(session, "amount_total");
        let (true, Some(amount)) = (is_plain_id(intent), amount) else {
            return Err(GatewayError::unavailable("stripe: paid session without payment_intent or amount"));
        };
        Ok(VerifiedEvent {
            gateway: NAME.to_string(),
            event_id: format!("query_{intent}"),
            attempt_ref: attempt_ref.to_string(),
            outcome: Outcome::Succeeded { gateway_txn_id: intent.to_string(), amount },
            raw_body: session.to_string().into_bytes(),
        })
    }

    fn session_state(&self, attempt_ref: &str, session: &Value) -> Result<PaymentState, GatewayError> {
        if session_attempt(session) != attempt_ref {
            return Err(GatewayError::unavailable("stripe session belongs to another attempt"));
        }
        Ok(match (text(session, &["status"]), text(session, &["payment_status"])) {
            ("complete", "paid") => PaymentState::Paid(self.paid_event(attempt_ref, session)?),
            ("complete", _) | ("open", _) => PaymentState::Pending,
            ("expired", _) => PaymentState::Closed,
            (other, _) => return Err(GatewayError::unavailable(format!("stripe session status {other:?}"))),
        })
    }
}

fn refund_state(refund: &Value) -> RefundState {
    match text(refund, &["status"]) {
        "succeeded" => RefundState::Succeeded,
        "pending" | "requires_action" => RefundState::Processing,
        other => RefundState::Failed { reason: format!("refund {other}: {}", text(refund, &["failure_reason"])) },
    }
}

impl Gateway for Stripe {
    fn name(&self) -> &'static str {
        NAME
    }

    fn channels(&self) -> &'static [&'static str] {
        &["checkout"]
    }

    fn handoff<'a>(&'a self, req: &'a HandoffRequest) -> BoxFuture<'a, Result<Handed, GatewayError>> {
        Box::pin(async move {
            let now_s = unix_seconds(req.now);
            let expires_at =
                unix_seconds(req.expires_at).clamp(now_s + SESSION_MIN_LIFETIME_S, now_s + SESSION_MAX_LIFETIME_S);
            let name: String = req.subject.chars().take(250).collect();
            let form = vec![
                ("mode", "payment".to_string()),
                ("client_reference_id", req.attempt_ref.clone()),
                ("metadata[attempt_ref]", req.attempt_ref.clone()),
                ("metadata[order_no]", req.order_no.clone()),
                ("payment_intent_data[metadata][attempt_ref]", req.attempt_ref.clone()),
                ("line_items[0][quantity]", "1".to_string()),
                ("line_items[0][price_data][currency]", req.amount.currency().code().to_ascii_lowercase()),
                ("line_items[0][price_data][unit_amount]", req.amount.amount_minor().to_string()),
                ("line_items[0][price_data][product_data][name]", name),
                ("success_url", req.return_url.clone()),
                ("cancel_url", req.cancel_url.clone().unwrap_or_else(|| req.return_url.clone())),
                ("expires_at", expires_at.to_string()),
            ];
            // One session per attempt, even if the hand-off is rebuilt.
            let idem = format!("kassa-session-{}", req.attempt_ref);
            let (status, session) = self.call("POST", "/v1/checkout/sessions", &form, Some(&idem)).await?;
            let (id, url) = (text(&session, &["id"]), text(&session, &["url"]));
            if status != 200 || id.is_empty() || !url.starts_with("https://") && !url.starts_with("http://") {
                let message = text(&session, &["error", "message"]);
                return Err(GatewayError::invalid("gateway_refused", format!("stripe session: {status} {message}")));
            }
            Ok(Handed { handoff: Handoff::Redirect { url: url.to_string() }, gateway_ref: Some(id.to_string()) })
        })
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Result<VerifiedEvent, Rejection> {
        let header = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        verify_stripe_signature(&self.webhook_secrets, header, body, now)
            .map_err(|why| reject("invalid_signature", why, None))?;
        let event: Value =
            serde_json::from_slice(body).map_err(|_| reject("malformed_body", "unreadable event", None))?;
        let id = text(&event, &["id"]);
        let claimed = is_plain_id(id).then(|| id.to_string());
        let Some(event_id) = claimed.clone() else {
            return Err(reject("malformed_body", "event id missing", None));
        };
        let object = event.get("data").and_then(|d| d.get("object")).cloned().unwrap_or(Value::Null);
        let kind = text(&event, &["type"]);
        let (attempt_ref, outcome) = match kind {
            "checkout.session.completed" | "checkout.session.async_payment_succeeded" => {
                let attempt = session_attempt(&object).to_string();
                if text(&object, &["payment_status"]) != "paid" {
                    // Delayed methods: the money comes (or not) with a later event.
                    (attempt, Outcome::Pending)
                } else {
                    let intent = text(&object, &["payment_intent"]);
                    let amount = money(&object, "amount_total")
                        .ok_or_else(|| reject("amount_mismatch", "unreadable amount_total", claimed.clone()))?;
                    if !is_plain_id(intent) {
                        return Err(reject("malformed_body", "payment_intent missing", claimed));
                    }
                    (attempt, Outcome::Succeeded { gateway_txn_id: intent.to_string(), amount })
                }
            }
            "checkout.session.async_payment_failed" => (session_attempt(&object).to_string(), Outcome::Failed),
            "checkout.session.expired" => (session_attempt(&object).to_string(), Outcome::Cancelled),
            "refund.created" | "refund.updated" | "refund.failed" => {
                let attempt = text(&object, &["metadata", "attempt_ref"]).to_string();
                let refund_no = text(&object, &["metadata", "refund_no"]).to_string();
                if !is_plain_id(&refund_no) {
                    return Err(reject(IGNORED_EVENT, "refund not made by kassa", claimed));
                }
                let outcome = match refund_state(&object) {
                    RefundState::Succeeded => Outcome::RefundSucceeded { refund_no, amount: money(&object, "amount") },
                    RefundState::Processing | RefundState::NotFound => Outcome::Pending,
                    RefundState::Failed { .. } => Outcome::RefundFailed { refund_no },
                };
                (attempt, outcome)
            }
            _ => return Err(reject(IGNORED_EVENT, "event type not used by kassa", claimed)),
        };
        if !is_plain_id(&attempt_ref) {
            return Err(reject(IGNORED_EVENT, "event names no kassa attempt", claimed));
        }
        Ok(VerifiedEvent { gateway: NAME.to_string(), event_id, attempt_ref, outcome, raw_body: body.to_vec() })
    }

    fn ack(&self) -> Reply {
        Reply { status: 200, content_type: "application/json", body: r#"{"received":true}"#.to_string() }
    }

    fn nack(&self, code: &str, message: &str) -> Reply {
        json_error_reply(400, code, message)
    }

    fn close<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<CloseOutcome, GatewayError>> {
        Box::pin(async move {
            let Some(session_id) = key.gateway_ref.as_deref() else {
                // No session was ever created: nothing can be paid.
                return Ok(CloseOutcome::NotFound);
            };
            let path = format!("/v1/checkout/sessions/{session_id}/expire");
            let (status, session) = self.call("POST", &path, &[], None).await?;
            if status == 200 && text(&session, &["status"]) == "expired" {
                return Ok(CloseOutcome::Closed);
            }
            if status == 404 {
                return Ok(CloseOutcome::NotFound);
            }
            // Only open sessions can be expired: find out what it is.
            match self.query(key).await? {
                PaymentState::Paid(event) => Ok(CloseOutcome::AlreadyPaid(event)),
                PaymentState::Closed | PaymentState::Failed => Ok(CloseOutcome::Closed),
                PaymentState::NotFound => Ok(CloseOutcome::NotFound),
                PaymentState::Pending => Err(GatewayError::unavailable(format!("stripe expire answered {status}"))),
            }
        })
    }

    fn query<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<PaymentState, GatewayError>> {
        Box::pin(async move {
            let Some(session_id) = key.gateway_ref.as_deref() else {
                return Ok(PaymentState::NotFound);
            };
            let (status, session) = self.call("GET", &format!("/v1/checkout/sessions/{session_id}"), &[], None).await?;
            match status {
                200 => self.session_state(&key.attempt_ref, &session),
                404 => Ok(PaymentState::NotFound),
                _ => Err(GatewayError::unavailable(format!("stripe session query answered {status}"))),
            }
        })
    }

    fn refund<'a>(&'a self, req: &'a RefundRequest) -> BoxFuture<'a, Result<RefundAnswer, GatewayError>> {
        Box::pin(async move {
            let Some(intent) = req.gateway_txn_id.as_deref() else {
                return Ok(RefundAnswer::Rejected { reason: "the payment has no Stripe PaymentIntent".to_string() });
            };
            let form = vec![
                ("payment_intent", intent.to_string()),
                ("amount", req.amount.amount_minor().to_string()),
                ("metadata[refund_no]", req.refund_no.clone()),
                ("metadata[attempt_ref]", req.attempt_ref.clone()),
                ("metadata[reason]", req.reason.chars().take(200).collect()),
            ];
            let idem = format!("kassa-refund-{}", req.refund_no);
            let (status, refund) = self.call("POST", "/v1/refunds", &form, Some(&idem)).await?;
            if status != 200 {
                let message = text(&refund, &["error", "message"]);
                return Ok(RefundAnswer::Rejected { reason: format!("stripe refund {status}: {message}") });
            }
            let id = text(&refund, &["id"]).to_string();
            Ok(match refund_state(&refund) {
                RefundState::Succeeded => RefundAnswer::Succeeded { gateway_refund_id: id },
                RefundState::Processing | RefundState::NotFound => RefundAnswer::Accepted { gateway_refund_id: id },
                RefundState::Failed { reason } => RefundAnswer::Rejected { reason },
            })
        })
    }

    /// Stripe's days are UTC days.
    fn statement_offset(&self) -> Option<time::UtcOffset> {
        Some(time::UtcOffset::UTC)
    }

    /// The balance transactions created in `day` (UTC), page by page, each with its source (the
    /// charge, the refund or the dispute) expanded: payments, refunds and disputes' withdrawals and
    /// reinstatements become lines (`stripe_balance.rs`); payouts, fees billed apart and other
    /// movements are left out.
    fn statement(&self, day: time::Date) -> BoxFuture<'_, Result<Statement, StatementError>> {
        Box::pin(async move {
            let (from, to) = crate::domain::statement::day_window(day, time::UtcOffset::UTC);
            let mut statement = Statement::default();
            let mut after: Option<String> = None;
            for _ in 0..BALANCE_PAGES_MAX {
                let mut query = vec![
                    ("limit", BALANCE_PAGE.to_string()),
                    ("created[gte]", unix_seconds(from).to_string()),
                    ("created[lt]", unix_seconds(to).to_string()),
                    ("expand[]", "data.source".to_string()),
                ];
                if let Some(id) = &after {
                    query.push(("starting_after", id.clone()));
                }
                let query = serde_urlencoded::to_string(&query)
                    .map_err(|e| StatementError::Unavailable(format!("stripe: {e}")))?;
                let (status, page) = self.call("GET", &format!("/v1/balance_transactions?{query}"), &[], None).await?;
                if status != 200 {
                    return Err(StatementError::Unavailable(format!(
                        "stripe balance transactions answered {status}: {}",
                        text(&page, &["error", "message"])
                    )));
                }
                let Some(items) = page.get("data").and_then(Value::as_array) else {
                    return Err(StatementError::Unreadable("stripe balance transactions: no data list".into()));
                };
                for item in items {
                    if let Some(line) = balance_line(item).map_err(StatementError::Unreadable)? {
                        statement.lines.push(line);
                    }
                }
                if page.get("has_more").and_then(Value::as_bool) != Some(true) {
                    return Ok(statement);
                }
                after = items.last().map(|i| text(i, &["id"]).to_string()).filter(|id| !id.is_empty());
                if after.is_none() {
                    return Err(StatementError::Unreadable(
                        "stripe balance transactions: more pages, no cursor".into(),
                    ));
                }
            }
            Err(StatementError::Unreadable(format!(
                "stripe balance transactions: more than {BALANCE_PAGES_MAX} pages in a day"
            )))
        })
    }

    fn verify_case(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Option<Result<CaseReport, Rejection>> {
        let event: Value = serde_json::from_slice(body).ok()?;
        if !stripe_cases::is_case_event(text(&event, &["type"])) {
            return None;
        }
        let claimed = Some(text(&event, &["id"]).to_string()).filter(|id| is_plain_id(id));
        let header = headers.get(SIGNATURE_HEADER).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if let Err(why) = verify_stripe_signature(&self.webhook_secrets, header, body, now) {
            return Some(Err(reject("invalid_signature", why, claimed)));
        }
        stripe_cases::event_report(&event, body).map(|r| r.map_err(|why| reject("malformed_body", &why, claimed)))
    }

    /// Disputes and early fraud warnings opened since `since`, page by page: each as it stands.
    fn list_cases(&self, since: Millis, now: Millis) -> BoxFuture<'_, Result<Vec<CaseReport>, GatewayError>> {
        Box::pin(async move {
            let mut reports = Vec::new();
            for (path, kind) in
                [("/v1/disputes", CaseKind::Dispute), ("/v1/radar/early_fraud_warnings", CaseKind::FraudWarning)]
            {
                let mut after: Option<String> = None;
                for page_no in 0.. {
                    if page_no == stripe_cases::CASE_PAGES_MAX {
                        return Err(GatewayError::unavailable(format!(
                            "stripe {path}: more than {} pages",
                            stripe_cases::CASE_PAGES_MAX
                        )));
                    }
                    let mut query = vec![
                        ("limit", stripe_cases::CASE_PAGE.to_string()),
                        ("created[gte]", unix_seconds(since).to_string()),
                    ];
                    if let Some(id) = &after {
                        query.push(("starting_after", id.clone()));
                    }
                    let query =
                        serde_urlencoded::to_string(&query).map_err(|e| GatewayError::unavailable(e.to_string()))?;
                    let (status, page) = self.call("GET", &format!("{path}?{query}"), &[], None).await?;
                    if status != 200 {
                        return Err(GatewayError::unavailable(format!("stripe {path} answered {status}")));
                    }
                    let items = page.get("data").and_then(Value::as_array).cloned().unwrap_or_default();
                    for item in &items {
                        let report = stripe_cases::fetched_report(item, kind, &format!("GET {path}"), now)
                            .map_err(|why| GatewayError::unavailable(format!("stripe {path}: {why}")))?;
                        reports.push(report);
                    }
                    after = items.last().map(|i| text(i, &["id"]).to_string()).filter(|id| is_plain_id(id));
                    if page.get("has_more").and_then(Value::as_bool) != Some(true) || after.is_none() {
                        break;
                    }
                }
            }
            Ok(reports)
        })
    }

    fn submit_evidence<'a>(
        &'a self,
        case_id: &'a str,
        evidence: &'a [(String, String)],
        submit: bool,
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        Box::pin(async move {
            let form = stripe_cases::evidence_form(evidence, submit)
                .map_err(|why| GatewayError::invalid("invalid_evidence", why))?;
            let form: Vec<(&str, String)> = form.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
            self.dispute_call(&format!("/v1/disputes/{case_id}"), &form, now).await
        })
    }

    fn accept_case<'a>(&'a self, case_id: &'a str, now: Millis) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        Box::pin(async move { self.dispute_call(&format!("/v1/disputes/{case_id}/close"), &[], now).await })
    }

    fn query_refund<'a>(&'a self, req: &'a RefundQuery) -> BoxFuture<'a, Result<RefundState, GatewayError>> {
        Box::pin(async move {
            let Some(id) = req.gateway_refund_id.as_deref().filter(|id| is_plain_id(id)) else {
                return Ok(RefundState::NotFound);
            };
            let (status, refund) = self.call("GET", &format!("/v1/refunds/{id}"), &[], None).await?;
            match status {
                200 if text(&refund, &["metadata", "refund_no"]) == req.refund_no => Ok(refund_state(&refund)),
                200 => Err(GatewayError::unavailable("stripe refund belongs to another refund number")),
                404 => Ok(RefundState::NotFound),
                _ => Err(GatewayError::unavailable(format!("stripe refund query answered {status}"))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_rotation_and_tolerance() {
        let body = br#"{"id":"evt_1"}"#;
        let now = 1_700_000_000_000;
        let sig = |secret: &str, t: i64| {
            super::super::keys::hmac_sha256_hex(secret.as_bytes(), format!("{t}.{}", "{\"id\":\"evt_1\"}").as_bytes())
        };
        let secrets = vec!["whsec_new".to_string(), "whsec_old".to_string()];
        let t = now / 1000;
        let h = format!("t={t},v1={},v1={}", sig("whsec_other", t), sig("whsec_old", t));
        assert!(verify_stripe_signature(&secrets, &h, body, now).is_ok());
        let h = format!("t={t},v0={}", sig("whsec_new", t));
        assert!(verify_stripe_signature(&secrets, &h, body, now).is_err());
        let old = t - TOLERANCE_S - 1;
        let h = format!("t={old},v1={}", sig("whsec_new", old));
        assert!(verify_stripe_signature(&secrets, &h, body, now).is_err());
        // Future timestamps pass, as in stripe-python.
        let future = t + 3600;
        let h = format!("t={future},v1={}", sig("whsec_new", future));
        assert!(verify_stripe_signature(&secrets, &h, body, now).is_ok());
        assert!(verify_stripe_signature(&secrets, "garbage", body, now).is_err());
    }
}

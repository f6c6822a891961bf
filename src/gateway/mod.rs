//! Gateway adapters behind one trait: build the hand-off, verify and parse a notification, reply
//! the way the gateway expects, query, close and refund. Wire formats stay inside each adapter
//! (`alipay`, `wechatpay`, `stripe`, `sandbox`, and their `*_complaints` and `*_cases` readers); key handling is in `keys`.

pub mod alipay;
pub mod alipay_complaints;
pub mod bills;
pub mod config;
pub mod keys;
pub mod multipart;
pub mod sandbox;
pub mod stripe;
mod stripe_balance;
pub mod stripe_cases;
pub mod timed;
pub mod wechat_complaints;
pub mod wechat_config;
pub mod wechat_keys;
pub mod wechat_shipping;
pub mod wechat_sign;
pub mod wechat_subscribe;
pub mod wechat_subscribe_config;
pub mod wechat_wire;
pub mod wechatpay;

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::http::HeaderMap;
use serde::Serialize;

use crate::clock::Millis;
use crate::domain::case::{CaseImage, CaseReport, Completion, ImageLimits, RefundVerdict};
use crate::domain::event::VerifiedEvent;
pub use crate::domain::event::{CloseOutcome, PaymentState, RefundAnswer, RefundState};
use crate::domain::statement::Statement;
use crate::domain::{Currency, Money};

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
    /// Where a buyer who gives up at the gateway goes (the shop's, when its checkout named one);
    /// `None`: the return URL.
    pub cancel_url: Option<String>,
    pub channel: String,
    /// Who pays, for channels that need it (WeChat JSAPI: `openid`; WeChat H5: `client_ip`).
    pub payer: Payer,
    pub now: Millis,
}

/// The payer details a channel may need; checked by the adapter that needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Payer {
    pub openid: Option<String>,
    pub client_ip: Option<String>,
}

/// A built hand-off plus the gateway's own id for the attempt when it issues one (a Stripe
/// Checkout Session id), which kassa stores and passes back for query and close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    pub handoff: Handoff,
    pub gateway_ref: Option<String>,
}

pub use crate::domain::ids::AttemptKey;

/// A hand-off form's fields, each name with its value: a schema of its own in `/openapi.json`, so
/// every client generator names it once.
#[derive(utoipa::ToSchema)]
pub struct FormFields(pub BTreeMap<String, String>);

/// How the buyer reaches the gateway (the checkout answer's `payment`, `/openapi.json`).
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Handoff {
    /// An auto-submitting form: every field generated and signed server-side.
    #[schema(title = "FormHandoff")]
    Form {
        action: String,
        method: String,
        #[schema(value_type = FormFields)]
        fields: BTreeMap<String, String>,
    },
    /// A page of the gateway's to send the buyer to (Stripe Checkout, WeChat Pay H5).
    #[schema(title = "RedirectHandoff")]
    Redirect { url: String },
    /// Parameters for the gateway's app or mini-program call (`wx.requestPayment`).
    #[schema(title = "ClientHandoff")]
    Client { params: serde_json::Value },
    /// A code the buyer scans with the gateway's app (WeChat Pay Native): kassa draws it; it can
    /// be paid until `expires_at` (RFC 3339), the hold's end.
    #[schema(title = "QrHandoff")]
    Qr { code_url: String, expires_at: String },
}

/// Why a notification was refused before it reached the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Stable code: `invalid_signature`, `malformed_body`, `merchant_mismatch`, …
    pub code: &'static str,
    pub detail: String,
    /// The event id the body claims, when it could be read; kept for the operator only.
    pub claimed_event_id: Option<String>,
    /// Signed under a key serial this gateway has not seen: worth one [`Gateway::refresh_keys`]
    /// and a second look.
    pub unknown_key: Option<String>,
}

/// The exact HTTP answer a gateway expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

/// A refund to send to the gateway; `refund_no` is its idempotency number there.
#[derive(Debug, Clone)]
pub struct RefundRequest {
    pub attempt_ref: String,
    pub refund_no: String,
    pub amount: Money,
    pub reason: String,
    /// What the attempt captured (WeChat refunds name the original total).
    pub captured: Money,
    /// The gateway's transaction id of the payment (Stripe refunds name the PaymentIntent).
    pub gateway_txn_id: Option<String>,
    /// The payment is a second capture under the attempt's merchant reference: the refund names
    /// its transaction (Alipay's `trade_no`, WeChat Pay's `transaction_id`), not the reference.
    pub second_capture: bool,
}

/// A refund to look up: our number and, when the gateway issued one, its id.
#[derive(Debug, Clone)]
pub struct RefundQuery {
    pub attempt_ref: String,
    pub refund_no: String,
    pub gateway_refund_id: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// Not reached, timed out, 5xx or an unreadable answer: try again later.
    #[error("gateway unavailable: {0}")]
    Unavailable(String),
    /// The request cannot succeed as given (e.g. no payer openid for WeChat JSAPI): a 4xx with a
    /// stable code, not worth retrying.
    #[error("{message}")]
    Invalid { code: &'static str, message: String },
}

impl GatewayError {
    pub fn unavailable(message: impl Into<String>) -> Self {
        GatewayError::Unavailable(message.into())
    }

    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        GatewayError::Invalid { code, message: message.into() }
    }
}

/// A verified notification that carries nothing to apply (e.g. a Stripe event type kassa does not
/// use): acknowledged, so the gateway stops resending it, and not stored.
pub const IGNORED_EVENT: &str = "ignored_event";

/// Why a day's statement could not be had.
#[derive(Debug, thiserror::Error)]
pub enum StatementError {
    /// The gateway has not published that day's file yet: try again later.
    #[error("not published yet: {0}")]
    NotYet(String),
    /// Not reached, or refused: try again later.
    #[error("not fetched: {0}")]
    Unavailable(String),
    /// The file came but fails its hash or cannot be read.
    #[error("unreadable: {0}")]
    Unreadable(String),
    /// This gateway publishes no statements kassa reads.
    #[error("this gateway publishes no statements")]
    Unsupported,
}

impl From<GatewayError> for StatementError {
    fn from(e: GatewayError) -> Self {
        StatementError::Unavailable(e.to_string())
    }
}

pub trait Gateway: Send + Sync {
    fn name(&self) -> &'static str;
    /// The channels this gateway offers; the first is used when the checkout names none.
    fn channels(&self) -> &'static [&'static str];
    /// The channel used when the checkout names none.
    fn default_channel(&self) -> &'static str {
        self.channels().first().copied().unwrap_or("form")
    }
    /// The currencies this gateway takes; `None` for any.
    fn currencies(&self) -> Option<&'static [Currency]> {
        None
    }
    /// Checks, before anything is created, that the payer details the channel needs are there.
    fn check_payer(&self, channel: &str, payer: &Payer) -> Result<(), GatewayError> {
        let _ = (channel, payer);
        Ok(())
    }
    /// The app id payers pay under (WeChat Pay's `appid`), kept on an attempt with its payer.
    fn app_id(&self) -> Option<&str> {
        None
    }
    /// Builds the hand-off after the order has committed (may call the provider).
    fn handoff<'a>(&'a self, req: &'a HandoffRequest) -> BoxFuture<'a, Result<Handed, GatewayError>>;
    /// Verifies a notification's signature and parses it. Pure: no I/O, never panics.
    fn verify(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Result<VerifiedEvent, Rejection>;
    /// A notification came signed under key `serial`, unknown here: fetch the gateway's keys (at
    /// most once a minute, one fetch at a time). Whether `serial` is known now.
    fn refresh_keys<'a>(&'a self, serial: &'a str) -> BoxFuture<'a, bool> {
        let _ = serial;
        Box::pin(async { false })
    }
    /// The scheduled upkeep of the gateway's keys (a download of rotating certificates); an error
    /// names what an operator must look at (a failed download, keys about to expire).
    fn maintain_keys(&self, now: Millis) -> BoxFuture<'_, Result<(), String>> {
        let _ = now;
        Box::pin(async { Ok(()) })
    }
    /// The reply for an accepted or duplicate notification.
    fn ack(&self) -> Reply;
    /// The reply for a refused notification.
    fn nack(&self, code: &str, message: &str) -> Reply;
    /// Asks the gateway to stop accepting payment for an attempt.
    fn close<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<CloseOutcome, GatewayError>>;
    /// Asks the gateway what became of an attempt (active query).
    fn query<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<PaymentState, GatewayError>>;
    /// Sends a refund. Sending the same `refund_no` again must not refund twice.
    fn refund<'a>(&'a self, req: &'a RefundRequest) -> BoxFuture<'a, Result<RefundAnswer, GatewayError>>;
    /// Asks the gateway what became of a refund.
    fn query_refund<'a>(&'a self, req: &'a RefundQuery) -> BoxFuture<'a, Result<RefundState, GatewayError>>;
    /// The UTC offset the gateway's statement days are cut at (Beijing time for the Chinese
    /// gateways); `None` when it publishes no statements kassa reads.
    fn statement_offset(&self) -> Option<time::UtcOffset> {
        None
    }
    /// Whether a statement of the day so far can be had before the day is over (the sandbox's,
    /// so a demo shows a reconciled day at once); a real gateway's comes the day after.
    fn statement_so_far(&self) -> bool {
        false
    }
    /// Downloads and reads the gateway's statement of `day` (its trades, refunds and fees).
    fn statement(&self, day: time::Date) -> BoxFuture<'_, Result<Statement, StatementError>> {
        let _ = day;
        Box::pin(async { Err(StatementError::Unsupported) })
    }
    /// A notification about a complaint or dispute, verified as a payment notification is; `None`
    /// when the body is not one (it is then a payment notification, for [`Gateway::verify`]).
    /// Pure: no I/O.
    fn verify_case(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Option<Result<CaseReport, Rejection>> {
        let _ = (headers, body, now);
        None
    }
    /// Every case the provider lists that was opened since `since` (the backstop poll for lost
    /// notifications), each as it stands at `now`, within the adapter's named page limits.
    fn list_cases(&self, since: Millis, now: Millis) -> BoxFuture<'_, Result<Vec<CaseReport>, GatewayError>> {
        let _ = (since, now);
        Box::pin(async {
            Err(GatewayError::invalid("cases_unsupported", "this gateway has no complaints or disputes"))
        })
    }
    /// The provider's case `case_id` as it stands at `now` (a WeChat Pay complaint, whose
    /// notification names it only).
    fn fetch_case<'a>(&'a self, case_id: &'a str, now: Millis) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        let _ = (case_id, now);
        Box::pin(async {
            Err(GatewayError::invalid("cases_unsupported", "this gateway has no complaints or disputes"))
        })
    }
    /// What the provider takes of the operator's images where it takes less than kassa's rules
    /// (checked before any upload); `None` when kassa's rules are the provider's.
    fn case_image_limits(&self) -> Option<ImageLimits> {
        None
    }
    /// Uploads an image for a reply or a refusal (checked by the domain already); its media id at
    /// the provider.
    fn upload_case_image<'a>(&'a self, image: &'a CaseImage) -> BoxFuture<'a, Result<String, GatewayError>> {
        let _ = image;
        Box::pin(async { Err(GatewayError::invalid("action_unsupported", "this gateway takes no images")) })
    }
    /// Sends the operator's reply `text`, with the images uploaded for it (`media_ids`), to the
    /// complaint `case_id`; the case as it stands after.
    fn reply_case<'a>(
        &'a self,
        case_id: &'a str,
        text: &'a str,
        media_ids: &'a [String],
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        let _ = (case_id, text, media_ids, now);
        Box::pin(async { Err(GatewayError::invalid("action_unsupported", "this gateway takes no complaint reply")) })
    }
    /// Answers the buyer's refund request of the complaint `case_id` (a refusal with the images
    /// uploaded for it); the case as it stands after.
    fn answer_refund_request<'a>(
        &'a self,
        case_id: &'a str,
        verdict: &'a RefundVerdict,
        media_ids: &'a [String],
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        let _ = (case_id, verdict, media_ids, now);
        Box::pin(async { Err(GatewayError::invalid("action_unsupported", "this gateway takes no refund requests")) })
    }
    /// The URL the provider sends its case notifications to, as registered with it; `None` when
    /// none is.
    fn case_notify_url(&self) -> BoxFuture<'_, Result<Option<String>, GatewayError>> {
        Box::pin(async { Err(GatewayError::invalid("action_unsupported", "this gateway registers no case URL")) })
    }
    /// Registers `url` as where the provider sends its case notifications (replacing any); the URL
    /// as the provider then has it.
    fn register_case_notify_url<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<String, GatewayError>> {
        let _ = url;
        Box::pin(async { Err(GatewayError::invalid("action_unsupported", "this gateway registers no case URL")) })
    }
    /// Removes the registered case notification URL; whether one was registered.
    fn delete_case_notify_url(&self) -> BoxFuture<'_, Result<bool, GatewayError>> {
        Box::pin(async { Err(GatewayError::invalid("action_unsupported", "this gateway registers no case URL")) })
    }
    /// Tells the provider the complaint `case_id` is dealt with (`completion`: what kassa knows of
    /// how); the case as it stands after.
    fn complete_case<'a>(
        &'a self,
        case_id: &'a str,
        completion: Completion,
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        let _ = (case_id, completion, now);
        Box::pin(async {
            Err(GatewayError::invalid("action_unsupported", "this gateway has no complaint to complete"))
        })
    }
    /// Submits `evidence` (field, text) for the provider's case `case_id`, or stages it when
    /// `submit` is false; the case as it stands after.
    fn submit_evidence<'a>(
        &'a self,
        case_id: &'a str,
        evidence: &'a [(String, String)],
        submit: bool,
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        let _ = (case_id, evidence, submit, now);
        Box::pin(async { Err(GatewayError::invalid("action_unsupported", "this gateway takes no evidence")) })
    }
    /// Accepts the loss of the provider's case `case_id` (a Stripe dispute closed); the case as
    /// it stands after.
    fn accept_case<'a>(&'a self, case_id: &'a str, now: Millis) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        let _ = (case_id, now);
        Box::pin(async { Err(GatewayError::invalid("action_unsupported", "this gateway has no case to accept")) })
    }
}

/// The configured gateways by name.
#[derive(Clone, Default)]
pub struct Gateways {
    by_name: HashMap<&'static str, Arc<dyn Gateway>>,
    pub default: Option<&'static str>,
}

impl Gateways {
    /// Mounts a gateway; its remote calls are timed ([`timed`]).
    pub fn add(&mut self, gateway: Arc<dyn Gateway>) {
        self.by_name.insert(gateway.name(), Arc::new(timed::Timed(gateway)));
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

/// The HTTP client adapters use to reach their providers: rustls, bounded timeouts.
pub fn http_client() -> Result<reqwest::Client, GatewayError> {
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(5))
        .timeout(std::time::Duration::from_secs(15))
        .user_agent(concat!("kassa/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| GatewayError::unavailable(format!("HTTP client: {e}")))
}

/// A transport failure, without the URL (which may carry identifiers but never secrets) detail.
pub fn transport_error(e: &reqwest::Error) -> GatewayError {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else {
        "request failed"
    };
    GatewayError::unavailable(kind)
}

/// Largest statement file kassa downloads (a ZIP, or a bill of up to a million lines).
pub const STATEMENT_BYTES_MAX: usize = 256 * 1024 * 1024;

/// A response's body, refused once it grows past `max` bytes.
pub async fn read_limited(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, GatewayError> {
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(GatewayError::unavailable(format!("the answer is larger than {max} bytes")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| transport_error(&e))? {
        if body.len() + chunk.len() > max {
            return Err(GatewayError::unavailable(format!("the answer is larger than {max} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Seconds since the epoch from milliseconds.
pub fn unix_seconds(ms: Millis) -> i64 {
    ms.div_euclid(1000)
}

/// A local time at a fixed UTC offset (`+08:00` for China) in the given format.
pub fn format_at_offset(ms: Millis, offset_hours: i8, rfc3339: bool) -> String {
    let offset = time::UtcOffset::from_hms(offset_hours, 0, 0).unwrap_or(time::UtcOffset::UTC);
    let at = time::OffsetDateTime::from_unix_timestamp(unix_seconds(ms))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
        .to_offset(offset);
    let result = if rfc3339 {
        at.format(&time::format_description::well_known::Rfc3339)
    } else {
        at.format(time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]"))
    };
    result.unwrap_or_default()
}

/// A refusal with a stable code; `claimed` is the event id the body claims, if it could be read.
pub fn reject(code: &'static str, detail: impl Into<String>, claimed: Option<String>) -> Rejection {
    Rejection { code, detail: detail.into(), claimed_event_id: claimed, unknown_key: None }
}

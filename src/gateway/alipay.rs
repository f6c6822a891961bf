//! Alipay open platform, RSA2 (docs/gateways/alipay.md): `alipay.trade.page.pay` as an auto-submitting
//! form, form notifications verified with the Alipay public key plus the merchant checks,
//! `alipay.trade.query` / `close` / `refund` / `fastpay.refund.query` with signed requests and
//! verified responses; trade complaints pushed, fetched, listed, replied to (with images uploaded
//! first, in `alipay/images`) and given the merchant's processing result (read in
//! `alipay_complaints`).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::{Value, json};

use super::alipay_complaints as complaints;
use super::keys::{RsaSigner, RsaVerifier};
use super::{
    AttemptKey, BoxFuture, CloseOutcome, Gateway, GatewayError, Handed, Handoff, HandoffRequest, PaymentState,
    RefundAnswer, RefundQuery, RefundRequest, RefundState, Rejection, Reply, StatementError, bills, format_at_offset,
    http_client, reject, transport_error,
};
use crate::clock::Millis;
use crate::domain::case::{ALIPAY_IMAGES, CaseImage, CaseReport, Completion, ImageLimits};
use crate::domain::event::{Outcome, VerifiedEvent};
use crate::domain::statement::Statement;
use crate::domain::{Currency, Money};

mod images;

pub const NAME: &str = "alipay";
/// Longest face-to-face `qr_code` accepted (Alipay's are short links to qr.alipay.com).
pub const QR_CODE_LEN_MAX: usize = 512;

/// The `[gateways.alipay]` section of the config file; key values are PEM file paths.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AlipayConfig {
    pub app_id: String,
    /// The receiving account (`seller_id`) notifications must name.
    pub seller_id: String,
    pub app_private_key_file: PathBuf,
    pub alipay_public_key_file: PathBuf,
    #[serde(default = "alipay_default_url")]
    pub gateway_url: String,
}

fn alipay_default_url() -> String {
    "https://openapi.alipay.com/gateway.do".to_string()
}

pub struct Alipay {
    app_id: String,
    seller_id: String,
    signer: RsaSigner,
    alipay_key: RsaVerifier,
    gateway_url: String,
    notify_url: String,
    http: reqwest::Client,
}

/// The string both sides sign: every parameter except `sign` (and, for what Alipay sends us,
/// `sign_type`), empty values dropped, sorted by key, `k=v` joined with `&`, values raw.
pub fn sign_content<'a>(params: impl IntoIterator<Item = (&'a str, &'a str)>, drop_sign_type: bool) -> String {
    let mut pairs: Vec<(&str, &str)> = params
        .into_iter()
        .filter(|(k, v)| !v.is_empty() && *k != "sign" && !(drop_sign_type && *k == "sign_type"))
        .collect();
    pairs.sort_unstable();
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&")
}

impl Alipay {
    pub fn new(c: &AlipayConfig, notify_url: String) -> anyhow::Result<Self> {
        Ok(Alipay {
            app_id: c.app_id.clone(),
            seller_id: c.seller_id.clone(),
            signer: RsaSigner::from_file(&c.app_private_key_file)?,
            alipay_key: RsaVerifier::from_file(&c.alipay_public_key_file)?,
            gateway_url: c.gateway_url.clone(),
            notify_url,
            http: http_client()?,
        })
    }

    /// The common parameters plus `biz_content`, signed.
    fn signed_params(
        &self,
        method: &str,
        biz: &Value,
        now: Millis,
        extra: &[(&str, &str)],
    ) -> BTreeMap<String, String> {
        let biz = biz.to_string();
        let mut text = vec![("biz_content", biz.as_str())];
        text.extend_from_slice(extra);
        self.signed_text(method, now, &text)
    }

    /// The common parameters plus the method's text parameters, signed over all of them (a file
    /// an upload carries is not).
    fn signed_text(&self, method: &str, now: Millis, text: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut p = BTreeMap::new();
        p.insert("app_id".to_string(), self.app_id.clone());
        p.insert("method".to_string(), method.to_string());
        p.insert("format".to_string(), "JSON".to_string());
        p.insert("charset".to_string(), "utf-8".to_string());
        p.insert("sign_type".to_string(), "RSA2".to_string());
        p.insert("timestamp".to_string(), format_at_offset(now, 8, false));
        p.insert("version".to_string(), "1.0".to_string());
        for (k, v) in text {
            p.insert((*k).to_string(), (*v).to_string());
        }
        let content = sign_content(p.iter().map(|(k, v)| (k.as_str(), v.as_str())), false);
        p.insert("sign".to_string(), self.signer.sign_base64(content.as_bytes()));
        p
    }

    /// Calls an API method and returns its verified `*_response` node.
    async fn call(&self, method: &str, biz: Value) -> Result<Value, GatewayError> {
        self.call_with(method, biz, &[]).await
    }

    /// [`Self::call`] with common parameters of its own (`notify_url`).
    async fn call_with(&self, method: &str, biz: Value, extra: &[(&str, &str)]) -> Result<Value, GatewayError> {
        let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        let params = self.signed_params(method, &biz, now, extra);
        let response = self.http.post(&self.gateway_url).form(&params).send().await.map_err(|e| transport_error(&e))?;
        if response.status().is_server_error() {
            return Err(GatewayError::unavailable(format!("alipay answered {}", response.status())));
        }
        let text = response.text().await.map_err(|e| transport_error(&e))?;
        let node = format!("{}_response", method.replace('.', "_"));
        verify_response(&self.alipay_key, &text, &node)
    }

    /// The signed form that takes the buyer to a cashier: the PC one or the mobile web one, which
    /// also names where its "back" link goes (`quit_url`: the shop's cancel URL, else the return
    /// page).
    fn cashier_form(&self, req: &HandoffRequest, method: &str, product_code: &str) -> Handed {
        let mut biz = trade_fields(req, product_code);
        if method == "alipay.trade.wap.pay" {
            biz["quit_url"] = json!(req.cancel_url.as_deref().unwrap_or(&req.return_url));
        }
        let fields = self.signed_params(
            method,
            &biz,
            req.now,
            &[("notify_url", &self.notify_url), ("return_url", &req.return_url)],
        );
        Handed {
            handoff: Handoff::Form { action: self.gateway_url.clone(), method: "post".to_string(), fields },
            gateway_ref: None,
        }
    }

    /// Face-to-face: Alipay answers a `qr_code` (in its signed response) for the buyer to scan with
    /// the Alipay app, payable until the hold ends.
    async fn precreate(&self, req: &HandoffRequest) -> Result<Handed, GatewayError> {
        let biz = trade_fields(req, "FACE_TO_FACE_PAYMENT");
        let r = self.call_with("alipay.trade.precreate", biz, &[("notify_url", &self.notify_url)]).await?;
        if !is_ok(&r) {
            let why = format!("alipay precreate: {}", describe(&r));
            return Err(if is_transient(&r) {
                GatewayError::unavailable(why)
            } else {
                GatewayError::invalid("gateway_refused", why)
            });
        }
        let qr_code = field(&r, "qr_code");
        if field(&r, "out_trade_no") != req.attempt_ref
            || !qr_code.starts_with("https://")
            || qr_code.len() > QR_CODE_LEN_MAX
        {
            return Err(GatewayError::unavailable("alipay precreate answered no usable qr_code for this trade"));
        }
        let expires_at = crate::clock::rfc3339(req.expires_at);
        Ok(Handed { handoff: Handoff::Qr { code_url: qr_code.to_string(), expires_at }, gateway_ref: None })
    }

    /// A notification's fields, once its form reads (no field twice) and its `sign` verifies
    /// with the Alipay public key over every other field but `sign_type`.
    fn verified_fields(&self, body: &[u8]) -> Result<BTreeMap<String, String>, Rejection> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_bytes(body)
            .map_err(|_| reject("malformed_body", "not a form-encoded notification", None))?;
        let mut fields: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in pairs {
            if fields.insert(k, v).is_some() {
                return Err(reject("malformed_body", "repeated field", None));
            }
        }
        let sign = fields.get("sign").map(String::as_str).unwrap_or_default();
        if sign.is_empty() {
            return Err(reject("invalid_signature", "no sign field", None));
        }
        let content = sign_content(fields.iter().map(|(k, v)| (k.as_str(), v.as_str())), true);
        if !self.alipay_key.verify_base64(content.as_bytes(), sign) {
            return Err(reject("invalid_signature", "signature does not verify with the Alipay public key", None));
        }
        Ok(fields)
    }

    /// A complaint method naming `case_id` (with `biz`, or just the id); then the complaint as it
    /// stands, fetched. A refusal Alipay may not repeat is `case_refused`.
    async fn complaint_action(
        &self,
        case_id: &str,
        method: &str,
        biz: Value,
        now: Millis,
    ) -> Result<CaseReport, GatewayError> {
        let r = self.call(method, biz).await?;
        if !is_ok(&r) {
            return Err(complaint_refusal(method, &r));
        }
        self.complaint(case_id, now).await
    }

    /// `alipay.merchant.tradecomplain.query`: the complaint as it stands at `now`.
    async fn complaint(&self, case_id: &str, now: Millis) -> Result<CaseReport, GatewayError> {
        let biz = complaints::complaint_biz(case_id)
            .ok_or_else(|| GatewayError::invalid("case_refused", "not an Alipay complaint id"))?;
        let r = self.call(complaints::QUERY, biz).await?;
        if !is_ok(&r) {
            return Err(complaint_refusal(complaints::QUERY, &r));
        }
        if field(&r, "complain_event_id") != case_id {
            return Err(GatewayError::unavailable("alipay complaint query answered for another complaint"));
        }
        complaints::detail_report(&r, complaints::QUERY, now)
            .map_err(|why| GatewayError::unavailable(format!("alipay complaint: {why}")))
    }

    fn event(
        &self,
        attempt_ref: &str,
        trade_no: &str,
        total: &str,
        raw: Vec<u8>,
    ) -> Result<VerifiedEvent, GatewayError> {
        let amount = Money::parse_decimal(total, Currency::CNY)
            .ok_or_else(|| GatewayError::unavailable("alipay query: unreadable total_amount"))?;
        Ok(VerifiedEvent {
            gateway: NAME.to_string(),
            event_id: format!("query_{trade_no}"),
            attempt_ref: attempt_ref.to_string(),
            outcome: Outcome::Succeeded { gateway_txn_id: trade_no.to_string(), amount },
            raw_body: raw,
        })
    }
}

/// The business fields every way of paying an attempt names: the trade, its amount and subject, the
/// product, and the end of the hold, after which Alipay stops taking payment.
fn trade_fields(req: &HandoffRequest, product_code: &str) -> Value {
    let subject: String = req.subject.chars().take(256).collect();
    json!({
        "out_trade_no": req.attempt_ref,
        "total_amount": req.amount.decimal(),
        "subject": subject,
        "product_code": product_code,
        "time_expire": format_at_offset(req.expires_at, 8, false),
    })
}

/// Checks the `sign` of an API response over the exact JSON text of its `*_response` node and
/// returns the node.
pub fn verify_response(key: &RsaVerifier, text: &str, node: &str) -> Result<Value, GatewayError> {
    let envelope: HashMap<String, Box<serde_json::value::RawValue>> =
        serde_json::from_str(text).map_err(|_| GatewayError::unavailable("alipay: unreadable response"))?;
    let raw = envelope.get(node).ok_or_else(|| GatewayError::unavailable("alipay: response node missing"))?;
    let sign: Option<String> = envelope.get("sign").and_then(|s| serde_json::from_str(s.get()).ok());
    let Some(sign) = sign else {
        return Err(GatewayError::unavailable("alipay: unsigned response"));
    };
    if !key.verify_base64(raw.get().as_bytes(), &sign) {
        return Err(GatewayError::unavailable("alipay: response signature does not verify"));
    }
    serde_json::from_str(raw.get()).map_err(|_| GatewayError::unavailable("alipay: unreadable response node"))
}

fn field<'a>(v: &'a Value, name: &str) -> &'a str {
    v.get(name).and_then(Value::as_str).unwrap_or_default()
}

fn is_ok(v: &Value) -> bool {
    field(v, "code") == "10000"
}

/// Business errors that mean "try again later" rather than "refused".
fn is_transient(v: &Value) -> bool {
    matches!(field(v, "code"), "20000" | "20001") || field(v, "sub_code").ends_with("SYSTEM_ERROR")
}

fn describe(v: &Value) -> String {
    format!("{} {} ({})", field(v, "code"), field(v, "sub_code"), field(v, "sub_msg"))
}

/// A complaint method's failure: "try again later", or Alipay's refusal (`case_refused`).
fn complaint_refusal(method: &str, r: &Value) -> GatewayError {
    let why = format!("alipay {method}: {}", describe(r));
    match is_transient(r) {
        true => GatewayError::unavailable(why),
        false => GatewayError::invalid("case_refused", why),
    }
}

impl Gateway for Alipay {
    fn name(&self) -> &'static str {
        NAME
    }

    /// `page`: the PC cashier (`alipay.trade.page.pay`); `wap`: the mobile web cashier
    /// (`alipay.trade.wap.pay`); `qr`: a face-to-face code to scan (`alipay.trade.precreate`).
    fn channels(&self) -> &'static [&'static str] {
        &["page", "wap", "qr"]
    }

    fn currencies(&self) -> Option<&'static [Currency]> {
        Some(&[Currency::CNY])
    }

    fn handoff<'a>(&'a self, req: &'a HandoffRequest) -> BoxFuture<'a, Result<Handed, GatewayError>> {
        Box::pin(async move {
            if req.amount.currency() != Currency::CNY {
                return Err(GatewayError::invalid("unsupported_currency", "Alipay takes CNY only"));
            }
            match req.channel.as_str() {
                "qr" => self.precreate(req).await,
                "wap" => Ok(self.cashier_form(req, "alipay.trade.wap.pay", "QUICK_WAP_WAY")),
                _ => Ok(self.cashier_form(req, "alipay.trade.page.pay", "FAST_INSTANT_TRADE_PAY")),
            }
        })
    }

    fn verify(&self, _headers: &HeaderMap, body: &[u8], _now: Millis) -> Result<VerifiedEvent, Rejection> {
        let fields = self.verified_fields(body)?;
        let get = |k: &str| fields.get(k).map(String::as_str).unwrap_or_default();
        let notify_id = get("notify_id");
        let claimed = crate::domain::ids::is_plain_id(notify_id).then(|| notify_id.to_string());
        let Some(event_id) = claimed.clone() else {
            return Err(reject("malformed_body", "notify_id missing or not a plain identifier", None));
        };
        // The merchant checks (docs/gateways/alipay.md): our app, our receiving account.
        if get("app_id") != self.app_id {
            return Err(reject("merchant_mismatch", "app_id is not ours", claimed));
        }
        if get("seller_id") != self.seller_id {
            return Err(reject("merchant_mismatch", "seller_id is not our receiving account", claimed));
        }
        let attempt_ref = get("out_trade_no");
        if !crate::domain::ids::is_plain_id(attempt_ref) {
            return Err(reject("malformed_body", "out_trade_no missing or not a plain identifier", claimed));
        }
        let refund_no = get("out_biz_no");
        let refund_no = (!refund_no.is_empty()).then_some(refund_no);
        let outcome = match (get("trade_status"), refund_no) {
            // A refund shows up as a notification naming the refund request number.
            ("TRADE_SUCCESS" | "TRADE_FINISHED" | "TRADE_CLOSED", Some(refund_no)) => {
                if !crate::domain::ids::is_plain_id(refund_no) {
                    return Err(reject("malformed_body", "out_biz_no is not a plain identifier", claimed));
                }
                Outcome::RefundSucceeded { refund_no: refund_no.to_string(), amount: None }
            }
            ("TRADE_SUCCESS" | "TRADE_FINISHED", None) => {
                let trade_no = get("trade_no");
                if !crate::domain::ids::is_plain_id(trade_no) {
                    return Err(reject("malformed_body", "trade_no missing", claimed));
                }
                let amount = Money::parse_decimal(get("total_amount"), Currency::CNY)
                    .ok_or_else(|| reject("amount_mismatch", "unreadable total_amount", claimed.clone()))?;
                Outcome::Succeeded { gateway_txn_id: trade_no.to_string(), amount }
            }
            ("TRADE_CLOSED", None) => Outcome::Cancelled,
            ("WAIT_BUYER_PAY", None) => Outcome::Pending,
            _ => return Err(reject("unsupported_event", "unknown trade_status", claimed)),
        };
        Ok(VerifiedEvent {
            gateway: NAME.to_string(),
            event_id,
            attempt_ref: attempt_ref.to_string(),
            outcome,
            raw_body: body.to_vec(),
        })
    }

    /// Alipay wants the seven characters `success` and nothing else.
    fn ack(&self) -> Reply {
        Reply { status: 200, content_type: "text/plain", body: "success".to_string() }
    }

    /// Anything but `success` makes Alipay resend.
    fn nack(&self, _code: &str, _message: &str) -> Reply {
        Reply { status: 400, content_type: "text/plain", body: "fail".to_string() }
    }

    fn close<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<CloseOutcome, GatewayError>> {
        Box::pin(async move {
            let r = self.call("alipay.trade.close", json!({"out_trade_no": key.attempt_ref})).await?;
            if is_ok(&r) {
                return Ok(CloseOutcome::Closed);
            }
            if field(&r, "sub_code") == "ACQ.TRADE_NOT_EXIST" {
                // Nobody opened the cashier; `time_expire` bounds it from here.
                return Ok(CloseOutcome::NotFound);
            }
            if is_transient(&r) {
                return Err(GatewayError::unavailable(format!("alipay close: {}", describe(&r))));
            }
            // Refused, e.g. ACQ.TRADE_STATUS_ERROR: find out why.
            match self.query(key).await? {
                PaymentState::Paid(event) => Ok(CloseOutcome::AlreadyPaid(event)),
                PaymentState::Closed | PaymentState::Failed => Ok(CloseOutcome::Closed),
                PaymentState::NotFound => Ok(CloseOutcome::NotFound),
                PaymentState::Pending => {
                    Err(GatewayError::unavailable(format!("alipay close refused: {}", describe(&r))))
                }
            }
        })
    }

    fn query<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<PaymentState, GatewayError>> {
        Box::pin(async move {
            let r = self.call("alipay.trade.query", json!({"out_trade_no": key.attempt_ref})).await?;
            if !is_ok(&r) {
                if field(&r, "sub_code") == "ACQ.TRADE_NOT_EXIST" {
                    return Ok(PaymentState::NotFound);
                }
                return Err(GatewayError::unavailable(format!("alipay query: {}", describe(&r))));
            }
            if field(&r, "out_trade_no") != key.attempt_ref {
                return Err(GatewayError::unavailable("alipay query answered for another trade"));
            }
            Ok(match field(&r, "trade_status") {
                "TRADE_SUCCESS" | "TRADE_FINISHED" => PaymentState::Paid(self.event(
                    &key.attempt_ref,
                    field(&r, "trade_no"),
                    field(&r, "total_amount"),
                    r.to_string().into_bytes(),
                )?),
                "WAIT_BUYER_PAY" => PaymentState::Pending,
                "TRADE_CLOSED" => PaymentState::Closed,
                other => {
                    return Err(GatewayError::unavailable(format!("alipay query: unknown trade_status {other:?}")));
                }
            })
        })
    }

    fn refund<'a>(&'a self, req: &'a RefundRequest) -> BoxFuture<'a, Result<RefundAnswer, GatewayError>> {
        Box::pin(async move {
            let reason: String = req.reason.chars().take(256).collect();
            let mut biz = json!({
                "refund_amount": req.amount.decimal(),
                "refund_reason": reason,
                "out_request_no": req.refund_no,
            });
            // A second capture is named by its trade number; otherwise the merchant reference.
            match req.gateway_txn_id.as_deref().filter(|_| req.second_capture) {
                Some(trade_no) => biz["trade_no"] = json!(trade_no),
                None => biz["out_trade_no"] = json!(req.attempt_ref),
            }
            let r = self.call("alipay.trade.refund", biz).await?;
            if is_ok(&r) {
                // Synchronous; `fund_change = N` on a repeat means it was refunded before.
                let id = format!("{}:{}", field(&r, "trade_no"), req.refund_no);
                return Ok(RefundAnswer::Succeeded { gateway_refund_id: id });
            }
            if is_transient(&r) {
                return Err(GatewayError::unavailable(format!("alipay refund: {}", describe(&r))));
            }
            Ok(RefundAnswer::Rejected { reason: describe(&r) })
        })
    }

    /// Beijing time: Alipay's bill of a day covers its midnight to midnight.
    fn statement_offset(&self) -> Option<time::UtcOffset> {
        time::UtcOffset::from_hms(8, 0, 0).ok()
    }

    /// The trade bill of `day`: its download link asked for (a signed call), the ZIP fetched at
    /// once (the link lasts about 30 s) and read.
    fn statement(&self, day: time::Date) -> BoxFuture<'_, Result<Statement, StatementError>> {
        Box::pin(async move {
            let bill_date = crate::domain::statement::format_day(day);
            let biz = json!({"bill_type": "trade", "bill_date": bill_date});
            let r = self.call("alipay.data.dataservice.bill.downloadurl.query", biz).await?;
            if !is_ok(&r) {
                let sub_code = field(&r, "sub_code").to_ascii_uppercase();
                // No bill: nothing was traded that day.
                if sub_code.contains("BILL_NOT_EXIST") || sub_code.contains("NO_BILL_DATA") {
                    return Ok(Statement::default());
                }
                return Err(StatementError::Unavailable(format!("alipay bill: {}", describe(&r))));
            }
            let url = field(&r, "bill_download_url");
            let link = reqwest::Url::parse(url)
                .map_err(|_| StatementError::Unavailable("alipay bill: the download link does not parse".into()))?;
            let response = self.http.get(link).send().await.map_err(|e| StatementError::from(transport_error(&e)))?;
            let status = response.status().as_u16();
            if status != 200 {
                return Err(StatementError::Unavailable(format!("alipay bill download answered {status}")));
            }
            let bytes = super::read_limited(response, super::STATEMENT_BYTES_MAX).await?;
            // A link used too late answers an error page ("下载超时"): ask for a new one later.
            if !bytes.starts_with(b"PK") {
                return Err(StatementError::Unavailable(
                    "alipay bill download answered something other than a ZIP (the link may have expired)".into(),
                ));
            }
            bills::parse_alipay_bill_zip(&bytes).map_err(|e| StatementError::Unreadable(format!("the trade bill: {e}")))
        })
    }

    fn query_refund<'a>(&'a self, req: &'a RefundQuery) -> BoxFuture<'a, Result<RefundState, GatewayError>> {
        Box::pin(async move {
            let biz = json!({"out_trade_no": req.attempt_ref, "out_request_no": req.refund_no});
            let r = self.call("alipay.trade.fastpay.refund.query", biz).await?;
            if !is_ok(&r) {
                if field(&r, "sub_code") == "ACQ.TRADE_NOT_EXIST" {
                    return Ok(RefundState::NotFound);
                }
                return Err(GatewayError::unavailable(format!("alipay refund query: {}", describe(&r))));
            }
            Ok(match field(&r, "refund_status") {
                "REFUND_SUCCESS" => RefundState::Succeeded,
                // An empty answer means Alipay never took this refund request.
                "" => RefundState::NotFound,
                other => RefundState::Failed { reason: format!("refund_status {other}") },
            })
        })
    }

    /// A trade complaint's push (`msg_method` [`complaints::CHANGED`]), verified as a payment
    /// notification is and sent by our app: a notice naming the complaint, to be fetched. Any
    /// other body is not a case (a payment notification has no `msg_method`).
    fn verify_case(&self, _headers: &HeaderMap, body: &[u8], now: Millis) -> Option<Result<CaseReport, Rejection>> {
        let peek: Vec<(String, String)> = serde_urlencoded::from_bytes(body).ok()?;
        if !peek.iter().any(|(k, v)| k == "msg_method" && v == complaints::CHANGED) {
            return None;
        }
        Some(self.verified_fields(body).and_then(|fields| {
            let notify_id = fields.get("notify_id").filter(|id| crate::domain::ids::is_plain_id(id)).cloned();
            if fields.get("app_id").map(String::as_str) != Some(self.app_id.as_str()) {
                return Err(reject("merchant_mismatch", "app_id is not ours", notify_id));
            }
            complaints::notice_report(&fields, now).map_err(|why| reject("malformed_body", why, notify_id))
        }))
    }

    fn fetch_case<'a>(&'a self, case_id: &'a str, now: Millis) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        Box::pin(self.complaint(case_id, now))
    }

    /// The complaints made since `since` (within Alipay's one-year window), page by page.
    fn list_cases(&self, since: Millis, now: Millis) -> BoxFuture<'_, Result<Vec<CaseReport>, GatewayError>> {
        Box::pin(async move {
            let mut reports = Vec::new();
            for page_num in 1..=complaints::COMPLAINT_PAGES_MAX {
                let r = self.call(complaints::BATCHQUERY, complaints::list_biz(since, now, page_num)).await?;
                if !is_ok(&r) {
                    return Err(GatewayError::unavailable(format!("alipay complaints: {}", describe(&r))));
                }
                let (items, more) = complaints::list_page(&r, page_num);
                for item in &items {
                    reports.push(
                        complaints::detail_report(item, complaints::BATCHQUERY, now)
                            .map_err(|why| GatewayError::unavailable(format!("alipay complaints: {why}")))?,
                    );
                }
                if !more {
                    return Ok(reports);
                }
            }
            Err(GatewayError::unavailable(format!(
                "alipay complaints: more than {} pages",
                complaints::COMPLAINT_PAGES_MAX
            )))
        })
    }

    /// Alipay takes JPEG and PNG images only.
    fn case_image_limits(&self) -> Option<ImageLimits> {
        Some(ALIPAY_IMAGES)
    }

    /// `alipay.merchant.image.upload`: the image's id at Alipay, for a reply.
    fn upload_case_image<'a>(&'a self, image: &'a CaseImage) -> BoxFuture<'a, Result<String, GatewayError>> {
        Box::pin(self.upload_image(image))
    }

    /// A message to the buyer in the complaint's thread (`reply.submit`), with the images
    /// uploaded for it (`reply_images`).
    fn reply_case<'a>(
        &'a self,
        case_id: &'a str,
        text: &'a str,
        media_ids: &'a [String],
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        Box::pin(async move {
            let biz = complaints::reply_biz(case_id, text, media_ids)
                .map_err(|why| GatewayError::invalid("invalid_reply", why))?;
            self.complaint_action(case_id, complaints::REPLY, biz, now).await
        })
    }

    /// The merchant's processing result (`feedback.submit`), which marks the complaint handled.
    fn complete_case<'a>(
        &'a self,
        case_id: &'a str,
        completion: Completion,
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        Box::pin(async move {
            let biz = complaints::feedback_biz(case_id, completion)
                .ok_or_else(|| GatewayError::invalid("case_refused", "not an Alipay complaint id"))?;
            self.complaint_action(case_id, complaints::FEEDBACK, biz, now).await
        })
    }
}

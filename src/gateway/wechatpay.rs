//! WeChat Pay API v3 (docs/gateways/wechatpay.md): JSAPI prepay plus the signed `wx.requestPayment`
//! parameters for the mini-program, H5 `h5_url`, notifications verified over the raw body
//! (timestamp window, serial, SIGNTEST probes refused) and decrypted with the APIv3 key, query,
//! close and refunds with `out_refund_no`; complaints fetched, listed, replied to and completed
//! (read in `wechat_complaints`). Requests are signed with the merchant key; responses are
//! verified with the platform key before they are believed.

use axum::http::HeaderMap;
use serde_json::{Value, json};

use super::keys::{RsaSigner, nonce};
use super::wechat_complaints as complaints;
use super::wechat_keys::{self, KeyRing};
use super::wechat_wire::{Answer, Envelope, Outgoing, bill_date, decrypt, int, payer_ip, payer_openid, refusal, text};
use super::{
    AttemptKey, BoxFuture, CloseOutcome, Gateway, GatewayError, Handed, Handoff, HandoffRequest, Payer, PaymentState,
    RefundAnswer, RefundQuery, RefundRequest, RefundState, Rejection, Reply, StatementError, bills, format_at_offset,
    http_client, reject, transport_error, unix_seconds,
};
use crate::clock::{Clock, Millis, SystemClock};
use crate::domain::case::{CaseImage, CaseReport, RefundVerdict};
use crate::domain::event::{Outcome, VerifiedEvent};
use crate::domain::ids::is_plain_id;
use crate::domain::statement::Statement;
use crate::domain::{Currency, Money};

/// The complaint actions (reply, complete, refund requests, images, the notification URL).
mod complaint_actions;

pub use super::wechat_config::WechatPayConfig;
pub use super::wechat_sign::{
    SIGNTEST_PREFIX, SignatureRefused, TIMESTAMP_TOLERANCE_S, pay_sign_message, request_message,
    verify_wechat_signature,
};

pub const NAME: &str = "wechatpay";
/// Longest Native `code_url` accepted (WeChat's are about 40 characters; a QR code holds far more,
/// but a longer answer is not WeChat's).
pub const CODE_URL_LEN_MAX: usize = 512;

pub struct WechatPay {
    mchid: String,
    appid: String,
    serial_no: String,
    signer: RsaSigner,
    /// The platform keys by serial (docs/gateways/wechatpay.md §3), read by every verification.
    keys: std::sync::RwLock<KeyRing>,
    /// Platform certificates are downloaded (`/v3/certificates`) and refreshed.
    download: bool,
    /// When certificates were last downloaded for an unknown serial; held for the length of any
    /// download (single flight).
    last_download: tokio::sync::Mutex<Option<Millis>>,
    api_v3_key: Vec<u8>,
    base_url: String,
    notify_url: String,
    http: reqwest::Client,
}

impl WechatPay {
    pub fn new(c: &WechatPayConfig, notify_url: String) -> anyhow::Result<Self> {
        let keys = KeyRing::configured(
            c.platform_public_key_file.as_deref(),
            c.platform_cert_file.as_deref(),
            c.platform_serial.as_deref(),
        )?;
        if keys.serials().is_empty() && !c.download_certificates {
            anyhow::bail!("set platform_public_key_file, platform_cert_file, or download_certificates = true");
        }
        if c.api_v3_key.0.len() != 32 {
            anyhow::bail!("api_v3_key must be 32 characters");
        }
        Ok(WechatPay {
            mchid: c.mchid.clone(),
            appid: c.appid.clone(),
            serial_no: c.merchant_serial_no.clone(),
            signer: RsaSigner::from_file(&c.merchant_private_key_file)?,
            keys: std::sync::RwLock::new(keys),
            download: c.download_certificates,
            last_download: tokio::sync::Mutex::new(None),
            api_v3_key: c.api_v3_key.0.as_bytes().to_vec(),
            base_url: c.api_base_url.trim_end_matches('/').to_string(),
            notify_url,
            http: http_client()?,
        })
    }

    /// Verifies a signature with the keys known now.
    fn check_signature(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Result<(), SignatureRefused> {
        let keys = self.keys.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        verify_wechat_signature(&keys, headers, body, now)
    }

    /// Downloads the platform certificates (`GET /v3/certificates`), decrypts them with the APIv3
    /// key, checks the answer's own signature with them (or a key known already) and adds them to
    /// the ring. A merchant without certificates (public-key mode) gets 404 or an empty list: none
    /// added. Returns how many certificates were new. Callers hold `last_download`.
    async fn download_certificates(&self, now: Millis) -> Result<usize, String> {
        let path = "/v3/certificates?algorithm_type=RSA";
        let (status, headers, bytes) = self
            .send("GET", path, Outgoing::json(None))
            .await
            .map_err(|e| format!("downloading the platform certificates: {e}"))?;
        if status == 404
            || (status >= 500 && self.keys.read().unwrap_or_else(std::sync::PoisonError::into_inner).has_public_key())
        {
            return Ok(0);
        }
        if !(200..300).contains(&status) {
            return Err(format!("downloading the platform certificates: wechatpay answered {status}"));
        }
        let certificates = wechat_keys::read_certificates(&bytes, &self.api_v3_key, now)?;
        // The answer is signed like any other: by a key known already, or by one it carries. The
        // ring with them replaces the old one only once it verifies (downloads hold
        // `last_download`, so nothing else changes the ring meanwhile).
        let mut ring = self.keys.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let added = ring.merge_certificates(certificates, now);
        verify_wechat_signature(&ring, &headers, &bytes, now)
            .map_err(|r| format!("the platform certificate list: {}", r.why))?;
        tracing::info!(added, serials = ?ring.serials(), "wechatpay platform keys");
        *self.keys.write().unwrap_or_else(std::sync::PoisonError::into_inner) = ring;
        Ok(added)
    }

    fn authorization(&self, method: &str, path: &str, body: &str) -> String {
        let ts = unix_seconds(SystemClock.now_ms());
        let nonce = nonce(32);
        let signature = self.signer.sign_base64(request_message(method, path, ts, &nonce, body).as_bytes());
        format!(
            "WECHATPAY2-SHA256-RSA2048 mchid=\"{}\",nonce_str=\"{nonce}\",signature=\"{signature}\",timestamp=\"{ts}\",serial_no=\"{}\"",
            self.mchid, self.serial_no
        )
    }

    /// Sends `out` signed over its signed text (a GET or DELETE without a body); the answer as it
    /// came.
    async fn send(
        &self,
        method: &str,
        path: &str,
        out: Outgoing,
    ) -> Result<(u16, reqwest::header::HeaderMap, bytes::Bytes), GatewayError> {
        let url = format!("{}{path}", self.base_url);
        let request = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            "PUT" => self.http.put(&url).header("Content-Type", out.content_type).body(out.bytes),
            _ => self.http.post(&url).header("Content-Type", out.content_type).body(out.bytes),
        };
        let response = request
            .header("Authorization", self.authorization(method, path, &out.signed))
            .header("Accept", "application/json")
            .send()
            .await
            .map_err(|e| transport_error(&e))?;
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.map_err(|e| transport_error(&e))?;
        Ok((status, headers, bytes))
    }

    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Answer, GatewayError> {
        self.call_out(method, path, Outgoing::json(body)).await
    }

    /// Sends a signed request. A 2xx answer must carry a valid platform signature (signed under a
    /// certificate not seen yet: one download, then again); error answers are read for their code
    /// only.
    async fn call_out(&self, method: &str, path: &str, out: Outgoing) -> Result<Answer, GatewayError> {
        let (status, headers, bytes) = self.send(method, path, out).await?;
        if status >= 500 {
            return Err(GatewayError::unavailable(format!("wechatpay answered {status}")));
        }
        if (200..300).contains(&status) {
            let now = SystemClock.now_ms();
            let mut checked = self.check_signature(&headers, &bytes, now);
            if let Err(SignatureRefused { unknown_serial: Some(serial), .. }) = &checked
                && self.refresh_keys(serial).await
            {
                checked = self.check_signature(&headers, &bytes, now);
            }
            checked.map_err(|r| GatewayError::unavailable(format!("wechatpay response: {}", r.why)))?;
        }
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|_| GatewayError::unavailable("wechatpay: unreadable response"))?
        };
        Ok(Answer { status, body })
    }

    /// Applies for a bill (`path?query`) and downloads it, its SHA-1 checked: the file, or `None`
    /// when WeChat has no bill that day (nothing was traded).
    async fn bill(&self, path: &str, query: &str) -> Result<Option<Vec<u8>>, StatementError> {
        let r = self.call("GET", &format!("{path}?{query}"), None).await?;
        match (r.status, r.code()) {
            (200, _) => {}
            (_, "NO_STATEMENT_EXIST") => return Ok(None),
            (_, "STATEMENT_CREATING") => return Err(StatementError::NotYet(format!("wechatpay: {}", r.describe()))),
            _ => return Err(StatementError::Unavailable(format!("wechatpay bill: {}", r.describe()))),
        }
        let (hash_type, hash, url) =
            (text(&r.body, &["hash_type"]), text(&r.body, &["hash_value"]), text(&r.body, &["download_url"]));
        if !hash_type.eq_ignore_ascii_case("SHA1") || hash.is_empty() || url.is_empty() {
            return Err(StatementError::Unavailable(format!(
                "wechatpay bill: the answer names no SHA1 hash and download link ({hash_type:?})"
            )));
        }
        let link = reqwest::Url::parse(url)
            .map_err(|_| StatementError::Unavailable("wechatpay bill: the download link does not parse".into()))?;
        let signed = match link.query() {
            Some(q) => format!("{}?{q}", link.path()),
            None => link.path().to_string(),
        };
        // The download is signed like any request; its answer carries no signature: the hash
        // stands for it.
        let response = self
            .http
            .get(link.clone())
            .header("Authorization", self.authorization("GET", &signed, ""))
            .header("Accept", "*/*")
            .send()
            .await
            .map_err(|e| StatementError::from(transport_error(&e)))?;
        let status = response.status().as_u16();
        if status != 200 {
            return Err(StatementError::Unavailable(format!("wechatpay bill download answered {status}")));
        }
        let bytes = super::read_limited(response, super::STATEMENT_BYTES_MAX).await?;
        if !bills::sha1_matches(&bytes, hash) {
            return Err(StatementError::Unreadable(format!("the bill of {query} fails its SHA-1 hash")));
        }
        Ok(Some(bytes))
    }

    fn core_fields(&self, req: &HandoffRequest) -> Value {
        let description: String = req.subject.chars().take(127).collect();
        json!({
            "appid": self.appid,
            "mchid": self.mchid,
            "description": description,
            "out_trade_no": req.attempt_ref,
            // Payable until the hold ends, not for WeChat's default 7 days.
            "time_expire": format_at_offset(req.expires_at, 8, true),
            "notify_url": self.notify_url,
            "amount": {"total": req.amount.amount_minor(), "currency": "CNY"},
        })
    }

    async fn jsapi(&self, req: &HandoffRequest) -> Result<Handed, GatewayError> {
        let openid = payer_openid(&req.payer)?;
        let mut body = self.core_fields(req);
        body["payer"] = json!({"openid": openid});
        let r = self.call("POST", "/v3/pay/transactions/jsapi", Some(&body)).await?;
        let prepay_id = text(&r.body, &["prepay_id"]);
        if r.status != 200 || prepay_id.is_empty() {
            return Err(refusal("prepay", &r));
        }
        let timestamp = unix_seconds(req.now).to_string();
        let nonce = nonce(32);
        let package = format!("prepay_id={prepay_id}");
        let pay_sign = self.signer.sign_base64(pay_sign_message(&self.appid, &timestamp, &nonce, &package).as_bytes());
        let params = json!({
            "appId": self.appid,
            "timeStamp": timestamp,
            "nonceStr": nonce,
            "package": package,
            "signType": "RSA",
            "paySign": pay_sign,
        });
        Ok(Handed { handoff: Handoff::Client { params }, gateway_ref: None })
    }

    async fn h5(&self, req: &HandoffRequest) -> Result<Handed, GatewayError> {
        let ip = payer_ip(&req.payer)?;
        let mut body = self.core_fields(req);
        body["scene_info"] = json!({"payer_client_ip": ip, "h5_info": {"type": "Wap"}});
        let r = self.call("POST", "/v3/pay/transactions/h5", Some(&body)).await?;
        let h5_url = text(&r.body, &["h5_url"]);
        if r.status != 200 || !h5_url.starts_with("https://") && !h5_url.starts_with("http://") {
            return Err(refusal("h5", &r));
        }
        let back = serde_urlencoded::to_string([("redirect_url", req.return_url.as_str())]).unwrap_or_default();
        Ok(Handed { handoff: Handoff::Redirect { url: format!("{h5_url}&{back}") }, gateway_ref: None })
    }

    /// Native: a `code_url` the buyer scans with WeChat (desktop pages, screens, print), payable
    /// until the hold ends (`time_expire`).
    async fn native(&self, req: &HandoffRequest) -> Result<Handed, GatewayError> {
        let body = self.core_fields(req);
        let r = self.call("POST", "/v3/pay/transactions/native", Some(&body)).await?;
        let code_url = text(&r.body, &["code_url"]);
        if r.status != 200 || !code_url.starts_with("weixin://") || code_url.len() > CODE_URL_LEN_MAX {
            return Err(refusal("native", &r));
        }
        let expires_at = crate::clock::rfc3339(req.expires_at);
        Ok(Handed { handoff: Handoff::Qr { code_url: code_url.to_string(), expires_at }, gateway_ref: None })
    }

    /// A notification's signature checked and its resource decrypted: the envelope (its id a
    /// plain identifier) and the resource.
    fn open_notification(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Result<(Envelope, Value), Rejection> {
        self.check_signature(headers, body, now).map_err(|r| {
            let mut rejection = reject("invalid_signature", r.why, None);
            rejection.unknown_key = r.unknown_serial;
            rejection
        })?;
        let envelope: Envelope =
            serde_json::from_slice(body).map_err(|_| reject("malformed_body", "unreadable notification", None))?;
        let claimed = is_plain_id(&envelope.id).then(|| envelope.id.clone());
        if claimed.is_none() {
            return Err(reject("malformed_body", "notification id is not a plain identifier", None));
        }
        let plain = decrypt(&self.api_v3_key, &envelope.resource).ok_or_else(|| {
            reject("invalid_signature", "resource does not decrypt with the APIv3 key", claimed.clone())
        })?;
        let r = serde_json::from_slice(&plain)
            .map_err(|_| reject("malformed_body", "decrypted resource is not JSON", claimed))?;
        Ok((envelope, r))
    }

    fn paid_event(&self, key: &AttemptKey, t: &Value) -> Result<VerifiedEvent, GatewayError> {
        let txn = text(t, &["transaction_id"]);
        let total = int(t, &["amount", "total"]).and_then(|n| Money::new(n, Currency::CNY).ok());
        let (true, Some(amount)) = (is_plain_id(txn), total) else {
            return Err(GatewayError::unavailable("wechatpay query: no transaction id or amount"));
        };
        Ok(VerifiedEvent {
            gateway: NAME.to_string(),
            event_id: format!("query_{txn}"),
            attempt_ref: key.attempt_ref.clone(),
            outcome: Outcome::Succeeded { gateway_txn_id: txn.to_string(), amount },
            raw_body: t.to_string().into_bytes(),
        })
    }
}

impl Gateway for WechatPay {
    fn name(&self) -> &'static str {
        NAME
    }

    fn channels(&self) -> &'static [&'static str] {
        &["jsapi", "h5", "native"]
    }

    fn currencies(&self) -> Option<&'static [Currency]> {
        Some(&[Currency::CNY])
    }

    fn app_id(&self) -> Option<&str> {
        Some(&self.appid)
    }

    fn check_payer(&self, channel: &str, payer: &Payer) -> Result<(), GatewayError> {
        match channel {
            "h5" => payer_ip(payer).map(|_| ()),
            // Whoever scans the code pays: nothing to know beforehand.
            "native" => Ok(()),
            _ => payer_openid(payer).map(|_| ()),
        }
    }

    fn handoff<'a>(&'a self, req: &'a HandoffRequest) -> BoxFuture<'a, Result<Handed, GatewayError>> {
        Box::pin(async move {
            if req.amount.currency() != Currency::CNY {
                return Err(GatewayError::invalid("unsupported_currency", "WeChat Pay takes CNY only"));
            }
            match req.channel.as_str() {
                "h5" => self.h5(req).await,
                "native" => self.native(req).await,
                _ => self.jsapi(req).await,
            }
        })
    }

    fn refresh_keys<'a>(&'a self, serial: &'a str) -> BoxFuture<'a, bool> {
        Box::pin(async move {
            if !self.download || !wechat_keys::worth_downloading(serial) {
                return false;
            }
            let known = |me: &Self| {
                me.keys
                    .read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .get(serial, SystemClock.now_ms())
                    .is_some()
            };
            // One download at a time; whoever waited may find the key there already.
            let mut last = self.last_download.lock().await;
            if known(self) {
                return true;
            }
            let now = SystemClock.now_ms();
            if last.is_some_and(|at| now - at < wechat_keys::ON_DEMAND_GAP_MS) {
                return false;
            }
            *last = Some(now);
            if let Err(e) = self.download_certificates(now).await {
                tracing::warn!(error = %e, serial, "wechatpay: downloading platform certificates for an unknown serial failed");
            }
            known(self)
        })
    }

    fn maintain_keys(&self, now: Millis) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            if self.download {
                // One download at a time; the on-demand gap counts on-demand downloads only.
                let single_flight = self.last_download.lock().await;
                let downloaded = self.download_certificates(now).await;
                drop(single_flight);
                downloaded?;
            }
            let keys = self.keys.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            match keys.certificates_end() {
                Some(end) if !keys.has_public_key() && end - now < wechat_keys::EXPIRY_WARNING_MS => Err(format!(
                    "the last WeChat Pay platform certificate expires at {}; download its successor or configure the WeChat Pay public key",
                    crate::clock::rfc3339(end)
                )),
                _ => Ok(()),
            }
        })
    }

    fn verify(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Result<VerifiedEvent, Rejection> {
        let (envelope, r) = self.open_notification(headers, body, now)?;
        let (event_id, claimed) = (envelope.id.clone(), Some(envelope.id.clone()));
        if text(&r, &["mchid"]) != self.mchid {
            return Err(reject("merchant_mismatch", "mchid is not ours", claimed));
        }
        let attempt_ref = text(&r, &["out_trade_no"]).to_string();
        if !is_plain_id(&attempt_ref) {
            return Err(reject("malformed_body", "out_trade_no missing", claimed));
        }
        let outcome = match envelope.event_type.as_str() {
            "TRANSACTION.SUCCESS" => {
                if text(&r, &["appid"]) != self.appid {
                    return Err(reject("merchant_mismatch", "appid is not ours", claimed));
                }
                if text(&r, &["trade_state"]) != "SUCCESS" {
                    return Err(reject("unsupported_event", "trade_state is not SUCCESS", claimed));
                }
                let txn = text(&r, &["transaction_id"]);
                if !is_plain_id(txn) {
                    return Err(reject("malformed_body", "transaction_id missing", claimed));
                }
                let currency = Currency::parse(text(&r, &["amount", "currency"]))
                    .map_err(|_| reject("currency_mismatch", "unknown currency", claimed.clone()))?;
                let amount = int(&r, &["amount", "total"])
                    .and_then(|n| Money::new(n, currency).ok())
                    .ok_or_else(|| reject("amount_mismatch", "unreadable amount.total", claimed.clone()))?;
                Outcome::Succeeded { gateway_txn_id: txn.to_string(), amount }
            }
            "REFUND.SUCCESS" | "REFUND.ABNORMAL" | "REFUND.CLOSED" => {
                let refund_no = text(&r, &["out_refund_no"]).to_string();
                if !is_plain_id(&refund_no) {
                    return Err(reject("malformed_body", "out_refund_no missing", claimed));
                }
                if envelope.event_type == "REFUND.SUCCESS" {
                    let amount = int(&r, &["amount", "refund"])
                        .and_then(|n| Money::new(n, Currency::CNY).ok())
                        .ok_or_else(|| reject("amount_mismatch", "unreadable amount.refund", claimed.clone()))?;
                    Outcome::RefundSucceeded { refund_no, amount: Some(amount) }
                } else {
                    Outcome::RefundFailed { refund_no }
                }
            }
            _ => return Err(reject("unsupported_event", "unknown event_type", claimed)),
        };
        Ok(VerifiedEvent { gateway: NAME.to_string(), event_id, attempt_ref, outcome, raw_body: body.to_vec() })
    }

    /// WeChat goes by the status code: 204, no body.
    fn ack(&self) -> Reply {
        Reply { status: 204, content_type: "application/json", body: String::new() }
    }

    fn nack(&self, _code: &str, message: &str) -> Reply {
        let body = json!({"code": "FAIL", "message": message}).to_string();
        Reply { status: 400, content_type: "application/json", body }
    }

    fn close<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<CloseOutcome, GatewayError>> {
        Box::pin(async move {
            let path = format!("/v3/pay/transactions/out-trade-no/{}/close", key.attempt_ref);
            let r = self.call("POST", &path, Some(&json!({"mchid": self.mchid}))).await?;
            match (r.status, r.code()) {
                (200 | 204, _) | (_, "ORDER_CLOSED") => Ok(CloseOutcome::Closed),
                (404, _) | (_, "ORDER_NOT_EXIST") => Ok(CloseOutcome::NotFound),
                _ => match self.query(key).await? {
                    PaymentState::Paid(event) => Ok(CloseOutcome::AlreadyPaid(event)),
                    PaymentState::Closed | PaymentState::Failed => Ok(CloseOutcome::Closed),
                    PaymentState::NotFound => Ok(CloseOutcome::NotFound),
                    PaymentState::Pending => {
                        Err(GatewayError::unavailable(format!("wechatpay close: {}", r.describe())))
                    }
                },
            }
        })
    }

    fn query<'a>(&'a self, key: &'a AttemptKey) -> BoxFuture<'a, Result<PaymentState, GatewayError>> {
        Box::pin(async move {
            let path = format!("/v3/pay/transactions/out-trade-no/{}?mchid={}", key.attempt_ref, self.mchid);
            let r = self.call("GET", &path, None).await?;
            if r.status == 404 || r.code() == "ORDER_NOT_EXIST" {
                return Ok(PaymentState::NotFound);
            }
            if r.status != 200 {
                return Err(GatewayError::unavailable(format!("wechatpay query: {}", r.describe())));
            }
            if text(&r.body, &["out_trade_no"]) != key.attempt_ref || text(&r.body, &["mchid"]) != self.mchid {
                return Err(GatewayError::unavailable("wechatpay query answered for another order"));
            }
            Ok(match text(&r.body, &["trade_state"]) {
                "SUCCESS" | "REFUND" => PaymentState::Paid(self.paid_event(key, &r.body)?),
                "NOTPAY" | "USERPAYING" => PaymentState::Pending,
                "CLOSED" | "REVOKED" => PaymentState::Closed,
                "PAYERROR" => PaymentState::Failed,
                other => return Err(GatewayError::unavailable(format!("wechatpay query: trade_state {other:?}"))),
            })
        })
    }

    fn refund<'a>(&'a self, req: &'a RefundRequest) -> BoxFuture<'a, Result<RefundAnswer, GatewayError>> {
        Box::pin(async move {
            let reason: String = req.reason.chars().take(80).collect();
            let mut body = json!({
                "out_refund_no": req.refund_no,
                "reason": reason,
                "notify_url": self.notify_url,
                "amount": {"refund": req.amount.amount_minor(), "total": req.captured.amount_minor(), "currency": "CNY"},
            });
            // A second capture is named by its transaction id; otherwise the merchant reference.
            match req.gateway_txn_id.as_deref().filter(|_| req.second_capture) {
                Some(txn) => body["transaction_id"] = json!(txn),
                None => body["out_trade_no"] = json!(req.attempt_ref),
            }
            let r = self.call("POST", "/v3/refund/domestic/refunds", Some(&body)).await?;
            if r.status == 200 {
                let id = text(&r.body, &["refund_id"]).to_string();
                return Ok(match text(&r.body, &["status"]) {
                    "SUCCESS" => RefundAnswer::Succeeded { gateway_refund_id: id },
                    "PROCESSING" => RefundAnswer::Accepted { gateway_refund_id: id },
                    other => RefundAnswer::Rejected { reason: format!("refund status {other}") },
                });
            }
            match refusal("refund", &r) {
                GatewayError::Invalid { message, .. } => Ok(RefundAnswer::Rejected { reason: message }),
                e => Err(e),
            }
        })
    }

    /// Beijing time: WeChat's bill of a day covers its midnight to midnight.
    fn statement_offset(&self) -> Option<time::UtcOffset> {
        time::UtcOffset::from_hms(8, 0, 0).ok()
    }

    /// The trade bill (`bill_type=ALL`) of `day` and the basic account's fund-flow bill: each
    /// applied for, downloaded at once (the link is short-lived), its SHA-1 checked, then read; the
    /// fund flow is checked against its own summary.
    fn statement(&self, day: time::Date) -> BoxFuture<'_, Result<Statement, StatementError>> {
        Box::pin(async move {
            let date = bill_date(day);
            let trade = self.bill("/v3/bill/tradebill", &format!("bill_date={date}&bill_type=ALL")).await?;
            let mut statement = match trade {
                Some(bytes) => bills::parse_wechat_trade_bill(&bytes)
                    .map_err(|e| StatementError::Unreadable(format!("the trade bill: {e}")))?,
                None => Statement::default(),
            };
            let flow = self.bill("/v3/bill/fundflowbill", &format!("bill_date={date}&account_type=BASIC")).await?;
            if let Some(bytes) = flow {
                statement.checks = bills::parse_wechat_fundflow_bill(&bytes)
                    .map_err(|e| StatementError::Unreadable(format!("the fund-flow bill: {e}")))?;
            }
            Ok(statement)
        })
    }

    fn query_refund<'a>(&'a self, req: &'a RefundQuery) -> BoxFuture<'a, Result<RefundState, GatewayError>> {
        Box::pin(async move {
            let path = format!("/v3/refund/domestic/refunds/{}", req.refund_no);
            let r = self.call("GET", &path, None).await?;
            if r.status == 404 || r.code() == "RESOURCE_NOT_EXISTS" {
                return Ok(RefundState::NotFound);
            }
            if r.status != 200 {
                return Err(GatewayError::unavailable(format!("wechatpay refund query: {}", r.describe())));
            }
            Ok(match text(&r.body, &["status"]) {
                "SUCCESS" => RefundState::Succeeded,
                "PROCESSING" => RefundState::Processing,
                other => RefundState::Failed { reason: format!("refund status {other}") },
            })
        })
    }

    /// A `COMPLAINT.*` notification, verified and decrypted as a payment's is: a notice naming
    /// the complaint, to be fetched.
    fn verify_case(&self, headers: &HeaderMap, body: &[u8], now: Millis) -> Option<Result<CaseReport, Rejection>> {
        let peek: Value = serde_json::from_slice(body).ok()?;
        if !complaints::is_complaint_event(text(&peek, &["event_type"])) {
            return None;
        }
        Some(self.open_notification(headers, body, now).and_then(|(envelope, resource)| {
            complaints::notice_report(&envelope.id, &resource, now)
                .map_err(|why| reject("malformed_body", why, Some(envelope.id.clone())))
        }))
    }

    fn fetch_case<'a>(&'a self, case_id: &'a str, now: Millis) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        Box::pin(self.complaint_detail(case_id, now))
    }

    /// The complaints of the last 30 days (one window, WeChat's longest), page by page.
    fn list_cases(&self, since: Millis, now: Millis) -> BoxFuture<'_, Result<Vec<CaseReport>, GatewayError>> {
        Box::pin(async move {
            let (mut reports, kind) = (Vec::new(), format!("GET {}", complaints::COMPLAINTS_PATH));
            for page_no in 0..complaints::COMPLAINT_PAGES_MAX {
                let offset = page_no * complaints::COMPLAINT_PAGE;
                let r = self.call("GET", &complaints::list_path(since, now, offset), None).await?;
                if r.status != 200 {
                    return Err(GatewayError::unavailable(format!("wechatpay complaints: {}", r.describe())));
                }
                let (items, more) = complaints::list_page(&r.body, offset);
                for item in &items {
                    reports.push(
                        complaints::detail_report(item, &kind, now)
                            .map_err(|why| GatewayError::unavailable(format!("wechatpay complaints: {why}")))?,
                    );
                }
                if !more {
                    return Ok(reports);
                }
            }
            Err(GatewayError::unavailable(format!(
                "wechatpay complaints: more than {} pages",
                complaints::COMPLAINT_PAGES_MAX
            )))
        })
    }

    fn upload_case_image<'a>(&'a self, image: &'a CaseImage) -> BoxFuture<'a, Result<String, GatewayError>> {
        Box::pin(self.upload_image(image))
    }

    fn reply_case<'a>(
        &'a self,
        case_id: &'a str,
        text: &'a str,
        media_ids: &'a [String],
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        Box::pin(self.reply(case_id, text, media_ids, now))
    }

    /// WeChat's completion names no result: `completion` is not sent.
    fn complete_case<'a>(
        &'a self,
        case_id: &'a str,
        _completion: crate::domain::case::Completion,
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        Box::pin(self.complaint_action(case_id, "/complete", json!({"complainted_mchid": self.mchid}), now))
    }

    fn answer_refund_request<'a>(
        &'a self,
        case_id: &'a str,
        verdict: &'a RefundVerdict,
        media_ids: &'a [String],
        now: Millis,
    ) -> BoxFuture<'a, Result<CaseReport, GatewayError>> {
        let body = complaints::refund_progress_body(verdict, media_ids);
        Box::pin(self.complaint_action(case_id, "/update-refund-progress", body, now))
    }

    fn case_notify_url(&self) -> BoxFuture<'_, Result<Option<String>, GatewayError>> {
        Box::pin(self.notify_url_registered())
    }

    fn register_case_notify_url<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<String, GatewayError>> {
        Box::pin(self.register_notify_url(url))
    }

    fn delete_case_notify_url(&self) -> BoxFuture<'_, Result<bool, GatewayError>> {
        Box::pin(self.delete_notify_url())
    }
}

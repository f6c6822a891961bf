//! The mini-program server API behind shipping reports (docs/gateways/wechat-shipping.md): a stable access token
//! (`/cgi-bin/stable_token`, cached until five minutes before it ends and shared by every report)
//! and `/wxa/sec/order/upload_shipping_info`. What to report and what each answer means is
//! `domain::shipping`'s; this module only speaks the protocol. The token travels in the URL, so no
//! URL, token or secret ever reaches a log line or an error message.

use serde::Deserialize;
use serde_json::json;

use super::wechatpay::WechatPayConfig;
use super::{GatewayError, format_at_offset, http_client, transport_error};
use crate::clock::Millis;
use crate::domain::shipping::{Answer, Logistics, classify};

/// A token is renewed this long before WeChat says it ends (its stable tokens overlap by five
/// minutes, so the renewal is the same token or its successor, never a gap).
const TOKEN_RENEW_BEFORE_MS: i64 = 5 * 60 * 1000;
/// `force_refresh` kills the current token for every instance; WeChat allows it at most every 30 s
/// (and 20 times a day), so kassa asks for it at most this often.
const FORCE_REFRESH_GAP_MS: i64 = 10 * 60 * 1000;
/// Longest token kept (WeChat asks for 512 characters of room).
const TOKEN_LEN_MAX: usize = 2048;
/// Largest answer read from the API.
const ANSWER_BYTES_MAX: usize = 64 * 1024;

/// One shipment to report.
#[derive(Debug, Clone)]
pub struct Report<'a> {
    /// kassa's merchant reference of the paid attempt (`out_trade_no`).
    pub out_trade_no: &'a str,
    pub payer_openid: &'a str,
    pub logistics: &'a Logistics,
    pub item_desc: &'a str,
    pub now: Millis,
}

/// WeChat's answer to one report: its meaning and, for the record, its code and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reported {
    pub answer: Answer,
    pub errcode: i64,
    pub errmsg: String,
}

#[derive(Debug, Clone)]
struct Token {
    value: String,
    expires_at: Millis,
}

pub struct ShippingApi {
    appid: String,
    mchid: String,
    secret: String,
    base_url: String,
    http: reqwest::Client,
    /// The cached token; held while one is fetched, so concurrent reports fetch it once.
    token: tokio::sync::Mutex<Option<Token>>,
    /// When a forced refresh was last asked for.
    last_forced: std::sync::Mutex<Option<Millis>>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<i64>,
    #[serde(default)]
    errcode: i64,
    #[serde(default)]
    errmsg: String,
}

#[derive(Deserialize)]
struct UploadAnswer {
    #[serde(default)]
    errcode: i64,
    #[serde(default)]
    errmsg: String,
}

impl ShippingApi {
    /// The API of a WeChat Pay configuration whose mini program's secret is set; `None` without it.
    pub fn from_config(c: &WechatPayConfig) -> Result<Option<ShippingApi>, GatewayError> {
        let Some(secret) = c.mini_program_secret.as_ref().filter(|s| !s.0.is_empty()) else { return Ok(None) };
        Ok(Some(ShippingApi {
            appid: c.appid.clone(),
            mchid: c.mchid.clone(),
            secret: secret.0.clone(),
            base_url: c.open_api_base_url.trim_end_matches('/').to_string(),
            http: http_client()?,
            token: tokio::sync::Mutex::new(None),
            last_forced: std::sync::Mutex::new(None),
        }))
    }

    /// The mini program's app id: reports are made for payments under it.
    pub fn appid(&self) -> &str {
        &self.appid
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
        body: &serde_json::Value,
    ) -> Result<T, GatewayError> {
        let response = self.http.post(url).json(body).send().await.map_err(|e| transport_error(&e))?;
        if !response.status().is_success() {
            return Err(GatewayError::unavailable(format!("answered HTTP {}", response.status().as_u16())));
        }
        let bytes = response.bytes().await.map_err(|e| transport_error(&e))?;
        if bytes.len() > ANSWER_BYTES_MAX {
            return Err(GatewayError::unavailable("answer too large"));
        }
        serde_json::from_slice(&bytes).map_err(|_| GatewayError::unavailable("answer is not the expected JSON"))
    }

    /// A valid access token: the cached one, or a new one from `stable_token` (`force`: the cached
    /// one was refused, so ask WeChat to replace it, at most once per [`FORCE_REFRESH_GAP_MS`]).
    async fn token(&self, now: Millis, force: bool) -> Result<String, GatewayError> {
        let mut cached = self.token.lock().await;
        if !force && let Some(t) = cached.as_ref().filter(|t| now < t.expires_at - TOKEN_RENEW_BEFORE_MS) {
            return Ok(t.value.clone());
        }
        let force_refresh = force && {
            let mut last = self.last_forced.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let allowed = last.is_none_or(|at| now - at >= FORCE_REFRESH_GAP_MS);
            if allowed {
                *last = Some(now);
            }
            allowed
        };
        let body = json!({
            "grant_type": "client_credential",
            "appid": self.appid,
            "secret": self.secret,
            "force_refresh": force_refresh,
        });
        let answer: TokenAnswer = self.post(&format!("{}/cgi-bin/stable_token", self.base_url), &body).await?;
        let value = answer.access_token.filter(|t| !t.is_empty() && t.len() <= TOKEN_LEN_MAX).ok_or_else(|| {
            *cached = None;
            // WeChat's own message names the problem (bad appid, secret, IP not allowed); it
            // carries neither the secret nor a token.
            GatewayError::unavailable(format!("no access token: errcode {} ({})", answer.errcode, answer.errmsg))
        })?;
        let expires_in_ms = answer.expires_in.unwrap_or(0).clamp(0, 7 * 24 * 3600).saturating_mul(1000);
        *cached = Some(Token { value: value.clone(), expires_at: now.saturating_add(expires_in_ms) });
        Ok(value)
    }

    /// Reports one shipment. An answer that the token is stale gets a new token and one more try.
    pub async fn report(&self, r: &Report<'_>) -> Result<Reported, GatewayError> {
        let mut shipping = json!({"item_desc": r.item_desc});
        if let Logistics::Express { tracking_no, express_company } = r.logistics {
            shipping["tracking_no"] = json!(tracking_no);
            shipping["express_company"] = json!(express_company);
        }
        let body = json!({
            "order_key": {"order_number_type": 1, "mchid": self.mchid, "out_trade_no": r.out_trade_no},
            "logistics_type": r.logistics.code(),
            "delivery_mode": 1,
            "shipping_list": [shipping],
            "upload_time": upload_time(r.now),
            "payer": {"openid": r.payer_openid},
        });
        let mut force = false;
        loop {
            let (errcode, errmsg) =
                self.post_with_token("/wxa/sec/order/upload_shipping_info", &body, r.now, force).await?;
            let meaning = classify(errcode);
            if meaning == Answer::TokenExpired && !force {
                force = true;
                continue;
            }
            return Ok(Reported { answer: meaning, errcode, errmsg });
        }
    }

    /// POSTs `body` to the API's `path` under the access token (`force`: the cached one was
    /// refused); WeChat's `errcode` and `errmsg`.
    pub async fn post_with_token(
        &self,
        path: &str,
        body: &serde_json::Value,
        now: Millis,
        force: bool,
    ) -> Result<(i64, String), GatewayError> {
        let token = self.token(now, force).await?;
        let url = format!("{}{path}?access_token={token}", self.base_url);
        let answer: UploadAnswer = self.post(&url, body).await?;
        Ok((answer.errcode, answer.errmsg))
    }
}

/// `upload_time`: RFC 3339 with Beijing's offset, as WeChat's examples write it.
fn upload_time(now: Millis) -> String {
    format_at_offset(now, 8, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upload_time_carries_beijings_offset() {
        assert_eq!(upload_time(1_764_554_821_000), "2025-12-01T10:07:01+08:00");
    }
}

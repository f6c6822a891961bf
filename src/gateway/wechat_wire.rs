//! WeChat Pay v3's wire shapes as the adapter (`wechatpay`) reads them: the notification
//! envelope and its encrypted resource, an API answer, and the refusals read from either.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize;
use serde_json::Value;

use super::keys::aes_gcm_open;
use super::{GatewayError, Payer};

#[derive(Deserialize)]
pub(super) struct Envelope {
    pub(super) id: String,
    pub(super) event_type: String,
    pub(super) resource: Resource,
}

#[derive(Deserialize)]
pub(super) struct Resource {
    pub(super) algorithm: String,
    pub(super) ciphertext: String,
    #[serde(default)]
    pub(super) associated_data: String,
    pub(super) nonce: String,
}

pub(super) fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str).unwrap_or_default()
}

pub(super) fn int(v: &Value, path: &[&str]) -> Option<i64> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_i64)
}

/// A WeChat answer (its signature already checked when it was a 2xx).
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) body: Value,
}

impl Answer {
    pub(super) fn code(&self) -> &str {
        text(&self.body, &["code"])
    }

    pub(super) fn describe(&self) -> String {
        format!("{} {} ({})", self.status, self.code(), text(&self.body, &["message"]))
    }
}

/// A request's body as sent, and the text its signature covers: a JSON body signs itself, an
/// image upload only its `meta` part.
pub(super) struct Outgoing {
    pub(super) signed: String,
    pub(super) content_type: String,
    pub(super) bytes: Vec<u8>,
}

impl Outgoing {
    /// A JSON body (none: an empty one).
    pub(super) fn json(body: Option<&Value>) -> Outgoing {
        let text = body.map(Value::to_string).unwrap_or_default();
        Outgoing { signed: text.clone(), content_type: "application/json".into(), bytes: text.into_bytes() }
    }
}

/// A notification's resource decrypted with the APIv3 key (AES-256-GCM).
pub(super) fn decrypt(api_v3_key: &[u8], resource: &Resource) -> Option<Vec<u8>> {
    if resource.algorithm != "AEAD_AES_256_GCM" {
        return None;
    }
    let sealed = B64.decode(&resource.ciphertext).ok()?;
    aes_gcm_open(api_v3_key, resource.nonce.as_bytes(), resource.associated_data.as_bytes(), &sealed)
}

/// A bill's day as WeChat writes it: `2026-12-01`.
pub(super) fn bill_date(day: time::Date) -> String {
    crate::domain::statement::format_day(day)
}

pub(super) fn payer_openid(payer: &Payer) -> Result<&str, GatewayError> {
    payer.openid.as_deref().filter(|o| !o.is_empty() && o.len() <= 128).ok_or_else(|| {
        GatewayError::invalid("payer_required", "WeChat JSAPI needs the payer's openid: {\"payer\": {\"openid\": …}}")
    })
}

pub(super) fn payer_ip(payer: &Payer) -> Result<&str, GatewayError> {
    payer.client_ip.as_deref().filter(|ip| ip.parse::<std::net::IpAddr>().is_ok()).ok_or_else(|| {
        GatewayError::invalid("payer_required", "WeChat H5 needs the payer's IP: {\"payer\": {\"client_ip\": …}}")
    })
}

pub(super) fn refusal(what: &str, r: &Answer) -> GatewayError {
    if r.status >= 400 && r.status < 500 && r.code() != "SYSTEM_ERROR" && r.code() != "FREQUENCY_LIMITED" {
        GatewayError::invalid("gateway_refused", format!("wechatpay {what}: {}", r.describe()))
    } else {
        GatewayError::unavailable(format!("wechatpay {what}: {}", r.describe()))
    }
}

//! WeChat Pay API v3's signatures (docs/gateways/wechatpay.md §1–§2): the message the merchant
//! signs for a request, the one `paySign` covers, and the check of a signature WeChat sets on an
//! answer or a notification (probe prefix, timestamp window, the key of its serial, RSA).

use axum::http::HeaderMap;

use super::unix_seconds;
use super::wechat_keys::{self, KeyRing};
use crate::clock::Millis;

/// Responses and notifications signed further than this from our clock are refused (SDKs: 5 min).
pub const TIMESTAMP_TOLERANCE_S: i64 = 300;
/// Signature-probe traffic WeChat sends to check that merchants verify; it must fail.
pub const SIGNTEST_PREFIX: &str = "WECHATPAY/SIGNTEST/";

/// `METHOD\nURL\nTIMESTAMP\nNONCE\nBODY\n`, what the merchant signs for each request.
pub fn request_message(method: &str, path_and_query: &str, timestamp: i64, nonce: &str, body: &str) -> String {
    format!("{method}\n{path_and_query}\n{timestamp}\n{nonce}\n{body}\n")
}

/// `appId\ntimeStamp\nnonceStr\npackage\n`, what `paySign` covers.
pub fn pay_sign_message(appid: &str, timestamp: &str, nonce: &str, package: &str) -> String {
    format!("{appid}\n{timestamp}\n{nonce}\n{package}\n")
}

/// Why a WeChat signature was refused; `unknown_serial` when only the key was missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureRefused {
    pub why: &'static str,
    pub unknown_serial: Option<String>,
}

fn refused(why: &'static str) -> SignatureRefused {
    SignatureRefused { why, unknown_serial: None }
}

/// Checks a WeChat signature header set over `body`: probe prefix, timestamp window, the key of its
/// serial, RSA.
pub fn verify_wechat_signature(
    keys: &KeyRing,
    headers: &HeaderMap,
    body: &[u8],
    now: Millis,
) -> Result<(), SignatureRefused> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let (timestamp, nonce, signature, serial) =
        (h("Wechatpay-Timestamp"), h("Wechatpay-Nonce"), h("Wechatpay-Signature"), h("Wechatpay-Serial"));
    if timestamp.is_empty() || nonce.is_empty() || signature.is_empty() {
        return Err(refused("missing Wechatpay-* signature headers"));
    }
    if signature.starts_with(SIGNTEST_PREFIX) {
        return Err(refused("signature probe"));
    }
    let Ok(ts) = timestamp.parse::<i64>() else {
        return Err(refused("unreadable Wechatpay-Timestamp"));
    };
    if (unix_seconds(now) - ts).abs() > TIMESTAMP_TOLERANCE_S {
        return Err(refused("Wechatpay-Timestamp outside the tolerance"));
    }
    let Some(key) = keys.get(serial, now) else {
        let unknown_serial = wechat_keys::worth_downloading(serial).then(|| serial.to_string());
        return Err(SignatureRefused { why: "unknown Wechatpay-Serial", unknown_serial });
    };
    let mut message = format!("{timestamp}\n{nonce}\n").into_bytes();
    message.extend_from_slice(body);
    message.push(b'\n');
    if key.verify_base64(&message, signature) { Ok(()) } else { Err(refused("signature does not verify")) }
}

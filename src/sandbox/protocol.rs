//! The sandbox's wire protocol, which its merchant side (`gateway::sandbox`) speaks: its name, the
//! notification signature header, and how a merchant signs its form fields.

use std::collections::BTreeMap;

pub const NAME: &str = "sandbox";
/// Header carrying `t=<unix seconds>,v1=<base64 Ed25519 signature of "t.body">`.
pub const SIGNATURE_HEADER: &str = "sandbox-signature";

/// The string the merchant signs: fields sorted by name as `k=v` joined with `&`, `sign` excluded.
pub fn canonical_fields(fields: &BTreeMap<String, String>) -> String {
    fields.iter().filter(|(k, _)| k.as_str() != "sign").map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&")
}

pub fn sign_fields(key: &aws_lc_rs::hmac::Key, fields: &BTreeMap<String, String>) -> String {
    hex::encode(aws_lc_rs::hmac::sign(key, canonical_fields(fields).as_bytes()).as_ref())
}

/// Constant-time check of a merchant signature.
pub fn verify_fields(key: &aws_lc_rs::hmac::Key, fields: &BTreeMap<String, String>) -> bool {
    let Some(sig) = fields.get("sign").and_then(|s| hex::decode(s).ok()) else {
        return false;
    };
    aws_lc_rs::hmac::verify(key, canonical_fields(fields).as_bytes(), &sig).is_ok()
}

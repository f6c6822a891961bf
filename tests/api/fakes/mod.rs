//! Local fakes of the Alipay, WeChat Pay v3 and Stripe HTTP APIs. Each checks request signatures
//! the way its provider does (its own canonicalisation, written from the providers' protocols, docs/gateways/, not kassa's),
//! keeps trades in memory, signs its answers with the provider's test key, and, when a test pays,
//! sends a signed notification to the notify URL kassa gave it (or withholds it, to test active
//! query). No test touches the internet.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use aws_lc_rs::signature::{self, RsaKeyPair, UnparsedPublicKey};
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kassa::gateway::config::{AlipayConfig, Secret, StripeConfig, WechatPayConfig};
use serde_json::{Value, json};

mod alipay;
mod alipay_complaints;
mod stripe;
mod wechat;
mod wechat_complaints;
mod wechat_subscribe;

pub use alipay::*;
pub use stripe::*;
pub use wechat::*;

pub const ALIPAY_APP_ID: &str = "2021000000000001";
/// The subscribe-message templates the fake's mini program has.
pub const SUBSCRIBE_TEMPLATES: [&str; 2] = ["TPL-PAID-0001", "TPL-DELIVERED-0002"];
pub const ALIPAY_SELLER_ID: &str = "2088000000000002";
pub const WECHAT_MCHID: &str = "1900000001";
pub const WECHAT_APPID: &str = "wx8888888888888888";
pub const WECHAT_MERCHANT_SERIAL: &str = "3775B6A45ACD588826D15E583A95F5DD0AAAAAAA";
pub const WECHAT_PLATFORM_SERIAL: &str = "PUB_KEY_ID_0119000000000000000000000000";
pub const WECHAT_API_V3_KEY: &str = "0123456789abcdefghijklmnopqrstuv";
/// The mini program's AppSecret (shipping reports).
pub const WECHAT_MINI_SECRET: &str = "mini-program-app-secret-0123456789";
/// The serial of `provider_cert.pem` (WeChat's platform certificate before a rotation) …
pub const WECHAT_CERT_SERIAL: &str = "5157F09EFDC096DE15EBE9A3F4A0A1B2C3D4E5F6";
/// … and of `platform2_cert.pem` (after it), whose key is `platform2_private.pem`.
pub const WECHAT_ROTATED_SERIAL: &str = "6A3E2F0B77C1D4E5F60718293A4B5C6D7E8F9012";
pub const STRIPE_SECRET_KEY: &str = "sk_test_kassa_fake";
pub const STRIPE_WEBHOOK_SECRET: &str = "whsec_kassa_fake";

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gateways").join(name)
}

fn pem_der(name: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    B64.decode(body).expect("pem base64")
}

/// The provider's private key (signs notifications and answers).
fn provider_key() -> RsaKeyPair {
    RsaKeyPair::from_pkcs8(&pem_der("provider_private.pem")).expect("provider key")
}

fn key_from(file: &str) -> RsaKeyPair {
    RsaKeyPair::from_pkcs8(&pem_der(file)).expect("provider key")
}

fn rsa_sign(key: &RsaKeyPair, message: &[u8]) -> String {
    let mut sig = vec![0_u8; key.public_modulus_len()];
    key.sign(&signature::RSA_PKCS1_SHA256, &aws_lc_rs::rand::SystemRandom::new(), message, &mut sig).expect("sign");
    B64.encode(sig)
}

/// How the provider checks the merchant's signature: with the merchant's public key.
fn merchant_verifies(message: &[u8], sig_b64: &str) -> bool {
    let Ok(sig) = B64.decode(sig_b64) else { return false };
    UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, pem_der("merchant_public.pem"))
        .verify(message, &sig)
        .is_ok()
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind fake");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}")
}

fn now_s() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

/// A trade as a fake provider keeps it.
#[derive(Debug, Clone, Default)]
pub struct Trade {
    pub out_trade_no: String,
    pub amount_minor: i64,
    pub status: String,
    pub txn_id: String,
    pub notify_url: String,
    pub time_expire: String,
    pub expires_at_s: i64,
    pub refunds: BTreeMap<String, i64>,
    /// Second captures on the paid trade (a buyer paying twice on one prepay): amount by
    /// transaction id; and their refunds, transaction id by refund number.
    pub again: BTreeMap<String, i64>,
    pub again_refunds: BTreeMap<String, String>,
    /// Stripe: session id; WeChat: prepay id.
    pub id: String,
    pub request: Value,
}

#[derive(Default)]
pub struct Ledger {
    pub trades: HashMap<String, Trade>,
    /// Requests refused for a bad signature or credentials.
    pub bad_signatures: usize,
    pub calls: Vec<String>,
    /// When set, refund calls answer "processing" and their notification is withheld.
    pub refunds_pending: bool,
    /// WeChat: the platform key notifications are signed with after a rotation (its private key
    /// file and certificate serial); `None`: the configured one.
    pub wechat_rotated: Option<(&'static str, &'static str)>,
    /// WeChat: `/v3/certificates` downloads served.
    pub certificate_downloads: usize,
    /// WeChat: the platform certificates published (certificate file, serial, private key file),
    /// oldest first; none: `/v3/certificates` answers 404, as for a merchant in public-key mode.
    pub wechat_certificates: Vec<(&'static str, &'static str, &'static str)>,
    /// WeChat mini program: the access token `stable_token` hands out, and whether it was revoked
    /// (uploads under it answer 40001 until a forced refresh replaces it).
    pub mini_token: Option<String>,
    pub mini_token_revoked: bool,
    /// `stable_token` calls answered with a token, and those with `force_refresh`.
    pub tokens_issued: usize,
    pub forced_refreshes: usize,
    /// Error codes the next shipping uploads answer, in order, before the real checks.
    pub shipping_script: std::collections::VecDeque<i64>,
    /// Shipping uploads accepted (the bodies), and every upload's answer code.
    pub shipping: Vec<Value>,
    pub shipping_answers: Vec<i64>,
    /// Subscribe messages: each buyer's one-time consents by (openid, template), the messages
    /// accepted, every send's answer code, and codes the next sends answer before the checks.
    pub subscribe_consents: HashMap<(String, String), u32>,
    pub subscribe_sent: Vec<Value>,
    pub subscribe_answers: Vec<i64>,
    pub subscribe_script: std::collections::VecDeque<i64>,
    /// WeChat: the trade bills published, by `bill_date`: the file and the hash announced with it
    /// (`None`: the file's own SHA-1).
    pub wechat_bills: HashMap<String, (Vec<u8>, Option<String>)>,
    /// WeChat: the error code a bill application answers, by `bill_date` (else, with no bill
    /// published, `NO_STATEMENT_EXIST`).
    pub wechat_bill_errors: HashMap<String, &'static str>,
    /// WeChat: the fund-flow bills published, by `bill_date` (as the trade bills are).
    pub wechat_fundflows: HashMap<String, (Vec<u8>, Option<String>)>,
    /// WeChat: the complaints (their details as WeChat answers them), the replies the merchant
    /// sent (complaint id, text), the complaints it completed, and the list queries served.
    pub wechat_complaints: Vec<Value>,
    pub complaint_replies: Vec<(String, String)>,
    pub complaints_completed: Vec<String>,
    pub complaint_lists: Vec<String>,
    /// WeChat: the images uploaded (media id, bytes), every reply's body as sent, the answers to
    /// refund requests (complaint id, body), the complaint notification URL registered, and the
    /// methods of the calls that registered or removed it.
    pub complaint_images: Vec<(String, Vec<u8>)>,
    pub complaint_responses: Vec<Value>,
    pub complaint_refund_answers: Vec<(String, Value)>,
    pub complaint_notify_url: Option<String>,
    pub complaint_notify_calls: Vec<String>,
    /// Bill files downloaded.
    pub bill_downloads: usize,
    /// The fake's own address (for the links it hands out).
    pub base_url: String,
    /// Alipay: the trade bills published (their ZIPs), by `bill_date`; and whether download links
    /// have expired (answered with Alipay's error page).
    pub alipay_bills: HashMap<String, Vec<u8>>,
    pub alipay_links_expired: bool,
    /// Alipay: the trade complaints (as the query answers them), the replies the merchant sent
    /// (complaint id, text), the processing results it submitted (their `biz_content`), the list
    /// queries served (their `biz_content`), and how many complaint queries are still to answer
    /// a system error.
    pub alipay_complaints: Vec<Value>,
    pub alipay_complaint_replies: Vec<(String, String)>,
    pub alipay_feedbacks: Vec<Value>,
    pub alipay_complaint_lists: Vec<Value>,
    pub alipay_query_failures: usize,
    /// Alipay: the images uploaded (image id, bytes), every reply's `biz_content` as sent (its
    /// `reply_images` among them), and how many uploads are still to be refused.
    pub alipay_images: Vec<(String, Vec<u8>)>,
    pub alipay_reply_bodies: Vec<Value>,
    pub alipay_upload_refusals: usize,
    /// Stripe: the balance transactions, oldest first, each with its source object; and the most
    /// a page holds (Stripe's 100 unless a test makes pages short).
    pub stripe_balance: Vec<Value>,
    pub stripe_page_max: Option<usize>,
    /// Stripe: balance transaction pages served.
    pub stripe_pages: usize,
}

pub type Shared = Arc<Mutex<Ledger>>;

fn lock(s: &Shared) -> std::sync::MutexGuard<'_, Ledger> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// A refund of a second capture, named by its transaction: recorded once against it (the amount
/// must be the capture's); the trade's merchant reference, or `None` when no trade has it.
fn refund_again(l: &mut Ledger, txn: &str, refund_no: &str, amount: i64) -> Option<String> {
    let t = l.trades.values_mut().find(|t| t.again.contains_key(txn))?;
    if t.again.get(txn) != Some(&amount) {
        return None;
    }
    t.again_refunds.insert(refund_no.to_string(), txn.to_string());
    Some(t.out_trade_no.clone())
}

/// Takes a second payment on the paid trade `key` (found by `find`) under a new transaction id made
/// by `txn`; returns the trade as notified (its `txn_id` the new one).
fn capture_again(ledger: &Shared, find: impl Fn(&Trade) -> bool, txn: impl Fn(usize, &Trade) -> String) -> Trade {
    let mut l = lock(ledger);
    let n = l.trades.values().map(|t| t.again.len() + 1).sum::<usize>() + 1000;
    let t = l.trades.values_mut().find(|t| find(t)).expect("the trade");
    assert!(!t.txn_id.is_empty(), "only a paid trade is paid again");
    let id = txn(n, t);
    t.again.insert(id.clone(), t.amount_minor);
    Trade { txn_id: id, ..t.clone() }
}

async fn post_form(url: &str, body: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded; charset=utf-8")
        .body(body.to_string())
        .send()
        .await
        .expect("notify");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

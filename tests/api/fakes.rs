//! Local fakes of the Alipay, WeChat Pay v3 and Stripe HTTP APIs. Each checks request signatures
//! the way its provider does (its own canonicalisation, written from GATEWAYS.md, not kassa's),
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

pub const ALIPAY_APP_ID: &str = "2021000000000001";
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
    /// WeChat: the trade bills published, by `bill_date`: the file and the hash announced with it
    /// (`None`: the file's own SHA-1).
    pub wechat_bills: HashMap<String, (Vec<u8>, Option<String>)>,
    /// WeChat: the error code a bill application answers, by `bill_date` (else, with no bill
    /// published, `NO_STATEMENT_EXIST`).
    pub wechat_bill_errors: HashMap<String, &'static str>,
    /// WeChat: the fund-flow bills published, by `bill_date` (as the trade bills are).
    pub wechat_fundflows: HashMap<String, (Vec<u8>, Option<String>)>,
    /// Bill files downloaded.
    pub bill_downloads: usize,
    /// The fake's own address (for the links it hands out).
    pub base_url: String,
    /// Alipay: the trade bills published (their ZIPs), by `bill_date`; and whether download links
    /// have expired (answered with Alipay's error page).
    pub alipay_bills: HashMap<String, Vec<u8>>,
    pub alipay_links_expired: bool,
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

// ------------------------------------------------------------------------------------------------
// Alipay

#[derive(Clone)]
pub struct FakeAlipay {
    pub url: String,
    pub ledger: Shared,
}

fn alipay_content(params: &BTreeMap<String, String>, drop_sign_type: bool) -> String {
    params
        .iter()
        .filter(|(k, v)| !v.is_empty() && k.as_str() != "sign" && !(drop_sign_type && k.as_str() == "sign_type"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn alipay_answer(method: &str, node: Value) -> Response {
    let node_text = node.to_string();
    let sign = rsa_sign(&provider_key(), node_text.as_bytes());
    let name = format!("{}_response", method.replace('.', "_"));
    let body = format!("{{\"{name}\":{node_text},\"sign\":\"{sign}\"}}");
    ([("content-type", "application/json;charset=utf-8")], body).into_response()
}

fn alipay_error(sub_code: &str) -> Value {
    json!({"code": "40004", "msg": "Business Failed", "sub_code": sub_code, "sub_msg": sub_code})
}

fn yuan(minor: i64) -> String {
    format!("{}.{:02}", minor / 100, minor % 100)
}

fn parse_yuan(s: &str) -> i64 {
    let (w, f) = s.split_once('.').unwrap_or((s, "0"));
    w.parse::<i64>().expect("yuan") * 100 + format!("{f:0<2}").parse::<i64>().expect("fen")
}

async fn alipay_gateway(State(ledger): State<Shared>, body: String) -> Response {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&body).unwrap_or_default();
    let params: BTreeMap<String, String> = pairs.into_iter().collect();
    let get = |k: &str| params.get(k).cloned().unwrap_or_default();
    let method = get("method");
    // The provider's check: sign_type included, sign and empty values excluded, merchant key.
    let content = alipay_content(&params, false);
    if !merchant_verifies(content.as_bytes(), &get("sign"))
        || get("app_id") != ALIPAY_APP_ID
        || get("sign_type") != "RSA2"
    {
        lock(&ledger).bad_signatures += 1;
        let node = json!({"code": "40002", "msg": "Invalid Arguments", "sub_code": "isv.invalid-signature"});
        return (
            [("content-type", "application/json")],
            json!({ format!("{}_response", method.replace('.', "_")): node }).to_string(),
        )
            .into_response();
    }
    let biz: Value = serde_json::from_str(&get("biz_content")).unwrap_or(Value::Null);
    let out_trade_no = biz["out_trade_no"].as_str().unwrap_or_default().to_string();
    let mut l = lock(&ledger);
    l.calls.push(method.clone());
    match method.as_str() {
        "alipay.trade.page.pay" | "alipay.trade.wap.pay" => {
            let (product_code, needs_quit_url) = match method.as_str() {
                "alipay.trade.wap.pay" => ("QUICK_WAP_WAY", true),
                _ => ("FAST_INSTANT_TRADE_PAY", false),
            };
            if biz["product_code"] != product_code
                || needs_quit_url && !biz["quit_url"].as_str().is_some_and(|u| u.starts_with("http"))
            {
                return (StatusCode::BAD_REQUEST, "invalid cashier parameters").into_response();
            }
            let trade = l.trades.entry(out_trade_no.clone()).or_default();
            trade.out_trade_no = out_trade_no.clone();
            trade.amount_minor = parse_yuan(biz["total_amount"].as_str().unwrap_or("0"));
            trade.notify_url = get("notify_url");
            trade.time_expire = biz["time_expire"].as_str().unwrap_or_default().to_string();
            trade.request = biz.clone();
            if trade.status.is_empty() {
                trade.status = "WAIT_BUYER_PAY".to_string();
            }
            (
                StatusCode::OK,
                [("content-type", "text/html")],
                format!("<html><body>cashier for {out_trade_no}</body></html>"),
            )
                .into_response()
        }
        "alipay.trade.precreate" => {
            let amount = parse_yuan(biz["total_amount"].as_str().unwrap_or("0"));
            if biz["product_code"] != "FACE_TO_FACE_PAYMENT" || get("notify_url").is_empty() || amount <= 0 {
                return alipay_answer(&method, json!({"code": "40004", "sub_code": "ACQ.INVALID_PARAMETER"}));
            }
            let trade = l.trades.entry(out_trade_no.clone()).or_default();
            trade.out_trade_no = out_trade_no.clone();
            trade.amount_minor = amount;
            trade.notify_url = get("notify_url");
            trade.time_expire = biz["time_expire"].as_str().unwrap_or_default().to_string();
            trade.request = biz.clone();
            if trade.status.is_empty() {
                trade.status = "WAIT_BUYER_PAY".to_string();
            }
            let qr_code = format!("https://qr.alipay.com/bax{:08}", trade.amount_minor);
            alipay_answer(
                &method,
                json!({"code": "10000", "msg": "Success", "out_trade_no": out_trade_no, "qr_code": qr_code}),
            )
        }
        "alipay.trade.query" => match l.trades.get(&out_trade_no) {
            Some(t) => alipay_answer(
                &method,
                json!({"code": "10000", "msg": "Success", "out_trade_no": t.out_trade_no, "trade_no": t.txn_id,
                       "trade_status": t.status, "total_amount": yuan(t.amount_minor)}),
            ),
            None => alipay_answer(&method, alipay_error("ACQ.TRADE_NOT_EXIST")),
        },
        "alipay.trade.close" => match l.trades.get_mut(&out_trade_no) {
            Some(t) if t.status == "WAIT_BUYER_PAY" => {
                t.status = "TRADE_CLOSED".to_string();
                alipay_answer(&method, json!({"code": "10000", "msg": "Success", "out_trade_no": out_trade_no}))
            }
            Some(_) => alipay_answer(&method, alipay_error("ACQ.TRADE_STATUS_ERROR")),
            None => alipay_answer(&method, alipay_error("ACQ.TRADE_NOT_EXIST")),
        },
        "alipay.trade.refund" => {
            let request_no = biz["out_request_no"].as_str().unwrap_or_default().to_string();
            let amount = parse_yuan(biz["refund_amount"].as_str().unwrap_or("0"));
            if let Some(trade_no) = biz["trade_no"].as_str().filter(|_| out_trade_no.is_empty()) {
                return match refund_again(&mut l, trade_no, &request_no, amount) {
                    Some(out_trade_no) => alipay_answer(
                        &method,
                        json!({"code": "10000", "msg": "Success", "trade_no": trade_no, "out_trade_no": out_trade_no,
                               "fund_change": "Y", "refund_fee": yuan(amount)}),
                    ),
                    None => alipay_answer(&method, alipay_error("ACQ.TRADE_NOT_EXIST")),
                };
            }
            let Some(t) = l.trades.get_mut(&out_trade_no) else {
                return alipay_answer(&method, alipay_error("ACQ.TRADE_NOT_EXIST"));
            };
            if t.status != "TRADE_SUCCESS" {
                return alipay_answer(&method, alipay_error("ACQ.TRADE_STATUS_ERROR"));
            }
            let fund_change = if t.refunds.contains_key(&request_no) {
                "N"
            } else {
                if t.refunds.values().sum::<i64>() + amount > t.amount_minor {
                    return alipay_answer(&method, alipay_error("ACQ.REFUND_AMT_NOT_EQUAL_TOTAL"));
                }
                t.refunds.insert(request_no, amount);
                "Y"
            };
            let refunded: i64 = t.refunds.values().sum();
            alipay_answer(
                &method,
                json!({"code": "10000", "msg": "Success", "trade_no": t.txn_id, "out_trade_no": out_trade_no,
                       "fund_change": fund_change, "refund_fee": yuan(refunded)}),
            )
        }
        "alipay.trade.fastpay.refund.query" => {
            let request_no = biz["out_request_no"].as_str().unwrap_or_default();
            match l.trades.get(&out_trade_no) {
                Some(t) => match t.refunds.get(request_no) {
                    Some(amount) => alipay_answer(
                        &method,
                        json!({"code": "10000", "msg": "Success", "out_request_no": request_no,
                               "refund_amount": yuan(*amount), "refund_status": "REFUND_SUCCESS"}),
                    ),
                    None => alipay_answer(&method, json!({"code": "10000", "msg": "Success"})),
                },
                None => alipay_answer(&method, alipay_error("ACQ.TRADE_NOT_EXIST")),
            }
        }
        "alipay.data.dataservice.bill.downloadurl.query" => {
            let date = biz["bill_date"].as_str().unwrap_or_default().to_string();
            if biz["bill_type"] != "trade" {
                return alipay_answer(&method, alipay_error("isv.invalid-bill-type"));
            }
            if l.alipay_bills.contains_key(&date) {
                let url = format!("{}/bills/{date}.csv.zip?token={}", l.base_url, uuid::Uuid::now_v7().simple());
                alipay_answer(&method, json!({"code": "10000", "msg": "Success", "bill_download_url": url}))
            } else {
                alipay_answer(&method, alipay_error("isp.bill_not_exist"))
            }
        }
        _ => alipay_answer(&method, json!({"code": "40004", "sub_code": "isv.invalid-method"})),
    }
}

/// `GET /bills/{date}.csv.zip`: the bill's ZIP, unsigned (a late download gets an error page).
async fn alipay_bill_download(State(ledger): State<Shared>, UrlPath(name): UrlPath<String>) -> Response {
    let mut l = lock(&ledger);
    l.bill_downloads += 1;
    let date = name.strip_suffix(".csv.zip").unwrap_or_default();
    match l.alipay_bills.get(date) {
        Some(zip) if !l.alipay_links_expired => {
            (StatusCode::OK, [("content-type", "application/zip")], zip.clone()).into_response()
        }
        _ => (
            StatusCode::OK,
            [("content-type", "text/html; charset=gbk")],
            encoding_rs::GBK.encode("<html>下载超时</html>").0.into_owned(),
        )
            .into_response(),
    }
}

impl FakeAlipay {
    pub async fn start() -> FakeAlipay {
        let ledger: Shared = Arc::default();
        let router = Router::new()
            .route("/gateway.do", post(alipay_gateway))
            .route("/bills/{name}", get(alipay_bill_download))
            .with_state(ledger.clone());
        let url = serve(router).await;
        lock(&ledger).base_url = url.clone();
        FakeAlipay { url: format!("{url}/gateway.do"), ledger }
    }

    pub fn config(&self) -> AlipayConfig {
        AlipayConfig {
            app_id: ALIPAY_APP_ID.to_string(),
            seller_id: ALIPAY_SELLER_ID.to_string(),
            app_private_key_file: fixture("merchant_private_pkcs1.pem"),
            alipay_public_key_file: fixture("provider_public_bare.txt"),
            gateway_url: self.url.clone(),
        }
    }

    pub fn trade(&self, out_trade_no: &str) -> Option<Trade> {
        lock(&self.ledger).trades.get(out_trade_no).cloned()
    }

    /// A signed notification form for `fields` (plus the common ones).
    pub fn notification(&self, fields: &[(&str, &str)]) -> String {
        let mut p: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in [
            ("notify_time", "2026-11-30 12:00:00"),
            ("notify_type", "trade_status_sync"),
            ("app_id", ALIPAY_APP_ID),
            ("seller_id", ALIPAY_SELLER_ID),
            ("charset", "utf-8"),
            ("version", "1.0"),
            ("sign_type", "RSA2"),
        ] {
            p.insert(k.to_string(), v.to_string());
        }
        for (k, v) in fields {
            p.insert((*k).to_string(), (*v).to_string());
        }
        let content = alipay_content(&p, true);
        p.insert("sign".to_string(), rsa_sign(&provider_key(), content.as_bytes()));
        serde_urlencoded::to_string(&p).expect("form")
    }

    /// The buyer pays; the notification is sent to kassa when `deliver` (and returned either way).
    pub async fn pay(&self, out_trade_no: &str, deliver: bool) -> (String, Option<(u16, String)>) {
        let (notify_url, amount, txn) = {
            let mut l = lock(&self.ledger);
            // Each payment its own trade number, as Alipay's are.
            let paid = l.trades.values().filter(|t| !t.txn_id.is_empty()).count() + 1;
            let t = l.trades.get_mut(out_trade_no).expect("the cashier was opened");
            assert_eq!(t.status, "WAIT_BUYER_PAY", "only an open trade can be paid");
            t.status = "TRADE_SUCCESS".to_string();
            t.txn_id = format!("2026113022001{paid:07}{:08}", t.amount_minor);
            (t.notify_url.clone(), t.amount_minor, t.txn_id.clone())
        };
        let notify_id = format!("nid{}", uuid::Uuid::now_v7().simple());
        let body = self.notification(&[
            ("notify_id", &notify_id),
            ("out_trade_no", out_trade_no),
            ("trade_no", &txn),
            ("trade_status", "TRADE_SUCCESS"),
            ("total_amount", &yuan(amount)),
            ("buyer_id", "2088102000000003"),
        ]);
        let reply = if deliver { Some(post_form(&notify_url, &body).await) } else { None };
        (body, reply)
    }

    /// The buyer pays the paid trade again (a second capture); its notification goes to kassa.
    /// Returns the new trade number and kassa's answer.
    pub async fn pay_again(&self, out_trade_no: &str) -> (String, (u16, String)) {
        let t = capture_again(
            &self.ledger,
            |t| t.out_trade_no == out_trade_no,
            |n, t| format!("2026113022009{n:07}{:08}", t.amount_minor),
        );
        let notify_id = format!("nid{}", uuid::Uuid::now_v7().simple());
        let body = self.notification(&[
            ("notify_id", &notify_id),
            ("out_trade_no", out_trade_no),
            ("trade_no", &t.txn_id),
            ("trade_status", "TRADE_SUCCESS"),
            ("total_amount", &yuan(t.amount_minor)),
            ("buyer_id", "2088102000000003"),
        ]);
        let reply = post_form(&t.notify_url, &body).await;
        (t.txn_id, reply)
    }
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

// ------------------------------------------------------------------------------------------------
// WeChat Pay v3

#[derive(Clone)]
pub struct FakeWechat {
    pub url: String,
    pub ledger: Shared,
}

/// Provider-side check of `Authorization: WECHATPAY2-SHA256-RSA2048 k="v",…`.
fn wechat_authorized(headers: &HeaderMap, method: &str, path_and_query: &str, body: &str) -> bool {
    let Some(auth) = headers.get("authorization").and_then(|v| v.to_str().ok()) else { return false };
    let Some(rest) = auth.strip_prefix("WECHATPAY2-SHA256-RSA2048 ") else { return false };
    let mut f: HashMap<&str, &str> = HashMap::new();
    for part in rest.split(',') {
        if let Some((k, v)) = part.trim().split_once('=') {
            f.insert(k, v.trim_matches('"'));
        }
    }
    let (Some(ts), Some(nonce), Some(sig)) = (f.get("timestamp"), f.get("nonce_str"), f.get("signature")) else {
        return false;
    };
    if f.get("mchid") != Some(&WECHAT_MCHID) || f.get("serial_no") != Some(&WECHAT_MERCHANT_SERIAL) {
        return false;
    }
    let fresh = ts.parse::<i64>().is_ok_and(|t| (now_s() - t).abs() <= 300);
    let message = format!("{method}\n{path_and_query}\n{ts}\n{nonce}\n{body}\n");
    fresh && merchant_verifies(message.as_bytes(), sig)
}

/// An answer signed the way WeChat signs: `timestamp\nnonce\nbody\n`.
fn wechat_answer(status: StatusCode, body: Option<Value>) -> Response {
    let text = body.map(|b| b.to_string()).unwrap_or_default();
    wechat_signed(status, text, &provider_key(), WECHAT_PLATFORM_SERIAL)
}

/// An answer `text` signed with `key` under `serial`.
fn wechat_signed(status: StatusCode, text: String, key: &RsaKeyPair, serial: &str) -> Response {
    let ts = now_s().to_string();
    let nonce = format!("{:032x}", uuid::Uuid::now_v7().as_u128());
    let sig = rsa_sign(key, format!("{ts}\n{nonce}\n{text}\n").as_bytes());
    (
        status,
        [
            ("content-type", "application/json".to_string()),
            ("Wechatpay-Timestamp", ts),
            ("Wechatpay-Nonce", nonce),
            ("Wechatpay-Signature", sig),
            ("Wechatpay-Serial", serial.to_string()),
        ],
        text,
    )
        .into_response()
}

fn wechat_error(status: StatusCode, code: &str) -> Response {
    wechat_answer(status, Some(json!({"code": code, "message": code})))
}

fn valid_out_trade_no(s: &str) -> bool {
    (6..=32).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-|*".contains(&b))
}

async fn wechat_prepay(ledger: &Shared, kind: &str, headers: &HeaderMap, path: &str, body: &str) -> Response {
    if !wechat_authorized(headers, "POST", path, body) {
        lock(ledger).bad_signatures += 1;
        return wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR");
    }
    let b: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let out_trade_no = b["out_trade_no"].as_str().unwrap_or_default().to_string();
    let ok = b["appid"] == WECHAT_APPID
        && b["mchid"] == WECHAT_MCHID
        && valid_out_trade_no(&out_trade_no)
        && b["amount"]["total"].as_i64().is_some_and(|t| t > 0)
        && b["amount"]["currency"] == "CNY"
        && b["notify_url"].as_str().is_some_and(|u| !u.contains('?'))
        && b["description"].as_str().is_some_and(|d| !d.is_empty() && d.chars().count() <= 127)
        && match kind {
            "jsapi" => b["payer"]["openid"].as_str().is_some_and(|o| !o.is_empty()),
            // Native: the JSAPI fields without a payer (whoever scans pays).
            "native" => b.get("payer").is_none(),
            _ => {
                b["scene_info"]["payer_client_ip"].as_str().is_some() && b["scene_info"]["h5_info"]["type"].is_string()
            }
        };
    if !ok {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    }
    let mut l = lock(ledger);
    l.calls.push(kind.to_string());
    let trade = l.trades.entry(out_trade_no.clone()).or_default();
    if trade.id.is_empty() {
        trade.id = format!("wx{}", uuid::Uuid::now_v7().simple());
        trade.status = "NOTPAY".to_string();
    }
    trade.out_trade_no = out_trade_no;
    trade.amount_minor = b["amount"]["total"].as_i64().unwrap_or_default();
    trade.notify_url = b["notify_url"].as_str().unwrap_or_default().to_string();
    trade.time_expire = b["time_expire"].as_str().unwrap_or_default().to_string();
    trade.request = b.clone();
    let answer = match kind {
        "jsapi" => json!({"prepay_id": trade.id}),
        "native" => json!({"code_url": format!("weixin://wxpay/bizpayurl?pr={}", &trade.id[2..12])}),
        _ => {
            json!({"h5_url": format!("https://wx.tenpay.com/cgi-bin/mmpayweb-bin/checkmweb?prepay_id={}&package=2150917749", trade.id)})
        }
    };
    wechat_answer(StatusCode::OK, Some(answer))
}

/// `POST /cgi-bin/stable_token`: the same token until it is revoked and a forced refresh asked.
async fn mini_stable_token(State(ledger): State<Shared>, Json(b): Json<Value>) -> Json<Value> {
    let mut l = lock(&ledger);
    if b["grant_type"] != "client_credential" || b["appid"] != WECHAT_APPID {
        return Json(json!({"errcode": 40013, "errmsg": "invalid appid"}));
    }
    if b["secret"] != WECHAT_MINI_SECRET {
        l.bad_signatures += 1;
        return Json(json!({"errcode": 40125, "errmsg": "invalid appsecret"}));
    }
    let force = b["force_refresh"] == true;
    if force {
        l.forced_refreshes += 1;
    }
    if l.mini_token.is_none() || force {
        l.mini_token = Some(format!("TOKEN-{}", uuid::Uuid::now_v7().simple()));
        l.mini_token_revoked = false;
    }
    l.tokens_issued += 1;
    Json(json!({"access_token": l.mini_token, "expires_in": 7200}))
}

/// `POST /wxa/sec/order/upload_shipping_info?access_token=…`, checked as WeChat checks it.
async fn mini_upload_shipping(
    State(ledger): State<Shared>,
    Query(q): Query<HashMap<String, String>>,
    Json(b): Json<Value>,
) -> Json<Value> {
    let mut l = lock(&ledger);
    let answer = mini_shipping_answer(&mut l, q.get("access_token"), &b);
    l.shipping_answers.push(answer);
    if answer == 0 {
        l.shipping.push(b);
    }
    Json(json!({"errcode": answer, "errmsg": if answer == 0 { "ok" } else { "refused" }}))
}

fn mini_shipping_answer(l: &mut Ledger, token: Option<&String>, b: &Value) -> i64 {
    if token.is_none() || token != l.mini_token.as_ref() || l.mini_token_revoked {
        return 40001;
    }
    if let Some(code) = l.shipping_script.pop_front() {
        return code;
    }
    let key = &b["order_key"];
    if key["order_number_type"] != 1 || key["mchid"] != WECHAT_MCHID {
        return 268_485_194;
    }
    let no = key["out_trade_no"].as_str().unwrap_or_default();
    let Some(trade) = l.trades.get(no) else { return 10_060_001 };
    if trade.status != "SUCCESS" {
        return 10_060_004;
    }
    if b["payer"]["openid"] != trade.request["payer"]["openid"] {
        return 10_060_031;
    }
    if l.shipping.iter().any(|s| s["order_key"]["out_trade_no"] == no) {
        return 10_060_002;
    }
    let logistics = b["logistics_type"].as_i64().unwrap_or(0);
    if !(1..=4).contains(&logistics) {
        return 10_060_005;
    }
    if b["delivery_mode"] != 1 {
        return 268_485_224;
    }
    let list = b["shipping_list"].as_array().cloned().unwrap_or_default();
    if list.len() != 1 {
        return 268_485_228;
    }
    let desc = list[0]["item_desc"].as_str().unwrap_or_default();
    if desc.is_empty() {
        return 10_060_008;
    }
    if desc.chars().count() > 120 {
        return 10_060_009;
    }
    if logistics == 1 && list[0]["tracking_no"].as_str().is_none_or(str::is_empty) {
        return 268_485_226;
    }
    if logistics == 1 && list[0]["express_company"].as_str().is_none_or(str::is_empty) {
        return 268_485_227;
    }
    let time = b["upload_time"].as_str().unwrap_or_default();
    if time::OffsetDateTime::parse(time, &time::format_description::well_known::Rfc3339).is_err() || time.ends_with('Z')
    {
        return 268_485_216;
    }
    0
}

fn wechat_trade_json(t: &Trade) -> Value {
    json!({"appid": WECHAT_APPID, "mchid": WECHAT_MCHID, "out_trade_no": t.out_trade_no,
           "transaction_id": t.txn_id, "trade_type": "JSAPI", "trade_state": t.status,
           "amount": {"total": t.amount_minor, "payer_total": t.amount_minor, "currency": "CNY", "payer_currency": "CNY"}})
}

/// `GET /v3/certificates`: the platform certificates, each sealed with the APIv3 key (AAD
/// `certificate`), the answer signed with the newest one's key.
async fn wechat_certificates(State(ledger): State<Shared>, headers: HeaderMap) -> Response {
    if !wechat_authorized(&headers, "GET", "/v3/certificates?algorithm_type=RSA", "") {
        lock(&ledger).bad_signatures += 1;
        return wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR");
    }
    let published = {
        let mut l = lock(&ledger);
        l.certificate_downloads += 1;
        l.wechat_certificates.clone()
    };
    let Some(&(_, newest_serial, newest_key)) = published.last() else {
        return wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS");
    };
    let key = aws_lc_rs::aead::LessSafeKey::new(
        aws_lc_rs::aead::UnboundKey::new(&aws_lc_rs::aead::AES_256_GCM, WECHAT_API_V3_KEY.as_bytes()).expect("key"),
    );
    let entry = |(file, serial, _): &(&str, &str, &str)| {
        let nonce = &serial[..12];
        let mut buf = std::fs::read(fixture(file)).expect("certificate");
        key.seal_in_place_append_tag(
            aws_lc_rs::aead::Nonce::try_assume_unique_for_key(nonce.as_bytes()).expect("nonce"),
            aws_lc_rs::aead::Aad::from(b"certificate"),
            &mut buf,
        )
        .expect("seal");
        json!({"serial_no": serial, "effective_time": "2026-01-01T08:00:00+08:00", "expire_time": "2035-12-30T08:00:00+08:00",
               "encrypt_certificate": {"algorithm": "AEAD_AES_256_GCM", "nonce": nonce, "associated_data": "certificate",
                                       "ciphertext": B64.encode(&buf)}})
    };
    let body = json!({"data": published.iter().map(entry).collect::<Vec<_>>()}).to_string();
    wechat_signed(StatusCode::OK, body, &key_from(newest_key), newest_serial)
}

async fn wechat_query(
    State(ledger): State<Shared>,
    UrlPath(no): UrlPath<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/v3/pay/transactions/out-trade-no/{no}?mchid={}", q.get("mchid").cloned().unwrap_or_default());
    if !wechat_authorized(&headers, "GET", &path, "") || q.get("mchid").map(String::as_str) != Some(WECHAT_MCHID) {
        lock(&ledger).bad_signatures += 1;
        return wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR");
    }
    let mut l = lock(&ledger);
    l.calls.push("query".to_string());
    match l.trades.get(&no) {
        Some(t) => wechat_answer(StatusCode::OK, Some(wechat_trade_json(t))),
        None => wechat_error(StatusCode::NOT_FOUND, "ORDER_NOT_EXIST"),
    }
}

async fn wechat_close(
    State(ledger): State<Shared>,
    UrlPath(no): UrlPath<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let path = format!("/v3/pay/transactions/out-trade-no/{no}/close");
    if !wechat_authorized(&headers, "POST", &path, &body) {
        lock(&ledger).bad_signatures += 1;
        return wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR");
    }
    let mut l = lock(&ledger);
    match l.trades.get_mut(&no) {
        Some(t) if t.status == "NOTPAY" || t.status == "CLOSED" => {
            t.status = "CLOSED".to_string();
            wechat_answer(StatusCode::NO_CONTENT, None)
        }
        Some(_) => wechat_error(StatusCode::BAD_REQUEST, "ORDERPAID"),
        None => wechat_error(StatusCode::NOT_FOUND, "ORDER_NOT_EXIST"),
    }
}

async fn wechat_refund(State(ledger): State<Shared>, headers: HeaderMap, body: String) -> Response {
    if !wechat_authorized(&headers, "POST", "/v3/refund/domestic/refunds", &body) {
        lock(&ledger).bad_signatures += 1;
        return wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR");
    }
    let b: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let no = b["out_refund_no"].as_str().unwrap_or_default().to_string();
    let amount = b["amount"]["refund"].as_i64().unwrap_or_default();
    let mut l = lock(&ledger);
    let pending = l.refunds_pending;
    if let Some(txn) = b["transaction_id"].as_str().filter(|_| b["out_trade_no"].is_null()) {
        if b["amount"]["total"].as_i64() != Some(amount) {
            return wechat_error(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
        }
        return match refund_again(&mut l, txn, &no, amount) {
            Some(_) => wechat_answer(
                StatusCode::OK,
                Some(json!({"refund_id": format!("50{no}"), "out_refund_no": no, "status": "SUCCESS"})),
            ),
            None => wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS"),
        };
    }
    let Some(t) = l.trades.get_mut(b["out_trade_no"].as_str().unwrap_or_default()) else {
        return wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS");
    };
    if b["amount"]["total"].as_i64() != Some(t.amount_minor) || !(t.status == "SUCCESS" || t.status == "REFUND") {
        return wechat_error(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
    }
    if !t.refunds.contains_key(&no) {
        if t.refunds.values().sum::<i64>() + amount > t.amount_minor {
            return wechat_error(StatusCode::FORBIDDEN, "NOT_ENOUGH");
        }
        t.refunds.insert(no.clone(), amount);
        t.status = "REFUND".to_string();
    }
    let status = if pending { "PROCESSING" } else { "SUCCESS" };
    wechat_answer(StatusCode::OK, Some(json!({"refund_id": format!("50{no}"), "out_refund_no": no, "status": status})))
}

async fn wechat_refund_query(
    State(ledger): State<Shared>,
    UrlPath(no): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    if !wechat_authorized(&headers, "GET", &format!("/v3/refund/domestic/refunds/{no}"), "") {
        lock(&ledger).bad_signatures += 1;
        return wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR");
    }
    let l = lock(&ledger);
    let found = l.trades.values().any(|t| t.refunds.contains_key(&no) || t.again_refunds.contains_key(&no));
    if found {
        wechat_answer(
            StatusCode::OK,
            Some(json!({"refund_id": format!("50{no}"), "out_refund_no": no, "status": "SUCCESS"})),
        )
    } else {
        wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS")
    }
}

/// `GET /v3/bill/tradebill?bill_date=…&bill_type=ALL` and `GET /v3/bill/fundflowbill?bill_date=…
/// &account_type=BASIC`: the file's hash and a short-lived link to it.
async fn wechat_bill_apply(ledger: Shared, path: &str, query: Option<String>, headers: HeaderMap) -> Response {
    let query = query.unwrap_or_default();
    if !wechat_authorized(&headers, "GET", &format!("{path}?{query}"), "") {
        lock(&ledger).bad_signatures += 1;
        return wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR");
    }
    let params: HashMap<String, String> = serde_urlencoded::from_str(&query).unwrap_or_default();
    let date = params.get("bill_date").cloned().unwrap_or_default();
    let trade = path.ends_with("tradebill");
    let (key, value) = if trade { ("bill_type", "ALL") } else { ("account_type", "BASIC") };
    if params.get(key).map(String::as_str) != Some(value)
        || time::Date::parse(&date, &time::format_description::well_known::Iso8601::DATE).is_err()
    {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    }
    let l = lock(&ledger);
    if let Some(code) = l.wechat_bill_errors.get(&date) {
        return wechat_error(StatusCode::BAD_REQUEST, code);
    }
    let files = if trade { &l.wechat_bills } else { &l.wechat_fundflows };
    let Some((bytes, hash)) = files.get(&date) else {
        return wechat_error(StatusCode::BAD_REQUEST, "NO_STATEMENT_EXIST");
    };
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, bytes);
    let hash = hash.clone().unwrap_or_else(|| hex::encode(digest.as_ref()).to_ascii_uppercase());
    let kind = if trade { "trade" } else { "fundflow" };
    let url = format!("{}/v3/billdownload/file?token={kind}-{date}", l.base_url);
    wechat_answer(StatusCode::OK, Some(json!({"hash_type": "SHA1", "hash_value": hash, "download_url": url})))
}

/// `GET /v3/billdownload/file?token=…`: the file, unsigned.
async fn wechat_billdownload(
    State(ledger): State<Shared>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = query.unwrap_or_default();
    if !wechat_authorized(&headers, "GET", &format!("/v3/billdownload/file?{query}"), "") {
        lock(&ledger).bad_signatures += 1;
        return wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR");
    }
    let token = query.strip_prefix("token=").unwrap_or_default().to_string();
    let mut l = lock(&ledger);
    l.bill_downloads += 1;
    let file = match token.split_once('-') {
        Some(("trade", date)) => l.wechat_bills.get(date),
        Some(("fundflow", date)) => l.wechat_fundflows.get(date),
        _ => None,
    };
    match file {
        Some((bytes, _)) => {
            (StatusCode::OK, [("content-type", "application/octet-stream")], bytes.clone()).into_response()
        }
        None => wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS"),
    }
}

impl FakeWechat {
    /// Publishes the trade bill of `date`, announced with `hash` (`None`: its true SHA-1).
    pub fn publish_bill(&self, date: &str, text: &str, hash: Option<&str>) {
        let mut l = lock(&self.ledger);
        l.wechat_bill_errors.remove(date);
        l.wechat_bills.insert(date.to_string(), (text.as_bytes().to_vec(), hash.map(str::to_string)));
    }

    /// Publishes the fund-flow bill of `date`, announced with its true SHA-1.
    pub fn publish_fundflow(&self, date: &str, text: &str) {
        lock(&self.ledger).wechat_fundflows.insert(date.to_string(), (text.as_bytes().to_vec(), None));
    }

    pub async fn start() -> FakeWechat {
        let ledger: Shared = Arc::default();
        let router = Router::new()
            .route(
                "/v3/pay/transactions/jsapi",
                post(|State(l): State<Shared>, h: HeaderMap, b: String| async move {
                    wechat_prepay(&l, "jsapi", &h, "/v3/pay/transactions/jsapi", &b).await
                }),
            )
            .route(
                "/v3/pay/transactions/h5",
                post(|State(l): State<Shared>, h: HeaderMap, b: String| async move {
                    wechat_prepay(&l, "h5", &h, "/v3/pay/transactions/h5", &b).await
                }),
            )
            .route(
                "/v3/pay/transactions/native",
                post(|State(l): State<Shared>, h: HeaderMap, b: String| async move {
                    wechat_prepay(&l, "native", &h, "/v3/pay/transactions/native", &b).await
                }),
            )
            .route("/v3/pay/transactions/out-trade-no/{no}", get(wechat_query))
            .route("/v3/pay/transactions/out-trade-no/{no}/close", post(wechat_close))
            .route("/v3/refund/domestic/refunds", post(wechat_refund))
            .route("/v3/refund/domestic/refunds/{no}", get(wechat_refund_query))
            .route("/v3/certificates", get(wechat_certificates))
            .route("/cgi-bin/stable_token", post(mini_stable_token))
            .route("/wxa/sec/order/upload_shipping_info", post(mini_upload_shipping))
            .route(
                "/v3/bill/tradebill",
                get(|State(l): State<Shared>, q: axum::extract::RawQuery, h: HeaderMap| async move {
                    wechat_bill_apply(l, "/v3/bill/tradebill", q.0, h).await
                }),
            )
            .route(
                "/v3/bill/fundflowbill",
                get(|State(l): State<Shared>, q: axum::extract::RawQuery, h: HeaderMap| async move {
                    wechat_bill_apply(l, "/v3/bill/fundflowbill", q.0, h).await
                }),
            )
            .route("/v3/billdownload/file", get(wechat_billdownload))
            .with_state(ledger.clone());
        let url = serve(router).await;
        lock(&ledger).base_url = url.clone();
        FakeWechat { url, ledger }
    }

    pub fn config(&self) -> WechatPayConfig {
        WechatPayConfig {
            mchid: WECHAT_MCHID.to_string(),
            appid: WECHAT_APPID.to_string(),
            merchant_serial_no: WECHAT_MERCHANT_SERIAL.to_string(),
            merchant_private_key_file: fixture("merchant_private.pem"),
            platform_public_key_file: Some(fixture("provider_public.pem")),
            platform_cert_file: None,
            platform_serial: Some(WECHAT_PLATFORM_SERIAL.to_string()),
            api_v3_key: Secret(WECHAT_API_V3_KEY.to_string()),
            api_base_url: self.url.clone(),
            download_certificates: true,
            mini_program_secret: None,
            open_api_base_url: self.url.clone(),
        }
    }

    /// The configuration of a mini program's merchant: shipping reports on.
    pub fn config_with_shipping(&self) -> WechatPayConfig {
        WechatPayConfig { mini_program_secret: Some(Secret(WECHAT_MINI_SECRET.to_string())), ..self.config() }
    }

    pub fn trade(&self, out_trade_no: &str) -> Option<Trade> {
        lock(&self.ledger).trades.get(out_trade_no).cloned()
    }

    /// A signed, encrypted notification for `resource` (`event_type`, plaintext JSON).
    pub fn notification(&self, event_type: &str, original_type: &str, resource: &Value) -> (HeaderMap, String) {
        let nonce = "0123456789ab";
        let key = aws_lc_rs::aead::LessSafeKey::new(
            aws_lc_rs::aead::UnboundKey::new(&aws_lc_rs::aead::AES_256_GCM, WECHAT_API_V3_KEY.as_bytes()).expect("key"),
        );
        let mut buf = resource.to_string().into_bytes();
        key.seal_in_place_append_tag(
            aws_lc_rs::aead::Nonce::try_assume_unique_for_key(nonce.as_bytes()).expect("nonce"),
            aws_lc_rs::aead::Aad::from(original_type.as_bytes()),
            &mut buf,
        )
        .expect("seal");
        let body = json!({
            "id": format!("EV-{}", uuid::Uuid::now_v7().simple()),
            "create_time": "2026-11-30T12:00:00+08:00",
            "resource_type": "encrypt-resource",
            "event_type": event_type,
            "summary": "ok",
            "resource": {"original_type": original_type, "algorithm": "AEAD_AES_256_GCM",
                         "ciphertext": B64.encode(&buf), "associated_data": original_type, "nonce": nonce},
        })
        .to_string();
        (self.sign_headers(&body), body)
    }

    pub fn sign_headers(&self, body: &str) -> HeaderMap {
        let rotated = lock(&self.ledger).wechat_rotated;
        let (key, serial) = match rotated {
            Some((file, serial)) => (key_from(file), serial),
            None => (provider_key(), WECHAT_PLATFORM_SERIAL),
        };
        let ts = now_s().to_string();
        let nonce = "n0nce0123456789";
        let sig = rsa_sign(&key, format!("{ts}\n{nonce}\n{body}\n").as_bytes());
        let mut h = HeaderMap::new();
        h.insert("Wechatpay-Timestamp", ts.parse().expect("header"));
        h.insert("Wechatpay-Nonce", nonce.parse().expect("header"));
        h.insert("Wechatpay-Signature", sig.parse().expect("header"));
        h.insert("Wechatpay-Serial", serial.parse().expect("header"));
        h.insert("content-type", "application/json".parse().expect("header"));
        h
    }

    /// The buyer pays; the notification goes to kassa when `deliver`.
    pub async fn pay(&self, out_trade_no: &str, deliver: bool) -> Option<(u16, String)> {
        let (notify_url, trade) = {
            let mut l = lock(&self.ledger);
            // Each payment its own transaction id, as WeChat Pay's are.
            let paid = l.trades.values().filter(|t| !t.txn_id.is_empty()).count() + 1;
            let t = l.trades.get_mut(out_trade_no).expect("prepaid");
            assert_eq!(t.status, "NOTPAY", "only an unpaid order can be paid");
            t.status = "SUCCESS".to_string();
            t.txn_id = format!("42000{paid:07}{:016}", t.amount_minor);
            (t.notify_url.clone(), t.clone())
        };
        let (headers, body) = self.notification("TRANSACTION.SUCCESS", "transaction", &wechat_trade_json(&trade));
        if !deliver {
            return None;
        }
        let r = reqwest::Client::new().post(&notify_url).headers(headers).body(body).send().await.expect("notify");
        Some((r.status().as_u16(), r.text().await.unwrap_or_default()))
    }

    /// The buyer pays the paid order again (a second capture); the notification goes to kassa.
    /// Returns the new transaction id and kassa's answer.
    pub async fn pay_again(&self, out_trade_no: &str) -> (String, (u16, String)) {
        let t = capture_again(
            &self.ledger,
            |t| t.out_trade_no == out_trade_no,
            |n, t| format!("42009{n:07}{:016}", t.amount_minor),
        );
        let (headers, body) = self.notification("TRANSACTION.SUCCESS", "transaction", &wechat_trade_json(&t));
        let r = reqwest::Client::new().post(&t.notify_url).headers(headers).body(body).send().await.expect("notify");
        (t.txn_id, (r.status().as_u16(), r.text().await.unwrap_or_default()))
    }
}

// ------------------------------------------------------------------------------------------------
// Stripe

#[derive(Clone)]
pub struct FakeStripe {
    pub url: String,
    pub ledger: Shared,
    pub webhook_url: Arc<Mutex<String>>,
}

#[derive(Clone)]
struct StripeState {
    ledger: Shared,
    idempotency: Arc<Mutex<HashMap<String, Value>>>,
}

/// The provider's first checks: the secret key (a failure is counted), then, for a request with an
/// `Idempotency-Key` seen before, the stored answer. `Ok(key)` lets the request go on.
fn stripe_preamble(s: &StripeState, headers: &HeaderMap) -> Result<Option<String>, Box<Response>> {
    let authorized =
        headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(&format!("Bearer {STRIPE_SECRET_KEY}"));
    if !authorized {
        lock(&s.ledger).bad_signatures += 1;
        return Err(Box::new(stripe_error(StatusCode::UNAUTHORIZED, "Invalid API Key provided")));
    }
    let idem = headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
    if let Some(k) = &idem
        && let Some(v) = s.idempotency.lock().expect("idem").get(k)
    {
        return Err(Box::new(Json(v.clone()).into_response()));
    }
    Ok(idem)
}

fn stripe_error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"error": {"type": "invalid_request_error", "message": message}}))).into_response()
}

fn session_json(t: &Trade) -> Value {
    let (status, paid) = match t.status.as_str() {
        "paid" => ("complete", "paid"),
        "expired" => ("expired", "unpaid"),
        _ => ("open", "unpaid"),
    };
    json!({"id": t.id, "object": "checkout.session", "url": format!("https://checkout.stripe.com/c/pay/{}", t.id),
           "client_reference_id": t.out_trade_no, "status": status, "payment_status": paid,
           "payment_intent": if t.txn_id.is_empty() { Value::Null } else { json!(t.txn_id) },
           "amount_total": t.amount_minor, "currency": t.request["currency"], "expires_at": t.expires_at_s,
           "metadata": {"attempt_ref": t.out_trade_no}})
}

async fn stripe_create_session(State(s): State<StripeState>, headers: HeaderMap, body: String) -> Response {
    let idem = match stripe_preamble(&s, &headers) {
        Ok(idem) => idem,
        Err(answer) => return *answer,
    };
    let f: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap_or_default();
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    let expires_at: i64 = get("expires_at").parse().unwrap_or(0);
    let now = now_s();
    if get("mode") != "payment" || get("success_url").is_empty() {
        return stripe_error(StatusCode::BAD_REQUEST, "Missing required param");
    }
    if expires_at < now + 1800 || expires_at > now + 86_400 {
        return stripe_error(StatusCode::BAD_REQUEST, "expires_at must be between 30 minutes and 24 hours from now");
    }
    let amount: i64 = get("line_items[0][price_data][unit_amount]").parse().unwrap_or(0);
    let quantity: i64 = get("line_items[0][quantity]").parse().unwrap_or(0);
    let trade = Trade {
        out_trade_no: get("client_reference_id"),
        amount_minor: amount * quantity,
        status: "open".to_string(),
        id: format!("cs_test_{}", uuid::Uuid::now_v7().simple()),
        expires_at_s: expires_at,
        request: json!({"currency": get("line_items[0][price_data][currency]"), "success_url": get("success_url")}),
        ..Default::default()
    };
    let v = session_json(&trade);
    let mut l = lock(&s.ledger);
    l.calls.push("create_session".to_string());
    l.trades.insert(trade.id.clone(), trade);
    if let Some(k) = idem {
        s.idempotency.lock().expect("idem").insert(k, v.clone());
    }
    Json(v).into_response()
}

async fn stripe_get_session(
    State(s): State<StripeState>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    match lock(&s.ledger).trades.get(&id) {
        Some(t) => Json(session_json(t)).into_response(),
        None => stripe_error(StatusCode::NOT_FOUND, "No such checkout.session"),
    }
}

async fn stripe_expire(State(s): State<StripeState>, UrlPath(id): UrlPath<String>, headers: HeaderMap) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let mut l = lock(&s.ledger);
    match l.trades.get_mut(&id) {
        Some(t) if t.status == "open" => {
            t.status = "expired".to_string();
            Json(session_json(t)).into_response()
        }
        Some(_) => stripe_error(StatusCode::BAD_REQUEST, "Only Checkout Sessions with a status of open can be expired"),
        None => stripe_error(StatusCode::NOT_FOUND, "No such checkout.session"),
    }
}

fn refund_json(id: &str, t: &Trade, refund_no: &str, amount: i64, status: &str) -> Value {
    json!({"id": id, "object": "refund", "amount": amount, "currency": t.request["currency"], "status": status,
           "payment_intent": t.txn_id, "metadata": {"refund_no": refund_no, "attempt_ref": t.out_trade_no}})
}

async fn stripe_refund(State(s): State<StripeState>, headers: HeaderMap, body: String) -> Response {
    let idem = match stripe_preamble(&s, &headers) {
        Ok(idem) => idem,
        Err(answer) => return *answer,
    };
    let f: HashMap<String, String> = serde_urlencoded::from_str(&body).unwrap_or_default();
    let intent = f.get("payment_intent").cloned().unwrap_or_default();
    let amount: i64 = f.get("amount").and_then(|a| a.parse().ok()).unwrap_or(0);
    let refund_no = f.get("metadata[refund_no]").cloned().unwrap_or_default();
    let mut l = lock(&s.ledger);
    let pending = l.refunds_pending;
    if l.trades.values().any(|t| t.again.contains_key(&intent)) {
        let Some(_) = refund_again(&mut l, &intent, &refund_no, amount) else {
            return stripe_error(StatusCode::BAD_REQUEST, "Refund amount is greater than unrefunded amount on charge");
        };
        let t = l.trades.values().find(|t| t.again.contains_key(&intent)).expect("found above").clone();
        let v =
            refund_json(&format!("re_{refund_no}"), &Trade { txn_id: intent, ..t }, &refund_no, amount, "succeeded");
        return Json(v).into_response();
    }
    let Some(t) = l.trades.values_mut().find(|t| t.txn_id == intent && !intent.is_empty()) else {
        return stripe_error(StatusCode::NOT_FOUND, "No such payment_intent");
    };
    if t.refunds.values().sum::<i64>() + amount > t.amount_minor {
        return stripe_error(StatusCode::BAD_REQUEST, "Refund amount is greater than unrefunded amount on charge");
    }
    t.refunds.insert(refund_no.clone(), amount);
    let id = format!("re_{}", refund_no);
    let v = refund_json(&id, t, &refund_no, amount, if pending { "pending" } else { "succeeded" });
    let source = json!({"id": id, "object": "refund", "amount": amount, "currency": "cny", "payment_intent": intent,
                        "status": "succeeded", "metadata": v["metadata"].clone()});
    l.stripe_balance.push(balance_transaction("refund", -amount, 0, source));
    if let Some(k) = idem {
        s.idempotency.lock().expect("idem").insert(k, v.clone());
    }
    Json(v).into_response()
}

/// A balance transaction as Stripe lists it: `amount` signed, `net` = amount − fee.
pub fn balance_transaction(kind: &str, amount: i64, fee: i64, source: Value) -> Value {
    json!({"id": format!("txn_{}", uuid::Uuid::now_v7().simple()), "object": "balance_transaction", "type": kind,
           "reporting_category": kind, "amount": amount, "fee": fee, "net": amount - fee, "currency": "cny",
           "created": now_s(), "status": "pending", "source": source})
}

/// `GET /v1/balance_transactions`: newest first, `created[gte|lt]`, `starting_after`, `limit`;
/// sources are ids unless `expand[]=data.source`.
async fn stripe_balance(
    State(s): State<StripeState>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&query.unwrap_or_default()).unwrap_or_default();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let number = |k: &str| get(k).and_then(|v| v.parse::<i64>().ok());
    let expanded = pairs.iter().any(|(n, v)| n == "expand[]" && v == "data.source");
    let mut l = lock(&s.ledger);
    l.stripe_pages += 1;
    let limit = number("limit").unwrap_or(10).clamp(1, 100) as usize;
    let limit = l.stripe_page_max.map_or(limit, |m| limit.min(m));
    let mut items: Vec<Value> = l
        .stripe_balance
        .iter()
        .rev()
        .filter(|t| number("created[gte]").is_none_or(|g| t["created"].as_i64().unwrap_or(0) >= g))
        .filter(|t| number("created[lt]").is_none_or(|g| t["created"].as_i64().unwrap_or(0) < g))
        .cloned()
        .collect();
    if let Some(after) = get("starting_after") {
        match items.iter().position(|t| t["id"] == after.as_str()) {
            Some(i) => items.drain(..=i).for_each(drop),
            None => return stripe_error(StatusCode::BAD_REQUEST, "No such balance transaction"),
        }
    }
    let has_more = items.len() > limit;
    items.truncate(limit);
    if !expanded {
        for t in &mut items {
            t["source"] = t["source"]["id"].clone();
        }
    }
    Json(json!({"object": "list", "url": "/v1/balance_transactions", "has_more": has_more, "data": items}))
        .into_response()
}

async fn stripe_get_refund(State(s): State<StripeState>, UrlPath(id): UrlPath<String>, headers: HeaderMap) -> Response {
    if let Err(answer) = stripe_preamble(&s, &headers) {
        return *answer;
    }
    let l = lock(&s.ledger);
    let refund_no = id.trim_start_matches("re_");
    match l.trades.values().find(|t| t.refunds.contains_key(refund_no)) {
        Some(t) => Json(refund_json(&id, t, refund_no, t.refunds[refund_no], "succeeded")).into_response(),
        None => stripe_error(StatusCode::NOT_FOUND, "No such refund"),
    }
}

impl FakeStripe {
    pub async fn start() -> FakeStripe {
        let ledger: Shared = Arc::default();
        let idempotency: Arc<Mutex<HashMap<String, Value>>> = Arc::default();
        let state = StripeState { ledger: ledger.clone(), idempotency };
        let router = Router::new()
            .route("/v1/checkout/sessions", post(stripe_create_session))
            .route("/v1/checkout/sessions/{id}", get(stripe_get_session))
            .route("/v1/checkout/sessions/{id}/expire", post(stripe_expire))
            .route("/v1/refunds", post(stripe_refund))
            .route("/v1/refunds/{id}", get(stripe_get_refund))
            .route("/v1/balance_transactions", get(stripe_balance))
            .with_state(state);
        FakeStripe { url: serve(router).await, ledger, webhook_url: Arc::default() }
    }

    pub fn config(&self) -> StripeConfig {
        StripeConfig {
            secret_key: Secret(STRIPE_SECRET_KEY.to_string()),
            webhook_secret: Secret(STRIPE_WEBHOOK_SECRET.to_string()),
            previous_webhook_secrets: vec![],
            api_base_url: self.url.clone(),
        }
    }

    pub fn session_for(&self, attempt_ref: &str) -> Option<Trade> {
        lock(&self.ledger).trades.values().find(|t| t.out_trade_no == attempt_ref).cloned()
    }

    /// `Stripe-Signature` for `body` at `t` with `secret`.
    pub fn signature(secret: &str, t: i64, body: &str) -> String {
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret.as_bytes());
        let v1 = hex::encode(aws_lc_rs::hmac::sign(&key, format!("{t}.{body}").as_bytes()).as_ref());
        format!("t={t},v1={v1}")
    }

    pub async fn send_event(&self, event: &Value) -> (u16, String) {
        let body = event.to_string();
        let url = self.webhook_url.lock().expect("url").clone();
        let r = reqwest::Client::new()
            .post(url)
            .header("Stripe-Signature", Self::signature(STRIPE_WEBHOOK_SECRET, now_s(), &body))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("webhook");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    /// The buyer pays the session of `attempt_ref`; `checkout.session.completed` goes out when `deliver`.
    pub async fn pay(&self, attempt_ref: &str, deliver: bool) -> Option<(u16, String)> {
        let session = {
            let mut l = lock(&self.ledger);
            let t = l.trades.values_mut().find(|t| t.out_trade_no == attempt_ref).expect("session");
            assert_eq!(t.status, "open", "only an open session can be paid");
            t.status = "paid".to_string();
            t.txn_id = format!("pi_{}", uuid::Uuid::now_v7().simple());
            let charge = json!({"id": format!("ch_{}", uuid::Uuid::now_v7().simple()), "object": "charge",
                                "amount": t.amount_minor, "currency": "cny", "payment_intent": t.txn_id, "metadata": {}});
            let fee = t.amount_minor * 29 / 1000 + 30;
            let bt = balance_transaction("charge", t.amount_minor, fee, charge);
            let session = session_json(t);
            l.stripe_balance.push(bt);
            session
        };
        if !deliver {
            return None;
        }
        let event = json!({"id": format!("evt_{}", uuid::Uuid::now_v7().simple()), "object": "event",
                           "type": "checkout.session.completed", "data": {"object": session}});
        Some(self.send_event(&event).await)
    }

    /// The session of `attempt_ref`, paid, completes again under another PaymentIntent (a second
    /// capture). Returns the new PaymentIntent and kassa's answer.
    pub async fn pay_again(&self, attempt_ref: &str) -> (String, (u16, String)) {
        let t = capture_again(&self.ledger, |t| t.out_trade_no == attempt_ref, |n, _| format!("pi_again_{n}"));
        let event = json!({"id": format!("evt_{}", uuid::Uuid::now_v7().simple()), "object": "event",
                           "type": "checkout.session.completed", "data": {"object": session_json(&t)}});
        (t.txn_id.clone(), self.send_event(&event).await)
    }
}

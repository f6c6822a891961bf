//! The fake Alipay API (see the module above for what every fake does).

use super::*;

// ------------------------------------------------------------------------------------------------
// Alipay

#[derive(Clone)]
pub struct FakeAlipay {
    pub url: String,
    pub ledger: Shared,
}

pub(super) fn alipay_content(params: &BTreeMap<String, String>, drop_sign_type: bool) -> String {
    params
        .iter()
        .filter(|(k, v)| !v.is_empty() && k.as_str() != "sign" && !(drop_sign_type && k.as_str() == "sign_type"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

pub(super) fn alipay_answer(method: &str, node: Value) -> Response {
    let node_text = node.to_string();
    let sign = rsa_sign(&provider_key(), node_text.as_bytes());
    let name = format!("{}_response", method.replace('.', "_"));
    let body = format!("{{\"{name}\":{node_text},\"sign\":\"{sign}\"}}");
    ([("content-type", "application/json;charset=utf-8")], body).into_response()
}

pub(super) fn alipay_error(sub_code: &str) -> Value {
    json!({"code": "40004", "msg": "Business Failed", "sub_code": sub_code, "sub_msg": sub_code})
}

pub(super) fn yuan(minor: i64) -> String {
    format!("{}.{:02}", minor / 100, minor % 100)
}

fn parse_yuan(s: &str) -> i64 {
    let (w, f) = s.split_once('.').unwrap_or((s, "0"));
    w.parse::<i64>().expect("yuan") * 100 + format!("{f:0<2}").parse::<i64>().expect("fen")
}

/// The provider's check of a request's text parameters: sign_type included, sign and empty values
/// excluded, the merchant's key; our app, RSA2.
pub(super) fn alipay_signed(params: &BTreeMap<String, String>) -> bool {
    let get = |k: &str| params.get(k).map(String::as_str).unwrap_or_default();
    merchant_verifies(alipay_content(params, false).as_bytes(), get("sign"))
        && get("app_id") == ALIPAY_APP_ID
        && get("sign_type") == "RSA2"
}

/// Alipay's answer to a request whose signature does not verify (unsigned, as Alipay's is).
pub(super) fn alipay_bad_signature(ledger: &Shared, method: &str) -> Response {
    lock(ledger).bad_signatures += 1;
    let node = json!({"code": "40002", "msg": "Invalid Arguments", "sub_code": "isv.invalid-signature"});
    (
        [("content-type", "application/json")],
        json!({ format!("{}_response", method.replace('.', "_")): node }).to_string(),
    )
        .into_response()
}

/// The gateway: a form-encoded request, or an upload (multipart/form-data).
async fn alipay_gateway(State(ledger): State<Shared>, req: axum::extract::Request) -> Response {
    use axum::extract::FromRequest as _;
    let content_type = req.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default();
    if content_type.starts_with("multipart/form-data") {
        return super::alipay_complaints::upload(&ledger, req).await;
    }
    let body = String::from_request(req, &()).await.unwrap_or_default();
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&body).unwrap_or_default();
    let params: BTreeMap<String, String> = pairs.into_iter().collect();
    let get = |k: &str| params.get(k).cloned().unwrap_or_default();
    let method = get("method");
    if !alipay_signed(&params) {
        return alipay_bad_signature(&ledger, &method);
    }
    let biz: Value = serde_json::from_str(&get("biz_content")).unwrap_or(Value::Null);
    let out_trade_no = biz["out_trade_no"].as_str().unwrap_or_default().to_string();
    let mut l = lock(&ledger);
    l.calls.push(method.clone());
    if let Some(answer) = super::alipay_complaints::answer(&mut l, &method, &biz) {
        return answer;
    }
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

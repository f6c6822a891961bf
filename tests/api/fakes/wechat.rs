//! The fake WeChat Pay v3 API (see the module above for what every fake does).

use super::*;

// ------------------------------------------------------------------------------------------------
// WeChat Pay v3

#[derive(Clone)]
pub struct FakeWechat {
    pub url: String,
    pub ledger: Shared,
}

/// Provider-side check of `Authorization: WECHATPAY2-SHA256-RSA2048 k="v",…`.
pub(super) fn wechat_authorized(headers: &HeaderMap, method: &str, path_and_query: &str, body: &str) -> bool {
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
pub(super) fn wechat_answer(status: StatusCode, body: Option<Value>) -> Response {
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

pub(super) fn wechat_error(status: StatusCode, code: &str) -> Response {
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
            .route("/cgi-bin/message/subscribe/send", post(super::wechat_subscribe::mini_subscribe_send))
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
            .route("/v3/billdownload/file", get(wechat_billdownload));
        let router = super::wechat_complaints::routes(router).with_state(ledger.clone());
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
            subscribe: None,
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

//! WeChat Pay's complaints 2.0 (`/v3/merchant-service/complaints-v2`), checked as WeChat checks
//! them: the merchant's request signature, the list's limit (at most 50) and window (both dates,
//! at most 30 days), a reply of 1-200 characters for the merchant complained about. A reply moves
//! a pending complaint to `PROCESSING`, completing it to `PROCESSED`. The complaint notification
//! is signed and encrypted like a payment's, and names the complaint only. Images are uploaded as
//! multipart/form-data signed over the `meta` part, whose SHA-256 must be the file's; a refund
//! request is approved (the complaint stays in processing) or rejected with a reason (processed);
//! one complaint notification URL is created, read, replaced and deleted.

use super::*;

const PATH: &str = "/v3/merchant-service/complaints-v2";

pub(super) fn routes(router: Router<Shared>) -> Router<Shared> {
    router
        .route(PATH, get(list))
        .route(&format!("{PATH}/{{id}}"), get(detail))
        .route(&format!("{PATH}/{{id}}/negotiation-historys"), get(history))
        .route(&format!("{PATH}/{{id}}/response"), post(respond))
        .route(&format!("{PATH}/{{id}}/complete"), post(complete))
        .route(&format!("{PATH}/{{id}}/update-refund-progress"), post(refund_progress))
        .route(IMAGES, post(upload))
        .route(NOTIFICATIONS, get(notify_url).post(create_notify_url).put(update_notify_url).delete(delete_notify_url))
}

const IMAGES: &str = "/v3/merchant-service/images/upload";
const NOTIFICATIONS: &str = "/v3/merchant-service/complaint-notifications";
/// WeChat's bounds: an image of at most 2 MB, four images to a reply or a refusal, a reason of at
/// most 200 characters.
const IMAGE_BYTES_MAX: usize = 2 * 1024 * 1024;
const IMAGES_MAX: usize = 4;
const REASON_CHARS_MAX: usize = 200;

/// An upload: the `meta` part (JSON, the text the signature covers) and the `file` part; the
/// file's SHA-256 must be the meta's, its name must end in JPG, BMP or PNG.
async fn upload(State(ledger): State<Shared>, headers: HeaderMap, mut form: axum::extract::Multipart) -> Response {
    let (mut meta, mut file) = (None, None);
    while let Ok(Some(field)) = form.next_field().await {
        match field.name() {
            Some("meta") => meta = field.text().await.ok(),
            Some("file") => file = field.bytes().await.ok(),
            _ => {}
        }
    }
    let (Some(meta), Some(file)) = (meta, file) else {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    };
    if !wechat_authorized(&headers, "POST", IMAGES, &meta) {
        return refused(&ledger);
    }
    let m: Value = serde_json::from_str(&meta).unwrap_or(Value::Null);
    let digest = hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &file));
    let name = m["filename"].as_str().unwrap_or_default().to_ascii_lowercase();
    let named = [".jpg", ".png", ".bmp"].iter().any(|e| name.ends_with(e)) && name.len() <= 128;
    if m["sha256"] != digest.as_str() || !named || file.is_empty() || file.len() > IMAGE_BYTES_MAX {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    }
    let mut l = lock(&ledger);
    let media_id = format!("MEDIA-{}", l.complaint_images.len() + 1);
    l.complaint_images.push((media_id.clone(), file.to_vec()));
    wechat_answer(StatusCode::OK, Some(json!({"media_id": media_id})))
}

/// Whether every media id of `ids` (absent: none) was uploaded, and there are at most four.
fn known_media(l: &Ledger, ids: &Value) -> bool {
    match ids {
        Value::Null => true,
        Value::Array(ids) => {
            ids.len() <= IMAGES_MAX && ids.iter().all(|id| l.complaint_images.iter().any(|(m, _)| id == m.as_str()))
        }
        _ => false,
    }
}

async fn refund_progress(
    State(ledger): State<Shared>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if !wechat_authorized(&headers, "POST", &format!("{PATH}/{id}/update-refund-progress"), &body) {
        return refused(&ledger);
    }
    let b: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let mut l = lock(&ledger);
    let next = match b["action"].as_str() {
        Some("APPROVE") if b["launch_refund_day"].is_null() || b["launch_refund_day"].is_u64() => "PROCESSING",
        Some("REJECT")
            if b["reject_reason"].as_str().is_some_and(|r| (1..=REASON_CHARS_MAX).contains(&r.chars().count()))
                && known_media(&l, &b["reject_media_list"]) =>
        {
            "PROCESSED"
        }
        _ => return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR"),
    };
    let Some(c) = l.wechat_complaints.iter_mut().find(|c| c["complaint_id"] == id) else {
        return wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS");
    };
    if c["complaint_state"] == "PROCESSED" || c["problem_type"] != "REFUND" {
        return wechat_error(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
    }
    c["complaint_state"] = json!(next);
    l.complaint_refund_answers.push((id, b));
    wechat_answer(StatusCode::NO_CONTENT, None)
}

async fn notify_url(State(ledger): State<Shared>, headers: HeaderMap) -> Response {
    if !wechat_authorized(&headers, "GET", NOTIFICATIONS, "") {
        return refused(&ledger);
    }
    match lock(&ledger).complaint_notify_url.clone() {
        Some(url) => wechat_answer(StatusCode::OK, Some(json!({"mchid": WECHAT_MCHID, "url": url}))),
        None => wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS"),
    }
}

/// A creation (`POST`, refused when one is registered) or a replacement (`PUT`, refused when
/// none is) of the URL, which must be HTTPS.
fn register(ledger: &Shared, method: &str, headers: &HeaderMap, body: &str) -> Response {
    if !wechat_authorized(headers, method, NOTIFICATIONS, body) {
        return refused(ledger);
    }
    let b: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let Some(url) = b["url"].as_str().filter(|u| u.starts_with("https://")) else {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    };
    let mut l = lock(ledger);
    if l.complaint_notify_url.is_some() != (method == "PUT") {
        return wechat_error(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
    }
    l.complaint_notify_calls.push(method.to_string());
    l.complaint_notify_url = Some(url.to_string());
    wechat_answer(StatusCode::OK, Some(json!({"mchid": WECHAT_MCHID, "url": url})))
}

async fn create_notify_url(State(ledger): State<Shared>, headers: HeaderMap, body: String) -> Response {
    register(&ledger, "POST", &headers, &body)
}

async fn update_notify_url(State(ledger): State<Shared>, headers: HeaderMap, body: String) -> Response {
    register(&ledger, "PUT", &headers, &body)
}

async fn delete_notify_url(State(ledger): State<Shared>, headers: HeaderMap) -> Response {
    if !wechat_authorized(&headers, "DELETE", NOTIFICATIONS, "") {
        return refused(&ledger);
    }
    let mut l = lock(&ledger);
    if l.complaint_notify_url.take().is_none() {
        return wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS");
    }
    l.complaint_notify_calls.push("DELETE".to_string());
    wechat_answer(StatusCode::NO_CONTENT, None)
}

fn refused(ledger: &Shared) -> Response {
    lock(ledger).bad_signatures += 1;
    wechat_error(StatusCode::UNAUTHORIZED, "SIGN_ERROR")
}

/// A complaint's day in Beijing time (`complaint_time` is written at +08:00).
fn day_of(complaint: &Value) -> String {
    complaint["complaint_time"].as_str().unwrap_or_default().chars().take(10).collect()
}

fn date(text: &str) -> Option<time::Date> {
    time::Date::parse(text, &time::format_description::well_known::Iso8601::DATE).ok()
}

async fn list(
    State(ledger): State<Shared>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = query.unwrap_or_default();
    if !wechat_authorized(&headers, "GET", &format!("{PATH}?{query}"), "") {
        return refused(&ledger);
    }
    let q: HashMap<String, String> = serde_urlencoded::from_str(&query).unwrap_or_default();
    let number = |k: &str| q.get(k).and_then(|v| v.parse::<usize>().ok());
    let (Some(limit), Some(begin), Some(end)) =
        (number("limit"), q.get("begin_date").and_then(|d| date(d)), q.get("end_date").and_then(|d| date(d)))
    else {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    };
    let offset = number("offset").unwrap_or(0);
    if !(1..=50).contains(&limit) || end < begin || (end - begin).whole_days() >= 30 {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    }
    let mut l = lock(&ledger);
    l.complaint_lists.push(query.clone());
    let within: Vec<Value> = l
        .wechat_complaints
        .iter()
        .filter(|c| date(&day_of(c)).is_some_and(|d| begin <= d && d <= end))
        .cloned()
        .collect();
    let data: Vec<Value> = within.iter().skip(offset).take(limit).cloned().collect();
    wechat_answer(
        StatusCode::OK,
        Some(json!({"data": data, "limit": limit, "offset": offset, "total_count": within.len()})),
    )
}

async fn detail(State(ledger): State<Shared>, UrlPath(id): UrlPath<String>, headers: HeaderMap) -> Response {
    if !wechat_authorized(&headers, "GET", &format!("{PATH}/{id}"), "") {
        return refused(&ledger);
    }
    let l = lock(&ledger);
    match l.wechat_complaints.iter().find(|c| c["complaint_id"] == id.as_str()) {
        Some(c) => wechat_answer(StatusCode::OK, Some(c.clone())),
        None => wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS"),
    }
}

/// The thread of a complaint: the buyer's complaint, then each of the merchant's replies, paged by
/// `limit` (1-300) and `offset`.
async fn history(
    State(ledger): State<Shared>,
    UrlPath(id): UrlPath<String>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    headers: HeaderMap,
) -> Response {
    let query = query.unwrap_or_default();
    if !wechat_authorized(&headers, "GET", &format!("{PATH}/{id}/negotiation-historys?{query}"), "") {
        return refused(&ledger);
    }
    let q: HashMap<String, String> = serde_urlencoded::from_str(&query).unwrap_or_default();
    let number = |k: &str| q.get(k).and_then(|v| v.parse::<usize>().ok());
    let (Some(limit), offset) = (number("limit"), number("offset").unwrap_or(0)) else {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    };
    if !(1..=300).contains(&limit) {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    }
    let l = lock(&ledger);
    let Some(c) = l.wechat_complaints.iter().find(|c| c["complaint_id"] == id.as_str()) else {
        return wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS");
    };
    let mut thread = vec![json!({"log_id": format!("{id}-0"), "operator": "用户", "operate_time": c["complaint_time"],
        "operate_type": "USER_CREATE_COMPLAINT", "operate_details": c["complaint_detail"]})];
    for (n, (_, text)) in l.complaint_replies.iter().filter(|(c, _)| *c == id).enumerate() {
        thread
            .push(json!({"log_id": format!("{id}-{}", n + 1), "operator": "商户", "operate_time": c["complaint_time"],
            "operate_type": "MERCHANT_RESPONSE", "operate_details": text}));
    }
    let total = thread.len();
    let data: Vec<Value> = thread.into_iter().skip(offset).take(limit).collect();
    wechat_answer(StatusCode::OK, Some(json!({"data": data, "limit": limit, "offset": offset, "total_count": total})))
}

/// A reply or a completion: checked, then the complaint moved on to `state`.
fn act(ledger: &Shared, id: &str, body: &Value, reply: Option<&str>, state: &str) -> Response {
    if body["complainted_mchid"] != WECHAT_MCHID {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    }
    let mut l = lock(ledger);
    let Some(c) = l.wechat_complaints.iter_mut().find(|c| c["complaint_id"] == id) else {
        return wechat_error(StatusCode::NOT_FOUND, "RESOURCE_NOT_EXISTS");
    };
    if c["complaint_state"] == "PROCESSED" {
        return wechat_error(StatusCode::BAD_REQUEST, "INVALID_REQUEST");
    }
    c["complaint_state"] = json!(state);
    match reply {
        Some(text) => l.complaint_replies.push((id.to_string(), text.to_string())),
        None => l.complaints_completed.push(id.to_string()),
    }
    wechat_answer(StatusCode::NO_CONTENT, None)
}

async fn respond(
    State(ledger): State<Shared>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if !wechat_authorized(&headers, "POST", &format!("{PATH}/{id}/response"), &body) {
        return refused(&ledger);
    }
    let b: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let text = b["response_content"].as_str().unwrap_or_default();
    if !(1..=200).contains(&text.chars().count()) || !known_media(&lock(&ledger), &b["response_images"]) {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    }
    lock(&ledger).complaint_responses.push(b.clone());
    act(&ledger, &id, &b, Some(text), "PROCESSING")
}

async fn complete(
    State(ledger): State<Shared>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
    body: String,
) -> Response {
    if !wechat_authorized(&headers, "POST", &format!("{PATH}/{id}/complete"), &body) {
        return refused(&ledger);
    }
    let b: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    act(&ledger, &id, &b, None, "PROCESSED")
}

impl FakeWechat {
    /// The buyer complains about the paid order `out_trade_no`, at `at_s` (seconds since the
    /// epoch); no notification is sent. The complaint's detail.
    pub fn open_complaint(&self, out_trade_no: &str, at_s: i64) -> Value {
        let mut l = lock(&self.ledger);
        let t = l.trades.get(out_trade_no).cloned().expect("a trade");
        let n = l.wechat_complaints.len() + 1;
        let at = time::OffsetDateTime::from_unix_timestamp(at_s)
            .expect("time")
            .to_offset(time::UtcOffset::from_hms(8, 0, 0).expect("offset"))
            .format(&time::format_description::well_known::Rfc3339)
            .expect("format");
        let c = json!({
            "complaint_id": format!("2002018202012010800{n:08}"),
            "complaint_time": at,
            "complaint_detail": "没有收到卡密",
            "complaint_state": "PENDING",
            "payer_phone": "AQIDBAUGBwgJCgsMDQ4PEBESExQ=",
            "complaint_order_info": [{"transaction_id": t.txn_id, "out_trade_no": out_trade_no, "amount": t.amount_minor}],
            "complaint_full_refunded": false,
            "incoming_user_response": false,
            "user_complaint_times": 1,
            "problem_description": "没有收到卡密",
            "problem_type": "REFUND",
            "apply_refund_amount": t.amount_minor,
            "complaint_media_list": [],
        });
        l.wechat_complaints.push(c.clone());
        c
    }

    /// The complaint `id` as the fake has it.
    pub fn complaint(&self, id: &str) -> Value {
        lock(&self.ledger).wechat_complaints.iter().find(|c| c["complaint_id"] == id).cloned().expect("a complaint")
    }

    /// Sets a complaint's `complaint_state` (as the buyer or the platform moves it).
    pub fn set_complaint_state(&self, id: &str, state: &str) {
        let mut l = lock(&self.ledger);
        let c = l.wechat_complaints.iter_mut().find(|c| c["complaint_id"] == id).expect("a complaint");
        c["complaint_state"] = json!(state);
    }

    /// A signed, encrypted `event_type` notification of the complaint `id` (`action_type`), and
    /// the notification URL of the complaint's order.
    pub fn complaint_notification(&self, id: &str, event_type: &str, action_type: &str) -> (String, HeaderMap, String) {
        let out_trade_no =
            self.complaint(id)["complaint_order_info"][0]["out_trade_no"].as_str().unwrap_or_default().to_string();
        let url = self.trade(&out_trade_no).expect("a trade").notify_url;
        let (headers, body) =
            self.notification(event_type, "complaint", &json!({"complaint_id": id, "action_type": action_type}));
        (url, headers, body)
    }

    /// Sends a notification to kassa: its status and answer.
    pub async fn deliver(url: &str, headers: HeaderMap, body: String) -> (u16, String) {
        let r = reqwest::Client::new().post(url).headers(headers).body(body).send().await.expect("notify");
        (r.status().as_u16(), r.text().await.unwrap_or_default())
    }

    /// Notifies kassa of the complaint `id`: kassa's status and answer.
    pub async fn notify_complaint(&self, id: &str, event_type: &str, action_type: &str) -> (u16, String) {
        let (url, headers, body) = self.complaint_notification(id, event_type, action_type);
        FakeWechat::deliver(&url, headers, body).await
    }
}

//! WeChat Pay's complaints 2.0 (`/v3/merchant-service/complaints-v2`), checked as WeChat checks
//! them: the merchant's request signature, the list's limit (at most 50) and window (both dates,
//! at most 30 days), a reply of 1-200 characters for the merchant complained about. A reply moves
//! a pending complaint to `PROCESSING`, completing it to `PROCESSED`. The complaint notification
//! is signed and encrypted like a payment's, and names the complaint only.

use super::*;

const PATH: &str = "/v3/merchant-service/complaints-v2";

pub(super) fn routes(router: Router<Shared>) -> Router<Shared> {
    router
        .route(PATH, get(list))
        .route(&format!("{PATH}/{{id}}"), get(detail))
        .route(&format!("{PATH}/{{id}}/response"), post(respond))
        .route(&format!("{PATH}/{{id}}/complete"), post(complete))
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
    if !(1..=200).contains(&text.chars().count()) {
        return wechat_error(StatusCode::BAD_REQUEST, "PARAM_ERROR");
    }
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

//! WeChat Pay complaints 2.0 as kassa's cases (docs/gateways/wechatpay.md §9): the notification
//! (`COMPLAINT.*`) names a complaint and what happened to it, nothing more, so the complaint's
//! detail is fetched; a detail, one of the list's items or an action's answer reads as a case
//! report here. Pure: the requests are sent by the adapter. The payer's phone number, which
//! WeChat sends encrypted, is dropped before anything is kept.

use serde_json::{Value, json};

use super::format_at_offset;
use super::multipart::{self, Part};
use crate::clock::Millis;
use crate::domain::case::{CaseImage, CaseKind, CaseReport, REPLY_CHARS_MAX, RefundVerdict, reply_fits};
use crate::domain::ids::is_plain_id;
use crate::domain::{Currency, Money};

/// The gateway's name, as the cases name their provider.
pub const PROVIDER: &str = "wechatpay";
/// Where the complaints are.
pub const COMPLAINTS_PATH: &str = "/v3/merchant-service/complaints-v2";
/// Complaints asked for per page of the list (WeChat's most).
pub const COMPLAINT_PAGE: usize = 50;
/// Pages of the list read at most in one poll.
pub const COMPLAINT_PAGES_MAX: usize = 20;
/// The longest window the list takes, in days (both ends counted).
pub const LIST_WINDOW_DAYS: i64 = 30;
/// Fields of a complaint never kept: the payer's phone number (encrypted).
const NOT_KEPT: &[&str] = &["payer_phone"];

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str).unwrap_or_default()
}

/// Whether a notification's `event_type` is about a complaint.
pub fn is_complaint_event(event_type: &str) -> bool {
    event_type.starts_with("COMPLAINT.")
}

/// A verified, decrypted complaint notification (`resource` holds `complaint_id` and
/// `action_type`) as a notice: a report without a status, which says the complaint is to be
/// fetched.
pub fn notice_report(notification_id: &str, resource: &Value, now: Millis) -> Result<CaseReport, String> {
    let id = text(resource, &["complaint_id"]);
    if !is_plain_id(id) {
        return Err("complaint notification without a complaint_id".into());
    }
    let action = text(resource, &["action_type"]);
    let kind = if action.is_empty() { "COMPLAINT".to_string() } else { action.to_string() };
    Ok(CaseReport::notice(PROVIDER, id, notification_id, kind, resource.to_string(), now))
}

/// A complaint's detail (or an item of the list) as a report of `now`.
pub fn detail_report(detail: &Value, message_kind: &str, now: Millis) -> Result<CaseReport, String> {
    let id = text(detail, &["complaint_id"]);
    if !is_plain_id(id) {
        return Err("complaint without a complaint_id".into());
    }
    let state = text(detail, &["complaint_state"]);
    if state.is_empty() {
        return Err(format!("complaint {id} without a complaint_state"));
    }
    let opened_at = parse_time(text(detail, &["complaint_time"]))
        .ok_or_else(|| format!("complaint {id}: complaint_time is not an RFC 3339 time"))?;
    let order = detail.get("complaint_order_info").and_then(|o| o.get(0)).cloned().unwrap_or(Value::Null);
    let plain = |key: &str| Some(text(&order, &[key]).to_string()).filter(|v| is_plain_id(v));
    let mut kept = detail.clone();
    if let Some(fields) = kept.as_object_mut() {
        for field in NOT_KEPT {
            fields.remove(*field);
        }
    }
    Ok(CaseReport {
        provider: PROVIDER,
        case_id: id.to_string(),
        kind: CaseKind::Complaint,
        status: state.to_string(),
        reason: Some(text(detail, &["problem_type"]).to_string()).filter(|r| !r.is_empty()),
        amount: order.get("amount").and_then(Value::as_i64).and_then(|fen| Money::new(fen, Currency::CNY).ok()),
        attempt_ref: plain("out_trade_no"),
        gateway_txn_id: plain("transaction_id"),
        opened_at,
        due_by: None,
        as_of: now,
        message_id: None,
        message_kind: message_kind.to_string(),
        body: kept.to_string(),
    })
}

fn parse_time(text: &str) -> Option<Millis> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// Entries of a complaint's negotiation history asked for in one page, and pages read at most: a
/// thread longer than that is kept up to there (WeChat's page takes up to 300).
pub const HISTORY_PAGE: usize = 50;
pub const HISTORY_PAGES_MAX: usize = 10;

/// The page of a complaint's negotiation history at `offset`; `None` for an id that is not
/// WeChat's kind of id.
pub fn history_path(case_id: &str, offset: usize) -> Option<String> {
    complaint_path(case_id, &format!("/negotiation-historys?limit={HISTORY_PAGE}&offset={offset}"))
}

/// A page of a complaint's negotiation history: its entries as WeChat sent them, and whether more
/// follow.
pub fn history_page(page: &Value, offset: usize) -> Result<(Vec<Value>, bool), String> {
    let entries = page.get("data").and_then(Value::as_array).ok_or("a negotiation history without data")?.clone();
    let total = page.get("total_count").and_then(Value::as_u64).unwrap_or(0);
    let read = offset + entries.len();
    Ok((entries.clone(), !entries.is_empty() && (read as u64) < total))
}

/// The complaint's report with its negotiation history kept beside the detail (`negotiation_history`).
pub fn with_history(mut report: CaseReport, history: Vec<Value>) -> CaseReport {
    if let Ok(Value::Object(mut kept)) = serde_json::from_str::<Value>(&report.body) {
        kept.insert("negotiation_history".into(), Value::Array(history));
        report.body = Value::Object(kept).to_string();
    }
    report
}

/// A complaint's path (`suffix` empty, `/response` or `/complete`); `None` for an id that is not
/// WeChat's kind of id.
pub fn complaint_path(case_id: &str, suffix: &str) -> Option<String> {
    is_plain_id(case_id).then(|| format!("{COMPLAINTS_PATH}/{case_id}{suffix}"))
}

/// The list's page at `offset` over the 30 Beijing days up to `now` (or from `since`, when later).
pub fn list_path(since: Millis, now: Millis, offset: usize) -> String {
    let window_start = now.saturating_sub((LIST_WINDOW_DAYS - 1) * 86_400_000);
    let day = |ms: Millis| format_at_offset(ms, 8, false).chars().take(10).collect::<String>();
    format!(
        "{COMPLAINTS_PATH}?limit={COMPLAINT_PAGE}&offset={offset}&begin_date={}&end_date={}",
        day(since.max(window_start)),
        day(now)
    )
}

/// The body of a reply: the merchant complained about, the text (1-200 characters) and the
/// images uploaded for it (their media ids), when there are any.
pub fn response_body(mchid: &str, reply: &str, media_ids: &[String]) -> Result<Value, String> {
    if !reply_fits(reply) {
        return Err(format!("a reply is 1-{REPLY_CHARS_MAX} characters"));
    }
    let mut body = json!({"complainted_mchid": mchid, "response_content": reply});
    if !media_ids.is_empty() {
        body["response_images"] = json!(media_ids);
    }
    Ok(body)
}

/// Where images are uploaded for replies and refusals.
pub const IMAGES_PATH: &str = "/v3/merchant-service/images/upload";
/// The longest media id kassa takes from WeChat (WeChat's own bound).
pub const MEDIA_ID_LEN_MAX: usize = 512;
/// Where the complaint notification URL is registered (one per merchant).
pub const NOTIFICATIONS_PATH: &str = "/v3/merchant-service/complaint-notifications";

/// An upload's `meta` part, which is also the text its request signature covers: a file name
/// ending in the image's kind, and the hex SHA-256 of its bytes.
pub fn image_meta(image: &CaseImage) -> String {
    let digest = hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &image.bytes));
    let filename = format!("{}.{}", &digest[..32], image.kind.extension());
    json!({"filename": filename, "sha256": digest}).to_string()
}

/// The parts of an upload: `meta` (JSON) and `file` (the image, named as `meta` names it).
fn upload_parts<'a>(meta: &'a str, filename: &'a str, image: &'a CaseImage) -> [Part<'a>; 2] {
    [
        Part { name: "meta", filename: None, content_type: Some("application/json"), bytes: meta.as_bytes() },
        Part::file("file", filename, image.kind.content_type(), &image.bytes),
    ]
}

fn meta_filename(meta: &str) -> String {
    serde_json::from_str::<Value>(meta)
        .ok()
        .and_then(|m| m.get("filename").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

/// The multipart/form-data body of an upload under `boundary`: the `meta` part (JSON) and the
/// `file` part (the image). The boundary must not occur in either part.
pub fn upload_body(boundary: &str, meta: &str, image: &CaseImage) -> Vec<u8> {
    let filename = meta_filename(meta);
    multipart::body(boundary, &upload_parts(meta, &filename, image))
}

/// A boundary that occurs in neither part: `seed` (random hex) lengthened until it does not.
pub fn upload_boundary(seed: &str, meta: &str, image: &CaseImage) -> String {
    let filename = meta_filename(meta);
    multipart::boundary(seed, &upload_parts(meta, &filename, image))
}

/// The media id of an upload's answer.
pub fn media_id(answer: &Value) -> Result<String, String> {
    let id = answer.get("media_id").and_then(Value::as_str).unwrap_or_default();
    if id.is_empty() || id.len() > MEDIA_ID_LEN_MAX || id.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("the upload's answer names no media_id".into());
    }
    Ok(id.to_string())
}

/// The body of the merchant's answer to a refund request: `APPROVE` with the working days until
/// the refund starts, or `REJECT` with the reason, the images (media ids) and a remark.
pub fn refund_progress_body(verdict: &RefundVerdict, media_ids: &[String]) -> Value {
    match verdict {
        RefundVerdict::Approve { launch_refund_days } => {
            json!({"action": "APPROVE", "launch_refund_day": launch_refund_days})
        }
        RefundVerdict::Reject { reason, remark } => {
            let mut body = json!({"action": "REJECT", "reject_reason": reason});
            if !media_ids.is_empty() {
                body["reject_media_list"] = json!(media_ids);
            }
            if let Some(remark) = remark {
                body["remark"] = json!(remark);
            }
            body
        }
    }
}

/// How the notification URL is registered: created (`POST`) when none is, replaced (`PUT`)
/// otherwise.
pub fn registration_method(registered: Option<&str>) -> &'static str {
    if registered.is_some() { "PUT" } else { "POST" }
}

/// The URL of a registration's answer (`{mchid, url}`); `None` when it names none.
pub fn registered_url(answer: &Value) -> Option<String> {
    answer.get("url").and_then(Value::as_str).filter(|u| !u.is_empty()).map(str::to_string)
}

/// A page of the list: its complaints, and whether another page follows.
pub fn list_page(page: &Value, offset: usize) -> (Vec<Value>, bool) {
    let items = page.get("data").and_then(Value::as_array).cloned().unwrap_or_default();
    let total = page.get("total_count").and_then(Value::as_u64).unwrap_or_default();
    let more = !items.is_empty() && ((offset + items.len()) as u64) < total;
    (items, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(state: &str) -> Value {
        json!({
            "complaint_id": "200201820200101080076610000", "complaint_time": "2026-12-01T10:00:00+08:00",
            "complaint_detail": "没有收到", "complaint_state": state, "problem_type": "REFUND",
            "payer_phone": "c2VjcmV0", "apply_refund_amount": 8888, "complaint_full_refunded": false,
            "complaint_order_info": [{"transaction_id": "4200000001", "out_trade_no": "A1B2C3", "amount": 8888}]
        })
    }

    #[test]
    fn a_detail_reads_as_a_case() {
        let r = detail_report(&detail("PENDING"), "GET", 5).unwrap();
        assert_eq!(
            (r.case_id.as_str(), r.status.as_str(), r.kind),
            ("200201820200101080076610000", "PENDING", CaseKind::Complaint)
        );
        assert_eq!(r.amount.map(|m| (m.amount_minor(), m.currency())), Some((8888, Currency::CNY)));
        assert_eq!((r.attempt_ref.as_deref(), r.gateway_txn_id.as_deref()), (Some("A1B2C3"), Some("4200000001")));
        assert_eq!((r.reason.as_deref(), r.opened_at, r.as_of), (Some("REFUND"), 1_796_090_400_000, 5));
        assert!(!r.body.contains("payer_phone") && r.body.contains("没有收到"), "{}", r.body);
        let mut no_time = detail("PENDING");
        no_time["complaint_time"] = json!("yesterday");
        assert!(detail_report(&no_time, "GET", 5).is_err());
        assert!(detail_report(&json!({"complaint_id": "1"}), "GET", 5).is_err());
    }

    #[test]
    fn a_notification_is_a_notice_to_fetch() {
        let resource = json!({"complaint_id": "2002018", "action_type": "CREATE_COMPLAINT"});
        let r = notice_report("EV-1", &resource, 7).unwrap();
        assert_eq!(
            (r.status.as_str(), r.message_kind.as_str(), r.message_id.as_deref()),
            ("", "CREATE_COMPLAINT", Some("EV-1"))
        );
        assert!(notice_report("EV-1", &json!({"complaint_id": "../x"}), 7).is_err());
        assert!(is_complaint_event("COMPLAINT.STATE_CHANGE") && !is_complaint_event("TRANSACTION.SUCCESS"));
    }

    #[test]
    fn the_list_covers_thirty_days_in_pages() {
        let now = 1_796_090_400_000; // 2026-12-01T10:00+08:00
        assert_eq!(
            list_path(0, now, 50),
            "/v3/merchant-service/complaints-v2?limit=50&offset=50&begin_date=2026-11-02&end_date=2026-12-01"
        );
        assert!(list_path(now - 86_400_000, now, 0).contains("begin_date=2026-11-30&"));
        let page = json!({"data": [detail("PENDING")], "limit": 50, "offset": 0, "total_count": 2});
        assert!(list_page(&page, 0).1);
        assert!(!list_page(&page, 1).1);
        assert_eq!(complaint_path("../1", ""), None);
        assert!(response_body("1900000001", "", &[]).is_err());
        let body = response_body("1900000001", "好", &[]).unwrap();
        assert_eq!((body["response_content"].as_str(), body.get("response_images")), (Some("好"), None));
        let body = response_body("1900000001", "好", &["M1".to_string()]).unwrap();
        assert_eq!(body["response_images"], json!(["M1"]));
    }

    #[test]
    fn an_upload_is_signed_over_its_meta_and_sent_as_multipart() {
        use crate::domain::case::ImageKind;
        let image = CaseImage { kind: ImageKind::Png, bytes: b"\x89PNG\r\n\x1a\nkassa-ab".to_vec() };
        let meta = image_meta(&image);
        let m: Value = serde_json::from_str(&meta).unwrap();
        let digest = hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &image.bytes));
        assert_eq!(m["sha256"], json!(digest));
        assert!(m["filename"].as_str().unwrap().ends_with(".png") && m["filename"].as_str().unwrap().len() <= 128);
        // The image holds `kassa-ab`: the boundary grows until it is not in the image.
        let boundary = upload_boundary("ab", &meta, &image);
        assert_eq!(boundary, "kassa-abab");
        let body = upload_body(&boundary, &meta, &image);
        let text = String::from_utf8_lossy(&body);
        assert!(text.starts_with("--kassa-abab\r\nContent-Disposition: form-data; name=\"meta\""), "{text}");
        assert!(text.contains(&format!("\r\n\r\n{meta}\r\n--kassa-abab\r\n")), "{text}");
        assert!(text.contains("name=\"file\"; filename=\"") && text.contains("Content-Type: image/png"), "{text}");
        assert!(body.ends_with(b"\x89PNG\r\n\x1a\nkassa-ab\r\n--kassa-abab--\r\n"));
        assert_eq!(media_id(&json!({"media_id": "MEDIA-1"})), Ok("MEDIA-1".to_string()));
        assert!(media_id(&json!({})).is_err() && media_id(&json!({"media_id": "a b"})).is_err());
    }

    #[test]
    fn a_refund_request_is_answered_in_wechats_words() {
        let approve = refund_progress_body(&RefundVerdict::Approve { launch_refund_days: 3 }, &[]);
        assert_eq!(approve, json!({"action": "APPROVE", "launch_refund_day": 3}));
        let verdict = RefundVerdict::Reject { reason: "已发货".into(), remark: Some("见物流".into()) };
        assert_eq!(
            refund_progress_body(&verdict, &["M1".to_string()]),
            json!({"action": "REJECT", "reject_reason": "已发货", "reject_media_list": ["M1"], "remark": "见物流"})
        );
        let bare = RefundVerdict::Reject { reason: "x".into(), remark: None };
        assert_eq!(refund_progress_body(&bare, &[]), json!({"action": "REJECT", "reject_reason": "x"}));
        assert_eq!((registration_method(None), registration_method(Some("https://a"))), ("POST", "PUT"));
        assert_eq!(registered_url(&json!({"mchid": "1", "url": "https://a/n"})).as_deref(), Some("https://a/n"));
        assert_eq!(registered_url(&json!({"mchid": "1"})), None);
    }
}

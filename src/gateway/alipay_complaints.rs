//! Alipay trade complaints (交易投诉) as kassa's cases (docs/gateways/alipay.md §6): the push
//! (`msg_method=alipay.merchant.tradecomplain.changed`) names a complaint and nothing more, so the
//! complaint is fetched (`alipay.merchant.tradecomplain.query`); a complaint, one of the list's
//! items (`…batchquery`) or an action's answer reads as a case report here. Pure: the requests are
//! sent by the adapter. The complainant's phone number (`phone_no`) is dropped before anything is
//! kept. An image for a reply is uploaded first (`alipay.merchant.image.upload`, multipart) and
//! named in the reply by the id Alipay gives it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::format_at_offset;
use super::multipart::{self, Part};
use crate::clock::Millis;
use crate::domain::case::{
    self, ALIPAY_IMAGES_MAX, CaseImage, CaseKind, CaseReport, Completion, ImageKind, REPLY_CHARS_MAX, reply_fits,
};
use crate::domain::ids::is_plain_id;
use crate::domain::{Currency, Money};

/// The gateway's name, as the cases name their provider.
pub const PROVIDER: &str = "alipay";
/// The push's `msg_method`.
pub const CHANGED: &str = "alipay.merchant.tradecomplain.changed";
/// One complaint, as it stands.
pub const QUERY: &str = "alipay.merchant.tradecomplain.query";
/// The complaints made within a window, page by page.
pub const BATCHQUERY: &str = "alipay.merchant.tradecomplain.batchquery";
/// A message to the buyer in the complaint's thread.
pub const REPLY: &str = "alipay.merchant.tradecomplain.reply.submit";
/// The merchant's processing result: how the merchant handles the complaint.
pub const FEEDBACK: &str = "alipay.merchant.tradecomplain.feedback.submit";
/// An image uploaded for a reply: multipart/form-data, its answer the image's `image_id`.
pub const IMAGE_UPLOAD: &str = "alipay.merchant.image.upload";
/// The upload's text parameter besides the common ones (signed with them): the image's kind.
pub const IMAGE_TYPE: &str = "image_type";
/// The upload's file part (never signed).
pub const IMAGE_CONTENT: &str = "image_content";
/// The longest image id kassa takes from Alipay (kassa's bound: Alipay's ids are short).
pub const IMAGE_ID_LEN_MAX: usize = 128;
/// Complaints asked for per page of the list (Alipay's most).
pub const COMPLAINT_PAGE: u64 = 20;
/// Pages of the list read at most in one poll.
pub const COMPLAINT_PAGES_MAX: u64 = 50;
/// The longest window the list takes is a year; kassa asks for a day less, so that no reading of
/// "a year" (leap days, the two ends counted) refuses it.
pub const LIST_WINDOW_MS: Millis = 364 * 86_400_000;
/// Fields of a complaint never kept: the complainant's phone number.
const NOT_KEPT: &[&str] = &["phone_no"];

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A verified push's fields (`msg_method` [`CHANGED`]; `biz_content` holds `complain_event_id`)
/// as a notice: a report without a status, which says the complaint is to be fetched.
pub fn notice_report(fields: &BTreeMap<String, String>, now: Millis) -> Result<CaseReport, String> {
    let get = |k: &str| fields.get(k).map(String::as_str).unwrap_or_default();
    let notify_id = get("notify_id");
    if !is_plain_id(notify_id) {
        return Err("complaint push without a plain notify_id".into());
    }
    let biz: Value =
        serde_json::from_str(get("biz_content")).map_err(|_| "complaint push: biz_content is not JSON".to_string())?;
    let id = text(&biz, "complain_event_id");
    if !is_plain_id(id) {
        return Err("complaint push without a complain_event_id".into());
    }
    Ok(CaseReport::notice(PROVIDER, id, notify_id, CHANGED.to_string(), biz.to_string(), now))
}

/// A complaint (the query's answer, or an item of the list) as a report of `now`.
pub fn detail_report(detail: &Value, message_kind: &str, now: Millis) -> Result<CaseReport, String> {
    let id = text(detail, "complain_event_id");
    if !is_plain_id(id) {
        return Err("complaint without a complain_event_id".into());
    }
    let status = text(detail, "status");
    if status.is_empty() {
        return Err(format!("complaint {id} without a status"));
    }
    let opened_at = parse_time(text(detail, "gmt_create"))
        .ok_or_else(|| format!("complaint {id}: gmt_create is not a yyyy-MM-dd HH:mm:ss time"))?;
    // The list's items carry no amount; a query's `trade_amount` that does not read as yuan is
    // an answer kassa does not understand.
    let amount = match text(detail, "trade_amount") {
        "" => None,
        yuan => Some(
            Money::parse_decimal(yuan, Currency::CNY)
                .ok_or_else(|| format!("complaint {id}: trade_amount is not an amount in yuan"))?,
        ),
    };
    let plain = |key: &str| Some(text(detail, key).to_string()).filter(|v| is_plain_id(v));
    let reason = [text(detail, "complain_reason"), text(detail, "leaf_category_name")]
        .into_iter()
        .find(|r| !r.is_empty())
        .map(str::to_string);
    let mut kept = detail.clone();
    if let Some(fields) = kept.as_object_mut() {
        for field in NOT_KEPT {
            fields.remove(*field);
        }
        // An answer's envelope fields say nothing about the complaint.
        for field in ["code", "msg"] {
            fields.remove(field);
        }
    }
    Ok(CaseReport {
        provider: PROVIDER,
        case_id: id.to_string(),
        kind: CaseKind::Complaint,
        status: status.to_string(),
        reason,
        amount,
        attempt_ref: plain("merchant_order_no"),
        gateway_txn_id: plain("trade_no"),
        opened_at,
        due_by: None,
        as_of: now,
        message_id: None,
        message_kind: message_kind.to_string(),
        body: kept.to_string(),
    })
}

/// A Beijing time as Alipay writes it (`yyyy-MM-dd HH:mm:ss`).
pub fn parse_time(text: &str) -> Option<Millis> {
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    let at = time::PrimitiveDateTime::parse(text, &format).ok()?.assume_offset(time::macros::offset!(+8));
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

/// The `biz_content` of one complaint's query (or an action naming it); `None` for an id that is
/// not Alipay's kind of id.
pub fn complaint_biz(case_id: &str) -> Option<Value> {
    is_plain_id(case_id).then(|| json!({"complain_event_id": case_id}))
}

/// The list's page `page_num` (from 1) of the complaints made from `since` (or a year before
/// `now`, when later) to `now`.
pub fn list_biz(since: Millis, now: Millis, page_num: u64) -> Value {
    let begin = since.max(now.saturating_sub(LIST_WINDOW_MS));
    json!({
        "begin_time": format_at_offset(begin, 8, false),
        "end_time": format_at_offset(now, 8, false),
        "page_size": COMPLAINT_PAGE,
        "page_num": page_num,
    })
}

/// A page of the list: its complaints, and whether another page follows (by `total_page_num`,
/// else by `total_num`).
pub fn list_page(node: &Value, page_num: u64) -> (Vec<Value>, bool) {
    let items = node.get("trade_complain_infos").and_then(Value::as_array).cloned().unwrap_or_default();
    let number = |key: &str| node.get(key).and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()));
    let more = !items.is_empty()
        && match (number("total_page_num"), number("total_num")) {
            (Some(pages), _) => page_num < pages,
            (None, Some(total)) => page_num.saturating_mul(COMPLAINT_PAGE) < total,
            (None, None) => items.len() as u64 == COMPLAINT_PAGE,
        };
    (items, more)
}

/// The `biz_content` of a reply in the complaint's thread (1-200 characters, as the desk allows),
/// with the ids of the images uploaded for it (`reply_images`, joined by commas), when there are
/// any.
pub fn reply_biz(case_id: &str, reply: &str, image_ids: &[String]) -> Result<Value, String> {
    if !reply_fits(reply) {
        return Err(format!("a reply is 1-{REPLY_CHARS_MAX} characters"));
    }
    if image_ids.len() > ALIPAY_IMAGES_MAX {
        return Err(format!("at most {ALIPAY_IMAGES_MAX} images"));
    }
    if !image_ids.iter().all(|id| plain_image_id(id)) {
        return Err("an image id is not one Alipay gave".into());
    }
    let mut biz = complaint_biz(case_id).ok_or("not an Alipay complaint id")?;
    biz["reply_content"] = json!(reply);
    if !image_ids.is_empty() {
        biz["reply_images"] = json!(image_ids.join(","));
    }
    Ok(biz)
}

/// An image id kassa passes on: 1-[`IMAGE_ID_LEN_MAX`] characters, no comma (the list's
/// separator), space or control character.
fn plain_image_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= IMAGE_ID_LEN_MAX
        && !id.chars().any(|c| c == ',' || c.is_whitespace() || c.is_control())
}

/// The upload's `image_type` for an image of `kind`; `None` for a kind Alipay does not take (BMP).
pub fn image_type(kind: ImageKind) -> Option<&'static str> {
    match kind {
        ImageKind::Jpeg => Some("jpg"),
        ImageKind::Png => Some("png"),
        ImageKind::Bmp => None,
    }
}

/// An upload as it is sent, the way Alipay's SDKs send one: the common parameters and `sign` in
/// the gateway URL's query, the text parameters ([`IMAGE_TYPE`]) and the image ([`IMAGE_CONTENT`])
/// in a multipart/form-data body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub query: Vec<(String, String)>,
    pub content_type: String,
    pub body: Vec<u8>,
}

/// The upload of `image` from its `signed` parameters (the common ones, [`IMAGE_TYPE`] and the
/// `sign` over all of them), under a boundary grown from `seed` (random hex). The file part is
/// named by the image's SHA-256 and kind.
pub fn upload_request(mut signed: BTreeMap<String, String>, image: &CaseImage, seed: &str) -> Upload {
    let image_type = signed.remove(IMAGE_TYPE).unwrap_or_default();
    let digest = hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &image.bytes));
    let filename = format!("{}.{}", &digest[..32], image.kind.extension());
    let parts = [
        Part::text(IMAGE_TYPE, &image_type),
        Part::file(IMAGE_CONTENT, &filename, image.kind.content_type(), &image.bytes),
    ];
    let boundary = multipart::boundary(seed, &parts);
    Upload {
        query: signed.into_iter().collect(),
        content_type: multipart::content_type(&boundary),
        body: multipart::body(&boundary, &parts),
    }
}

/// The image id of an upload's answer.
pub fn image_id(answer: &Value) -> Result<String, String> {
    let id = text(answer, "image_id");
    if !plain_image_id(id) {
        return Err("the upload's answer names no usable image_id".into());
    }
    Ok(id.to_string())
}

/// The `biz_content` of the merchant's processing result: the feedback code and text the domain
/// chooses for `completion`.
pub fn feedback_biz(case_id: &str, completion: Completion) -> Option<Value> {
    let (code, content) = case::alipay_feedback(completion);
    let mut biz = complaint_biz(case_id)?;
    biz["feedback_code"] = json!(code);
    biz["feedback_content"] = json!(content);
    Some(biz)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complaint(status: &str) -> Value {
        json!({
            "code": "10000", "msg": "Success",
            "complain_event_id": "2020092300102000000001459758", "status": status,
            "trade_no": "2026113022001000000108888", "merchant_order_no": "A1B2C3",
            "gmt_create": "2026-12-01 10:00:00", "gmt_modified": "2026-12-01 10:00:00",
            "leaf_category_name": "退款", "complain_reason": "未收到货", "content": "没有收到卡密",
            "images": [], "phone_no": "13800000000", "trade_amount": "88.88",
            "reply_detail_infos": [{"content": "请尽快处理", "gmt_create": "2026-12-01 10:00:00", "replier_role": "USER"}]
        })
    }

    #[test]
    fn a_complaint_reads_as_a_case() {
        let r = detail_report(&complaint("MERCHANT_PROCESSING"), QUERY, 5).unwrap();
        assert_eq!(
            (r.case_id.as_str(), r.status.as_str(), r.kind, r.provider),
            ("2020092300102000000001459758", "MERCHANT_PROCESSING", CaseKind::Complaint, "alipay")
        );
        assert_eq!(r.amount.map(|m| (m.amount_minor(), m.currency())), Some((8888, Currency::CNY)));
        assert_eq!(
            (r.attempt_ref.as_deref(), r.gateway_txn_id.as_deref()),
            (Some("A1B2C3"), Some("2026113022001000000108888"))
        );
        // 2026-12-01 10:00 in Beijing is 02:00 UTC.
        assert_eq!((r.reason.as_deref(), r.opened_at, r.as_of), (Some("未收到货"), 1_796_090_400_000, 5));
        assert!(!r.body.contains("phone_no") && !r.body.contains("13800000000"), "{}", r.body);
        assert!(r.body.contains("没有收到卡密") && !r.body.contains("\"code\""), "{}", r.body);
        // A list item has no amount; an unreadable amount or time is refused, not guessed.
        let mut item = complaint("FINISHED");
        item.as_object_mut().unwrap().remove("trade_amount");
        assert_eq!(detail_report(&item, BATCHQUERY, 5).unwrap().amount, None);
        for (field, bad) in [("trade_amount", "88.888"), ("trade_amount", "8e1"), ("gmt_create", "2026-12-01")] {
            let mut c = complaint("FINISHED");
            c[field] = json!(bad);
            assert!(detail_report(&c, QUERY, 5).is_err(), "{field} {bad}");
        }
        assert!(
            detail_report(&json!({"complain_event_id": "1", "gmt_create": "2026-12-01 10:00:00"}), QUERY, 5).is_err()
        );
        assert!(detail_report(&json!({"complain_event_id": "../1", "status": "FINISHED"}), QUERY, 5).is_err());
    }

    #[test]
    fn a_push_is_a_notice_to_fetch() {
        let mut fields: BTreeMap<String, String> = [
            ("notify_id", "d275fec564e62af6bedbcee73f3f05fi5x"),
            ("msg_method", CHANGED),
            ("biz_content", r#"{"complain_event_id":"2020092300102000000001459758"}"#),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let r = notice_report(&fields, 7).unwrap();
        assert!(case::is_notice(&r));
        assert_eq!(
            (r.case_id.as_str(), r.message_id.as_deref(), r.message_kind.as_str()),
            ("2020092300102000000001459758", Some("d275fec564e62af6bedbcee73f3f05fi5x"), CHANGED)
        );
        fields.insert("biz_content".into(), r#"{"complain_event_id":"a b"}"#.into());
        assert!(notice_report(&fields, 7).is_err());
        fields.insert("biz_content".into(), "not json".into());
        assert!(notice_report(&fields, 7).is_err());
        fields.remove("notify_id");
        assert!(notice_report(&fields, 7).is_err());
    }

    #[test]
    fn the_list_covers_a_year_at_most_in_pages_of_twenty() {
        let now = 1_796_090_400_000; // 2026-12-01 10:00 in Beijing
        let biz = list_biz(0, now, 2);
        assert_eq!(
            biz,
            json!({"begin_time": "2025-12-02 10:00:00", "end_time": "2026-12-01 10:00:00", "page_size": 20, "page_num": 2})
        );
        assert_eq!(list_biz(now - 3_600_000, now, 1)["begin_time"], "2026-12-01 09:00:00");
        let page = |n: usize, extra: Value| {
            let mut p = json!({"trade_complain_infos": vec![complaint("FINISHED"); n]});
            p.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            p
        };
        assert!(list_page(&page(20, json!({"total_page_num": 2, "total_num": 25})), 1).1);
        assert!(!list_page(&page(5, json!({"total_page_num": 2, "total_num": 25})), 2).1);
        assert!(list_page(&page(20, json!({"total_num": "25"})), 1).1);
        assert!(!list_page(&page(20, json!({"total_num": 20})), 1).1);
        assert!(list_page(&page(20, json!({})), 1).1);
        assert_eq!(list_page(&json!({}), 1), (Vec::new(), false));
    }

    #[test]
    fn replies_and_feedback_are_checked_before_they_are_sent() {
        assert!(reply_biz("2020092300102", "", &[]).is_err());
        assert!(reply_biz("2020092300102", &"字".repeat(201), &[]).is_err());
        assert!(reply_biz("../x", "好", &[]).is_err());
        let plain = reply_biz("2020092300102", "好", &[]).unwrap();
        assert_eq!((plain["reply_content"].as_str(), plain.get("reply_images")), (Some("好"), None));
        let ids = vec!["img-1".to_string(), "img-2".to_string()];
        assert_eq!(reply_biz("2020092300102", "好", &ids).unwrap()["reply_images"], "img-1,img-2");
        for bad in [vec!["a,b".to_string()], vec![String::new()], vec!["img".to_string(); ALIPAY_IMAGES_MAX + 1]] {
            assert!(reply_biz("2020092300102", "好", &bad).is_err(), "{bad:?}");
        }
        let biz = feedback_biz("2020092300102", Completion { refunded: true }).unwrap();
        assert_eq!(
            (biz["complain_event_id"].as_str(), biz["feedback_code"].as_str()),
            (Some("2020092300102"), Some("02"))
        );
        assert_eq!(feedback_biz("2020092300102", Completion { refunded: false }).unwrap()["feedback_code"], "05");
        assert_eq!(feedback_biz("a/b", Completion { refunded: false }), None);
    }

    #[test]
    fn an_upload_signs_its_text_and_carries_the_image_as_a_file() {
        let image = CaseImage { kind: ImageKind::Png, bytes: b"\x89PNG\r\n\x1a\nkassa-ab".to_vec() };
        let signed: BTreeMap<String, String> =
            [("app_id", "2021000000000001"), ("method", IMAGE_UPLOAD), (IMAGE_TYPE, "png"), ("sign", "c2ln")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let upload = upload_request(signed, &image, "ab");
        let keys: Vec<&str> = upload.query.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["app_id", "method", "sign"], "image_type goes in the body");
        assert_eq!(upload.content_type, "multipart/form-data; boundary=kassa-abab");
        let body = String::from_utf8_lossy(&upload.body);
        assert!(body.contains("name=\"image_type\"\r\n\r\npng\r\n"), "{body}");
        assert!(body.contains("name=\"image_content\"; filename=\"") && body.contains(".png\"\r\n"), "{body}");
        assert!(body.contains("Content-Type: image/png\r\n\r\n\u{fffd}PNG"), "{body}");
        assert!(upload.body.ends_with(b"kassa-ab\r\n--kassa-abab--\r\n"));
        assert_eq!((image_type(ImageKind::Jpeg), image_type(ImageKind::Bmp)), (Some("jpg"), None));
        assert_eq!(image_id(&json!({"code": "10000", "image_id": "6c2f1b"})), Ok("6c2f1b".to_string()));
        for bad in [json!({}), json!({"image_id": "a,b"}), json!({"image_id": "x".repeat(IMAGE_ID_LEN_MAX + 1)})] {
            assert!(image_id(&bad).is_err(), "{bad}");
        }
    }
}

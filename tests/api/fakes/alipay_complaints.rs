//! Alipay's trade complaints (交易投诉) on the fake's gateway, checked as Alipay documents them:
//! the list's page size (1-20, pages from 1) and window (at most a year, `yyyy-MM-dd HH:mm:ss`
//! Beijing times), a reply of 1-200 characters while the merchant may still write, a processing
//! result with one of Alipay's feedback codes. A processing result moves the complaint from
//! `MERCHANT_PROCESSING` to `MERCHANT_FEEDBACKED`; a reply leaves its status. The push names the
//! complaint only and is signed like every Alipay notification. An image is uploaded as
//! multipart/form-data, the common parameters in the query, signed with `image_type` and never
//! over the file (a JPEG or PNG of at most 5 MB, as `image_type` says); a reply names uploaded
//! images only (`reply_images`, ids joined by commas).

use super::alipay::{alipay_answer, alipay_bad_signature, alipay_content, alipay_error, alipay_signed, yuan};
use super::*;

/// The upload's method, and Alipay's bound on its image (5 MB).
const IMAGE_UPLOAD: &str = "alipay.merchant.image.upload";
const IMAGE_BYTES_MAX: usize = 5 * 1024 * 1024;

/// `alipay.merchant.image.upload`: the text parameters (the query's and the body's, the file
/// part aside) must verify; the file `image_content` must be there, non-empty, at most 5 MB, and
/// of the kind `image_type` (jpg, jpeg or png) says. Its id is answered and kept.
pub(super) async fn upload(ledger: &Shared, req: axum::extract::Request) -> Response {
    use axum::extract::FromRequest as _;
    let query = req.uri().query().unwrap_or_default().to_string();
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(&query).unwrap_or_default();
    let mut params: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in pairs {
        if params.insert(k, v).is_some() {
            return (StatusCode::BAD_REQUEST, "repeated parameter").into_response();
        }
    }
    let Ok(mut form) = axum::extract::Multipart::from_request(req, &()).await else {
        return (StatusCode::BAD_REQUEST, "not multipart/form-data").into_response();
    };
    let mut file: Option<Vec<u8>> = None;
    while let Ok(Some(field)) = form.next_field().await {
        let name = field.name().unwrap_or_default().to_string();
        if field.file_name().is_some() {
            if name == "image_content" {
                file = field.bytes().await.ok().map(|b| b.to_vec());
            }
            continue;
        }
        let value = field.text().await.unwrap_or_default();
        if params.insert(name, value).is_some() {
            return (StatusCode::BAD_REQUEST, "repeated parameter").into_response();
        }
    }
    let method = params.get("method").cloned().unwrap_or_default();
    if !alipay_signed(&params) {
        return alipay_bad_signature(ledger, &method);
    }
    if method != IMAGE_UPLOAD {
        return alipay_answer(&method, json!({"code": "40004", "sub_code": "isv.invalid-method"}));
    }
    let mut l = lock(ledger);
    l.calls.push(method.clone());
    if l.alipay_upload_refusals > 0 {
        l.alipay_upload_refusals -= 1;
        return alipay_answer(&method, alipay_error("isv.INVALID_PARAMETER"));
    }
    let file = file.unwrap_or_default();
    let of_its_type = match params.get("image_type").map(|t| t.to_ascii_lowercase()).as_deref() {
        Some("jpg" | "jpeg") => file.starts_with(&[0xFF, 0xD8, 0xFF]),
        Some("png") => file.starts_with(b"\x89PNG\r\n\x1a\n"),
        _ => false,
    };
    if !of_its_type || file.len() > IMAGE_BYTES_MAX {
        return alipay_answer(&method, alipay_error("isv.INVALID_PARAMETER"));
    }
    let image_id = format!("ALIIMG-{}", l.alipay_images.len() + 1);
    l.alipay_images.push((image_id.clone(), file));
    alipay_answer(&method, success(json!({"image_id": image_id})))
}

/// Whether a reply's `reply_images` (absent: none) names images uploaded, joined by commas.
fn known_images(l: &Ledger, ids: &Value) -> bool {
    match ids {
        Value::Null => true,
        Value::String(ids) => ids.split(',').all(|id| l.alipay_images.iter().any(|(known, _)| known == id)),
        _ => false,
    }
}

/// The feedback codes `feedback.submit` takes.
const FEEDBACK_CODES: [&str; 6] = ["00", "02", "03", "04", "05", "06"];
/// The statuses in which the merchant may still write in the thread.
const WRITABLE: [&str; 2] = ["MERCHANT_PROCESSING", "MERCHANT_FEEDBACKED"];

fn success(extra: Value) -> Value {
    let mut node = json!({"code": "10000", "msg": "Success"});
    if let (Some(n), Some(e)) = (node.as_object_mut(), extra.as_object()) {
        n.extend(e.clone());
    }
    node
}

fn beijing(text: &str) -> Option<time::PrimitiveDateTime> {
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    time::PrimitiveDateTime::parse(text, &format).ok()
}

fn chars_within(text: &str, max: usize) -> bool {
    (1..=max).contains(&text.chars().count())
}

/// The answer to a complaint method; `None` for any other method.
pub(super) fn answer(l: &mut Ledger, method: &str, biz: &Value) -> Option<Response> {
    let id = biz["complain_event_id"].as_str().unwrap_or_default().to_string();
    let node = match method {
        "alipay.merchant.tradecomplain.query" => {
            if l.alipay_query_failures > 0 {
                l.alipay_query_failures -= 1;
                json!({"code": "20000", "msg": "Service Currently Unavailable", "sub_code": "isp.unknow-error"})
            } else {
                match l.alipay_complaints.iter().find(|c| c["complain_event_id"] == id.as_str()) {
                    Some(c) => success(c.clone()),
                    None => alipay_error("isv.INVALID_PARAMETER"),
                }
            }
        }
        "alipay.merchant.tradecomplain.batchquery" => list(l, biz),
        "alipay.merchant.tradecomplain.reply.submit" => {
            let text = biz["reply_content"].as_str().unwrap_or_default().to_string();
            if !known_images(l, &biz["reply_images"]) {
                return Some(alipay_answer(method, alipay_error("isv.INVALID_PARAMETER")));
            }
            let Some(c) = l.alipay_complaints.iter_mut().find(|c| c["complain_event_id"] == id.as_str()) else {
                return Some(alipay_answer(method, alipay_error("isv.INVALID_PARAMETER")));
            };
            if !chars_within(&text, 200) || !WRITABLE.iter().any(|s| c["status"] == *s) {
                return Some(alipay_answer(method, alipay_error("isv.INVALID_PARAMETER")));
            }
            let at = c["gmt_modified"].clone();
            if let Some(thread) = c["reply_detail_infos"].as_array_mut() {
                thread.push(json!({"content": text, "gmt_create": at, "replier_role": "MERCHANT"}));
            }
            l.alipay_complaint_replies.push((id, text));
            l.alipay_reply_bodies.push(biz.clone());
            success(json!({}))
        }
        "alipay.merchant.tradecomplain.feedback.submit" => {
            let code = biz["feedback_code"].as_str().unwrap_or_default();
            let content = biz["feedback_content"].as_str().unwrap_or_default();
            let Some(c) = l.alipay_complaints.iter_mut().find(|c| c["complain_event_id"] == id.as_str()) else {
                return Some(alipay_answer(method, alipay_error("isv.INVALID_PARAMETER")));
            };
            if !FEEDBACK_CODES.contains(&code) || !chars_within(content, 200) || c["status"] != "MERCHANT_PROCESSING" {
                return Some(alipay_answer(method, alipay_error("isv.INVALID_PARAMETER")));
            }
            c["status"] = json!("MERCHANT_FEEDBACKED");
            l.alipay_feedbacks.push(biz.clone());
            success(json!({}))
        }
        _ => return None,
    };
    Some(alipay_answer(method, node))
}

/// `batchquery`: the complaints made within the window, a page of them; a list item carries no
/// amount, phone number or thread.
fn list(l: &mut Ledger, biz: &Value) -> Value {
    let number = |k: &str| biz[k].as_u64().and_then(|n| usize::try_from(n).ok());
    let window = (
        beijing(biz["begin_time"].as_str().unwrap_or_default()),
        beijing(biz["end_time"].as_str().unwrap_or_default()),
    );
    let (Some(size), Some(page), (Some(begin), Some(end))) = (number("page_size"), number("page_num"), window) else {
        return alipay_error("isv.INVALID_PARAMETER");
    };
    if !(1..=20).contains(&size) || page < 1 || end < begin || (end - begin).whole_days() > 365 {
        return alipay_error("isv.INVALID_PARAMETER");
    }
    l.alipay_complaint_lists.push(biz.clone());
    let within: Vec<Value> = l
        .alipay_complaints
        .iter()
        .filter(|c| beijing(c["gmt_create"].as_str().unwrap_or_default()).is_some_and(|at| begin <= at && at <= end))
        .map(|c| {
            let mut item = c.clone();
            if let Some(fields) = item.as_object_mut() {
                for field in ["trade_amount", "phone_no", "reply_detail_infos"] {
                    fields.remove(field);
                }
            }
            item
        })
        .collect();
    let items: Vec<Value> = within.iter().skip((page - 1) * size).take(size).cloned().collect();
    success(json!({
        "page_num": page, "page_size": size, "total_num": within.len(),
        "total_page_num": within.len().div_ceil(size), "trade_complain_infos": items,
    }))
}

impl FakeAlipay {
    /// The buyer complains about the paid trade `out_trade_no` (or, with `None`, about a trade
    /// that is not kassa's), at `at_s` (seconds since the epoch); nothing is pushed. The complaint.
    pub fn open_complaint(&self, out_trade_no: Option<&str>, at_s: i64) -> Value {
        let mut l = lock(&self.ledger);
        let (order, trade_no, amount) = match out_trade_no {
            Some(no) => {
                let t = l.trades.get(no).cloned().expect("a trade");
                (no.to_string(), t.txn_id, t.amount_minor)
            }
            None => ("NOT-KASSAS-1".to_string(), "2026113022001999999900001000".to_string(), 1_000),
        };
        let n = l.alipay_complaints.len() + 1;
        let at = time::OffsetDateTime::from_unix_timestamp(at_s)
            .expect("time")
            .to_offset(time::UtcOffset::from_hms(8, 0, 0).expect("offset"))
            .format(&time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]"))
            .expect("format");
        let c = json!({
            "complain_event_id": format!("20261201001020000000{n:08}"),
            "status": "MERCHANT_PROCESSING",
            "trade_no": trade_no,
            "merchant_order_no": order,
            "gmt_create": at, "gmt_modified": at,
            "leaf_category_name": "退款", "complain_reason": "商品未收到", "content": "付款后没有收到卡密",
            "images": [], "phone_no": "13800138000", "trade_amount": yuan(amount),
            "target_id": ALIPAY_APP_ID, "target_type": "APPID",
            "reply_detail_infos": [{"content": "付款后没有收到卡密", "gmt_create": at, "replier_role": "USER"}],
        });
        l.alipay_complaints.push(c.clone());
        c
    }

    /// The complaint `id` as the fake has it.
    pub fn complaint(&self, id: &str) -> Value {
        lock(&self.ledger)
            .alipay_complaints
            .iter()
            .find(|c| c["complain_event_id"] == id)
            .cloned()
            .expect("a complaint")
    }

    /// Sets a complaint's `status` (as the buyer or Alipay moves it).
    pub fn set_complaint_status(&self, id: &str, status: &str) {
        let mut l = lock(&self.ledger);
        let c = l.alipay_complaints.iter_mut().find(|c| c["complain_event_id"] == id).expect("a complaint");
        c["status"] = json!(status);
    }

    /// Where kassa takes Alipay's notifications (the notify URL its trades named).
    pub fn notify_url(&self) -> String {
        lock(&self.ledger).trades.values().map(|t| t.notify_url.clone()).find(|u| !u.is_empty()).expect("a trade")
    }

    /// The signed push `alipay.merchant.tradecomplain.changed` of the complaint `id`, as Alipay
    /// sends it to the app's gateway: the form's fields, then the form.
    pub fn complaint_push(&self, id: &str) -> (BTreeMap<String, String>, String) {
        let mut p: BTreeMap<String, String> = BTreeMap::new();
        let notify_id = format!("nid{}", uuid::Uuid::now_v7().simple());
        let at_ms = (now_s() * 1000).to_string();
        for (k, v) in [
            ("app_id", ALIPAY_APP_ID),
            ("charset", "UTF-8"),
            ("msg_method", "alipay.merchant.tradecomplain.changed"),
            ("notify_id", &notify_id),
            ("utc_timestamp", &at_ms),
            ("version", "1.1"),
            ("sign_type", "RSA2"),
        ] {
            p.insert(k.to_string(), v.to_string());
        }
        p.insert("biz_content".to_string(), json!({"complain_event_id": id}).to_string());
        let sign = rsa_sign(&provider_key(), alipay_content(&p, true).as_bytes());
        p.insert("sign".to_string(), sign);
        let form = serde_urlencoded::to_string(&p).expect("form");
        (p, form)
    }

    /// Pushes the complaint `id` to kassa: its status and answer.
    pub async fn push_complaint(&self, id: &str) -> (u16, String) {
        let (_, form) = self.complaint_push(id);
        self.deliver(&form).await
    }

    /// Posts a form to kassa's notify URL: its status and answer.
    pub async fn deliver(&self, form: &str) -> (u16, String) {
        post_form(&self.notify_url(), form).await
    }
}

//! Alipay trade complaints on the desk, against the fake Alipay, on both databases: a complaint
//! pushed, fetched and linked to its order; replied to, refunded through the desk and given the
//! merchant's processing result; closed when the buyer confirms; a push repeated, one whose
//! complaint cannot be fetched yet, one about a trade that is not kassa's and one under a bad
//! signature; a complaint found only by the backstop poll, in pages of 20; a reply with images
//! uploaded first (a BMP refused before any upload, an upload Alipay refuses sending no reply).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kassa::clock::{Clock, rfc3339};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, Shop, s};
use crate::on_both;

const CHANGED: &str = "alipay.merchant.tradecomplain.changed";

async fn world(backend: Backend) -> Shop {
    Shop::start(backend, Opts { manual_clock: true, ..Default::default() }, 200).await
}

fn now_ms(w: &Shop) -> i64 {
    w.t.clock.as_ref().expect("a manual clock").now_ms()
}

async fn all_cases(w: &Shop) -> Vec<Value> {
    w.t.admin_get("/api/v1/admin/cases?open=false&limit=200").await["items"].as_array().expect("items").clone()
}

async fn complaint_topics(w: &Shop, order_no: &str) -> Vec<String> {
    let rows = kassa::store::sql::query(
        "SELECT topic FROM outbox WHERE order_no = $1 AND topic LIKE 'complaint.%' ORDER BY created_at, id",
    )
    .bind(order_no)
    .fetch_all(w.t.app.state.db.read_pool())
    .await
    .unwrap();
    rows.iter().map(|r| r.get::<String>("topic")).collect()
}

fn counts(detail: &Value) -> (usize, usize) {
    (detail["messages"].as_array().unwrap().len(), detail["events"].as_array().unwrap().len())
}

const SUCCESS: (u16, &str) = (200, "success");

on_both!(a_pushed_complaint_is_fetched_answered_refunded_and_completed, pushed);

async fn pushed(backend: Backend) {
    let w = world(backend).await;
    let (order_no, attempt_ref) = w.paid("alipay").await;
    let trade = w.alipay.trade(&attempt_ref).unwrap();
    let at_ms = (now_ms(&w) / 1000 - 3_600) * 1000;
    let complaint = w.alipay.open_complaint(Some(&attempt_ref), at_ms / 1000);
    let cid = s(&complaint["complain_event_id"]);
    let (_, push) = w.alipay.complaint_push(&cid);
    let answer = w.alipay.deliver(&push).await;
    assert_eq!((answer.0, answer.1.as_str()), SUCCESS);

    let cases = all_cases(&w).await;
    assert_eq!(cases.len(), 1, "{cases:?}");
    let case = &cases[0];
    let id = s(&case["id"]);
    assert_eq!(
        (s(&case["provider"]), s(&case["kind"]), s(&case["provider_case_id"]), s(&case["state"])),
        ("alipay".into(), "complaint".into(), cid.clone(), "needs_response".into())
    );
    assert_eq!((s(&case["provider_status"]), s(&case["reason"])), ("MERCHANT_PROCESSING".into(), "商品未收到".into()));
    assert_eq!((case["amount_minor"].as_i64(), s(&case["currency"])), (Some(trade.amount_minor), "CNY".into()));
    assert_eq!(
        (s(&case["order_no"]), s(&case["attempt_ref"]), s(&case["gateway_txn_id"])),
        (order_no.clone(), attempt_ref.clone(), trade.txn_id.clone())
    );
    assert!(case["due_at"].is_null() && case["due_kind"].is_null(), "Alipay names no deadline: {case}");
    assert_eq!(s(&case["opened_at"]), rfc3339(at_ms));
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'case_opened'").await, 1);
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'case_unlinked'").await, 0);
    assert_eq!(complaint_topics(&w, &order_no).await, vec!["complaint.opened"]);
    let detail = w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await;
    assert_eq!(counts(&detail), (2, 1), "the complaint fetched and the push: {detail}");
    let kinds: Vec<String> = detail["messages"].as_array().unwrap().iter().map(|m| s(&m["kind"])).collect();
    assert!(kinds.contains(&CHANGED.to_string()), "{kinds:?}");
    let text = detail.to_string();
    assert!(!text.contains("phone_no") && !text.contains("13800138000"), "the phone is not kept: {detail}");

    // The same push again (Alipay's retry): nothing new.
    let answer = w.alipay.deliver(&push).await;
    assert_eq!((answer.0, answer.1.as_str()), SUCCESS);
    assert_eq!(counts(&w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await), (2, 1));

    // The operator replies in the thread: Alipay has the text; the complaint still waits.
    w.advance(60_000);
    let reply = "您好，卡密已重新发送到您的邮箱，请查收。";
    for bad in [String::new(), "  ".into(), "字".repeat(201)] {
        let (status, refused) = w.t.admin_post(&format!("/api/v1/admin/cases/{id}/reply"), json!({"text": bad})).await;
        assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_reply".into()));
    }
    let (status, replied) = w.t.admin_post(&format!("/api/v1/admin/cases/{id}/reply"), json!({"text": reply})).await;
    assert_eq!(status, StatusCode::OK, "{replied}");
    assert_eq!(w.alipay.ledger.lock().unwrap().alipay_complaint_replies, vec![(cid.clone(), reply.to_string())]);
    let thread = w.alipay.complaint(&cid)["reply_detail_infos"].as_array().unwrap().clone();
    assert_eq!((s(&thread[1]["content"]), s(&thread[1]["replier_role"])), (reply.to_string(), "MERCHANT".into()));
    assert_eq!(
        (s(&replied["state"]), s(&replied["provider_status"])),
        ("needs_response".into(), "MERCHANT_PROCESSING".into())
    );
    let operator: Vec<&Value> =
        replied["messages"].as_array().unwrap().iter().filter(|m| m["source"] == "operator").collect();
    assert_eq!((operator.len(), s(&operator[0]["kind"])), (1, "replied".into()));

    // Refunded through the desk: the order's refund at Alipay under the case's refund number.
    let (status, refund) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{id}/refund"), json!({"amount_minor": trade.amount_minor})).await;
    assert_eq!(status, StatusCode::CREATED, "{refund}");
    w.t.app.refunder.step().await.unwrap();
    assert_eq!(w.t.status(&order_no).await, "refunded");
    let refund_no = format!("case-{id}-{}", trade.amount_minor);
    assert_eq!(w.alipay.trade(&attempt_ref).unwrap().refunds.get(&refund_no), Some(&trade.amount_minor));

    // Completed: the processing result says it was refunded; Alipay waits on the buyer.
    w.advance(60_000);
    let (status, completed) = w.t.admin_post(&format!("/api/v1/admin/cases/{id}/complete"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{completed}");
    let feedbacks = w.alipay.ledger.lock().unwrap().alipay_feedbacks.clone();
    assert_eq!(feedbacks.len(), 1);
    assert_eq!((s(&feedbacks[0]["complain_event_id"]), s(&feedbacks[0]["feedback_code"])), (cid.clone(), "02".into()));
    assert_eq!(
        (s(&completed["state"]), s(&completed["provider_status"]), completed["outcome"].clone()),
        ("under_review".into(), "MERCHANT_FEEDBACKED".into(), Value::Null)
    );
    assert_eq!(complaint_topics(&w, &order_no).await, vec!["complaint.opened", "complaint.updated"]);

    // The buyer accepts it: Alipay finishes the complaint and pushes; the case closes as resolved.
    w.advance(60_000);
    w.alipay.set_complaint_status(&cid, "FINISHED");
    let answer = w.alipay.push_complaint(&cid).await;
    assert_eq!((answer.0, answer.1.as_str()), SUCCESS);
    let case = &all_cases(&w).await[0];
    assert_eq!(
        (s(&case["state"]), s(&case["outcome"]), s(&case["provider_status"])),
        ("closed".into(), "resolved".into(), "FINISHED".into())
    );
    assert_eq!(
        complaint_topics(&w, &order_no).await,
        vec!["complaint.opened", "complaint.updated", "complaint.closed"]
    );
    for action in ["reply", "complete"] {
        let (status, refused) =
            w.t.admin_post(&format!("/api/v1/admin/cases/{id}/{action}"), json!({"text": "again"})).await;
        assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::CONFLICT, "case_closed".into()), "{action}");
    }
    w.t.assert_clean().await;
}

on_both!(a_push_kassa_cannot_use_yet_is_refused_until_it_can, refused_pushes);

async fn refused_pushes(backend: Backend) {
    let w = world(backend).await;
    let (order_no, attempt_ref) = w.paid("alipay").await;
    let now_s = now_ms(&w) / 1000;

    // Alipay cannot answer the query yet: the push is not acknowledged, and nothing is kept.
    let first = w.alipay.open_complaint(Some(&attempt_ref), now_s - 600);
    let cid = s(&first["complain_event_id"]);
    w.alipay.ledger.lock().unwrap().alipay_query_failures = 1;
    let (_, push) = w.alipay.complaint_push(&cid);
    let (status, body) = w.alipay.deliver(&push).await;
    assert!(status >= 500 && body != "success", "{status} {body}");
    assert!(all_cases(&w).await.is_empty());
    // Alipay sends it again: fetched now, recorded with the push.
    let answer = w.alipay.deliver(&push).await;
    assert_eq!((answer.0, answer.1.as_str()), SUCCESS);
    let cases = all_cases(&w).await;
    assert_eq!((cases.len(), s(&cases[0]["order_no"])), (1, order_no.clone()));
    let detail = w.t.admin_get(&format!("/api/v1/admin/cases/{}", s(&cases[0]["id"]))).await;
    assert_eq!(counts(&detail), (2, 1), "{detail}");

    // A complaint about a trade that is not kassa's: kept, unlinked, and the operator alerted.
    let stranger = w.alipay.open_complaint(None, now_s - 300);
    let answer = w.alipay.push_complaint(&s(&stranger["complain_event_id"])).await;
    assert_eq!((answer.0, answer.1.as_str()), SUCCESS);
    let unlinked = all_cases(&w)
        .await
        .into_iter()
        .find(|c| c["provider_case_id"] == stranger["complain_event_id"])
        .expect("the stranger's complaint");
    assert!(unlinked["order_no"].is_null() && unlinked["attempt_ref"].is_null(), "{unlinked}");
    assert_eq!(s(&unlinked["state"]), "needs_response");
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'case_unlinked'").await, 1);
    let (status, body) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{}/refund", s(&unlinked["id"])), json!({"amount_minor": 1})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "case_unlinked".into()));

    // A push whose fields were changed after Alipay signed them: refused, nothing fetched or kept.
    let third = w.alipay.open_complaint(Some(&attempt_ref), now_s - 60);
    let (mut fields, _) = w.alipay.complaint_push(&cid);
    fields.insert("biz_content".into(), json!({"complain_event_id": third["complain_event_id"]}).to_string());
    let forged = serde_urlencoded::to_string(&fields).unwrap();
    let queries_before = w.alipay.ledger.lock().unwrap().calls.len();
    let (status, body) = w.alipay.deliver(&forged).await;
    assert_eq!((status, body.as_str()), (400, "fail"));
    assert_eq!(w.alipay.ledger.lock().unwrap().calls.len(), queries_before, "nothing was fetched");
    assert_eq!(all_cases(&w).await.len(), 2);
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'rejected'").await, 1);

    // Payment notifications still go their own way: a second order pays as before.
    let (second, _) = w.paid("alipay").await;
    assert_eq!(w.t.status(&second).await, "paid");
    w.t.assert_clean().await;
}

on_both!(an_alipay_complaint_without_its_push_is_found_by_the_poll, polled);

async fn polled(backend: Backend) {
    let w = world(backend).await;
    let (order_no, attempt_ref) = w.paid("alipay").await;
    let now = now_ms(&w);
    let at_ms = (now / 1000 - 7_200) * 1000;
    // No push reached kassa; one complaint is older than the poll's window.
    let lost = w.alipay.open_complaint(Some(&attempt_ref), at_ms / 1000);
    w.alipay.open_complaint(Some(&attempt_ref), now / 1000 - 200 * 86_400);
    let (status, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "alipay"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["polled"][0], json!({"provider": "alipay", "listed": 1, "opened": 1, "updated": 0}));
    let time = |ms: i64| kassa::gateway::format_at_offset(ms, 8, false);
    let window_ms = kassa::usecase::cases::POLL_WINDOW_MS;
    assert_eq!(
        w.alipay.ledger.lock().unwrap().alipay_complaint_lists,
        vec![json!({"begin_time": time(now - window_ms), "end_time": time(now), "page_size": 20, "page_num": 1})]
    );
    let cases = all_cases(&w).await;
    assert_eq!(cases.len(), 1);
    let case = &cases[0];
    assert_eq!(
        (s(&case["provider_case_id"]), s(&case["order_no"]), s(&case["state"]), s(&case["opened_at"])),
        (s(&lost["complain_event_id"]), order_no.clone(), "needs_response".into(), rfc3339(at_ms))
    );
    assert!(case["amount_minor"].is_null(), "a list item names no amount: {case}");
    assert_eq!(complaint_topics(&w, &order_no).await, vec!["complaint.opened"]);

    // Polled again: nothing new; moved on at Alipay: updated.
    let (_, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "alipay"})).await;
    assert_eq!(body["polled"][0], json!({"provider": "alipay", "listed": 1, "opened": 0, "updated": 0}));
    w.advance(60_000);
    w.alipay.set_complaint_status(&s(&lost["complain_event_id"]), "PLATFORM_PROCESSING");
    let (_, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "alipay"})).await;
    assert_eq!(body["polled"][0], json!({"provider": "alipay", "listed": 1, "opened": 0, "updated": 1}));
    assert_eq!(s(&all_cases(&w).await[0]["state"]), "under_review");

    // More than a page: read in pages of 20.
    for _ in 0..24 {
        w.alipay.open_complaint(Some(&attempt_ref), at_ms / 1000);
    }
    let (_, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "alipay"})).await;
    assert_eq!(body["polled"][0], json!({"provider": "alipay", "listed": 25, "opened": 24, "updated": 0}));
    let lists = w.alipay.ledger.lock().unwrap().alipay_complaint_lists.clone();
    assert_eq!(lists.len(), 5, "{lists:?}");
    assert_eq!((lists[3]["page_num"].as_u64(), lists[4]["page_num"].as_u64()), (Some(1), Some(2)));
    w.t.assert_clean().await;
}

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR-a-small-png";
const JPEG: &[u8] = b"\xFF\xD8\xFF\xE0\x00\x10JFIF-a-small-jpeg";
const BMP: &[u8] = b"BM-a-small-bitmap";

on_both!(an_alipay_reply_carries_the_images_uploaded_for_it, reply_with_images);

async fn reply_with_images(backend: Backend) {
    let w = world(backend).await;
    let (_, attempt_ref) = w.paid("alipay").await;
    let complaint = w.alipay.open_complaint(Some(&attempt_ref), now_ms(&w) / 1000 - 600);
    let cid = s(&complaint["complain_event_id"]);
    let answer = w.alipay.push_complaint(&cid).await;
    assert_eq!((answer.0, answer.1.as_str()), SUCCESS);
    let id = s(&all_cases(&w).await[0]["id"]);
    let path = format!("/api/v1/admin/cases/{id}/reply");
    let operator_messages = |detail: &Value| {
        detail["messages"].as_array().unwrap().iter().filter(|m| m["source"] == "operator").cloned().collect::<Vec<_>>()
    };

    // A BMP, which WeChat Pay would take, Alipay does not: refused before anything is uploaded.
    let images = [B64.encode(PNG), B64.encode(BMP)];
    let (status, refused) = w.t.admin_post(&path, json!({"text": "见截图", "images": images})).await;
    assert_eq!(
        (status, s(&refused["error"]["code"])),
        (StatusCode::UNPROCESSABLE_ENTITY, "image_type_refused".into()),
        "{refused}"
    );
    assert!(s(&refused["error"]["message"]).contains("image 2"), "{refused}");
    assert!(w.alipay.ledger.lock().unwrap().alipay_images.is_empty());

    // Alipay refuses the upload: no reply goes out, nothing is recorded, and the operator is told
    // which call Alipay refused.
    w.alipay.ledger.lock().unwrap().alipay_upload_refusals = 1;
    let (status, refused) = w.t.admin_post(&path, json!({"text": "见截图", "images": [B64.encode(PNG)]})).await;
    assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "case_refused".into()));
    assert!(s(&refused["error"]["message"]).contains("alipay.merchant.image.upload"), "{refused}");
    {
        let l = w.alipay.ledger.lock().unwrap();
        assert!(
            l.alipay_images.is_empty() && l.alipay_reply_bodies.is_empty() && l.alipay_complaint_replies.is_empty()
        );
    }
    assert!(operator_messages(&w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await).is_empty());

    // A reply with a PNG and a JPEG: each uploaded (its signature checked as Alipay checks it),
    // their ids in the reply's `reply_images`.
    let text = "您好，卡密已补发，见截图。";
    let images = [B64.encode(PNG), B64.encode(JPEG)];
    let (status, replied) = w.t.admin_post(&path, json!({"text": text, "images": images})).await;
    assert_eq!(status, StatusCode::OK, "{replied}");
    {
        let l = w.alipay.ledger.lock().unwrap();
        assert_eq!(
            l.alipay_images,
            vec![("ALIIMG-1".to_string(), PNG.to_vec()), ("ALIIMG-2".to_string(), JPEG.to_vec())]
        );
        assert_eq!(l.alipay_reply_bodies.len(), 1);
        assert_eq!(s(&l.alipay_reply_bodies[0]["reply_images"]), "ALIIMG-1,ALIIMG-2");
        assert_eq!(l.alipay_complaint_replies, vec![(cid.clone(), text.to_string())]);
        assert_eq!(l.bad_signatures, 0);
    }
    let operator = operator_messages(&replied);
    assert_eq!(operator.len(), 1);
    assert_eq!(
        serde_json::from_str::<Value>(&s(&operator[0]["body"])).unwrap(),
        json!({"text": text, "media_ids": ["ALIIMG-1", "ALIIMG-2"]})
    );
    assert_eq!(s(&replied["provider_status"]), "MERCHANT_PROCESSING");

    // A reply without images names none.
    let (status, _) = w.t.admin_post(&path, json!({"text": "还有问题请联系我们"})).await;
    assert_eq!(status, StatusCode::OK);
    assert!(w.alipay.ledger.lock().unwrap().alipay_reply_bodies[1].get("reply_images").is_none());
    w.t.assert_clean().await;
}

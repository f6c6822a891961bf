//! WeChat Pay complaints on the desk, against the fake WeChat, on both databases: a complaint
//! notified, fetched and linked to its order; replied to and completed at WeChat; a repeated
//! notification and one with a bad signature; a complaint found only by the backstop poll, over
//! WeChat's 30-day window in pages of 50.

use kassa::clock::{Clock, rfc3339};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, Shop, s};
use crate::fakes::FakeWechat;
use crate::on_both;

const HOUR_MS: i64 = 3_600_000;

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

on_both!(a_notified_complaint_is_fetched_replied_to_and_completed, notified);

async fn notified(backend: Backend) {
    let w = world(backend).await;
    let (order_no, attempt_ref) = w.paid("wechatpay").await;
    let trade = w.wechat.trade(&attempt_ref).unwrap();
    let at_ms = (now_ms(&w) / 1000 - 3_600) * 1000;
    let complaint = w.wechat.open_complaint(&attempt_ref, at_ms / 1000);
    let cid = s(&complaint["complaint_id"]);
    let (url, headers, body) = w.wechat.complaint_notification(&cid, "COMPLAINT.CREATE", "CREATE_COMPLAINT");
    assert_eq!(FakeWechat::deliver(&url, headers.clone(), body.clone()).await.0, 204);

    let cases = all_cases(&w).await;
    assert_eq!(cases.len(), 1, "{cases:?}");
    let case = &cases[0];
    let id = s(&case["id"]);
    assert_eq!(
        (s(&case["provider"]), s(&case["kind"]), s(&case["provider_case_id"]), s(&case["state"])),
        ("wechatpay".into(), "complaint".into(), cid.clone(), "needs_response".into())
    );
    assert_eq!((s(&case["provider_status"]), s(&case["reason"])), ("PENDING".into(), "REFUND".into()));
    assert_eq!((case["amount_minor"].as_i64(), s(&case["currency"])), (Some(trade.amount_minor), "CNY".into()));
    assert_eq!(
        (s(&case["order_no"]), s(&case["attempt_ref"]), s(&case["gateway_txn_id"])),
        (order_no.clone(), attempt_ref.clone(), trade.txn_id.clone())
    );
    assert_eq!((s(&case["due_kind"]), s(&case["due_at"])), ("first_reply".into(), rfc3339(at_ms + 24 * HOUR_MS)));
    assert_eq!(s(&case["opened_at"]), rfc3339(at_ms));
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'case_opened'").await, 1);
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'case_unlinked'").await, 0);
    assert_eq!(complaint_topics(&w, &order_no).await, vec!["complaint.opened"]);
    let detail = w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await;
    assert_eq!(counts(&detail), (2, 1), "the detail fetched and the notice: {detail}");
    let kinds: Vec<String> = detail["messages"].as_array().unwrap().iter().map(|m| s(&m["kind"])).collect();
    assert!(kinds.contains(&"CREATE_COMPLAINT".to_string()), "{kinds:?}");
    assert!(!detail.to_string().contains("payer_phone"), "the payer's phone is not kept: {detail}");
    // The fetched copy carries the thread as WeChat has it: the buyer's complaint so far.
    let thread = |detail: &Value| -> Vec<String> {
        let fetched =
            detail["messages"].as_array().unwrap().iter().find(|m| s(&m["kind"]).starts_with("GET ")).cloned();
        let body: Value = serde_json::from_str(&s(&fetched.expect("a fetched copy")["body"])).unwrap();
        body["negotiation_history"].as_array().expect("the thread").iter().map(|e| s(&e["operate_type"])).collect()
    };
    assert_eq!(thread(&detail), vec!["USER_CREATE_COMPLAINT"]);

    // The same notification again (WeChat's retry): nothing new.
    assert_eq!(FakeWechat::deliver(&url, headers, body).await.0, 204);
    let detail = w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await;
    assert_eq!(counts(&detail), (2, 1), "{detail}");
    assert_eq!(complaint_topics(&w, &order_no).await, vec!["complaint.opened"]);

    // A notice whose complaint cannot be fetched is not acknowledged: WeChat sends it again.
    let unknown = json!({"complaint_id": "200201820201201999", "action_type": "CREATE_COMPLAINT"});
    let (headers, body) = w.wechat.notification("COMPLAINT.CREATE", "complaint", &unknown);
    assert_eq!(FakeWechat::deliver(&url, headers, body).await.0, 500);
    assert_eq!(all_cases(&w).await.len(), 1);

    // The operator replies: WeChat has the text, the complaint is being processed.
    w.advance(60_000);
    let reply = "您好，卡密已重新发送到您的邮箱，请查收。";
    for bad in [String::new(), "  ".into(), "字".repeat(201)] {
        let (status, refused) = w.t.admin_post(&format!("/api/v1/admin/cases/{id}/reply"), json!({"text": bad})).await;
        assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_reply".into()));
    }
    let (status, replied) = w.t.admin_post(&format!("/api/v1/admin/cases/{id}/reply"), json!({"text": reply})).await;
    assert_eq!(status, StatusCode::OK, "{replied}");
    assert_eq!(w.wechat.ledger.lock().unwrap().complaint_replies, vec![(cid.clone(), reply.to_string())]);
    assert_eq!(
        (s(&replied["state"]), s(&replied["provider_status"]), s(&replied["due_kind"]), s(&replied["due_at"])),
        ("needs_response".into(), "PROCESSING".into(), "resolution".into(), rfc3339(at_ms + 72 * HOUR_MS))
    );
    assert_eq!(thread(&replied), vec!["USER_CREATE_COMPLAINT", "MERCHANT_RESPONSE"], "the thread fetched again");
    let operator: Vec<&Value> =
        replied["messages"].as_array().unwrap().iter().filter(|m| m["source"] == "operator").collect();
    assert_eq!(operator.len(), 1);
    assert_eq!(
        (s(&operator[0]["kind"]), s(&operator[0]["body"])),
        ("replied".into(), json!({"text": reply}).to_string())
    );
    assert_eq!(complaint_topics(&w, &order_no).await, vec!["complaint.opened", "complaint.updated"]);

    // WeChat's state-change notification of the reply: the case already says so.
    let events = counts(&replied).1;
    assert_eq!(w.wechat.notify_complaint(&cid, "COMPLAINT.STATE_CHANGE", "MERCHANT_RESPONSE").await.0, 204);
    assert_eq!(counts(&w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await).1, events);

    // Completed: processed at WeChat, closed as resolved.
    w.advance(60_000);
    let (status, completed) = w.t.admin_post(&format!("/api/v1/admin/cases/{id}/complete"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{completed}");
    assert_eq!(w.wechat.ledger.lock().unwrap().complaints_completed, vec![cid.clone()]);
    assert_eq!(
        (s(&completed["state"]), s(&completed["outcome"]), s(&completed["provider_status"])),
        ("closed".into(), "resolved".into(), "PROCESSED".into())
    );
    assert!(completed["closed_at"].is_string() && completed["due_at"].is_null(), "{completed}");
    assert_eq!(
        complaint_topics(&w, &order_no).await,
        vec!["complaint.opened", "complaint.updated", "complaint.closed"]
    );
    for action in ["reply", "complete"] {
        let (status, refused) =
            w.t.admin_post(&format!("/api/v1/admin/cases/{id}/{action}"), json!({"text": "again"})).await;
        assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::CONFLICT, "case_closed".into()), "{action}");
    }

    // A complaint notification under a bad signature is refused and kept as a rejected one.
    let (url, mut headers, body) = w.wechat.complaint_notification(&cid, "COMPLAINT.STATE_CHANGE", "USER_RESPONSE");
    let forged = w.wechat.sign_headers("{}");
    headers.insert("Wechatpay-Signature", forged["Wechatpay-Signature"].clone());
    assert_eq!(FakeWechat::deliver(&url, headers, body).await.0, 400);
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'rejected'").await, 1);
    w.t.assert_clean().await;
}

on_both!(a_complaint_without_its_notification_is_found_by_the_poll, polled);

async fn polled(backend: Backend) {
    let w = world(backend).await;
    let (order_no, attempt_ref) = w.paid("wechatpay").await;
    let now = now_ms(&w);
    let at_ms = (now / 1000 - 7_200) * 1000;
    // No notification reached kassa; one complaint is older than WeChat's 30-day window.
    let lost = w.wechat.open_complaint(&attempt_ref, at_ms / 1000);
    w.wechat.open_complaint(&attempt_ref, now / 1000 - 40 * 86_400);
    let (status, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "wechatpay"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["polled"][0], json!({"provider": "wechatpay", "listed": 1, "opened": 1, "updated": 0}));
    let day = |ms: i64| kassa::gateway::format_at_offset(ms, 8, false)[..10].to_string();
    assert_eq!(
        w.wechat.ledger.lock().unwrap().complaint_lists,
        vec![format!("limit=50&offset=0&begin_date={}&end_date={}", day(now - 29 * 86_400_000), day(now))]
    );
    let cases = all_cases(&w).await;
    assert_eq!(cases.len(), 1);
    let case = &cases[0];
    assert_eq!(
        (s(&case["provider_case_id"]), s(&case["order_no"]), s(&case["due_kind"]), s(&case["due_at"])),
        (s(&lost["complaint_id"]), order_no.clone(), "first_reply".into(), rfc3339(at_ms + 24 * HOUR_MS))
    );
    assert_eq!(complaint_topics(&w, &order_no).await, vec!["complaint.opened"]);

    // Polled again: nothing new; moved on at WeChat: updated.
    let (_, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "wechatpay"})).await;
    assert_eq!(body["polled"][0], json!({"provider": "wechatpay", "listed": 1, "opened": 0, "updated": 0}));
    w.advance(60_000);
    w.wechat.set_complaint_state(&s(&lost["complaint_id"]), "PROCESSING");
    let (_, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "wechatpay"})).await;
    assert_eq!(body["polled"][0], json!({"provider": "wechatpay", "listed": 1, "opened": 0, "updated": 1}));
    let case = &all_cases(&w).await[0];
    assert_eq!((s(&case["due_kind"]), s(&case["due_at"])), ("resolution".into(), rfc3339(at_ms + 72 * HOUR_MS)));

    // More than a page: read in pages of 50.
    for _ in 0..50 {
        w.wechat.open_complaint(&attempt_ref, at_ms / 1000);
    }
    let (_, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "wechatpay"})).await;
    assert_eq!(body["polled"][0], json!({"provider": "wechatpay", "listed": 51, "opened": 50, "updated": 0}));
    let lists = w.wechat.ledger.lock().unwrap().complaint_lists.clone();
    assert_eq!(lists.len(), 5, "{lists:?}");
    assert!(lists[3].contains("offset=0&") && lists[4].contains("offset=50&"), "{lists:?}");

    // A dispute takes no reply.
    let (_, stripe_ref) = w.paid("stripe").await;
    let pi = w.stripe.session_for(&stripe_ref).expect("session").txn_id;
    w.stripe.open_dispute(&pi, 8_888, 7 * 86_400);
    w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "stripe"})).await;
    let dispute = all_cases(&w).await.into_iter().find(|c| c["kind"] == "dispute").unwrap();
    let (status, refused) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{}/reply", s(&dispute["id"])), json!({"text": "hi"})).await;
    assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::CONFLICT, "case_not_a_complaint".into()));
    w.t.assert_clean().await;
}

use kassa::store::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, s};
use crate::on_both;

fn body(event_id: &str, attempt_ref: &str, amount: i64, currency: &str) -> Vec<u8> {
    json!({
        "event_id": event_id, "event_type": "payment.succeeded", "merchant_id": "kassa-demo-merchant",
        "attempt_ref": attempt_ref, "txn_id": "txn_test", "amount_minor": amount, "currency": currency,
        "created_at": 0
    })
    .to_string()
    .into_bytes()
}

async fn post(t: &TestApp, body: Vec<u8>, signature: Option<String>) -> (StatusCode, String) {
    let mut req = t.http.post(t.url("/notify/sandbox")).header("content-type", "application/json").body(body);
    if let Some(sig) = signature {
        req = req.header("sandbox-signature", sig);
    }
    let r = req.send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

fn signed(t: &TestApp, body: &[u8]) -> Option<String> {
    Some(t.app.sandbox.as_ref().unwrap().sign_notification(body))
}

on_both!(five_parallel_copies_apply_once, five_copies);
async fn five_copies(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 2)]).await;
    // The sandbox sends five copies of one event in parallel.
    let (status, done) = t.complete(&attempt_ref, "succeeded", 5).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    t.settle().await;
    assert_eq!(t.status(&order_no).await, "paid");
    // And five more copies straight at the endpoint, in parallel, same event id.
    let wire = body(&s(&done["event_id"]), &attempt_ref, 17800, "CNY");
    let sig = signed(&t, &wire);
    let results = futures_join(&t, wire, sig, 5).await;
    assert!(results.iter().all(|(st, _)| *st == StatusCode::OK), "{results:?}");
    let order = t.order(&order_no).await;
    let to_paid = order["events"].as_array().unwrap().iter().filter(|e| e["to"] == "paid").count();
    assert_eq!(to_paid, 1, "exactly one transition to paid: {order}");
    let attempt_events = order["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["entity"] == "attempt" && e["to"] == "succeeded")
        .count();
    assert_eq!(attempt_events, 1);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'applied'").await, 1);
    assert_eq!(
        t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'ignored_duplicate'").await,
        9
    );
    let sku = t.sku("MUG").await;
    assert_eq!((sku["sold"].as_i64(), sku["on_hand"].as_i64(), sku["reserved"].as_i64()), (Some(2), Some(3), Some(0)));
    t.assert_clean().await;
}

async fn futures_join(t: &TestApp, wire: Vec<u8>, sig: Option<String>, n: usize) -> Vec<(StatusCode, String)> {
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (http, url, wire, sig) = (t.http.clone(), t.url("/notify/sandbox"), wire.clone(), sig.clone());
        set.spawn(async move {
            let r = http.post(url).header("sandbox-signature", sig.unwrap()).body(wire).send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        });
    }
    let mut out = Vec::new();
    while let Some(r) = set.join_next().await {
        out.push(r.unwrap());
    }
    out
}

on_both!(hostile_notifications_change_nothing, hostile);
async fn hostile(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    let events_before = t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM status_events").await;

    let good = body("evt_real", &attempt_ref, 8900, "CNY");
    let other = body("evt_other", &attempt_ref, 1, "CNY");
    let tampered_sig = signed(&t, &other); // a valid signature, of another body
    let mut flipped = good.clone();
    flipped[10] ^= 1;
    let cases: Vec<(&str, Vec<u8>, Option<String>, &str)> = vec![
        ("tampered signature", good.clone(), tampered_sig, "invalid_signature"),
        ("tampered body", flipped.clone(), signed(&t, &good), "invalid_signature"),
        ("no signature", good.clone(), None, "invalid_signature"),
        ("garbage signature", good.clone(), Some("t=1,v1=AAAA".into()), "invalid_signature"),
        ("stale signature", good.clone(), Some(stale(&t, &good)), "invalid_signature"),
        ("wrong amount", body("evt_amount", &attempt_ref, 8899, "CNY"), None, "amount_mismatch"),
        ("wrong currency", body("evt_currency", &attempt_ref, 8900, "USD"), None, "currency_mismatch"),
        ("unknown reference", body("evt_unknown", "KSNOTANORDER_1", 8900, "CNY"), None, "unknown_reference"),
        ("malformed body", b"{\"event_id\": ".to_vec(), None, "malformed_body"),
        ("invalid utf-8", vec![0xff, 0xfe, 0x00, 0x7b], None, "malformed_body"),
        ("empty body", Vec::new(), None, "malformed_body"),
        ("wrong merchant", body("evt_m", &attempt_ref, 8900, "CNY").replace_merchant(), None, "merchant_mismatch"),
        ("path tricks", body("../../etc", &attempt_ref, 8900, "CNY"), None, "malformed_body"),
    ];
    for (name, wire, sig, code) in cases {
        // Cases without an explicit signature are validly signed: only their content is wrong.
        let sig = match sig {
            Some(s) => Some(s),
            None if name == "no signature" => None,
            None => signed(&t, &wire),
        };
        let (status, text) = post(&t, wire, sig).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["code"], code, "{name}: {text}");
    }
    // Oversized body: 413, nothing stored.
    let (status, _) = post(&t, vec![b'x'; 1024 * 1024 + 1], None).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);

    assert_eq!(t.status(&order_no).await, "pending_payment");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM status_events").await, events_before);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'rejected'").await, 13);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE event_id IS NOT NULL").await, 0);
    assert!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'signature_failure'").await >= 1);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'amount_mismatch'").await, 1);
    assert_eq!(t.sku("MUG").await["reserved"], 1);
    t.assert_clean().await;

    // The genuine event is still accepted afterwards: rejected copies never claimed its id.
    let (status, _) = post(&t, good.clone(), signed(&t, &good)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(t.status(&order_no).await, "paid");
    t.assert_clean().await;
}

fn stale(t: &TestApp, body: &[u8]) -> String {
    // A real signature made long ago is refused (replay protection).
    let sandbox = t.app.sandbox.as_ref().unwrap();
    let fresh = sandbox.sign_notification(body);
    let now_s = t.now_ms() / 1000;
    fresh.replace(&format!("t={now_s},"), &format!("t={},", now_s - 3600))
}

trait ReplaceMerchant {
    fn replace_merchant(self) -> Vec<u8>;
}

impl ReplaceMerchant for Vec<u8> {
    fn replace_merchant(self) -> Vec<u8> {
        String::from_utf8(self).unwrap().replace("kassa-demo-merchant", "someone-else").into_bytes()
    }
}

on_both!(failed_payment_keeps_the_order_payable_until_expiry, failed_payment);
async fn failed_payment(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    let (status, _) = t.complete(&attempt_ref, "failed", 2).await;
    assert_eq!(status, StatusCode::OK);
    t.settle().await;
    let order = t.order(&order_no).await;
    assert_eq!(order["status"], "pending_payment");
    assert_eq!(order["attempts"][0]["status"], "failed");
    // A success for the same attempt after a failure contradicts the sandbox: it refuses.
    let (status, body) = t.complete(&attempt_ref, "succeeded", 1).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    t.assert_clean().await;
}

on_both!(notifications_are_retried_until_acknowledged, retried);
async fn retried(backend: Backend) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // A flaky proxy in front of kassa's notify URL: the first two tries fail.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_addr = listener.local_addr().unwrap();
    let t = TestApp::spawn_with(
        backend,
        crate::common::Opts {
            manual_clock: true,
            public_url: Some(format!("http://{proxy_addr}")),
            ..Default::default()
        },
    )
    .await;
    let tries = Arc::new(AtomicUsize::new(0));
    let target = t.url("/notify/sandbox");
    let (tries2, http) = (tries.clone(), t.http.clone());
    let proxy = axum::Router::new().route(
        "/notify/sandbox",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let (tries, http, target) = (tries2.clone(), http.clone(), target.clone());
            async move {
                if tries.fetch_add(1, Ordering::SeqCst) < 2 {
                    return (axum::http::StatusCode::SERVICE_UNAVAILABLE, String::new());
                }
                let sig = headers.get("sandbox-signature").unwrap().to_str().unwrap().to_string();
                let r = http.post(target).header("sandbox-signature", sig).body(body).send().await.unwrap();
                (axum::http::StatusCode::from_u16(r.status().as_u16()).unwrap(), r.text().await.unwrap())
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, proxy).await.unwrap() });

    t.create_sku("MUG", "Mug", 8900, 5).await;
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("MUG", 1)]).await;
    let r = t.http.post(t.url(&format!("/api/v1/baskets/{basket}/checkout"))).bearer_auth(&buyer).send().await.unwrap();
    let placed: Value = r.json().await.unwrap();
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    t.complete(&attempt_ref, "succeeded", 1).await;
    let sandbox = t.app.sandbox.clone().unwrap();
    let clock = t.clock.clone().unwrap();
    // First try happens right away (spawned); then the worker step retries after the backoff.
    for _ in 0..3_000 {
        if tries.load(Ordering::SeqCst) >= 1 && sandbox.pending_deliveries().await.unwrap() == 1 {
            let leased =
                t.sandbox_count("SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries WHERE lease_until > 0").await;
            if leased == 0 {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(t.status(&order_no).await, "pending_payment");
    assert_eq!(sandbox.deliver_step().await.unwrap(), 0, "not due before the backoff");
    clock.advance_ms(1_000);
    assert_eq!(sandbox.deliver_step().await.unwrap(), 1);
    assert_eq!(t.status(&order_no).await, "pending_payment");
    clock.advance_ms(2_000);
    assert_eq!(sandbox.deliver_step().await.unwrap(), 1);
    assert_eq!(tries.load(Ordering::SeqCst), 3);
    assert_eq!(sandbox.pending_deliveries().await.unwrap(), 0);
    assert_eq!(t.status(&order_no).await, "paid");
    t.assert_clean().await;
}

on_both!(a_notification_body_is_kept_byte_for_byte, body_bytes);
/// A notification's raw body goes in with its claim: every byte value, quotes and backslashes
/// included, comes back as it went in, and a duplicate is recorded without being applied again.
async fn body_bytes(backend: Backend) {
    use kassa::domain::decide::LatePolicy;
    use kassa::domain::event::{Outcome, VerifiedEvent};
    use kassa::domain::{Currency, Money};
    use kassa::store::payments::{self, Applied};
    let t = TestApp::spawn(backend).await;
    t.create_sku("BYTES", "Bytes", 700, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("BYTES", 1)]).await;
    let mut raw_body: Vec<u8> = (0..=255).collect();
    raw_body.extend_from_slice(b"'\\x00'' \\\\ $1 E'");
    let event = VerifiedEvent {
        gateway: "sandbox".into(),
        event_id: "evt_bytes".into(),
        attempt_ref,
        outcome: Outcome::Succeeded {
            gateway_txn_id: "txn_bytes".into(),
            amount: Money::new(700, Currency::parse("CNY").unwrap()).unwrap(),
        },
        raw_body: raw_body.clone(),
    };
    let db = t.app.state.db.clone();
    let first = payments::apply_event(&db, &event, LatePolicy::Manual, t.now_ms()).await.unwrap();
    assert!(matches!(first, Applied::Changed { .. }), "{first:?}");
    let again = payments::apply_event(&db, &event, LatePolicy::Manual, t.now_ms()).await.unwrap();
    assert!(matches!(again, Applied::Duplicate), "{again:?}");
    let stored: Vec<u8> = sql::query_scalar("SELECT raw_body FROM notifications WHERE event_id = 'evt_bytes'")
        .fetch_one(db.read_pool())
        .await
        .unwrap();
    assert_eq!(stored, raw_body);
    assert_eq!(t.status(&order_no).await, "paid");
    let rows = "SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE attempt_ref = (SELECT attempt_ref FROM notifications WHERE event_id = 'evt_bytes')";
    assert_eq!(t.count(rows).await, 2, "the claim and the duplicate's arrival");
    t.assert_clean().await;
}

on_both!(acknowledged_deliveries_are_recorded_together_and_alone, recorded_together);
/// Acknowledged deliveries are recorded in shared writes: every acknowledged copy ends delivered
/// after exactly one try, and a copy still waiting for its time is left as it was.
async fn recorded_together(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 20).await;
    let mut orders = Vec::new();
    let mut attempts = Vec::new();
    for _ in 0..7 {
        let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
        orders.push(order_no);
        attempts.push(attempt_ref);
    }
    // One copy held back by ten minutes: it must stay pending, untouched by the others' records.
    let (_, late_order, late_attempt) = t.pending_order(&[("MUG", 1)]).await;
    let r = t
        .http
        .post(t.url(&format!("/sandbox/api/payments/{late_attempt}/complete")))
        .json(&json!({"outcome": "succeeded", "copies": 1, "delay_ms": 600_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Seven payments with three copies each, completed at once: 21 deliveries acknowledged close
    // together, most of them recorded in shared writes (how many share one depends on timing; the
    // padded statement itself is checked by a unit test in `sandbox`).
    let mut set = tokio::task::JoinSet::new();
    for attempt_ref in &attempts {
        let (http, url) = (t.http.clone(), t.url(&format!("/sandbox/api/payments/{attempt_ref}/complete")));
        set.spawn(async move { http.post(url).json(&json!({"outcome": "succeeded", "copies": 3})).send().await });
    }
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap().unwrap().status(), StatusCode::OK);
    }
    let sandbox = t.app.sandbox.clone().unwrap();
    for _ in 0..6_000 {
        if sandbox.pending_deliveries().await.unwrap() == 1 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(
        t.sandbox_count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries \
             WHERE status = 'delivered' AND tries = 1 AND lease_until = 0 AND last_error IS NULL"
        )
        .await,
        21
    );
    assert_eq!(
        t.sandbox_count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries \
             WHERE status = 'pending' AND tries = 0 AND lease_until > 0 AND last_error IS NULL"
        )
        .await,
        1
    );
    for order_no in &orders {
        assert_eq!(t.status(order_no).await, "paid");
    }
    assert_eq!(t.status(&late_order).await, "pending_payment");
    t.assert_clean().await;
}

on_both!(an_event_id_reused_for_another_order_is_weighed_and_alerted, event_id_reused);
async fn event_id_reused(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, order_a, attempt_a) = t.pending_order(&[("MUG", 1)]).await;
    let (status, done) = t.complete(&attempt_a, "succeeded", 1).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    t.settle().await;
    assert_eq!(t.status(&order_a).await, "paid");
    // Order B's payment arrives under A's event id: not a copy of A's event, so B is paid, and the
    // operator is told.
    let (_, order_b, attempt_b) = t.pending_order(&[("MUG", 2)]).await;
    let wire = json!({
        "event_id": s(&done["event_id"]), "event_type": "payment.succeeded", "merchant_id": "kassa-demo-merchant",
        "attempt_ref": attempt_b, "txn_id": "txn_reused_b", "amount_minor": 17800, "currency": "CNY", "created_at": 0
    })
    .to_string()
    .into_bytes();
    let (status, text) = post(&t, wire.clone(), signed(&t, &wire)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(t.status(&order_b).await, "paid");
    assert_eq!(t.status(&order_a).await, "paid");
    assert_eq!(
        t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'notification_event_id_reused'").await,
        1
    );
    // B's own retry of it is the duplicate; A's event is untouched.
    let (status, _) = post(&t, wire.clone(), signed(&t, &wire)).await;
    assert_eq!(status, StatusCode::OK);
    let order = t.order(&order_b).await;
    let to_paid = order["events"].as_array().unwrap().iter().filter(|e| e["to"] == "paid").count();
    assert_eq!(to_paid, 1, "B paid once: {order}");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'applied'").await, 2);
    assert_eq!(
        t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'ignored_duplicate'").await,
        1
    );
    t.assert_clean().await;
}

on_both!(a_second_capture_on_a_paid_attempt_is_recorded_alerted_and_refunded, second_capture);
async fn second_capture(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    let (status, done) = t.complete(&attempt_ref, "succeeded", 1).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    t.settle().await;
    assert_eq!(t.status(&order_no).await, "paid");
    // The gateway reports the same attempt paid again, under another transaction: money taken twice.
    let second = |event_id: &str| {
        json!({
            "event_id": event_id, "event_type": "payment.succeeded", "merchant_id": "kassa-demo-merchant",
            "attempt_ref": attempt_ref, "txn_id": "txn_paid_twice", "amount_minor": 8900, "currency": "CNY", "created_at": 0
        })
        .to_string()
        .into_bytes()
    };
    let wire = second("evt_second_capture");
    let (status, text) = post(&t, wire.clone(), signed(&t, &wire)).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(t.status(&order_no).await, "paid", "the order keeps its status");
    let count = |sql: &'static str| t.count(sql);
    assert_eq!(
        count("SELECT CAST(COUNT(*) AS BIGINT) FROM second_captures WHERE gateway_txn_id = 'txn_paid_twice'").await,
        1
    );
    assert_eq!(
        count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'duplicate_payment' AND severity = 'critical'")
            .await,
        1
    );
    let order = t.order(&order_no).await;
    let refund = order["refunds"].as_array().unwrap().iter().find(|r| r["refund_no"] == "DUP-txn_paid_twice").cloned();
    let refund = refund.unwrap_or_else(|| panic!("the second capture is refunded: {order}"));
    assert_eq!((refund["kind"].as_str(), refund["amount_minor"].as_i64()), (Some("duplicate_payment"), Some(8900)));
    // Reported again, as a retry or under a new event id: still one capture, one refund.
    for event_id in ["evt_second_capture", "evt_second_capture_again"] {
        let wire = second(event_id);
        let (status, _) = post(&t, wire.clone(), signed(&t, &wire)).await;
        assert_eq!(status, StatusCode::OK);
    }
    assert_eq!(count("SELECT CAST(COUNT(*) AS BIGINT) FROM second_captures").await, 1);
    assert_eq!(count("SELECT CAST(COUNT(*) AS BIGINT) FROM refunds").await, 1);
    // The refund goes out naming the second transaction, and the books balance.
    t.app.refunder.step().await.unwrap();
    t.settle().await;
    let order = t.order(&order_no).await;
    assert_eq!(order["status"], "paid", "{order}");
    assert_eq!(order["refunds"][0]["status"], "succeeded", "{order}");
    assert_eq!(order["refunded_minor"], 0, "a duplicate's refund is not the order's: {order}");
    let csv = t.http.get(t.url("/api/v1/admin/refunds.csv")).bearer_auth(crate::common::ADMIN).send().await.unwrap();
    assert!(csv.text().await.unwrap().contains("DUP-txn_paid_twice,"));
    t.assert_clean().await;
}

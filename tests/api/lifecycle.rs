use kassa::store::sql;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ADMIN, Backend, KEYS_SECRET, Opts, TestApp, WEBHOOK_SECRET, s};
use crate::on_both;
use kassa::domain::decide::LatePolicy;

async fn post_json(t: &TestApp, path: &str, token: &str, body: Value) -> (StatusCode, Value) {
    let r = t.http.post(t.url(path)).bearer_auth(token).json(&body).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

pub(crate) async fn digital_sku(t: &TestApp, sku: &str, keys: &[&str]) -> Value {
    let (status, body) = t
        .admin_post("/api/v1/admin/skus", json!({"sku": sku, "name": "Game key", "price_minor": 100, "currency": "CNY", "kind": "digital", "stock": 999}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["on_hand"], 0, "a digital SKU's stock is its keys");
    let (status, body) = t.admin_post(&format!("/api/v1/admin/skus/{sku}/keys"), json!({"keys": keys})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

on_both!(card_keys_are_delivered_exactly_once, card_keys);
async fn card_keys(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    let keys: Vec<String> = (0..8).map(|i| format!("KEY-{i:04}-SECRET")).collect();
    let mut with_dups: Vec<&str> = keys.iter().map(String::as_str).collect();
    with_dups.extend(["KEY-0001-SECRET", "KEY-0002-SECRET"]);
    let imported = digital_sku(&t, "GAME", &with_dups).await;
    assert_eq!((imported["imported"].as_i64(), imported["duplicates"].as_i64()), (Some(8), Some(2)));
    let (_, again) =
        t.admin_post("/api/v1/admin/skus/GAME/keys", json!({"keys": ["KEY-0003-SECRET", "KEY-NEW"]})).await;
    assert_eq!((again["imported"].as_i64(), again["duplicates"].as_i64()), (Some(1), Some(1)));
    assert_eq!(t.sku("GAME").await["on_hand"], 9);
    // Encrypted at rest: no key in clear in the database.
    let stored: Vec<Vec<u8>> =
        sql::query_scalar("SELECT ciphertext FROM card_keys").fetch_all(t.app.state.db.read_pool()).await.unwrap();
    assert!(stored.iter().all(|c| !c.windows(6).any(|w| w == b"SECRET")));

    // 20 buyers race for 9 keys.
    let mut carts = Vec::new();
    for _ in 0..20 {
        let buyer = t.buyer().await;
        let basket = t.basket(&buyer, &[("GAME", 1)]).await;
        carts.push((buyer, basket));
    }
    let mut set = tokio::task::JoinSet::new();
    for (buyer, basket) in carts {
        let request = t.checkout_request(&buyer, &basket, &json!({}));
        set.spawn(async move {
            let r = request.send().await.unwrap();
            (buyer, r.status(), r.json::<Value>().await.unwrap())
        });
    }
    let mut placed = Vec::new();
    while let Some(r) = set.join_next().await {
        let (buyer, status, body) = r.unwrap();
        if status == StatusCode::CREATED {
            placed.push((buyer, s(&body["order_no"]), s(&body["attempt_ref"])));
        } else {
            assert_eq!(body["error"]["code"], "out_of_stock");
        }
    }
    assert_eq!(placed.len(), 9);
    // One stays unpaid; the rest pay at once, each notification sent three times.
    let (unpaid_buyer, unpaid_order, _) = placed.pop().unwrap();
    let mut set = tokio::task::JoinSet::new();
    for (_, _, attempt_ref) in &placed {
        let (http, url) = (t.http.clone(), t.url(&format!("/sandbox/api/payments/{attempt_ref}/complete")));
        set.spawn(async move {
            http.post(url).json(&json!({"outcome": "succeeded", "copies": 3})).send().await.unwrap().status()
        });
    }
    while let Some(r) = set.join_next().await {
        assert_eq!(r.unwrap(), StatusCode::OK);
    }
    t.settle().await;
    let mut delivered = BTreeSet::new();
    for (buyer, order_no, _) in &placed {
        let r = t.http.get(t.url(&format!("/api/v1/orders/{order_no}"))).bearer_auth(buyer).send().await.unwrap();
        let order: Value = r.json().await.unwrap();
        assert_eq!(order["status"], "delivered", "{order}");
        let got = order["lines"][0]["keys"].as_array().unwrap();
        assert_eq!(got.len(), 1);
        assert!(delivered.insert(s(&got[0])), "a key was delivered twice");
    }
    let all: BTreeSet<String> = keys.iter().cloned().chain(["KEY-NEW".to_string()]).collect();
    assert!(delivered.is_subset(&all));
    // The unpaid order has no key; nobody else sees the keys.
    let r =
        t.http.get(t.url(&format!("/api/v1/orders/{unpaid_order}"))).bearer_auth(&unpaid_buyer).send().await.unwrap();
    assert!(r.json::<Value>().await.unwrap()["lines"][0].get("keys").is_none());
    let stranger = t.buyer().await;
    let r = t.http.get(t.url(&format!("/api/v1/orders/{}", placed[0].1))).bearer_auth(&stranger).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let sku = t.sku("GAME").await;
    assert_eq!((sku["on_hand"].as_i64(), sku["reserved"].as_i64(), sku["sold"].as_i64()), (Some(1), Some(1), Some(8)));
    t.assert_clean().await;
}

on_both!(keys_import_command_reads_large_files, keys_cli);
async fn keys_cli(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    digital_sku(&t, "GIFT", &["EXISTING-1"]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.txt");
    let mut text = String::new();
    for i in 0..1_200 {
        text.push_str(&format!("GIFT-{i:05}\n"));
        if i % 100 == 0 {
            text.push_str("\nEXISTING-1\n");
        }
    }
    std::fs::write(&file, text).unwrap();
    let url = t.database_url.clone();
    let out = tokio::task::spawn_blocking(move || {
        crate::common::kassa_command()
            .args(["keys", "import", "--sku", "GIFT", "--database-url", &url, "--keys-secret", KEYS_SECRET])
            .arg("--data-dir")
            .arg(file.with_extension("data"))
            .arg(&file)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout} {stderr}");
    let summary: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!((summary["imported"].as_i64(), summary["duplicates"].as_i64()), (Some(1_200), Some(12)));
    assert!(stderr.contains("imported 1200 keys, 12 duplicates (100% of the file)"), "{stderr}");
    assert!(stderr.lines().count() >= 3, "progress is shown while importing: {stderr}");
    assert!(!stderr.contains("GIFT-0"), "keys are never printed");
    assert_eq!(t.sku("GIFT").await["on_hand"], 1_201);
    t.assert_clean().await;
}

/// A merchant webhook that records what it receives and fails the first `fail_first` posts.
pub struct Webhook {
    pub url: String,
    pub received: Arc<Mutex<Vec<(axum::http::HeaderMap, String)>>>,
}

pub async fn webhook(fail_first: usize) -> Webhook {
    let received: Arc<Mutex<Vec<(axum::http::HeaderMap, String)>>> = Arc::default();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (r2, c2) = (received.clone(), calls.clone());
    let app = axum::Router::new().route(
        "/events",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let (received, calls) = (r2.clone(), c2.clone());
            async move {
                if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < fail_first {
                    return axum::http::StatusCode::INTERNAL_SERVER_ERROR;
                }
                received.lock().unwrap().push((headers, body));
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/events", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Webhook { url, received }
}

pub fn verify_webhook(headers: &axum::http::HeaderMap, body: &str) {
    let sig = headers["kassa-signature"].to_str().unwrap();
    let (t, v1) = sig.split_once(',').unwrap();
    let t = t.strip_prefix("t=").unwrap();
    let v1 = hex::decode(v1.strip_prefix("v1=").unwrap()).unwrap();
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, WEBHOOK_SECRET.as_bytes());
    aws_lc_rs::hmac::verify(&key, format!("{t}.{body}").as_bytes(), &v1).expect("webhook signature verifies");
}

on_both!(outbox_relays_order_events_at_least_once, outbox);
async fn outbox(backend: Backend) {
    let hook = webhook(2).await;
    let t = TestApp::spawn_with(
        backend,
        Opts { manual_clock: true, hold_seconds: 60, webhook_url: Some(hook.url.clone()), ..Default::default() },
    )
    .await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, paid_order, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    let (_, expired_order, _) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let relay = t.app.relay.clone().unwrap();
    let clock = t.clock.clone().unwrap();
    // Two failures, then acknowledged: retried with backoff, nothing lost.
    assert_eq!(relay.step().await.unwrap(), 2);
    assert_eq!(relay.step().await.unwrap(), 0, "not due again before the backoff");
    clock.advance_ms(1_000);
    relay.step().await.unwrap();
    clock.advance_ms(2_000);
    relay.step().await.unwrap();
    let topics: BTreeSet<String> =
        hook.received.lock().unwrap().iter().map(|(h, _)| h["kassa-topic"].to_str().unwrap().to_string()).collect();
    assert_eq!(topics, BTreeSet::from(["order.paid".to_string(), "fulfilment.requested".to_string()]), "{topics:?}");
    // Physical goods: delivered when the merchant says so.
    let (status, _) = post_json(&t, &format!("/api/v1/admin/orders/{paid_order}/deliver"), ADMIN, json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = post_json(&t, &format!("/api/v1/admin/orders/{paid_order}/deliver"), ADMIN, json!({})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "not_deliverable".into()));
    clock.advance_ms(60_000);
    t.app.sweeper.step().await.unwrap();
    relay.step().await.unwrap();
    let received = hook.received.lock().unwrap().clone();
    let mut ids = BTreeSet::new();
    for (headers, body) in &received {
        verify_webhook(headers, body);
        let v: Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["id"].as_str().unwrap(), headers["kassa-event-id"].to_str().unwrap());
        assert!(ids.insert(s(&v["id"])), "each message has its own dedupe id");
    }
    let summary: Vec<(String, String)> = received
        .iter()
        .map(|(_, b)| {
            let v: Value = serde_json::from_str(b).unwrap();
            (s(&v["order_no"]), s(&v["topic"]))
        })
        .collect();
    assert!(summary.contains(&(paid_order.clone(), "order.delivered".into())));
    assert!(summary.contains(&(expired_order.clone(), "order.expired".into())));
    // No paid or fulfilment message for the order that was never paid.
    assert!(!summary.iter().any(|(o, topic)| *o == expired_order && topic != "order.expired"), "{summary:?}");
    t.assert_clean().await;
}

on_both!(a_dead_webhook_gives_up_and_alerts, dead_webhook);
async fn dead_webhook(backend: Backend) {
    let hook = webhook(usize::MAX).await;
    let t = TestApp::spawn_with(
        backend,
        Opts { manual_clock: true, webhook_url: Some(hook.url.clone()), ..Default::default() },
    )
    .await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, _, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let relay = t.app.relay.clone().unwrap();
    for _ in 0..kassa::workers::outbox::OUTBOX_TRIES_MAX {
        relay.step().await.unwrap();
        t.clock.as_ref().unwrap().advance_ms(120_000);
    }
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM outbox WHERE status = 'dead'").await, 2);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM outbox WHERE status = 'pending'").await, 0);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'outbox_dead'").await, 2);
}

async fn paid_order(t: &TestApp, price: i64) -> (String, String, String) {
    let sku = format!("P{price}");
    t.create_sku(&sku, "Item", price, 100).await;
    let (buyer, order_no, attempt_ref) = t.pending_order(&[(&sku, 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    assert_eq!(t.status(&order_no).await, "paid");
    (buyer, order_no, attempt_ref)
}

async fn refund(t: &TestApp, order_no: &str, refund_no: &str, amount: i64) -> (StatusCode, Value) {
    post_json(
        t,
        &format!("/api/v1/admin/orders/{order_no}/refunds"),
        ADMIN,
        json!({"refund_no": refund_no, "amount_minor": amount, "reason": "test"}),
    )
    .await
}

on_both!(refunds_never_exceed_captured_and_pay_out_once, refunds);
async fn refunds(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    let (_, order_no, _) = paid_order(&t, 1000).await;
    // Ten concurrent requests of 300 each on a capture of 1000: exactly three fit.
    let mut set = tokio::task::JoinSet::new();
    for i in 0..10 {
        let (http, url) = (t.http.clone(), t.url(&format!("/api/v1/admin/orders/{order_no}/refunds")));
        set.spawn(async move {
            let r = http
                .post(url)
                .bearer_auth(ADMIN)
                .json(&json!({"refund_no": format!("R-{i}"), "amount_minor": 300}))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        });
    }
    let (mut ok, mut refused) = (0, 0);
    while let Some(r) = set.join_next().await {
        let (status, body) = r.unwrap();
        match status {
            StatusCode::CREATED => ok += 1,
            StatusCode::CONFLICT => {
                assert_eq!(body["error"]["code"], "refund_exceeds_captured", "{body}");
                refused += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    assert_eq!((ok, refused), (3, 7));
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM refunds").await, 3, "refused refunds are not stored");
    t.settle().await;
    let order = t.order(&order_no).await;
    assert_eq!(order["status"], "paid", "partial refunds keep the order paid: {order}");
    assert!(order["refunds"].as_array().unwrap().iter().all(|r| r["status"] == "succeeded"), "{order}");
    // The same refund number five times at once: one refund, paid out once.
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..5 {
        let (http, url) = (t.http.clone(), t.url(&format!("/api/v1/admin/orders/{order_no}/refunds")));
        set.spawn(async move {
            let r = http
                .post(url)
                .bearer_auth(ADMIN)
                .json(&json!({"refund_no": "R-LAST", "amount_minor": 100}))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        });
    }
    while let Some(r) = set.join_next().await {
        let (status, body) = r.unwrap();
        assert!(status == StatusCode::CREATED || status == StatusCode::OK, "{status} {body}");
        assert_eq!(body["refund_no"], "R-LAST");
        assert_eq!(body["amount_minor"], 100);
    }
    t.settle().await;
    assert_eq!(
        t.sandbox_count("SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_refunds WHERE refund_no = 'R-LAST'").await,
        1
    );
    assert_eq!(t.status(&order_no).await, "refunded");
    // A duplicated refund notification changes nothing.
    let body: String = sql::query_scalar("SELECT body FROM sandbox_deliveries WHERE body LIKE '%R-LAST%'")
        .fetch_one(t.sandbox_records().read_pool())
        .await
        .unwrap();
    let sig = t.app.sandbox.as_ref().unwrap().sign_notification(body.as_bytes());
    let r = t.http.post(t.url("/notify/sandbox")).header("sandbox-signature", sig).body(body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let (status, body) = refund(&t, &order_no, "R-MORE", 1).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "not_refundable".into()));
    let order = t.order(&order_no).await;
    let refund_events = order["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["entity"] == "refund" && e["to"] == "succeeded")
        .count();
    assert_eq!(refund_events, 4);
    t.assert_clean().await;
}

on_both!(late_payments_follow_the_policy, late_policies);
async fn late_policies(backend: Backend) {
    for policy in [LatePolicy::Reallocate, LatePolicy::Refund, LatePolicy::Manual] {
        let t = TestApp::spawn_with(
            backend.clone(),
            Opts { hold_seconds: 0, ignore_close: true, late_policy: policy, ..Default::default() },
        )
        .await;
        t.create_sku("LAMP", "Lamp", 990, 1).await;
        // With stock left: reallocate takes it again.
        let (_, order_no, attempt_ref) = t.pending_order(&[("LAMP", 1)]).await;
        t.app.sweeper.step().await.unwrap();
        t.complete(&attempt_ref, "succeeded", 2).await;
        t.settle().await;
        t.app.refunder.step().await.unwrap();
        t.settle().await;
        let expected = match policy {
            LatePolicy::Reallocate => "paid",
            LatePolicy::Refund => "refunded",
            LatePolicy::Manual => "paid_after_expiry",
        };
        assert_eq!(t.status(&order_no).await, expected, "{policy:?}");
        if policy == LatePolicy::Manual {
            let (status, body) =
                post_json(&t, &format!("/api/v1/admin/orders/{order_no}/accept"), ADMIN, json!({})).await;
            assert_eq!(status, StatusCode::OK, "{body}");
            assert_eq!(t.status(&order_no).await, "paid");
        }
        assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'late_payment'").await, 1);
        t.assert_clean().await;

        // Without stock: reallocate falls back to an automatic refund; manual waits for a refund.
        t.create_sku("RARE", "Rare", 500, 1).await;
        let (_, late_order, late_ref) = t.pending_order(&[("RARE", 1)]).await;
        t.app.sweeper.step().await.unwrap();
        let (_, other_ref) = {
            let (b, o, r) = t.pending_order(&[("RARE", 1)]).await;
            let _ = (b, o);
            ((), r)
        };
        t.complete(&other_ref, "succeeded", 1).await;
        t.settle().await;
        t.complete(&late_ref, "succeeded", 1).await;
        t.settle().await;
        t.app.refunder.step().await.unwrap();
        t.settle().await;
        if policy == LatePolicy::Manual {
            assert_eq!(t.status(&late_order).await, "paid_after_expiry");
            let (status, body) =
                post_json(&t, &format!("/api/v1/admin/orders/{late_order}/accept"), ADMIN, json!({})).await;
            assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "out_of_stock".into()));
            let (status, _) = refund(&t, &late_order, "MANUAL-1", 500).await;
            assert_eq!(status, StatusCode::CREATED);
            t.settle().await;
        }
        assert_eq!(t.status(&late_order).await, "refunded", "{policy:?}");
        assert_eq!(t.sku("RARE").await["sold"], 1);
        t.assert_clean().await;
    }
}

on_both!(a_second_capture_is_refunded_automatically, duplicate_payment);
async fn duplicate_payment(backend: Backend) {
    let t = TestApp::spawn_with(backend, Opts { ignore_close: true, ..Default::default() }).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (buyer, order_no, first) = t.pending_order(&[("MUG", 1)]).await;
    // Retry: a second attempt; the first is superseded (the faulty gateway still lets it be paid).
    let (status, retry) = post_json(&t, &format!("/api/v1/orders/{order_no}/attempts"), &buyer, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{retry}");
    let second = s(&retry["attempt_ref"]);
    assert_ne!(first, second);
    assert_eq!(
        t.count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM payment_attempts WHERE status IN ('created','redirected','unknown')"
        )
        .await,
        1
    );
    // The second attempt pays first (its notification applied), then the superseded one is paid.
    t.complete(&second, "succeeded", 1).await;
    t.settle().await;
    t.complete(&first, "succeeded", 1).await;
    t.settle().await;
    t.app.refunder.step().await.unwrap();
    t.settle().await;
    let order = t.order(&order_no).await;
    assert_eq!(order["status"], "paid", "{order}");
    let refunds = order["refunds"].as_array().unwrap();
    assert_eq!(refunds.len(), 1);
    assert_eq!(refunds[0]["refund_no"], format!("DUP-{first}"));
    assert_eq!(refunds[0]["status"], "succeeded");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'duplicate_payment'").await, 1);
    t.assert_clean().await;
}

on_both!(retry_and_cancel, retry_cancel);
async fn retry_cancel(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (buyer, order_no, first) = t.pending_order(&[("MUG", 2)]).await;
    let stranger = t.buyer().await;
    let (status, _) = post_json(&t, &format!("/api/v1/orders/{order_no}/attempts"), &stranger, json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, retry) = post_json(&t, &format!("/api/v1/orders/{order_no}/attempts"), &buyer, json!({})).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(retry["payment"]["type"], "form");
    // The superseded attempt was closed at the gateway: it can no longer be paid.
    let (status, body) = t.complete(&first, "succeeded", 1).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "payment_closed".into()));
    // Cancel, with a new basket built from the order.
    let (status, cancelled) =
        post_json(&t, &format!("/api/v1/orders/{order_no}/cancel"), &buyer, json!({"rebasket": true})).await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(t.sku("MUG").await["reserved"], 0);
    let basket = s(&cancelled["basket_id"]);
    let r = t.http.get(t.url(&format!("/api/v1/baskets/{basket}"))).bearer_auth(&buyer).send().await.unwrap();
    let b: Value = r.json().await.unwrap();
    assert_eq!(
        (b["status"].as_str(), b["lines"][0]["sku"].as_str(), b["lines"][0]["quantity"].as_i64()),
        (Some("open"), Some("MUG"), Some(2))
    );
    let (status, _) = post_json(&t, &format!("/api/v1/orders/{order_no}/cancel"), &buyer, json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, body) = t.complete(&s(&retry["attempt_ref"]), "succeeded", 1).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "payment_closed".into()));
    // The new basket checks out as a new order.
    let (status, _) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::CREATED);
    t.assert_clean().await;
}

on_both!(check_reports_key_money_and_outbox_corruption, check_corruption);
async fn check_corruption(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    digital_sku(&t, "GAME", &["A", "B"]).await;
    let (_, paid, attempt_ref) = t.pending_order(&[("GAME", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let (_, unpaid, _) = t.pending_order(&[("GAME", 1)]).await;
    t.assert_clean().await;
    let pool = t.app.state.db.read_pool();
    sql::query("UPDATE card_keys SET status = 'delivered', order_no = $1, line_no = 1 WHERE status = 'available'")
        .bind(&unpaid)
        .execute(pool)
        .await
        .unwrap();
    sql::query("UPDATE orders SET captured_minor = 1 WHERE order_no = $1").bind(&paid).execute(pool).await.unwrap();
    // The paid order's key gone: its delivered line holds none.
    sql::query("DELETE FROM card_keys WHERE order_no = $1").bind(&paid).execute(pool).await.unwrap();
    sql::query("INSERT INTO outbox (id, order_no, topic, payload, status, tries, next_at, lease_until, created_at) VALUES ('x', $1, 'order.paid', '{}', 'pending', 0, 0, 0, 0)")
        .bind(&unpaid)
        .execute(pool)
        .await
        .unwrap();
    // A second payment message for the paid order, and a refund the shop never heard of.
    sql::query("INSERT INTO outbox (id, order_no, topic, payload, status, tries, next_at, lease_until, created_at) VALUES ('y', $1, 'order.paid', '{}', 'pending', 0, 0, 0, 0)")
        .bind(&paid)
        .execute(pool)
        .await
        .unwrap();
    sql::query(
        "INSERT INTO refunds (refund_no, order_no, attempt_ref, amount_minor, currency, reason, kind, status, tries, next_at, lease_until, created_at, updated_at) \
         VALUES ('R-SILENT', $1, $2, 1, 'CNY', '', 'merchant', 'succeeded', 0, 0, 0, 0, 0)",
    )
    .bind(&paid)
    .bind(&attempt_ref)
    .execute(pool)
    .await
    .unwrap();
    let v: Vec<String> = t.violations().await.iter().map(|v| v.to_string()).collect();
    assert!(v.iter().any(|l| l.starts_with("I3:") && l.contains("never paid")), "{v:#?}");
    assert!(
        v.iter().any(|l| l.starts_with("I3:") && l.contains(&format!("order {paid} line 1 is delivered with 0 keys"))),
        "{v:#?}"
    );
    assert!(v.iter().any(|l| l.starts_with("I9:") && l.contains("unsold")), "{v:#?}");
    assert!(v.iter().any(|l| l.starts_with("I8:") && l.contains(&format!("order {paid} has 2 order.paid"))), "{v:#?}");
    assert!(
        v.iter().any(|l| l.starts_with("I8:") && l.contains("R-SILENT") && l.contains("refund.requested")),
        "{v:#?}"
    );
    assert!(
        v.iter().any(|l| l.starts_with("I8:") && l.contains("R-SILENT") && l.contains("refund.succeeded")),
        "{v:#?}"
    );
    assert!(v.iter().any(|l| l.starts_with("I4:") && l.contains(&paid)), "{v:#?}");
    assert!(v.iter().any(|l| l.starts_with("I8:") && l.contains(&unpaid)), "{v:#?}");
}

on_both!(check_reports_reservation_attempt_and_event_corruption, check_corruption_more);
async fn check_corruption_more(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, paid, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let (_, pending, _) = t.pending_order(&[("MUG", 1)]).await;
    t.assert_clean().await;
    let pool = t.app.state.db.read_pool();
    // I2: a paid order whose reservation still counts as held.
    sql::query("UPDATE reservations SET status = 'active' WHERE order_no = $1")
        .bind(&paid)
        .execute(pool)
        .await
        .unwrap();
    // I5: a second active attempt (the partial unique index forbids it, so drop it first).
    sql::query("DROP INDEX payment_attempts_one_active").execute(pool).await.unwrap();
    sql::query(
        "INSERT INTO payment_attempts (attempt_ref, order_no, seq, gateway, channel, status, amount_minor, currency, created_at, updated_at) \
         VALUES ($1, $2, 9, 'sandbox', 'form', 'created', 8900, 'CNY', 0, 0)",
    )
    .bind(format!("{pending}_9"))
    .bind(&pending)
    .execute(pool)
    .await
    .unwrap();
    // I6: an applied notification that caused no transition.
    sql::query(
        "INSERT INTO notifications (id, gateway, event_id, claimed_event_id, status, raw_body, received_at) \
         VALUES ('n-fake', 'sandbox', 'evt_fake', 'evt_fake', 'applied', $1, 0)",
    )
    .bind(b"{}".to_vec())
    .execute(pool)
    .await
    .unwrap();
    let v: Vec<String> = t.violations().await.iter().map(|v| v.to_string()).collect();
    assert!(v.iter().any(|l| l.starts_with("I2:") && l.contains(&paid)), "{v:#?}");
    assert!(v.iter().any(|l| l.starts_with("I5:") && l.contains(&pending) && l.contains("2 active")), "{v:#?}");
    assert!(v.iter().any(|l| l.starts_with("I6:") && l.contains("evt_fake")), "{v:#?}");
    assert!(v.iter().any(|l| l.starts_with("I7:") && l.contains(&format!("{pending}_9"))), "{v:#?}");
}

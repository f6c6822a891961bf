//! The surface a shop's backend integrates with: its own reference and metadata on an order,
//! return and cancel URLs under the allowed origins, webhook payloads with the payment's and the
//! refund's facts and a resend, the public catalog, order lists paged by cursor, and CSV exports.

use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ADMIN, Backend, Opts, SHOP_KEY, TestApp, answer, s};
use crate::lifecycle::{verify_webhook, webhook};
use crate::on_both;

/// A checkout with `body` of a new basket of `lines` for `buyer`, sent by the shop's server (its
/// key): status, answer, and whether it was answered as a replay.
async fn shop_checkout(t: &TestApp, buyer: &str, lines: &[(&str, i64)], body: Value) -> (StatusCode, Value, bool) {
    let basket = t.basket(buyer, lines).await;
    let r = t.checkout_request(buyer, &basket, &body).header("kassa-shop-key", SHOP_KEY).send().await.unwrap();
    let replayed = r.headers().get("idempotent-replayed").is_some();
    let (status, answer) = answer(r).await;
    (status, answer, replayed)
}

async fn get(t: &TestApp, path: &str, token: &str) -> (StatusCode, Value) {
    let r = t.http.get(t.url(path)).bearer_auth(token).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

on_both!(a_merchant_reference_answers_its_first_order_and_metadata_rides_along, shop_reference);
async fn shop_reference(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 50).await;
    let buyer = t.buyer().await;
    let body =
        json!({"gateway": "sandbox", "merchant_reference": "PO-1", "metadata": {"crm_id": "42", "note": "gift"}});
    let (status, first, replayed) = shop_checkout(&t, &buyer, &[("MUG", 1)], body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert!(!replayed);
    assert_eq!(first["merchant_reference"], "PO-1");
    assert_eq!(first["metadata"], json!({"crm_id": "42", "note": "gift"}));
    let order_no = s(&first["order_no"]);
    // The shop retries with a new basket: the first order is the answer, and nothing more is held.
    let (status, again, replayed) = shop_checkout(&t, &buyer, &[("MUG", 3)], body.clone()).await;
    assert_eq!((status, s(&again["order_no"]), replayed), (StatusCode::CREATED, order_no.clone(), true), "{again}");
    assert_eq!(t.sku("MUG").await["reserved"], 1);
    // A buyer's own request (no shop key) may not name the shop's fields: a buyer could otherwise
    // take the shop's next reference, or have a webhook name a purchase order it did not pay.
    for body in [json!({"merchant_reference": "PO-500"}), json!({"metadata": {"po": "500"}})] {
        let basket = t.basket(&buyer, &[("MUG", 1)]).await;
        let (status, refused) = t.checkout_with(&buyer, &basket, &body).await;
        assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::FORBIDDEN, "shop_key_required".into()));
    }
    assert_eq!(t.sku("MUG").await["reserved"], 1);
    // Another buyer cannot take it, nor learn the order.
    let stranger = t.buyer().await;
    let (status, refused, _) = shop_checkout(&t, &stranger, &[("MUG", 1)], body).await;
    assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::CONFLICT, "merchant_reference_taken".into()));
    assert!(!refused.to_string().contains(&order_no), "{refused}");
    // The order carries both, for its buyer and for the admin.
    let (status, order) = get(&t, &format!("/api/v1/orders/{order_no}"), &buyer).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (order["merchant_reference"].clone(), order["metadata"]["crm_id"].clone()),
        (json!("PO-1"), json!("42"))
    );
    assert_eq!(t.order(&order_no).await["metadata"]["note"], "gift");
    // Bad input is refused, naming the field.
    let many: serde_json::Map<String, Value> = (0..21).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (body, code) in [
        (json!({"metadata": {"n": 1}}), "invalid_metadata"),
        (json!({"metadata": many}), "invalid_metadata"),
        (json!({"metadata": {"k": "v".repeat(501)}}), "invalid_metadata"),
        (json!({"merchant_reference": "x".repeat(65)}), "invalid_merchant_reference"),
        (json!({"merchant_reference": ""}), "invalid_merchant_reference"),
    ] {
        let (status, answer, _) = shop_checkout(&t, &buyer, &[("MUG", 1)], body).await;
        assert_eq!((status, s(&answer["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, code.into()), "{answer}");
    }
    // Checkouts racing with one new reference: one order, every answer names it.
    let mut racing = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let basket = t.basket(&buyer, &[("MUG", 1)]).await;
        let request = t
            .checkout_request(&buyer, &basket, &json!({"gateway": "sandbox", "merchant_reference": "PO-RACE"}))
            .header("kassa-shop-key", SHOP_KEY);
        racing.spawn(async move {
            let r = request.send().await.unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        });
    }
    let mut answered = BTreeSet::new();
    while let Some(done) = racing.join_next().await {
        let (status, body) = done.unwrap();
        assert_eq!(status, StatusCode::CREATED, "{body}");
        answered.insert(s(&body["order_no"]));
    }
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders WHERE merchant_reference = 'PO-RACE'").await, 1);
    // The admin finds an order by its reference.
    let (_, page) = get(&t, "/api/v1/admin/orders?q=PO-1", ADMIN).await;
    let found: Vec<String> = page["items"].as_array().unwrap().iter().map(|o| s(&o["order_no"])).collect();
    assert_eq!(found, [order_no]);
    t.assert_clean().await;
}

/// Where the sandbox gateway was told to send the buyer back to after paying `attempt_ref`.
async fn sandbox_return_url(t: &TestApp, attempt_ref: &str) -> String {
    kassa::store::sql::query_scalar("SELECT return_url FROM sandbox_payments WHERE attempt_ref = $1")
        .bind(attempt_ref)
        .fetch_one(t.sandbox_records().read_pool())
        .await
        .unwrap()
}

on_both!(return_and_cancel_urls_are_held_to_the_allowed_origins, return_urls);
async fn return_urls(backend: Backend) {
    let body = json!({
        "gateway": "sandbox",
        "return_url": "https://shop.example/orders/{order_no}/thanks",
        "cancel_url": "https://shop.example/basket",
    });
    // None allowed (the default): refused, naming the field.
    let t = TestApp::spawn(backend.clone()).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let buyer = t.buyer().await;
    let (status, answer, _) = shop_checkout(&t, &buyer, &[("MUG", 1)], body.clone()).await;
    assert_eq!(
        (status, s(&answer["error"]["code"])),
        (StatusCode::UNPROCESSABLE_ENTITY, "return_url_not_allowed".into())
    );
    assert!(s(&answer["error"]["message"]).starts_with("return_url"), "{answer}");
    assert_eq!(t.sku("MUG").await["reserved"], 0, "nothing held for a refused checkout");
    drop(t);

    let t = TestApp::spawn_with(
        backend,
        Opts { allowed_return_origins: vec!["https://shop.example"], ..Default::default() },
    )
    .await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let buyer = t.buyer().await;
    let (status, placed, _) = shop_checkout(&t, &buyer, &[("MUG", 1)], body).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let order_no = s(&placed["order_no"]);
    // The gateway was told to send the buyer back to the shop's page for this order.
    let return_url = sandbox_return_url(&t, &s(&placed["attempt_ref"])).await;
    assert_eq!(return_url, format!("https://shop.example/orders/{order_no}/thanks"));
    // Another origin, or one dressed up as it, is refused.
    for bad in ["https://shop.example.evil.test/", "https://shop.example@evil.test/", "javascript:alert(1)"] {
        let (status, answer, _) =
            shop_checkout(&t, &buyer, &[("MUG", 1)], json!({"gateway": "sandbox", "cancel_url": bad})).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {answer}");
        assert_eq!(answer["error"]["code"], "return_url_not_allowed");
    }
    // Without one, kassa's own return page remains the default.
    let (_, placed, _) = shop_checkout(&t, &buyer, &[("MUG", 1)], json!({"gateway": "sandbox"})).await;
    let return_url = sandbox_return_url(&t, &s(&placed["attempt_ref"])).await;
    assert!(return_url.ends_with(&format!("/checkout/return/{}", s(&placed["attempt_ref"]))), "{return_url}");
}

/// What the webhook received for `topic`, as JSON, with its headers checked.
fn received(hook: &crate::lifecycle::Webhook, topic: &str) -> Vec<(String, Value)> {
    hook.received
        .lock()
        .unwrap()
        .iter()
        .filter(|(h, _)| h["kassa-topic"] == topic)
        .map(|(h, body)| {
            verify_webhook(h, body);
            (h["kassa-event-id"].to_str().unwrap().to_string(), serde_json::from_str(body).unwrap())
        })
        .collect()
}

on_both!(webhooks_carry_the_payment_and_refund_and_can_be_sent_again, webhook_payloads);
async fn webhook_payloads(backend: Backend) {
    let hook = webhook(0).await;
    let t = TestApp::spawn_with(
        backend,
        Opts { manual_clock: true, webhook_url: Some(hook.url.clone()), ..Default::default() },
    )
    .await;
    t.create_sku("MUG", "Mug", 1000, 5).await;
    let buyer = t.buyer().await;
    let (_, placed, _) = shop_checkout(
        &t,
        &buyer,
        &[("MUG", 1)],
        json!({"gateway": "sandbox", "merchant_reference": "PO-7", "metadata": {"crm_id": "7"}}),
    )
    .await;
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    // With a webhook URL, unsent messages are pending, not "no webhook configured".
    let (browser, cookie, _) = crate::pages::console(&t).await;
    let html = browser.get(t.url(&format!("/admin/orders/{order_no}"))).header("cookie", &cookie).send().await.unwrap();
    let html = html.text().await.unwrap();
    assert!(html.contains("pill pending") && !html.contains("no-webhook"), "{html}");
    let relay = t.app.relay.clone().unwrap();
    relay.step().await.unwrap();
    let paid = received(&hook, "order.paid");
    assert_eq!(paid.len(), 1);
    let (paid_id, data) = (&paid[0].0, &paid[0].1["data"]);
    let txn = t.order(&order_no).await["attempts"][0]["gateway_txn_id"].clone();
    assert!(txn.is_string(), "the sandbox gave a transaction id");
    for (field, want) in [
        ("order_no", json!(order_no)),
        ("merchant_reference", json!("PO-7")),
        ("metadata", json!({"crm_id": "7"})),
        ("attempt_ref", json!(attempt_ref)),
        ("gateway", json!("sandbox")),
        ("gateway_txn_id", txn.clone()),
        ("total_minor", json!(1000)),
        ("captured_minor", json!(1000)),
        ("refunded_minor", json!(0)),
    ] {
        assert_eq!(data[field], want, "order.paid {field}: {data}");
    }
    // A partial refund: its message names the refund, the payment it returns, and the order's data.
    let (status, _) = t
        .admin_post(
            &format!("/api/v1/admin/orders/{order_no}/refunds"),
            json!({"refund_no": "RF-1", "amount_minor": 300, "reason": "scratch"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    t.settle().await;
    relay.step().await.unwrap();
    let refunded = received(&hook, "refund.succeeded");
    assert_eq!(refunded.len(), 1, "{:?}", hook.received.lock().unwrap().len());
    let data = &refunded[0].1["data"];
    for (field, want) in [
        ("refund_no", json!("RF-1")),
        ("amount_minor", json!(300)),
        ("refunded_minor", json!(300)),
        ("captured_minor", json!(1000)),
        ("attempt_ref", json!(attempt_ref)),
        ("gateway", json!("sandbox")),
        ("gateway_txn_id", txn),
        ("merchant_reference", json!("PO-7")),
        ("metadata", json!({"crm_id": "7"})),
    ] {
        assert_eq!(data[field], want, "refund.succeeded {field}: {data}");
    }

    // The admin lists the order's messages and sends order.paid again, under its original id.
    let (status, list) = get(&t, &format!("/api/v1/admin/webhooks?order_no={order_no}&status=delivered"), ADMIN).await;
    assert_eq!(status, StatusCode::OK);
    let listed: Vec<&Value> = list["items"].as_array().unwrap().iter().filter(|m| m["topic"] == "order.paid").collect();
    assert_eq!((listed.len(), s(&listed[0]["id"])), (1, paid_id.clone()));
    assert_eq!(listed[0]["tries"], 1);
    let resend = format!("/api/v1/admin/webhooks/{paid_id}/resend");
    let (status, queued) = t.admin_post(&resend, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{queued}");
    assert_eq!((queued["status"].clone(), queued["resends"].clone()), (json!("pending"), json!(1)));
    let (status, again) = t.admin_post(&resend, json!({})).await;
    assert_eq!((status, s(&again["error"]["code"])), (StatusCode::CONFLICT, "webhook_pending".into()));
    relay.step().await.unwrap();
    let paid = received(&hook, "order.paid");
    assert_eq!(paid.len(), 2);
    assert_eq!(paid[1].0, *paid_id, "sent again with its original id");
    assert_eq!(paid[1].1, paid[0].1, "and its original body");
    let (status, _) = t.admin_post("/api/v1/admin/webhooks/nope/resend", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, bad) = get(&t, "/api/v1/admin/webhooks?status=lost", ADMIN).await;
    assert_eq!((status, s(&bad["error"]["code"])), (StatusCode::BAD_REQUEST, "invalid_filter".into()));
    t.assert_clean().await;
}

on_both!(orders_page_by_cursor_and_export_as_csv, lists_and_exports);
async fn lists_and_exports(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 50).await;
    t.create_sku("LAMP", "=Lamp", 1250, 50).await;
    // Catalog: public, on sale, with what can be ordered.
    let r = t.http.get(t.url("/api/v1/catalog")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let catalog: Value = r.json().await.unwrap();
    let mug = catalog["items"].as_array().unwrap().iter().find(|i| i["sku"] == "MUG").unwrap().clone();
    assert_eq!((mug["price_minor"].clone(), mug["available"].clone()), (json!(8900), json!(50)));
    assert!(mug.get("sold").is_none() && mug.get("on_hand").is_none(), "the shop's books stay private: {mug}");

    let mut placed = Vec::new();
    for i in 0..7 {
        let sku = if i % 2 == 0 { "MUG" } else { "LAMP" };
        let (_, order_no, attempt_ref) = t.pending_order(&[(sku, 1)]).await;
        if i < 4 {
            t.complete(&attempt_ref, "succeeded", 1).await;
        }
        placed.push(order_no);
    }
    t.settle().await;
    // Every order exactly once across pages of three, newest first.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    for _ in 0..10 {
        let (status, page) = get(&t, &format!("/api/v1/admin/orders?limit=3&cursor={cursor}"), ADMIN).await;
        assert_eq!(status, StatusCode::OK, "{page}");
        assert!(page["items"].as_array().unwrap().len() <= 3);
        seen.extend(page["items"].as_array().unwrap().iter().map(|o| s(&o["order_no"])));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
    }
    let mut newest_first = placed.clone();
    newest_first.reverse();
    assert_eq!(seen, newest_first);
    // Filters narrow it.
    let count = |path: String| {
        let t = &t;
        async move { get(t, &path, ADMIN).await.1["items"].as_array().map_or(0, Vec::len) }
    };
    assert_eq!(count("/api/v1/admin/orders?status=paid".into()).await, 4);
    assert_eq!(count("/api/v1/admin/orders?sku=LAMP".into()).await, 3);
    // A SKU's orders page by page (read from its lines' index) as on one page, newest first.
    let (_, one_page) = get(&t, "/api/v1/admin/orders?sku=LAMP", ADMIN).await;
    let one_page: Vec<String> = one_page["items"].as_array().unwrap().iter().map(|o| s(&o["order_no"])).collect();
    let (mut by_one, mut cursor) = (Vec::new(), String::new());
    for _ in 0..5 {
        let (_, page) = get(&t, &format!("/api/v1/admin/orders?sku=LAMP&limit=1&cursor={cursor}"), ADMIN).await;
        by_one.extend(page["items"].as_array().unwrap().iter().map(|o| s(&o["order_no"])));
        match page["next_cursor"].as_str() {
            Some(next) => cursor = next.to_string(),
            None => break,
        }
    }
    assert_eq!(by_one, one_page);
    assert!(newest_first.iter().filter(|o| one_page.contains(o)).eq(one_page.iter()), "newest first");
    assert_eq!(count("/api/v1/admin/orders?gateway=sandbox&status=pending_payment".into()).await, 3);
    assert_eq!(count("/api/v1/admin/orders?from=2999-01-01".into()).await, 0);
    assert_eq!(count("/api/v1/admin/orders?to=2999-01-01&from=2000-01-01".into()).await, 7);
    let (status, bad) = get(&t, "/api/v1/admin/orders?cursor=garbage", ADMIN).await;
    assert_eq!((status, s(&bad["error"]["code"])), (StatusCode::BAD_REQUEST, "invalid_cursor".into()));
    let (status, _) = get(&t, "/api/v1/admin/orders", "not-the-admin").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // A refund to export.
    let (status, _) = t
        .admin_post(
            &format!("/api/v1/admin/orders/{}/refunds", placed[0]),
            json!({"refund_no": "RF-CSV", "amount_minor": 300}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    t.settle().await;

    let csv_of = |path: &'static str| {
        let t = &t;
        async move {
            let r = t.http.get(t.url(path)).bearer_auth(ADMIN).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/csv"));
            let text = r.text().await.unwrap();
            let mut reader = csv::Reader::from_reader(text.as_bytes());
            let header: Vec<String> = reader.headers().unwrap().iter().map(str::to_string).collect();
            let rows: Vec<Vec<String>> =
                reader.records().map(|r| r.unwrap().iter().map(str::to_string).collect()).collect();
            (header, rows)
        }
    };
    let (header, rows) = csv_of("/api/v1/admin/orders.csv").await;
    let at = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(rows.len(), 7);
    let first = rows.iter().find(|r| r[at("order_no")] == placed[0]).unwrap();
    assert_eq!(
        (first[at("total")].as_str(), first[at("captured")].as_str(), first[at("refunded")].as_str()),
        ("89.00", "89.00", "3.00"),
        "money in major units"
    );
    assert_eq!(first[at("lines")], "MUG x1");
    assert!(!first[at("gateway_txn_id")].is_empty());
    let (_, paid_rows) = csv_of("/api/v1/admin/orders.csv?status=paid&sku=LAMP").await;
    assert_eq!(paid_rows.len(), 2);
    let (header, rows) = csv_of("/api/v1/admin/refunds.csv?from=2000-01-01").await;
    let at = |name: &str| header.iter().position(|h| h == name).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0][at("refund_no")].as_str(), rows[0][at("amount")].as_str()), ("RF-CSV", "3.00"));
    let (_, none) = csv_of("/api/v1/admin/refunds.csv?to=2000-01-01").await;
    assert!(none.is_empty());
    let r = t.http.get(t.url("/api/v1/admin/orders.csv?from=soon")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

// A gateway's orders are read from its attempts: each order once however many attempts it made
// there, under each gateway it tried, newest first page by page as on one page; a gateway no
// order tried lists nothing.
on_both!(a_gateways_orders_page_once_each, gateway_pages);
async fn gateway_pages(backend: Backend) {
    let w = crate::common::Shop::start(backend, Opts::default(), 10).await;
    let retry = |order_no: String, gateway: &'static str| {
        let w = &w;
        async move {
            let path = format!("/api/v1/orders/{order_no}/attempts");
            let r = w.t.http.post(w.t.url(&path)).bearer_auth(ADMIN).json(&json!({"gateway": gateway})).send().await;
            let (status, body) = answer(r.unwrap()).await;
            assert_eq!(status, StatusCode::CREATED, "{body}");
        }
    };
    let mut placed = Vec::new();
    for first in ["sandbox", "alipay", "sandbox", "alipay"] {
        let body =
            if first == "alipay" { json!({"gateway": "alipay", "channel": "qr"}) } else { json!({"gateway": first}) };
        let (status, order) = w.checkout(body).await;
        assert_eq!(status, StatusCode::CREATED, "{order}");
        placed.push(s(&order["order_no"]));
    }
    // Twice on the sandbox; on Alipay, then on the sandbox.
    retry(placed[0].clone(), "sandbox").await;
    retry(placed[1].clone(), "alipay").await;
    retry(placed[1].clone(), "sandbox").await;
    let listed = |gateway: &'static str, limit: usize| {
        let w = &w;
        async move {
            let (mut orders, mut cursor) = (Vec::new(), String::new());
            for _ in 0..10 {
                let path = format!("/api/v1/admin/orders?gateway={gateway}&limit={limit}&cursor={cursor}");
                let (status, page) = get(&w.t, &path, ADMIN).await;
                assert_eq!(status, StatusCode::OK, "{page}");
                orders.extend(page["items"].as_array().unwrap().iter().map(|o| s(&o["order_no"])));
                match page["next_cursor"].as_str() {
                    Some(next) => cursor = next.to_string(),
                    None => return orders,
                }
            }
            panic!("{gateway}: more pages than orders");
        }
    };
    let newest_first = |of: &[usize]| of.iter().rev().map(|&i| placed[i].clone()).collect::<Vec<_>>();
    for limit in [1, 50] {
        assert_eq!(listed("sandbox", limit).await, newest_first(&[0, 1, 2]), "by {limit}");
        assert_eq!(listed("alipay", limit).await, newest_first(&[1, 3]), "by {limit}");
        assert!(listed("stripe", limit).await.is_empty());
    }
    let (_, page) = get(&w.t, "/api/v1/admin/orders?gateway=sandbox&status=pending_payment&limit=2", ADMIN).await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2, "{page}");
    let text = w.t.http.get(w.t.url("/api/v1/admin/orders.csv?gateway=sandbox")).bearer_auth(ADMIN).send().await;
    let text = text.unwrap().text().await.unwrap();
    let exported: Vec<String> =
        csv::Reader::from_reader(text.as_bytes()).records().map(|r| r.unwrap()[0].to_string()).collect();
    assert_eq!(exported, newest_first(&[0, 1, 2]));
}

// An export larger than one batch streams every row once, in order.
on_both!(an_export_spans_batches, export_batches);
async fn export_batches(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 100, 10_000).await;
    let n = usize::try_from(kassa::http::api_lists::EXPORT_BATCH).unwrap() + 7;
    let mut tasks = tokio::task::JoinSet::new();
    let t = std::sync::Arc::new(t);
    for _ in 0..n {
        let t = t.clone();
        tasks.spawn(async move { t.pending_order(&[("MUG", 1)]).await.1 });
    }
    let mut placed = BTreeSet::new();
    while let Some(o) = tasks.join_next().await {
        placed.insert(o.unwrap());
    }
    let text =
        t.http.get(t.url("/api/v1/admin/orders.csv")).bearer_auth(ADMIN).send().await.unwrap().text().await.unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let exported: Vec<String> = reader.records().map(|r| r.unwrap()[0].to_string()).collect();
    assert_eq!(exported.len(), n);
    assert_eq!(exported.iter().cloned().collect::<BTreeSet<_>>(), placed, "each order once");
}

/// A verification snippet of docs/webhooks.md, run as the shop's endpoint: its output lines.
struct Receiver {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    url: String,
}

impl Receiver {
    /// Starts `program file PORT SECRET` from docs/webhooks/.
    fn start(program: &str, file: &str) -> Receiver {
        use std::io::BufRead as _;
        let port = crate::fleet::free_port();
        let path = format!("{}/docs/webhooks/{file}", env!("CARGO_MANIFEST_DIR"));
        let mut child = std::process::Command::new(program)
            .args([path.as_str(), &port.to_string(), crate::common::WEBHOOK_SECRET])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        // Owned (and killed on drop) before anything can fail.
        let receiver = Receiver { child, lines, url: format!("http://127.0.0.1:{port}/kassa-events") };
        // Listening once a connection is accepted (bounded wait: synchronisation only).
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return receiver;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("{file} did not listen on {port}");
    }

    fn next_line(&self) -> String {
        self.lines.recv_timeout(std::time::Duration::from_secs(20)).expect("the snippet printed a line")
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The Python snippet of docs/webhooks.md verifies what a real kassa sends, and refuses a forged
/// signature and a stale one.
#[cfg_attr(not(kassa_test_python), ignore = "python3 was not installed when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_documented_python_webhook_snippet_verifies_kassa_and_refuses_forgeries() {
    webhook_snippet("python3", "verify.py").await;
}

/// The Node.js snippet of docs/webhooks.md, the same.
#[cfg_attr(not(kassa_test_node), ignore = "node (Node.js) was not installed when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_documented_node_webhook_snippet_verifies_kassa_and_refuses_forgeries() {
    webhook_snippet("node", "verify.js").await;
}

/// Under `CI=true` the webhook snippets' tests must have been built to run.
#[test]
fn webhook_snippet_tests_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !(cfg!(kassa_test_python) && cfg!(kassa_test_node)) {
        panic!("CI=true but python3 or node was not installed when the tests were built");
    }
}

async fn webhook_snippet(program: &str, file: &str) {
    {
        let receiver = Receiver::start(program, file);
        let t = TestApp::spawn_with(
            Backend::Sqlite,
            Opts { manual_clock: false, webhook_url: Some(receiver.url.clone()), ..Default::default() },
        )
        .await;
        t.create_sku("MUG", "Mug", 1000, 5).await;
        let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
        t.complete(&attempt_ref, "succeeded", 1).await;
        t.settle().await;
        t.app.relay.clone().unwrap().step().await.unwrap();
        let mut topics = BTreeSet::new();
        for _ in 0..2 {
            let line = receiver.next_line();
            let mut words = line.split(' ');
            assert_eq!(words.next(), Some("verified"), "{file}: {line}");
            topics.insert(words.next().unwrap().to_string());
        }
        assert_eq!(topics, BTreeSet::from(["order.paid".to_string(), "fulfilment.requested".to_string()]));
        let delivered = t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM outbox WHERE status = 'delivered'").await;
        assert_eq!(delivered, 2, "{file} acknowledged both");
        // Forgeries: a body the signature was not made over, and a signature from long ago.
        let body = format!(r#"{{"topic":"order.paid","order_no":"{order_no}"}}"#);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let sign = |t: u64, body: &str| {
            let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, crate::common::WEBHOOK_SECRET.as_bytes());
            hex::encode(aws_lc_rs::hmac::sign(&key, format!("{t}.{body}").as_bytes()).as_ref())
        };
        for (t_, v1, why) in [
            (now, sign(now, "{}"), "signature mismatch"),
            (now - 3600, sign(now - 3600, &body), "timestamp outside tolerance"),
        ] {
            let r = t
                .http
                .post(&receiver.url)
                .header("Kassa-Signature", format!("t={t_},v1={v1}"))
                .header("Kassa-Event-Id", "forged")
                .body(body.clone())
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{file}: {why}");
            assert_eq!(receiver.next_line(), format!("refused {why}"), "{file}");
        }
    }
}

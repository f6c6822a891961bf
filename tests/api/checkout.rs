use std::collections::BTreeSet;

use reqwest::StatusCode;
use serde_json::json;

use kassa::store::catalog;

use crate::common::{Backend, TestApp, s};
use crate::on_both;

on_both!(fifty_buyers_ten_units_never_oversell, fifty_buyers_ten_units);
async fn fifty_buyers_ten_units(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("HOT", "Hot item", 990, 10).await;
    // Sessions and baskets first, so the checkouts themselves race.
    let mut carts = Vec::new();
    for _ in 0..50 {
        let buyer = t.buyer().await;
        let basket = t.basket(&buyer, &[("HOT", 1)]).await;
        carts.push((buyer, basket));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for (buyer, basket) in carts {
        let request = t.checkout_request(&buyer, &basket, &json!({"gateway": "sandbox"}));
        tasks.spawn(async move {
            let r = request.send().await.unwrap();
            let status = r.status();
            let body: serde_json::Value = r.json().await.unwrap();
            (status, body)
        });
    }
    let (mut created, mut out_of_stock, mut orders) = (0, 0, BTreeSet::new());
    while let Some(done) = tasks.join_next().await {
        let (status, body) = done.unwrap();
        match status {
            StatusCode::CREATED => {
                created += 1;
                orders.insert(s(&body["order_no"]));
            }
            StatusCode::CONFLICT => {
                assert_eq!(body["error"]["code"], "out_of_stock", "{body}");
                out_of_stock += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((created, out_of_stock, orders.len()), (10, 40, 10));
    let sku = t.sku("HOT").await;
    assert_eq!(
        (sku["on_hand"].as_i64(), sku["reserved"].as_i64(), sku["available"].as_i64()),
        (Some(10), Some(10), Some(0))
    );
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 10);
    t.assert_clean().await;

    // Pay half; the rest expire: the numbers still add up.
    let list: Vec<String> = orders.into_iter().collect();
    for order_no in &list[..5] {
        t.complete(&format!("{order_no}_1"), "succeeded", 1).await;
    }
    t.settle().await;
    for order_no in &list[5..] {
        let order_no = kassa::domain::ids::OrderNo::parse(order_no).unwrap();
        kassa::store::expiry::expire_order(&t.app.state.db, &order_no, t.now_ms() + 10_000_000).await.unwrap();
    }
    let sku = t.sku("HOT").await;
    assert_eq!((sku["on_hand"].as_i64(), sku["reserved"].as_i64(), sku["sold"].as_i64()), (Some(5), Some(0), Some(5)));
    t.assert_clean().await;
}

// The largest basket there is, each SKU on a database page of its own (long names): its confirm
// and its payment each change a hundred pages of the SKU table in one command. On SQLite a
// command runs in a savepoint whose journal of the pages it changed spills from memory to a
// temporary file past a threshold; a threshold above what SQLite writes in one call made that
// spill fail, and with it the confirm ("database or disk is full").
on_both!(the_largest_basket_checks_out_and_is_paid, largest_basket);
async fn largest_basket(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    let lines = usize::try_from(kassa::domain::basket::BASKET_LINES_MAX).unwrap();
    // A catalogue of 1,500 SKUs with the longest names there are (about fifteen to a 4 KiB
    // page), created in order through the store, and the basket takes every fifteenth: each
    // line's SKU on a page of its own.
    let price = kassa::domain::money::Money::new(100, kassa::domain::money::Currency::parse("CNY").unwrap()).unwrap();
    for i in 1000..2500 {
        let sku = format!("BIG-{i}");
        let new = catalog::NewSku {
            name: format!("{sku} {}", "n".repeat(180)),
            sku: kassa::domain::ids::Sku::parse(&sku).unwrap(),
            kind: catalog::SkuKind::Physical,
            price,
            stock: 5,
            limits: Default::default(),
        };
        catalog::create_sku(&t.app.state.db, &new, false, t.now_ms()).await.unwrap();
    }
    let skus: Vec<String> = (0..lines).map(|i| format!("BIG-{}", 1000 + 15 * i)).collect();
    let buyer = t.buyer().await;
    let body = json!({"lines": skus.iter().map(|sku| json!({"sku": sku, "quantity": 2})).collect::<Vec<_>>()});
    let r = t.http.post(t.url("/api/v1/baskets")).bearer_auth(&buyer).json(&body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let basket = s(&r.json::<serde_json::Value>().await.unwrap()["basket_id"]);
    let (status, order) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    assert_eq!(order["total_minor"], 100 * 2 * 100);
    let (status, answer) = t.complete(&s(&order["attempt_ref"]), "succeeded", 1).await;
    assert!(status.is_success(), "{answer}");
    t.settle().await;
    assert_eq!(t.status(&s(&order["order_no"])).await, "paid");
    for sku in [&skus[0], &skus[lines - 1]] {
        let v = t.sku(sku).await;
        assert_eq!((v["on_hand"].as_i64(), v["reserved"].as_i64(), v["sold"].as_i64()), (Some(3), Some(0), Some(2)));
    }
    t.assert_clean().await;
}

on_both!(double_clicked_confirm_gives_one_order, double_click);
async fn double_click(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("MUG", 2)]).await;
    // Same basket, in parallel, no key.
    let (a, b) = tokio::join!(t.checkout(&buyer, &basket, None), t.checkout(&buyer, &basket, None));
    assert_eq!(a.0, StatusCode::CREATED, "{}", a.1);
    assert_eq!(b.0, StatusCode::CREATED, "{}", b.1);
    assert_eq!(a.1["order_no"], b.1["order_no"]);
    assert_eq!(a.1["attempt_ref"], b.1["attempt_ref"]);
    // Same Idempotency-Key again: the same order.
    let (c, d) =
        tokio::join!(t.checkout(&buyer, &basket, Some("click-1")), t.checkout(&buyer, &basket, Some("click-1")));
    assert_eq!(c.1["order_no"], a.1["order_no"]);
    assert_eq!(d.1["order_no"], a.1["order_no"]);
    // The key cannot be reused for another basket.
    let other = t.basket(&buyer, &[("MUG", 1)]).await;
    let (status, body) = t.checkout(&buyer, &other, Some("click-1")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["error"]["code"], "idempotency_key_reused");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 1);
    assert_eq!(t.sku("MUG").await["reserved"], 2);
    // A frozen basket cannot be edited.
    let (status, answer) = t.put_line(&buyer, &basket, "MUG", 3).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(answer["error"]["code"], "basket_frozen");
    t.assert_clean().await;
}

on_both!(price_change_and_short_stock_create_nothing, price_and_stock);
async fn price_and_stock(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 12800, 3).await;
    t.create_sku("CUP", "Cup", 1500, 100).await;
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("TEA", 1), ("CUP", 2)]).await;
    t.set_price("TEA", 13800).await;
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "price_changed", "{body}");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 0);
    assert_eq!(t.sku("TEA").await["reserved"], 0);
    assert_eq!(t.sku("CUP").await["reserved"], 0);
    // The basket now quotes today's price; confirming again works at that price.
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["total_minor"], 13800 + 3000);

    // Short stock: nothing held, nothing created, not even the lines that had stock.
    let buyer2 = t.buyer().await;
    let basket2 = t.basket(&buyer2, &[("CUP", 1), ("TEA", 3)]).await;
    let (status, body) = t.checkout(&buyer2, &basket2, None).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "out_of_stock");
    assert_eq!(body["error"]["details"]["sku"], "TEA");
    assert_eq!(body["error"]["details"]["available"], 2);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 1);
    assert_eq!(t.sku("CUP").await["reserved"], 2);
    // The basket stays open and editable.
    let r = t.http.get(t.url(&format!("/api/v1/baskets/{basket2}"))).bearer_auth(&buyer2).send().await.unwrap();
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "open");
    t.assert_clean().await;
}

on_both!(buyers_cannot_see_each_other, access_control);
async fn access_control(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_buyer, order_no, _) = t.pending_order(&[("MUG", 1)]).await;
    let stranger = t.buyer().await;
    let r = t.http.get(t.url(&format!("/api/v1/orders/{order_no}"))).bearer_auth(&stranger).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = t.http.get(t.url(&format!("/api/v1/orders/{order_no}"))).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = t.http.get(t.url("/api/v1/admin/skus/MUG")).bearer_auth(&stranger).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"]["code"], "forbidden");
    // The document says so for every admin operation, and for no buyer one.
    let spec: serde_json::Value = t.http.get(t.url("/openapi.json")).send().await.unwrap().json().await.unwrap();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let admin = op["security"] == serde_json::json!([{"admin": []}]);
            let listed = op["responses"].get("403").is_some();
            assert!(!admin || listed, "{method} {path} does not list its 403");
        }
    }
    let r = t
        .http
        .get(t.url(&format!("/api/v1/orders/{order_no}")))
        .bearer_auth(crate::common::ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

on_both!(bad_input_is_refused_with_codes, bad_input);
async fn bad_input(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let cases = [
        (json!({"sku": "a/b", "name": "x", "price_minor": 1, "currency": "CNY"}), "invalid_sku"),
        (json!({"sku": "X1", "name": "x", "price_minor": -1, "currency": "CNY"}), "invalid_amount"),
        (json!({"sku": "X1", "name": "x", "price_minor": 1, "currency": "XXX"}), "unknown_currency"),
        (json!({"sku": "X1", "name": "", "price_minor": 1, "currency": "CNY"}), "invalid_name"),
        (json!({"sku": "MUG", "name": "x", "price_minor": 1, "currency": "CNY"}), "sku_exists"),
    ];
    for (body, code) in cases {
        let (status, answer) = t.admin_post("/api/v1/admin/skus", body).await;
        assert!(status.is_client_error(), "{status} {answer}");
        assert_eq!(answer["error"]["code"], code, "{answer}");
    }
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[]).await;
    for (qty, code) in [(-1, "invalid_quantity"), (1_000_000, "invalid_quantity")] {
        let (status, answer) = t.put_line(&buyer, &basket, "MUG", qty).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(answer["error"]["code"], code);
    }
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "basket_empty".to_string()));
    let r = t
        .http
        .post(t.url(&format!("/api/v1/baskets/{basket}/checkout")))
        .bearer_auth(&buyer)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"]["code"], "invalid_json");
    let huge = vec![b' '; 1024 * 1024 + 10];
    let r = t
        .http
        .post(t.url(&format!("/api/v1/baskets/{basket}/checkout")))
        .bearer_auth(&buyer)
        .body(huge)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"]["code"], "payload_too_large");
    let basket = t.basket(&buyer, &[("MUG", 1)]).await;
    let (status, body) = t.checkout_with(&buyer, &basket, &json!({"gateway": "nope"})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "unknown_gateway".to_string()));
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 0);
}

on_both!(hostile_input_is_refused_and_changes_nothing, hostile_input);
async fn hostile_input(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    // SQL metacharacters are data, never SQL.
    let sneaky = "Robert'); DROP TABLE orders; --";
    t.create_sku("SQL", sneaky, 100, 5).await;
    assert_eq!(t.sku("SQL").await["name"], sneaky);
    // Money overflow: a huge price times a quantity is refused with a code, not wrapped.
    t.create_sku("HUGE", "Huge", i64::MAX / 2, 5).await;
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("HUGE", 1)]).await;
    let (status, answer) = t.put_line(&buyer, &basket, "HUGE", 3).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(answer["error"]["code"], "amount_overflow");
    let (status, _) = t.put_line(&buyer, &basket, "HUGE", 2).await;
    assert_eq!(status, StatusCode::OK, "the largest representable total is fine");
    // Path tricks in identifiers.
    for path in [
        "/api/v1/orders/..%2F..%2Fetc%2Fpasswd",
        "/api/v1/orders/KS%22%3E%3Cscript%3E",
        "/api/v1/baskets/%00/lines/SQL",
    ] {
        let r = t.http.get(t.url(path)).bearer_auth(&buyer).send().await.unwrap();
        assert!(
            r.status() == StatusCode::NOT_FOUND || r.status() == StatusCode::METHOD_NOT_ALLOWED,
            "{path}: {}",
            r.status()
        );
    }
    let r = t
        .http
        .put(t.url("/api/v1/baskets/x/lines/..%2Fadmin"))
        .bearer_auth(&buyer)
        .json(&json!({"quantity": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // Another buyer can neither cancel nor pay (retry) someone's order.
    let (_, order_no, _) = t.pending_order(&[("SQL", 1)]).await;
    let stranger = t.buyer().await;
    for action in ["cancel", "attempts"] {
        let r = t
            .http
            .post(t.url(&format!("/api/v1/orders/{order_no}/{action}")))
            .bearer_auth(&stranger)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{action}");
    }
    assert_eq!(t.status(&order_no).await, "pending_payment");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 1);
    t.assert_clean().await;
}

/// SKU `U`, priced in USD beside the CNY catalog the other SKUs use.
async fn create_dollar_sku(t: &TestApp) {
    let (status, body) = t
        .admin_post(
            "/api/v1/admin/skus",
            json!({"sku": "U", "name": "Dollar", "price_minor": 100, "currency": "USD", "stock": 9}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// SKUs `A` (300) and `B` (150) in CNY, `BIG` (half of i64::MAX) and the USD SKU `U`.
async fn create_basket_catalog(t: &TestApp) {
    t.create_sku("A", "Apple", 300, 9).await;
    t.create_sku("B", "Bread", 150, 9).await;
    t.create_sku("BIG", "Big", i64::MAX / 2, 9).await;
    create_dollar_sku(t).await;
}

on_both!(basket_lines_keep_one_currency_and_a_representable_total, basket_lines);
async fn basket_lines(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    create_basket_catalog(&t).await;
    let buyer = t.buyer().await;
    let put = |basket: String, sku: &'static str, quantity: i64| {
        let (t, buyer) = (&t, buyer.clone());
        async move { t.put_line(&buyer, &basket, sku, quantity).await }
    };
    // An empty basket reads as one with no lines.
    let basket = t.basket(&buyer, &[]).await;
    let (_, view) = t.get_basket(&buyer, &basket).await;
    assert_eq!((view["status"].as_str(), view["lines"].as_array().map(Vec::len)), (Some("open"), Some(0)));
    // Two lines, answered in SKU order with their total.
    put(basket.clone(), "B", 2).await;
    let (status, view) = put(basket.clone(), "A", 1).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let skus: Vec<&str> = view["lines"].as_array().unwrap().iter().map(|l| l["sku"].as_str().unwrap()).collect();
    assert_eq!(skus, ["A", "B"]);
    assert_eq!(view["total_minor"], 600);
    // Another currency beside them is refused; so is a total past i64.
    let (status, body) = put(basket.clone(), "U", 1).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("currency_mismatch")));
    let (status, body) = put(basket.clone(), "BIG", 2).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::UNPROCESSABLE_ENTITY, Some("amount_overflow")));
    // Changing a line replaces it (the other lines count once), and quantity 0 removes it.
    let (status, view) = put(basket.clone(), "B", 5).await;
    assert_eq!((status, view["total_minor"].as_i64()), (StatusCode::OK, Some(300 + 750)));
    let get = |basket: String| {
        let (t, buyer) = (&t, buyer.clone());
        async move { t.get_basket(&buyer, &basket).await.1 }
    };
    // The answer is the basket as the change left it: what a read of it returns, field for field.
    assert_eq!(view, get(basket.clone()).await);
    // A price changed since a line was quoted shows in the answer to another line's change.
    t.set_price("B", 175).await;
    let (status, view) = put(basket.clone(), "A", 2).await;
    assert_eq!(status, StatusCode::OK, "{view}");
    let b = &view["lines"][1];
    assert_eq!((b["sku"].as_str(), b["name"].as_str()), (Some("B"), Some("Bread")));
    assert_eq!((b["unit_price_minor"].as_i64(), b["current_unit_price_minor"].as_i64()), (Some(150), Some(175)));
    assert_eq!((b["price_changed"].as_bool(), view["total_minor"].as_i64()), (Some(true), Some(600 + 750)));
    assert_eq!(view, get(basket.clone()).await);
    let (status, view) = put(basket.clone(), "A", 0).await;
    assert_eq!((status, view["total_minor"].as_i64()), (StatusCode::OK, Some(750)));
    assert_eq!(view["lines"].as_array().map(Vec::len), Some(1));
    assert_eq!(view, get(basket.clone()).await);
    // Someone else's basket is not found.
    let other = t.buyer().await;
    assert_eq!(t.get_basket(&other, &basket).await.0, StatusCode::NOT_FOUND);
}

// A basket created with its lines ("buy now"): one request, every line or nothing.
on_both!(a_basket_created_with_its_lines_is_all_or_nothing, basket_with_lines);
async fn basket_with_lines(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    create_basket_catalog(&t).await;
    let buyer = t.buyer().await;
    let create = |body: serde_json::Value| {
        let (http, url, buyer) = (t.http.clone(), t.url("/api/v1/baskets"), buyer.clone());
        async move {
            let r = http.post(url).bearer_auth(&buyer).json(&body).send().await.unwrap();
            (r.status(), r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let baskets = || t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM baskets");
    // Created with two lines: answered as the basket, in SKU order, quoted at today's prices.
    let (status, view) = create(json!({"lines": [{"sku": "B", "quantity": 2}, {"sku": "A", "quantity": 1}]})).await;
    assert_eq!(status, StatusCode::CREATED, "{view}");
    let skus: Vec<&str> = view["lines"].as_array().unwrap().iter().map(|l| l["sku"].as_str().unwrap()).collect();
    assert_eq!(skus, ["A", "B"]);
    assert_eq!((view["total_minor"].as_i64(), view["currency"].as_str()), (Some(600), Some("CNY")));
    let basket = s(&view["basket_id"]);
    assert_eq!(view, t.get_basket(&buyer, &basket).await.1, "the answer is what a read returns");
    // It is a basket like any other: its lines change, and it checks out.
    assert_eq!(t.put_line(&buyer, &basket, "A", 3).await.0, StatusCode::OK);
    let (status, placed) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    assert_eq!(t.order(&s(&placed["order_no"])).await["total_minor"], 1200);
    // Without a body (or with no lines) the basket is empty, as before.
    let r = t.http.post(t.url("/api/v1/baskets")).bearer_auth(&buyer).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let empty: serde_json::Value = r.json().await.unwrap();
    assert_eq!((empty["lines"].as_array().map(Vec::len), empty["status"].as_str()), (Some(0), Some("open")));
    assert!(empty["basket_id"].is_string());
    let before = baskets().await;
    // Each bad line refuses the whole basket, and nothing is stored.
    let line = |sku: &str, quantity: i64| json!({"sku": sku, "quantity": quantity});
    let many: Vec<_> = (0..=kassa::domain::basket::BASKET_LINES_MAX).map(|n| line(&format!("S{n}"), 1)).collect();
    for (lines, want_status, want_code) in [
        (vec![line("A", 1), line("NOPE", 1)], StatusCode::NOT_FOUND, "not_found"),
        (vec![line("A", 1), line("U", 1)], StatusCode::UNPROCESSABLE_ENTITY, "currency_mismatch"),
        (vec![line("A", 1), line("B", 0)], StatusCode::UNPROCESSABLE_ENTITY, "invalid_quantity"),
        (
            vec![line("A", kassa::domain::basket::LINE_QUANTITY_MAX + 1)],
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_quantity",
        ),
        (vec![line("A", 1), line("A", 2)], StatusCode::UNPROCESSABLE_ENTITY, "duplicate_line"),
        (vec![line("BIG", 2), line("A", 1)], StatusCode::UNPROCESSABLE_ENTITY, "amount_overflow"),
        (vec![line("../A", 1)], StatusCode::NOT_FOUND, "not_found"),
        (many, StatusCode::UNPROCESSABLE_ENTITY, "basket_too_large"),
    ] {
        let (status, body) = create(json!({ "lines": lines })).await;
        assert_eq!((status, body["error"]["code"].as_str()), (want_status, Some(want_code)), "{lines:?}");
    }
    let (status, body) = create(json!({"lines": [{"sku": "A"}]})).await;
    assert_eq!((status, body["error"]["code"].as_str()), (StatusCode::BAD_REQUEST, Some("invalid_json")));
    assert_eq!(baskets().await, before, "a refused basket leaves nothing behind");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM basket_lines").await, 2);
    t.assert_clean().await;
}

// Concurrent line changes on one basket see each other: on PostgreSQL the second waits for the
// basket's lock and must then read the lines the first committed (a row lock re-reads only the
// locked row, so the lines are read after the lock, not in the same statement). Two changes in
// different currencies racing on the same basket: one is refused, never both kept.
on_both!(racing_line_changes_keep_one_currency, racing_lines);
async fn racing_lines(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("A", "Apple", 300, 9).await;
    create_dollar_sku(&t).await;
    let buyer = t.buyer().await;
    let mut baskets = Vec::new();
    for _ in 0..24 {
        baskets.push(t.basket(&buyer, &[]).await);
    }
    let put = |basket: &str, sku: &str| {
        t.http
            .put(t.url(&format!("/api/v1/baskets/{basket}/lines/{sku}")))
            .bearer_auth(&buyer)
            .json(&json!({"quantity": 1}))
            .send()
    };
    let mut races = Vec::new();
    for basket in &baskets {
        races.push(async move {
            let (a, u) = tokio::join!(put(basket, "A"), put(basket, "U"));
            (a.unwrap().status(), u.unwrap().status())
        });
    }
    for (a, u) in futures_util::future::join_all(races).await {
        assert!(
            (a, u) == (StatusCode::OK, StatusCode::UNPROCESSABLE_ENTITY)
                || (a, u) == (StatusCode::UNPROCESSABLE_ENTITY, StatusCode::OK),
            "{a} / {u}"
        );
    }
    let mixed = t
        .count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM (SELECT basket_id FROM basket_lines GROUP BY basket_id \
             HAVING COUNT(DISTINCT currency) > 1) m",
        )
        .await;
    assert_eq!(mixed, 0);
}

//! Promotions: a code's limits hold when buyers race for it (in all and per buyer), uses come
//! back when orders expire or are cancelled, a refund of a discounted line pays back what was paid
//! for it, and the basket, the order, its messages and the admin API show the discount.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ADMIN, Backend, Opts, TestApp, s};
use crate::on_both;

async fn promotion(t: &TestApp, body: Value) -> Value {
    let (status, answer) = t.admin_post("/api/v1/admin/promotions", body).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer
}

/// A checkout of `lines` by a new buyer with `code` (and `extra` fields): status and answer.
async fn buy_with(t: &TestApp, lines: &[(&str, i64)], code: &str, extra: Value) -> (StatusCode, Value) {
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, lines).await;
    let mut body = json!({"gateway": "sandbox", "promotion_code": code});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    t.checkout_with(&buyer, &basket, &body).await
}

async fn uses(t: &TestApp, id: &str) -> (i64, i64) {
    let p = t.admin_get(&format!("/api/v1/admin/promotions/{id}")).await;
    (p["uses"].as_i64().unwrap(), p["reserved"].as_i64().unwrap())
}

on_both!(a_code_with_ten_uses_goes_to_exactly_ten_racing_buyers, ten_of_sixty_four);
async fn ten_of_sixty_four(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 1_000).await;
    let p = promotion(&t, json!({"name": "Flash", "code": "flash", "percent_off": 50, "max_uses": 10})).await;
    assert_eq!(p["code"], "FLASH");
    let mut buyers = Vec::new();
    for _ in 0..64 {
        let buyer = t.buyer().await;
        let basket = t.basket(&buyer, &[("TEA", 1)]).await;
        buyers.push((buyer, basket));
    }
    let t = std::sync::Arc::new(t);
    let mut tasks = Vec::new();
    for (buyer, basket) in buyers {
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            t.checkout_with(&buyer, &basket, &json!({"gateway": "sandbox", "promotion_code": "FLASH"})).await
        }));
    }
    let (mut won, mut used_up) = (0, 0);
    for task in tasks {
        let (status, body) = task.await.unwrap();
        match status {
            StatusCode::CREATED => won += 1,
            StatusCode::UNPROCESSABLE_ENTITY if body["error"]["code"] == "promotion_used_up" => used_up += 1,
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!((won, used_up), (10, 54));
    assert_eq!(uses(&t, p["id"].as_str().unwrap()).await, (10, 10));
    assert_eq!(t.count("SELECT COUNT(*) FROM orders WHERE promotion_code = 'FLASH' AND total_minor = 500").await, 10);
    t.assert_clean().await;
}

on_both!(a_per_buyer_limit_holds_across_sessions_with_one_contact, per_buyer_race);
async fn per_buyer_race(backend: Backend) {
    let t = std::sync::Arc::new(TestApp::spawn(backend).await);
    t.create_sku("TEA", "Tea", 1_000, 100).await;
    promotion(&t, json!({"name": "Once each", "code": "ONCE", "amount_off": {"CNY": 300}, "per_buyer": 1})).await;
    let contact = json!({"contact": {"email": "Same@Example.com"}});
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (t, contact) = (t.clone(), contact.clone());
        tasks.push(tokio::spawn(async move { buy_with(&t, &[("TEA", 1)], "once", contact).await }));
    }
    let mut codes = Vec::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        codes.push(if status == StatusCode::CREATED { "created".to_string() } else { s(&body["error"]["code"]) });
    }
    codes.sort();
    assert_eq!(codes.iter().filter(|c| *c == "created").count(), 1, "{codes:?}");
    assert!(codes.iter().all(|c| c == "created" || c == "promotion_limit_per_buyer"), "{codes:?}");
    // Another contact is another buyer.
    let (status, _) = buy_with(&t, &[("TEA", 1)], "ONCE", json!({"contact": {"email": "other@example.com"}})).await;
    assert_eq!(status, StatusCode::CREATED);
    // Without a contact, the session is the buyer.
    let (status, _) = buy_with(&t, &[("TEA", 1)], "ONCE", json!({})).await;
    assert_eq!(status, StatusCode::CREATED);
    t.assert_clean().await;
}

on_both!(expiry_and_cancel_give_the_use_back, uses_come_back);
async fn uses_come_back(backend: Backend) {
    let t = TestApp::spawn_with(backend, Opts { hold_seconds: 60, manual_clock: true, ..Default::default() }).await;
    t.create_sku("TEA", "Tea", 1_000, 100).await;
    let p =
        promotion(&t, json!({"name": "One", "code": "ONE", "percent_off": 10, "max_uses": 1, "per_buyer": 1})).await;
    let id = s(&p["id"]);
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("TEA", 2)]).await;
    let (status, placed) =
        t.checkout_with(&buyer, &basket, &json!({"gateway": "sandbox", "promotion_code": "ONE"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    // A repeated confirm answers the same order and takes no second use.
    let (status, again) =
        t.checkout_with(&buyer, &basket, &json!({"gateway": "sandbox", "promotion_code": "ONE"})).await;
    assert_eq!((status, &again["order_no"]), (StatusCode::CREATED, &placed["order_no"]));
    assert_eq!(uses(&t, &id).await, (1, 1));
    let (status, body) = buy_with(&t, &[("TEA", 1)], "ONE", json!({})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "promotion_used_up".into()));
    // Cancelled: the use is back, and the new basket carries the code.
    let order_no = s(&placed["order_no"]);
    let r = t
        .http
        .post(t.url(&format!("/api/v1/orders/{order_no}/cancel")))
        .bearer_auth(&buyer)
        .json(&json!({"rebasket": true}))
        .send()
        .await
        .unwrap();
    let cancelled: Value = r.json().await.unwrap();
    assert_eq!(t.status(&order_no).await, "cancelled");
    assert_eq!(uses(&t, &id).await, (0, 0));
    if let Some(new_basket) = cancelled["basket_id"].as_str() {
        let (_, view) = t.get_basket(&buyer, new_basket).await;
        assert_eq!(view["promotion"]["code"], "ONE", "{view}");
    }
    // Taken again, then expired: back again.
    let (status, second) = buy_with(&t, &[("TEA", 1)], "ONE", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(uses(&t, &id).await, (1, 1));
    t.clock.as_ref().unwrap().advance_ms(61_000);
    assert_eq!(t.app.sweeper.step().await.unwrap().expired, 1);
    assert_eq!(uses(&t, &id).await, (0, 0));
    assert_eq!(t.order(&s(&second["order_no"])).await["status"], "expired");
    // Paid: the use is kept.
    let (status, third) = buy_with(&t, &[("TEA", 1)], "ONE", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{third}");
    t.complete(&s(&third["attempt_ref"]), "succeeded", 1).await;
    t.settle().await;
    assert_eq!(t.status(&s(&third["order_no"])).await, "paid");
    assert_eq!(uses(&t, &id).await, (1, 0));
    t.assert_clean().await;
}

on_both!(a_refund_of_a_discounted_line_pays_back_what_was_paid_for_it, discounted_refund);
async fn discounted_refund(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("CUP", "Cup", 999, 100).await;
    t.create_sku("POT", "Pot", 3_001, 100).await;
    let p = promotion(&t, json!({"name": "Tenth", "code": "TENTH", "percent_off": 10, "max_uses": 5})).await;
    let (status, placed) = buy_with(&t, &[("CUP", 3), ("POT", 1)], "TENTH", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let order_no = s(&placed["order_no"]);
    let order = t.order(&order_no).await;
    // 2997 + 3001 = 5998, 10 % off is 599: 299.7 → 300 on the cups, 299 on the pot.
    assert_eq!((order["total_minor"].as_i64(), order["discount_minor"].as_i64()), (Some(5_399), Some(599)));
    let shares: Vec<i64> =
        order["lines"].as_array().unwrap().iter().map(|l| l["discount_minor"].as_i64().unwrap()).collect();
    assert_eq!(shares.iter().sum::<i64>(), 599);
    assert_eq!(order["promotion_code"], "TENTH");
    t.complete(&s(&placed["attempt_ref"]), "succeeded", 1).await;
    t.settle().await;
    let refund = |body: Value| {
        let t = &t;
        let order_no = order_no.clone();
        async move { t.admin_post(&format!("/api/v1/admin/orders/{order_no}/refunds"), body).await }
    };
    // One cup of three: a third of what the cups were paid, rounded down.
    let cups_paid = 2_997 - shares[0];
    let (status, one) = refund(json!({"refund_no": "R-CUP-1", "lines": [{"line_no": 1, "quantity": 1}]})).await;
    assert_eq!(status, StatusCode::CREATED, "{one}");
    assert_eq!(one["amount_minor"].as_i64(), Some(cups_paid / 3));
    // The same number and lines again: the same refund.
    let (status, again) = refund(json!({"refund_no": "R-CUP-1", "lines": [{"line_no": 1, "quantity": 1}]})).await;
    assert_eq!((status, &again["amount_minor"]), (StatusCode::OK, &one["amount_minor"]));
    let (status, over) = refund(json!({"refund_no": "R-CUP-X", "lines": [{"line_no": 1, "quantity": 3}]})).await;
    assert_eq!((status, s(&over["error"]["code"])), (StatusCode::CONFLICT, "refund_exceeds_line".into()));
    let (status, bad) = refund(json!({"refund_no": "R-BAD", "lines": [{"line_no": 9, "quantity": 1}]})).await;
    assert_eq!((status, s(&bad["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "unknown_line".into()));
    // The rest of the order, giving the use back: together exactly what was paid.
    let (status, rest) = refund(json!({
        "refund_no": "R-REST", "lines": [{"line_no": 1, "quantity": 2}, {"line_no": 2, "quantity": 1}], "return_promotion": true
    }))
    .await;
    assert_eq!(status, StatusCode::CREATED, "{rest}");
    assert_eq!(one["amount_minor"].as_i64().unwrap() + rest["amount_minor"].as_i64().unwrap(), 5_399);
    for _ in 0..3 {
        t.app.refunder.step().await.unwrap();
        t.settle().await;
    }
    assert_eq!(t.status(&order_no).await, "refunded");
    assert_eq!(uses(&t, p["id"].as_str().unwrap()).await, (0, 0));
    t.assert_clean().await;
}

on_both!(the_basket_takes_a_code_and_shows_the_discount, basket_code);
async fn basket_code(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 100).await;
    t.create_sku("CUP", "Cup", 500, 100).await;
    promotion(
        &t,
        json!({"name": "Tea lovers", "code": "TEA-5", "amount_off": {"CNY": 500}, "skus": ["TEA"], "min_spend": {"CNY": 1500}}),
    )
    .await;
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("TEA", 1)]).await;
    let put = |code: &str| {
        let (t, buyer, basket) = (&t, buyer.clone(), basket.clone());
        let code = code.to_string();
        async move {
            let r = t
                .http
                .put(t.url(&format!("/api/v1/baskets/{basket}/promotion")))
                .bearer_auth(&buyer)
                .json(&json!({"code": code}))
                .send()
                .await
                .unwrap();
            (r.status(), r.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = put("NOPE").await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "promotion_unknown".into()));
    // Under the minimum: kept, and the basket says why it does not apply yet.
    let (status, view) = put("tea-5").await;
    assert_eq!(status, StatusCode::OK, "{view}");
    assert_eq!(view["promotion"]["refusal"]["code"], "promotion_minimum_not_met");
    assert_eq!(view["promotion"]["refusal"]["details"]["min_spend_minor"], 1500, "{view}");
    assert_eq!(view["promotion"]["discount_minor"], 0);
    let (_, view) = t.put_line(&buyer, &basket, "CUP", 1).await;
    assert_eq!(
        (view["promotion"]["discount_minor"].as_i64(), view["promotion"]["total_minor"].as_i64()),
        (Some(500), Some(1_000))
    );
    assert!(view["promotion"]["refusal"].is_null(), "{view}");
    // Confirm applies the basket's code.
    let (status, placed) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let order = t.order(&s(&placed["order_no"])).await;
    assert_eq!((order["total_minor"].as_i64(), order["discount_minor"].as_i64()), (Some(1_000), Some(500)));
    let lines: Vec<(String, i64)> = order["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (s(&l["sku"]), l["discount_minor"].as_i64().unwrap()))
        .collect();
    assert!(lines.contains(&("TEA".into(), 500)) && lines.contains(&("CUP".into(), 0)), "{lines:?}");
    assert_eq!(order["attempts"][0]["amount_minor"], 1_000);
    // The public catalog shows nothing of it.
    let catalog = t.http.get(t.url("/api/v1/catalog")).send().await.unwrap().text().await.unwrap();
    assert!(!catalog.contains("TEA-5"));
    t.assert_clean().await;
}

on_both!(a_full_discount_is_paid_at_once, full_discount);
async fn full_discount(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 100).await;
    let p = promotion(&t, json!({"name": "Gift", "code": "GIFT", "percent_off": 100})).await;
    let (status, placed) = buy_with(&t, &[("TEA", 2)], "GIFT", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    assert!(placed["payment"].is_null(), "{placed}");
    let order = t.order(&s(&placed["order_no"])).await;
    assert_eq!((s(&order["status"]), order["total_minor"].as_i64()), ("paid".into(), Some(0)));
    assert_eq!(uses(&t, p["id"].as_str().unwrap()).await, (1, 0));
    let given = t.admin_get(&format!("/api/v1/admin/promotions/{}", s(&p["id"]))).await;
    assert_eq!(given["given_away"]["CNY"], 2_000);
    t.assert_clean().await;
}

on_both!(batches_of_single_use_codes_are_generated_and_exported, batches);
async fn batches(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 100).await;
    let p = promotion(&t, json!({"name": "Campaign", "amount_off": {"CNY": 100}})).await;
    let id = s(&p["id"]);
    assert!(p["code"].is_null());
    let (status, batch) =
        t.admin_post(&format!("/api/v1/admin/promotions/{id}/batches"), json!({"count": 5, "prefix": "vip-"})).await;
    assert_eq!(status, StatusCode::CREATED, "{batch}");
    let codes: Vec<String> = batch["codes"].as_array().unwrap().iter().map(s).collect();
    assert_eq!(codes.len(), 5);
    assert!(codes.iter().all(|c| c.starts_with("VIP-") && c.len() == 16), "{codes:?}");
    let (status, _) = buy_with(&t, &[("TEA", 1)], &codes[0], json!({})).await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = buy_with(&t, &[("TEA", 1)], &codes[0].to_lowercase(), json!({})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "promotion_used_up".into()));
    let csv = t
        .http
        .get(t.url(&format!("/api/v1/admin/promotions/{id}/codes.csv")))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows[0], "code,batch,used");
    assert_eq!(rows.len(), 6);
    assert_eq!(rows.iter().filter(|r| r.ends_with(",yes")).count(), 1);
    let view = t.admin_get(&format!("/api/v1/admin/promotions/{id}")).await;
    assert_eq!((view["batches"][0]["codes"].as_i64(), view["batches"][0]["used"].as_i64()), (Some(5), Some(1)));
    let page = t.admin_get(&format!("/api/v1/admin/promotions/{id}/uses")).await;
    assert_eq!(page["uses"].as_array().unwrap().len(), 1);
    t.assert_clean().await;
}

on_both!(operators_pause_resume_and_end_and_rules_refuse_with_their_codes, rules);
async fn rules(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 100).await;
    let p =
        promotion(&t, json!({"name": "Spring", "code": "SPRING", "percent_off": 20, "first_order_only": true})).await;
    let id = s(&p["id"]);
    let (status, body) =
        t.admin_post("/api/v1/admin/promotions", json!({"name": "Dup", "code": "spring", "percent_off": 5})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "code_exists".into()));
    let (status, body) = t
        .admin_post("/api/v1/admin/promotions", json!({"name": "Both", "percent_off": 5, "amount_off": {"CNY": 1}}))
        .await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_promotion".into()));
    let (status, _) = t.admin_post(&format!("/api/v1/admin/promotions/{id}/pause"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = buy_with(&t, &[("TEA", 1)], "SPRING", json!({})).await;
    assert_eq!(
        (status, s(&body["error"]["code"])),
        (StatusCode::UNPROCESSABLE_ENTITY, "promotion_not_applicable".into())
    );
    t.admin_post(&format!("/api/v1/admin/promotions/{id}/resume"), json!({})).await;
    // First order only: a buyer with an order before is refused.
    let buyer = t.buyer().await;
    let first = t.basket(&buyer, &[("TEA", 1)]).await;
    let (status, _) = t.checkout_with(&buyer, &first, &json!({"gateway": "sandbox", "promotion_code": "SPRING"})).await;
    assert_eq!(status, StatusCode::CREATED);
    let second = t.basket(&buyer, &[("TEA", 1)]).await;
    let (status, body) =
        t.checkout_with(&buyer, &second, &json!({"gateway": "sandbox", "promotion_code": "SPRING"})).await;
    assert_eq!(
        (status, body["error"]["details"]["reason"].clone()),
        (StatusCode::UNPROCESSABLE_ENTITY, json!("first_order_only"))
    );
    t.admin_post(&format!("/api/v1/admin/promotions/{id}/end"), json!({})).await;
    let (status, body) = buy_with(&t, &[("TEA", 1)], "SPRING", json!({})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "promotion_expired".into()));
    let (status, body) = t.admin_post(&format!("/api/v1/admin/promotions/{id}/resume"), json!({})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "invalid_transition".into()));
    let (status, body) = buy_with(&t, &[("TEA", 1)], "NO SUCH CODE", json!({})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "promotion_unknown".into()));
    let list = t.admin_get("/api/v1/admin/promotions").await;
    assert_eq!(list["promotions"][0]["status"], "ended");
    t.assert_clean().await;
}

on_both!(a_late_payment_takes_the_use_again_only_within_the_limit, late_payment);
async fn late_payment(backend: Backend) {
    let opts = Opts {
        hold_seconds: 60,
        manual_clock: true,
        ignore_close: true,
        late_policy: kassa::domain::decide::LatePolicy::Manual,
        ..Default::default()
    };
    let t = TestApp::spawn_with(backend, opts).await;
    t.create_sku("TEA", "Tea", 1_000, 100).await;
    let p = promotion(&t, json!({"name": "One", "code": "ONE", "percent_off": 10, "max_uses": 1})).await;
    let id = s(&p["id"]);
    let (_, late) = buy_with(&t, &[("TEA", 1)], "ONE", json!({})).await;
    t.clock.as_ref().unwrap().advance_ms(61_000);
    assert_eq!(t.app.sweeper.step().await.unwrap().expired, 1);
    assert_eq!(uses(&t, &id).await, (0, 0));
    let (status, taken) = buy_with(&t, &[("TEA", 1)], "ONE", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{taken}");
    // The expired order is paid anyway: held for the operator, whose accept finds the use taken.
    t.complete(&s(&late["attempt_ref"]), "succeeded", 1).await;
    t.settle().await;
    let late_no = s(&late["order_no"]);
    assert_eq!(t.status(&late_no).await, "paid_after_expiry");
    let (status, body) = t.admin_post(&format!("/api/v1/admin/orders/{late_no}/accept"), json!({})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "promotion_used_up".into()), "{body}");
    assert_eq!(t.sku("TEA").await["sold"], 0, "the stock taken for the accept went back");
    // The other order cancelled, the use is free again: the accept takes it.
    let r = t
        .http
        .post(t.url(&format!("/api/v1/orders/{}/cancel", s(&taken["order_no"]))))
        .bearer_auth(crate::common::ADMIN);
    assert!(r.json(&json!({})).send().await.unwrap().status().is_success());
    let (status, body) = t.admin_post(&format!("/api/v1/admin/orders/{late_no}/accept"), json!({})).await;
    assert!(status.is_success(), "{body}");
    assert_eq!(t.status(&late_no).await, "paid");
    assert_eq!(uses(&t, &id).await, (1, 0));
    t.assert_clean().await;
}

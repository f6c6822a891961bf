//! The complaints and disputes desk against the fake Stripe, on both databases: a dispute taken
//! in from its signed event, linked to its order, answered with the evidence kassa suggests and
//! won; events out of order and repeated; a lost notification found by the backstop poll; a case
//! for a payment kassa does not know; the loss accepted; deadline alerts; outbox topics.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, Shop, s};
use crate::fakes::FakeStripe;
use crate::on_both;

async fn world(backend: Backend) -> Shop {
    Shop::start(backend, Opts { manual_clock: true, ..Default::default() }, 50).await
}

impl Shop {
    /// The PaymentIntent Stripe paid `attempt_ref` with.
    fn intent_of(&self, attempt_ref: &str) -> String {
        self.stripe.session_for(attempt_ref).expect("session").txn_id
    }

    async fn cases(&self, query: &str) -> Vec<Value> {
        self.t.admin_get(&format!("/api/v1/admin/cases{query}")).await["items"].as_array().expect("items").clone()
    }

    async fn topics(&self, order_no: &str) -> Vec<String> {
        let rows = kassa::store::sql::query(
            "SELECT topic FROM outbox WHERE order_no = $1 AND topic LIKE 'dispute.%' ORDER BY created_at, id",
        )
        .bind(order_no)
        .fetch_all(self.t.app.state.db.read_pool())
        .await
        .unwrap();
        rows.iter().map(|r| r.get::<String>("topic")).collect()
    }
}

on_both!(a_dispute_is_answered_with_the_evidence_kassa_suggests_and_won, answered);

async fn answered(backend: Backend) {
    let w = world(backend).await;
    let (order_no, attempt_ref) = w.paid("stripe").await;
    let pi = w.intent_of(&attempt_ref);
    let dispute = w.stripe.open_dispute(&pi, 8_888, 7 * 86_400);
    let created = dispute["created"].as_i64().unwrap();
    let opened = FakeStripe::case_event("charge.dispute.created", &dispute, created);
    assert_eq!(w.stripe.send_event(&opened).await.0, 200);

    let cases = w.cases("").await;
    assert_eq!(cases.len(), 1, "{cases:?}");
    let case = &cases[0];
    let id = s(&case["id"]);
    assert_eq!(
        (s(&case["state"]), s(&case["kind"]), s(&case["provider"])),
        ("needs_response".into(), "dispute".into(), "stripe".into())
    );
    assert_eq!((s(&case["order_no"]), s(&case["attempt_ref"])), (order_no.clone(), attempt_ref.clone()));
    assert_eq!((case["amount_minor"].as_i64(), s(&case["due_kind"])), (Some(8_888), "evidence".into()));
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'case_opened'").await, 1);
    assert_eq!(w.topics(&order_no).await, vec!["dispute.opened"]);
    // The shop's message names the case, the order and its context: the payment the case is about.
    let payload: String =
        kassa::store::sql::query_scalar("SELECT payload FROM outbox WHERE order_no = $1 AND topic = 'dispute.opened'")
            .bind(&order_no)
            .fetch_one(w.t.app.state.db.read_pool())
            .await
            .unwrap();
    let data: Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(
        (s(&data["case_id"]), s(&data["state"]), s(&data["kind"])),
        (id.clone(), "needs_response".into(), "dispute".into())
    );
    assert_eq!(
        (s(&data["attempt_ref"]), s(&data["gateway"]), s(&data["gateway_txn_id"])),
        (attempt_ref.clone(), "stripe".into(), pi.clone())
    );
    assert!(
        data["merchant_reference"].is_null() && data["metadata"] == json!({}) && data["amount_minor"] == 8_888,
        "{data}"
    );

    // The same event again (Stripe's retry): nothing new.
    assert_eq!(w.stripe.send_event(&opened).await.0, 200);
    let detail = w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await;
    assert_eq!((detail["messages"].as_array().unwrap().len(), detail["events"].as_array().unwrap().len()), (1, 1));

    // What kassa suggests, edited by the operator, then submitted a little later: the fake's times
    // are whole seconds of the real clock, kassa's the manual clock started before them.
    w.advance(2_000);
    let suggested = w.t.admin_get(&format!("/api/v1/admin/cases/{id}/evidence")).await;
    let evidence = &suggested["evidence"];
    assert!(s(&evidence["product_description"]).contains("× "), "{suggested}");
    assert!(s(&evidence["uncategorized_text"]).contains(&order_no), "{suggested}");
    assert_eq!(s(&evidence["service_date"]).len(), 10, "{suggested}");
    let (status, answered) =
        w.t.admin_post(
            &format!("/api/v1/admin/cases/{id}/evidence"),
            json!({"evidence": {"customer_name": "A. Buyer", "product_description": ""}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    assert_eq!(s(&answered["state"]), "under_review", "{answered}");
    {
        let cases = w.stripe.cases.lock().unwrap();
        let form = cases.evidence_forms.last().expect("sent");
        assert_eq!(form.get("evidence[customer_name]").map(String::as_str), Some("A. Buyer"));
        assert!(!form.contains_key("evidence[product_description]"), "an emptied field is left out: {form:?}");
        assert!(form.contains_key("evidence[uncategorized_text]"));
        assert_eq!(form.get("submit").map(String::as_str), Some("true"));
    }
    let (status, refused) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{id}/evidence"), json!({"evidence": {"receipt": "file_1"}})).await;
    assert_eq!((status, s(&refused["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_evidence".into()));

    // Won; then an older update arrives late and changes nothing.
    let won = w.stripe.set_dispute_status(&s(&dispute["id"]), "won");
    assert_eq!(w.stripe.send_event(&FakeStripe::case_event("charge.dispute.closed", &won, created + 20)).await.0, 200);
    let mut stale = won.clone();
    stale["status"] = json!("needs_response");
    assert_eq!(
        w.stripe.send_event(&FakeStripe::case_event("charge.dispute.updated", &stale, created + 10)).await.0,
        200
    );
    let detail = w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await;
    assert_eq!((s(&detail["state"]), s(&detail["outcome"])), ("closed".into(), "won".into()), "{detail}");
    assert!(detail["closed_at"].is_string() && detail["due_at"].is_null(), "{detail}");
    let kept: Vec<String> = detail["messages"].as_array().unwrap().iter().map(|m| s(&m["source"])).collect();
    assert!(
        kept.contains(&"operator".to_string()) && kept.iter().filter(|k| *k == "notification").count() == 3,
        "{kept:?}"
    );
    assert_eq!(w.topics(&order_no).await, vec!["dispute.opened", "dispute.updated", "dispute.closed"]);
    assert!(w.cases("").await.is_empty(), "open cases only by default");
    assert_eq!(w.cases("?open=false").await.len(), 1);

    // A dispute event that fails its signature is refused and kept as a rejected notification.
    let body = opened.to_string();
    let r = reqwest::Client::new()
        .post(w.t.url("/notify/stripe"))
        .header("Stripe-Signature", FakeStripe::signature("whsec_wrong", created, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE status = 'rejected'").await, 1);
    w.t.assert_clean().await;
}

on_both!(the_backstop_poll_finds_what_a_lost_notification_missed, polled);

async fn polled(backend: Backend) {
    let w = world(backend).await;
    let (order_no, attempt_ref) = w.paid("stripe").await;
    let pi = w.intent_of(&attempt_ref);
    // No event reached kassa for any of these.
    let lost = w.stripe.open_dispute(&pi, 8_888, 7 * 86_400);
    w.stripe.open_dispute("pi_unknown", 100, 7 * 86_400);
    w.stripe.add_warning(&pi, true);
    let (status, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "stripe"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["polled"][0], json!({"provider": "stripe", "listed": 3, "opened": 3, "updated": 0}));
    let cases = w.cases("").await;
    assert_eq!(cases.len(), 3);
    // The dispute with a deadline first; the unknown payment's case is kept, unlinked, and alerted.
    let unknown = cases.iter().find(|c| c["gateway_txn_id"] == "pi_unknown").unwrap();
    assert!(unknown["order_no"].is_null());
    assert_eq!(w.t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'case_unlinked'").await, 1);
    let warning = cases.iter().find(|c| c["kind"] == "fraud_warning").unwrap();
    assert_eq!((s(&warning["state"]), s(&warning["order_no"])), ("needs_response".into(), order_no.clone()));

    // The loss accepted at Stripe; actions on what takes none are refused.
    let linked = cases.iter().find(|c| c["provider_case_id"] == lost["id"]).unwrap();
    let id = s(&linked["id"]);
    let (status, accepted) = w.t.admin_post(&format!("/api/v1/admin/cases/{id}/accept"), json!({})).await;
    assert_eq!(status, StatusCode::OK, "{accepted}");
    assert_eq!((s(&accepted["state"]), s(&accepted["outcome"])), ("closed".into(), "lost".into()));
    assert_eq!(w.stripe.cases.lock().unwrap().closed, vec![s(&lost["id"])]);
    let (status, again) = w.t.admin_post(&format!("/api/v1/admin/cases/{id}/accept"), json!({})).await;
    assert_eq!((status, s(&again["error"]["code"])), (StatusCode::CONFLICT, "case_closed".into()));
    let (status, not) = w.t.admin_post(&format!("/api/v1/admin/cases/{}/accept", s(&warning["id"])), json!({})).await;
    assert_eq!((status, s(&not["error"]["code"])), (StatusCode::CONFLICT, "case_not_a_dispute".into()));
    assert_eq!(w.topics(&order_no).await, vec!["dispute.opened", "dispute.opened", "dispute.closed"]);

    // Polled again: nothing new. A provider without cases, and one not configured, are refused.
    let (_, body) = w.t.admin_post("/api/v1/admin/cases/poll", json!({})).await;
    let stripe = body["polled"].as_array().unwrap().iter().find(|p| p["provider"] == "stripe").cloned().unwrap();
    assert_eq!((stripe["opened"].as_i64(), stripe["updated"].as_i64()), (Some(0), Some(0)), "{body}");
    let (status, _) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "nowhere"})).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let r = w.t.http.get(w.t.url("/api/v1/admin/cases/nope")).bearer_auth(crate::common::ADMIN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    w.t.assert_clean().await;
}

on_both!(a_deadline_near_and_missed_is_alerted_once_each, deadlines);

async fn deadlines(backend: Backend) {
    // Warned 12 hours ahead (`--case-due-margin-hours 12`): due in 3 and in 10 hours is soon, in 30 is not.
    let opts = Opts { manual_clock: true, case_due_margin_ms: 12 * 3_600_000, ..Default::default() };
    let w = Shop::start(backend, opts, 50).await;
    for due_in_hours in [3, 10, 30] {
        let (_, attempt_ref) = w.paid("stripe").await;
        let pi = w.intent_of(&attempt_ref);
        let dispute = w.stripe.open_dispute(&pi, 8_888, due_in_hours * 3_600);
        let event = FakeStripe::case_event("charge.dispute.created", &dispute, dispute["created"].as_i64().unwrap());
        assert_eq!(w.stripe.send_event(&event).await.0, 200);
    }
    let alerts = |kind: &'static str| {
        let t = &w.t;
        async move { t.count(&format!("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = '{kind}'")).await }
    };
    w.t.app.monitor.step().await.unwrap();
    w.t.app.monitor.step().await.unwrap();
    assert_eq!((alerts("case_due_soon").await, alerts("case_overdue").await), (2, 0));
    w.advance(4 * 3_600_000);
    let report = w.t.app.monitor.step().await.unwrap();
    assert_eq!(report.case_alerts, 1);
    assert_eq!(w.t.app.monitor.step().await.unwrap().case_alerts, 0, "raised once");
    assert_eq!(alerts("case_overdue").await, 1);
    let metrics = w.t.http.get(w.t.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("kassa_cases_open{provider=\"stripe\",state=\"needs_response\"} 3"), "{metrics}");
    w.t.assert_clean().await;
}

on_both!(kassa_check_finds_a_case_out_of_step, checked);

async fn checked(backend: Backend) {
    let w = world(backend).await;
    let (_, attempt_ref) = w.paid("stripe").await;
    let (other, _) = w.paid("stripe").await;
    w.stripe.open_dispute(&w.intent_of(&attempt_ref), 8_888, 7 * 86_400);
    w.stripe.open_dispute("pi_unknown", 100, 7 * 86_400);
    let (status, _) = w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "stripe"})).await;
    assert_eq!(status, StatusCode::OK);
    let linked = w.cases("").await.into_iter().find(|c| !c["order_no"].is_null()).expect("linked case");
    let refund = format!("/api/v1/admin/cases/{}/refund", s(&linked["id"]));
    assert_eq!(w.t.admin_post(&refund, json!({"amount_minor": 100})).await.0, StatusCode::CREATED);
    w.t.assert_clean().await;
    // Behind kassa's back: a case moved without its log, one pointed at another order (its
    // refund left on its own), the unknown payment's alert gone.
    let db = &w.t.app.state.db;
    let exec = |sql_text: String| async move {
        kassa::store::sql::query(&sql_text).execute(db.read_pool()).await.unwrap();
    };
    exec("UPDATE cases SET state = 'under_review' WHERE order_no IS NULL".into()).await;
    exec(format!("UPDATE cases SET order_no = '{other}' WHERE order_no IS NOT NULL")).await;
    exec("DELETE FROM alerts WHERE kind = 'case_unlinked'".into()).await;
    let mut found: Vec<&str> = w.t.violations().await.into_iter().map(|v| v.invariant).collect();
    found.sort();
    assert_eq!(found, vec!["C1", "C2", "C3", "C4"]);
}

on_both!(keys_not_yet_shown_are_held_back_while_a_dispute_is_open, held_keys);

async fn held_keys(backend: Backend) {
    let w = world(backend).await;
    let body = json!({"sku": "GAME", "name": "Game key", "price_minor": 500, "currency": "CNY", "kind": "digital"});
    assert_eq!(w.t.admin_post("/api/v1/admin/skus", body).await.0, StatusCode::CREATED);
    let keys = json!({"keys": ["KEY-AAAA-1111", "KEY-BBBB-2222"]});
    assert_eq!(w.t.admin_post("/api/v1/admin/skus/GAME/keys", keys).await.0, StatusCode::OK);
    // Two orders of a key: the buyer of the first has seen theirs, the second's has not.
    let mut orders = Vec::new();
    for _ in 0..2 {
        let buyer = w.t.buyer().await;
        let basket = w.t.basket(&buyer, &[("GAME", 1)]).await;
        let (status, placed) = w.t.checkout_with(&buyer, &basket, &json!({"gateway": "stripe"})).await;
        assert_eq!(status, StatusCode::CREATED, "{placed}");
        let attempt_ref = s(&placed["attempt_ref"]);
        assert!(w.stripe.pay(&attempt_ref, true).await.is_some_and(|(status, _)| status == 200));
        orders.push((buyer, s(&placed["order_no"]), attempt_ref));
    }
    let own = |buyer: String, order_no: String| {
        let t = &w.t;
        async move {
            let r = t.http.get(t.url(&format!("/api/v1/orders/{order_no}"))).bearer_auth(&buyer).send().await.unwrap();
            r.json::<Value>().await.unwrap()
        }
    };
    let seen = own(orders[0].0.clone(), orders[0].1.clone()).await;
    assert_eq!(seen["lines"][0]["keys"].as_array().map(Vec::len), Some(1), "{seen}");
    let mut case_ids = Vec::new();
    for (_, _, attempt_ref) in &orders {
        let dispute = w.stripe.open_dispute(&w.intent_of(attempt_ref), 500, 7 * 86_400);
        let event = FakeStripe::case_event("charge.dispute.created", &dispute, dispute["created"].as_i64().unwrap());
        assert_eq!(w.stripe.send_event(&event).await.0, 200);
        let id = w.cases("").await.into_iter().find(|c| c["provider_case_id"] == dispute["id"]).unwrap()["id"].clone();
        case_ids.push(s(&id));
    }
    let first = w.t.admin_get(&format!("/api/v1/admin/cases/{}", case_ids[0])).await;
    assert_eq!(first["keys_held"], false, "shown already: nothing to hold");
    let second = w.t.admin_get(&format!("/api/v1/admin/cases/{}", case_ids[1])).await;
    assert_eq!(second["keys_held"], true);
    // The second buyer's key is held back (the operator still sees it); no reveal is logged.
    let held = own(orders[1].0.clone(), orders[1].1.clone()).await;
    assert!(held["lines"][0].get("keys").is_none() && held["lines"][0]["keys_held"] == 1, "{held}");
    let admin = w.t.order(&orders[1].1).await;
    assert_eq!(admin["lines"][0]["keys"].as_array().map(Vec::len), Some(1), "{admin}");
    let reveals = format!(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM key_reveals WHERE order_no = '{}' AND channel = 'api'",
        orders[1].1
    );
    assert_eq!(w.t.count(&reveals).await, 0);
    let url = w.t.url(&format!("/checkout/return/{}", orders[1].2));
    let cookie = format!("kassa_session={}", orders[1].0);
    let page = w.t.http.get(url).header("cookie", cookie).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("id=\"keys-held\"") && !page.contains("KEY-"), "{page}");
    // Released by the operator: the buyer sees it, and the reveal is logged.
    let (status, released) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{}/release-keys", case_ids[1]), json!({})).await;
    assert_eq!((status, &released["keys_held"]), (StatusCode::OK, &json!(false)), "{released}");
    let (status, again) = w.t.admin_post(&format!("/api/v1/admin/cases/{}/release-keys", case_ids[1]), json!({})).await;
    assert_eq!((status, s(&again["error"]["code"])), (StatusCode::CONFLICT, "keys_not_held".into()));
    let shown = own(orders[1].0.clone(), orders[1].1.clone()).await;
    assert_eq!(shown["lines"][0]["keys"].as_array().map(Vec::len), Some(1), "{shown}");
    assert_eq!(w.t.count(&reveals).await, 1);
    w.t.assert_clean().await;
}

on_both!(a_fraud_warning_is_answered_by_one_refund_per_amount_never_past_the_capture, refunded);

async fn refunded(backend: Backend) {
    let w = world(backend).await;
    let (order_no, attempt_ref) = w.paid("stripe").await;
    let warning = w.stripe.add_warning(&w.intent_of(&attempt_ref), true);
    let event =
        FakeStripe::case_event("radar.early_fraud_warning.created", &warning, warning["created"].as_i64().unwrap());
    assert_eq!(w.stripe.send_event(&event).await.0, 200);
    let case = w.cases("").await.into_iter().next().expect("the warning");
    assert_eq!((s(&case["kind"]), s(&case["reason"])), ("fraud_warning".into(), "made_with_stolen_card".into()));
    let id = s(&case["id"]);
    let refund = |amount: i64| {
        let t = &w.t;
        let path = format!("/api/v1/admin/cases/{id}/refund");
        async move { t.admin_post(&path, json!({"amount_minor": amount})).await }
    };
    let (status, made) = refund(5_000).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(s(&made["refund_no"]), format!("case-{id}-5000"));
    // Asked again (a double click): the same refund, not a second one.
    let (status, again) = refund(5_000).await;
    assert_eq!((status, &again["refund_no"]), (StatusCode::OK, &made["refund_no"]));
    // Past what was captured (5,000 + 4,000 > 8,888): refused by the refund engine.
    let (status, over) = refund(4_000).await;
    assert_eq!((status, s(&over["error"]["code"])), (StatusCode::CONFLICT, "refund_exceeds_captured".into()), "{over}");
    let (status, rest) = refund(3_888).await;
    assert_eq!(status, StatusCode::CREATED, "{rest}");
    w.t.app.refunder.step().await.unwrap();
    assert_eq!(w.t.status(&order_no).await, "refunded");
    let detail = w.t.admin_get(&format!("/api/v1/admin/cases/{id}")).await;
    let actions: Vec<String> = detail["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["source"] == "operator")
        .map(|m| s(&m["kind"]))
        .collect();
    assert_eq!(actions, vec!["refund_requested", "refund_requested"]);
    // An unlinked case has no order to refund.
    w.stripe.open_dispute("pi_unknown", 100, 86_400);
    w.t.admin_post("/api/v1/admin/cases/poll", json!({"provider": "stripe"})).await;
    let unknown = w.cases("").await.into_iter().find(|c| c["order_no"].is_null()).unwrap();
    let (status, body) =
        w.t.admin_post(&format!("/api/v1/admin/cases/{}/refund", s(&unknown["id"])), json!({"amount_minor": 1})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "case_unlinked".into()));
    w.t.assert_clean().await;
}

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
    let w = world(backend).await;
    let (_, attempt_ref) = w.paid("stripe").await;
    let pi = w.intent_of(&attempt_ref);
    let dispute = w.stripe.open_dispute(&pi, 8_888, 3 * 3_600);
    let event = FakeStripe::case_event("charge.dispute.created", &dispute, dispute["created"].as_i64().unwrap());
    assert_eq!(w.stripe.send_event(&event).await.0, 200);
    let alerts = |kind: &'static str| {
        let t = &w.t;
        async move { t.count(&format!("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = '{kind}'")).await }
    };
    w.t.app.monitor.step().await.unwrap();
    w.t.app.monitor.step().await.unwrap();
    assert_eq!((alerts("case_due_soon").await, alerts("case_overdue").await), (1, 0));
    w.advance(4 * 3_600_000);
    let report = w.t.app.monitor.step().await.unwrap();
    assert_eq!(report.case_alerts, 1);
    assert_eq!(w.t.app.monitor.step().await.unwrap().case_alerts, 0, "raised once");
    assert_eq!(alerts("case_overdue").await, 1);
    let metrics = w.t.http.get(w.t.url("/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("kassa_cases_open{provider=\"stripe\",state=\"needs_response\"} 1"), "{metrics}");
    w.t.assert_clean().await;
}

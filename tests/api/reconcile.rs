//! Reconciliation with the real gateways (their fakes): payments and refunds whose notifications
//! were lost found by active query, a waiting buyer's refresh, expired trades closed at the
//! gateway, late payments confirmed, and `kassa reconcile` from the command line.

use kassa::store::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, TestApp, s};
use crate::fakes::{self, fixture};
use crate::gateways::world;
use crate::on_both;

/// Notifications lost: the reconciler finds the payments by active query, applies them through
/// the state machine, records and alerts each discrepancy, and stops asking once settled.
async fn reconcile_lost_notifications(backend: Backend) {
    let w = world(backend, true).await;
    let clock = w.t.clock.clone().unwrap();
    let mut paid = Vec::new();
    for body in [
        json!({"gateway": "wechatpay", "payer": {"openid": "oBuyer"}}),
        json!({"gateway": "stripe"}),
        json!({"gateway": "alipay"}),
    ] {
        let (status, placed) = w.checkout(body.clone()).await;
        assert_eq!(status, StatusCode::CREATED, "{placed}");
        paid.push((s(&placed["order_no"]), s(&placed["attempt_ref"]), placed));
    }
    // Alipay creates its trade when the cashier opens; open it, then all three pay silently.
    let fields: Vec<(String, String)> =
        paid[2].2["payment"]["fields"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), s(v))).collect();
    w.t.http.post(&w.alipay.url).form(&fields).send().await.unwrap();
    assert!(w.wechat.pay(&paid[0].1, false).await.is_none());
    assert!(w.stripe.pay(&paid[1].1, false).await.is_none());
    w.alipay.pay(&paid[2].1, false).await;
    // A fourth order stays unpaid: queried, left alone.
    let (_, unpaid) = w.checkout(json!({"gateway": "wechatpay", "payer": {"openid": "oOther"}})).await;

    // Too young: left to its notification.
    let report = w.t.app.reconciler.pass(false).await.unwrap();
    assert_eq!(report.attempts_queried, 0);
    clock.advance_ms(61_000);
    let report = w.t.app.reconciler.pass(false).await.unwrap();
    assert_eq!(
        (report.attempts_queried, report.payments_applied, report.unchanged, report.errors),
        (4, 3, 1, 0),
        "{report:?}"
    );
    assert_eq!(report.findings.len(), 3);
    assert!(report.findings.iter().all(|f| f.kind == "missed_payment_notification"));
    for (order_no, _, _) in &paid {
        assert_eq!(w.t.status(order_no).await, "paid", "{order_no}");
    }
    assert_eq!(w.t.status(&s(&unpaid["order_no"])).await, "pending_payment");
    assert_eq!(w.t.count("SELECT COUNT(*) FROM reconciliation_findings").await, 3);
    assert_eq!(w.t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'reconcile_discrepancy'").await, 3);
    // Settled rows are not asked again; the unpaid one waits for its backoff.
    let report = w.t.app.reconciler.pass(false).await.unwrap();
    assert_eq!(report.attempts_queried, 0, "{report:?}");
    // The late notification still arrives later: acknowledged, nothing changes.
    let reply = w
        .stripe
        .send_event(&json!({"id": "evt_late", "type": "checkout.session.completed",
        "data": {"object": {"client_reference_id": paid[1].1, "payment_status": "paid", "status": "complete",
        "payment_intent": w.stripe.session_for(&paid[1].1).unwrap().txn_id, "amount_total": 8888, "currency": "cny"}}}))
        .await;
    assert_eq!(reply.0, 200);
    assert_eq!(w.t.count("SELECT COUNT(*) FROM payment_attempts WHERE status = 'succeeded'").await, 3);
    assert_eq!(w.bad_signatures(), 0);
    w.t.assert_clean().await;
}
on_both!(reconcile_finds_lost_payments, reconcile_lost_notifications);

/// A buyer waiting on a pending order (after `wx.requestPayment`, or back on the return page)
/// makes kassa ask the gateway at once, at most once per gap per attempt.
async fn buyer_refresh(backend: Backend) {
    let w = world(backend, true).await;
    let clock = w.t.clock.clone().unwrap();
    let buyer = w.t.buyer().await;
    let basket = w.t.basket(&buyer, &[("TEA", 1)]).await;
    let (_, placed) =
        w.t.checkout_with(&buyer, &basket, &json!({"gateway": "wechatpay", "payer": {"openid": "oBuyer"}})).await;
    let order_url = w.t.url(&format!("/api/v1/orders/{}?refresh=true", s(&placed["order_no"])));
    let queries = || w.wechat.ledger.lock().unwrap().calls.iter().filter(|c| *c == "query").count();
    let get = |url: String| w.t.http.get(url).bearer_auth(&buyer).send();
    let v: Value = get(order_url.clone()).await.unwrap().json().await.unwrap();
    assert_eq!((s(&v["status"]), queries()), ("pending_payment".to_string(), 1));
    w.wechat.pay(&s(&placed["attempt_ref"]), false).await;
    // Within the gap: not asked again.
    let v: Value = get(order_url.clone()).await.unwrap().json().await.unwrap();
    assert_eq!((s(&v["status"]), queries()), ("pending_payment".to_string(), 1));
    clock.advance_ms(5_001);
    let v: Value = get(order_url.clone()).await.unwrap().json().await.unwrap();
    assert_eq!((s(&v["status"]), queries()), ("paid".to_string(), 2));
    // Unknown query parameters are refused.
    let r = get(w.t.url(&format!("/api/v1/orders/{}?refesh=1", s(&placed["order_no"])))).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);

    // Stripe redirect back: the return page asks, then shows the truth.
    let basket = w.t.basket(&buyer, &[("TEA", 1)]).await;
    let (_, placed) = w.t.checkout_with(&buyer, &basket, &json!({"gateway": "stripe"})).await;
    w.stripe.pay(&s(&placed["attempt_ref"]), false).await;
    let page = get(w.t.url(&format!("/checkout/return/{}", s(&placed["attempt_ref"])))).await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_eq!(w.t.status(&s(&placed["order_no"])).await, "paid");
    w.t.assert_clean().await;
}
on_both!(buyer_refresh_queries_the_gateway, buyer_refresh);

/// A refund the gateway took for processing whose notification never came is settled by query.
async fn reconcile_processing_refund(backend: Backend) {
    let w = world(backend, true).await;
    let clock = w.t.clock.clone().unwrap();
    let (_, placed) = w.checkout(json!({"gateway": "wechatpay", "payer": {"openid": "oBuyer"}})).await;
    let order_no = s(&placed["order_no"]);
    assert_eq!(w.wechat.pay(&s(&placed["attempt_ref"]), true).await.unwrap().0, 204);
    w.wechat.ledger.lock().unwrap().refunds_pending = true;
    let refund = w.refund(&order_no, "RF-P1", 8_888).await;
    assert_eq!(refund["status"], "processing", "{refund}");
    clock.advance_ms(61_000);
    let report = w.t.app.reconciler.pass(false).await.unwrap();
    assert_eq!((report.refunds_queried, report.refunds_settled), (1, 1), "{report:?}");
    assert_eq!(report.findings[0].kind, "missed_refund_notification");
    assert_eq!(w.t.status(&order_no).await, "refunded");
    w.t.assert_clean().await;
}
on_both!(reconcile_settles_processing_refunds, reconcile_processing_refund);

/// The sweeper closes expired Alipay trades at the gateway, and a trade paid just before the close
/// is applied as the payment it is.
async fn alipay_expiry_closes_at_gateway(backend: Backend) {
    let w = world(backend, true).await;
    let clock = w.t.clock.clone().unwrap();
    let mut placed = Vec::new();
    for _ in 0..2 {
        let (_, p) = w.checkout(json!({"gateway": "alipay"})).await;
        let fields: Vec<(String, String)> =
            p["payment"]["fields"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), s(v))).collect();
        w.t.http.post(&w.alipay.url).form(&fields).send().await.unwrap();
        placed.push(p);
    }
    // The second buyer pays, but the notification is lost.
    w.alipay.pay(&s(&placed[1]["attempt_ref"]), false).await;
    clock.advance_ms(901_000);
    let report = w.t.app.sweeper.step().await.unwrap();
    assert_eq!((report.expired, report.paid_on_close), (1, 1), "{report:?}");
    assert_eq!(w.alipay.trade(&s(&placed[0]["attempt_ref"])).unwrap().status, "TRADE_CLOSED");
    assert_eq!(w.t.status(&s(&placed[0]["order_no"])).await, "expired");
    assert_eq!(w.t.status(&s(&placed[1]["order_no"])).await, "paid");
    w.t.assert_clean().await;
}
on_both!(alipay_sweeper_closes_or_finds_payment, alipay_expiry_closes_at_gateway);

async fn run_kassa(args: &[&str], config: &std::path::Path) -> std::process::Output {
    let mut cmd = crate::common::kassa_command();
    cmd.args(args).arg(config).arg("--data-dir").arg(config.with_extension("data")).env_remove("KASSA_DATABASE_URL");
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

/// `kassa reconcile` runs one pass against a database with the gateways of a config file.
async fn reconcile_command(backend: Backend) {
    let w = world(backend, false).await;
    let (_, placed) = w.checkout(json!({"gateway": "wechatpay", "payer": {"openid": "oBuyer"}})).await;
    w.wechat.pay(&s(&placed["attempt_ref"]), false).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kassa.toml");
    std::fs::write(
        &config,
        format!(
            "database_url = \"{db}\"\nreconcile_after_seconds = 0\n\n[gateways.wechatpay]\nmchid = \"{mchid}\"\nappid = \"{appid}\"\n\
             merchant_serial_no = \"{serial}\"\nmerchant_private_key_file = \"{key}\"\nplatform_public_key_file = \"{pubkey}\"\n\
             platform_serial = \"{pserial}\"\napi_v3_key = \"{v3}\"\napi_base_url = \"{url}\"\n",
            db = w.t.database_url,
            mchid = fakes::WECHAT_MCHID,
            appid = fakes::WECHAT_APPID,
            serial = fakes::WECHAT_MERCHANT_SERIAL,
            key = fixture("merchant_private.pem").display(),
            pubkey = fixture("provider_public.pem").display(),
            pserial = fakes::WECHAT_PLATFORM_SERIAL,
            v3 = fakes::WECHAT_API_V3_KEY,
            url = w.wechat.url,
        ),
    )
    .unwrap();
    let out = run_kassa(&["reconcile", "--json", "--config"], &config).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["payments_applied"], 1, "{report}");
    assert_eq!(report["findings"][0]["kind"], "missed_payment_notification");
    assert_eq!(w.t.status(&s(&placed["order_no"])).await, "paid");
    // A second run finds nothing to do; the text summary names the counts.
    let out = run_kassa(&["reconcile", "--config"], &config).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("payments applied     0"), "{text}");
}
on_both!(reconcile_cli, reconcile_command);

/// Late payments held for the operator are confirmed at the gateway once; one the gateway does not
/// know as paid is a critical discrepancy.
async fn reconcile_late_payments(backend: Backend) {
    let opts = Opts {
        hold_seconds: 0,
        ignore_close: true,
        manual_clock: true,
        late_policy: kassa::domain::decide::LatePolicy::Manual,
        ..Default::default()
    };
    let t = TestApp::spawn_with(backend, opts).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let mut late = Vec::new();
    for _ in 0..2 {
        let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
        late.push((order_no, attempt_ref));
    }
    t.clock.as_ref().unwrap().advance_ms(1_000);
    assert_eq!(t.app.sweeper.step().await.unwrap().expired, 2);
    for (_, attempt_ref) in &late {
        assert_eq!(t.complete(attempt_ref, "succeeded", 1).await.0, StatusCode::OK);
    }
    t.settle().await;
    for (order_no, _) in &late {
        assert_eq!(t.status(order_no).await, "paid_after_expiry");
    }
    // The gateway "loses" the second payment (as a forged or reversed one would look).
    sql::query("UPDATE sandbox_payments SET status = 'open' WHERE attempt_ref = $1")
        .bind(&late[1].1)
        .execute(t.sandbox_records().read_pool())
        .await
        .unwrap();
    t.clock.as_ref().unwrap().advance_ms(61_000);
    let report = t.app.reconciler.pass(false).await.unwrap();
    assert_eq!((report.attempts_queried, report.unchanged), (2, 1), "{report:?}");
    assert_eq!(report.findings.len(), 1, "{report:?}");
    assert_eq!(
        (report.findings[0].kind, report.findings[0].attempt_ref.as_str()),
        ("late_payment_not_confirmed", late[1].1.as_str())
    );
    let alert: String = sql::query_scalar("SELECT severity FROM alerts WHERE kind = 'reconcile_discrepancy'")
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    assert_eq!(alert, "critical");
    // Nothing is changed by the reconciler: the operator decides. The confirmed one is never asked again.
    assert_eq!(t.status(&late[1].0).await, "paid_after_expiry");
    let order = t.order(&late[1].0).await;
    assert_eq!(order["reconciliation"][0]["kind"], "late_payment_not_confirmed");
    t.clock.as_ref().unwrap().advance_ms(3_600_000);
    let report = t.app.reconciler.pass(false).await.unwrap();
    assert_eq!(report.attempts_queried, 1, "only the unconfirmed one: {report:?}");
}
on_both!(reconcile_confirms_late_payments, reconcile_late_payments);

//! WeChat mini-program shipping reports (docs/gateways/wechat-shipping.md) against the WeChat fake, which checks
//! the access token, the order key, the payer and each field the way WeChat does.

use reqwest::StatusCode;
use serde_json::{Value, json};

use kassa::gateway::config::GatewaysFile;

use crate::common::{Backend, Opts, Shop, s};
use crate::fakes::{self, FakeAlipay, FakeStripe, FakeWechat};
use crate::on_both;

const OPENID: &str = "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o";

/// kassa with WeChat Pay pointed at its fake (with the mini program's secret when `shipping`, so
/// shipping reports are on), its clock held still, selling ten "TEA" and the digital "CARD" with
/// ten card keys.
async fn shop(backend: Backend, shipping: bool) -> Shop {
    let mount = |_: &FakeAlipay, wechat: &FakeWechat, _: &FakeStripe| GatewaysFile {
        wechatpay: Some(if shipping { wechat.config_with_shipping() } else { wechat.config() }),
        ..Default::default()
    };
    let w = Shop::mounting(backend, Opts { manual_clock: true, ..Default::default() }, 10, mount).await;
    w.t.admin_post(
        "/api/v1/admin/skus",
        json!({"sku": "CARD", "name": "会员月卡", "price_minor": 3_000, "currency": "CNY", "kind": "digital"}),
    )
    .await;
    let keys: Vec<String> = (0..10).map(|i| format!("CARD-KEY-{i}")).collect();
    w.t.admin_post("/api/v1/admin/skus/CARD/keys", json!({"keys": keys})).await;
    w
}

impl Shop {
    /// An order of `sku` paid with WeChat Pay on `channel` (a mini program's payer on JSAPI); its
    /// number and attempt.
    async fn paid_by_wechat(&self, sku: &str, channel: &str) -> (String, String) {
        let mut body = json!({"gateway": "wechatpay", "channel": channel});
        if channel == "jsapi" {
            body["payer"] = json!({"openid": OPENID});
        }
        let (status, placed) = self.checkout_of(sku, body).await;
        assert_eq!(status, StatusCode::CREATED, "{placed}");
        let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
        let reply = self.wechat.pay(&attempt_ref, true).await.unwrap();
        assert_eq!(reply.0, 204, "{reply:?}");
        (order_no, attempt_ref)
    }

    /// One step of the shipping reporter: the reports it sent.
    async fn send_reports(&self) -> usize {
        self.t.app.shipper.as_ref().expect("shipping reports are on").step().await.unwrap()
    }

    /// The order's shipping report, as the admin API shows it.
    async fn shipping_report(&self, order_no: &str) -> Value {
        self.t.admin_get(&format!("/api/v1/admin/orders/{order_no}")).await["shipping_report"].clone()
    }

    /// The reports WeChat received.
    fn uploads(&self) -> Vec<Value> {
        self.wechat.ledger.lock().unwrap().shipping.clone()
    }
}

on_both!(mini_program_orders_are_reported_to_wechat_when_delivered, reports);
async fn reports(backend: Backend) {
    let w = shop(backend, true).await;
    // Card keys go out at payment: the order is delivered and its report queued with it.
    let (order_no, attempt_ref) = w.paid_by_wechat("CARD", "jsapi").await;
    assert_eq!(w.t.status(&order_no).await, "delivered");
    let payer: (String, String) = {
        let row =
            kassa::store::sql::query("SELECT payer_openid, payer_appid FROM payment_attempts WHERE attempt_ref = $1")
                .bind(&attempt_ref)
                .fetch_one(w.t.app.state.db.read_pool())
                .await
                .unwrap();
        (row.get("payer_openid"), row.get("payer_appid"))
    };
    assert_eq!(payer, (OPENID.to_string(), fakes::WECHAT_APPID.to_string()));
    assert_eq!(w.shipping_report(&order_no).await["status"], "pending");
    assert_eq!(w.send_reports().await, 1);
    let report = w.shipping_report(&order_no).await;
    assert_eq!((report["status"].as_str(), report["logistics_type"].as_i64()), (Some("reported"), Some(3)), "{report}");
    let uploads = w.uploads();
    assert_eq!(uploads.len(), 1);
    let up = &uploads[0];
    assert_eq!(
        up["order_key"],
        json!({"order_number_type": 1, "mchid": fakes::WECHAT_MCHID, "out_trade_no": attempt_ref})
    );
    assert_eq!((up["logistics_type"].as_i64(), up["delivery_mode"].as_i64()), (Some(3), Some(1)));
    assert_eq!(up["shipping_list"], json!([{"item_desc": "会员月卡*1"}]));
    assert_eq!(up["payer"]["openid"], OPENID);
    assert!(up["upload_time"].as_str().unwrap().ends_with("+08:00"), "{up}");
    // Nothing more to send, and a second step sends nothing twice.
    assert_eq!(w.send_reports().await, 0);

    // WeChat has not indexed the payment yet (10060001): sent again later, with the cached token.
    let (second, _) = w.paid_by_wechat("CARD", "jsapi").await;
    w.wechat.ledger.lock().unwrap().shipping_script.push_back(10_060_001);
    assert_eq!(w.send_reports().await, 1);
    let report = w.shipping_report(&second).await;
    assert_eq!((report["status"].as_str(), report["tries"].as_i64()), (Some("pending"), Some(1)), "{report}");
    assert!(s(&report["last_error"]).contains("10060001"), "{report}");
    assert_eq!(w.send_reports().await, 0, "not due yet");
    w.advance(5_000);
    assert_eq!(w.send_reports().await, 1);
    assert_eq!(w.shipping_report(&second).await["status"], "reported");
    assert_eq!(w.wechat.ledger.lock().unwrap().tokens_issued, 1, "one token serves every report");

    // A physical order shipped by express, under a token WeChat has revoked (40001): a forced
    // refresh and a second try.
    let (third, _) = w.paid_by_wechat("TEA", "jsapi").await;
    assert_eq!(w.t.status(&third).await, "paid");
    assert_eq!(w.send_reports().await, 0, "nothing to report before the goods ship");
    let deliver = format!("/api/v1/admin/orders/{third}/deliver");
    let (status, body) = w.t.admin_post(&deliver, json!({"tracking_no": "SF1234567890"})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_shipment".into()));
    assert_eq!(w.t.status(&third).await, "paid", "a refused shipment changes nothing");
    let (status, _) = w.t.admin_post(&deliver, json!({"tracking_no": "SF1234567890", "express_company": "SF"})).await;
    assert_eq!(status, StatusCode::OK);
    w.wechat.ledger.lock().unwrap().mini_token_revoked = true;
    assert_eq!(w.send_reports().await, 1);
    let report = w.shipping_report(&third).await;
    assert_eq!((report["status"].as_str(), report["logistics_type"].as_i64()), (Some("reported"), Some(1)), "{report}");
    let up = w.uploads().pop().unwrap();
    assert_eq!(
        up["shipping_list"],
        json!([{"item_desc": "Longjing tea*1", "tracking_no": "SF1234567890", "express_company": "SF"}])
    );
    assert_eq!(w.wechat.ledger.lock().unwrap().forced_refreshes, 1);

    // Refused for good (10060004, the order cannot ship): given up at once, alerted. WeChat busy
    // on every try: sent again with growing pauses, then given up and alerted. (Both paid first:
    // the fake signs its notifications with the real time.)
    let (first_paid, _) = w.paid_by_wechat("CARD", "jsapi").await;
    let (second_paid, _) = w.paid_by_wechat("CARD", "jsapi").await;
    // Orders not paid in a mini program are not reported: WeChat Native (a QR code) here, a JSAPI
    // merchant without the mini program's secret below.
    let (native, _) = w.paid_by_wechat("CARD", "native").await;
    assert_eq!(w.t.status(&native).await, "delivered");
    assert!(w.shipping_report(&native).await.is_null());
    w.wechat.ledger.lock().unwrap().shipping_script.extend([10_060_004, -1]);
    assert_eq!(w.send_reports().await, 2);
    // Whichever was sent first met the refusal.
    let (refused, busy) = if w.shipping_report(&first_paid).await["status"] == "failed" {
        (first_paid, second_paid)
    } else {
        (second_paid, first_paid)
    };
    let report = w.shipping_report(&refused).await;
    assert_eq!(report["status"], "failed", "{report}");
    assert!(s(&report["last_error"]).contains("10060004"), "{report}");
    let alerted =
        kassa::store::sql::query_scalar::<String>("SELECT order_no FROM alerts WHERE kind = 'shipping_report'")
            .fetch_all(w.t.app.state.db.read_pool())
            .await
            .unwrap();
    assert_eq!(alerted, vec![refused.clone()]);
    for _ in 1..kassa::domain::shipping::TRIES_MAX {
        assert_eq!(w.shipping_report(&busy).await["status"], "pending");
        w.wechat.ledger.lock().unwrap().shipping_script.push_back(-1);
        w.advance(3_600_000);
        assert_eq!(w.send_reports().await, 1, "only the busy one is sent again");
    }
    let report = w.shipping_report(&busy).await;
    assert_eq!(
        (report["status"].as_str(), report["tries"].as_i64()),
        (Some("failed"), Some(kassa::domain::shipping::TRIES_MAX))
    );
    assert_eq!(w.t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'shipping_report'").await, 2);
    w.advance(3_600_000);
    assert_eq!(w.send_reports().await, 0, "a failed report is not sent again");

    // `kassa check` knows a report of a payment that is not a mini program's (S1).
    let native_attempt = s(&w.t.order(&native).await["attempts"][0]["attempt_ref"]);
    let pool = w.t.app.state.db.read_pool();
    kassa::store::sql::query(
        "INSERT INTO shipping_reports (order_no, attempt_ref, status, logistics_type, tries, next_at, created_at) \
         VALUES ($1, $2, 'failed', 3, 1, 0, 0)",
    )
    .bind(&native)
    .bind(&native_attempt)
    .execute(pool)
    .await
    .unwrap();
    let found: Vec<String> =
        w.t.violations().await.into_iter().filter(|v| v.invariant == "S1").map(|v| v.detail).collect();
    assert_eq!(found, vec![format!("order {native} has a shipping report for a wechatpay native payment")]);
    kassa::store::sql::query("DELETE FROM shipping_reports WHERE order_no = $1")
        .bind(&native)
        .execute(pool)
        .await
        .unwrap();
    w.t.assert_clean().await;
}

on_both!(without_the_mini_programs_secret_nothing_is_reported, off);
async fn off(backend: Backend) {
    let w = shop(backend, false).await;
    assert!(w.t.app.shipper.is_none());
    let (order_no, _) = w.paid_by_wechat("CARD", "jsapi").await;
    assert_eq!(w.t.status(&order_no).await, "delivered");
    // The payer is kept on the attempt all the same; no report is queued.
    assert_eq!(w.t.count("SELECT COUNT(*) FROM payment_attempts WHERE payer_openid IS NOT NULL").await, 1);
    assert_eq!(w.t.count("SELECT COUNT(*) FROM shipping_reports").await, 0);
    assert!(w.shipping_report(&order_no).await.is_null());
    w.t.assert_clean().await;
}

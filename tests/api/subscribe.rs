//! WeChat mini-program subscribe messages (docs/gateways/wechat-subscribe.md) against the WeChat
//! fake, which checks the access token, the openid, the template, the buyer's consent and each
//! field's limits the way WeChat does.

use reqwest::StatusCode;
use serde_json::{Value, json};

use kassa::gateway::config::GatewaysFile;
use kassa::gateway::wechat_subscribe::SubscribeConfig;

use crate::common::{Backend, Opts, Shop, s};
use crate::fakes::{FakeAlipay, FakeStripe, FakeWechat, SUBSCRIBE_TEMPLATES};
use crate::on_both;

const OPENID: &str = "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o";

fn fields(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// kassa with WeChat Pay, its mini program's secret and both templates configured, selling the
/// digital "CARD" with ten keys (and ten "TEA").
async fn shop(backend: Backend) -> Shop {
    let mount = |_: &FakeAlipay, wechat: &FakeWechat, _: &FakeStripe| {
        let mut config = wechat.config_with_shipping();
        config.subscribe = Some(SubscribeConfig {
            paid_template: Some(SUBSCRIBE_TEMPLATES[0].into()),
            paid_fields: fields(&[
                ("character_string1", "order_no"),
                ("amount2", "amount"),
                ("thing3", "items"),
                ("time4", "time"),
            ]),
            delivered_template: Some(SUBSCRIBE_TEMPLATES[1].into()),
            delivered_fields: fields(&[("character_string1", "order_no"), ("thing2", "items"), ("phrase3", "status")]),
            page: Some("pages/order/detail?order_no={order_no}".into()),
            state: None,
        });
        GatewaysFile { wechatpay: Some(config), ..Default::default() }
    };
    let w = Shop::mounting(backend, Opts { manual_clock: true, ..Default::default() }, 10, mount).await;
    let body = json!({"sku": "CARD", "name": "会员月卡（连续包月，含全部频道与高清画质）", "price_minor": 3_000, "currency": "CNY", "kind": "digital"});
    w.t.admin_post("/api/v1/admin/skus", body).await;
    let keys: Vec<String> = (0..10).map(|i| format!("CARD-KEY-{i}")).collect();
    w.t.admin_post("/api/v1/admin/skus/CARD/keys", json!({"keys": keys})).await;
    w
}

impl Shop {
    async fn paid_in_mini_program(&self, sku: &str, channel: &str) -> String {
        let mut body = json!({"gateway": "wechatpay", "channel": channel});
        if channel == "jsapi" {
            body["payer"] = json!({"openid": OPENID});
        }
        let (status, placed) = self.checkout_of(sku, body).await;
        assert_eq!(status, StatusCode::CREATED, "{placed}");
        let reply = self.wechat.pay(&s(&placed["attempt_ref"]), true).await.unwrap();
        assert_eq!(reply.0, 204, "{reply:?}");
        s(&placed["order_no"])
    }

    async fn notify(&self) -> usize {
        self.t.app.notifier.as_ref().expect("subscribe messages are on").step().await.unwrap()
    }

    async fn messages(&self, order_no: &str) -> Vec<(String, String)> {
        let order = self.t.admin_get(&format!("/api/v1/admin/orders/{order_no}")).await;
        order["subscribe_messages"].as_array().unwrap().iter().map(|m| (s(&m["kind"]), s(&m["status"]))).collect()
    }

    fn consent(&self, template: usize, times: u32) {
        let mut l = self.wechat.ledger.lock().unwrap();
        *l.subscribe_consents.entry((OPENID.to_string(), SUBSCRIBE_TEMPLATES[template].to_string())).or_insert(0) +=
            times;
    }

    fn sent(&self) -> Vec<Value> {
        self.wechat.ledger.lock().unwrap().subscribe_sent.clone()
    }
}

on_both!(mini_program_buyers_get_their_messages, messages);
async fn messages(backend: Backend) {
    let w = shop(backend).await;
    // The buyer consented to the paid message only.
    w.consent(0, 1);
    let order_no = w.paid_in_mini_program("CARD", "jsapi").await;
    assert_eq!(w.t.status(&order_no).await, "delivered");
    assert_eq!(w.notify().await, 2);
    let kinds = w.messages(&order_no).await;
    assert_eq!(kinds, [("paid".to_string(), "sent".to_string()), ("delivered".to_string(), "refused".to_string())]);
    let sent = w.sent();
    assert_eq!(sent.len(), 1);
    let m = &sent[0];
    assert_eq!((m["touser"].as_str(), m["template_id"].as_str()), (Some(OPENID), Some(SUBSCRIBE_TEMPLATES[0])));
    assert_eq!(m["data"]["character_string1"]["value"], order_no.as_str());
    assert_eq!(m["data"]["amount2"]["value"], "¥30.00");
    let item = s(&m["data"]["thing3"]["value"]);
    assert!(item.chars().count() <= 20 && item.starts_with("会员月卡"), "{item}");
    assert!(s(&m["data"]["time4"]["value"]).contains('年'), "{m}");
    assert_eq!(m["page"], format!("pages/order/detail?order_no={order_no}"));
    assert_eq!(m["miniprogram_state"], "formal");
    // A refusal for want of consent is recorded, never tried again, never alerted.
    assert_eq!(w.notify().await, 0);
    assert_eq!(w.t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'subscribe_failed'").await, 0);

    // A stale token: refreshed once, then sent. WeChat busy: sent again after its pause.
    w.consent(0, 1);
    w.consent(1, 1);
    let second = w.paid_in_mini_program("CARD", "jsapi").await;
    w.wechat.ledger.lock().unwrap().mini_token_revoked = true;
    w.wechat.ledger.lock().unwrap().subscribe_script.push_back(-1);
    assert_eq!(w.notify().await, 2);
    assert_eq!(w.wechat.ledger.lock().unwrap().forced_refreshes, 1);
    let kinds = w.messages(&second).await;
    assert_eq!(kinds, [("paid".to_string(), "pending".to_string()), ("delivered".to_string(), "sent".to_string())]);
    assert_eq!(w.notify().await, 0, "not before its pause");
    w.advance(10_000);
    assert_eq!(w.notify().await, 1);
    assert_eq!(w.messages(&second).await[0], ("paid".to_string(), "sent".to_string()));
    let delivered = w.sent().into_iter().find(|m| m["template_id"] == SUBSCRIBE_TEMPLATES[1]).unwrap();
    assert_eq!(delivered["data"]["phrase3"]["value"], "已发货");

    // A message WeChat refuses for good (47003): given up at once, alerted.
    w.consent(0, 1);
    let third = w.paid_in_mini_program("TEA", "jsapi").await;
    assert_eq!(w.t.status(&third).await, "paid");
    w.wechat.ledger.lock().unwrap().subscribe_script.push_back(47_003);
    assert_eq!(w.notify().await, 1);
    assert_eq!(w.messages(&third).await, [("paid".to_string(), "failed".to_string())]);
    assert_eq!(w.t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'subscribe_failed'").await, 1);

    // Only a mini program's JSAPI payments: a Native (QR) payment gets none.
    let native = w.paid_in_mini_program("TEA", "native").await;
    assert!(w.messages(&native).await.is_empty());
    w.t.assert_clean().await;
}

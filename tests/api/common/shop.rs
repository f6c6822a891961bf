//! A shop on the real gateway adapters: kassa with Alipay, WeChat Pay and Stripe pointed at the
//! local fakes (`fakes/`), and the fakes, for the tests of those gateways' flows, reconciliation,
//! statements and shipping reports. A test file adds the helpers only it needs in an `impl Shop`
//! of its own.

use kassa::gateway::config::GatewaysFile;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Backend, Opts, TestApp, s};
use crate::fakes::{FakeAlipay, FakeStripe, FakeWechat};

/// The SKU a shop sells from the start: Longjing tea at 88.88 CNY.
const TEA: &str = "TEA";

pub struct Shop {
    pub t: TestApp,
    pub alipay: FakeAlipay,
    pub wechat: FakeWechat,
    pub stripe: FakeStripe,
}

/// The three gateways, each pointed at its fake.
fn all_gateways(alipay: &FakeAlipay, wechat: &FakeWechat, stripe: &FakeStripe) -> GatewaysFile {
    GatewaysFile { alipay: Some(alipay.config()), wechatpay: Some(wechat.config()), stripe: Some(stripe.config()) }
}

impl Shop {
    /// kassa with `opts` and the three gateways mounted, selling `tea_stock` units of "TEA".
    pub async fn start(backend: Backend, opts: Opts, tea_stock: i64) -> Shop {
        Shop::mounting(backend, opts, tea_stock, all_gateways).await
    }

    /// The same with the gateways `mount` makes of the fakes (all three are started whatever it
    /// mounts; Stripe's events go to kassa's notification URL).
    pub async fn mounting(
        backend: Backend,
        opts: Opts,
        tea_stock: i64,
        mount: impl FnOnce(&FakeAlipay, &FakeWechat, &FakeStripe) -> GatewaysFile,
    ) -> Shop {
        let (alipay, wechat, stripe) =
            (FakeAlipay::start().await, FakeWechat::start().await, FakeStripe::start().await);
        let gateways = mount(&alipay, &wechat, &stripe);
        let t = TestApp::spawn_with(backend, Opts { gateways, ..opts }).await;
        *stripe.webhook_url.lock().unwrap() = t.url("/notify/stripe");
        t.create_sku(TEA, "Longjing tea", 8_888, tea_stock).await;
        Shop { t, alipay, wechat, stripe }
    }

    /// A new buyer's checkout of one `sku` with `body`: the status and the JSON answer.
    pub async fn checkout_of(&self, sku: &str, body: Value) -> (StatusCode, Value) {
        let buyer = self.t.buyer().await;
        let basket = self.t.basket(&buyer, &[(sku, 1)]).await;
        self.t.checkout_with(&buyer, &basket, &body).await
    }

    /// A new buyer's checkout of one "TEA" with `body`: the status and the JSON answer.
    pub async fn checkout(&self, body: Value) -> (StatusCode, Value) {
        self.checkout_of(TEA, body).await
    }

    /// An order of one "TEA" paid at `gateway` (WeChat Pay Native, an Alipay code, or Stripe's
    /// page) and notified: (order_no, attempt_ref).
    pub async fn paid(&self, gateway: &str) -> (String, String) {
        let body = match gateway {
            "wechatpay" => json!({"gateway": "wechatpay", "channel": "native"}),
            "alipay" => json!({"gateway": "alipay", "channel": "qr"}),
            other => json!({"gateway": other}),
        };
        let (status, placed) = self.checkout(body).await;
        assert_eq!(status, StatusCode::CREATED, "{placed}");
        let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
        let reply = match gateway {
            "wechatpay" => self.wechat.pay(&attempt_ref, true).await,
            "alipay" => self.alipay.pay(&attempt_ref, true).await.1,
            _ => self.stripe.pay(&attempt_ref, true).await,
        };
        assert!(reply.is_some_and(|(status, _)| status < 300), "notified");
        assert_eq!(self.t.status(&order_no).await, "paid");
        (order_no, attempt_ref)
    }

    /// Requests a refund of `amount` on `order_no` and runs the refunder once: the refund as the
    /// order shows it then.
    pub async fn refund(&self, order_no: &str, refund_no: &str, amount: i64) -> Value {
        let (status, body) = self
            .t
            .admin_post(
                &format!("/api/v1/admin/orders/{order_no}/refunds"),
                json!({"refund_no": refund_no, "amount_minor": amount, "reason": "buyer asked"}),
            )
            .await;
        assert!(status.is_success(), "{body}");
        self.t.app.refunder.step().await.unwrap();
        let order = self.t.order(order_no).await;
        order["refunds"].as_array().unwrap().iter().find(|r| r["refund_no"] == refund_no).cloned().unwrap()
    }

    /// Requests kassa sent that failed their signature check at a fake.
    pub fn bad_signatures(&self) -> usize {
        [&self.alipay.ledger, &self.wechat.ledger, &self.stripe.ledger]
            .iter()
            .map(|l| l.lock().unwrap().bad_signatures)
            .sum()
    }

    /// Moves kassa's (manual) clock on by `ms`.
    pub fn advance(&self, ms: i64) {
        self.t.clock.as_ref().expect("a manual clock").advance_ms(ms);
    }
}

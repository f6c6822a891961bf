//! The real gateway adapters: known-answer vectors generated independently
//! (`scripts/gateway-fixtures.py`, Python `cryptography`), and full flows against the local fakes
//! in `fakes.rs`, on both databases. Active query and reconciliation are tested here too.

use axum::http::HeaderMap;
use kassa::domain::event::Outcome;
use kassa::gateway::Gateway;
use kassa::gateway::alipay::{self, Alipay};
use kassa::gateway::config::{GatewaysFile, WechatPayConfig};
use kassa::gateway::keys::{RsaSigner, RsaVerifier};
use kassa::gateway::stripe::{self, Stripe};
use kassa::gateway::wechatpay::{self, WechatPay};
use kassa::store::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, TestApp, s};
use crate::fakes::{self, FakeAlipay, FakeStripe, FakeWechat, fixture};
use crate::on_both;

fn vectors() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture("vectors.json")).unwrap()).unwrap()
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
    }
    h
}

fn wechat_config(platform_cert: bool) -> WechatPayConfig {
    let mut c = WechatPayConfig {
        mchid: fakes::WECHAT_MCHID.into(),
        appid: fakes::WECHAT_APPID.into(),
        merchant_serial_no: fakes::WECHAT_MERCHANT_SERIAL.into(),
        merchant_private_key_file: fixture("merchant_private.pem"),
        platform_public_key_file: Some(fixture("provider_public.pem")),
        platform_cert_file: None,
        platform_serial: Some(s(&vectors()["wechat_notify"]["serial"])),
        api_v3_key: kassa::gateway::config::Secret(s(&vectors()["wechat_notify"]["api_v3_key"])),
        api_base_url: "http://127.0.0.1:9".into(),
        download_certificates: false,
        mini_program_secret: None,
        open_api_base_url: "http://127.0.0.1:9".into(),
    };
    if platform_cert {
        c.platform_public_key_file = None;
        c.platform_cert_file = Some(fixture("provider_cert.pem"));
        c.platform_serial = None;
    }
    c
}

#[test]
fn alipay_request_signature_matches_the_vector() {
    let v = &vectors()["alipay_request"];
    let params: Vec<(String, String)> =
        v["params"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), s(v))).collect();
    let content = alipay::sign_content(params.iter().map(|(k, v)| (k.as_str(), v.as_str())), false);
    assert_eq!(content, s(&v["content"]), "sign_type kept, empty values and sign dropped, sorted");
    // RSA PKCS#1 v1.5 is deterministic: the same key gives the same signature, PKCS#8 or PKCS#1.
    for file in ["merchant_private.pem", "merchant_private_pkcs1.pem"] {
        let signer = RsaSigner::from_file(&fixture(file)).unwrap();
        assert_eq!(signer.sign_base64(content.as_bytes()), s(&v["sign"]), "{file}");
    }
}

#[test]
fn alipay_notification_and_response_vectors_verify() {
    let fake_cfg = kassa::gateway::config::AlipayConfig {
        app_id: fakes::ALIPAY_APP_ID.into(),
        seller_id: fakes::ALIPAY_SELLER_ID.into(),
        app_private_key_file: fixture("merchant_private.pem"),
        alipay_public_key_file: fixture("provider_public_bare.txt"),
        gateway_url: "http://127.0.0.1:9/gateway.do".into(),
    };
    let gw = Alipay::new(&fake_cfg, "http://shop/notify/alipay".into()).unwrap();
    let v = vectors();
    let body = s(&v["alipay_notify"]["body"]);
    let ev = gw.verify(&HeaderMap::new(), body.as_bytes(), 0).unwrap();
    assert_eq!(ev.event_id, "ac05099524730693a8b330c5ecf72da9786");
    assert_eq!(ev.attempt_ref, "KS0123456789AB_1");
    match ev.outcome {
        Outcome::Succeeded { gateway_txn_id, amount } => {
            assert_eq!(gateway_txn_id, "2026113022001400000000000001");
            assert_eq!((amount.amount_minor(), amount.currency().code()), (8888, "CNY"));
        }
        other => panic!("{other:?}"),
    }
    let tampered = body.replace("total_amount=88.88", "total_amount=0.01");
    assert_eq!(gw.verify(&HeaderMap::new(), tampered.as_bytes(), 0).unwrap_err().code, "invalid_signature");
    // Signed by the wrong key (the merchant's own): refused.
    let own = RsaVerifier::from_file(&fixture("merchant_public.pem")).unwrap();
    assert!(!own.verify_base64(s(&v["alipay_notify"]["content"]).as_bytes(), "AAAA"));
    // API responses: the sign covers the raw *_response text.
    let key = RsaVerifier::from_file(&fixture("provider_public.pem")).unwrap();
    let text = s(&v["alipay_response"]["text"]);
    let node = alipay::verify_response(&key, &text, "alipay_trade_query_response").unwrap();
    assert_eq!(node["trade_status"], "TRADE_SUCCESS");
    let forged = text.replace("88.88", "99.99");
    assert!(alipay::verify_response(&key, &forged, "alipay_trade_query_response").is_err());
}

#[test]
fn wechat_vectors_sign_and_verify() {
    let v = vectors();
    let signer = RsaSigner::from_file(&fixture("merchant_private.pem")).unwrap();
    let req = &v["wechat_request"];
    let message = wechatpay::request_message(
        "POST",
        "/v3/pay/transactions/out-trade-no/KS0123456789AB_1/close",
        1_764_475_200,
        "NONCE0123456789",
        r#"{"mchid":"1900000001"}"#,
    );
    assert_eq!(message, s(&req["message"]));
    assert_eq!(signer.sign_base64(message.as_bytes()), s(&req["signature"]));
    let pay = &v["wechat_pay_sign"];
    let m = wechatpay::pay_sign_message(
        "wx8888888888888888",
        "1764475200",
        "5K8264ILTKCH16CQ2502SI8ZNMTM67VS",
        "prepay_id=wx201410272009395522657a690389285100",
    );
    assert_eq!(m, s(&pay["message"]));
    assert_eq!(signer.sign_base64(m.as_bytes()), s(&pay["pay_sign"]));

    let n = &v["wechat_notify"];
    let ts: i64 = s(&n["timestamp"]).parse().unwrap();
    let body = s(&n["body"]);
    let ok_headers = |sig: &str, serial: &str| {
        headers(&[
            ("Wechatpay-Timestamp", &s(&n["timestamp"])),
            ("Wechatpay-Nonce", &s(&n["nonce"])),
            ("Wechatpay-Signature", sig),
            ("Wechatpay-Serial", serial),
        ])
    };
    for platform_cert in [false, true] {
        let gw = WechatPay::new(&wechat_config(platform_cert), "https://shop/notify/wechatpay".into()).unwrap();
        let h = ok_headers(&s(&n["signature"]), &s(&n["serial"]));
        let ev = gw.verify(&h, body.as_bytes(), ts * 1000).unwrap();
        assert_eq!(ev.event_id, "EV-2018022511223320873");
        assert!(matches!(ev.outcome, Outcome::Succeeded { ref gateway_txn_id, amount }
            if gateway_txn_id == "4200000000202611300000000001" && amount.amount_minor() == 8888));
        // Stale, probe, unknown serial, tampered body: all refused.
        let code = |h: &HeaderMap, b: &str, now: i64| gw.verify(h, b.as_bytes(), now).unwrap_err().code;
        assert_eq!(code(&h, &body, (ts + 301) * 1000), "invalid_signature");
        let probe = format!("WECHATPAY/SIGNTEST/{}", s(&n["signature"]));
        assert_eq!(code(&ok_headers(&probe, &s(&n["serial"])), &body, ts * 1000), "invalid_signature");
        assert_eq!(code(&ok_headers(&s(&n["signature"]), "PUB_KEY_ID_OTHER"), &body, ts * 1000), "invalid_signature");
        assert_eq!(code(&h, &body.replace("EV-2018", "EV-2019"), ts * 1000), "invalid_signature");
    }
}

#[test]
fn stripe_vector_verifies_with_rotation_and_tolerance() {
    let v = &vectors()["stripe"];
    let t: i64 = s(&v["t"]).parse().unwrap();
    let header = format!("t={t},v1=0000,v1={}", s(&v["v1"]));
    let body = s(&v["body"]);
    let secrets = vec!["whsec_rotated_in".to_string(), s(&v["secret"])];
    assert!(stripe::verify_stripe_signature(&secrets, &header, body.as_bytes(), t * 1000).is_ok());
    assert!(stripe::verify_stripe_signature(&secrets[..1], &header, body.as_bytes(), t * 1000).is_err());
    assert!(stripe::verify_stripe_signature(&secrets, &header, body.as_bytes(), (t + 301) * 1000).is_err());
    let cfg = kassa::gateway::config::StripeConfig {
        secret_key: kassa::gateway::config::Secret("sk_test".into()),
        webhook_secret: kassa::gateway::config::Secret("whsec_new".into()),
        previous_webhook_secrets: vec![kassa::gateway::config::Secret(s(&v["secret"]))],
        api_base_url: "http://127.0.0.1:9".into(),
    };
    let gw = Stripe::new(&cfg).unwrap();
    let ev = gw.verify(&headers(&[("stripe-signature", &header)]), body.as_bytes(), t * 1000).unwrap();
    assert_eq!((ev.event_id.as_str(), ev.attempt_ref.as_str()), ("evt_1QkassaTest", "KS0123456789AB_1"));
    assert!(matches!(ev.outcome, Outcome::Succeeded { ref gateway_txn_id, amount }
        if gateway_txn_id == "pi_3Qkassa" && amount.amount_minor() == 8888 && amount.currency().code() == "CNY"));
}

struct World {
    t: TestApp,
    alipay: FakeAlipay,
    wechat: FakeWechat,
    stripe: FakeStripe,
}

async fn world(backend: Backend, manual_clock: bool) -> World {
    let (alipay, wechat, stripe) = (FakeAlipay::start().await, FakeWechat::start().await, FakeStripe::start().await);
    let gateways =
        GatewaysFile { alipay: Some(alipay.config()), wechatpay: Some(wechat.config()), stripe: Some(stripe.config()) };
    let t = TestApp::spawn_with(backend, Opts { gateways, manual_clock, ..Default::default() }).await;
    *stripe.webhook_url.lock().unwrap() = t.url("/notify/stripe");
    t.create_sku("TEA", "Longjing tea", 8_888, 10).await;
    World { t, alipay, wechat, stripe }
}

impl World {
    async fn checkout(&self, body: Value) -> (StatusCode, Value) {
        let buyer = self.t.buyer().await;
        let basket = self.t.basket(&buyer, &[("TEA", 1)]).await;
        let r = self
            .t
            .http
            .post(self.t.url(&format!("/api/v1/baskets/{basket}/checkout")))
            .bearer_auth(&buyer)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    fn bad_signatures(&self) -> usize {
        [&self.alipay.ledger, &self.wechat.ledger, &self.stripe.ledger]
            .iter()
            .map(|l| l.lock().unwrap().bad_signatures)
            .sum()
    }

    async fn refund(&self, order_no: &str, refund_no: &str, amount: i64) -> Value {
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
}

async fn alipay_page_pay(backend: Backend) {
    let w = world(backend, false).await;
    let (status, placed) = w.checkout(json!({"gateway": "alipay"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    let payment = &placed["payment"];
    assert_eq!((payment["type"].as_str(), payment["action"].as_str()), (Some("form"), Some(w.alipay.url.as_str())));
    assert_eq!(payment["fields"]["method"], "alipay.trade.page.pay");
    // The browser auto-submits the form to Alipay, which checks the RSA2 signature.
    let fields: Vec<(String, String)> =
        payment["fields"].as_object().unwrap().iter().map(|(k, v)| (k.clone(), s(v))).collect();
    let r = w.t.http.post(&w.alipay.url).form(&fields).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let trade = w.alipay.trade(&attempt_ref).expect("the cashier knows the trade");
    assert_eq!(trade.amount_minor, 8_888);
    // The cashier stops taking payment when the hold ends (Beijing time).
    let expires =
        time::OffsetDateTime::parse(&s(&placed["expires_at"]), &time::format_description::well_known::Rfc3339)
            .unwrap()
            .to_offset(time::macros::offset!(+8));
    let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    assert_eq!(trade.time_expire, expires.format(&fmt).unwrap());
    // The buyer pays; the notification is answered with exactly `success`, twice (retry).
    let (body, reply) = w.alipay.pay(&attempt_ref, true).await;
    assert_eq!(reply, Some((200, "success".to_string())));
    let again = w.t.http.post(w.t.url("/notify/alipay")).body(body.clone()).send().await.unwrap();
    assert_eq!(again.text().await.unwrap(), "success");
    assert_eq!(w.t.status(&order_no).await, "paid");
    // A forged notification gets `fail` (Alipay resends; nothing changes).
    let forged = body.replace("total_amount=88.88", "total_amount=0.01");
    let r = w.t.http.post(w.t.url("/notify/alipay")).body(forged).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "fail");
    // Partial refunds with their own out_request_no; the second send of one refunds nothing more.
    let r1 = w.refund(&order_no, "RF-1", 1_000).await;
    assert_eq!(r1["status"], "succeeded", "{r1}");
    let r2 = w.refund(&order_no, "RF-2", 7_888).await;
    assert_eq!(r2["status"], "succeeded", "{r2}");
    let trade = w.alipay.trade(&attempt_ref).unwrap();
    assert_eq!(trade.refunds.values().sum::<i64>(), 8_888);
    // Alipay's refund notification (TRADE_CLOSED after a full refund, naming out_biz_no) is acknowledged.
    let notice = w.alipay.notification(&[
        ("notify_id", "nid-refund-2"),
        ("out_trade_no", &attempt_ref),
        ("trade_no", &trade.txn_id),
        ("trade_status", "TRADE_CLOSED"),
        ("total_amount", "88.88"),
        ("refund_fee", "88.88"),
        ("out_biz_no", "RF-2"),
    ]);
    let r = w.t.http.post(w.t.url("/notify/alipay")).body(notice).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "success");
    assert_eq!(w.t.status(&order_no).await, "refunded");
    assert_eq!(w.bad_signatures(), 0, "every request kassa sent verified at the fake");
    w.t.assert_clean().await;
}
on_both!(alipay_page_pay_flow, alipay_page_pay);

async fn wechat_jsapi_and_h5(backend: Backend) {
    let w = world(backend, false).await;
    // No openid: refused before anything is created.
    let (status, body) = w.checkout(json!({"gateway": "wechatpay", "channel": "jsapi"})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "payer_required".into()));
    assert_eq!(w.t.count("SELECT COUNT(*) FROM orders").await, 0);
    let (status, body) = w.checkout(json!({"gateway": "wechatpay", "channel": "app"})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "unsupported_channel".into()));

    let openid = "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o";
    let (status, placed) =
        w.checkout(json!({"gateway": "wechatpay", "channel": "jsapi", "payer": {"openid": openid}})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    let p = &placed["payment"]["params"];
    assert_eq!(
        (s(&placed["payment"]["type"]), s(&p["signType"]), s(&p["appId"])),
        ("client".into(), "RSA".into(), fakes::WECHAT_APPID.into())
    );
    let trade = w.wechat.trade(&attempt_ref).unwrap();
    assert_eq!(s(&p["package"]), format!("prepay_id={}", trade.id));
    assert_eq!(s(&p["timeStamp"]).len(), 10);
    // What the WeChat client checks: paySign over appId\ntimeStamp\nnonceStr\npackage\n.
    let message = format!("{}\n{}\n{}\n{}\n", s(&p["appId"]), s(&p["timeStamp"]), s(&p["nonceStr"]), s(&p["package"]));
    let merchant = RsaVerifier::from_file(&fixture("merchant_public.pem")).unwrap();
    assert!(merchant.verify_base64(message.as_bytes(), &s(&p["paySign"])));
    assert_eq!(trade.request["payer"]["openid"], openid);
    assert!(trade.time_expire.ends_with("+08:00"), "{}", trade.time_expire);
    // Paid: WeChat's notification is answered 204.
    let reply = w.wechat.pay(&attempt_ref, true).await.unwrap();
    assert_eq!(reply.0, 204, "{reply:?}");
    assert_eq!(w.t.status(&order_no).await, "paid");
    let refund = w.refund(&order_no, "RF-W1", 8_888).await;
    assert_eq!(refund["status"], "succeeded", "{refund}");

    // The same kind of order paid in a phone browser: H5 redirect with our return URL.
    let (status, placed) =
        w.checkout(json!({"gateway": "wechatpay", "channel": "h5", "payer": {"client_ip": "203.0.113.7"}})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let url = s(&placed["payment"]["url"]);
    assert!(url.starts_with("https://wx.tenpay.com/") && url.contains("&redirect_url=http"), "{url}");
    let h5_trade = w.wechat.trade(&s(&placed["attempt_ref"])).unwrap();
    assert_eq!(h5_trade.request["scene_info"]["payer_client_ip"], "203.0.113.7");
    // The buyer switches to the mini-program for the same order: a new attempt, JSAPI.
    let order2 = s(&placed["order_no"]);
    let r =
        w.t.http
            .post(w.t.url(&format!("/api/v1/orders/{order2}/attempts")))
            .bearer_auth(common_admin())
            .json(&json!({"gateway": "wechatpay", "channel": "jsapi", "payer": {"openid": openid}}))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let retry: Value = r.json().await.unwrap();
    assert_eq!(w.wechat.trade(&s(&placed["attempt_ref"])).unwrap().status, "CLOSED", "the H5 attempt was closed");
    let reply = w.wechat.pay(&s(&retry["attempt_ref"]), true).await.unwrap();
    assert_eq!(reply.0, 204);
    assert_eq!(w.t.status(&order2).await, "paid");
    assert_eq!(w.bad_signatures(), 0);
    w.t.assert_clean().await;
}
on_both!(wechat_jsapi_and_h5_flow, wechat_jsapi_and_h5);

/// Alipay on a phone (the mobile web cashier, with its "back" link) and face to face (a code
/// Alipay answers in its signed response, drawn by kassa).
async fn alipay_wap_and_qr(backend: Backend) {
    let w = world(backend, false).await;
    let (status, placed) = w.checkout(json!({"gateway": "alipay", "channel": "wap"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let attempt_ref = s(&placed["attempt_ref"]);
    let fields = &placed["payment"]["fields"];
    assert_eq!(fields["method"], "alipay.trade.wap.pay");
    let biz: Value = serde_json::from_str(&s(&fields["biz_content"])).unwrap();
    assert_eq!(biz["product_code"], "QUICK_WAP_WAY");
    assert!(s(&biz["quit_url"]).ends_with(&format!("/checkout/return/{attempt_ref}")), "{biz}");
    let form: Vec<(String, String)> = fields.as_object().unwrap().iter().map(|(k, v)| (k.clone(), s(v))).collect();
    let r = w.t.http.post(&w.alipay.url).form(&form).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the cashier took the signed form");
    let (_, reply) = w.alipay.pay(&attempt_ref, true).await;
    assert_eq!(reply, Some((200, "success".to_string())));
    assert_eq!(w.t.status(&s(&placed["order_no"])).await, "paid");

    let (status, placed) = w.checkout(json!({"gateway": "alipay", "channel": "qr"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let attempt_ref = s(&placed["attempt_ref"]);
    let payment = &placed["payment"];
    assert_eq!((payment["type"].clone(), payment["expires_at"].clone()), (json!("qr"), placed["expires_at"].clone()));
    assert_eq!(s(&payment["code_url"]), "https://qr.alipay.com/bax00008888");
    let trade = w.alipay.trade(&attempt_ref).unwrap();
    assert_eq!(trade.request["product_code"], "FACE_TO_FACE_PAYMENT");
    assert!(trade.notify_url.ends_with("/notify/alipay"), "{}", trade.notify_url);
    let (_, reply) = w.alipay.pay(&attempt_ref, true).await;
    assert_eq!(reply, Some((200, "success".to_string())));
    assert_eq!(w.t.status(&s(&placed["order_no"])).await, "paid");
    assert_eq!(w.bad_signatures(), 0, "every request kassa sent verified at the fake");
    w.t.assert_clean().await;
}
on_both!(alipay_wap_and_qr_flow, alipay_wap_and_qr);

/// A checkout that names no channel gets the one that suits the buyer's device (its User-Agent)
/// and payer.
async fn channel_by_device(backend: Backend) {
    let w = world(backend, false).await;
    let iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1";
    let wechat = "Mozilla/5.0 (Linux; Android 13; V2203A) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/111.0 Mobile Safari/537.36 MicroMessenger/8.0.42.2460(0x28002A37) WeChat/arm64";
    let desktop = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36";
    for (ua, body, kind, detail) in [
        (iphone, json!({"gateway": "alipay"}), "form", "alipay.trade.wap.pay"),
        (desktop, json!({"gateway": "alipay"}), "form", "alipay.trade.page.pay"),
        (desktop, json!({"gateway": "wechatpay"}), "qr", "weixin://"),
        (wechat, json!({"gateway": "wechatpay"}), "qr", "weixin://"),
        (wechat, json!({"gateway": "wechatpay", "payer": {"openid": "oBuyer"}}), "client", "prepay_id="),
        (
            iphone,
            json!({"gateway": "wechatpay", "payer": {"client_ip": "203.0.113.9"}}),
            "redirect",
            "https://wx.tenpay.com/",
        ),
    ] {
        let buyer = w.t.buyer().await;
        let basket = w.t.basket(&buyer, &[("TEA", 1)]).await;
        let r =
            w.t.http
                .post(w.t.url(&format!("/api/v1/baskets/{basket}/checkout")))
                .bearer_auth(&buyer)
                .header("user-agent", ua)
                .json(&body)
                .send()
                .await
                .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
        let placed: Value = r.json().await.unwrap();
        let payment = &placed["payment"];
        assert_eq!(payment["type"], kind, "{ua} {body}: {payment}");
        let shown = match kind {
            "form" => s(&payment["fields"]["method"]),
            "qr" => s(&payment["code_url"]),
            "client" => s(&payment["params"]["package"]),
            _ => s(&payment["url"]),
        };
        assert!(shown.starts_with(detail), "{ua} {body}: {shown}");
    }
    assert_eq!(w.bad_signatures(), 0);
}
on_both!(a_channel_is_chosen_by_device, channel_by_device);

/// WeChat Pay Native: a code to scan, drawn by kassa, payable until the hold ends; paid by whoever
/// scans it, notified like JSAPI.
async fn wechat_native(backend: Backend) {
    let w = world(backend, false).await;
    let (status, placed) = w.checkout(json!({"gateway": "wechatpay", "channel": "native"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    let payment = &placed["payment"];
    assert_eq!(payment["type"], "qr");
    assert_eq!(payment["expires_at"], placed["expires_at"], "the code is payable until the hold ends");
    let code_url = s(&payment["code_url"]);
    assert!(code_url.starts_with("weixin://wxpay/bizpayurl?pr="), "{code_url}");
    let trade = w.wechat.trade(&attempt_ref).unwrap();
    assert!(trade.request.get("payer").is_none(), "no payer is named: {}", trade.request);
    assert!(trade.time_expire.ends_with("+08:00"), "{}", trade.time_expire);
    // The same checkout from a desktop browser: a page with the code drawn, the amount, the time.
    let buyer = w.t.buyer().await;
    let basket = w.t.basket(&buyer, &[("TEA", 1)]).await;
    let page =
        w.t.http
            .post(w.t.url(&format!("/api/v1/baskets/{basket}/checkout")))
            .bearer_auth(&buyer)
            .header("accept", "text/html")
            .json(&json!({"gateway": "wechatpay", "channel": "native"}))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    let page_attempt = page.split("/checkout/return/").nth(1).unwrap().split(['/', '"']).next().unwrap().to_string();
    let page_code = format!("weixin://wxpay/bizpayurl?pr={}", &w.wechat.trade(&page_attempt).unwrap().id[2..12]);
    let drawn = kassa::http::qr::svg(&page_code).unwrap();
    assert!(page.contains(&drawn), "the page draws the trade's code");
    assert!(page.contains("88.88 CNY") && page.contains("Scan to pay with WeChat"), "{page}");
    assert!(page.contains("/assets/qr.js") && !page.contains(&page_code), "the link only as a code");
    // Scanned and paid: notified as JSAPI is, answered 204.
    let reply = w.wechat.pay(&attempt_ref, true).await.unwrap();
    assert_eq!(reply.0, 204, "{reply:?}");
    assert_eq!(w.t.status(&order_no).await, "paid");
    assert_eq!(w.bad_signatures(), 0);
    w.t.assert_clean().await;
}
on_both!(wechat_native_flow, wechat_native);

/// WeChat rotates its platform certificate: kassa (the public key and the old certificate
/// configured, as during a move between them) downloads the certificates once when a notification
/// comes signed under the new serial, and applies it; an unknown serial soon after costs no second
/// download, and an unknown public key id none at all.
async fn wechat_certificate_rotation(backend: Backend) {
    let wechat = FakeWechat::start().await;
    let old = ("provider_cert.pem", fakes::WECHAT_CERT_SERIAL, "provider_private.pem");
    lock_ledger(&wechat).wechat_certificates = vec![old];
    let mut config = wechat.config();
    config.platform_cert_file = Some(fixture("provider_cert.pem"));
    let gateways = GatewaysFile { alipay: None, wechatpay: Some(config), stripe: None };
    let t = TestApp::spawn_with(backend, Opts { gateways, ..Default::default() }).await;
    t.create_sku("TEA", "Longjing tea", 8_888, 10).await;
    // The scheduled upkeep downloads the list (hourly, and at start).
    assert_eq!(t.app.keeper.step().await.unwrap(), 0, "nothing for an operator");
    assert_eq!(lock_ledger(&wechat).certificate_downloads, 1);
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("TEA", 1)]).await;
    let r = t
        .http
        .post(t.url(&format!("/api/v1/baskets/{basket}/checkout")))
        .bearer_auth(&buyer)
        .json(&json!({"gateway": "wechatpay", "channel": "native"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let placed: Value = r.json().await.unwrap();
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    // The new certificate is published and signs from now on.
    {
        let mut l = lock_ledger(&wechat);
        l.wechat_certificates.push(("platform2_cert.pem", fakes::WECHAT_ROTATED_SERIAL, "platform2_private.pem"));
        l.wechat_rotated = Some(("platform2_private.pem", fakes::WECHAT_ROTATED_SERIAL));
    }
    let reply = wechat.pay(&attempt_ref, true).await.unwrap();
    assert_eq!(reply.0, 204, "{reply:?}");
    assert_eq!(t.status(&order_no).await, "paid");
    assert_eq!(lock_ledger(&wechat).certificate_downloads, 2, "one download for the new serial");
    // A serial nobody published, within a minute of that download: refused without another.
    let notify = t.url("/notify/wechatpay");
    let (mut headers, body) =
        wechat.notification("TRANSACTION.SUCCESS", "transaction", &json!({"mchid": fakes::WECHAT_MCHID}));
    for serial in ["ABCDEF0123456789", "PUB_KEY_ID_0119999999999999999999999999"] {
        headers.insert("Wechatpay-Serial", serial.parse().unwrap());
        let r = t.http.post(&notify).headers(headers.clone()).body(body.clone()).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{serial}");
    }
    assert_eq!(lock_ledger(&wechat).certificate_downloads, 2, "no download for those");
    // A list with an entry that holds no certificate is refused whole, and the operator told.
    lock_ledger(&wechat).wechat_certificates.push(("vectors.json", "0123456789ABCDEF", "provider_private.pem"));
    assert_eq!(t.app.keeper.step().await.unwrap(), 1);
    // (The two refused notifications raised their own.)
    let kinds: Vec<String> =
        sql::query_scalar("SELECT kind FROM alerts ORDER BY kind").fetch_all(t.app.state.db.read_pool()).await.unwrap();
    assert_eq!(kinds, vec!["gateway_keys".to_string(), "signature_failure".to_string()]);
    t.assert_clean().await;
}
on_both!(wechat_platform_certificates_rotate, wechat_certificate_rotation);

fn lock_ledger(w: &FakeWechat) -> std::sync::MutexGuard<'_, fakes::Ledger> {
    w.ledger.lock().unwrap_or_else(|e| e.into_inner())
}

fn common_admin() -> &'static str {
    crate::common::ADMIN
}

async fn stripe_checkout(backend: Backend) {
    let w = world(backend, false).await;
    let (status, placed) = w.checkout(json!({"gateway": "stripe"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    assert_eq!(s(&placed["payment"]["type"]), "redirect");
    let session = w.stripe.session_for(&attempt_ref).unwrap();
    assert!(s(&placed["payment"]["url"]).ends_with(&session.id));
    let stored: Option<String> = sql::query_scalar("SELECT gateway_ref FROM payment_attempts WHERE attempt_ref = $1")
        .bind(&attempt_ref)
        .fetch_one(w.t.app.state.db.read_pool())
        .await
        .unwrap();
    assert_eq!(stored.as_deref(), Some(session.id.as_str()));
    // An event kassa does not use is acknowledged (Stripe would resend for days otherwise).
    let (code, _) =
        w.stripe.send_event(&json!({"id": "evt_other", "type": "customer.created", "data": {"object": {}}})).await;
    assert_eq!(code, 200);
    let (code, body) = w.stripe.pay(&attempt_ref, true).await.unwrap();
    assert_eq!((code, body.as_str()), (200, r#"{"received":true}"#));
    assert_eq!(w.t.status(&order_no).await, "paid");
    let refund = w.refund(&order_no, "RF-S1", 2_000).await;
    assert_eq!(refund["status"], "succeeded", "{refund}");
    // A bad signature is refused with the contract's error shape.
    let r =
        w.t.http
            .post(w.t.url("/notify/stripe"))
            .header(
                "Stripe-Signature",
                FakeStripe::signature("whsec_wrong", time::OffsetDateTime::now_utc().unix_timestamp(), "{}"),
            )
            .body("{}")
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "invalid_signature");
    // Cancelling another order expires its session at Stripe.
    let (_, other) = w.checkout(json!({"gateway": "stripe"})).await;
    let r =
        w.t.http
            .post(w.t.url(&format!("/api/v1/orders/{}/cancel", s(&other["order_no"]))))
            .bearer_auth(common_admin())
            .json(&json!({"rebasket": false}))
            .send()
            .await
            .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(w.stripe.session_for(&s(&other["attempt_ref"])).unwrap().status, "expired");
    assert_eq!(w.bad_signatures(), 0);
    w.t.assert_clean().await;
}
on_both!(stripe_checkout_flow, stripe_checkout);

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
    let r =
        w.t.http
            .post(w.t.url(&format!("/api/v1/baskets/{basket}/checkout")))
            .bearer_auth(&buyer)
            .json(&json!({"gateway": "wechatpay", "payer": {"openid": "oBuyer"}}))
            .send()
            .await
            .unwrap();
    let placed: Value = r.json().await.unwrap();
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
    let r =
        w.t.http
            .post(w.t.url(&format!("/api/v1/baskets/{basket}/checkout")))
            .bearer_auth(&buyer)
            .json(&json!({"gateway": "stripe"}))
            .send()
            .await
            .unwrap();
    let placed: Value = r.json().await.unwrap();
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

#[test]
fn bad_gateway_config_is_refused_at_start() {
    let mut c = wechat_config(false);
    c.api_v3_key = kassa::gateway::config::Secret("short".into());
    assert!(WechatPay::new(&c, String::new()).is_err());
    let mut c = wechat_config(false);
    c.merchant_private_key_file = fixture("provider_public.pem");
    assert!(WechatPay::new(&c, String::new()).is_err());
    // The config file names the sections; unknown keys are refused, secrets are not printed.
    let parsed: Result<GatewaysFile, _> =
        toml::from_str("[stripe]\nsecret_key = \"sk_live_x\"\nwebhook_secret = \"whsec_y\"\n");
    let parsed = parsed.unwrap();
    assert!(!format!("{parsed:?}").contains("sk_live_x"));
    assert!(toml::from_str::<GatewaysFile>("[stripe]\nsecret_kee = \"x\"\nwebhook_secret = \"y\"\n").is_err());
}

mod hostile {
    //! Properly signed but arbitrary content must never panic an adapter: every body ends in an
    //! event or a refusal with a stable code.
    use proptest::prelude::*;

    use super::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-zA-Z0-9_.:+/ -]{0,12}".prop_map(Value::from),
            prop_oneof![Just("paid"), Just("complete"), Just("SUCCESS"), Just("CNY"), Just("cny"), Just("KS1_1")]
                .prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            let keys = prop_oneof![
                Just("id".to_string()),
                Just("type".to_string()),
                Just("data".to_string()),
                Just("object".to_string()),
                Just("payment_status".to_string()),
                Just("client_reference_id".to_string()),
                Just("payment_intent".to_string()),
                Just("amount_total".to_string()),
                Just("currency".to_string()),
                Just("metadata".to_string()),
                Just("refund_no".to_string()),
                Just("status".to_string()),
                "[a-z_]{1,8}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(keys, inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn stripe_gateway() -> Stripe {
        Stripe::new(&kassa::gateway::config::StripeConfig {
            secret_key: kassa::gateway::config::Secret("sk".into()),
            webhook_secret: kassa::gateway::config::Secret("whsec_fuzz".into()),
            previous_webhook_secrets: vec![],
            api_base_url: "http://127.0.0.1:9".into(),
        })
        .unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn stripe_signed_garbage(event in json_value(), kind in prop_oneof![
            Just("checkout.session.completed"), Just("checkout.session.expired"),
            Just("checkout.session.async_payment_failed"), Just("refund.updated"), Just("other")]) {
            let mut event = event;
            if let Value::Object(m) = &mut event {
                m.insert("type".into(), Value::from(kind));
            }
            let body = event.to_string();
            let t = 1_764_475_262_i64;
            let header = FakeStripe::signature("whsec_fuzz", t, &body);
            let gw = stripe_gateway();
            match gw.verify(&headers(&[("stripe-signature", &header)]), body.as_bytes(), t * 1000) {
                Ok(ev) => prop_assert!(kassa::domain::ids::is_plain_id(&ev.attempt_ref)),
                Err(r) => prop_assert!(!r.code.is_empty()),
            }
        }

        #[test]
        fn wechat_signed_garbage(resource in json_value(), event_type in prop_oneof![
            Just("TRANSACTION.SUCCESS"), Just("REFUND.SUCCESS"), Just("REFUND.CLOSED"), Just("X")]) {
            let fake = FakeWechat { url: String::new(), ledger: Default::default() };
            let mut resource = resource;
            if let Value::Object(m) = &mut resource {
                m.insert("mchid".into(), Value::from(fakes::WECHAT_MCHID));
            }
            let (h, body) = fake.notification(event_type, "transaction", &resource);
            let gw = WechatPay::new(&fake_wechat_config(), String::new()).unwrap();
            let now = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
            match gw.verify(&h, body.as_bytes(), now) {
                Ok(ev) => prop_assert!(kassa::domain::ids::is_plain_id(&ev.attempt_ref)),
                Err(r) => prop_assert!(r.code != "invalid_signature", "{}", r.detail),
            }
        }

        #[test]
        fn alipay_signed_garbage(fields in prop::collection::btree_map(
            prop_oneof![Just("notify_id"), Just("out_trade_no"), Just("trade_no"), Just("trade_status"),
                        Just("total_amount"), Just("out_biz_no"), Just("app_id"), Just("seller_id"), Just("x")],
            prop_oneof![Just("TRADE_SUCCESS".to_string()), Just("TRADE_CLOSED".to_string()),
                        Just(fakes::ALIPAY_APP_ID.to_string()), Just(fakes::ALIPAY_SELLER_ID.to_string()),
                        "[ -~]{0,10}", "[0-9]{1,3}\\.[0-9]{0,3}"],
            0..9)) {
            let fake = FakeAlipay { url: String::new(), ledger: Default::default() };
            let fields: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let body = fake.notification(&fields);
            let gw = Alipay::new(&fake.config(), String::new()).unwrap();
            match gw.verify(&HeaderMap::new(), body.as_bytes(), 0) {
                Ok(ev) => prop_assert!(kassa::domain::ids::is_plain_id(&ev.event_id)),
                Err(r) => prop_assert!(r.code != "invalid_signature", "{}", r.detail),
            }
        }

        #[test]
        fn unsigned_bytes_are_refused(body in prop::collection::vec(any::<u8>(), 0..300), sig in "[ -~]{0,80}") {
            let h = headers(&[("stripe-signature", &sig), ("Wechatpay-Signature", &sig), ("Wechatpay-Timestamp", "1"),
                              ("Wechatpay-Nonce", "n"), ("Wechatpay-Serial", fakes::WECHAT_PLATFORM_SERIAL)]);
            let fake = FakeAlipay { url: String::new(), ledger: Default::default() };
            let alipay = Alipay::new(&fake.config(), String::new()).unwrap();
            let wechat = WechatPay::new(&fake_wechat_config(), String::new()).unwrap();
            prop_assert!(alipay.verify(&h, &body, 0).is_err());
            prop_assert!(wechat.verify(&h, &body, 1000).is_err());
            prop_assert!(stripe_gateway().verify(&h, &body, 0).is_err());
        }
    }

    fn fake_wechat_config() -> WechatPayConfig {
        FakeWechat { url: "http://127.0.0.1:9".into(), ledger: Default::default() }.config()
    }
}

/// The demo storefront offers the web gateways; Alipay gets the auto-submitting signed form,
/// Stripe a redirect to its Checkout page.
async fn storefront_with_real_gateways(backend: Backend) {
    let (alipay, stripe) = (FakeAlipay::start().await, FakeStripe::start().await);
    let gateways = GatewaysFile { alipay: Some(alipay.config()), wechatpay: None, stripe: Some(stripe.config()) };
    let t = TestApp::spawn_with(backend, Opts { gateways, demo: true, ..Default::default() }).await;
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = browser.get(t.url("/")).send().await.unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let shop = r.text().await.unwrap();
    let csrf = shop.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    for (gateway, expect) in [("alipay", "form"), ("stripe", "redirect")] {
        let r = browser
            .post(t.url("/shop/basket"))
            .header("cookie", &cookie)
            .form(&[("qty_MUG-CELADON", "1"), ("csrf", &csrf)])
            .send()
            .await
            .unwrap();
        let review = r.headers()["location"].to_str().unwrap().to_string();
        let page = browser.get(t.url(&review)).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
        for name in ["sandbox", "alipay", "stripe"] {
            assert!(page.contains(&format!("name=\"gateway\" value=\"{name}\"")), "{page}");
        }
        let key =
            page.split("name=\"idempotency_key\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
        let form = [("csrf", csrf.as_str()), ("idempotency_key", key.as_str()), ("gateway", gateway)];
        let r = browser
            .post(t.url(&format!("{review}/confirm")))
            .header("cookie", &cookie)
            .form(&form)
            .send()
            .await
            .unwrap();
        if expect == "form" {
            let html = r.text().await.unwrap();
            assert!(html.contains(&format!("action=\"{}\"", alipay.url)), "{html}");
            assert!(html.contains("name=\"sign\"") && html.contains("alipay.trade.page.pay"), "{html}");
            // JSON inside an attribute is escaped.
            assert!(html.contains("&quot;out_trade_no&quot;") || html.contains("&#34;out_trade_no&#34;"), "{html}");
        } else {
            assert!(r.status().is_redirection(), "{}", r.status());
            let location = r.headers()["location"].to_str().unwrap();
            assert!(location.starts_with("https://checkout.stripe.com/c/pay/cs_test_"), "{location}");
        }
    }
    assert_eq!(alipay.ledger.lock().unwrap().bad_signatures + stripe.ledger.lock().unwrap().bad_signatures, 0);
}
on_both!(storefront_offers_web_gateways, storefront_with_real_gateways);

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

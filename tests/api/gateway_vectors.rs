//! The real gateway adapters' signatures and parsing on their own: known-answer vectors generated
//! independently (`scripts/gateway-fixtures.py`, Python `cryptography`), the gateways' config
//! checked at start, and signed but hostile content that must never panic an adapter.

use axum::http::HeaderMap;
use kassa::domain::event::Outcome;
use kassa::gateway::Gateway;
use kassa::gateway::alipay::{self, Alipay};
use kassa::gateway::config::{GatewaysFile, WechatPayConfig};
use kassa::gateway::keys::{RsaSigner, RsaVerifier};
use kassa::gateway::stripe::{self, Stripe};
use kassa::gateway::wechatpay::{self, WechatPay};
use serde_json::Value;

use crate::common::s;
use crate::fakes::{self, FakeAlipay, FakeStripe, FakeWechat, fixture};

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
        subscribe: None,
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

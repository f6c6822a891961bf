//! The real gateway adapters' flows against the local fakes (`fakes/`), on both databases: each
//! gateway's channels from checkout to payment and refund, the channel chosen by device, WeChat's
//! platform certificates rotating, and the storefront offering the web gateways.

use kassa::gateway::config::GatewaysFile;
use kassa::gateway::keys::RsaVerifier;
use kassa::store::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ADMIN, Backend, Opts, Shop, TestApp, csrf_token, form_value, s};
use crate::fakes::{self, FakeAlipay, FakeStripe, FakeWechat, fixture};
use crate::on_both;

/// kassa with the three real gateways pointed at their fakes, ten "TEA" in stock.
pub(crate) async fn world(backend: Backend, manual_clock: bool) -> Shop {
    Shop::start(backend, Opts { manual_clock, ..Default::default() }, 10).await
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
            .bearer_auth(ADMIN)
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
        let r = w.t.checkout_request(&buyer, &basket, &body).header("user-agent", ua).send().await.unwrap();
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
        w.t.checkout_request(&buyer, &basket, &json!({"gateway": "wechatpay", "channel": "native"}))
            .header("accept", "text/html")
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
    let (status, placed) =
        t.checkout_with(&buyer, &basket, &json!({"gateway": "wechatpay", "channel": "native"})).await;
    assert_eq!(status, StatusCode::CREATED, "{placed}");
    let (order_no, attempt_ref) = (s(&placed["order_no"]), s(&placed["attempt_ref"]));
    // The new certificate is published and signs from now on.
    {
        let mut l = lock_ledger(&wechat);
        l.wechat_certificates.push(("platform2_cert.pem", fakes::WECHAT_ROTATED_SERIAL, "platform2_private.pem"));
        l.wechat_rotated = Some(("platform2_private.pem", fakes::WECHAT_ROTATED_SERIAL));
    }
    // A complaint notification is the first under the new serial: the certificates are fetched
    // and it verifies (its complaint, unknown to the fake, cannot be fetched: WeChat is asked to
    // send it again, 500, rather than told its signature failed, 400).
    let complaint = json!({"complaint_id": "200201820201201777", "action_type": "CREATE_COMPLAINT"});
    let (headers, body) = wechat.notification("COMPLAINT.CREATE", "complaint", &complaint);
    let r = t.http.post(t.url("/notify/wechatpay")).headers(headers).body(body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(lock_ledger(&wechat).certificate_downloads, 2, "one download for the new serial");
    let reply = wechat.pay(&attempt_ref, true).await.unwrap();
    assert_eq!(reply.0, 204, "{reply:?}");
    assert_eq!(t.status(&order_no).await, "paid");
    assert_eq!(lock_ledger(&wechat).certificate_downloads, 2, "no second download for the payment");
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
            .bearer_auth(ADMIN)
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
    let csrf = csrf_token(&shop);
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
        let key = form_value(&page, "idempotency_key");
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

//! Abuse resistance: per-SKU and per-buyer limits, per-address rate limits behind proxies, the
//! shop server's key, admin sign-in lockout and sessions, the bot check, the server's own limits
//! against hostile clients, security headers and retention.

use kassa::store::sql;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::common::{ADMIN, Backend, Opts, TestApp, csrf_token, s, test_protection};
use crate::on_both;
use kassa::config::{Captcha, Protection, RateLimits};

fn with(protection: Protection) -> Opts {
    Opts { protection, ..Opts::default() }
}

fn limits(r: RateLimits) -> Protection {
    Protection { rate_limits: Some(r), ..test_protection() }
}

async fn patch_sku(t: &TestApp, sku: &str, body: Value) -> (StatusCode, Value) {
    let r =
        t.http.patch(t.url(&format!("/api/v1/admin/skus/{sku}"))).bearer_auth(ADMIN).json(&body).send().await.unwrap();
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

async fn sku_limits_bound_each_order_and_its_hold(backend: Backend) {
    let t = TestApp::spawn_with(backend, Opts { manual_clock: true, ..Opts::default() }).await;
    let (status, body) = t
        .admin_post(
            "/api/v1/admin/skus",
            json!({"sku": "LAMP", "name": "Lamp", "price_minor": 990, "currency": "CNY", "stock": 10,
                   "max_per_order": 2, "hold_seconds": 120}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!((body["max_per_order"].as_i64(), body["hold_seconds"].as_i64()), (Some(2), Some(120)));
    t.create_sku("TEA", "Tea", 100, 10).await;
    let buyer = t.buyer().await;
    // A basket line above the limit is refused as it is written, by either way in.
    let basket = t.basket(&buyer, &[("TEA", 1)]).await;
    let (status, body) = t.put_line(&buyer, &basket, "LAMP", 3).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["code"], "quantity_limit");
    assert_eq!(body["error"]["details"], json!({"sku": "LAMP", "max": 2}));
    let r = t
        .http
        .post(t.url("/api/v1/baskets"))
        .bearer_auth(&buyer)
        .json(&json!({"lines": [{"sku": "LAMP", "quantity": 5}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(t.count("SELECT COUNT(*) FROM baskets").await, 1, "the refused basket was not kept");
    // At the limit it goes in; a limit lowered since is enforced at confirm, and nothing is held.
    assert_eq!(t.put_line(&buyer, &basket, "LAMP", 2).await.0, StatusCode::OK);
    assert_eq!(patch_sku(&t, "LAMP", json!({"max_per_order": 1})).await.0, StatusCode::OK);
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["error"]["details"], json!({"sku": "LAMP", "max": 1}));
    assert_eq!(t.sku("LAMP").await["reserved"], 0);
    assert_eq!(t.count("SELECT COUNT(*) FROM orders").await, 0);
    // The limit removed (null), the order goes through and holds for the SKU's 120 s, not 900 s.
    let (status, body) = patch_sku(&t, "LAMP", json!({"max_per_order": null})).await;
    assert_eq!(
        (status, body["max_per_order"].clone(), body["hold_seconds"].as_i64()),
        (StatusCode::OK, Value::Null, Some(120))
    );
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let expires = t.count("SELECT hold_expires_at FROM orders").await;
    assert_eq!(expires - t.now_ms(), 120_000, "an order holds for the shortest of its lines");
    // Out-of-range limits are refused.
    for bad in [json!({"max_per_order": 0}), json!({"hold_seconds": 0}), json!({"hold_seconds": 604_801})] {
        let (status, body) = patch_sku(&t, "LAMP", bad).await;
        assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_limit".into()));
    }
    // The flash sale expires on the SKU's clock: the sweeper releases it after 120 s.
    t.clock.as_ref().unwrap().advance_ms(121_000);
    t.app.sweeper.step().await.unwrap();
    assert_eq!(t.sku("LAMP").await["reserved"], 0);
    // The console sets and removes limits too.
    let browser = no_redirects();
    let signed = sign_in(&t, &browser, ADMIN, "198.51.100.9").await;
    let cookie = signed.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let html = browser.get(t.url("/admin/skus")).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("action=\"/admin/skus/LAMP/limits\""), "{html}");
    let csrf = csrf_token(&html);
    let set = |max: &'static str, hold: &'static str| {
        browser
            .post(t.url("/admin/skus/TEA/limits"))
            .header("cookie", &cookie)
            .form(&[("csrf", csrf.as_str()), ("max_per_order", max), ("hold_seconds", hold)])
            .send()
    };
    assert_eq!(set("4", "60").await.unwrap().status(), StatusCode::SEE_OTHER);
    let tea = t.sku("TEA").await;
    assert_eq!((tea["max_per_order"].as_i64(), tea["hold_seconds"].as_i64()), (Some(4), Some(60)));
    assert_eq!(set("", "").await.unwrap().status(), StatusCode::SEE_OTHER);
    let tea = t.sku("TEA").await;
    assert!(tea["max_per_order"].is_null() && tea["hold_seconds"].is_null(), "{tea}");
    assert_eq!(set("0", "").await.unwrap().status(), StatusCode::UNPROCESSABLE_ENTITY);
    t.assert_clean().await;
}
on_both!(sku_limits, sku_limits_bound_each_order_and_its_hold);

async fn a_buyer_holds_at_most_three_open_orders(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 100, 50).await;
    let buyer = t.buyer().await;
    let mut orders = Vec::new();
    for _ in 0..3 {
        let basket = t.basket(&buyer, &[("MUG", 1)]).await;
        let (status, body) = t.checkout(&buyer, &basket, Some(&basket)).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        orders.push(s(&body["order_no"]));
    }
    let fourth = t.basket(&buyer, &[("MUG", 1)]).await;
    let (status, body) = t.checkout(&buyer, &fourth, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "too_many_open_orders");
    assert_eq!(body["error"]["details"]["max"], 3);
    assert_eq!(t.count("SELECT COUNT(*) FROM orders").await, 3, "nothing created");
    assert_eq!(t.sku("MUG").await["reserved"], 3);
    // A repeated confirm of an order already placed is still answered with it.
    let first_basket: String = sql::query_scalar("SELECT basket_id FROM orders WHERE order_no = $1")
        .bind(&orders[0])
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    let (status, body) = t.checkout(&buyer, &first_basket, Some(&first_basket)).await;
    assert_eq!((status, s(&body["order_no"])), (StatusCode::CREATED, orders[0].clone()));
    // Another buyer is not held to this one's orders; paying one frees a place.
    let (_, other, _) = t.pending_order(&[("MUG", 1)]).await;
    assert!(!other.is_empty());
    let attempt: String = sql::query_scalar("SELECT attempt_ref FROM payment_attempts WHERE order_no = $1")
        .bind(&orders[1])
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    let session: String = sql::query_scalar("SELECT session_id FROM orders WHERE order_no = $1")
        .bind(&orders[0])
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    let counted = |session: String| {
        let t = &t;
        async move {
            sql::query_scalar::<i64>("SELECT open_orders FROM sessions WHERE id = $1")
                .bind(session)
                .fetch_one(t.app.state.db.read_pool())
                .await
                .unwrap()
        }
    };
    assert_eq!(counted(session.clone()).await, 3, "the session counts its open orders");
    t.complete(&attempt, "succeeded", 1).await;
    t.settle().await;
    assert_eq!(counted(session.clone()).await, 2, "a paid order gives its place back");
    let (status, body) = t.checkout(&buyer, &fourth, None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(counted(session.clone()).await, 3);
    // A cancelled order gives its place back too; the count is what `kassa check` compares.
    let r = t
        .http
        .post(t.url(&format!("/api/v1/orders/{}/cancel", orders[2])))
        .bearer_auth(&buyer)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    assert_eq!(counted(session.clone()).await, 2);
    t.assert_clean().await;
    // A count that disagrees with the orders is a violation, named with the session.
    sql::query("UPDATE sessions SET open_orders = 7 WHERE id = $1")
        .bind(&session)
        .execute(t.app.state.db.read_pool())
        .await
        .unwrap();
    let found: Vec<String> =
        t.violations().await.into_iter().filter(|v| v.invariant == "open_orders").map(|v| v.detail).collect();
    assert_eq!(found, [format!("session {session} counts 7 open orders but has 2 awaiting payment")]);
}
on_both!(open_orders, a_buyer_holds_at_most_three_open_orders);

async fn addresses_are_rate_limited_behind_trusted_proxies(backend: Backend) {
    let key = "shop-server-key-0123456789abcdef0123456789";
    let protection = Protection {
        shop_api_key: Some(key.to_string()),
        ..limits(RateLimits { sessions_per_minute: 3, ..RateLimits::default() })
    };
    let t = TestApp::spawn_with(backend, with(protection)).await;
    let session = |xff: Option<&str>| {
        let mut r = t.http.post(t.url("/api/v1/sessions"));
        if let Some(x) = xff {
            r = r.header("x-forwarded-for", x);
        }
        r.send()
    };
    for _ in 0..3 {
        assert_eq!(session(Some("198.51.100.7")).await.unwrap().status(), StatusCode::CREATED);
    }
    let refused = session(Some("198.51.100.7")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = refused.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(
        (s(&body["error"]["code"]), s(&body["error"]["details"]["bucket"])),
        ("rate_limited".into(), "sessions".into())
    );
    // The loopback peer is a trusted proxy by default: the forwarded client is the address counted.
    assert_eq!(session(Some("1.2.3.4, 198.51.100.8")).await.unwrap().status(), StatusCode::CREATED);
    // A forged left-most hop does not help the limited client.
    assert_eq!(session(Some("203.0.113.50, 198.51.100.7")).await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    // The shop's server is not one address: alone it is not limited, for a buyer it is limited as
    // the buyer, and a wrong key is refused.
    for _ in 0..5 {
        let r = t.http.post(t.url("/api/v1/sessions")).header("kassa-shop-key", key).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }
    let for_buyer = || {
        t.http
            .post(t.url("/api/v1/sessions"))
            .header("kassa-shop-key", key)
            .header("kassa-buyer-ip", "198.51.100.7")
            .send()
    };
    assert_eq!(for_buyer().await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    let r = t.http.post(t.url("/api/v1/sessions")).header("kassa-shop-key", "guess").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_shop_key");
    // Gateway notifications are never limited, whatever address sends them.
    assert_eq!(kassa::http::guard::bucket_of(&reqwest::Method::POST, "/notify/{gateway}"), None);
}
on_both!(rate_limits, addresses_are_rate_limited_behind_trusted_proxies);

fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

async fn sign_in(t: &TestApp, browser: &reqwest::Client, token: &str, from: &str) -> reqwest::Response {
    browser.post(t.url("/admin/login")).header("x-forwarded-for", from).form(&[("token", token)]).send().await.unwrap()
}

async fn admin_sign_in_failures_lock_the_address_out(backend: Backend) {
    let r = RateLimits { signin_lockout_failures: 3, signin_lockout_ms: 60_000, ..RateLimits::default() };
    let protection = Protection { admin_idle_ms: 30 * 60_000, ..limits(r) };
    let t = TestApp::spawn_with(
        backend,
        Opts { manual_clock: true, public_url: Some("https://shop.example".into()), ..with(protection) },
    )
    .await;
    let browser = no_redirects();
    assert_eq!(sign_in(&t, &browser, "guess-1", "198.51.100.7").await.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(sign_in(&t, &browser, "guess-2", "198.51.100.7").await.status(), StatusCode::UNAUTHORIZED);
    let locked = sign_in(&t, &browser, "guess-3", "198.51.100.7").await;
    assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(locked.headers()["retry-after"], "60");
    // Locked out: wrong tokens are backed off (and not counted again), the operator is told, and
    // the right token still signs in: failing in the admin's name never locks the admin out.
    assert_eq!(sign_in(&t, &browser, "guess-4", "198.51.100.7").await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'admin_signin_lockout'").await, 1);
    assert_eq!(sign_in(&t, &browser, ADMIN, "198.51.100.7").await.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        sign_in(&t, &browser, "guess-5", "198.51.100.7").await.status(),
        StatusCode::UNAUTHORIZED,
        "counted anew"
    );
    // A guess spread over many addresses: all of them together fail ten times as often, then
    // wrong tokens are backed off everywhere, and the right one still signs in.
    for i in 0..25 {
        let from = format!("203.0.113.{}", i + 1);
        assert_eq!(sign_in(&t, &browser, "guess", &from).await.status(), StatusCode::UNAUTHORIZED, "{from}");
    }
    assert_eq!(sign_in(&t, &browser, "guess", "203.0.113.100").await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(sign_in(&t, &browser, "guess", "203.0.113.101").await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'admin_signin_lockout'").await, 2);
    assert_eq!(sign_in(&t, &browser, ADMIN, "203.0.113.102").await.status(), StatusCode::SEE_OTHER);
    // Another address signs in; over https the cookie is Secure.
    let ok = sign_in(&t, &browser, ADMIN, "198.51.100.8").await;
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    let set_cookie = ok.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set_cookie.contains("; Secure") && set_cookie.contains("HttpOnly"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    // The lockout ends.
    t.clock.as_ref().unwrap().advance_ms(60_001);
    assert_eq!(sign_in(&t, &browser, "guess", "203.0.113.101").await.status(), StatusCode::UNAUTHORIZED);
    // Idle for longer than the idle time, the console session has ended; used, it stays.
    let page = |cookie: String| browser.get(t.url("/admin")).header("cookie", cookie).send();
    assert_eq!(page(cookie.clone()).await.unwrap().status(), StatusCode::OK);
    t.clock.as_ref().unwrap().advance_ms(20 * 60_000);
    assert_eq!(page(cookie.clone()).await.unwrap().status(), StatusCode::OK, "used within the idle time");
    t.clock.as_ref().unwrap().advance_ms(20 * 60_000);
    assert_eq!(page(cookie.clone()).await.unwrap().status(), StatusCode::OK, "its use moved the end on");
    t.clock.as_ref().unwrap().advance_ms(31 * 60_000);
    let r = page(cookie).await.unwrap();
    assert_eq!((r.status(), r.headers()["location"].to_str().unwrap()), (StatusCode::SEE_OTHER, "/admin/login"));
    // Sign-out revokes the session at once.
    let ok = sign_in(&t, &browser, ADMIN, "198.51.100.8").await;
    let cookie = ok.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let html = page(cookie.clone()).await.unwrap().text().await.unwrap();
    let csrf = csrf_token(&html);
    let out =
        browser.post(t.url("/admin/logout")).header("cookie", &cookie).form(&[("csrf", csrf)]).send().await.unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert_eq!(page(cookie).await.unwrap().status(), StatusCode::SEE_OTHER, "revoked");
}
on_both!(admin_lockout, admin_sign_in_failures_lock_the_address_out);

/// A siteverify endpoint like Turnstile's: `success` for the token "good" sent with the secret.
pub(crate) async fn fake_verifier() -> (String, tokio::task::JoinHandle<()>) {
    use axum::routing::post;
    async fn verify(axum::Form(form): axum::Form<std::collections::HashMap<String, String>>) -> axum::Json<Value> {
        let ok = form.get("secret").map(String::as_str) == Some("captcha-secret")
            && form.get("response").map(String::as_str) == Some("good")
            && form.get("remoteip").is_some_and(|ip| ip == "198.51.100.7");
        axum::Json(json!({"success": ok}))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/siteverify", listener.local_addr().unwrap());
    let app = axum::Router::new().route("/siteverify", post(verify));
    (url, tokio::spawn(async move { axum::serve(listener, app).await.unwrap() }))
}

async fn confirms_need_a_verified_bot_check(backend: Backend) {
    let (verify_url, verifier) = fake_verifier().await;
    let captcha = Captcha { verify_url, secret: "captcha-secret".into() };
    let t = TestApp::spawn_with(backend, with(Protection { captcha: Some(captcha), ..test_protection() })).await;
    t.create_sku("MUG", "Mug", 100, 5).await;
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("MUG", 1)]).await;
    let confirm = |token: Option<&str>| {
        let mut body = json!({"gateway": "sandbox"});
        if let Some(tk) = token {
            body["captcha_token"] = json!(tk);
        }
        t.checkout_request(&buyer, &basket, &body).header("x-forwarded-for", "198.51.100.7").send()
    };
    for token in [None, Some("bad"), Some("")] {
        let r = confirm(token).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY, "{token:?}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "captcha_failed");
    }
    assert_eq!(t.count("SELECT COUNT(*) FROM orders").await, 0, "nothing created");
    assert_eq!(t.sku("MUG").await["reserved"], 0);
    let r = confirm(Some("good")).await.unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let placed: Value = r.json().await.unwrap();
    // A double click after it creates nothing and is answered without a second check.
    let again = confirm(None).await.unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    let again: Value = again.json().await.unwrap();
    assert_eq!(again["order_no"], placed["order_no"]);
    verifier.abort();
}
on_both!(captcha, confirms_need_a_verified_bot_check);

/// Reads until the server closes the connection; true if it did within `limit`.
async fn closed_within(stream: &mut tokio::net::TcpStream, limit: Duration) -> bool {
    let mut buf = [0_u8; 1024];
    let read = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(limit, read).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_clients_are_cut_off_and_do_not_starve_others() {
    let protection =
        Protection { header_read_timeout: Duration::from_secs(1), max_connections: 4, ..test_protection() };
    let t = TestApp::spawn_with(Backend::Sqlite, with(protection)).await;
    let addr = t.app.addr;
    // Slow headers: one byte every 200 ms is dropped once the header-read time is over, long
    // before the request would be complete.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: kassa\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut dropped = false;
    for byte in request.iter() {
        if slow.write_all(&[*byte]).await.is_err() {
            dropped = true;
            break;
        }
        let mut probe = [0_u8; 1];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_millis(200), slow.read(&mut probe)).await {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "a client dribbling its headers is dropped before it finishes");
    // Many idle connections take every place; a real client is still served once they are cut.
    let mut idle = Vec::new();
    for _ in 0..8 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let client = reqwest::Client::builder().timeout(Duration::from_secs(20)).build().unwrap();
    let r = client.get(t.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    for conn in &mut idle {
        assert!(closed_within(conn, Duration::from_secs(20)).await, "an idle connection is closed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_answer_carries_the_security_headers() {
    let t = TestApp::spawn_with(Backend::Sqlite, Opts { demo: true, ..Opts::default() }).await;
    for path in ["/", "/healthz", "/admin/login", "/api/v1/orders/NOPE", "/no-such-page"] {
        let r = t.http.get(t.url(path)).send().await.unwrap();
        let h = r.headers();
        let csp = h["content-security-policy"].to_str().unwrap();
        assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"), "{path}: {csp}");
        assert_eq!(h["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(h["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(h["x-frame-options"], "DENY", "{path}");
    }
    let js = t.http.get(t.url("/assets/return.js")).send().await.unwrap();
    assert_eq!(js.headers()["content-type"], "text/javascript; charset=utf-8");
    assert!(js.text().await.unwrap().contains("data-poll"));
    assert_eq!(t.http.get(t.url("/assets/nope.js")).send().await.unwrap().status(), StatusCode::NOT_FOUND);
}

async fn retention_prunes_only_what_nothing_needs(backend: Backend) {
    let hook = crate::lifecycle::webhook(0).await;
    let t = TestApp::spawn_with(
        backend,
        Opts { manual_clock: true, webhook_url: Some(hook.url.clone()), ..Opts::default() },
    )
    .await;
    let clock = t.clock.clone().unwrap();
    t.create_sku("MUG", "Mug", 100, 50).await;
    let _idle = t.buyer().await;
    let abandoned = t.buyer().await;
    t.basket(&abandoned, &[("MUG", 1)]).await;
    let paid_buyer = t.buyer().await;
    let paid_basket = t.basket(&paid_buyer, &[("MUG", 1)]).await;
    let (_, placed) = t.checkout(&paid_buyer, &paid_basket, Some("key-1")).await;
    let (paid, paid_ref) = (crate::common::s(&placed["order_no"]), crate::common::s(&placed["attempt_ref"]));
    t.complete(&paid_ref, "succeeded", 1).await;
    let (_, refunding, refunding_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&refunding_ref, "succeeded", 1).await;
    t.settle().await;
    // The messages so far go out; the refund's wait.
    t.app.relay.clone().unwrap().step().await.unwrap();
    let (status, body) = t
        .admin_post(
            &format!("/api/v1/admin/orders/{refunding}/refunds"),
            json!({"refund_no": "R-1", "amount_minor": 100, "reason": "test"}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    t.settle().await;
    // An order still open after a failed payment: its notification is kept.
    let (_open_buyer, open, open_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&open_ref, "failed", 1).await;
    t.settle().await;
    assert_eq!(t.count("SELECT COUNT(*) FROM sessions").await, 5);
    let keys = t.count("SELECT COUNT(*) FROM idempotency_keys").await;
    assert!(keys > 0);
    // Nothing is old enough yet.
    assert!(!t.app.retainer.step().await.unwrap().any());
    clock.advance_ms(31 * 24 * 3600 * 1000);
    let pruned = t.app.retainer.step().await.unwrap();
    assert_eq!((pruned.baskets, pruned.sessions, pruned.notification_bodies), (1, 2, 0), "{pruned:?}");
    assert_eq!(t.count("SELECT COUNT(*) FROM sessions").await, 3, "sessions with orders stay");
    assert_eq!(t.count("SELECT COUNT(*) FROM baskets WHERE status = 'open'").await, 0);
    assert_eq!(t.count("SELECT COUNT(*) FROM orders").await, 3);
    assert_eq!(pruned.idempotency_keys, u64::try_from(keys).unwrap(), "a month on, past their window: {pruned:?}");
    let messages = t.count("SELECT COUNT(*) FROM outbox").await;
    let delivered = t.count("SELECT COUNT(*) FROM outbox WHERE status = 'delivered'").await;
    assert!(delivered > 0 && delivered < messages, "{delivered} of {messages}");
    assert_eq!(pruned.delivered_messages, 0, "delivered a month ago: kept");
    t.assert_clean().await;
    clock.advance_ms(150 * 24 * 3600 * 1000);
    let pruned = t.app.retainer.step().await.unwrap();
    assert_eq!(pruned.notification_bodies, 3, "{pruned:?}");
    assert_eq!(pruned.delivered_messages, u64::try_from(delivered).unwrap(), "{pruned:?}");
    assert_eq!(t.count("SELECT COUNT(*) FROM outbox").await, messages - delivered, "a message not delivered stays");
    let kept: Vec<(String, Vec<u8>)> =
        sql::query_as("SELECT order_no, raw_body FROM notifications WHERE body_pruned_at IS NULL")
            .fetch_all(t.app.state.db.read_pool())
            .await
            .unwrap();
    assert_eq!(kept.len(), 1);
    assert_eq!(kept[0].0, open, "an open order keeps its notification's body");
    assert!(!kept[0].1.is_empty());
    assert_eq!(t.count("SELECT COUNT(*) FROM notifications").await, 4, "the decision records stay");
    assert_eq!(t.status(&refunding).await, "refunded");
    assert_eq!(t.status(&paid).await, "paid");
    t.assert_clean().await;
}
on_both!(retention, retention_prunes_only_what_nothing_needs);

/// Sessions are pruned by a walk over them oldest first, a bounded round at a time: more than a
/// batch of idle sessions behind sessions with orders all go in one pass, the walk starts over
/// once it reaches the idle cutoff, and a session that has lost its basket since is pruned by
/// the next walk.
async fn retention_walks_the_sessions(backend: Backend) {
    use kassa::clock::Clock as _;
    use kassa::store::retention::{PRUNE_BATCH, SESSIONS_WALKED_THROUGH};
    let t = TestApp::spawn_with(backend, Opts { manual_clock: true, ..Opts::default() }).await;
    let clock = t.clock.clone().unwrap();
    t.create_sku("MUG", "Mug", 100, 50).await;
    let (_, _order_no, _) = t.pending_order(&[("MUG", 1)]).await;
    let db = &t.app.state.db;
    let idle = PRUNE_BATCH * 2 + 7;
    let created = clock.now_ms() + 1;
    for i in 0..idle {
        sql::query("INSERT INTO sessions (id, token_hash, csrf_token, created_at) VALUES ($1, $2, 'c', $3)")
            .bind(format!("idle-{i:05}"))
            .bind(format!("hash-{i:05}"))
            .bind(created + i)
            .execute(db.read_pool())
            .await
            .unwrap();
    }
    let shopper = t.buyer().await;
    t.basket(&shopper, &[("MUG", 1)]).await;
    let walked = || async {
        sql::query_scalar::<String>("SELECT value FROM settings WHERE name = $1")
            .bind(SESSIONS_WALKED_THROUGH)
            .fetch_one(db.read_pool())
            .await
            .unwrap()
    };
    clock.advance_ms(31 * 24 * 3600 * 1000);
    // The shopper's basket is touched just before the pass: it stays, and so does its session.
    sql::query("UPDATE baskets SET updated_at = $1").bind(clock.now_ms()).execute(db.read_pool()).await.unwrap();
    let pruned = t.app.retainer.step().await.unwrap();
    assert_eq!(pruned.sessions, u64::try_from(idle).unwrap(), "{pruned:?}");
    assert_eq!(walked().await, i64::MIN.to_string(), "the walk reached the cutoff: it starts over");
    assert_eq!(t.count("SELECT COUNT(*) FROM sessions").await, 2, "the order's and the shopper's");
    clock.advance_ms(31 * 24 * 3600 * 1000);
    let pruned = t.app.retainer.step().await.unwrap();
    assert_eq!((pruned.baskets, pruned.sessions), (1, 1), "{pruned:?}");
    assert_eq!(t.count("SELECT COUNT(*) FROM sessions").await, 1, "the session with an order stays");
    t.assert_clean().await;
}

on_both!(retention_sessions, retention_walks_the_sessions);

/// `kassa serve` with `args` in a fresh data dir: (exit success, stdout, stderr) once it exits or
/// prints that it listens (then it is stopped).
pub(crate) fn serve_briefly(args: &[&str]) -> (Option<bool>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("stdout.log"), dir.path().join("stderr.log"));
    let mut child = crate::common::kassa_command()
        .arg("serve")
        .args(args)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env("RUST_LOG", "error")
        .env_remove("KASSA_ADMIN_TOKEN")
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut exited = None;
    for _ in 0..800 {
        if let Some(status) = child.try_wait().unwrap() {
            exited = Some(status.success());
            break;
        }
        if std::fs::read_to_string(&out).unwrap_or_default().contains("kassa listening on") {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    if exited.is_none() {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    (exited, std::fs::read_to_string(&out).unwrap_or_default(), std::fs::read_to_string(&err).unwrap_or_default())
}

#[test]
fn start_up_names_a_busy_port_refuses_a_short_admin_token_and_warns() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let (exited, _, err) = serve_briefly(&["--listen", &addr]);
    assert_eq!(exited, Some(false));
    assert!(err.contains(&addr) && err.contains("already in use"), "{err}");
    let (exited, _, err) = serve_briefly(&["--listen", "127.0.0.1:0", "--admin-token", "short"]);
    assert_eq!(exited, Some(false));
    assert!(err.contains("at least 32 characters") && err.contains("openssl rand -hex 32"), "{err}");
    assert!(!err.contains("short"), "the token is not repeated: {err}");
    // A host name listens; a server that cannot take payments or be administered says so.
    let (exited, out, err) = serve_briefly(&["--listen", "localhost:0"]);
    assert_eq!(exited, None, "{err}");
    assert!(out.contains("kassa listening on http://127.0.0.1:"), "{out}");
    assert!(err.contains("no payment gateway is configured"), "{err}");
    assert!(err.contains("no admin token"), "{err}");
}

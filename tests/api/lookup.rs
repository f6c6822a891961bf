//! The buyer's way back to an order: the contact and lookup password at checkout, the lookup, the
//! single-use link (its page at once, its keys only on a POST), and the log of every reveal.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, TestApp, answer, s};
use crate::on_both;

async fn digital_sku(t: &TestApp, sku: &str, keys: &[&str]) {
    let body = json!({"sku": sku, "name": "Game key", "price_minor": 500, "currency": "CNY", "kind": "digital"});
    let (status, created) = t.admin_post("/api/v1/admin/skus", body).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, body) = t.admin_post(&format!("/api/v1/admin/skus/{sku}/keys"), json!({"keys": keys})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A buyer's delivered order of one `GAME` key, placed with `checkout` (its contact, its password):
/// (buyer, order number).
async fn delivered_order(t: &TestApp, checkout: Value) -> (String, String) {
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("GAME", 1)]).await;
    let (status, order) = t.checkout_with(&buyer, &basket, &checkout).await;
    assert_eq!(status, StatusCode::CREATED, "{order}");
    let (status, body) = t.complete(&s(&order["attempt_ref"]), "succeeded", 1).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    t.settle().await;
    let order_no = s(&order["order_no"]);
    assert_eq!(t.status(&order_no).await, "delivered");
    (buyer, order_no)
}

async fn lookup(t: &TestApp, body: Value) -> (StatusCode, Value) {
    answer(t.http.post(t.url("/api/v1/lookup")).json(&body).send().await.unwrap()).await
}

on_both!(a_lookup_password_opens_the_order_and_its_keys_once, password_lookup);
async fn password_lookup(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    digital_sku(&t, "GAME", &["KEY-AAAA-1111", "KEY-BBBB-2222"]).await;
    let checkout = json!({
        "gateway": "sandbox",
        "contact": {"email": " Buyer.One@Example.COM ", "phone": "+86 138-0013-8000"},
        "lookup_password": "open sesame"
    });
    let (buyer, order_no) = delivered_order(&t, checkout).await;

    // The contact is kept normalised; the buyer, the admin, the webhook and the export see it.
    let own = t.http.get(t.url(&format!("/api/v1/orders/{order_no}"))).bearer_auth(&buyer).send().await.unwrap();
    let own: Value = own.json().await.unwrap();
    assert_eq!(own["contact"], json!({"email": "buyer.one@example.com", "phone": "+8613800138000"}));
    let admin = t.order(&order_no).await;
    assert_eq!(admin["contact"]["email"], "buyer.one@example.com");
    let payload: String =
        kassa::store::sql::query_scalar("SELECT payload FROM outbox WHERE order_no = $1 AND topic = 'order.delivered'")
            .bind(&order_no)
            .fetch_one(t.app.state.db.read_pool())
            .await
            .unwrap();
    let payload: Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(payload["contact"]["phone"], "+8613800138000", "{payload}");
    let csv = t.http.get(t.url("/api/v1/admin/orders.csv")).bearer_auth(crate::common::ADMIN).send().await;
    let csv = csv.unwrap().text().await.unwrap();
    assert!(csv.lines().next().unwrap().ends_with("contact_email,contact_phone,discount,promotion_code"), "{csv}");
    // A leading + is what a spreadsheet reads as a formula: the export quotes it, as every cell.
    assert!(csv.contains("buyer.one@example.com,'+8613800138000"), "{csv}");
    let found = t.admin_get("/api/v1/admin/orders?q=BUYER.ONE%40example.com").await;
    assert_eq!(found["items"][0]["order_no"], order_no.as_str(), "the console finds a buyer's orders by contact");
    // Only the slow hash of the password is kept.
    let hash: String = kassa::store::sql::query_scalar("SELECT lookup_hash FROM orders WHERE order_no = $1")
        .bind(&order_no)
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    assert!(hash.starts_with("$argon2id$") && !hash.contains("open sesame"), "{hash}");

    // A wrong password, an unknown order and a malformed number get the same answer as a contact.
    for (number, password) in
        [(order_no.as_str(), "open sesame!"), ("KS0000000000000000000", "open sesame"), ("../x", "p")]
    {
        let (status, body) = lookup(&t, json!({"order_no": number, "password": password})).await;
        assert_eq!((status, s(&body["status"])), (StatusCode::ACCEPTED, "accepted".to_string()), "{body}");
        assert!(body.get("url").is_none());
    }
    // Without e-mail, a lookup by contact cannot send anything, for any order alike.
    for email in ["buyer.one@example.com", "someone@example.com"] {
        let (status, body) = lookup(&t, json!({"order_no": order_no, "email": email})).await;
        assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "mail_off".to_string()));
    }
    let (status, body) = lookup(&t, json!({"order_no": order_no})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "invalid_lookup".to_string()));

    // The right password answers the link.
    let (status, body) = lookup(&t, json!({"order_no": order_no, "password": "open sesame"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let url = s(&body["url"]);
    assert!(url.starts_with(&format!("{}/lookup/open/{order_no}.", t.base)), "{url}");
    // Following it (as a mail scanner does) shows the order and uses nothing up.
    for _ in 0..2 {
        let page = t.http.get(&url).send().await.unwrap();
        assert_eq!(page.status(), StatusCode::OK);
        let html = page.text().await.unwrap();
        assert!(html.contains(&order_no) && html.contains("reveal-form"), "{html}");
        assert!(!html.contains("KEY-"), "no key before the POST");
    }
    // The POST from the page shows the keys, once.
    let revealed = t.http.post(&url).header("user-agent", "TestBrowser/1.0").send().await.unwrap();
    assert_eq!(revealed.status(), StatusCode::OK);
    assert_eq!(revealed.headers()["cache-control"], "no-store");
    let html = revealed.text().await.unwrap();
    assert!(html.contains("KEY-AAAA-1111") || html.contains("KEY-BBBB-2222"), "{html}");
    for again in [t.http.post(&url).send().await.unwrap(), t.http.get(&url).send().await.unwrap()] {
        assert_eq!(again.status(), StatusCode::CONFLICT, "a used link says so");
        assert!(again.text().await.unwrap().contains("/lookup"), "and leads to a new lookup");
    }
    // A token changed in any way opens nothing.
    let forged = url.replace(&format!("/lookup/open/{order_no}."), &format!("/lookup/open/{order_no}x."));
    assert_eq!(t.http.get(&forged).send().await.unwrap().status(), StatusCode::NOT_FOUND);
    let (prefix, tag) = url.rsplit_once('.').unwrap();
    let flipped = format!("{prefix}.{}{}", if tag.starts_with('A') { "B" } else { "A" }, &tag[1..]);
    assert_eq!(t.http.get(&flipped).send().await.unwrap().status(), StatusCode::NOT_FOUND);

    // Every reveal is logged, with where it went: the admin's reads, the buyer's API read, the link.
    let admin = t.order(&order_no).await;
    let reveals = admin["reveals"].as_array().unwrap();
    let channels: Vec<&str> = reveals.iter().map(|r| r["channel"].as_str().unwrap()).collect();
    assert_eq!(channels, ["admin", "api", "lookup_link"], "{reveals:?}");
    let link = &reveals[2];
    assert_eq!((link["keys"].as_i64(), s(&link["client_addr"])), (Some(1), "127.0.0.1".to_string()));
    assert_eq!(link["user_agent"], "TestBrowser/1.0");
    // The same viewer again within a minute is the same reveal.
    let _ = t.order(&order_no).await;
    assert_eq!(t.order(&order_no).await["reveals"].as_array().unwrap().len(), 3);
    t.assert_clean().await;
}

on_both!(a_checkout_contact_is_checked, contact_checked);
async fn contact_checked(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 100, 5).await;
    let buyer = t.buyer().await;
    for (body, code) in [
        (json!({"gateway": "sandbox", "contact": {"email": "not-an-address"}}), "invalid_contact"),
        (json!({"gateway": "sandbox", "contact": {"phone": "12"}}), "invalid_contact"),
        (json!({"gateway": "sandbox", "lookup_password": "short"}), "invalid_lookup_password"),
    ] {
        let basket = t.basket(&buyer, &[("MUG", 1)]).await;
        let (status, answer) = t.checkout_with(&buyer, &basket, &body).await;
        assert_eq!((status, s(&answer["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, code.to_string()));
    }
    assert_eq!(t.count("SELECT COUNT(*) FROM orders").await, 0, "nothing was placed");
    // Without a contact, the order is as before, and a lookup of it matches nothing.
    let (_, order_no, _) = t.pending_order(&[("MUG", 1)]).await;
    assert_eq!(t.order(&order_no).await["contact"], json!({"email": null, "phone": null}));
    let (status, _) = lookup(&t, json!({"order_no": order_no, "password": "anything at all"})).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    t.assert_clean().await;
}

/// With the storefront's limits on: ten lookups of one order an hour from anywhere, ten a minute
/// from one address, and the bot check's place after misses.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lookups_are_limited_per_order_and_address() {
    let opts = Opts {
        protection: kassa::config::Protection {
            rate_limits: Some(Default::default()),
            ..crate::common::test_protection()
        },
        ..Opts::default()
    };
    let t = TestApp::spawn_with(Backend::Sqlite, opts).await;
    t.create_sku("MUG", "Mug", 100, 5).await;
    let (_, order_no, _) = t.pending_order(&[("MUG", 1)]).await;
    let from = |i: u32| format!("198.51.100.{i}");
    for i in 0..10 {
        let r = t.http.post(t.url("/api/v1/lookup")).header("x-forwarded-for", from(i));
        let (status, _) =
            answer(r.json(&json!({"order_no": order_no, "password": "guess 123"})).send().await.unwrap()).await;
        assert_eq!(status, StatusCode::ACCEPTED, "lookup {i}");
    }
    let r = t.http.post(t.url("/api/v1/lookup")).header("x-forwarded-for", from(99));
    let (status, body) =
        answer(r.json(&json!({"order_no": order_no, "password": "guess 123"})).send().await.unwrap()).await;
    assert_eq!(
        (status, s(&body["error"]["details"]["bucket"])),
        (StatusCode::TOO_MANY_REQUESTS, "lookup_keys".to_string())
    );
    // Another order from one address: ten a minute.
    let mut last = StatusCode::OK;
    for i in 0..11 {
        let r = t.http.post(t.url("/api/v1/lookup")).header("x-forwarded-for", "203.0.113.7");
        let body = json!({"order_no": format!("KS00000000000000000{i:02}"), "password": "guess 123"});
        last = answer(r.json(&body).send().await.unwrap()).await.0;
    }
    assert_eq!(last, StatusCode::TOO_MANY_REQUESTS);
}

on_both!(the_lookup_page_leads_somewhere, lookup_page);
async fn lookup_page(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    digital_sku(&t, "GAME", &["KEY-PAGE-0001"]).await;
    let checkout = json!({"gateway": "sandbox", "lookup_password": "page password"});
    let (_, order_no) = delivered_order(&t, checkout).await;
    let page = t.http.get(t.url("/lookup")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("lookup-form"), "{page}");
    let no_redirect = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let form = [("order_no", order_no.as_str()), ("password", "page password")];
    let r = no_redirect.post(t.url("/lookup")).form(&form).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let link = r.headers()["location"].to_str().unwrap().to_string();
    let html = t.http.post(&link).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("KEY-PAGE-0001"), "{html}");
    let form = [("order_no", order_no.as_str()), ("password", "not the password")];
    let html = t.http.post(t.url("/lookup")).form(&form).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("next-step") && !html.contains("KEY-PAGE"), "the same answer as a match by contact: {html}");
    let html = t.http.get(t.url("/lookup?lang=zh")).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("查找订单"), "{html}");
}

/// After three lookups from one address that matched nothing, its lookups need the bot check.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn misses_bring_the_bot_check() {
    let (verify_url, verifier) = crate::abuse::fake_verifier().await;
    let captcha = kassa::config::Captcha { verify_url, secret: "captcha-secret".into() };
    let opts = Opts {
        protection: kassa::config::Protection { captcha: Some(captcha), ..crate::common::test_protection() },
        ..Opts::default()
    };
    let t = TestApp::spawn_with(Backend::Sqlite, opts).await;
    // An order that does not exist is a miss like any other.
    let order_no = "KS00000000000000000000A";
    let ask = |from: &'static str, token: Option<&'static str>| {
        let mut body = json!({"order_no": order_no, "password": "guess 123"});
        if let Some(tk) = token {
            body["captcha_token"] = json!(tk);
        }
        t.http.post(t.url("/api/v1/lookup")).header("x-forwarded-for", from).json(&body).send()
    };
    for _ in 0..3 {
        assert_eq!(ask("198.51.100.7", None).await.unwrap().status(), StatusCode::ACCEPTED);
    }
    let (status, body) = answer(ask("198.51.100.7", None).await.unwrap()).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "captcha_failed".to_string()));
    assert_eq!(ask("198.51.100.7", Some("good")).await.unwrap().status(), StatusCode::ACCEPTED);
    assert_eq!(ask("198.51.100.9", None).await.unwrap().status(), StatusCode::ACCEPTED, "another address is not asked");
    verifier.abort();
}

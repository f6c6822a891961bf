use kassa::store::sql;
use reqwest::StatusCode;
use serde_json::json;

use crate::common::{ADMIN, Backend, TestApp, csrf_token, form_value, s};
use crate::on_both;

on_both!(handoff_page_escapes_and_holds_no_secret, handoff_escapes);
async fn handoff_escapes(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    let evil = "Tea \"><script>alert(1)</script><img src=x onerror=alert(2)> '&";
    t.create_sku("EVIL", evil, 100, 5).await;
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("EVIL", 1)]).await;
    let r = t
        .checkout_request(&buyer, &basket, &json!({"gateway": "sandbox"}))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = r.text().await.unwrap();
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<img"), "{html}");
    assert!(!html.contains("\"><script"), "{html}");
    assert!(html.contains("&#34;&#62;&#60;script&#62;") || html.contains("&quot;&gt;&lt;script&gt;"), "{html}");
    assert!(html.contains("<noscript><button type=\"submit\">"), "{html}");
    assert!(html.contains("action=\"http://127.0.0.1:"), "{html}");
    // Exactly one script: ours, the auto-submit, from kassa itself (no inline script at all).
    assert_eq!(html.matches("<script").count(), 1);
    assert!(html.contains("<script src=\"/assets/handoff.js\"></script>"), "{html}");
    // No secret: not the merchant secret, not the sandbox key, not the admin token.
    let secret: String = sql::query_scalar("SELECT value FROM settings WHERE name = 'sandbox.merchant_secret'")
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    let key: String = sql::query_scalar("SELECT value FROM settings WHERE name = 'sandbox.signing_key_pkcs8'")
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    assert!(!html.contains(&secret) && !html.contains(&key[..20]) && !html.contains(ADMIN) && !html.contains(&buyer));
    // The sandbox pay page, reached through that form, escapes the subject as well.
    let order_no = s(&t.admin_get("/api/v1/admin/skus/EVIL").await["sku"]);
    assert_eq!(order_no, "EVIL");
}

on_both!(browser_flow_over_forms_and_return_page, browser_flow);
/// The whole buyer journey a browser makes, form by form (the headless-browser version of this
/// test belongs to the UI issue): storefront, basket, confirm, auto-submit to the sandbox, pay,
/// return page. Query parameters on the return page change nothing.
async fn browser_flow(backend: Backend) {
    let t = TestApp::spawn_with(backend, crate::common::Opts { demo: true, ..Default::default() }).await;
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    // The demo storefront hands out the session cookie and lists the demo catalog.
    let r = browser.get(t.url("/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let set_cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Lax"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let shop = r.text().await.unwrap();
    assert!(shop.contains("name=\"qty_LAMP-FLASH-SALE\""), "{shop}");
    let csrf = csrf_token(&shop);
    // Without the CSRF token the form post is refused.
    let r = browser
        .post(t.url("/shop/basket"))
        .header("cookie", &cookie)
        .form(&[("qty_LAMP-FLASH-SALE", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // One refused line (past the largest quantity) refuses the whole form: no basket is left.
    let too_many = (kassa::domain::basket::LINE_QUANTITY_MAX + 1).to_string();
    let r = browser
        .post(t.url("/shop/basket"))
        .header("cookie", &cookie)
        .form(&[("qty_LAMP-FLASH-SALE", "1"), ("qty_MUG-CELADON", too_many.as_str()), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM baskets").await, 0);
    let r = browser
        .post(t.url("/shop/basket"))
        .header("cookie", &cookie)
        .form(&[("qty_LAMP-FLASH-SALE", "2"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let review = r.headers()["location"].to_str().unwrap().to_string();
    let page = browser.get(t.url(&review)).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    // Money as money, on the line and in the total alike.
    assert_eq!(page.matches("19.80 CNY").count(), 2, "{page}");
    assert!(!page.contains("minor units") && !page.contains(">1980<"), "{page}");
    let key = form_value(&page, "idempotency_key");
    let confirm = format!("{review}/confirm");
    let form = [("csrf", csrf.as_str()), ("idempotency_key", key.as_str())];
    // Double-submitted confirm: one order.
    let (a, b) = tokio::join!(
        browser.post(t.url(&confirm)).header("cookie", &cookie).form(&form).send(),
        browser.post(t.url(&confirm)).header("cookie", &cookie).form(&form).send()
    );
    let handoff = a.unwrap().text().await.unwrap();
    let _ = b.unwrap().text().await.unwrap();
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 1);
    // Submit the hidden form exactly as the browser would.
    let action = handoff.split("action=\"").nth(1).unwrap().split('"').next().unwrap().to_string();
    let fields: Vec<(String, String)> = handoff
        .split("<input type=\"hidden\" name=\"")
        .skip(1)
        .map(|chunk| {
            let name = chunk.split('"').next().unwrap().to_string();
            let value = chunk.split("value=\"").nth(1).unwrap().split('"').next().unwrap();
            (name, html_unescape(value))
        })
        .collect();
    let pay_page = browser.post(&action).form(&fields).send().await.unwrap();
    assert_eq!(pay_page.status(), StatusCode::OK);
    let pay_html = pay_page.text().await.unwrap();
    assert!(pay_html.contains("Pay 19.80 CNY"), "{pay_html}");
    let attempt_ref = fields.iter().find(|(k, _)| k == "attempt_ref").unwrap().1.clone();
    // Tampered form fields are refused by the gateway.
    let mut tampered = fields.clone();
    tampered.iter_mut().find(|(k, _)| k == "amount_minor").unwrap().1 = "1".into();
    assert_eq!(browser.post(&action).form(&tampered).send().await.unwrap().status(), StatusCode::BAD_REQUEST);

    // Return page before paying, with a forged query: still confirming.
    let ret = t.url(&format!("/checkout/return/{attempt_ref}?status=paid&trade_status=TRADE_SUCCESS"));
    let html = browser.get(&ret).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("data-status=\"pending_payment\""), "{html}");
    // Pay on the sandbox page: it redirects back to the return URL.
    let r = browser
        .post(t.url(&format!("/sandbox/pay/{attempt_ref}")))
        .form(&[("outcome", "succeeded")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(r.headers()["location"].to_str().unwrap().ends_with(&format!("/checkout/return/{attempt_ref}")));
    t.settle().await;
    let html = browser.get(&ret).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("data-status=\"paid\""), "{html}");
    // The page polls its attempt's status (the order's, and how this attempt ended).
    let order_no = html.split("<h1>Order <span class=\"id\">").nth(1).unwrap().split('<').next().unwrap().to_string();
    assert!(html.contains(&format!("data-poll=\"/checkout/return/{attempt_ref}/status\"")), "{html}");
    let polled = t.return_status(&attempt_ref).await;
    assert_eq!((polled["status"].as_str(), polled["attempt_status"].as_str()), (Some("paid"), Some("succeeded")));
    let r = browser.get(t.url(&format!("/api/v1/orders/{order_no}"))).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["status"], "paid");
    t.assert_clean().await;
}

fn html_unescape(v: &str) -> String {
    v.replace("&#34;", "\"")
        .replace("&#39;", "'")
        .replace("&#60;", "<")
        .replace("&#62;", ">")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#38;", "&")
        .replace("&amp;", "&")
}

on_both!(admin_console_needs_sign_in_and_csrf, admin_console);
async fn admin_console(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug <b>bold</b>", 8900, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    for path in [
        "/admin",
        "/admin/orders",
        &format!("/admin/orders/{order_no}"),
        "/admin/skus",
        "/admin/alerts",
        "/admin/notifications",
    ] {
        let r = browser.get(t.url(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(r.headers()["location"], "/admin/login");
    }
    let r = browser.post(t.url("/admin/login")).form(&[("token", "nope")]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = browser.post(t.url("/admin/login")).form(&[("token", ADMIN)]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let set_cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let page = browser
        .get(t.url(&format!("/admin/orders/{order_no}")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Mug &#60;b&#62;bold&#60;/b&#62;") && !page.contains("<b>bold"), "escaped");
    assert!(page.contains("order.paid"), "the outbox is shown");
    let csrf = csrf_token(&page);
    // An action without the CSRF token is refused and changes nothing.
    let action = t.url(&format!("/admin/orders/{order_no}/action"));
    let r = browser.post(&action).header("cookie", &cookie).form(&[("action", "deliver")]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(t.status(&order_no).await, "paid");
    let r = browser
        .post(&action)
        .header("cookie", &cookie)
        .form(&[("action", "deliver"), ("csrf", &csrf)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(t.status(&order_no).await, "delivered");
    // Cancel a pending order from the console: closed at the gateway, stock released.
    let (_, pending, pending_ref) = t.pending_order(&[("MUG", 2)]).await;
    let r = browser
        .post(t.url(&format!("/admin/orders/{pending}/action")))
        .header("cookie", &cookie)
        .form(&[("action", "cancel"), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(t.status(&pending).await, "cancelled");
    assert_eq!(t.sku("MUG").await["reserved"], 0);
    let (status, _) = t.complete(&pending_ref, "succeeded", 1).await;
    assert_eq!(status, StatusCode::CONFLICT, "the gateway side was closed first");
    // Search by attempt reference finds the order.
    let list = browser
        .get(t.url(&format!("/admin/orders?q={attempt_ref}")))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(list.contains(&format!("/admin/orders/{order_no}")));
    // Signing out ends the session everywhere.
    browser
        .post(t.url("/admin/logout"))
        .header("cookie", &cookie)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    let r = browser.get(t.url("/admin")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
}

on_both!(h5_page_shows_keys_to_the_buyer_only, h5_page);
async fn h5_page(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.admin_post(
        "/api/v1/admin/skus",
        json!({"sku": "GAME", "name": "Game", "price_minor": 100, "currency": "CNY", "kind": "digital"}),
    )
    .await;
    t.admin_post("/api/v1/admin/skus/GAME/keys", json!({"keys": ["H5-KEY-1"]})).await;
    let (buyer, order_no, attempt_ref) = t.pending_order(&[("GAME", 1)]).await;
    let page = |token: String| {
        let (http, url) = (t.http.clone(), t.url(&format!("/h5/orders/{order_no}")));
        async move { http.get(url).header("cookie", format!("kassa_session={token}")).send().await.unwrap() }
    };
    let html = page(buyer.clone()).await.text().await.unwrap();
    assert!(html.contains("data-status=\"pending_payment\"") && html.contains("Updating"), "{html}");
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let html = page(buyer.clone()).await.text().await.unwrap();
    assert!(
        html.contains("data-status=\"delivered\"") && html.contains("H5-KEY-1") && html.contains("Final."),
        "{html}"
    );
    let stranger = t.buyer().await;
    let r = page(stranger.clone()).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(!r.text().await.unwrap().contains("H5-KEY-1"));
    // The return page shows the status to anyone with the reference, the keys to the buyer only.
    let ret = |token: Option<String>| {
        let (http, url) = (t.http.clone(), t.url(&format!("/checkout/return/{attempt_ref}")));
        async move {
            let mut req = http.get(url);
            if let Some(token) = token {
                req = req.header("cookie", format!("kassa_session={token}"));
            }
            req.send().await.unwrap().text().await.unwrap()
        }
    };
    assert!(ret(Some(buyer.clone())).await.contains("H5-KEY-1"));
    let anonymous = ret(None).await;
    assert!(anonymous.contains("data-status=\"delivered\"") && !anonymous.contains("H5-KEY-1"));
    assert!(!ret(Some(stranger)).await.contains("H5-KEY-1"));
}

/// A signed-in console: the client (no redirects followed), its cookie and the CSRF token.
pub async fn console(t: &TestApp) -> (reqwest::Client, String, String) {
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = browser.post(t.url("/admin/login")).form(&[("token", ADMIN)]).send().await.unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let page = browser.get(t.url("/admin/skus")).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
    let csrf = csrf_token(&page);
    (browser, cookie, csrf)
}

on_both!(the_console_downloads_orders_and_refunds_behind_its_sign_in, console_downloads);
async fn console_downloads(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "龙井茶", 1000, 5).await;
    let (_, paid_no, attempt) = t.pending_order(&[("TEA", 1)]).await;
    t.complete(&attempt, "succeeded", 1).await;
    t.settle().await;
    let (status, body) = t
        .admin_post(
            &format!("/api/v1/admin/orders/{paid_no}/refunds"),
            json!({"refund_no": "R-TEA-1", "amount_minor": 300}),
        )
        .await;
    assert!(status.is_success(), "{body}");
    let (_, open_no, _) = t.pending_order(&[("TEA", 1)]).await;
    let (browser, cookie, _) = console(&t).await;
    let get = |path: String| {
        let (browser, cookie, url) = (browser.clone(), cookie.clone(), t.url(&path));
        async move { browser.get(url).header("cookie", cookie).send().await.unwrap() }
    };
    // The orders page offers both files, with its own filter carried into the orders export.
    let html = get("/admin/orders?status=paid".into()).await.text().await.unwrap();
    assert!(html.contains("action=\"/admin/orders.csv\"") && html.contains("action=\"/admin/refunds.csv\""), "{html}");
    assert!(html.contains("name=\"status\" value=\"paid\""), "{html}");
    // What the forms send: the filter, empty dates, and the Excel box ticked or not.
    let r = get("/admin/orders.csv?status=paid&q=&from=&to=&bom=true".into()).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    let text = String::from_utf8(r.bytes().await.unwrap().to_vec()).unwrap();
    let text = text.strip_prefix('\u{feff}').expect("a byte-order mark for Excel");
    assert!(text.starts_with("order_no,") && text.contains(&paid_no) && !text.contains(&open_no), "{text}");
    let r = get("/admin/refunds.csv?from=&to=".into()).await;
    assert_eq!(r.status(), StatusCode::OK);
    let text = r.text().await.unwrap();
    assert!(text.starts_with("refund_no,") && text.contains("R-TEA-1") && text.contains("3.00"), "{text}");
    // A bad filter is refused as the API refuses it; signed out, the files are not given.
    assert_eq!(get("/admin/refunds.csv?from=yesterday".into()).await.status(), StatusCode::BAD_REQUEST);
    let r = browser.get(t.url("/admin/orders.csv")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    // No webhook URL: the order's messages are kept and said to be unsent, not "pending".
    let html = get(format!("/admin/orders/{paid_no}")).await.text().await.unwrap();
    assert!(html.contains("id=\"no-webhook\"") && html.contains("not sent: no webhook configured"), "{html}");
    // The API's files take the same option.
    let r = t.http.get(t.url("/api/v1/admin/refunds.csv?bom=true")).bearer_auth(ADMIN).send().await.unwrap();
    assert!(r.bytes().await.unwrap().starts_with("\u{feff}refund_no,".as_bytes()));
}

on_both!(the_console_edits_the_catalog_through_the_api_s_use_cases, console_catalog);
async fn console_catalog(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    let (browser, cookie, csrf) = console(&t).await;
    let post = |path: &str, form: Vec<(&str, &str)>| {
        let (browser, cookie, url) = (browser.clone(), cookie.clone(), t.url(path));
        let mut form: Vec<(String, String)> = form.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        form.push(("csrf".into(), csrf.clone()));
        async move {
            let r = browser.post(url).header("cookie", cookie).form(&form).send().await.unwrap();
            let status = r.status();
            let location = r.headers().get("location").map(|l| l.to_str().unwrap().to_string()).unwrap_or_default();
            (status, location, r.text().await.unwrap())
        }
    };
    // Create: the price typed as money.
    let (status, location, _) = post(
        "/admin/skus",
        vec![
            ("sku", "TEA"),
            ("name", "Tea"),
            ("kind", "physical"),
            ("price", "12.50"),
            ("currency", "CNY"),
            ("stock", "5"),
        ],
    )
    .await;
    assert_eq!((status, location.as_str()), (StatusCode::SEE_OTHER, "/admin/skus?done=created"));
    let tea = t.sku("TEA").await;
    assert_eq!(
        (tea["price_minor"].clone(), tea["on_hand"].clone(), tea["name"].clone()),
        (json!(1250), json!(5), json!("Tea"))
    );
    // The API's rules hold here too: a bad code, a bad price, an existing SKU.
    for (form, says) in [
        (vec![("sku", "a b"), ("name", "X"), ("price", "1"), ("currency", "CNY")], "SKU codes are"),
        (vec![("sku", "X1"), ("name", "X"), ("price", "12.345"), ("currency", "CNY")], "such as 12.50"),
        (vec![("sku", "TEA"), ("name", "Tea"), ("price", "1"), ("currency", "CNY")], "already exists"),
    ] {
        let (status, _, page) = post("/admin/skus", form).await;
        assert!(status.is_client_error(), "{says}: {status}");
        assert!(
            page.contains(says) && page.contains("href=\"/admin/skus\""),
            "a page saying why, with a way back: {page}"
        );
    }
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM skus").await, 1);
    // Edit name and price; the page shows the price as money.
    let (status, _, _) = post("/admin/skus/TEA/edit", vec![("name", "Green tea"), ("price", "13")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let tea = t.sku("TEA").await;
    assert_eq!((tea["price_minor"].clone(), tea["name"].clone()), (json!(1300), json!("Green tea")));
    let page = browser
        .get(t.url("/admin/skus?done=edited"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("value=\"13.00\"") && page.contains("SKU changed."), "the price as money");
    // Stock: add, write off, and not more than there is.
    post("/admin/skus/TEA/stock", vec![("quantity", "3"), ("action", "add")]).await;
    post("/admin/skus/TEA/stock", vec![("quantity", "2"), ("action", "write_off")]).await;
    assert_eq!(t.sku("TEA").await["on_hand"], 6);
    let (status, _, _) = post("/admin/skus/TEA/stock", vec![("quantity", "100"), ("action", "write_off")]).await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _, _) = post("/admin/skus/TEA/stock", vec![("quantity", "-1"), ("action", "add")]).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(t.sku("TEA").await["on_hand"], 6);
    // Keys: a digital SKU, a form post without the script, then a batch as the script sends it.
    post(
        "/admin/skus",
        vec![("sku", "GAME"), ("name", "Game"), ("kind", "digital"), ("price", "1"), ("currency", "CNY")],
    )
    .await;
    let (status, location, _) = post("/admin/skus/GAME/keys", vec![("keys", "K-1\r\nK-2\n\n K-3 \nK-1")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location, "/admin/skus?done=keys&n=3&dup=1");
    let r = browser
        .post(t.url("/admin/skus/GAME/keys"))
        .header("cookie", &cookie)
        .header("accept", "application/json")
        .form(&[("csrf", csrf.as_str()), ("keys", "K-4\nK-2")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap(), json!({"imported": 1, "duplicates": 1}));
    assert_eq!(t.sku("GAME").await["on_hand"], 4);
    // A physical SKU takes no keys, answered in JSON to the script.
    let r = browser
        .post(t.url("/admin/skus/TEA/keys"))
        .header("cookie", &cookie)
        .header("accept", "application/json")
        .form(&[("csrf", csrf.as_str()), ("keys", "K-9")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["error"]["code"], "not_digital");
    // Without the CSRF token nothing changes.
    let r = browser
        .post(t.url("/admin/skus/TEA/stock"))
        .header("cookie", &cookie)
        .form(&[("quantity", "1"), ("action", "add")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(t.sku("TEA").await["on_hand"], 6);
    t.assert_clean().await;
}

on_both!(a_closed_sandbox_payment_answers_a_page_with_a_way_back, closed_pay_page);
async fn closed_pay_page(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 100, 5).await;
    let (buyer, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    // The order is cancelled (its payment closed at the gateway) while the pay page is still open.
    let r = t
        .http
        .post(t.url(&format!("/api/v1/orders/{order_no}/cancel")))
        .bearer_auth(&buyer)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = t
        .http
        .post(t.url(&format!("/sandbox/pay/{attempt_ref}")))
        .form(&[("outcome", "succeeded")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"), "a page, not JSON");
    let page = r.text().await.unwrap();
    assert!(page.contains(&format!("href=\"{}/checkout/return/{attempt_ref}\"", t.base)), "{page}");
    // A form that does not verify is a page too.
    let r = t.http.post(t.url("/sandbox/pay")).form(&[("attempt_ref", "X")]).send().await.unwrap();
    assert!(r.status().is_client_error());
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    assert_eq!(t.status(&order_no).await, "cancelled");
}

/// The console's lists go past their first 200 rows, page by page, each row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn console_lists_page_past_two_hundred_rows() {
    let t = std::sync::Arc::new(TestApp::spawn(Backend::Sqlite).await);
    t.create_sku("MUG", "Mug", 100, 1_000).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..205 {
        let t = t.clone();
        tasks.spawn(async move {
            let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
            t.complete(&attempt_ref, "succeeded", 1).await;
            order_no
        });
    }
    let mut placed = std::collections::BTreeSet::new();
    while let Some(o) = tasks.join_next().await {
        placed.insert(o.unwrap());
    }
    t.settle().await;
    let (browser, cookie, _) = console(&t).await;
    for (first, row_marker) in
        [("/admin/orders", "href=\"/admin/orders/KS"), ("/admin/notifications", "<tr class=\"applied\">")]
    {
        let (mut path, mut rows, mut pages) = (first.to_string(), 0, 0);
        let mut seen = std::collections::BTreeSet::new();
        loop {
            let page = browser.get(t.url(&path)).header("cookie", &cookie).send().await.unwrap().text().await.unwrap();
            pages += 1;
            rows += page.matches(row_marker).count();
            if first == "/admin/orders" {
                for part in page.split("href=\"/admin/orders/").skip(1) {
                    assert!(seen.insert(part.split('"').next().unwrap().to_string()), "an order shown twice");
                }
            }
            match page.split("id=\"older\" href=\"").nth(1) {
                Some(next) => path = html_unescape(next.split('"').next().unwrap()),
                None => break,
            }
        }
        assert_eq!((rows, pages), (205, 2), "{first}");
        if first == "/admin/orders" {
            assert_eq!(seen, placed);
        }
    }
}

on_both!(a_phone_pays_with_wechat_from_the_storefront, phone_wechat);
/// The storefront on a phone's browser, paying with WeChat Pay: the H5 channel, which needs the
/// buyer's address, gets it from the request; a desktop gets the QR code.
async fn phone_wechat(backend: Backend) {
    let wechat = crate::fakes::FakeWechat::start().await;
    let gateways = kassa::gateway::config::GatewaysFile { wechatpay: Some(wechat.config()), ..Default::default() };
    let t = TestApp::spawn_with(backend, crate::common::Opts { demo: true, gateways, ..Default::default() }).await;
    let iphone = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Mobile/15E148 Safari/604.1";
    let desktop = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36";
    for (agent, phone) in [(iphone, true), (desktop, false)] {
        let browser =
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).user_agent(agent).build().unwrap();
        let r = browser.get(t.url("/")).send().await.unwrap();
        let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
        let page = r.text().await.unwrap();
        let csrf = csrf_token(&page);
        let form = [("qty_MUG-CELADON", "1"), ("csrf", csrf.as_str())];
        let r = browser.post(t.url("/shop/basket")).header("cookie", &cookie).form(&form).send().await.unwrap();
        let basket = r.headers()["location"].to_str().unwrap().to_string();
        let confirm = [("csrf", csrf.as_str()), ("gateway", "wechatpay")];
        let r = browser
            .post(t.url(&format!("{basket}/confirm")))
            .header("cookie", &cookie)
            .form(&confirm)
            .send()
            .await
            .unwrap();
        if phone {
            assert_eq!(r.status(), StatusCode::SEE_OTHER, "{}", r.text().await.unwrap());
            let to = r.headers()["location"].to_str().unwrap().to_string();
            assert!(to.starts_with("https://wx.tenpay.com/"), "{to}");
            let attempt_ref: String =
                sql::query_scalar("SELECT attempt_ref FROM payment_attempts WHERE channel = 'h5'")
                    .fetch_one(t.app.state.db.read_pool())
                    .await
                    .unwrap();
            let trade = wechat.trade(&attempt_ref).unwrap();
            assert_eq!(trade.request["scene_info"]["payer_client_ip"], "127.0.0.1");
        } else {
            assert_eq!(r.status(), StatusCode::OK);
            assert!(r.text().await.unwrap().contains("id=\"qr\""));
        }
    }
    t.assert_clean().await;
}

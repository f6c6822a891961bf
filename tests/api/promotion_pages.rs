//! Promotions on the pages: the console creates, pauses, resumes and ends them, generates batches
//! of codes and downloads them; the buyer puts a code on the basket page, sees what it takes off or
//! why it does not, and the order's pages show the discount. In English and in Chinese.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, TestApp, csrf_token, form_value, s};
use crate::on_both;

/// A signed-in console: its requests carry the session cookie (and the CSRF token on forms).
struct Console {
    http: reqwest::Client,
    cookie: String,
    csrf: String,
}

impl Console {
    async fn new(t: &TestApp) -> Console {
        let (http, cookie, csrf) = crate::pages::console(t).await;
        Console { http, cookie, csrf }
    }

    async fn get(&self, t: &TestApp, path: &str) -> reqwest::Response {
        self.http.get(t.url(path)).header("cookie", &self.cookie).send().await.unwrap()
    }

    async fn page(&self, t: &TestApp, path: &str) -> String {
        let r = self.get(t, path).await;
        assert_eq!(r.status(), StatusCode::OK, "GET {path}");
        r.text().await.unwrap()
    }

    /// Posts a form with the CSRF token: the status, where it leads and the page.
    async fn post(&self, t: &TestApp, path: &str, form: &[(&str, &str)]) -> (StatusCode, String, String) {
        let mut form: Vec<(&str, &str)> = form.to_vec();
        form.push(("csrf", &self.csrf));
        let r = self.http.post(t.url(path)).header("cookie", &self.cookie).form(&form).send().await.unwrap();
        let status = r.status();
        let location = r.headers().get("location").map(|l| l.to_str().unwrap().to_string()).unwrap_or_default();
        (status, location, r.text().await.unwrap())
    }
}

/// A buyer's browser on the basket page: its session cookie, the basket and the page's CSRF token.
struct Shopper {
    http: reqwest::Client,
    token: String,
    cookie: String,
    basket: String,
    csrf: String,
}

impl Shopper {
    async fn new(t: &TestApp, lines: &[(&str, i64)]) -> Shopper {
        let token = t.buyer().await;
        let basket = t.basket(&token, lines).await;
        let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        let mut shopper =
            Shopper { http, cookie: format!("kassa_session={token}"), token, basket, csrf: String::new() };
        shopper.csrf = csrf_token(&shopper.page(t, "").await);
        shopper
    }

    /// The basket page, with `query` (`?lang=zh`, or empty).
    async fn page(&self, t: &TestApp, query: &str) -> String {
        let url = t.url(&format!("/shop/basket/{}{query}", self.basket));
        let r = self.http.get(url).header("cookie", &self.cookie).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.text().await.unwrap()
    }

    /// Posts the basket page's form at `action` (after the basket's path): the status and where
    /// it leads.
    async fn post(&self, t: &TestApp, action: &str, form: &[(&str, &str)]) -> (StatusCode, String) {
        let mut form: Vec<(&str, &str)> = form.to_vec();
        form.push(("csrf", &self.csrf));
        let url = t.url(&format!("/shop/basket/{}{action}", self.basket));
        let r = self.http.post(url).header("cookie", &self.cookie).form(&form).send().await.unwrap();
        let location = r.headers().get("location").map(|l| l.to_str().unwrap().to_string()).unwrap_or_default();
        (r.status(), location)
    }

    /// Types `code` into the basket page's form and follows the answer back to the page.
    async fn apply(&self, t: &TestApp, code: &str) -> String {
        let (status, location) = self.post(t, "/promotion", &[("code", code)]).await;
        assert_eq!(status, StatusCode::SEE_OTHER);
        let r = self.http.get(t.url(&location)).header("cookie", &self.cookie).send().await.unwrap();
        r.text().await.unwrap()
    }
}

async fn promotion(t: &TestApp, id: &str) -> Value {
    t.admin_get(&format!("/api/v1/admin/promotions/{id}")).await
}

/// The promotion id in a console location (`/admin/promotions/{id}?done=…`).
fn promotion_id(location: &str) -> String {
    location.trim_start_matches("/admin/promotions/").split('?').next().unwrap().to_string()
}

on_both!(the_console_creates_moves_and_batches_promotions, console_promotions);
async fn console_promotions(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 50).await;
    let console = Console::new(&t).await;
    let html = console.page(&t, "/admin/promotions").await;
    assert!(html.contains("href=\"/admin/promotions\"") && html.contains("id=\"no-promotions\""), "{html}");
    // Created through the form: an amount typed as money, dates read in UTC, limits.
    let (status, location, _) = console
        .post(
            &t,
            "/admin/promotions",
            &[
                ("name", "Spring <b>sale</b>"),
                ("code", "spring10"),
                ("percent_off", ""),
                ("amount_off", "5.50"),
                ("currency", "CNY"),
                ("min_spend", "20"),
                ("skus", "TEA"),
                ("starts_at", "2026-01-01T00:00"),
                ("ends_at", "2099-12-31T23:59"),
                ("max_uses", "100"),
                ("per_buyer", "2"),
                ("first_order_only", "1"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.ends_with("?done=created"), "{location}");
    let id = promotion_id(&location);
    let p = promotion(&t, &id).await;
    assert_eq!(p["code"], "SPRING10");
    assert_eq!((p["amount_off"].clone(), p["min_spend"].clone()), (json!({"CNY": 550}), json!({"CNY": 2000})));
    assert_eq!(
        (s(&p["starts_at"]).as_str(), s(&p["ends_at"]).as_str()),
        ("2026-01-01T00:00:00Z", "2099-12-31T23:59:00Z")
    );
    assert_eq!(
        (p["skus"].clone(), p["max_uses"].clone(), p["per_buyer"].clone()),
        (json!(["TEA"]), json!(100), json!(2))
    );
    assert_eq!(p["first_order_only"], true);
    // The list: name (escaped), code, status, the discount and minimum as money, uses of the most.
    let html = console.page(&t, "/admin/promotions").await;
    let row = html.split(&format!("id=\"promotion-{id}\"")).nth(1).unwrap().split("</tr>").next().unwrap();
    for want in
        ["Spring &#60;b&#62;sale&#60;/b&#62;", "SPRING10", "pill active", "5.50 CNY", "from 20.00 CNY", "0 / 100"]
    {
        assert!(row.contains(want), "{want}: {row}");
    }
    assert!(!html.contains("<b>sale</b>"), "{html}");
    // Its page, after the creation.
    let html = console.page(&t, &location).await;
    assert!(
        html.contains("Promotion created.") && html.contains("id=\"pause\"") && html.contains("2099-12-31T23:59:00Z")
    );
    // The API's rules hold on the form: both benefits, a bad amount, a SKU the shop does not sell,
    // a code taken; each a page saying why, with the way back.
    for (form, says) in [
        (vec![("name", "X"), ("percent_off", "10"), ("amount_off", "5")], "either a percentage off or an amount off"),
        (vec![("name", "X"), ("amount_off", "5.555"), ("currency", "CNY")], "such as 12.50"),
        (vec![("name", "X"), ("percent_off", "10"), ("skus", "TEA, NOPE")], "there is no SKU NOPE"),
        (vec![("name", "X"), ("percent_off", "10"), ("code", "SPRING10")], "another promotion has this code"),
        (
            vec![
                ("name", "X"),
                ("percent_off", "10"),
                ("starts_at", "2026-02-01T00:00"),
                ("ends_at", "2026-01-01T00:00"),
            ],
            "ends_at",
        ),
    ] {
        let (status, _, page) = console.post(&t, "/admin/promotions", &form).await;
        assert!(status.is_client_error(), "{says}: {status}");
        assert!(page.contains(says) && page.contains("href=\"/admin/promotions\""), "{says}: {page}");
    }
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM promotions").await, 1);
    // Without the CSRF token nothing is created or moved.
    let r = console
        .http
        .post(t.url(&format!("/admin/promotions/{id}/status")))
        .header("cookie", &console.cookie)
        .form(&[("action", "end")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_eq!(promotion(&t, &id).await["status"], "active");

    // Pause, resume; a move that cannot be made says why.
    let status_path = format!("/admin/promotions/{id}/status");
    let (status, location, _) = console.post(&t, &status_path, &[("action", "pause")]).await;
    assert_eq!((status, location.clone()), (StatusCode::SEE_OTHER, format!("/admin/promotions/{id}?done=pause")));
    let html = console.page(&t, &location).await;
    assert!(html.contains("pill paused") && html.contains("id=\"resume\"") && !html.contains("id=\"pause\""), "{html}");
    assert_eq!(promotion(&t, &id).await["status"], "paused");
    let (status, _, page) = console.post(&t, &status_path, &[("action", "pause")]).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(page.contains("cannot become paused") && page.contains(&format!("href=\"/admin/promotions/{id}\"")));
    console.post(&t, &status_path, &[("action", "resume")]).await;
    assert_eq!(promotion(&t, &id).await["status"], "active");

    // A batch: the page shows its codes and links to its file; the file has them all.
    let (status, location, _) =
        console.post(&t, &format!("/admin/promotions/{id}/batches"), &[("count", "3"), ("prefix", "vip-")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert!(location.contains("done=batch") && location.contains("batch=b"), "{location}");
    let html = console.page(&t, &location).await;
    assert!(html.contains("3 codes generated in batch b"), "{html}");
    let shown: Vec<String> = html
        .split("id=\"new-codes\"")
        .nth(1)
        .unwrap()
        .split('>')
        .nth(1)
        .unwrap()
        .split("</textarea")
        .next()
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(shown.len(), 3, "{html}");
    assert!(shown.iter().all(|c| c.starts_with("VIP-")), "{shown:?}");
    let csv_link = html.split("id=\"new-batch-csv\"").next().unwrap().rsplit("href=\"").next().unwrap();
    let csv_link = csv_link.split('"').next().unwrap().to_string();
    assert!(csv_link.starts_with(&format!("/admin/promotions/{id}/codes.csv?batch=b")), "{csv_link}");
    let r = console.get(&t, &csv_link).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    let text = r.text().await.unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("code,batch,used"));
    let codes: Vec<&str> = lines.map(|l| l.split(',').next().unwrap()).collect();
    assert_eq!(codes, shown, "{text}");
    // The batches table links each batch's file; signed out, no file.
    let html = console.page(&t, &format!("/admin/promotions/{id}")).await;
    let batches = html.split("id=\"batches\"").nth(1).unwrap().split("</table>").next().unwrap();
    assert!(batches.contains(&format!("href=\"{csv_link}\"")) && batches.contains("<td>3</td><td>0</td>"), "{batches}");
    let r = console.http.get(t.url(&csv_link)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()["location"], "/admin/login");
    let (status, _, page) =
        console.post(&t, &format!("/admin/promotions/{id}/batches"), &[("count", "0"), ("prefix", "")]).await;
    assert!(status.is_client_error() && page.contains("count must be between 1 and 10000"), "{page}");

    // Ended for good: no moves and no batches are offered any more.
    let (status, _, _) = console.post(&t, &status_path, &[("action", "end")]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let html = console.page(&t, &format!("/admin/promotions/{id}?done=end")).await;
    assert!(html.contains("Promotion ended.") && html.contains("pill ended"), "{html}");
    assert!(!html.contains("id=\"resume\"") && !html.contains("id=\"generate\""), "{html}");
    assert_eq!(promotion(&t, &id).await["status"], "ended");
    // An unknown promotion is the console's error page.
    let r = console.get(&t, "/admin/promotions/pm_nope").await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    t.assert_clean().await;
}

on_both!(the_basket_page_takes_a_code_and_the_order_shows_its_discount, basket_code);
async fn basket_code(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 50).await;
    let (status, p) = t
        .admin_post(
            "/api/v1/admin/promotions",
            json!({"name": "Spring", "code": "SPRING", "amount_off": {"CNY": 550}, "min_spend": {"CNY": 2000}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{p}");
    let shopper = Shopper::new(&t, &[("TEA", 1)]).await;
    let html = shopper.page(&t, "").await;
    assert!(html.contains("id=\"code-form\"") && !html.contains("id=\"remove-code\""), "{html}");

    // Under the minimum the code stays on, and the page says what the order needs.
    let html = shopper.apply(&t, " spring ").await;
    let note = html.split("id=\"code-note\">").nth(1).unwrap().split("</p>").next().unwrap();
    assert_eq!(note, "The code SPRING takes nothing off yet: it needs an order of at least 20.00 CNY.", "{html}");
    assert!(html.contains("id=\"remove-code\"") && !html.contains("id=\"discount\""), "{html}");
    // Past it, the discount and what is left to pay, as money.
    let (status, _) = t.put_line(&shopper.token, &shopper.basket, "TEA", 3).await;
    assert_eq!(status, StatusCode::OK);
    let html = shopper.page(&t, "").await;
    assert!(html.contains("Discount (SPRING): <strong id=\"discount\">−5.50 CNY</strong>"), "{html}");
    assert!(html.contains("<strong id=\"to-pay\">24.50 CNY</strong>") && html.contains(">30.00 CNY</strong>"));
    assert!(!html.contains("id=\"code-note\""), "{html}");
    // Off, and on again.
    let (status, location) = shopper.post(&t, "/promotion/remove", &[]).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/shop/basket/{}", shopper.basket)));
    assert!(!shopper.page(&t, "").await.contains("id=\"discount\""));
    assert!(shopper.apply(&t, "SPRING").await.contains("id=\"discount\""));

    // Confirmed from the page: the order keeps the code; the hand-off and return pages show it.
    let page = shopper.page(&t, "").await;
    let key = form_value(&page, "idempotency_key");
    let url = t.url(&format!("/shop/basket/{}/confirm", shopper.basket));
    let form = [("csrf", shopper.csrf.as_str()), ("idempotency_key", key.as_str())];
    let r = shopper.http.post(url).header("cookie", &shopper.cookie).form(&form).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let handoff = r.text().await.unwrap();
    assert!(handoff.contains("Discount (SPRING)</td><td class=\"money\">−5.50 CNY"), "{handoff}");
    let attempt_ref = form_value(&handoff, "attempt_ref");
    let order_no: String = kassa::store::sql::query_scalar("SELECT order_no FROM orders")
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    let order = t.order(&order_no).await;
    assert_eq!((order["total_minor"].clone(), order["discount_minor"].clone()), (json!(2450), json!(550)));
    let ret = t.url(&format!("/checkout/return/{attempt_ref}"));
    let html = shopper.http.get(&ret).header("cookie", &shopper.cookie).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("<tr id=\"discount\">") && html.contains("−5.50 CNY") && html.contains("24.50 CNY"));
    let zh = format!("{ret}?lang=zh");
    let html = shopper.http.get(&zh).header("cookie", &shopper.cookie).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("优惠（SPRING）"), "{html}");

    // The console: the order's promotion and each line's share; the promotion's use.
    let console = Console::new(&t).await;
    let html = console.page(&t, &format!("/admin/orders/{order_no}")).await;
    assert!(html.contains("Promotion SPRING: 5.50 CNY off"), "{html}");
    let lines = html.split("id=\"order-lines\"").nth(1).unwrap().split("</table>").next().unwrap();
    assert!(lines.contains("<th>Discount</th>") && lines.contains("<td>−5.50 CNY</td>"), "{lines}");
    let html = console.page(&t, &format!("/admin/promotions/{}", s(&p["id"]))).await;
    let uses = html.split("id=\"uses-list\"").nth(1).unwrap().split("</table>").next().unwrap();
    assert!(uses.contains(&format!("<a href=\"/admin/orders/{order_no}\">")) && uses.contains("pill reserved"));
    assert!(uses.contains("5.50 CNY"), "{uses}");
    assert!(html.contains("<b id=\"reserved\">1</b>"), "{html}");
    // Paid: the use is kept and counted as given away.
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let html = console.page(&t, "/admin/promotions").await;
    assert!(html.contains("<td>1 / ∞</td><td>0</td><td>5.50 CNY</td>"), "{html}");
    // The basket is checked out: the order has the discount, the basket no code form any more.
    let html = shopper.page(&t, "").await;
    assert!(!html.contains("id=\"code-form\"") && !html.contains("id=\"discount\""), "{html}");
    t.assert_clean().await;
}

on_both!(a_refused_code_is_said_on_the_basket_page, refused_codes);
async fn refused_codes(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 50).await;
    for body in [
        json!({"name": "Gone", "code": "GONE", "percent_off": 10}),
        json!({"name": "Once", "code": "ONCE", "percent_off": 10, "max_uses": 1}),
    ] {
        let (status, p) = t.admin_post("/api/v1/admin/promotions", body).await;
        assert_eq!(status, StatusCode::CREATED, "{p}");
        if p["code"] == "GONE" {
            t.admin_post(&format!("/api/v1/admin/promotions/{}/end", s(&p["id"])), json!({})).await;
        }
    }
    // ONCE's one use goes to another buyer's order.
    let other = t.buyer().await;
    let other_basket = t.basket(&other, &[("TEA", 1)]).await;
    let (status, body) =
        t.checkout_with(&other, &other_basket, &json!({"gateway": "sandbox", "promotion_code": "ONCE"})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let shopper = Shopper::new(&t, &[("TEA", 1)]).await;
    for (code, refusal, says) in [
        ("NOSUCH", "promotion_unknown", "there is no such promotion code. Check what you typed."),
        ("x", "promotion_unknown", "there is no such promotion code."),
        ("gone", "promotion_expired", "this promotion has ended."),
        ("ONCE", "promotion_used_up", "this promotion code has been used up."),
    ] {
        let (status, location) = shopper.post(&t, "/promotion", &[("code", code)]).await;
        assert_eq!(status, StatusCode::SEE_OTHER, "{code}");
        assert_eq!(location, format!("/shop/basket/{}?code_refused={refusal}", shopper.basket));
        let r = shopper.http.get(t.url(&location)).header("cookie", &shopper.cookie).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
        let html = r.text().await.unwrap();
        let said = html.split("id=\"code-refused\">").nth(1).unwrap().split("</p>").next().unwrap();
        assert!(said.starts_with("That code cannot be used: ") && said.contains(says), "{code}: {said}");
        assert!(html.contains("id=\"code-form\"") && !html.contains("id=\"discount\""), "{html}");
    }
    // Nothing was put on the basket.
    let (_, basket) = t.get_basket(&shopper.token, &shopper.basket).await;
    assert!(basket.get("promotion").is_none(), "{basket}");
    // In Chinese too.
    let html = shopper.page(&t, "?code_refused=promotion_expired&lang=zh").await;
    assert!(html.contains("该优惠码无法使用：该活动已结束。"), "{html}");
    // A parameter that names no refusal says nothing; an empty field changes nothing.
    assert!(!shopper.page(&t, "?code_refused=%3Cscript%3E").await.contains("id=\"code-refused\""));
    let (status, location) = shopper.post(&t, "/promotion", &[("code", "  ")]).await;
    assert_eq!((status, location), (StatusCode::SEE_OTHER, format!("/shop/basket/{}", shopper.basket)));
    // The form without its CSRF token is refused with the buyer's error page.
    let url = t.url(&format!("/shop/basket/{}/promotion", shopper.basket));
    let r = shopper.http.post(url).header("cookie", &shopper.cookie).form(&[("code", "ONCE")]).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().await.unwrap().contains("This form has expired."));
    t.assert_clean().await;
}

on_both!(the_promotion_pages_speak_chinese, promotion_languages);
async fn promotion_languages(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 1_000, 50).await;
    let (status, p) =
        t.admin_post("/api/v1/admin/promotions", json!({"name": "春季", "code": "CHUN", "percent_off": 20})).await;
    assert_eq!(status, StatusCode::CREATED, "{p}");
    let console = Console::new(&t).await;
    let html = console.page(&t, "/admin/promotions?lang=zh").await;
    for want in
        ["<html lang=\"zh-CN\"", ">促销</a>", "<h1>促销</h1>", "新建促销", "减免金额", "仅限首单", ">创建促销</button>"]
    {
        assert!(html.contains(want), "{want}: {html}");
    }
    assert!(html.contains("<td>20%</td>"), "{html}");
    let html = console.page(&t, &format!("/admin/promotions/{}?lang=zh", s(&p["id"]))).await;
    for want in ["<h1>春季 ", ">暂停</button>", ">永久结束</button>", ">生成批量码</button>", "尚无使用记录。"]
    {
        assert!(html.contains(want), "{want}: {html}");
    }
    let html = console.page(&t, &format!("/admin/promotions/{}?lang=en", s(&p["id"]))).await;
    for want in ["<h1>春季 ", ">Pause</button>", ">End for good</button>", ">Generate batch</button>", "No uses yet."]
    {
        assert!(html.contains(want), "{want}: {html}");
    }
    let shopper = Shopper::new(&t, &[("TEA", 2)]).await;
    shopper.apply(&t, "chun").await;
    let html = shopper.page(&t, "?lang=zh").await;
    for want in [
        "优惠码",
        "优惠（CHUN）: <strong id=\"discount\">−4.00 CNY</strong>",
        "应付",
        "16.00 CNY",
        ">移除优惠码</button>",
    ] {
        assert!(html.contains(want), "{want}: {html}");
    }
    let html = shopper.page(&t, "?lang=en").await;
    for want in ["Promotion code", "Discount (CHUN)", "To pay", ">Remove the code</button>"] {
        assert!(html.contains(want), "{want}: {html}");
    }
}

//! The buyer pages in Chinese and English, and the error pages a buyer can reach: each in the
//! buyer's language, with its next step, never JSON.

use kassa::store::sql;
use reqwest::StatusCode;

use crate::common::{Backend, Opts, TestApp, csrf_token};
use crate::on_both;

const ZH: &str = "zh-CN,zh;q=0.9,en;q=0.8";

/// A browser without redirects followed, its session cookie and CSRF token from the storefront.
async fn visit(t: &TestApp, accept_language: &str) -> (reqwest::Client, String, String) {
    let browser = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let r = browser.get(t.url("/")).header("accept-language", accept_language).send().await.unwrap();
    let cookie = r.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    let page = r.text().await.unwrap();
    let csrf = csrf_token(&page);
    (browser, cookie, csrf)
}

/// A page request as a browser sends it: HTML wanted, the buyer's languages and cookie.
fn page(browser: &reqwest::Client, url: String, cookie: &str) -> reqwest::RequestBuilder {
    browser
        .get(url)
        .header("accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
        .header("accept-language", ZH)
        .header("cookie", cookie)
}

fn next_step(html: &str) -> String {
    let link = html.split("id=\"next-step\"").next().unwrap().rsplit("<a href=\"").next().unwrap();
    link.split('"').next().unwrap().replace("&#38;", "&").replace("&amp;", "&")
}

fn is_html(r: &reqwest::Response) -> bool {
    r.headers()["content-type"].to_str().unwrap().starts_with("text/html")
}

on_both!(buyer_pages_speak_the_buyers_language, languages);
async fn languages(backend: Backend) {
    let beijing = time::UtcOffset::from_hms(8, 0, 0).unwrap();
    let t = TestApp::spawn_with(backend, Opts { demo: true, time_zone: beijing, ..Default::default() }).await;
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    // Accept-Language chooses; English when it names neither language.
    let shop = |lang: Option<&str>, cookie: Option<&str>, query: &str| {
        let (http, url) = (http.clone(), t.url(&format!("/{query}")));
        let (lang, cookie) = (lang.map(str::to_string), cookie.map(str::to_string));
        async move {
            let mut req = http.get(url);
            if let Some(l) = lang {
                req = req.header("accept-language", l);
            }
            if let Some(c) = cookie {
                req = req.header("cookie", c);
            }
            req.send().await.unwrap()
        }
    };
    let zh = shop(Some(ZH), None, "").await.text().await.unwrap();
    assert!(zh.contains("<html lang=\"zh-CN\"") && zh.contains("kassa 演示商店") && zh.contains("查看购物车"), "{zh}");
    assert!(zh.contains("href=\"/?lang=en\"") && zh.contains(">English</a>"), "the switch: {zh}");
    let en = shop(Some("fr-FR,fr;q=0.9"), None, "").await.text().await.unwrap();
    assert!(
        en.contains("<html lang=\"en\"") && en.contains("Review basket") && en.contains("href=\"/?lang=zh\""),
        "{en}"
    );
    // The switch is kept: ?lang= sets the cookie, and the cookie beats the header.
    let r = shop(Some(ZH), None, "?lang=en").await;
    let kept = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|c| c.starts_with("kassa_lang="))
        .unwrap();
    assert!(kept.starts_with("kassa_lang=en;") && kept.contains("SameSite=Lax") && kept.contains("Max-Age="), "{kept}");
    assert!(r.text().await.unwrap().contains("Review basket"));
    let en = shop(Some(ZH), Some("kassa_lang=en"), "").await.text().await.unwrap();
    assert!(en.contains("Review basket"), "{en}");

    // An order's pages in Chinese: its lines, the amount as money, times in the shop's zone,
    // statuses in words (and the words the script needs).
    t.create_sku("MUG", "青瓷杯", 8900, 5).await;
    let (buyer, order_no, attempt_ref) = t.pending_order(&[("MUG", 2)]).await;
    let cookie = format!("kassa_session={buyer}");
    let html =
        page(&http, t.url(&format!("/h5/orders/{order_no}")), &cookie).send().await.unwrap().text().await.unwrap();
    for want in ["青瓷杯", "178.00 CNY", "待付款", "下单时间", "请在", "(UTC+08:00)", "返回商店", "正在更新…"]
    {
        assert!(html.contains(want), "{want}: {html}");
    }
    assert!(html.contains("&#34;status.refunded&#34;:&#34;已退款&#34;"), "the script's words: {html}");
    assert!(html.contains(&format!("href=\"/h5/orders/{order_no}?lang=en\"")), "{html}");
    let created: String = t.order(&order_no).await["created_at"].as_str().unwrap().to_string();
    let at = time::OffsetDateTime::parse(&created, &time::format_description::well_known::Rfc3339)
        .unwrap()
        .to_offset(beijing);
    let shown = format!("{}年{}月{}日 {:02}:{:02}", at.year(), u8::from(at.month()), at.day(), at.hour(), at.minute());
    assert!(html.contains(&shown), "{shown}: {html}");
    let back = page(&http, t.url(&format!("/checkout/return/{attempt_ref}")), &cookie).send().await.unwrap();
    let html = back.text().await.unwrap();
    assert!(html.contains("正在确认您的付款…") && html.contains("青瓷杯") && html.contains("178.00 CNY"), "{html}");
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let html = page(&http, t.url(&format!("/checkout/return/{attempt_ref}")), &cookie).send().await.unwrap();
    let html = html.text().await.unwrap();
    assert!(html.contains("data-status=\"paid\"") && html.contains(">已付款</span>"), "{html}");
    let html = http
        .get(t.url(&format!("/checkout/return/{attempt_ref}")))
        .header("accept-language", "en")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        html.contains("data-status=\"paid\"") && html.contains(">paid</span>") && html.contains("(UTC+08:00)"),
        "{html}"
    );
    t.assert_clean().await;
}

on_both!(every_buyer_error_is_a_page_with_a_next_step, error_pages);
async fn error_pages(backend: Backend) {
    let t =
        TestApp::spawn_with(backend, Opts { demo: true, manual_clock: true, hold_seconds: 60, ..Default::default() })
            .await;
    t.create_sku("MUG", "Mug", 100, 1).await;
    t.create_sku("TEA", "Tea", 500, 5).await;
    let (browser, cookie, csrf) = visit(&t, ZH).await;
    let post = |path: String, form: Vec<(&'static str, String)>| {
        let (browser, cookie, url) = (browser.clone(), cookie.clone(), t.url(&path));
        async move {
            browser
                .post(url)
                .header("accept", "text/html,*/*;q=0.8")
                .header("accept-language", ZH)
                .header("cookie", cookie)
                .form(&form)
                .send()
                .await
                .unwrap()
        }
    };
    let basket = |sku: &'static str| {
        let (post, csrf) = (&post, csrf.clone());
        async move {
            let r = post("/shop/basket".to_string(), vec![(sku, "1".to_string()), ("csrf", csrf)]).await;
            assert_eq!(r.status(), StatusCode::SEE_OTHER);
            r.headers()["location"].to_str().unwrap().to_string()
        }
    };

    // An unknown order: a page in Chinese that leads back to the shop.
    let r = page(&browser, t.url("/h5/orders/KS000000000NOSUCHORDER0"), &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(is_html(&r));
    let html = r.text().await.unwrap();
    assert!(html.contains("找不到此页面、订单或付款") && next_step(&html) == "/", "{html}");
    assert!(html.contains("href=\"/?lang=en\""), "an error page offers the other language: {html}");
    // An unknown address: a page for a browser, JSON for everyone else, and the API stays JSON.
    let r = page(&browser, t.url("/no/such/page"), &cookie).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(is_html(&r) && next_step(&r.text().await.unwrap()) == "/");
    let r = browser.get(t.url("/no/such/page")).send().await.unwrap();
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let r = page(&browser, t.url("/api/v1/orders/KS000000000NOSUCHORDER0"), &cookie).send().await.unwrap();
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("application/json"));

    // Sold out: two baskets of the one mug; the second confirm finds it gone.
    let first = basket("qty_MUG").await;
    let second = basket("qty_MUG").await;
    let r = post(format!("{first}/confirm"), vec![("csrf", csrf.clone())]).await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = post(format!("{second}/confirm"), vec![("csrf", csrf.clone())]).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(is_html(&r));
    let html = r.text().await.unwrap();
    assert!(html.contains("库存不足") && html.contains(">重新选购</a>") && next_step(&html) == "/", "{html}");

    // A price that changed: the next step is the basket, which shows today's total.
    let tea = basket("qty_TEA").await;
    t.set_price("TEA", 650).await;
    let r = post(format!("{tea}/confirm"), vec![("csrf", csrf.clone())]).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let html = r.text().await.unwrap();
    assert!(html.contains("价格有变动") && next_step(&html) == tea, "{html}");
    let review = page(&browser, t.url(&tea), &cookie).send().await.unwrap().text().await.unwrap();
    assert!(review.contains("<strong id=\"total\">6.50 CNY</strong>"), "{review}");

    // An expired payment: trying again offers to shop again, and nothing was charged.
    let order_no: String =
        sql::query_scalar("SELECT order_no FROM orders").fetch_one(t.app.state.db.read_pool()).await.unwrap();
    t.clock.as_ref().unwrap().advance_ms(60_000);
    t.app.sweeper.step().await.unwrap();
    let r = post(format!("/checkout/retry/{order_no}"), vec![("csrf", csrf.clone())]).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let html = r.text().await.unwrap();
    assert!(html.contains("付款时间已过") && html.contains("未产生扣款") && next_step(&html) == "/", "{html}");

    // A form that does not read and one without its token: pages too, in English when asked.
    let r = post("/shop/basket".to_string(), vec![("qty_TEA", "many".to_string()), ("csrf", csrf.clone())]).await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.text().await.unwrap().contains("数量必须是整数"));
    let r = browser
        .post(t.url("/shop/basket"))
        .header("accept", "text/html")
        .header("cookie", format!("{cookie}; kassa_lang=en"))
        .form(&[("qty_TEA", "1")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let html = r.text().await.unwrap();
    assert!(html.contains("This form has expired") && html.contains(">Start again</a>"), "{html}");
    t.assert_clean().await;
}

/// The `kassa_lang` cookie a response sets, as the next request sends it back.
fn lang_cookie(r: &reqwest::Response) -> String {
    r.headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().split(';').next().unwrap().to_string())
        .find(|c| c.starts_with("kassa_lang="))
        .unwrap()
}

on_both!(the_console_speaks_chinese_and_english, console_languages);
async fn console_languages(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "青瓷杯", 8900, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;

    // The sign-in page in the language asked for, with the switch to the other.
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let html = http.get(t.url("/admin/login?lang=zh")).send().await.unwrap().text().await.unwrap();
    assert!(
        html.contains("<html lang=\"zh-CN\"") && html.contains("管理员令牌") && html.contains(">登录</button>"),
        "{html}"
    );
    assert!(html.contains("href=\"?lang=en\"") && html.contains(">English</a>"), "the switch: {html}");
    let r = http.post(t.url("/admin/login")).header("cookie", "kassa_lang=zh").form(&[("token", "nope")]).send().await;
    let html = r.unwrap().text().await.unwrap();
    assert!(html.contains("令牌无效。"), "{html}");

    let (browser, session, csrf) = crate::pages::console(&t).await;
    let get = |path: String, cookies: String| {
        let (browser, url) = (browser.clone(), t.url(&path));
        async move { browser.get(url).header("cookie", cookies).send().await.unwrap() }
    };
    // ?lang=zh: Chinese headings, the switch back to English, statuses kept as their codes; the
    // choice is kept in the cookie.
    let r = get("/admin/orders?lang=zh".to_string(), session.clone()).await;
    let kept = lang_cookie(&r);
    assert_eq!(kept, "kassa_lang=zh");
    let html = r.text().await.unwrap();
    for want in
        ["<html lang=\"zh-CN\"", "<h1>订单</h1>", "<th>商户参考号</th>", "下载订单（CSV）", ">退出登录</button>"]
    {
        assert!(html.contains(want), "{want}: {html}");
    }
    assert!(html.contains("<span class=\"pill paid\">paid</span>") && html.contains(&order_no), "{html}");
    assert!(html.contains("href=\"?lang=en\"") && html.contains(">English</a>"), "the switch: {html}");
    let zh = format!("{session}; {kept}");
    let html = get(format!("/admin/orders/{order_no}"), zh.clone()).await.text().await.unwrap();
    for want in [format!("<h1>订单 {order_no} "), "<h2>支付记录</h2>".into(), ">标记为已交付</button>".into()]
    {
        assert!(html.contains(&want), "the kept choice: {want}: {html}");
    }
    // What an action says, and its error page, in the kept language.
    let action = t.url(&format!("/admin/orders/{order_no}/action"));
    let post = |form: Vec<(&'static str, String)>| {
        let (browser, action, zh) = (browser.clone(), action.clone(), zh.clone());
        async move { browser.post(action).header("cookie", zh).form(&form).send().await.unwrap() }
    };
    let r = post(vec![("action", "deliver".into()), ("csrf", "stale".into())]).await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let html = r.text().await.unwrap();
    assert!(html.contains("<h1>抱歉</h1>") && next_step(&html) == format!("/admin/orders/{order_no}"), "{html}");
    let r = post(vec![("action", "deliver".into()), ("csrf", csrf.clone())]).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let done = r.headers()["location"].to_str().unwrap().to_string();
    let html = get(done, zh.clone()).await.text().await.unwrap();
    assert!(html.contains("已标记为已交付。"), "{html}");

    // ?lang=en: the English console again, and the cookie says so.
    let r = get(format!("/admin/orders/{order_no}?lang=en"), zh.clone()).await;
    assert_eq!(lang_cookie(&r), "kassa_lang=en");
    let html = r.text().await.unwrap();
    for want in [format!("<h1>Order {order_no} "), "<h2>Payment attempts</h2>".into(), ">中文</a>".into()] {
        assert!(html.contains(&want), "{want}: {html}");
    }
    let html = get("/admin/orders".to_string(), format!("{session}; kassa_lang=en")).await.text().await.unwrap();
    assert!(html.contains("<html lang=\"en\"") && html.contains("<h1>Orders</h1>"), "{html}");
    assert!(html.contains("Download orders (CSV)") && html.contains("href=\"?lang=zh\""), "{html}");
    t.assert_clean().await;
}

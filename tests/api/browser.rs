//! Browser tests: Debian's Chromium, headless, driven through chromedriver with fantoccini. Each
//! test saves screenshots under `test-artifacts/screenshots/`. Built as ignored (and counted so)
//! where chromium and chromium-driver were not installed; under `CI=true` they must run.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::common::{ADMIN, Backend, Opts, TestApp};
use kassa::domain::decide::LatePolicy;
use kassa::http::i18n::Lang;

struct Driver {
    child: Child,
    port: u16,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Under `CI=true` the browser tests must have been built to run (not ignored).
#[test]
fn browser_tests_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !cfg!(kassa_test_browser) {
        panic!("CI=true but chromium and chromium-driver were not installed when the tests were built");
    }
}

/// chromedriver on a port of its own (the tests that call this run only where it is installed).
fn chromedriver() -> Driver {
    let path = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_string());
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child =
        Command::new(path).arg(format!("--port={port}")).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    // Owned by the guard from here on, so it is killed and reaped whatever happens.
    let driver = Driver { child, port };
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return driver;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("chromedriver did not start");
}

/// Chromium's options: headless on loopback only, a profile of its own.
fn chrome_options(profile: &std::path::Path) -> serde_json::Value {
    json!({
        "binary": std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string()),
        "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1100,900",
                 format!("--user-data-dir={}", profile.display())],
    })
}

/// A Chromium session with `chrome` as its options.
async fn session(driver: &Driver, chrome: serde_json::Value) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".to_string(), chrome);
    // chromedriver speaks plain HTTP on loopback: no TLS stack needed.
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("start a Chromium session")
}

async fn browser(driver: &Driver, javascript: bool, profile: &std::path::Path) -> Client {
    let mut chrome = chrome_options(profile);
    if !javascript {
        chrome["prefs"] = json!({"profile.managed_default_content_settings.javascript": 2});
    }
    session(driver, chrome).await
}

/// A browser whose viewport is a phone's (`width` × `height` CSS pixels, as Chromium's device
/// emulation sets it) or a desktop's.
async fn browser_sized(driver: &Driver, profile: &std::path::Path, width: u32, height: u32) -> Client {
    let mut chrome = chrome_options(profile);
    chrome["mobileEmulation"] =
        json!({"deviceMetrics": {"width": width, "height": height, "pixelRatio": 2, "touch": width < 600}});
    session(driver, chrome).await
}

/// Whether the page is wider than the viewport (the buyer would scroll sideways).
async fn overflows(c: &Client) -> bool {
    let wide = c.execute("return document.documentElement.scrollWidth > window.innerWidth;", vec![]).await.unwrap();
    wide.as_bool().unwrap()
}

/// The screenshots the README shows: the name a test saves one under, and its file in
/// `docs/screenshots/`.
const README_SHOTS: &[(&str, &str)] = &[
    ("en-1280-storefront", "storefront"),
    ("admin-order-accepted", "admin-order"),
    ("zh-360-basket", "buyer-zh-360-basket"),
    ("zh-360-qr", "buyer-zh-360-qr"),
    ("en-360-return", "buyer-en-360-return"),
    ("zh-360-order", "buyer-zh-360-order"),
    ("en-360-error-payment-expired", "buyer-en-360-error-payment-expired"),
    ("zh-360-error-price-changed", "buyer-zh-360-error-price-changed"),
];

/// The page's layout as text: every visible element that has an id or text of its own, or is a
/// control, image or table, one per line, with its text; what differs from run to run (numbers,
/// order numbers, ids) is masked, so two runs over the same pages give the same outline.
const OUTLINE: &str = r#"
const mask = t => t.replace(/\s+/g, ' ').trim()
  .replace(/\d{4}-\d\d-\d\d[T ][\d:.]+(Z|[+-]\d\d:?\d\d)?/g, '<time>')
  .replace(/[A-Za-z0-9_-]{20,}/g, '<id>')
  .replace(/[0-9]+/g, '9')
  .slice(0, 80);
const lines = [];
for (const el of document.body.querySelectorAll('*')) {
  if (el.getClientRects().length === 0 || getComputedStyle(el).visibility === 'hidden') continue;
  if (['SCRIPT', 'STYLE', 'NOSCRIPT'].includes(el.tagName)) continue;
  const own = mask(Array.from(el.childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join(' '));
  const control = ['INPUT', 'SELECT', 'TEXTAREA', 'BUTTON', 'IMG', 'TABLE', 'svg'].includes(el.tagName);
  if (!el.id && !own && !control) continue;
  const type = el.tagName === 'INPUT' ? `[${el.type}]` : '';
  lines.push(`${el.tagName.toLowerCase()}${type}${el.id ? '#' + mask(el.id) : ''}${own ? ' ' + own : ''}`);
}
return lines.join('\n') + '\n';
"#;

/// Saves the page as `test-artifacts/screenshots/NAME.png`, with its outline beside it. For a
/// screenshot the README shows, the outline must match the committed one, so a README picture
/// never shows a page that no longer exists; `KASSA_RENEW_SCREENSHOTS=1` (scripts/screenshots.sh)
/// renews both instead.
async fn screenshot(c: &Client, name: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("test-artifacts/screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let png = c.screenshot().await.unwrap();
    std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    let outline = c.execute(OUTLINE, vec![]).await.unwrap().as_str().unwrap().to_string();
    std::fs::write(dir.join(format!("{name}.layout.txt")), &outline).unwrap();
    let Some((_, doc)) = README_SHOTS.iter().find(|(shot, _)| *shot == name) else { return };
    let docs = root.join("docs/screenshots");
    if std::env::var("KASSA_RENEW_SCREENSHOTS").is_ok_and(|v| v == "1") {
        std::fs::write(docs.join(format!("{doc}.png")), &png).unwrap();
        std::fs::write(docs.join(format!("{doc}.layout.txt")), &outline).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(docs.join(format!("{doc}.layout.txt"))).unwrap_or_default();
    if committed != outline {
        let first = committed.lines().zip(outline.lines()).position(|(a, b)| a != b);
        let at = first.unwrap_or_else(|| committed.lines().count().min(outline.lines().count()));
        panic!(
            "docs/screenshots/{doc}.png no longer shows the page (outline line {}: committed {:?}, now {:?}); \
             renew it with scripts/screenshots.sh",
            at + 1,
            committed.lines().nth(at),
            outline.lines().nth(at)
        );
    }
}

/// Waits (bounded) until the element's `data-status` is `want`, reloading when asked (no JS).
async fn wait_status(c: &Client, want: &str, reload: bool) -> String {
    let mut last = String::new();
    for _ in 0..100 {
        if let Ok(el) = c.find(Locator::Id("status")).await {
            last = el.attr("data-status").await.unwrap().unwrap_or_default();
            if last == want {
                return last;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        if reload {
            c.refresh().await.unwrap();
        }
    }
    last
}

async fn buy_lamps(t: &TestApp, c: &Client) {
    c.goto(&t.url("/")).await.unwrap();
    let qty = c.find(Locator::Css("input[name='qty_LAMP-FLASH-SALE']")).await.unwrap();
    qty.clear().await.unwrap();
    qty.send_keys("2").await.unwrap();
}

/// Two lamps in the basket, on its review page: its confirm button.
async fn review_lamps(t: &TestApp, c: &Client) -> fantoccini::elements::Element {
    buy_lamps(t, c).await;
    c.find(Locator::Id("review")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Id("confirm")).await.unwrap()
}

async fn purchase(javascript: bool) {
    let driver = chromedriver();
    let t = TestApp::spawn_with(Backend::Sqlite, Opts { demo: true, ..Default::default() }).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, javascript, profile.path()).await;
    let tag = if javascript { "js" } else { "nojs" };
    buy_lamps(&t, &c).await;
    screenshot(&c, &format!("{tag}-1-storefront")).await;
    c.find(Locator::Id("review")).await.unwrap().click().await.unwrap();
    // Wait for the navigation the click started (the basket page) before reading it.
    let total = c.wait().for_element(Locator::Id("total")).await.unwrap().text().await.unwrap();
    assert_eq!(total, "19.80 CNY");
    screenshot(&c, &format!("{tag}-2-basket")).await;
    c.wait().for_element(Locator::Id("confirm")).await.unwrap().click().await.unwrap();
    if !javascript {
        // No script: the hand-off page shows its <noscript> button.
        let button = c.wait().for_element(Locator::Css("form#handoff button[type='submit']")).await.unwrap();
        screenshot(&c, "nojs-3-handoff").await;
        button.click().await.unwrap();
    }
    let pay = arrive(&c, "pay").await;
    screenshot(&c, &format!("{tag}-4-sandbox")).await;
    pay.click().await.unwrap();
    c.wait().for_element(Locator::Id("status")).await.unwrap();
    assert!(c.current_url().await.unwrap().path().starts_with("/checkout/return/"));
    let status = wait_status(&c, "paid", !javascript).await;
    screenshot(&c, &format!("{tag}-5-return")).await;
    assert_eq!(status, "paid");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders WHERE status = 'paid'").await, 1);
    c.close().await.unwrap();
    t.assert_clean().await;
}

#[cfg_attr(
    not(kassa_test_browser),
    ignore = "browser: chromium and chromium-driver were not installed when the tests were built (apt-get install chromium chromium-driver)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purchase_with_javascript() {
    purchase(true).await;
}

#[cfg_attr(
    not(kassa_test_browser),
    ignore = "browser: chromium and chromium-driver were not installed when the tests were built (apt-get install chromium chromium-driver)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn purchase_without_javascript() {
    purchase(false).await;
}

#[cfg_attr(
    not(kassa_test_browser),
    ignore = "browser: chromium and chromium-driver were not installed when the tests were built (apt-get install chromium chromium-driver)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn double_click_on_confirm_gives_one_order() {
    let driver = chromedriver();
    let t = TestApp::spawn_with(Backend::Sqlite, Opts { demo: true, ..Default::default() }).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, true, profile.path()).await;
    review_lamps(&t, &c).await;
    // Two clicks as fast as a user's double click: two submits of the same form.
    c.execute("var b = document.getElementById('confirm'); b.click(); b.click(); return true;", vec![]).await.unwrap();
    arrive(&c, "pay").await;
    screenshot(&c, "double-click-sandbox").await;
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, 1);
    assert_eq!(t.sku("LAMP-FLASH-SALE").await["reserved"], 2);
    c.close().await.unwrap();
}

#[cfg_attr(
    not(kassa_test_browser),
    ignore = "browser: chromium and chromium-driver were not installed when the tests were built (apt-get install chromium chromium-driver)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_signs_in_and_resolves_a_late_payment() {
    let driver = chromedriver();
    let opts =
        Opts { demo: true, hold_seconds: 0, ignore_close: true, late_policy: LatePolicy::Manual, ..Default::default() };
    let t = TestApp::spawn_with(Backend::Sqlite, opts).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG-CELADON", 1)]).await;
    t.app.sweeper.step().await.unwrap();
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    assert_eq!(t.status(&order_no).await, "paid_after_expiry");

    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, true, profile.path()).await;
    c.goto(&t.url("/admin")).await.unwrap();
    assert!(c.current_url().await.unwrap().path().ends_with("/admin/login"), "signed-out visitors are sent to sign in");
    c.find(Locator::Id("token")).await.unwrap().send_keys("wrong").await.unwrap();
    c.find(Locator::Id("sign-in")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Id("error")).await.unwrap();
    c.find(Locator::Id("token")).await.unwrap().send_keys(ADMIN).await.unwrap();
    c.find(Locator::Id("sign-in")).await.unwrap().click().await.unwrap();
    let alerts = c.wait().for_element(Locator::Id("open-alerts")).await.unwrap();
    assert_ne!(alerts.text().await.unwrap(), "0", "the late payment is alerted");
    screenshot(&c, "admin-dashboard").await;
    c.goto(&t.url("/admin/orders?status=paid_after_expiry")).await.unwrap();
    c.find(Locator::LinkText(&order_no)).await.unwrap().click().await.unwrap();
    let status = c.wait().for_element(Locator::Id("order-status")).await.unwrap();
    assert_eq!(status.text().await.unwrap(), "paid_after_expiry");
    screenshot(&c, "admin-order-late-payment").await;
    c.find(Locator::Id("accept")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Id("message")).await.unwrap();
    let status = c.find(Locator::Id("order-status")).await.unwrap().text().await.unwrap();
    screenshot(&c, "admin-order-accepted").await;
    assert_eq!(status, "paid");
    assert_eq!(t.status(&order_no).await, "paid");
    console_downloads(&t, &c, &order_no).await;
    c.close().await.unwrap();
    t.assert_clean().await;
}

/// Fetches `url` from the signed-in page as the browser would download it: its status, content
/// type and text (a byte-order mark shown as `\u{feff}`).
async fn download(c: &Client, url: &str) -> (u64, String, String) {
    let script = "return fetch(arguments[0], {credentials: 'same-origin'}).then(r => r.arrayBuffer().then(b => \
                  [r.status, r.headers.get('content-type'), new TextDecoder('utf-8', {ignoreBOM: true}).decode(b)]));";
    let got = c.execute(script, vec![json!(url)]).await.unwrap();
    (got[0].as_u64().unwrap(), got[1].as_str().unwrap_or_default().to_string(), got[2].as_str().unwrap().to_string())
}

/// The URL a GET form submits, as the browser builds it from the form's fields.
async fn form_url(c: &Client, form_id: &str) -> String {
    let script = "const f = document.getElementById(arguments[0]); \
                  return f.action + '?' + new URLSearchParams(new FormData(f)).toString();";
    c.execute(script, vec![json!(form_id)]).await.unwrap().as_str().unwrap().to_string()
}

/// Every download the console offers works with the console's own sign-in: the orders and refunds
/// exports (plain and for Excel) and a statement day's report.
async fn console_downloads(t: &TestApp, c: &Client, order_no: &str) {
    c.goto(&t.url("/admin/orders")).await.unwrap();
    let (status, kind, text) = download(c, &form_url(c, "export-orders").await).await;
    assert_eq!((status, kind.as_str()), (200, "text/csv; charset=utf-8"));
    assert!(text.starts_with("order_no,") && text.contains(order_no), "{text}");
    c.find(Locator::Css("#export-refunds input[name=bom]")).await.unwrap().click().await.unwrap();
    let (status, _, text) = download(c, &form_url(c, "export-refunds").await).await;
    assert_eq!(status, 200);
    assert!(text.starts_with("\u{feff}refund_no,"), "for Excel: a byte-order mark first: {text}");
    screenshot(c, "admin-orders").await;
    let today = kassa::workers::statements::format_day(time::OffsetDateTime::now_utc().date());
    let (status, body) = t.admin_post(&format!("/api/v1/admin/statements/sandbox/{today}/run"), json!({})).await;
    assert!(status.is_success(), "{body}");
    c.goto(&t.url(&format!("/admin/statements/sandbox/{today}"))).await.unwrap();
    for (id, bom) in [("report", false), ("report-excel", true)] {
        let href = c.find(Locator::Id(id)).await.unwrap().prop("href").await.unwrap().unwrap();
        let (status, _, text) = download(c, &href).await;
        assert_eq!(status, 200, "{id}: {href}");
        assert_eq!(text.starts_with('\u{feff}'), bom, "{id}: {text}");
    }
}

/// A failed payment does not leave the buyer waiting: the return page says it failed and *Try
/// again* hands off a new attempt, which pays the order.
#[cfg_attr(
    not(kassa_test_browser),
    ignore = "browser: chromium and chromium-driver were not installed when the tests were built (apt-get install chromium chromium-driver)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_payment_then_try_again() {
    let driver = chromedriver();
    let t = TestApp::spawn_with(Backend::Sqlite, Opts { demo: true, ..Default::default() }).await;
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, true, profile.path()).await;
    review_lamps(&t, &c).await.click().await.unwrap();
    c.wait().for_element(Locator::Id("fail")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Id("status")).await.unwrap();
    let mut attempt = String::new();
    for _ in 0..100 {
        attempt = c.find(Locator::Id("status")).await.unwrap().attr("data-attempt").await.unwrap().unwrap_or_default();
        if attempt == "failed" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(attempt, "failed", "the page learns the payment failed");
    let text = c.find(Locator::Id("status")).await.unwrap().text().await.unwrap();
    assert_eq!(text, "payment failed");
    let again = c.find(Locator::Id("try-again")).await.unwrap();
    assert!(again.is_displayed().await.unwrap(), "Try again is shown");
    screenshot(&c, "return-payment-failed").await;
    again.click().await.unwrap();
    arrive(&c, "pay").await.click().await.unwrap();
    c.wait().for_element(Locator::Id("status")).await.unwrap();
    let status = wait_status(&c, "paid", false).await;
    screenshot(&c, "return-paid-after-retry").await;
    assert_eq!(status, "paid");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM payment_attempts").await, 2);
    c.close().await.unwrap();
    t.assert_clean().await;
}

/// The console's key import sends a long list in batches and shows its progress; the keys are
/// then the SKU's stock.
#[cfg_attr(
    not(kassa_test_browser),
    ignore = "browser: chromium and chromium-driver were not installed when the tests were built (apt-get install chromium chromium-driver)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn console_imports_keys_in_batches_with_progress() {
    let driver = chromedriver();
    let t = TestApp::spawn(Backend::Sqlite).await;
    let (status, _) = t
        .admin_post(
            "/api/v1/admin/skus",
            json!({"sku": "GAME", "name": "Game", "kind": "digital", "price_minor": 100, "currency": "CNY"}),
        )
        .await;
    assert!(status.is_success());
    let profile = tempfile::tempdir().unwrap();
    let c = browser(&driver, true, profile.path()).await;
    c.goto(&t.url("/admin/login")).await.unwrap();
    c.find(Locator::Id("token")).await.unwrap().send_keys(ADMIN).await.unwrap();
    c.find(Locator::Id("sign-in")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Id("open-alerts")).await.unwrap();
    c.goto(&t.url("/admin/skus")).await.unwrap();
    // 1,203 keys (three batches), one of them twice.
    let mut keys: Vec<String> = (0..1203).map(|i| format!("KEY-{i:05}")).collect();
    keys.push("KEY-00007".into());
    let area = c.find(Locator::Css("#sku-GAME textarea")).await.unwrap();
    // Set at once (typing 14,000 characters one by one is slow and tests nothing more).
    c.execute("arguments[0].value = arguments[1];", vec![serde_json::to_value(&area).unwrap(), json!(keys.join("\n"))])
        .await
        .unwrap();
    c.find(Locator::Css("#sku-GAME form.keys-import button")).await.unwrap().click().await.unwrap();
    // Batch by batch, then the page again with what was done and the figures as they are now.
    let message = c.wait().for_element(Locator::Id("message")).await.unwrap().text().await.unwrap();
    screenshot(&c, "admin-skus-keys-imported").await;
    assert_eq!(message, "1203 key(s) imported, 1 duplicate(s) skipped in 3 batches.");
    let row = c.find(Locator::Css("#sku-GAME")).await.unwrap().text().await.unwrap();
    assert!(row.contains("1203 unsold / 0 delivered keys"), "{row}");
    assert_eq!(t.sku("GAME").await["on_hand"], 1203);
    c.close().await.unwrap();
    t.assert_clean().await;
}

/// The element `id` of the page the browser is going to: found after any navigation under way
/// (a hand-off page submits itself, which aborts a lookup started meanwhile), bounded.
async fn arrive(c: &Client, id: &str) -> fantoccini::elements::Element {
    let mut last = None;
    for _ in 0..300 {
        match c.find(Locator::Id(id)).await {
            Ok(el) => return el,
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("#{id} never appeared: {last:?}");
}

/// Checks the page in view: in `lang`, no sideways scrolling at this size; saved as
/// `{lang}-{width}-{name}.png`.
async fn check_page(c: &Client, lang: Lang, width: u32, name: &str) {
    let tag = c.execute("return document.documentElement.lang;", vec![]).await.unwrap();
    assert_eq!(tag.as_str().unwrap(), lang.texts().tag(), "{name} at {width}px speaks {lang:?}");
    assert!(!overflows(c).await, "{name} ({lang:?}) scrolls sideways at {width}px");
    screenshot(c, &format!("{}-{width}-{name}", lang.code())).await;
}

/// The error page in view: its next step says `label` and leads to `href`.
async fn check_next_step(c: &Client, lang: Lang, label: &str, href: &str) {
    let next = c.find(Locator::Id("next-step")).await.unwrap();
    assert_eq!(next.text().await.unwrap(), lang.texts().t(label));
    assert_eq!(next.attr("href").await.unwrap().as_deref(), Some(href));
}

/// From the storefront: `quantity` of `sku` in a new basket, on its review page.
async fn review(t: &TestApp, c: &Client, sku: &str, quantity: u32) {
    c.goto(&t.url("/")).await.unwrap();
    let qty = c.find(Locator::Css(&format!("input[name='qty_{sku}']"))).await.unwrap();
    qty.clear().await.unwrap();
    qty.send_keys(&quantity.to_string()).await.unwrap();
    c.find(Locator::Id("review")).await.unwrap().click().await.unwrap();
    arrive(c, "confirm").await;
}

/// The buyer's pages in English and in Chinese fit a 360 px phone and a desktop: no sideways
/// scrolling on the storefront, the basket, the sandbox, the return page, the order page, the QR
/// code and every error page a buyer reaches (an unknown order, a changed price, an item sold out,
/// a payment whose time ran out), each with its next step in the buyer's language.
#[cfg_attr(
    not(kassa_test_browser),
    ignore = "browser: chromium and chromium-driver were not installed when the tests were built (apt-get install chromium chromium-driver)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn buyer_pages_fit_a_phone_and_a_desktop_in_both_languages() {
    let driver = chromedriver();
    let wechat = crate::fakes::FakeWechat::start().await;
    let gateways = kassa::gateway::config::GatewaysFile { wechatpay: Some(wechat.config()), ..Default::default() };
    let beijing = time::UtcOffset::from_hms(8, 0, 0).unwrap();
    let opts =
        Opts { demo: true, manual_clock: true, hold_seconds: 60, gateways, time_zone: beijing, ..Default::default() };
    let t = TestApp::spawn_with(Backend::Sqlite, opts).await;
    let mut price = 2_500;
    for lang in Lang::ALL {
        let say = |key: &str| lang.texts().t(key).to_string();
        for (width, height) in [(360, 740), (1280, 800)] {
            let profile = tempfile::tempdir().unwrap();
            let c = browser_sized(&driver, profile.path(), width, height).await;
            // The switch: the language is chosen once and kept.
            c.goto(&t.url(&format!("/?lang={}", lang.code()))).await.unwrap();
            check_page(&c, lang, width, "storefront").await;
            review(&t, &c, "LAMP-FLASH-SALE", 2).await;
            check_page(&c, lang, width, "basket").await;
            c.find(Locator::Id("confirm")).await.unwrap().click().await.unwrap();
            let pay = arrive(&c, "pay").await;
            check_page(&c, lang, width, "sandbox").await;
            assert_eq!(pay.text().await.unwrap(), lang.texts().t("sandbox.pay"));
            pay.click().await.unwrap();
            arrive(&c, "status").await;
            assert_eq!(wait_status(&c, "paid", false).await, "paid");
            let shown = c.find(Locator::Id("status")).await.unwrap().text().await.unwrap();
            assert_eq!(shown, lang.texts().status("paid"), "the status in words");
            check_page(&c, lang, width, "return").await;
            c.find(Locator::Id("order-link")).await.unwrap().click().await.unwrap();
            arrive(&c, "poll-state").await;
            check_page(&c, lang, width, "order").await;
            assert!(c.find(Locator::Css("#lines td")).await.is_ok(), "the order page lists its lines");
            assert!(c.find(Locator::Css("a[href='/']")).await.is_ok(), "the order page leads back to the shop");

            // An unknown order.
            c.goto(&t.url("/h5/orders/KS000000000NOSUCHORDER0")).await.unwrap();
            check_page(&c, lang, width, "error-unknown-order").await;
            check_next_step(&c, lang, "common.back_to_shop", "/").await;

            // A price that changed between review and confirm: back to the basket at today's price.
            review(&t, &c, "NOTEBOOK-A5", 1).await;
            let basket = c.current_url().await.unwrap().path().to_string();
            price += 100;
            t.set_price("NOTEBOOK-A5", price).await;
            c.find(Locator::Id("confirm")).await.unwrap().click().await.unwrap();
            arrive(&c, "next-step").await;
            check_page(&c, lang, width, "error-price-changed").await;
            check_next_step(&c, lang, "error.review_basket", &basket).await;
            c.find(Locator::Id("next-step")).await.unwrap().click().await.unwrap();
            let total = arrive(&c, "total").await.text().await.unwrap();
            assert_eq!(total, format!("{}.00 CNY", price / 100));

            // Sold out between review and confirm: shop again.
            review(&t, &c, "NOTEBOOK-A5", 1).await;
            let available = t.sku("NOTEBOOK-A5").await["available"].as_i64().unwrap();
            let stock = "/api/v1/admin/skus/NOTEBOOK-A5/stock";
            assert!(t.admin_post(stock, json!({"delta": -available})).await.0.is_success());
            c.find(Locator::Id("confirm")).await.unwrap().click().await.unwrap();
            arrive(&c, "next-step").await;
            check_page(&c, lang, width, "error-sold-out").await;
            check_next_step(&c, lang, "error.shop_again", "/").await;
            assert!(t.admin_post(stock, json!({"delta": available})).await.0.is_success());

            // A payment whose time ran out while its pay page was open.
            review(&t, &c, "TEA-LONGJING-100G", 1).await;
            c.find(Locator::Id("confirm")).await.unwrap().click().await.unwrap();
            let pay = arrive(&c, "pay").await;
            t.clock.as_ref().unwrap().advance_ms(61_000);
            t.app.sweeper.step().await.unwrap();
            pay.click().await.unwrap();
            arrive(&c, "next-step").await;
            check_page(&c, lang, width, "error-payment-expired").await;
            let text = c.find(Locator::Id("message")).await.unwrap().text().await.unwrap();
            assert_eq!(text, say("error.payment_ended"));
            c.find(Locator::Id("next-step")).await.unwrap().click().await.unwrap();
            arrive(&c, "status").await;
            assert_eq!(wait_status(&c, "expired", false).await, "expired");
            let shown = c.find(Locator::Id("status")).await.unwrap().text().await.unwrap();
            assert_eq!(shown, lang.texts().status("expired"));

            // WeChat Pay from a desktop browser: the code to scan, the amount, the time left.
            review(&t, &c, "MUG-CELADON", 1).await;
            c.find(Locator::Css("input[name='gateway'][value='wechatpay']")).await.unwrap().click().await.unwrap();
            c.find(Locator::Id("confirm")).await.unwrap().click().await.unwrap();
            arrive(&c, "qr").await;
            check_page(&c, lang, width, "qr").await;
            let amount = c.find(Locator::Id("amount")).await.unwrap().text().await.unwrap();
            assert_eq!(amount, "89.00 CNY");
            let title = c.find(Locator::Css("h1")).await.unwrap().text().await.unwrap();
            assert_eq!(title, lang.texts().f("qr.title", "app", say("app.wechatpay")));
            c.close().await.unwrap();
        }
    }
    t.assert_clean().await;
}

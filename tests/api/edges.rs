//! The money-safe edges: traps a shop meets at kassa's edges (hand-raised digital stock, keys under
//! the wrong secret, refunds re-sending payment messages, buyers stranded after a failed payment,
//! the database away, refund numbers reused, zero totals). Each test fails without its fix.

use kassa::store::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{ADMIN, Backend, KEYS_SECRET, Opts, TestApp, csrf_token, s};
use crate::on_both;

const OTHER_SECRET: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

async fn digital_sku(t: &TestApp, sku: &str, price_minor: i64, keys: &[&str]) {
    let (status, body) = t
        .admin_post(
            "/api/v1/admin/skus",
            json!({"sku": sku, "name": "Key", "price_minor": price_minor, "currency": "CNY", "kind": "digital", "free": price_minor == 0}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    if !keys.is_empty() {
        let (status, body) = t.admin_post(&format!("/api/v1/admin/skus/{sku}/keys"), json!({"keys": keys})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

/// The topics of an order's outbox messages, oldest first.
async fn topics(t: &TestApp, order_no: &str) -> Vec<String> {
    sql::query_scalar("SELECT topic FROM outbox WHERE order_no = $1 ORDER BY created_at, id")
        .bind(order_no)
        .fetch_all(t.app.state.db.read_pool())
        .await
        .unwrap()
}

/// The payloads of an order's messages of one topic.
pub(crate) async fn payloads(t: &TestApp, order_no: &str, topic: &str) -> Vec<Value> {
    let rows: Vec<String> =
        sql::query_scalar("SELECT payload FROM outbox WHERE order_no = $1 AND topic = $2 ORDER BY created_at, id")
            .bind(order_no)
            .bind(topic)
            .fetch_all(t.app.state.db.read_pool())
            .await
            .unwrap();
    rows.iter().map(|p| serde_json::from_str(p).unwrap()).collect()
}

async fn paid_order(t: &TestApp, lines: &[(&str, i64)]) -> (String, String) {
    let (buyer, order_no, attempt) = t.pending_order(lines).await;
    let (status, body) = t.complete(&attempt, "succeeded", 1).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    t.settle().await;
    (buyer, order_no)
}

on_both!(digital_stock_is_its_keys, digital_stock);
async fn digital_stock(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    digital_sku(&t, "EBOOK", 500, &[]).await;
    let (status, body) = t.admin_post("/api/v1/admin/skus/EBOOK/stock", json!({"delta": 2})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "digital_stock_is_keys".into()));
    let (status, body) = t.admin_post("/api/v1/admin/skus/EBOOK/stock", json!({"delta": -1})).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "digital_stock_is_keys".into()));
    assert_eq!(t.sku("EBOOK").await["on_hand"], 0, "nothing changed");
    // With no keys there is nothing to buy: the confirm is refused and no money is taken.
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("EBOOK", 1)]).await;
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "out_of_stock".into()));
    // Keys are the stock; a physical SKU still restocks.
    t.admin_post("/api/v1/admin/skus/EBOOK/keys", json!({"keys": ["K-1", "K-2"]})).await;
    assert_eq!(t.sku("EBOOK").await["on_hand"], 2);
    t.create_sku("MUG", "Mug", 100, 1).await;
    let (status, body) = t.admin_post("/api/v1/admin/skus/MUG/stock", json!({"delta": 2})).await;
    assert_eq!((status, body["on_hand"].as_i64()), (StatusCode::OK, Some(3)));
    let (_, order_no) = paid_order(&t, &[("EBOOK", 2)]).await;
    assert_eq!(t.status(&order_no).await, "delivered");
    t.assert_clean().await;
}

/// `kassa` run as a command against the test's database.
fn kassa(t: &TestApp, args: &[&str]) -> std::process::Output {
    crate::common::kassa_command()
        .args(args)
        .args(["--database-url", &t.database_url, "--data-dir", &t.data_dir()])
        .env("CI", "")
        .env_remove("KASSA_KEYS_SECRET")
        .output()
        .unwrap()
}

on_both!(keys_under_another_secret_are_refused, wrong_secret);
async fn wrong_secret(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    digital_sku(&t, "GAME", 100, &["A-1", "A-2"]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.txt");
    std::fs::write(&file, "B-1\nB-2\nA-1\n").unwrap();
    let file = file.to_str().unwrap();
    // The CLI with another secret: refused, nothing imported.
    let out = kassa(&t, &["keys", "import", "--sku", "GAME", file, "--keys-secret", OTHER_SECRET]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("keys secret is not the one"), "{stderr}");
    assert!(!stderr.contains(OTHER_SECRET) && !stderr.contains(KEYS_SECRET), "no secret in messages: {stderr}");
    assert_eq!(t.sku("GAME").await["on_hand"], 2);
    // The right one imports (and still finds the duplicate).
    let out = kassa(&t, &["keys", "import", "--sku", "GAME", file, "--keys-secret", KEYS_SECRET]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"imported\": 2, \"duplicates\": 1"));
    // `kassa check` with the wrong secret says so; with the right one all holds.
    let out = kassa(&t, &["check", "--keys-secret", OTHER_SECRET]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("I9: the keys secret given does not match"), "{stdout}");
    let out = kassa(&t, &["check", "--keys-secret", KEYS_SECRET]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    // `serve` refuses to start under another secret, and without one.
    let mut settings = test_settings(&t);
    settings.keys_secret = Some(OTHER_SECRET.to_string());
    let err = start(&settings).await.err().expect("another secret must be refused");
    assert!(format!("{err:#}").contains("keys secret is not the one"), "{err:#}");
    settings.keys_secret = None;
    let err = start(&settings).await.err().expect("no secret must be refused when keys are stored");
    assert!(format!("{err:#}").contains("no keys secret is configured"), "{err:#}");

    // A key that does not decrypt (stored by a kassa that did not check) is never a 500: the
    // order stays readable, the operator is alerted and `kassa check` names the key.
    let other = kassa::vault::Vault::from_hex(OTHER_SECRET).unwrap();
    let (nonce, ct) = other.seal("GAME", "FOREIGN").unwrap();
    sql::query("DELETE FROM card_keys WHERE status = 'available'").execute(t.app.state.db.read_pool()).await.unwrap();
    sql::query(
        "INSERT INTO card_keys (id, sku, fingerprint, nonce, ciphertext, status, created_at) VALUES ('zz-foreign', 'GAME', 'fp', $1, $2, 'available', 0)",
    )
    .bind(nonce)
    .bind(ct)
    .execute(t.app.state.db.read_pool())
    .await
    .unwrap();
    sql::query("UPDATE skus SET on_hand = 1 WHERE sku = 'GAME'").execute(t.app.state.db.read_pool()).await.unwrap();
    let (buyer, order_no) = paid_order(&t, &[("GAME", 1)]).await;
    let r = t.http.get(t.url(&format!("/api/v1/orders/{order_no}"))).bearer_auth(&buyer).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let order: Value = r.json().await.unwrap();
    assert_eq!(order["lines"][0]["keys_unavailable"], 1, "{order}");
    assert!(order["lines"][0].get("keys").is_none(), "{order}");
    let admin = t.order(&order_no).await;
    assert_eq!(admin["status"], "delivered");
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'key_unreadable'").await, 1);
    let out = kassa(&t, &["check", "--keys-secret", KEYS_SECRET]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(&format!("key zz-foreign of sku GAME (delivered to order {order_no}) does not decrypt")),
        "{stdout}"
    );
}

fn test_settings(t: &TestApp) -> kassa::config::Settings {
    kassa::config::Settings {
        data_dir: tempfile::tempdir().unwrap().keep(),
        database_url: t.database_url.clone(),
        db_max_connections: 4,
        listen: "127.0.0.1:0".parse().unwrap(),
        sandbox: true,
        admin_token: Some(ADMIN.to_string()),
        sweep_interval_ms: 3_600_000,
        keys_secret: Some(KEYS_SECRET.to_string()),
        reconcile_after_ms: 60_000,
        reconcile_interval_ms: 3_600_000,
        protection: crate::common::test_protection(),
        statement_schedule: None,
        ..Default::default()
    }
}

async fn start(settings: &kassa::config::Settings) -> anyhow::Result<kassa::app::App> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let clock: kassa::clock::SharedClock = std::sync::Arc::new(kassa::clock::SystemClock);
    kassa::app::App::start(settings, clock, listener, kassa::app::Workers::Off).await
}

on_both!(refunds_are_facts_and_never_resend_payment, refunds_as_facts);
async fn refunds_as_facts(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("LAMP", "Lamp", 1000, 5).await;
    let (_, order_no) = paid_order(&t, &[("LAMP", 1)]).await;
    assert_eq!(topics(&t, &order_no).await, ["order.paid", "fulfilment.requested"]);
    let refund = |no: &str, amount: i64| {
        let (t, order_no, no) = (&t, order_no.clone(), no.to_string());
        async move {
            t.admin_post(
                &format!("/api/v1/admin/orders/{order_no}/refunds"),
                json!({"refund_no": no, "amount_minor": amount, "reason": "damaged"}),
            )
            .await
        }
    };
    // A partial refund: the order stays paid; the refund is its own fact.
    let (status, body) = refund("R-1", 300).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    t.settle().await;
    let order = t.order(&order_no).await;
    assert_eq!((s(&order["status"]), order["refunded_minor"].as_i64()), ("paid".into(), Some(300)), "{order}");
    assert_eq!(
        topics(&t, &order_no).await,
        ["order.paid", "fulfilment.requested", "refund.requested", "refund.succeeded"],
        "a refund never re-sends the payment or the fulfilment"
    );
    let done = &payloads(&t, &order_no, "refund.succeeded").await[0];
    assert_eq!(
        (s(&done["refund_no"]), done["amount_minor"].as_i64(), s(&done["currency"]), done["refunded_minor"].as_i64()),
        ("R-1".into(), Some(300), "CNY".into(), Some(300)),
        "{done}"
    );
    assert_eq!(payloads(&t, &order_no, "refund.requested").await[0]["refunded_minor"], 0);
    // Shipping goes on after a partial refund.
    let (status, _) = t.admin_post(&format!("/api/v1/admin/orders/{order_no}/deliver"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    // A refund of the rest that fails: back to delivered, with no payment message again.
    let (row, _) = kassa::store::refunds::request(
        &t.app.state.db,
        Default::default(),
        &kassa::domain::ids::OrderNo::parse(&order_no).unwrap(),
        &kassa::domain::ids::RefundNo::parse("R-2").unwrap(),
        700,
        "rest",
        t.now_ms(),
    )
    .await
    .unwrap();
    assert_eq!(row.status.as_str(), "requested");
    assert_eq!(t.status(&order_no).await, "refunding", "refunds in flight cover the whole capture");
    let r2 = kassa::domain::ids::RefundNo::parse("R-2").unwrap();
    kassa::store::refunds::settle(&t.app.state.db, &r2, false, "card closed", None, t.now_ms()).await.unwrap();
    assert_eq!(t.status(&order_no).await, "delivered");
    let failed = &payloads(&t, &order_no, "refund.failed").await[0];
    assert_eq!((s(&failed["refund_no"]), failed["refunded_minor"].as_i64()), ("R-2".into(), Some(300)));
    // The rest again: refunded once it all went back.
    let (status, body) = refund("R-3", 700).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    t.settle().await;
    let order = t.order(&order_no).await;
    assert_eq!((s(&order["status"]), order["refunded_minor"].as_i64()), ("refunded".into(), Some(1000)), "{order}");
    let all = topics(&t, &order_no).await;
    assert_eq!(all.iter().filter(|m| *m == "order.paid").count(), 1, "{all:?}");
    assert_eq!(all.iter().filter(|m| *m == "fulfilment.requested").count(), 1, "{all:?}");
    assert_eq!(all.iter().filter(|m| *m == "order.delivered").count(), 1, "{all:?}");
    assert_eq!(all.iter().filter(|m| m.starts_with("refund.")).count(), 6, "{all:?}");
    assert_eq!(all.last().map(String::as_str), Some("order.refunded"), "{all:?}");
    t.assert_clean().await;
}

on_both!(a_refund_number_means_one_refund, refund_no_reused);
async fn refund_no_reused(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("LAMP", "Lamp", 1000, 5).await;
    let (_, order_no) = paid_order(&t, &[("LAMP", 1)]).await;
    let (_, other_order) = paid_order(&t, &[("LAMP", 1)]).await;
    let path = format!("/api/v1/admin/orders/{order_no}/refunds");
    let (status, first) = t.admin_post(&path, json!({"refund_no": "R-9", "amount_minor": 200, "reason": "x"})).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, again) = t.admin_post(&path, json!({"refund_no": "R-9", "amount_minor": 200, "reason": "x"})).await;
    assert_eq!((status, s(&again["refund_no"])), (StatusCode::OK, "R-9".into()), "same terms replay");
    for other in [
        json!({"refund_no": "R-9", "amount_minor": 300, "reason": "x"}),
        json!({"refund_no": "R-9", "amount_minor": 200, "reason": "other"}),
    ] {
        let (status, body) = t.admin_post(&path, other).await;
        assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "refund_no_reused".into()), "{body}");
    }
    let (status, body) = t
        .admin_post(
            &format!("/api/v1/admin/orders/{other_order}/refunds"),
            json!({"refund_no": "R-9", "amount_minor": 200, "reason": "x"}),
        )
        .await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "refund_no_reused".into()));
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM refunds").await, 1, "nothing changed");
    // The refund goes through when the sandbox's refund notification arrives.
    t.settle().await;
    assert_eq!(t.order(&order_no).await["refunded_minor"], 200);
    t.assert_clean().await;
}

/// A page client with the buyer's session as its cookie.
async fn page(t: &TestApp, buyer: &str, path: &str) -> (StatusCode, String) {
    let r = t.http.get(t.url(path)).header("cookie", format!("kassa_session={buyer}")).send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

on_both!(a_failed_payment_offers_try_again, failed_payment);
async fn failed_payment(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("TEA", "Tea", 250, 5).await;
    for outcome in ["failed", "cancelled"] {
        let (buyer, order_no, attempt) = t.pending_order(&[("TEA", 1)]).await;
        let (status, body) = t.complete(&attempt, outcome, 1).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        t.settle().await;
        let status = t.return_status(&attempt).await;
        assert_eq!(
            (s(&status["status"]), s(&status["attempt_status"]), status["can_retry"].as_bool()),
            ("pending_payment".into(), outcome.to_string(), Some(true)),
            "{status}"
        );
        let (code, html) = page(&t, &buyer, &format!("/checkout/return/{attempt}")).await;
        assert_eq!(code, StatusCode::OK);
        assert!(html.contains(&format!("payment {outcome}")), "{html}");
        assert!(!html.contains("confirming your payment…</span>"), "{html}");
        assert!(html.contains("id=\"try-again\""), "{html}");
        let (_, h5) = page(&t, &buyer, &format!("/h5/orders/{order_no}")).await;
        assert!(h5.contains("id=\"retry\">") && h5.contains("id=\"try-again\""), "the H5 page offers it too: {h5}");
        // Someone else's browser sees the state but cannot act on it.
        let (_, anon) = page(&t, "nobody", &format!("/checkout/return/{attempt}")).await;
        assert!(anon.contains(&format!("payment {outcome}")) && !anon.contains("id=\"try-again\""), "{anon}");
        // Try again: a new attempt, handed off to the gateway like a confirm.
        let r = t
            .http
            .post(t.url(&format!("/checkout/retry/{order_no}")))
            .header("cookie", format!("kassa_session={buyer}"))
            .form(&[("csrf", csrf_token(&html))])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let handoff = r.text().await.unwrap();
        assert!(handoff.contains("/sandbox/pay"), "{handoff}");
        let order = t.order(&order_no).await;
        let attempts = order["attempts"].as_array().unwrap();
        assert_eq!(attempts.len(), 2, "{order}");
        let new_ref = s(&attempts[1]["attempt_ref"]);
        assert!(handoff.contains(&new_ref), "{handoff}");
        // Without the CSRF token nothing happens.
        let r = t
            .http
            .post(t.url(&format!("/checkout/retry/{order_no}")))
            .header("cookie", format!("kassa_session={buyer}"))
            .form(&[("csrf", "forged")])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN);
        // The new attempt pays the order.
        let (status, _) = t.complete(&new_ref, "succeeded", 1).await;
        assert_eq!(status, StatusCode::OK);
        t.settle().await;
        assert_eq!(t.status(&order_no).await, "paid");
        let status = t.return_status(&attempt).await;
        assert_eq!(status["can_retry"], false, "{status}");
    }
    t.assert_clean().await;
}

on_both!(a_zero_total_completes_without_a_gateway, zero_total);
async fn zero_total(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    digital_sku(&t, "FREEBIE", 0, &["GIFT-1"]).await;
    // A price of 0 is taken only when the shop says it means it; `free` with a price is refused.
    let sample = json!({"sku": "SAMPLE", "name": "Sample", "price_minor": 0, "currency": "CNY", "stock": 3});
    let (status, body) = t.admin_post("/api/v1/admin/skus", sample.clone()).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "free_not_confirmed".into()));
    let priced = json!({"sku": "SAMPLE", "name": "Sample", "price_minor": 100, "currency": "CNY", "free": true});
    let (status, body) = t.admin_post("/api/v1/admin/skus", priced).await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::UNPROCESSABLE_ENTITY, "free_not_confirmed".into()));
    let mut sample = sample;
    sample["free"] = json!(true);
    let (status, body) = t.admin_post("/api/v1/admin/skus", sample).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // A typo'd price change to 0 is refused too, and the price stays.
    let patch = |body: Value| t.http.patch(t.url("/api/v1/admin/skus/MUG0")).bearer_auth(ADMIN).json(&body).send();
    t.create_sku("MUG0", "Mug", 500, 1).await;
    let r = patch(json!({"price_minor": 0})).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(t.sku("MUG0").await["price_minor"], 500);
    let r = patch(json!({"price_minor": 0, "free": true})).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(t.sku("MUG0").await["price_minor"], 0);
    let buyer = t.buyer().await;
    let basket = t.basket(&buyer, &[("FREEBIE", 1)]).await;
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!((s(&body["status"]), body["total_minor"].as_i64()), ("delivered".into(), Some(0)), "{body}");
    assert!(body["payment"].is_null(), "no gateway hand-off: {body}");
    let order_no = s(&body["order_no"]);
    let r = t.http.get(t.url(&format!("/api/v1/orders/{order_no}"))).bearer_auth(&buyer).send().await.unwrap();
    let order: Value = r.json().await.unwrap();
    assert_eq!(order["lines"][0]["keys"], json!(["GIFT-1"]), "{order}");
    assert_eq!(order["captured_minor"], 0);
    assert_eq!(t.sandbox_count("SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_payments").await, 0, "no gateway");
    assert_eq!(topics(&t, &order_no).await, ["order.paid", "order.delivered"]);
    // A physical zero-total order: paid, to be shipped; a repeated confirm answers the same order.
    let basket = t.basket(&buyer, &[("SAMPLE", 2)]).await;
    let (status, body) = t.checkout(&buyer, &basket, Some("zero-1")).await;
    assert_eq!((status, s(&body["status"])), (StatusCode::CREATED, "paid".into()), "{body}");
    let (_, again) = t.checkout(&buyer, &basket, Some("zero-1")).await;
    assert_eq!(again["order_no"], body["order_no"]);
    let order_no = s(&body["order_no"]);
    assert_eq!(topics(&t, &order_no).await, ["order.paid", "fulfilment.requested"]);
    let sku = t.sku("SAMPLE").await;
    assert_eq!((sku["on_hand"].as_i64(), sku["sold"].as_i64()), (Some(1), Some(2)));
    // Nothing to refund.
    let (status, body) = t
        .admin_post(&format!("/api/v1/admin/orders/{order_no}/refunds"), json!({"refund_no": "Z-1", "amount_minor": 1}))
        .await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "refund_exceeds_captured".into()));
    t.assert_clean().await;
}

/// A PostgreSQL cluster of the test's own (`initdb`, `pg_ctl` on a free port), so it can be
/// stopped and started without touching the machine's. Run as the `postgres` user when the test
/// runs as root (PostgreSQL refuses to run as root).
struct OwnCluster {
    dir: tempfile::TempDir,
    port: u16,
}

impl OwnCluster {
    fn bin(name: &str) -> std::path::PathBuf {
        let versions = std::fs::read_dir("/usr/lib/postgresql").expect("PostgreSQL server binaries");
        let mut dirs: Vec<_> = versions.filter_map(|e| e.ok()).map(|e| e.path().join("bin").join(name)).collect();
        dirs.sort();
        dirs.pop().expect("a PostgreSQL version")
    }

    fn run(args: &[&str]) {
        let root = std::process::Command::new("id").arg("-u").output().map(|o| o.stdout == b"0\n").unwrap_or(false);
        let mut cmd = if root {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]);
            c
        } else {
            std::process::Command::new(args[0])
        };
        if root {
            cmd.arg(args[0]);
        }
        let out = cmd.args(&args[1..]).output().expect("run a PostgreSQL tool");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    fn start_new() -> OwnCluster {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let _ = std::process::Command::new("chown").args(["-R", "postgres", dir.path().to_str().unwrap()]).status();
        let data = dir.path().join("data");
        Self::run(&[
            Self::bin("initdb").to_str().unwrap(),
            "-D",
            data.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
        ]);
        let cluster = OwnCluster { dir, port };
        cluster.start();
        cluster
    }

    fn start(&self) {
        let data = self.dir.path().join("data");
        let opts = format!("-p {} -c listen_addresses=127.0.0.1 -k {}", self.port, self.dir.path().display());
        let log = self.dir.path().join("log");
        Self::run(&[
            Self::bin("pg_ctl").to_str().unwrap(),
            "-D",
            data.to_str().unwrap(),
            "-o",
            &opts,
            "-l",
            log.to_str().unwrap(),
            "-w",
            "start",
        ]);
    }

    fn stop(&self) {
        let data = self.dir.path().join("data");
        Self::run(&[Self::bin("pg_ctl").to_str().unwrap(), "-D", data.to_str().unwrap(), "-m", "fast", "-w", "stop"]);
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let data = self.dir.path().join("data");
        let _ = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(Self::bin("pg_ctl"))
            .args(["-D", data.to_str().unwrap_or_default(), "-m", "immediate", "stop"])
            .output();
        let _ = std::process::Command::new(Self::bin("pg_ctl"))
            .args(["-D", data.to_str().unwrap_or_default(), "-m", "immediate", "stop"])
            .output();
    }
}

/// The database away (PostgreSQL restarting): 503 `database_unavailable` with `Retry-After`, never
/// 500; when it is back, kassa recovers by itself. SQLite is a file in the process: it cannot be
/// away, so this runs on PostgreSQL only (and only where the test can run its own cluster).
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn database_away_answers_503_and_recovers() {
    if Backend::postgres().is_none() {
        return;
    }
    let cluster = OwnCluster::start_new();
    let t = TestApp::spawn(Backend::Postgres(cluster.url())).await;
    t.create_sku("MUG", "Mug", 500, 5).await;
    let buyer = t.buyer().await;
    cluster.stop();
    let r = t.http.post(t.url("/api/v1/sessions")).send().await.unwrap();
    let retry_after = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
    let (status, body): (StatusCode, Value) = (r.status(), r.json().await.unwrap());
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable".into()));
    assert_eq!(retry_after.as_deref(), Some("5"));
    let r = t.http.get(t.url("/api/v1/admin/skus/MUG")).bearer_auth(ADMIN).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let r =
        t.http.get(t.url("/h5/orders/NOPE")).header("cookie", format!("kassa_session={buyer}")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "pages say so too");
    cluster.start();
    // Back by itself: the first requests may still meet connections the restart closed.
    let mut recovered = false;
    for _ in 0..50 {
        let r = t.http.post(t.url("/api/v1/sessions")).send().await.unwrap();
        if r.status() == StatusCode::CREATED {
            recovered = true;
            break;
        }
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE, "never a 500 while it comes back");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(recovered, "kassa did not recover once the database was back");
    let (_, order_no) = paid_order(&t, &[("MUG", 1)]).await;
    assert_eq!(t.status(&order_no).await, "paid");
    t.assert_clean().await;
}

on_both!(refunds_close_after_the_refund_window, refund_window);
/// "Refunds only within 90 days of payment" (`--refund-window-days 90`): a refund on the 90th day
/// goes through; a day later it is refused with `refund_window_closed`, and nothing is stored.
async fn refund_window(backend: Backend) {
    let opts = Opts { manual_clock: true, refund_window_days: Some(90), ..Opts::default() };
    let t = TestApp::spawn_with(backend, opts).await;
    t.create_sku("TEA", "Tea", 1000, 5).await;
    let (_, order_no) = paid_order(&t, &[("TEA", 1)]).await;
    let clock = t.clock.as_ref().expect("manual clock");
    let refund = |no: &'static str| {
        let path = format!("/api/v1/admin/orders/{order_no}/refunds");
        let t = &t;
        async move { t.admin_post(&path, json!({"refund_no": no, "amount_minor": 100, "reason": "late"})).await }
    };
    clock.advance_ms(90 * 24 * 3600 * 1000 - 60_000);
    let (status, body) = refund("R-1").await;
    assert_eq!(status, StatusCode::CREATED, "within the window: {body}");
    clock.advance_ms(24 * 3600 * 1000);
    let (status, body) = refund("R-2").await;
    assert_eq!((status, s(&body["error"]["code"])), (StatusCode::CONFLICT, "refund_window_closed".into()), "{body}");
    assert_eq!(body["error"]["details"]["window_days"], 90, "{body}");
    assert_eq!(t.count("SELECT COUNT(*) FROM refunds WHERE refund_no = 'R-2'").await, 0);
    t.settle().await;
    t.assert_clean().await;
}

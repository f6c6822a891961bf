//! Hardening against an attacker on the shipped defaults: rejected notifications kept as bounded
//! digests behind a per-address limit and a cap, pruned by retention; hoarding bounded per order;
//! wrong admin bearer tokens backed off; /metrics closed to other machines; cookie writes that must
//! be JSON; the buyer cookie Secure over https; private data files; the sandbox refused beside real
//! money.

use kassa::store::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::abuse::serve_briefly;
use crate::common::{ADMIN, Backend, Opts, TestApp, s, test_protection};
use crate::on_both;
use kassa::config::{Protection, RateLimits};

const DAY_MS: i64 = 24 * 3600 * 1000;

fn limited(r: RateLimits) -> Opts {
    Opts { manual_clock: true, protection: Protection { rate_limits: Some(r), ..test_protection() }, ..Opts::default() }
}

async fn bad_notification(t: &TestApp, from: Option<&str>, body: Vec<u8>) -> reqwest::Response {
    let mut req = t
        .http
        .post(t.url("/notify/sandbox"))
        .header("content-type", "application/json")
        .header("sandbox-signature", "t=1,v1=00");
    if let Some(from) = from {
        req = req.header("x-forwarded-for", from);
    }
    req.body(body).send().await.unwrap()
}

on_both!(rejected_notifications_are_bounded_digests, rejected_digests);
async fn rejected_digests(backend: Backend) {
    let t = TestApp::spawn_with(
        backend.clone(),
        limited(RateLimits { rejected_notifications_per_minute: 3, ..RateLimits::default() }),
    )
    .await;
    t.create_sku("MUG", "Mug", 100, 50).await;
    let big = vec![b'x'; 200_000];
    for _ in 0..3 {
        let r = bad_notification(&t, Some("198.51.100.7"), big.clone()).await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }
    // Past its rate, the sender is answered 429 and nothing more of it is stored.
    let r = bad_notification(&t, Some("198.51.100.7"), big.clone()).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        (s(&body["error"]["code"]), s(&body["error"]["details"]["bucket"])),
        ("rate_limited".into(), "rejected_notifications".into())
    );
    assert_eq!(t.count("SELECT COUNT(*) FROM notifications WHERE status = 'rejected'").await, 3);
    // Each is kept as a digest: the first KiB, the length and the SHA-256 of the whole body.
    let rows: Vec<(Vec<u8>, i64, String)> =
        sql::query_as("SELECT raw_body, body_len, body_sha256 FROM notifications WHERE status = 'rejected'")
            .fetch_all(t.app.state.db.read_pool())
            .await
            .unwrap();
    let sha = hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &big));
    for (kept, len, sha256) in &rows {
        assert_eq!(
            (kept.len(), *len, sha256.as_str()),
            (kassa::store::rejected::REJECTED_BODY_KEPT_BYTES, 200_000, sha.as_str())
        );
    }
    // Another address is not held to the first one's rate.
    assert_eq!(bad_notification(&t, Some("198.51.100.8"), b"{}".to_vec()).await.status(), StatusCode::BAD_REQUEST);
    // A gateway's genuine notifications are never limited, even from an address that has used up
    // its rate of rejected ones (the sandbox notifies from loopback).
    for _ in 0..4 {
        bad_notification(&t, None, b"{}".to_vec()).await;
    }
    assert_eq!(bad_notification(&t, None, b"{}".to_vec()).await.status(), StatusCode::TOO_MANY_REQUESTS);
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    assert_eq!(t.status(&order_no).await, "paid");
    // A genuine notification refused (an amount that does not match) is a decision record: kept
    // whole, not counted among the digests, and never pruned as one.
    let (_, _, pending_ref) = t.pending_order(&[("MUG", 1)]).await;
    let wrong = json!({
        "event_id": "evt-wrong-amount", "event_type": "payment.succeeded", "merchant_id": "kassa-demo-merchant",
        "attempt_ref": pending_ref, "txn_id": "txn_wrong", "amount_minor": 1, "currency": "CNY", "created_at": 0
    })
    .to_string();
    let signature = t.app.sandbox.as_ref().unwrap().sign_notification(wrong.as_bytes());
    let r = t
        .http
        .post(t.url("/notify/sandbox"))
        .header("content-type", "application/json")
        .header("sandbox-signature", signature)
        .body(wrong)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let refused = "SELECT COUNT(*) FROM notifications WHERE status = 'rejected' AND body_sha256 IS NULL";
    assert_eq!(t.count(refused).await, 1);
    // Retention deletes the digests of rejected notifications after their time; the applied one and
    // the refused genuine one stay.
    let rejected =
        t.count("SELECT COUNT(*) FROM notifications WHERE status = 'rejected' AND body_sha256 IS NOT NULL").await;
    t.clock.as_ref().unwrap().advance_ms(31 * DAY_MS);
    let pruned = t.app.retainer.step().await.unwrap();
    assert_eq!(i64::try_from(pruned.rejected_notifications).unwrap(), rejected, "{pruned:?}");
    assert_eq!(t.count("SELECT COUNT(*) FROM notifications WHERE status = 'rejected'").await, 1);
    assert_eq!(t.count(refused).await, 1);
    assert_eq!(t.count("SELECT COUNT(*) FROM notifications WHERE status = 'applied'").await, 1);
    t.assert_clean().await;

    // However many addresses send them, at most REJECTED_NOTIFICATIONS_MAX are kept.
    let t = TestApp::spawn_with(backend.clone(), Opts::default()).await;
    let max = kassa::store::rejected::REJECTED_NOTIFICATIONS_MAX;
    let empty = if matches!(backend, Backend::Sqlite) { "X''" } else { "decode('', 'hex')" };
    let fill = format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {max}) \
         INSERT INTO notifications (id, gateway, status, reason, raw_body, body_len, body_sha256, received_at) \
         SELECT 'fill-' || CAST(i AS TEXT), 'sandbox', 'rejected', 'invalid_signature: old', {empty}, 0, 'e3b0', 0 FROM n"
    );
    crate::common::run_script(&t.database_url, &fill).await;
    assert_eq!(bad_notification(&t, Some("203.0.113.9"), b"{}".to_vec()).await.status(), StatusCode::BAD_REQUEST);
    assert_eq!(t.count("SELECT COUNT(*) FROM notifications WHERE status = 'rejected'").await, max);
    assert_eq!(t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'rejected_notifications_full'").await, 1);
}

on_both!(one_order_cannot_hold_a_skus_whole_stock_by_default, hoarding);
async fn hoarding(backend: Backend) {
    let protection = Protection { order_limits: Default::default(), ..test_protection() };
    let t = TestApp::spawn_with(backend, Opts { protection, ..Opts::default() }).await;
    t.create_sku("GPU", "GPU", 100, 10).await;
    t.create_sku("BOLT", "Bolt", 1, 10_000).await;
    let buyer = t.buyer().await;
    // Half of a SKU's stock at most (rounded up).
    let basket = t.basket(&buyer, &[("GPU", 6)]).await;
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        (s(&body["error"]["code"]), body["error"]["details"].clone()),
        ("quantity_limit".into(), json!({"sku": "GPU", "max": 5}))
    );
    assert_eq!(t.sku("GPU").await["reserved"], 0, "nothing is held");
    // At most 20 of a SKU without a limit of its own.
    let basket = t.basket(&buyer, &[("BOLT", 21)]).await;
    assert_eq!(t.checkout(&buyer, &basket, None).await.1["error"]["details"], json!({"sku": "BOLT", "max": 20}));
    // A SKU's own max_per_order replaces both.
    let r = t
        .http
        .patch(t.url("/api/v1/admin/skus/BOLT"))
        .bearer_auth(ADMIN)
        .json(&json!({"max_per_order": 500}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let basket = t.basket(&buyer, &[("BOLT", 100), ("GPU", 5)]).await;
    let (status, body) = t.checkout(&buyer, &basket, None).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "100 units per order at most: {body}");
    assert_eq!(body["error"]["details"], json!({"units": 105, "max_units": 100}));
    let basket = t.basket(&buyer, &[("BOLT", 95), ("GPU", 5)]).await;
    assert_eq!(t.checkout(&buyer, &basket, None).await.0, StatusCode::CREATED);
    assert_eq!(t.sku("GPU").await["reserved"], 5);
    t.assert_clean().await;
}

async fn admin_get(t: &TestApp, token: &str, from: &str) -> reqwest::Response {
    t.http.get(t.url("/api/v1/admin/orders")).bearer_auth(token).header("x-forwarded-for", from).send().await.unwrap()
}

on_both!(wrong_admin_bearer_tokens_are_backed_off, bearer_backoff);
async fn bearer_backoff(backend: Backend) {
    let r = RateLimits { signin_lockout_failures: 3, signin_lockout_ms: 60_000, ..RateLimits::default() };
    let t = TestApp::spawn_with(backend, limited(r)).await;
    let from = "198.51.100.7";
    assert_eq!(admin_get(&t, "guess-1", from).await.status(), StatusCode::FORBIDDEN);
    assert_eq!(admin_get(&t, "guess-2", from).await.status(), StatusCode::FORBIDDEN);
    let locked = admin_get(&t, "guess-3", from).await;
    assert_eq!(locked.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(locked.headers()["retry-after"], "60");
    assert_eq!(locked.json::<Value>().await.unwrap()["error"]["code"], "rate_limited");
    assert_eq!(admin_get(&t, "guess-4", from).await.status(), StatusCode::TOO_MANY_REQUESTS);
    // The right token is never refused: a guesser cannot lock the admin out.
    assert_eq!(admin_get(&t, ADMIN, from).await.status(), StatusCode::OK);
    assert_eq!(admin_get(&t, "guess", "198.51.100.8").await.status(), StatusCode::FORBIDDEN, "another address");
    assert_eq!(t.count("SELECT COUNT(*) FROM alerts WHERE kind = 'admin_signin_lockout'").await, 1);
    t.clock.as_ref().unwrap().advance_ms(60_001);
    assert_eq!(admin_get(&t, "guess-5", from).await.status(), StatusCode::FORBIDDEN, "the back-off ends");
    // Guessing through an operation a buyer or the admin may call (an order's cancel) counts the
    // same: backed off after the failures, the admin still let in.
    let cancel = |token: &'static str| {
        t.http
            .post(t.url("/api/v1/orders/KS00000000000000000000000/cancel"))
            .bearer_auth(token)
            .header("x-forwarded-for", "203.0.113.77")
            .json(&json!({}))
            .send()
    };
    let mut answers = Vec::new();
    for guess in ["guess-a", "guess-b", "guess-c", "guess-d"] {
        answers.push(cancel(guess).await.unwrap().status());
    }
    assert_eq!(answers[2..], [StatusCode::TOO_MANY_REQUESTS, StatusCode::TOO_MANY_REQUESTS], "{answers:?}");
    assert_ne!(cancel(ADMIN).await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    // Many wrong tokens in a burst draw from the address's sign-in bucket first.
    let mut answers = Vec::new();
    for i in 0..12 {
        answers.push(admin_get(&t, &format!("burst-{i}"), "203.0.113.1").await.status());
    }
    assert!(answers.iter().all(|s| *s == StatusCode::FORBIDDEN || *s == StatusCode::TOO_MANY_REQUESTS), "{answers:?}");
    assert!(answers.contains(&StatusCode::TOO_MANY_REQUESTS), "{answers:?}");
}

on_both!(metrics_are_for_this_machine_or_a_token, metrics_access);
async fn metrics_access(backend: Backend) {
    let token = "metrics-token-0123456789abcdef0123456789";
    let protection = Protection { metrics_token: Some(token.to_string()), ..test_protection() };
    let t = TestApp::spawn_with(backend, Opts { protection, ..Opts::default() }).await;
    let get = |bearer: Option<&str>, from: Option<&str>| {
        let mut r = t.http.get(t.url("/metrics"));
        if let Some(b) = bearer {
            r = r.bearer_auth(b);
        }
        if let Some(f) = from {
            r = r.header("x-forwarded-for", f);
        }
        r.send()
    };
    assert_eq!(get(None, None).await.unwrap().status(), StatusCode::OK, "this machine");
    let r = get(None, Some("198.51.100.7")).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "another machine, through the proxy");
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "unauthorized");
    assert_eq!(get(Some("wrong"), Some("198.51.100.7")).await.unwrap().status(), StatusCode::FORBIDDEN);
    let ok = get(Some(token), Some("198.51.100.7")).await.unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
    assert!(ok.text().await.unwrap().contains("kassa_"), "the metrics themselves");
    assert_eq!(get(Some(ADMIN), Some("198.51.100.7")).await.unwrap().status(), StatusCode::OK);
    // The shop's server naming a loopback buyer is not this machine.
    let r = t
        .http
        .get(t.url("/metrics"))
        .header("kassa-shop-key", crate::common::SHOP_KEY)
        .header("kassa-buyer-ip", "127.0.0.1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let protection = Protection { metrics_public: true, ..test_protection() };
    let t = TestApp::spawn_with(t_backend(&t), Opts { protection, ..Opts::default() }).await;
    let r = t.http.get(t.url("/metrics")).header("x-forwarded-for", "198.51.100.7").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "--metrics-public");
}

fn t_backend(t: &TestApp) -> Backend {
    if t.database_url.starts_with("postgres") { Backend::postgres().unwrap() } else { Backend::Sqlite }
}

on_both!(cookie_writes_must_be_json_and_the_cookie_is_secure_over_https, cookie_writes);
async fn cookie_writes(backend: Backend) {
    let t = TestApp::spawn_with(
        backend,
        Opts { demo: true, public_url: Some("https://shop.example".into()), ..Opts::default() },
    )
    .await;
    let page = t.http.get(t.url("/")).send().await.unwrap();
    let set_cookie = page.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(set_cookie.contains("; Secure") && set_cookie.contains("HttpOnly"), "{set_cookie}");
    let cookie = set_cookie.split(';').next().unwrap().to_string();
    let post = |content_type: &'static str, body: &'static str| {
        t.http
            .post(t.url("/api/v1/baskets"))
            .header("cookie", cookie.clone())
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    // What a page of another site can make a browser send is refused...
    for (content_type, body) in
        [("text/plain", "{}"), ("application/x-www-form-urlencoded", "a=b"), ("multipart/form-data; boundary=x", "")]
    {
        let r = post(content_type, body).await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{content_type}");
        assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "csrf_required");
    }
    // ...JSON is not (a cross-site form cannot send it), nor is a bearer token.
    assert_eq!(post("application/json", "{}").await.unwrap().status(), StatusCode::CREATED);
    let buyer = t.buyer().await;
    let r = t
        .http
        .post(t.url("/api/v1/baskets"))
        .bearer_auth(&buyer)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    // The storefront's own forms carry their CSRF field and still work without JSON.
    let html = t.http.get(t.url("/")).header("cookie", cookie.clone()).send().await.unwrap().text().await.unwrap();
    assert!(html.contains("name=\"csrf\""), "the storefront's forms carry the token");
}

#[cfg(unix)]
#[tokio::test]
async fn data_files_are_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt as _;
    let t = TestApp::spawn(Backend::Sqlite).await;
    let file = t.database_url.trim_start_matches("sqlite://").split('?').next().unwrap().to_string();
    let mode = |p: &str| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600, "{file}");
    let wal = format!("{file}-wal");
    if std::path::Path::new(&wal).exists() {
        assert_eq!(mode(&wal), 0o600);
    }
    let backup = tempfile::tempdir().unwrap();
    let to = backup.path().join("b");
    kassa::backup::backup(&t.app.state.db, &t.database_url, &to, 0).await.unwrap();
    assert_eq!(mode(to.to_str().unwrap()), 0o700);
    assert_eq!(mode(to.join(kassa::backup::DATABASE_FILE).to_str().unwrap()), 0o600);
}

#[test]
fn the_sandbox_is_refused_beside_real_money_unless_asked_for() {
    let (exited, _, err) =
        serve_briefly(&["--listen", "127.0.0.1:0", "--demo", "--public-url", "https://shop.example"]);
    assert_eq!(exited, Some(false), "{err}");
    assert!(err.contains("--sandbox-in-production-i-know"), "{err}");
    let (exited, _, err) = serve_briefly(&[
        "--listen",
        "127.0.0.1:0",
        "--demo",
        "--public-url",
        "https://shop.example",
        "--sandbox-in-production-i-know",
    ]);
    assert_eq!(exited, None, "{err}");
    assert!(err.contains("DANGER: the sandbox gateway is mounted"), "{err}");
}

/// A request from a trusted proxy (the loopback) without `X-Forwarded-For` is warned about once,
/// and each request's log line names the address counted and where it came from.
#[test]
fn the_client_address_and_its_source_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = crate::common::kassa_command();
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .env("RUST_LOG", "info")
        .env_remove("KASSA_ADMIN_TOKEN");
    let server = crate::common::Running::start(command, dir.path(), "kassa", "kassa listening on ");
    let out = server.out();
    let base = out.lines().find_map(|l| l.strip_prefix("kassa listening on ")).unwrap().to_string();
    let get = |xff: Option<&str>| {
        let mut args = vec!["-s".to_string(), "-o".into(), "/dev/null".into(), format!("{base}/healthz")];
        if let Some(x) = xff {
            args.extend(["-H".to_string(), format!("X-Forwarded-For: {x}")]);
        }
        assert!(std::process::Command::new("curl").args(&args).status().unwrap().success());
    };
    get(None);
    get(None);
    get(Some("198.51.100.7"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let log = server.err();
        let done = log.matches("request done").count() >= 3;
        if done {
            assert_eq!(log.matches("carries no x-forwarded-for").count(), 1, "said once: {log}");
            assert!(log.contains("\"client\":\"127.0.0.1\"") && log.contains("\"client_source\":\"peer\""), "{log}");
            assert!(
                log.contains("\"client\":\"198.51.100.7\"") && log.contains("\"client_source\":\"forwarded\""),
                "{log}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{log}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

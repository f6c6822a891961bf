//! Test harness: a real kassa on port 0 with a fresh database per test (a temp SQLite file, or a
//! fresh PostgreSQL database when `KASSA_TEST_DATABASE_URL` is set), driven over HTTP.

use kassa::store::sql;
use std::sync::Arc;

mod shop;
pub use shop::Shop;

use kassa::app::{App, Workers};
use kassa::clock::{ManualClock, SharedClock, SystemClock};
use kassa::config::Settings;
use kassa::store::check::{self, Violation};
use reqwest::StatusCode;
use serde_json::{Value, json};

pub const ADMIN: &str = "test-admin-token-0123456789abcdef0123";
pub const KEYS_SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
pub const WEBHOOK_SECRET: &str = "test-webhook-secret";

#[derive(Debug, Clone)]
pub enum Backend {
    Sqlite,
    Postgres(String),
}

impl Backend {
    /// PostgreSQL when configured. Outside CI a missing URL skips loudly; in CI it fails.
    pub fn postgres() -> Option<Backend> {
        match std::env::var("KASSA_TEST_DATABASE_URL") {
            Ok(url) if !url.is_empty() => Some(Backend::Postgres(url)),
            _ if std::env::var("CI").is_ok_and(|v| v == "true") => {
                panic!("CI=true but KASSA_TEST_DATABASE_URL is not set: PostgreSQL tests must run in CI")
            }
            _ => {
                eprintln!("SKIPPING PostgreSQL variant: KASSA_TEST_DATABASE_URL is not set");
                None
            }
        }
    }
}

/// Under `CI=true` the PostgreSQL variants must have been built to run (not ignored): CI runs
/// every test on both databases.
#[test]
fn postgresql_variants_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !cfg!(kassa_test_pg) {
        panic!("CI=true but KASSA_TEST_DATABASE_URL was not set when the tests were built");
    }
}

/// Runs a test body once per database: `on_both!(name, body_fn);` (the PostgreSQL variant is
/// ignored, and counted so, when the tests were built without `KASSA_TEST_DATABASE_URL`).
#[macro_export]
macro_rules! on_both {
    ($name:ident, $body:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                super::$body($crate::common::Backend::Sqlite).await
            }
            #[cfg_attr(
                not(kassa_test_pg),
                ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built"
            )]
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                if let Some(b) = $crate::common::Backend::postgres() {
                    super::$body(b).await
                }
            }
        }
    };
}

#[derive(Debug, Clone)]
pub struct Opts {
    pub hold_seconds: u64,
    pub ignore_close: bool,
    pub manual_clock: bool,
    pub public_url: Option<String>,
    pub demo: bool,
    pub late_policy: kassa::domain::decide::LatePolicy,
    pub refund_window_days: Option<u32>,
    pub webhook_url: Option<String>,
    pub alert_webhook_url: Option<String>,
    /// Real gateway adapters to mount beside the sandbox (pointed at local fakes).
    pub gateways: kassa::gateway::config::GatewaysFile,
    /// The storefront's protection; tests run with rate limits off unless they set them.
    pub protection: kassa::config::Protection,
    /// `--allowed-return-origins`.
    pub allowed_return_origins: Vec<&'static str>,
    /// `--time-zone`.
    pub time_zone: time::UtcOffset,
    /// `[email]`: the SMTP server of the buyer's e-mail.
    pub email: Option<kassa::workers::mail::EmailSettings>,
    /// `--case-due-margin-hours`, in milliseconds.
    pub case_due_margin_ms: i64,
}

/// The kassa binary, run in the tests' own scratch directory: never where a developer ran
/// `serve --demo`, so nothing of `./kassa-data` (its database, its `keys.secret`) is ever read.
pub fn kassa_command() -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_kassa"));
    command.current_dir(env!("CARGO_TARGET_TMPDIR"));
    command
}

/// A process the test started, killed and reaped when this goes out of scope (a failing assertion
/// included), and the files its stdout and stderr go to.
pub struct Running {
    child: std::process::Child,
    pub stdout: std::path::PathBuf,
    pub stderr: std::path::PathBuf,
}

impl Running {
    /// Starts `command` with its output in `name.out` and `name.err` in `dir`, and waits (at most
    /// 30 s) until its stdout contains `ready`.
    pub fn start(mut command: std::process::Command, dir: &std::path::Path, name: &str, ready: &str) -> Running {
        let (stdout, stderr) = (dir.join(format!("{name}.out")), dir.join(format!("{name}.err")));
        let child = command
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start the process");
        let running = Running { child, stdout, stderr };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !running.out().contains(ready) {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} did not print {ready:?}:\n{}{}",
                running.out(),
                running.err()
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        running
    }

    /// What it printed on stdout so far.
    pub fn out(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// What it printed on stderr so far.
    pub fn err(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shop server's API key the tests configure (`--shop-api-key`).
pub const SHOP_KEY: &str = "test-shop-key-0123456789abcdef0123456789";

/// The product's protection with the rate limits and the order-size limits off (a test is many
/// buyers from one address, buying what its scenario needs), and the shop's API key set.
pub fn test_protection() -> kassa::config::Protection {
    kassa::config::Protection {
        rate_limits: None,
        order_limits: kassa::domain::checkout::OrderLimits::NONE,
        shop_api_key: Some(SHOP_KEY.to_string()),
        ..Default::default()
    }
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            hold_seconds: 900,
            ignore_close: false,
            manual_clock: false,
            public_url: None,
            demo: false,
            late_policy: Default::default(),
            refund_window_days: None,
            webhook_url: None,
            alert_webhook_url: None,
            gateways: Default::default(),
            protection: test_protection(),
            allowed_return_origins: Vec::new(),
            time_zone: time::UtcOffset::UTC,
            email: None,
            case_due_margin_ms: kassa::domain::case::DUE_MARGIN_MS_DEFAULT,
        }
    }
}

pub struct TestApp {
    pub app: App,
    /// Dropped after the app (fields drop in order): the test's database goes with it.
    _database: TestDb,
    pub base: String,
    pub http: reqwest::Client,
    pub clock: Option<ManualClock>,
    pub database_url: String,
    _dir: tempfile::TempDir,
}

/// A test's own database: its URL, and (on PostgreSQL) the database dropped when this goes out of
/// scope — whether the test passed or panicked — so a run leaves no `kassa_t_*` database behind.
pub struct TestDb {
    pub url: String,
    /// The server and the database's name, on PostgreSQL.
    drop: Option<(String, String)>,
}

impl std::ops::Deref for TestDb {
    type Target = String;
    fn deref(&self) -> &String {
        &self.url
    }
}

impl std::fmt::Display for TestDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

impl Drop for TestDb {
    /// Drops the PostgreSQL database (FORCE closes whatever is still connected to it), on a thread
    /// of its own: a test's runtime may be shutting down.
    fn drop(&mut self) {
        let Some((server, name)) = self.drop.take() else { return };
        let dropper = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            rt.block_on(async {
                let _ = pg_admin(&server, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
            });
        });
        let _ = dropper.join();
    }
}

/// A fresh database for one test: a SQLite file in `dir`, or a new PostgreSQL database dropped with
/// the returned guard.
pub async fn fresh_database(backend: &Backend, dir: &std::path::Path) -> TestDb {
    match backend {
        Backend::Sqlite => TestDb { url: format!("sqlite://{}", dir.join("kassa.db").display()), drop: None },
        Backend::Postgres(server) => {
            let name = format!("kassa_t_{}", uuid::Uuid::now_v7().simple());
            pg_admin(server, &format!("CREATE DATABASE {name}")).await.expect("create test database");
            // The query may hold slashes of its own (`?host=/var/run/postgresql`): split it off first.
            let (path, query) =
                server.split_once('?').map_or((server.as_str(), String::new()), |(p, q)| (p, format!("?{q}")));
            let (prefix, _) = path.rsplit_once('/').expect("database URL ends with /dbname");
            TestDb { url: format!("{prefix}/{name}{query}"), drop: Some((server.clone(), name)) }
        }
    }
}

/// Runs `sql` (statements without parameters) on a connection of its own to the PostgreSQL server
/// at `url`: what a test does to databases as a whole (create, drop).
pub async fn pg_admin(url: &str, sql: &str) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let result = client.batch_execute(sql).await.map_err(|e| e.to_string());
    drop(client);
    let _ = driver.await;
    result
}

/// Drops the PostgreSQL database `url` names (FORCE closes whatever is still connected to it).
pub async fn drop_pg_database(url: &str) {
    let Some(Backend::Postgres(server)) = Backend::postgres() else { return };
    let name = url.rsplit('/').next().unwrap_or_default().split('?').next().unwrap_or_default().to_string();
    let _ = pg_admin(&server, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
}

/// Runs a script (statements without parameters) on a connection of its own to the database at
/// `url`, as an older kassa or an operator would have: outside kassa's store.
pub async fn run_script(url: &str, script: &str) {
    match url.strip_prefix("sqlite:") {
        Some(rest) => {
            let path = rest.trim_start_matches("//").split('?').next().unwrap_or_default();
            rusqlite::Connection::open(path).unwrap().execute_batch(script).unwrap();
        }
        None => pg_admin(url, script).await.unwrap(),
    }
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> TestApp {
        Self::spawn_with(backend, Opts::default()).await
    }

    pub async fn spawn_with(backend: Backend, opts: Opts) -> TestApp {
        let dir = tempfile::tempdir().expect("temp dir");
        let database = fresh_database(&backend, dir.path()).await;
        let database_url = database.url.clone();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let settings = Settings {
            data_dir: dir.path().to_path_buf(),
            database_url: database_url.clone(),
            listen: listener.local_addr().expect("addr"),
            public_url: opts.public_url.clone(),
            demo: opts.demo,
            sandbox: true,
            sandbox_ignore_close: opts.ignore_close,
            admin_token: Some(ADMIN.to_string()),
            hold_seconds: opts.hold_seconds,
            sweep_interval_ms: 3_600_000,
            late_payment_policy: opts.late_policy,
            refund_policy: kassa::domain::refund::RefundPolicy { window_days: opts.refund_window_days },
            webhook_url: opts.webhook_url.clone(),
            webhook_secret: opts.webhook_url.as_ref().map(|_| WEBHOOK_SECRET.to_string()),
            keys_secret: Some(KEYS_SECRET.to_string()),
            alert_webhook_url: opts.alert_webhook_url.clone(),
            gateways: opts.gateways.clone(),
            reconcile_after_ms: 60_000,
            reconcile_interval_ms: 3_600_000,
            protection: opts.protection.clone(),
            allowed_return_origins: opts
                .allowed_return_origins
                .iter()
                .map(|o| kassa::domain::shop::Origin::parse(o).expect("origin"))
                .collect(),
            time_zone: opts.time_zone.into(),
            statement_schedule: None,
            email: opts.email.clone(),
            case_due_margin_ms: opts.case_due_margin_ms,
            ..Settings::default()
        };
        let manual = opts.manual_clock.then(ManualClock::default);
        let clock: SharedClock = match &manual {
            Some(c) => Arc::new(c.clone()),
            None => Arc::new(SystemClock),
        };
        // Workers off: tests drive the sweeper and delivery steps themselves.
        let app = App::start(&settings, clock, listener, Workers::Off).await.expect("start kassa");
        let base = format!("http://{}", app.addr);
        TestApp { app, _database: database, base, http: reqwest::Client::new(), clock: manual, database_url, _dir: dir }
    }

    pub fn now_ms(&self) -> i64 {
        self.app.state.clock.now_ms()
    }

    /// The test's own data directory, for the commands it runs (`--data-dir`).
    pub fn data_dir(&self) -> String {
        self._dir.path().display().to_string()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn admin_post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let r = self.http.post(self.url(path)).bearer_auth(ADMIN).json(&body).send().await.expect("request");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn admin_get(&self, path: &str) -> Value {
        let r = self.http.get(self.url(path)).bearer_auth(ADMIN).send().await.expect("request");
        assert!(r.status().is_success(), "GET {path}: {}", r.status());
        r.json().await.expect("json")
    }

    /// Changes a SKU's price through the admin API (baskets keep the price they quoted).
    pub async fn set_price(&self, sku: &str, price_minor: i64) {
        let r = self
            .http
            .patch(self.url(&format!("/api/v1/admin/skus/{sku}")))
            .bearer_auth(ADMIN)
            .json(&json!({"price_minor": price_minor}))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), StatusCode::OK, "PATCH price of {sku}");
    }

    pub async fn create_sku(&self, sku: &str, name: &str, price_minor: i64, stock: i64) {
        let (status, body) = self
            .admin_post(
                "/api/v1/admin/skus",
                json!({"sku": sku, "name": name, "price_minor": price_minor, "currency": "CNY", "stock": stock}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }

    pub async fn sku(&self, sku: &str) -> Value {
        self.admin_get(&format!("/api/v1/admin/skus/{sku}")).await
    }

    pub async fn buyer(&self) -> String {
        let r = self.http.post(self.url("/api/v1/sessions")).send().await.expect("session");
        assert_eq!(r.status(), StatusCode::CREATED);
        let v: Value = r.json().await.expect("json");
        v["token"].as_str().expect("token").to_string()
    }

    pub async fn basket(&self, buyer: &str, lines: &[(&str, i64)]) -> String {
        let r = self.http.post(self.url("/api/v1/baskets")).bearer_auth(buyer).send().await.expect("basket");
        assert_eq!(r.status(), StatusCode::CREATED);
        let v: Value = r.json().await.expect("json");
        let id = v["basket_id"].as_str().expect("basket_id").to_string();
        for (sku, qty) in lines {
            let (status, answer) = self.put_line(buyer, &id, sku, *qty).await;
            assert_eq!(status, StatusCode::OK, "{answer}");
        }
        id
    }

    /// Reads a basket as `buyer`: the status and the JSON answer.
    pub async fn get_basket(&self, buyer: &str, basket: &str) -> (StatusCode, Value) {
        let r = self
            .http
            .get(self.url(&format!("/api/v1/baskets/{basket}")))
            .bearer_auth(buyer)
            .send()
            .await
            .expect("basket");
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }

    /// Sets a basket line (`PUT …/lines/{sku}`): the status and the JSON answer.
    pub async fn put_line(&self, buyer: &str, basket: &str, sku: &str, quantity: i64) -> (StatusCode, Value) {
        let r = self
            .http
            .put(self.url(&format!("/api/v1/baskets/{basket}/lines/{sku}")))
            .bearer_auth(buyer)
            .json(&json!({"quantity": quantity}))
            .send()
            .await
            .expect("line");
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }

    /// A checkout of `basket` by `buyer` with `body` (`POST /api/v1/baskets/{basket}/checkout`),
    /// for the caller to add headers to and send.
    pub fn checkout_request(&self, buyer: &str, basket: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http.post(self.url(&format!("/api/v1/baskets/{basket}/checkout"))).bearer_auth(buyer).json(body)
    }

    /// A checkout of `basket` by `buyer` with `body`: the status and the JSON answer.
    pub async fn checkout_with(&self, buyer: &str, basket: &str, body: &Value) -> (StatusCode, Value) {
        answer(self.checkout_request(buyer, basket, body).send().await.expect("checkout")).await
    }

    /// A checkout of `basket` by `buyer` in the sandbox, under `key` as its Idempotency-Key if
    /// given: the status and the JSON answer.
    pub async fn checkout(&self, buyer: &str, basket: &str, key: Option<&str>) -> (StatusCode, Value) {
        let mut req = self.checkout_request(buyer, basket, &json!({"gateway": "sandbox"}));
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        answer(req.send().await.expect("checkout")).await
    }

    /// A buyer with a pending order for `lines`: (buyer token, order_no, attempt_ref).
    pub async fn pending_order(&self, lines: &[(&str, i64)]) -> (String, String, String) {
        let buyer = self.buyer().await;
        let basket = self.basket(&buyer, lines).await;
        let (status, body) = self.checkout(&buyer, &basket, None).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        (buyer, s(&body["order_no"]), s(&body["attempt_ref"]))
    }

    pub async fn complete(&self, attempt_ref: &str, outcome: &str, copies: u32) -> (StatusCode, Value) {
        let r = self
            .http
            .post(self.url(&format!("/sandbox/api/payments/{attempt_ref}/complete")))
            .json(&json!({"outcome": outcome, "copies": copies}))
            .send()
            .await
            .expect("complete");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// What the return page polls for an attempt (`/checkout/return/{attempt_ref}/status`).
    pub async fn return_status(&self, attempt_ref: &str) -> Value {
        let url = self.url(&format!("/checkout/return/{attempt_ref}/status"));
        self.http.get(url).send().await.expect("status").json().await.expect("json")
    }

    pub async fn order(&self, order_no: &str) -> Value {
        self.admin_get(&format!("/api/v1/admin/orders/{order_no}")).await
    }

    pub async fn status(&self, order_no: &str) -> String {
        s(&self.order(order_no).await["status"])
    }

    /// Waits for the sandbox's in-flight notifications to be delivered (they are sent by spawned
    /// tasks). Bounded; this is synchronisation, not a timing assertion.
    pub async fn settle(&self) {
        let sandbox = self.app.sandbox.as_ref().expect("sandbox");
        for _ in 0..6_000 {
            if sandbox.pending_deliveries().await.expect("pending") == 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let stuck: Vec<(String, Option<String>)> =
            sql::query_as("SELECT body, last_error FROM sandbox_deliveries WHERE status = 'pending'")
                .fetch_all(sandbox.records().read_pool())
                .await
                .unwrap_or_default();
        panic!("sandbox deliveries did not settle: {stuck:?}");
    }

    pub async fn violations(&self) -> Vec<Violation> {
        check::run(&self.app.state.db).await.expect("check runs")
    }

    pub async fn assert_clean(&self) {
        let v = self.violations().await;
        assert!(v.is_empty(), "invariant violations: {v:#?}");
    }

    pub async fn count(&self, sql: &str) -> i64 {
        sql::query_scalar(sql).fetch_one(self.app.state.db.read_pool()).await.expect("count query")
    }

    /// The sandbox gateway's records (a file of their own on SQLite, kassa's database on PostgreSQL).
    pub fn sandbox_records(&self) -> &kassa::store::Db {
        self.app.sandbox.as_ref().expect("sandbox").records()
    }

    /// A count over the sandbox gateway's records.
    pub async fn sandbox_count(&self, sql: &str) -> i64 {
        sql::query_scalar(sql).fetch_one(self.sandbox_records().read_pool()).await.expect("count query")
    }
}

/// After a crash or a fleet run: every order whose confirm was answered 201 exists, and every
/// payment the gateway acknowledged ended up paying its order.
pub async fn assert_acknowledged(pool: kassa::store::Reader<'_>, orders: &[String], paid_attempts: &[String]) {
    for order_no in orders {
        let n: i64 = sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM orders WHERE order_no = $1")
            .bind(order_no)
            .fetch_one(pool)
            .await
            .expect("count orders");
        assert_eq!(n, 1, "acknowledged order {order_no} is missing");
    }
    for attempt_ref in paid_attempts {
        let status: String = sql::query_scalar(
            "SELECT o.status FROM orders o JOIN payment_attempts a ON a.order_no = o.order_no WHERE a.attempt_ref = $1",
        )
        .bind(attempt_ref)
        .fetch_one(pool)
        .await
        .expect("order of an attempt");
        assert_eq!(status, "paid", "payment of {attempt_ref} was taken but the order is {status}");
    }
}

/// Units of one SKU: (on_hand, reserved, sold, ordered by all reservations, released).
pub async fn ledger(pool: kassa::store::Reader<'_>, sku: &str) -> (i64, i64, i64, i64, i64) {
    let row = sql::query(
        "SELECT s.on_hand, s.reserved, s.sold, \
         CAST(COALESCE((SELECT SUM(quantity) FROM reservations r WHERE r.sku = s.sku), 0) AS BIGINT) AS ordered, \
         CAST(COALESCE((SELECT SUM(quantity) FROM reservations r WHERE r.sku = s.sku AND r.status = 'released'), 0) AS BIGINT) AS released \
         FROM skus s WHERE s.sku = $1",
    )
    .bind(sku)
    .fetch_one(pool)
    .await
    .expect("ledger query");
    (row.get("on_hand"), row.get("reserved"), row.get("sold"), row.get("ordered"), row.get("released"))
}

pub fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// A response's status and its JSON body (`null` when it has none).
pub async fn answer(r: reqwest::Response) -> (StatusCode, Value) {
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The value of the form field `name` in an HTML page (the first `name="…" value="…"`), as written
/// in the page (not unescaped).
pub fn form_value(html: &str, name: &str) -> String {
    let field = format!("name=\"{name}\" value=\"");
    let rest = html.split(&field).nth(1).unwrap_or_else(|| panic!("no {name} field in the page:\n{html}"));
    rest.split('"').next().unwrap_or_default().to_string()
}

/// The CSRF token of a page's forms (its hidden `csrf` field).
pub fn csrf_token(html: &str) -> String {
    form_value(html, "csrf")
}

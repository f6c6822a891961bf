//! The HTTP scenarios: a spawned (or running) kassa driven by simulated buyers.

use super::*;
use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use kassa::store::sql;

pub(super) struct Server {
    pub(super) base: String,
    pub(super) admin: String,
    pub(super) pid: Option<u32>,
    pub(super) child: Option<std::process::Child>,
    pub(super) database_url: Option<String>,
    /// The spawned server's settings that differ from `kassa serve`'s defaults.
    pub(super) settings: Vec<String>,
    pub(super) _dir: Option<ScratchDir>,
}

/// A scratch directory for one benchmark run, removed when the run ends.
pub(super) struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    pub(super) fn new() -> std::io::Result<ScratchDir> {
        let dir = std::env::temp_dir().join(format!("kassa-bench-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir)?;
        Ok(ScratchDir(dir))
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// How many times (25 ms apart) a spawned kassa is asked whether it is healthy: ten minutes.
const SERVER_START_POLLS: usize = 24_000;

/// How many times (500 ms apart) `/metrics` is read for the orders' first count: two minutes.
const COUNTED_SCRAPES_MAX: usize = 240;

/// The kassa under test, spawned or running, once it has counted its orders: its first read of
/// `/metrics` counts the orders by status (a whole-table read: seconds on a history of millions),
/// which a running instance did once, long ago. Waiting for it here keeps that count out of the
/// timed window, which then measures a shop on day 700 as it runs, not an instance's first minute.
pub(super) async fn start_server(args: &BenchArgs, hold_seconds: u64) -> anyhow::Result<Server> {
    let server = launch(args, hold_seconds).await?;
    let http = reqwest::Client::new();
    for _ in 0..COUNTED_SCRAPES_MAX {
        if scrape(&http, &server.base).await.lines().any(|l| l.starts_with("kassa_orders{")) {
            return Ok(server);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("the orders were not counted within {} s; measuring anyway", COUNTED_SCRAPES_MAX / 2);
    Ok(server)
}

async fn launch(args: &BenchArgs, hold_seconds: u64) -> anyhow::Result<Server> {
    if let Some(url) = &args.url {
        return Ok(Server {
            base: url.trim_end_matches('/').to_string(),
            admin: args.admin_token.clone().context("--url needs --admin-token")?,
            pid: args.server_pid,
            child: None,
            database_url: args.database_url.clone(),
            settings: Vec::new(),
            _dir: None,
        });
    }
    let dir = ScratchDir::new()?;
    let database_url =
        args.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", dir.join("kassa.db").display()));
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let admin = kassa::domain::ids::new_secret_token();
    // What differs from `kassa serve`'s defaults (the database, address and directory aside).
    let mut settings: Vec<String> = vec!["--sandbox".into()];
    settings.extend(["--hold-seconds".into(), hold_seconds.to_string(), "--sweep-interval-ms".into(), "500".into()]);
    if args.protections == "off" {
        settings.extend(["--rate-limits", "off", "--max-open-orders-per-session", "0"].map(String::from));
    }
    let bin = match &args.server_bin {
        Some(bin) => bin.clone(),
        None => std::env::current_exe()?,
    };
    let mut command = std::process::Command::new(&bin);
    if args.digital && std::env::var_os("KASSA_KEYS_SECRET").is_none() {
        command.env("KASSA_KEYS_SECRET", super::stock::keys_secret());
    }
    let child = command
        .args(["serve", "--database-url", &database_url, "--listen", &format!("127.0.0.1:{port}")])
        .args(&settings)
        .env("KASSA_ADMIN_TOKEN", &admin)
        .arg("--data-dir")
        .arg(&dir.0)
        .env("RUST_LOG", std::env::var("KASSA_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
        .stdout(std::process::Stdio::null())
        .stderr(if std::env::var("KASSA_BENCH_STDERR").is_ok() {
            std::process::Stdio::inherit()
        } else {
            std::process::Stdio::null()
        })
        .spawn()
        .with_context(|| format!("starting {} serve", bin.display()))?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let mut child = child;
    // A database with a long history may take a while to migrate.
    for _ in 0..SERVER_START_POLLS {
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the spawned kassa exited ({status}) before it was healthy");
        }
        if http.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(Server {
                base,
                admin,
                pid: Some(child.id()),
                child: Some(child),
                database_url: Some(database_url),
                settings,
                _dir: Some(dir),
            });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    anyhow::bail!("the spawned kassa did not become healthy")
}

/// The merchant the built-in sandbox gateway knows kassa as.
const SANDBOX_MERCHANT: &str = "kassa-demo-merchant";

/// The sandbox gateway's signing key, read from the database of the kassa under test (where the
/// sandbox keeps it), so the load generator can sign notifications as the gateway.
async fn sandbox_signer(server: &Server) -> anyhow::Result<aws_lc_rs::signature::Ed25519KeyPair> {
    let url = server.database_url.as_deref().context("notify-direct needs the server's --database-url")?;
    let db = Db::connect(url, 2).await?;
    let pkcs8: String = sql::query_scalar("SELECT value FROM settings WHERE name = 'sandbox.signing_key_pkcs8'")
        .fetch_one(db.read_pool())
        .await
        .context("reading the sandbox's signing key")?;
    db.close().await;
    let der = B64.decode(pkcs8).context("the sandbox's signing key is not base64")?;
    aws_lc_rs::signature::Ed25519KeyPair::from_pkcs8(&der).map_err(|e| anyhow::anyhow!("sandbox signing key: {e}"))
}

/// The server's `/metrics` page (open to this machine's clients), empty when it cannot be read.
async fn scrape(http: &reqwest::Client, base: &str) -> String {
    match http.get(format!("{base}/metrics")).send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

async fn metric(http: &reqwest::Client, base: &str, name: &str, label: &str) -> u64 {
    scrape(http, base)
        .await
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

/// The server's count of round trips to PostgreSQL at the start of a timed run (none on SQLite).
struct RoundTrips(Option<u64>);

impl RoundTrips {
    const METRIC: &str = "kassa_db_round_trips_total";

    async fn now(http: &reqwest::Client, server: &Server) -> RoundTrips {
        let postgres = server.database_url.as_deref().is_some_and(|u| u.starts_with("postgres"));
        RoundTrips(match postgres {
            true => Some(metric(http, &server.base, Self::METRIC, "").await),
            false => None,
        })
    }

    /// Round trips per operation since the start, over `ops` operations.
    async fn per_op(&self, http: &reqwest::Client, server: &Server, ops: u64) -> Option<f64> {
        let from = self.0?;
        let to = metric(http, &server.base, Self::METRIC, "").await;
        (ops > 0).then(|| to.saturating_sub(from) as f64 / ops as f64)
    }
}

fn code_of(body: &Value, status: reqwest::StatusCode) -> String {
    body["error"]["code"].as_str().map(str::to_string).unwrap_or_else(|| format!("http_{}", status.as_u16()))
}

/// What each simulated buyer does.
#[derive(Clone)]
struct Plan {
    /// Pay every n-th order (0: never).
    pay_every: usize,
    /// Add the line with a request of its own after creating an empty basket.
    line_request: bool,
    /// The promotion code every checkout names, if any.
    code: Option<Arc<str>>,
}

impl Plan {
    fn checkout_body(&self) -> Value {
        match &self.code {
            Some(code) => json!({"gateway": "sandbox", "promotion_code": code.as_ref()}),
            None => json!({"gateway": "sandbox"}),
        }
    }
}

pub(super) fn flow(line_request: bool) -> String {
    if line_request { "basket-then-line" } else { "basket-with-line" }.into()
}

/// Orders one simulated person places before the next person takes their place: the default
/// open-orders limit, well under every per-address rate limit's default.
const ORDERS_PER_PERSON: usize = kassa::domain::checkout::OPEN_ORDERS_PER_SESSION_DEFAULT as usize;

/// The people behind the simulated buyers: each has an address of their own, sent as a reverse
/// proxy would (`X-Forwarded-For`, which kassa believes from its default trusted proxies, the
/// loopback), so the per-address rate limits apply to each person as they do in production.
static PEOPLE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(1);

/// The next person's address, in 10.0.0.0/8 (16 million of them before one repeats).
fn next_person_addr() -> String {
    let n = PEOPLE.fetch_add(1, Ordering::Relaxed) & 0x00FF_FFFF;
    std::net::Ipv4Addr::from(0x0A00_0000 | n).to_string()
}

/// One person: an address and a buyer session.
struct Person {
    addr: String,
    token: String,
    orders: usize,
}

async fn new_person(http: &reqwest::Client, base: &str) -> Option<Person> {
    let addr = next_person_addr();
    let r = http.post(format!("{base}/api/v1/sessions")).header("x-forwarded-for", &addr).send().await.ok()?;
    let v = r.json::<Value>().await.ok()?;
    let token = v["token"].as_str()?.to_string();
    Some(Person { addr, token, orders: 0 })
}

/// One simulated buyer: basket, confirm, pay (when `pay`), until `stop`. A buyer is a stream of
/// people: each places up to [`ORDERS_PER_PERSON`] orders from their own address and session, and
/// one refused by the open-orders limit or a rate limit makes way for the next.
async fn buyer(
    http: reqwest::Client,
    base: String,
    skus: Arc<Vec<String>>,
    i: usize,
    plan: Plan,
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
) {
    let (pay_every, line_request, checkout_body) = (plan.pay_every, plan.line_request, plan.checkout_body());
    let mut person: Option<Person> = None;
    let mut n = 0_usize;
    while !stop.load(Ordering::Relaxed) {
        if person.as_ref().is_none_or(|p| p.orders >= ORDERS_PER_PERSON) {
            person = new_person(&http, &base).await;
        }
        let Some(p) = person.as_mut() else {
            *tally.lock().await.errors.entry("session".into()).or_default() += 1;
            // No session to be had: do not spin against a server that refuses them.
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        p.orders += 1;
        n += 1;
        let sku = &skus[(i * 7919 + n * 104_729) % skus.len()];
        let (addr, token) = (p.addr.as_str(), p.token.as_str());
        let step = async {
            let lines = if line_request { json!({}) } else { json!({"lines": [{"sku": sku, "quantity": 1}]}) };
            let basket: Value = http
                .post(format!("{base}/api/v1/baskets"))
                .bearer_auth(token)
                .header("x-forwarded-for", addr)
                .json(&lines)
                .send()
                .await?
                .json()
                .await?;
            let id = basket["basket_id"].as_str().unwrap_or_default().to_string();
            if line_request {
                http.put(format!("{base}/api/v1/baskets/{id}/lines/{sku}"))
                    .bearer_auth(token)
                    .header("x-forwarded-for", addr)
                    .json(&json!({"quantity": 1}))
                    .send()
                    .await?;
            }
            let started = Instant::now();
            let r = http
                .post(format!("{base}/api/v1/baskets/{id}/checkout"))
                .bearer_auth(token)
                .header("x-forwarded-for", addr)
                .json(&checkout_body)
                .send()
                .await?;
            let elapsed = started.elapsed();
            let status = r.status();
            let body: Value = r.json().await.unwrap_or_default();
            Ok::<_, reqwest::Error>((elapsed, status, body))
        };
        let (elapsed, status, body) = match step.await {
            Ok(x) => x,
            Err(_) => {
                *tally.lock().await.errors.entry("transport".into()).or_default() += 1;
                continue;
            }
        };
        let mut t = tally.lock().await;
        t.confirm_us.push(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
        if status == reqwest::StatusCode::CREATED {
            t.confirms += 1;
            t.last_confirm = Some(Instant::now());
            let attempt_ref = body["attempt_ref"].as_str().unwrap_or_default().to_string();
            t.placed.push(body["order_no"].as_str().unwrap_or_default().to_string());
            t.attempts.push((
                attempt_ref.clone(),
                body["total_minor"].as_i64().unwrap_or_default(),
                body["currency"].as_str().unwrap_or_default().to_string(),
            ));
            drop(t);
            if pay_every > 0 && n.is_multiple_of(pay_every) {
                let url = format!("{base}/sandbox/api/payments/{attempt_ref}/complete");
                if http.post(url).json(&json!({"outcome": "succeeded", "copies": 1})).send().await.is_err() {
                    *tally.lock().await.errors.entry("transport".into()).or_default() += 1;
                }
            }
        } else {
            let code = code_of(&body, status);
            *t.errors.entry(code.clone()).or_default() += 1;
            drop(t);
            if matches!(code.as_str(), "too_many_open_orders" | "rate_limited") {
                // This person is done; the next one steps up.
                person = None;
            } else if code == "out_of_stock" {
                // Sold out: nothing more to buy; keep the request rate honest but do not spin.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

pub(super) async fn http_scenario(args: &BenchArgs) -> anyhow::Result<Report> {
    let scenario = args.scenario.as_str();
    let hold = if scenario == "mixed" { 2 } else { 900 };
    let server = start_server(args, hold).await?;
    let http = reqwest::Client::builder().pool_max_idle_per_host(args.buyers * 2).build()?;
    let skus: Vec<String> = match scenario {
        "hot" | "notify" | "notify-direct" => vec!["HOT".to_string()],
        _ => (0..SPREAD_SKUS).map(|i| format!("BENCH-{i:04}")).collect(),
    };
    let hot_stock = (scenario == "hot").then_some(args.hot_stock);
    let stock = hot_stock.unwrap_or(SPREAD_STOCK);
    for sku in &skus {
        super::stock::stock_sku(args, &http, &server.base, &server.admin, sku, stock).await?;
    }
    let applied_before = metric(&http, &server.base, "kassa_notifications_total", "result=\"applied\"").await;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    if scenario == "notify" || scenario == "notify-direct" {
        // Place the orders first (not timed), then time the notifications alone.
        let stop = Arc::new(AtomicBool::new(false));
        let mut set = tokio::task::JoinSet::new();
        let skus = Arc::new(skus.clone());
        for i in 0..args.buyers {
            let plan = Plan { pay_every: 0, line_request: args.line_request, code: None };
            set.spawn(buyer(http.clone(), server.base.clone(), skus.clone(), i, plan, stop.clone(), tally.clone()));
        }
        tokio::time::sleep(Duration::from_secs(args.seconds.max(2) / 2)).await;
        stop.store(true, Ordering::Relaxed);
        while set.join_next().await.is_some() {}
        let orders = tally.lock().await.placed.clone();
        // notify-direct: the load generator sends the gateway's signed notifications itself, as a
        // gateway does from its own machines; `notify` has the built-in sandbox send them, so its
        // bookkeeping (three writes and two signatures per notification) runs in the server too.
        let signer = if scenario == "notify-direct" { Some(Arc::new(sandbox_signer(&server).await?)) } else { None };
        let attempts = tally.lock().await.attempts.clone();
        let timer = Instant::now();
        let cpu = CpuMark::now(&server);
        let trips = RoundTrips::now(&http, &server).await;
        let queue = Arc::new(Mutex::new(attempts));
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..args.buyers {
            let (http, base, queue, signer) = (http.clone(), server.base.clone(), queue.clone(), signer.clone());
            set.spawn(async move {
                loop {
                    let Some((attempt_ref, amount_minor, currency)) = queue.lock().await.pop() else { return };
                    let Some(key) = &signer else {
                        let url = format!("{base}/sandbox/api/payments/{attempt_ref}/complete");
                        let _ = http.post(url).json(&json!({"outcome": "succeeded", "copies": 2})).send().await;
                        continue;
                    };
                    let body = json!({
                        "event_id": format!("evt_{}", uuid::Uuid::now_v7().simple()),
                        "event_type": "payment.succeeded",
                        "merchant_id": SANDBOX_MERCHANT,
                        "attempt_ref": attempt_ref,
                        "txn_id": format!("txn_{}", uuid::Uuid::now_v7().simple()),
                        "amount_minor": amount_minor,
                        "currency": currency,
                        "created_at": SystemClock.now_ms() / 1000,
                    })
                    .to_string();
                    // Two copies of each, as gateways send them: one applied, one a duplicate.
                    for _ in 0..2 {
                        let t = SystemClock.now_ms() / 1000;
                        let sig = B64.encode(key.sign(format!("{t}.{body}").as_bytes()).as_ref());
                        let _ = http
                            .post(format!("{base}/notify/sandbox"))
                            .header("content-type", "application/json")
                            .header(kassa::sandbox::protocol::SIGNATURE_HEADER, format!("t={t},v1={sig}"))
                            .body(body.clone())
                            .send()
                            .await;
                    }
                }
            });
        }
        while set.join_next().await.is_some() {}
        let want = applied_before + orders.len() as u64;
        for _ in 0..6000 {
            if metric(&http, &server.base, "kassa_notifications_total", "result=\"applied\"").await >= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let secs = timer.elapsed().as_secs_f64();
        let applied =
            metric(&http, &server.base, "kassa_notifications_total", "result=\"applied\"").await - applied_before;
        let (cpu_ms_per_op, cpu_ceiling_per_s) = cpu.per_op(&CpuMark::now(&server), applied);
        let db_round_trips_per_op = trips.per_op(&http, &server, applied).await;
        let t = tally.lock().await;
        return finish(
            args,
            &server,
            Report {
                scenario: scenario.into(),
                seconds: secs,
                notifications_applied: applied,
                notifications_per_s: applied as f64 / secs,
                errors: t.errors.clone(),
                cpu_ms_per_op,
                cpu_ceiling_per_s,
                db_round_trips_per_op,
                ..Default::default()
            },
        )
        .await;
    }
    let pay_every = match scenario {
        "mixed" => 2,
        // Basket and confirm only: the orders stay pending (900 s holds), as the engine's spread.
        "checkout" => 0,
        _ => 1,
    };
    let plan = Plan { pay_every, line_request: args.line_request, code: None };
    let cpu = CpuMark::now(&server);
    let trips = RoundTrips::now(&http, &server).await;
    run_buyers(args, &http, &server, Arc::new(skus), &plan, &tally).await;
    let secs = started.elapsed().as_secs_f64();
    // Let in-flight notifications land (bounded), then count what was applied in the run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let applied = metric(&http, &server.base, "kassa_notifications_total", "result=\"applied\"").await - applied_before;
    let mut t = tally.lock().await;
    let (cpu_ms_per_op, cpu_ceiling_per_s) = cpu.per_op(&CpuMark::now(&server), t.confirms);
    let db_round_trips_per_op = trips.per_op(&http, &server, t.confirms).await;
    let mut oversold = 0;
    if scenario == "hot" {
        let r = http.get(format!("{}/api/v1/admin/skus/HOT", server.base)).bearer_auth(&server.admin).send().await?;
        let v: Value = r.json().await?;
        let taken = v["reserved"].as_i64().unwrap_or(0) + v["sold"].as_i64().unwrap_or(0);
        oversold = (taken - stock).max(0) + (i64::try_from(t.confirms).unwrap_or(0) - stock).max(0);
    }
    let promotion = match args.promotion {
        true => {
            let before = t.confirms as f64 / selling_secs(&t, hot_stock, started, secs);
            wait_applied(&http, &server, applied_before + t.confirms).await;
            Some(promotion_sale(args, &http, &server, plan, before).await?)
        }
        false => None,
    };
    let report = Report {
        promotion,
        scenario: if args.digital { format!("{scenario}-digital") } else { scenario.into() },
        seconds: secs,
        confirms: t.confirms,
        confirms_per_s: t.confirms as f64 / selling_secs(&t, hot_stock, started, secs),
        notifications_applied: applied,
        notifications_per_s: applied as f64 / secs,
        latency_ms: latency(std::mem::take(&mut t.confirm_us)),
        errors: t.errors.clone(),
        oversold,
        stock: hot_stock,
        cpu_ms_per_op,
        cpu_ceiling_per_s,
        db_round_trips_per_op,
        ..Default::default()
    };
    drop(t);
    finish(args, &server, report).await
}

/// Waits (at most a minute) until `want` notifications are applied in all: a sale's payments
/// land before the next sale begins, so that each sale is timed alone.
async fn wait_applied(http: &reqwest::Client, server: &Server, want: u64) {
    for _ in 0..6000 {
        if metric(http, &server.base, "kassa_notifications_total", "result=\"applied\"").await >= want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A flash sale of `stock` units of a new SKU, `sku`, by `args.buyers` buyers following `plan`:
/// its rate up to its last sale, and its tally.
async fn sale(
    args: &BenchArgs,
    http: &reqwest::Client,
    server: &Server,
    plan: &Plan,
    sku: &str,
) -> anyhow::Result<(f64, Tally)> {
    let stock = args.hot_stock;
    super::stock::stock_sku(args, http, &server.base, &server.admin, sku, stock).await?;
    let applied_before = metric(http, &server.base, "kassa_notifications_total", "result=\"applied\"").await;
    let tally = Arc::new(Mutex::new(Tally::default()));
    let started = Instant::now();
    run_buyers(args, http, server, Arc::new(vec![sku.to_string()]), plan, &tally).await;
    let secs = started.elapsed().as_secs_f64();
    let t = std::mem::take(&mut *tally.lock().await);
    wait_applied(http, server, applied_before + t.confirms).await;
    Ok((t.confirms as f64 / selling_secs(&t, Some(stock), started, secs), t))
}

/// Runs `args.buyers` simulated buyers on `skus` for `args.seconds`.
async fn run_buyers(
    args: &BenchArgs,
    http: &reqwest::Client,
    server: &Server,
    skus: Arc<Vec<String>>,
    plan: &Plan,
    tally: &Arc<Mutex<Tally>>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..args.buyers {
        let (http, base) = (http.clone(), server.base.clone());
        set.spawn(buyer(http, base, skus.clone(), i, plan.clone(), stop.clone(), tally.clone()));
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    while set.join_next().await.is_some() {}
}

/// The promotion's code in `hot --promotion`.
const SALE_CODE: &str = "FLASH-SALE";

/// `hot --promotion`: the flash sale again on a SKU of its own, every checkout naming a code of
/// 10 % off with as many uses as units, then once more without a code; the code's rate beside
/// the mean of the sales without one before and after it (a run's drift, as its database grows,
/// weighs on both sides alike), and whether the code's and the stock's limits held.
async fn promotion_sale(
    args: &BenchArgs,
    http: &reqwest::Client,
    server: &Server,
    plan: Plan,
    before: f64,
) -> anyhow::Result<super::PromotionFigures> {
    const SKU: &str = "HOT-PROMO";
    let stock = args.hot_stock;
    let r = http
        .post(format!("{}/api/v1/admin/promotions", server.base))
        .bearer_auth(&server.admin)
        .json(&json!({"name": "Flash sale", "code": SALE_CODE, "percent_off": 10, "max_uses": stock, "skus": [SKU]}))
        .send()
        .await?;
    let created: Value = r.json().await?;
    let id = created["id"].as_str().context("the promotion was not created")?.to_string();
    let coded = Plan { code: Some(Arc::from(SALE_CODE)), ..plan.clone() };
    let (with, t) = sale(args, http, server, &coded, SKU).await?;
    let get = |path: String| async move {
        let r = http.get(format!("{}{path}", server.base)).bearer_auth(&server.admin).send().await?;
        anyhow::Ok(r.json::<Value>().await?)
    };
    let p = get(format!("/api/v1/admin/promotions/{id}")).await?;
    let sku = get(format!("/api/v1/admin/skus/{SKU}")).await?;
    let (after, _) = sale(args, http, server, &plan, "HOT-AFTER").await?;
    let without = f64::midpoint(before, after);
    let uses = p["uses"].as_i64().unwrap_or(0);
    let orders = i64::try_from(t.confirms).unwrap_or(i64::MAX);
    let taken = sku["reserved"].as_i64().unwrap_or(0) + sku["sold"].as_i64().unwrap_or(0);
    Ok(super::PromotionFigures {
        confirms_per_s_without: without,
        confirms_per_s_without_each: [before, after],
        confirms_per_s_with: with,
        ratio: if without > 0.0 { with / without } else { 0.0 },
        orders_with_code: t.confirms,
        uses,
        max_uses: stock,
        over_used: (uses - stock).max(0) + (uses - orders).abs(),
        oversold: (taken - stock).max(0) + (orders - stock).max(0),
    })
}

pub(super) async fn finish(args: &BenchArgs, server: &Server, mut report: Report) -> anyhow::Result<Report> {
    report.mode = if args.url.is_some() { "http (external server)".into() } else { "http (spawned server)".into() };
    report.buyers = args.buyers;
    report.settings = server.settings.clone();
    report.flow = flow(args.line_request);
    report.server_peak_rss_mb = server.pid.and_then(peak_rss_mb);
    if let Some(url) = &server.database_url {
        report.database = url.split(':').next().unwrap_or_default().to_string();
        let checking = Instant::now();
        report.check_violations = Some(match &args.server_bin {
            // The server's own `kassa check`: its schema may differ from this binary's.
            Some(bin) => check_with(bin, url)?,
            None => {
                // What the run changed, beside what a clean run before it read.
                let db = Db::connect(url, 4).await?;
                let scope = kassa::store::check::since_last_clean(&db).await?;
                let (violations, checked) = kassa::store::check::run_scoped(&db, None, scope).await?;
                if violations.is_empty() {
                    kassa::store::check::record_clean(&db, checked).await?;
                }
                db.close().await;
                violations.len()
            }
        });
        report.check_seconds = Some(checking.elapsed().as_secs_f64());
    }
    Ok(report)
}

/// Runs `BIN check` on the database and returns how many violations it reported.
fn check_with(bin: &std::path::Path, url: &str) -> anyhow::Result<usize> {
    let out = std::process::Command::new(bin)
        .args(["check", "--database-url", url])
        .output()
        .with_context(|| format!("running {} check", bin.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match out.status.code() {
        Some(0) => Ok(0),
        Some(1) => stdout
            .lines()
            .find_map(|l| l.strip_suffix(" violation(s)").and_then(|n| n.trim().parse().ok()))
            .context("kassa check reported violations without a count"),
        _ => anyhow::bail!("{} check could not run: {}", bin.display(), String::from_utf8_lossy(&out.stderr).trim()),
    }
}

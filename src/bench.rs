#![allow(clippy::float_arithmetic, clippy::cast_possible_truncation)] // rates and percentiles for a report, never money
//! `kassa bench`: measures kassa the way a shop would before a flash sale.
//!
//! - HTTP scenarios drive a running kassa (or one this command starts, `--spawn`, the default
//!   without `--url`) with N concurrent simulated buyers through the full flow: session, basket,
//!   confirm, sandbox payment, notification applied. `spread` spreads buyers over many SKUs; `hot`
//!   puts every buyer on one SKU with limited stock; `notify` measures notifications alone (with
//!   duplicates); `mixed` lets a share of the orders expire while others pay; `checkout` is
//!   `spread` without the payment (basket and confirm only, the orders left pending as in a flash
//!   sale whose buyers pay over the following minutes: the engine's `spread` flow, over HTTP).
//! - `--engine` runs confirms and notifications in-process against the store (no HTTP), so the
//!   cost of the engine and of the HTTP layer can be told apart.
//! - `--scenario commit-limit` measures the limit: a loop of single durable SQLite commits.
//!
//! It reports confirms/s, notifications applied/s, confirm latency percentiles, errors by code,
//! oversold units (must be 0) and the server's peak RSS, as a table and as JSON, and ends with the
//! invariant checker.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::clock::{Clock as _, SystemClock};
use crate::store::Db;

/// Units on hand per SKU in the `spread` scenario: effectively unlimited.
const SPREAD_STOCK: i64 = 1_000_000;
/// SKUs in the `spread` scenario.
const SPREAD_SKUS: usize = 200;
/// Baskets each buyer prepares before the clock starts in the engine's `confirm` scenario.
const PREPARED_BASKETS: usize = 150;
/// Units of the one SKU in the `hot` scenario (the flash sale), unless `--hot-stock` says otherwise.
const HOT_STOCK: i64 = 5_000;

#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// spread | hot | notify | notify-direct | mixed | checkout (spread without the payment) |
    /// commit-limit | confirm (engine only: confirms alone)
    #[arg(long, default_value = "spread")]
    pub scenario: String,
    /// Concurrent simulated buyers
    #[arg(long, default_value_t = 64)]
    pub buyers: usize,
    /// How long to drive load, in seconds
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// A running kassa to drive (started with --sandbox); without it, one is spawned
    #[arg(long)]
    pub url: Option<String>,
    /// Admin token of the running kassa (with --url)
    #[arg(long, env = "KASSA_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// Database of the kassa under test: where a spawned one stores its data (default: a fresh
    /// SQLite file), and what `kassa check` runs on at the end
    #[arg(long)]
    pub database_url: Option<String>,
    /// PID of the server under test (with --url), for its peak RSS
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// In-process engine benchmark (no HTTP)
    #[arg(long)]
    pub engine: bool,
    /// Add each basket's line with a request of its own (`PUT …/lines/{sku}`, one more request
    /// and write per purchase) instead of creating the basket with it
    #[arg(long)]
    pub line_request: bool,
    /// Units of the one SKU in the `hot` scenario. At a few thousand sales a second the default
    /// sells out within two seconds; more units measure a longer sale
    #[arg(long, default_value_t = HOT_STOCK)]
    pub hot_stock: i64,
    /// Write the JSON report here as well
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub scenario: String,
    pub mode: String,
    /// How each buyer builds a basket: `basket-with-line` (one request) or `basket-then-line`.
    pub flow: String,
    pub database: String,
    pub buyers: usize,
    pub seconds: f64,
    pub confirms: u64,
    pub confirms_per_s: f64,
    pub notifications_applied: u64,
    pub notifications_per_s: f64,
    pub latency_ms: BTreeMap<String, f64>,
    pub errors: BTreeMap<String, u64>,
    pub oversold: i64,
    /// Units of the one SKU (`hot` only).
    pub stock: Option<i64>,
    pub server_peak_rss_mb: Option<f64>,
    /// CPU milliseconds per confirm (per notification applied in `notify` and `notify-direct`)
    /// over the timed run, by process: `server`, `load_generator`, and `postgres` (all of
    /// PostgreSQL's processes, when it runs on this machine). HTTP runs only; the server's share
    /// needs its PID (a spawned server, or `--server-pid`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub cpu_ms_per_op: BTreeMap<String, f64>,
    /// The rate at which the server and PostgreSQL would keep every core of this machine busy at
    /// the CPU per operation measured: an estimate of the figure with the load generator on a host
    /// of its own (it holds where the run was bound by CPU, as on these 2-core machines).
    pub cpu_ceiling_per_s: Option<f64>,
    pub commits_per_s: Option<f64>,
    pub check_violations: Option<usize>,
}

#[derive(Default)]
struct Tally {
    confirm_us: Vec<u64>,
    confirms: u64,
    /// When the last confirm succeeded: a sold-out flash sale is measured up to its last sale.
    last_confirm: Option<Instant>,
    errors: BTreeMap<String, u64>,
    placed: Vec<String>,
    /// Attempt reference, amount and currency of each order placed (HTTP scenarios).
    attempts: Vec<(String, i64, String)>,
}

/// The seconds confirms are counted over: the whole run, or for a flash sale of `stock` units that
/// sold out, up to its last sale (afterwards every buyer only meets `out_of_stock`).
fn selling_secs(t: &Tally, stock: Option<i64>, started: Instant, secs: f64) -> f64 {
    match (t.last_confirm, stock) {
        (Some(last), Some(stock)) if i64::try_from(t.confirms).unwrap_or(i64::MAX) >= stock => {
            last.duration_since(started).as_secs_f64().max(0.001)
        }
        _ => secs,
    }
}

fn percentile(sorted: &[u64], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = (sorted.len() * p / 100).min(sorted.len() - 1);
    sorted[idx] as f64 / 1000.0
}

fn latency(mut us: Vec<u64>) -> BTreeMap<String, f64> {
    us.sort_unstable();
    let mut m = BTreeMap::new();
    for (name, p) in [("p50", 50), ("p95", 95), ("p99", 99)] {
        m.insert(name.to_string(), percentile(&us, p));
    }
    m.insert("max".to_string(), us.last().map(|v| *v as f64 / 1000.0).unwrap_or(0.0));
    m
}

/// Clock ticks per second of `/proc`'s CPU times (Linux's `USER_HZ`, 100 on every platform it
/// runs on).
const USER_HZ: f64 = 100.0;

/// A process's command name and the CPU time (user and system, all threads) in milliseconds it
/// has used, and that its ended children it waited for used, from its `/proc/<pid>/stat` line.
fn stat_cpu_ms(stat: &str) -> Option<(&str, f64, f64)> {
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    // After the name: state is field 3 of the line; utime, stime, cutime, cstime 14 to 17.
    let own = ticks(11)? + ticks(12)?;
    let children = ticks(13)? + ticks(14)?;
    Some((comm, own as f64 * 1000.0 / USER_HZ, children as f64 * 1000.0 / USER_HZ))
}

fn process_cpu_ms(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat_cpu_ms(&stat).map(|(_, own, _)| own)
}

/// CPU time used by PostgreSQL on this machine (None if it runs elsewhere): every process named
/// `postgres`, and the ended ones their parent (the postmaster) waited for.
fn postgres_cpu_ms() -> Option<f64> {
    let mut total = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some(("postgres", own, children)) = stat_cpu_ms(&stat) {
            total = Some(total.unwrap_or(0.0) + own + children);
        }
    }
    total
}

/// CPU used so far by the server, the load generator (this process) and PostgreSQL.
struct CpuMark {
    server: Option<f64>,
    load_generator: Option<f64>,
    postgres: Option<f64>,
}

impl CpuMark {
    fn now(server: &Server) -> CpuMark {
        let postgres = server.database_url.as_deref().is_some_and(|u| u.starts_with("postgres"));
        CpuMark {
            server: server.pid.and_then(process_cpu_ms),
            load_generator: process_cpu_ms(std::process::id()),
            postgres: if postgres { postgres_cpu_ms() } else { None },
        }
    }

    /// CPU per operation since `self`, by process, and the rate that would keep every core busy.
    fn per_op(&self, end: &CpuMark, ops: u64) -> (BTreeMap<String, f64>, Option<f64>) {
        let mut per_op = BTreeMap::new();
        if ops == 0 {
            return (per_op, None);
        }
        let parts = [
            ("server", self.server, end.server),
            ("load_generator", self.load_generator, end.load_generator),
            ("postgres", self.postgres, end.postgres),
        ];
        for (name, from, to) in parts {
            if let (Some(from), Some(to)) = (from, to) {
                per_op.insert(name.to_string(), (to - from) / ops as f64);
            }
        }
        let serving = per_op.get("server").map(|ms| ms + per_op.get("postgres").copied().unwrap_or(0.0));
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
        (per_op, serving.filter(|ms| *ms > 0.0).map(|ms| cores * 1000.0 / ms))
    }
}

/// Peak resident set of a process, from /proc (Linux).
fn peak_rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

struct Server {
    base: String,
    admin: String,
    pid: Option<u32>,
    child: Option<std::process::Child>,
    database_url: Option<String>,
    _dir: Option<ScratchDir>,
}

/// A scratch directory for one benchmark run, removed when the run ends.
struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    fn new() -> std::io::Result<ScratchDir> {
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

async fn start_server(args: &BenchArgs, hold_seconds: u64) -> anyhow::Result<Server> {
    if let Some(url) = &args.url {
        return Ok(Server {
            base: url.trim_end_matches('/').to_string(),
            admin: args.admin_token.clone().context("--url needs --admin-token")?,
            pid: args.server_pid,
            child: None,
            database_url: args.database_url.clone(),
            _dir: None,
        });
    }
    let dir = ScratchDir::new()?;
    let database_url =
        args.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", dir.join("kassa.db").display()));
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let admin = crate::domain::ids::new_secret_token();
    let child = std::process::Command::new(std::env::current_exe()?)
        .args(["serve", "--sandbox", "--database-url", &database_url, "--listen", &format!("127.0.0.1:{port}")])
        .args(["--hold-seconds", &hold_seconds.to_string(), "--sweep-interval-ms", "500"])
        // Through the environment, not argv: the process list is readable by every local user.
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
        .context("starting kassa serve")?;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..400 {
        if http.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status().is_success()) {
            return Ok(Server {
                base,
                admin,
                pid: Some(child.id()),
                child: Some(child),
                database_url: Some(database_url),
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
    let pkcs8: String = sqlx::query_scalar("SELECT value FROM settings WHERE name = 'sandbox.signing_key_pkcs8'")
        .fetch_one(db.read_pool())
        .await
        .context("reading the sandbox's signing key")?;
    db.close().await;
    let der = B64.decode(pkcs8).context("the sandbox's signing key is not base64")?;
    aws_lc_rs::signature::Ed25519KeyPair::from_pkcs8(&der).map_err(|e| anyhow::anyhow!("sandbox signing key: {e}"))
}

async fn metric(http: &reqwest::Client, base: &str, name: &str, label: &str) -> u64 {
    let Ok(r) = http.get(format!("{base}/metrics")).send().await else { return 0 };
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

async fn create_sku(http: &reqwest::Client, s: &Server, sku: &str, stock: i64) -> anyhow::Result<()> {
    let r = http
        .post(format!("{}/api/v1/admin/skus", s.base))
        .bearer_auth(&s.admin)
        .json(&json!({"sku": sku, "name": sku, "price_minor": 990, "currency": "CNY", "stock": stock}))
        .send()
        .await?;
    if !(r.status().is_success() || r.status() == reqwest::StatusCode::CONFLICT) {
        anyhow::bail!("creating SKU {sku}: {}", r.status());
    }
    Ok(())
}

fn code_of(body: &Value, status: reqwest::StatusCode) -> String {
    body["error"]["code"].as_str().map(str::to_string).unwrap_or_else(|| format!("http_{}", status.as_u16()))
}

/// One simulated buyer: basket, confirm, pay (when `pay`), until `stop`.
/// What each simulated buyer does.
#[derive(Clone, Copy)]
struct Plan {
    /// Pay every n-th order (0: never).
    pay_every: usize,
    /// Add the line with a request of its own after creating an empty basket.
    line_request: bool,
}

fn flow(line_request: bool) -> String {
    if line_request { "basket-then-line" } else { "basket-with-line" }.into()
}

async fn buyer(
    http: reqwest::Client,
    base: String,
    skus: Arc<Vec<String>>,
    i: usize,
    plan: Plan,
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
) {
    let Plan { pay_every, line_request } = plan;
    let Ok(r) = http.post(format!("{base}/api/v1/sessions")).send().await else { return };
    let Ok(v) = r.json::<Value>().await else { return };
    let token = v["token"].as_str().unwrap_or_default().to_string();
    let mut n = 0_usize;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let sku = &skus[(i * 7919 + n * 104_729) % skus.len()];
        let step = async {
            let lines = if line_request { json!({}) } else { json!({"lines": [{"sku": sku, "quantity": 1}]}) };
            let basket: Value = http
                .post(format!("{base}/api/v1/baskets"))
                .bearer_auth(&token)
                .json(&lines)
                .send()
                .await?
                .json()
                .await?;
            let id = basket["basket_id"].as_str().unwrap_or_default().to_string();
            if line_request {
                http.put(format!("{base}/api/v1/baskets/{id}/lines/{sku}"))
                    .bearer_auth(&token)
                    .json(&json!({"quantity": 1}))
                    .send()
                    .await?;
            }
            let started = Instant::now();
            let r = http
                .post(format!("{base}/api/v1/baskets/{id}/checkout"))
                .bearer_auth(&token)
                .json(&json!({"gateway": "sandbox"}))
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
            *t.errors.entry(code_of(&body, status)).or_default() += 1;
            if status == reqwest::StatusCode::CONFLICT && body["error"]["code"] == "out_of_stock" {
                drop(t);
                // Sold out: nothing more to buy; keep the request rate honest but do not spin.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

async fn http_scenario(args: &BenchArgs) -> anyhow::Result<Report> {
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
        create_sku(&http, &server, sku, stock).await?;
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
            let plan = Plan { pay_every: 0, line_request: args.line_request };
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
                            .header(crate::gateway::sandbox::SIGNATURE_HEADER, format!("t={t},v1={sig}"))
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
    let stop = Arc::new(AtomicBool::new(false));
    let mut set = tokio::task::JoinSet::new();
    let skus = Arc::new(skus);
    let cpu = CpuMark::now(&server);
    for i in 0..args.buyers {
        let plan = Plan { pay_every, line_request: args.line_request };
        set.spawn(buyer(http.clone(), server.base.clone(), skus.clone(), i, plan, stop.clone(), tally.clone()));
    }
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    while set.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64();
    // Let in-flight notifications land (bounded), then count what was applied in the run.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let applied = metric(&http, &server.base, "kassa_notifications_total", "result=\"applied\"").await - applied_before;
    let mut t = tally.lock().await;
    let (cpu_ms_per_op, cpu_ceiling_per_s) = cpu.per_op(&CpuMark::now(&server), t.confirms);
    let mut oversold = 0;
    if scenario == "hot" {
        let r = http.get(format!("{}/api/v1/admin/skus/HOT", server.base)).bearer_auth(&server.admin).send().await?;
        let v: Value = r.json().await?;
        let taken = v["reserved"].as_i64().unwrap_or(0) + v["sold"].as_i64().unwrap_or(0);
        oversold = (taken - stock).max(0) + (i64::try_from(t.confirms).unwrap_or(0) - stock).max(0);
    }
    let report = Report {
        scenario: scenario.into(),
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
        ..Default::default()
    };
    drop(t);
    finish(args, &server, report).await
}

async fn finish(args: &BenchArgs, server: &Server, mut report: Report) -> anyhow::Result<Report> {
    report.mode = if args.url.is_some() { "http (external server)".into() } else { "http (spawned server)".into() };
    report.buyers = args.buyers;
    report.flow = flow(args.line_request);
    report.server_peak_rss_mb = server.pid.and_then(peak_rss_mb);
    if let Some(url) = &server.database_url {
        report.database = url.split(':').next().unwrap_or_default().to_string();
        let db = Db::connect(url, 4).await?;
        report.check_violations = Some(crate::store::check::run(&db).await?.len());
        db.close().await;
    }
    Ok(report)
}

/// In-process: the store alone, no HTTP.
async fn engine_scenario(args: &BenchArgs) -> anyhow::Result<Report> {
    use crate::store::{catalog, checkout, payments};
    let dir = ScratchDir::new()?;
    let url = args.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", dir.join("kassa.db").display()));
    let db = Db::connect(&url, 32).await?;
    db.migrate().await?;
    let now = SystemClock.now_ms();
    let hot = args.scenario == "hot";
    let hot_stock = hot.then_some(args.hot_stock);
    let cny = crate::domain::Currency::parse("CNY")?;
    let skus: Vec<String> =
        if hot { vec!["HOT".into()] } else { (0..SPREAD_SKUS).map(|i| format!("E-{i:04}")).collect() };
    for sku in &skus {
        let new = catalog::NewSku {
            sku: sku.clone(),
            name: sku.clone(),
            kind: catalog::SkuKind::Physical,
            price: crate::domain::Money::new(990, cny)?,
            stock: hot_stock.unwrap_or(SPREAD_STOCK),
        };
        catalog::create_sku(&db, &new, true, now).await?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut set = tokio::task::JoinSet::new();
    let skus = Arc::new(skus);
    // `confirm`: baskets are prepared before the clock starts, so only confirms are timed.
    let confirm_only = args.scenario == "confirm";
    let line_request = args.line_request;
    let start = Arc::new(tokio::sync::Barrier::new(args.buyers + 1));
    for i in 0..args.buyers {
        let (db, stop, tally, skus, start) = (db.clone(), stop.clone(), tally.clone(), skus.clone(), start.clone());
        set.spawn(async move {
            let session = catalog::create_session(&db, SystemClock.now_ms()).await.ok().map(|(_, s)| s);
            let mut prepared = Vec::new();
            if let (true, Some(session)) = (confirm_only, &session) {
                for n in 0..PREPARED_BASKETS {
                    let now = SystemClock.now_ms();
                    let Ok(basket) = catalog::create_basket(&db, &session.id, now).await else { continue };
                    let sku = &skus[(i * 7919 + n * 104_729) % skus.len()];
                    if catalog::set_basket_line(&db, &session.id, &basket, sku, 1, now).await.is_ok() {
                        prepared.push(basket);
                    }
                }
            }
            start.wait().await;
            let Some(session) = session else { return };
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let now = SystemClock.now_ms();
                let basket = if confirm_only {
                    let Some(b) = prepared.pop() else { return };
                    b
                } else {
                    let sku = &skus[(i * 7919 + n * 104_729) % skus.len()];
                    if line_request {
                        let Ok(basket) = catalog::create_basket(&db, &session.id, now).await else { continue };
                        if catalog::set_basket_line(&db, &session.id, &basket, sku, 1, now).await.is_err() {
                            continue;
                        }
                        basket
                    } else {
                        let lines = vec![(sku.clone(), 1)];
                        let Ok(basket) = catalog::open_basket(&db, &session.id, lines, now).await else { continue };
                        basket.basket_id
                    }
                };
                let req = checkout::ConfirmRequest {
                    currencies: None,
                    session_id: &session.id,
                    basket_id: &basket,
                    gateway: "sandbox",
                    channel: "form",
                    idempotency_key: None,
                    hold_ms: 900_000,
                    now,
                };
                let t0 = Instant::now();
                let result = checkout::confirm(&db, &req).await;
                let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
                let mut t = tally.lock().await;
                t.confirm_us.push(us);
                match result {
                    Ok(p) => {
                        t.confirms += 1;
                        t.last_confirm = Some(Instant::now());
                        t.placed.push(p.attempt_ref);
                    }
                    Err(e) => *t.errors.entry(e.code().to_string()).or_default() += 1,
                }
            }
        });
    }
    start.wait().await;
    let started = Instant::now();
    let deadline = tokio::time::sleep(Duration::from_secs(args.seconds));
    tokio::pin!(deadline);
    let mut running = args.buyers;
    while running > 0 {
        tokio::select! {
            _ = &mut deadline => break,
            done = set.join_next() => match done {
                Some(_) => running -= 1,
                None => break,
            },
        }
    }
    stop.store(true, Ordering::Relaxed);
    while set.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64();
    // Notifications: apply one verified success per placed order, concurrently, plus a duplicate.
    let placed = std::mem::take(&mut tally.lock().await.placed);
    let queue = Arc::new(Mutex::new(placed.clone()));
    let timer = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..args.buyers {
        let (db, queue) = (db.clone(), queue.clone());
        set.spawn(async move {
            loop {
                let Some(attempt_ref) = queue.lock().await.pop() else { return 0_u64 };
                let Ok(amount) = crate::domain::Money::new(990, cny) else { return 0 };
                let ev = crate::domain::event::VerifiedEvent {
                    gateway: "sandbox".into(),
                    event_id: format!("evt_{attempt_ref}"),
                    attempt_ref,
                    outcome: crate::domain::event::Outcome::Succeeded { gateway_txn_id: "txn".into(), amount },
                    raw_body: b"{}".to_vec(),
                };
                for _ in 0..2 {
                    let _ = payments::apply_event(&db, &ev, Default::default(), SystemClock.now_ms()).await;
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    let nsecs = timer.elapsed().as_secs_f64();
    let mut t = tally.lock().await;
    let violations = crate::store::check::run(&db).await?.len();
    db.close().await;
    Ok(Report {
        scenario: args.scenario.clone(),
        mode: "engine (in-process, no HTTP)".into(),
        flow: flow(args.line_request),
        database: url.split(':').next().unwrap_or_default().to_string(),
        buyers: args.buyers,
        seconds: secs,
        confirms: t.confirms,
        confirms_per_s: t.confirms as f64 / selling_secs(&t, hot_stock, started, secs),
        notifications_applied: placed.len() as u64,
        notifications_per_s: placed.len() as f64 / nsecs,
        latency_ms: latency(std::mem::take(&mut t.confirm_us)),
        errors: t.errors.clone(),
        stock: hot_stock,
        check_violations: Some(violations),
        ..Default::default()
    })
}

/// The physical limit: sequential single-row durable commits (one flush each).
async fn commit_limit(args: &BenchArgs) -> anyhow::Result<Report> {
    let dir = ScratchDir::new()?;
    let url = args.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", dir.join("limit.db").display()));
    let db = Db::connect(&url, 4).await?;
    db.migrate().await?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut n = 0_u64;
    while Instant::now() < deadline {
        n += 1;
        let mut tx = db.begin().await?;
        sqlx::query("INSERT INTO settings (name, value) VALUES ($1, 'x') ON CONFLICT (name) DO UPDATE SET value = excluded.value")
            .bind(format!("bench-{}", n % 1000))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
    }
    let secs = started.elapsed().as_secs_f64();
    db.close().await;
    Ok(Report {
        scenario: "commit-limit".into(),
        mode: "one durable commit at a time".into(),
        database: url.split(':').next().unwrap_or_default().to_string(),
        seconds: secs,
        commits_per_s: Some(n as f64 / secs),
        ..Default::default()
    })
}

pub async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    if !matches!(
        args.scenario.as_str(),
        "spread" | "hot" | "notify" | "notify-direct" | "mixed" | "checkout" | "commit-limit" | "confirm"
    ) {
        anyhow::bail!(
            "--scenario must be spread, hot, notify, notify-direct, mixed, checkout, commit-limit or (with --engine) confirm"
        );
    }
    if args.hot_stock < 1 {
        anyhow::bail!("--hot-stock must be at least 1");
    }
    if args.scenario == "confirm" && !args.engine {
        anyhow::bail!("--scenario confirm is an engine scenario: add --engine");
    }
    if args.scenario == "checkout" && args.engine {
        anyhow::bail!("--scenario checkout is an HTTP scenario: the engine's spread is the same flow");
    }
    if args.buyers == 0 || args.buyers > 10_000 {
        anyhow::bail!("--buyers must be 1-10000");
    }
    let report = if args.scenario == "commit-limit" {
        commit_limit(args).await?
    } else if args.engine {
        engine_scenario(args).await?
    } else {
        http_scenario(args).await?
    };
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(report)
}

/// The report as a small table.
pub fn table(r: &Report) -> String {
    let mut out = String::new();
    let mut row = |k: &str, v: String| out.push_str(&format!("{k:<24} {v}\n"));
    row("scenario", format!("{} ({}, {})", r.scenario, r.mode, r.database));
    row("buyers / seconds", format!("{} / {:.1}", r.buyers, r.seconds));
    if let Some(c) = r.commits_per_s {
        row("durable commits/s", format!("{c:.0}"));
        return out;
    }
    row("basket flow", r.flow.clone());
    row("confirms (201)", format!("{} ({:.0}/s)", r.confirms, r.confirms_per_s));
    row("notifications applied", format!("{} ({:.0}/s)", r.notifications_applied, r.notifications_per_s));
    let l = |k: &str| r.latency_ms.get(k).copied().unwrap_or(0.0);
    row(
        "confirm latency ms",
        format!("p50 {:.1}  p95 {:.1}  p99 {:.1}  max {:.1}", l("p50"), l("p95"), l("p99"), l("max")),
    );
    row("errors", format!("{:?}", r.errors));
    row("oversold units", r.oversold.to_string());
    if let Some(stock) = r.stock {
        row("stock (one SKU)", stock.to_string());
    }
    if !r.cpu_ms_per_op.is_empty() {
        let parts: Vec<String> = r.cpu_ms_per_op.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        row("CPU ms per operation", parts.join("  "));
    }
    if let Some(c) = r.cpu_ceiling_per_s {
        row("CPU ceiling (estimate)", format!("{c:.0}/s with the load generator elsewhere"));
    }
    row("server peak RSS", r.server_peak_rss_mb.map(|m| format!("{m:.1} MB")).unwrap_or_else(|| "n/a".into()));
    row(
        "kassa check",
        r.check_violations
            .map(|v| if v == 0 { "clean".to_string() } else { format!("{v} violations") })
            .unwrap_or_else(|| "not run (no --database-url)".into()),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sold_out_sale_is_timed_up_to_its_last_sale() {
        let started = Instant::now();
        let last = started + Duration::from_secs(2);
        let t = Tally { confirms: 5_000, last_confirm: Some(last), ..Default::default() };
        assert!((selling_secs(&t, Some(5_000), started, 10.0) - 2.0).abs() < 1e-9);
        // More units than were sold (a larger --hot-stock): the sale did not end, the whole run counts.
        assert!((selling_secs(&t, Some(20_000), started, 10.0) - 10.0).abs() < 1e-9);
        // Not a flash sale: the whole run.
        assert!((selling_secs(&t, None, started, 10.0) - 10.0).abs() < 1e-9);
    }

    #[test]
    fn cpu_time_is_read_from_a_stat_line() {
        // A name may hold spaces and parentheses: the fields start after the last ')'.
        let line = "4242 (tokio (rt) x) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 75 8 2 20 0 9 0 100 0 0";
        assert_eq!(stat_cpu_ms(line), Some(("tokio (rt) x", 3250.0, 100.0)));
        assert_eq!(stat_cpu_ms("4242 (short) S 1 2"), None);
        let me = process_cpu_ms(std::process::id()).expect("this process's own CPU time");
        assert!(me >= 0.0);
    }

    #[test]
    fn cpu_per_operation_and_the_ceiling() {
        let from = CpuMark { server: Some(1000.0), load_generator: Some(500.0), postgres: None };
        let to = CpuMark { server: Some(3000.0), load_generator: Some(1500.0), postgres: None };
        let (per_op, ceiling) = from.per_op(&to, 1000);
        assert_eq!(per_op.get("server"), Some(&2.0));
        assert_eq!(per_op.get("load_generator"), Some(&1.0));
        assert_eq!(per_op.get("postgres"), None);
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
        assert_eq!(ceiling, Some(cores * 500.0));
        let with_pg = CpuMark { postgres: Some(0.0), ..from };
        let (per_op, ceiling) = with_pg.per_op(&CpuMark { postgres: Some(2000.0), ..to }, 1000);
        assert_eq!(per_op.get("postgres"), Some(&2.0));
        assert_eq!(ceiling, Some(cores * 250.0));
        assert_eq!(from.per_op(&to, 0), (BTreeMap::new(), None));
    }
}

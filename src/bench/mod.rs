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

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use kassa::clock::{Clock as _, SystemClock};
use kassa::store::Db;

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
    /// `hot` only: the flash sale three times in one run, on a SKU of its own each time — without
    /// a promotion code, with one (10 % off, as many uses as units), without again — reporting the
    /// code's rate against the mean of the two without
    #[arg(long)]
    pub promotion: bool,
    /// `hot` only: the one SKU sells card keys — a digital SKU whose stock is `--hot-stock` keys,
    /// imported before the run — so that each payment hands out its key (a spawned kassa is given
    /// a keys secret of its own unless KASSA_KEYS_SECRET is set)
    #[arg(long)]
    pub digital: bool,
    /// Write the JSON report here as well
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// The kassa binary a spawned server runs (default: this one), so that one load generator
    /// drives two builds alike (`scripts/bench-compare.sh`)
    #[arg(long)]
    pub server_bin: Option<std::path::PathBuf>,
    /// `on` (the default): the spawned server keeps the rate limits and the open-orders limit at
    /// their defaults, as production runs; `off`: both off, to see what they cost
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    pub protections: String,
    #[command(subcommand)]
    pub command: Option<BenchCommand>,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum BenchCommand {
    /// Write a shop's history into a database (migrated first): settled orders over --days with
    /// everything they leave behind, so that a benchmark can run on day 700 as well as on day 1
    Seed(seed::SeedArgs),
}

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub scenario: String,
    pub mode: String,
    /// How each buyer builds a basket: `basket-with-line` (one request) or `basket-then-line`.
    pub flow: String,
    pub database: String,
    /// The spawned server's settings that differ from `kassa serve`'s defaults.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub settings: Vec<String>,
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
    /// The server's round trips to PostgreSQL per operation over the timed run (its
    /// `kassa_db_round_trips_total`: background work included). PostgreSQL HTTP runs only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub db_round_trips_per_op: Option<f64>,
    pub commits_per_s: Option<f64>,
    pub check_violations: Option<usize>,
    /// How long the closing `kassa check` took.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_seconds: Option<f64>,
    /// `hot --promotion`: the sale with a code beside the sales without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<PromotionFigures>,
    /// Orders in the database when the run started (`reads`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_orders: Option<i64>,
    /// What an operator waits on, by read (`reads`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reads: BTreeMap<String, reads::ReadFigures>,
}

/// The flash sale with a promotion code against those without, before and after it, in the same run.
#[derive(Debug, Default, Serialize)]
pub struct PromotionFigures {
    /// The mean of the sales without a code, the one before the sale with it and the one after.
    pub confirms_per_s_without: f64,
    pub confirms_per_s_without_each: [f64; 2],
    pub confirms_per_s_with: f64,
    /// With over without.
    pub ratio: f64,
    /// Orders placed with the code, the code's uses as the promotion counts them, and its limit.
    pub orders_with_code: u64,
    pub uses: i64,
    pub max_uses: i64,
    /// Uses beyond the limit, or counted differently from the orders that hold one (must be 0).
    pub over_used: i64,
    /// Units sold beyond the promotion sale's stock (must be 0).
    pub oversold: i64,
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

mod engine;
mod http;
mod reads;
pub mod seed;
mod seed_rows;
mod stock;

use engine::{commit_limit, engine_scenario};
use http::{ScratchDir, Server, flow, http_scenario};

pub async fn run(args: &BenchArgs) -> anyhow::Result<Report> {
    if !matches!(
        args.scenario.as_str(),
        "spread" | "hot" | "notify" | "notify-direct" | "mixed" | "checkout" | "commit-limit" | "confirm" | "reads"
    ) {
        anyhow::bail!(
            "--scenario must be spread, hot, notify, notify-direct, mixed, checkout, reads, commit-limit or (with --engine) confirm"
        );
    }
    if args.hot_stock < 1 {
        anyhow::bail!("--hot-stock must be at least 1");
    }
    if args.scenario == "confirm" && !args.engine {
        anyhow::bail!("--scenario confirm is an engine scenario: add --engine");
    }
    if args.promotion && (args.scenario != "hot" || args.engine) {
        anyhow::bail!("--promotion goes with the HTTP scenario hot");
    }
    if args.digital && (args.scenario != "hot" || args.engine) {
        anyhow::bail!("--digital goes with the HTTP scenario hot");
    }
    if args.scenario == "checkout" && args.engine {
        anyhow::bail!("--scenario checkout is an HTTP scenario: the engine's spread is the same flow");
    }
    if args.buyers == 0 || args.buyers > 10_000 {
        anyhow::bail!("--buyers must be 1-10000");
    }
    let report = if args.scenario == "commit-limit" {
        commit_limit(args).await?
    } else if args.scenario == "reads" {
        anyhow::ensure!(!args.engine, "--scenario reads is an HTTP scenario");
        reads::reads_scenario(args).await?
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
    if !r.settings.is_empty() {
        row("settings off default", r.settings.join(" "));
    }
    if let Some(c) = r.commits_per_s {
        row("durable commits/s", format!("{c:.0}"));
        return out;
    }
    if !r.reads.is_empty() {
        row("history (orders)", r.history_orders.unwrap_or(0).to_string());
        for (name, f) in &r.reads {
            let rows =
                f.rows.map(|n| format!("  {n} rows, {:.0} rows/s", f.rows_per_s.unwrap_or(0.0))).unwrap_or_default();
            row(
                name,
                format!(
                    "p50 {:.1}  p99 {:.1}  max {:.1} ms ({} requests){rows}",
                    f.p50_ms, f.p99_ms, f.max_ms, f.requests
                ),
            );
        }
        row("server peak RSS", r.server_peak_rss_mb.map(|m| format!("{m:.1} MB")).unwrap_or_else(|| "n/a".into()));
        row("kassa check", format!("{:?} violations in {:.1} s", r.check_violations, r.check_seconds.unwrap_or(0.0)));
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
    if let Some(p) = &r.promotion {
        row(
            "with a promotion code",
            format!(
                "{:.0}/s against {:.0}/s without (before {:.0}, after {:.0}): {:.3}",
                p.confirms_per_s_with,
                p.confirms_per_s_without,
                p.confirms_per_s_without_each[0],
                p.confirms_per_s_without_each[1],
                p.ratio
            ),
        );
        row(
            "code uses",
            format!(
                "{} of {} ({} orders), over-used {}, oversold {}",
                p.uses, p.max_uses, p.orders_with_code, p.over_used, p.oversold
            ),
        );
    }
    if !r.cpu_ms_per_op.is_empty() {
        let parts: Vec<String> = r.cpu_ms_per_op.iter().map(|(k, v)| format!("{k} {v:.2}")).collect();
        row("CPU ms per operation", parts.join("  "));
    }
    if let Some(n) = r.db_round_trips_per_op {
        row("DB round trips per op", format!("{n:.2}"));
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
    if let Some(secs) = r.check_seconds {
        row("kassa check took", format!("{secs:.1} s"));
    }
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

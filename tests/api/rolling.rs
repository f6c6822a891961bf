//! Rolling upgrades: the previous release's binary (`KASSA_PREVIOUS_BIN`, built from this
//! repository's history by `scripts/previous-release.sh`) runs on the schema this kassa migrates
//! to. On PostgreSQL the two versions serve one database side by side, as a fleet does while it
//! upgrades, each taking orders whose payments are notified through the other; on SQLite the
//! previous version serves the migrated file (a rollback) and this one takes over from it. Either
//! way every acknowledged order and payment is in the books, the units add up, and both versions'
//! `kassa check` finds nothing. Migrations within a minor version only add; this is what holds
//! them to it.

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use tokio::sync::Mutex;

use crate::common::{ADMIN, Backend, drop_pg_database, fresh_database};
use crate::fleet::{Tally, buyer, free_port, load_balancer, settle_and_verify, start_instance, wait_healthy};

const STOCK: i64 = 40;
const THIS: &str = env!("CARGO_BIN_EXE_kassa");

/// The previous release's binary (another file than this one's, or the test shows nothing).
fn previous() -> String {
    let bin = std::env::var("KASSA_PREVIOUS_BIN")
        .expect("KASSA_PREVIOUS_BIN names the previous release's binary (scripts/previous-release.sh)");
    let path = std::path::Path::new(&bin);
    assert!(path.is_file(), "KASSA_PREVIOUS_BIN={bin} is not a file");
    assert_ne!(path.canonicalize().unwrap(), std::path::Path::new(THIS).canonicalize().unwrap(), "{bin} is this kassa");
    bin
}

/// This kassa migrates the database to its schema before anything else runs on it.
fn migrate(database_url: &str) {
    let out = Command::new(THIS)
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .args(["migrate", "--database-url", database_url])
        .output()
        .unwrap();
    assert!(out.status.success(), "migrate: {}", String::from_utf8_lossy(&out.stderr));
}

struct Fleet {
    children: Vec<Child>,
    bases: Vec<String>,
}

/// The shop's one public address (what gateways notify), in front of whichever instances serve.
struct Balancer {
    backends: Arc<Mutex<Vec<SocketAddr>>>,
    public: SocketAddr,
}

impl Balancer {
    async fn new() -> Balancer {
        let backends = Arc::new(Mutex::new(Vec::new()));
        Balancer { public: load_balancer(backends.clone()).await, backends }
    }
}

impl Fleet {
    /// Starts one instance of each binary in `bins` on `database_url`, and puts them (alone)
    /// behind `balancer`.
    async fn start(
        bins: &[&str],
        database_url: &str,
        dir: &std::path::Path,
        http: &reqwest::Client,
        balancer: &Balancer,
    ) -> Fleet {
        let ports: Vec<u16> = bins.iter().map(|_| free_port()).collect();
        let addrs: Vec<SocketAddr> = ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect();
        let lb = balancer.public;
        let mut fleet = Fleet { children: Vec::new(), bases: Vec::new() };
        for (i, (bin, port)) in bins.iter().zip(&ports).enumerate() {
            let log = dir.join(format!("kassa-{}-{i}.log", free_port()));
            let mut child = start_instance(bin, database_url, *port, lb, &log);
            let base = format!("http://{}", addrs[i]);
            wait_healthy(http, &base, &mut child, &log).await;
            fleet.children.push(child);
            fleet.bases.push(base);
        }
        *balancer.backends.lock().await = addrs;
        fleet
    }

    /// `buyers` buyers against the fleet, round robin, into `tally`.
    async fn buy(&self, http: &reqwest::Client, buyers: std::ops::Range<usize>, tally: &Arc<Mutex<Tally>>) {
        let alive = Arc::new(Mutex::new(vec![true; self.bases.len()]));
        let mut tasks = tokio::task::JoinSet::new();
        for i in buyers {
            tasks.spawn(buyer(http.clone(), self.bases.clone(), i, alive.clone(), tally.clone()));
        }
        while let Some(done) = tasks.join_next().await {
            done.unwrap();
        }
    }

    fn stop(mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The SKUs the buyers buy, created through `base`.
async fn create_skus(http: &reqwest::Client, base: &str) {
    for sku in ["HOT", "WARM"] {
        let r = http
            .post(format!("{base}/api/v1/admin/skus"))
            .bearer_auth(ADMIN)
            .json(&json!({"sku": sku, "name": sku, "price_minor": 990, "currency": "CNY", "stock": STOCK}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED, "{base}");
    }
}

fn report(what: &str, tally: &Tally) {
    eprintln!(
        "{what}: {} placed, {} out of stock, {} unknown, {} paid at the gateway",
        tally.placed.len(),
        tally.out_of_stock,
        tally.unknown,
        tally.paid_at_gateway.len()
    );
    assert_eq!(tally.unknown, 0, "a request failed: no instance was stopped");
    assert!(tally.placed.len() >= 40, "too few orders placed to mean anything");
}

/// A fleet half upgraded: the previous version and this one on one PostgreSQL database at this
/// version's schema, each confirming orders whose notifications arrive through the other.
#[cfg_attr(
    any(not(kassa_test_pg), not(kassa_test_previous)),
    ignore = "PostgreSQL and rolling upgrade: KASSA_TEST_DATABASE_URL and KASSA_PREVIOUS_BIN (scripts/previous-release.sh) were not both set when the tests were built"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_previous_release_serves_beside_this_one_on_the_new_schema() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let previous = previous();
    let dir = tempfile::tempdir().unwrap();
    let database_url = fresh_database(&backend, dir.path()).await;
    migrate(&database_url);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let balancer = Balancer::new().await;
    let fleet = Fleet::start(&[previous.as_str(), THIS], &database_url, dir.path(), &http, &balancer).await;
    // The catalog comes from the previous version; the buyers meet both.
    create_skus(&http, &fleet.bases[0]).await;
    let tally = Arc::new(Mutex::new(Tally::default()));
    fleet.buy(&http, 0..200, &tally).await;
    let tally = tally.lock().await;
    report("mixed fleet", &tally);
    assert!(tally.out_of_stock > 0, "the stock was meant to run out");
    settle_and_verify(&database_url, &database_url, &tally, STOCK, &[previous.as_str(), THIS]).await;
    fleet.stop();
    drop_pg_database(&database_url).await;
}

/// SQLite, one machine: after this version migrated the file, the previous version still serves it
/// (a rollback), and this one takes over what it left in flight.
#[cfg_attr(
    not(kassa_test_previous),
    ignore = "rolling upgrade: KASSA_PREVIOUS_BIN was not set when the tests were built (scripts/previous-release.sh)"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_previous_release_serves_a_migrated_sqlite_file_and_this_one_takes_over() {
    let previous = previous();
    let dir = tempfile::tempdir().unwrap();
    let database_url = fresh_database(&Backend::Sqlite, dir.path()).await;
    migrate(&database_url);
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    let tally = Arc::new(Mutex::new(Tally::default()));
    // One public address throughout: the payments the previous version handed off are notified to
    // it, and reach whichever version serves then.
    let balancer = Balancer::new().await;
    let old = Fleet::start(&[previous.as_str()], &database_url, dir.path(), &http, &balancer).await;
    create_skus(&http, &old.bases[0]).await;
    old.buy(&http, 0..60, &tally).await;
    // Stopped with payments still to be notified (the late ones are on the sandbox's queue).
    old.stop();
    let new = Fleet::start(&[THIS], &database_url, dir.path(), &http, &balancer).await;
    new.buy(&http, 60..120, &tally).await;
    let tally = tally.lock().await;
    report("previous then this", &tally);
    let sandbox_url = kassa::store::sandbox_url(&database_url).unwrap().0;
    settle_and_verify(&database_url, &sandbox_url, &tally, STOCK, &[previous.as_str(), THIS]).await;
    new.stop();
}

/// Under `CI=true` the rolling-upgrade tests must have been built to run.
#[test]
fn rolling_upgrade_tests_are_built_to_run_in_ci() {
    if std::env::var("CI").is_ok_and(|v| v == "true") && !cfg!(kassa_test_previous) {
        panic!("CI=true but KASSA_PREVIOUS_BIN was not set when the tests were built (scripts/previous-release.sh)");
    }
}

//! Several stateless kassa processes on one PostgreSQL, behind a load balancer, under concurrent
//! load, with one instance killed (SIGKILL) in the middle. PostgreSQL only: SQLite is the
//! single-machine engine.

use kassa::store::sql;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::common::{ADMIN, Backend, fresh_database, s};

const INSTANCES: usize = 3;
const BUYERS: usize = 300;
const STOCK: i64 = 40;
const HOLD_SECONDS: u64 = 3;

/// A round-robin TCP load balancer that skips backends it cannot connect to.
pub async fn load_balancer(backends: Arc<Mutex<Vec<SocketAddr>>>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else { continue };
            let (backends, next) = (backends.clone(), next.clone());
            tokio::spawn(async move {
                let list = backends.lock().await.clone();
                for _ in 0..list.len() {
                    let target = list[next.fetch_add(1, Ordering::Relaxed) % list.len()];
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    });
    addr
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts `bin` (this kassa, or another version's) as one instance of a fleet behind `public`.
pub fn start_instance(bin: &str, database_url: &str, port: u16, public: SocketAddr, log: &std::path::Path) -> Child {
    Command::new(bin)
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .args(["serve", "--database-url", database_url, "--listen", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(log.with_extension("data"))
        .args(["--public-url", &format!("http://{public}"), "--sandbox", "--admin-token", ADMIN])
        .args(["--hold-seconds", &HOLD_SECONDS.to_string(), "--sweep-interval-ms", "200", "--db-max-connections", "12"])
        // Many buyers from one address, each with orders in flight.
        .args(["--rate-limits", "off", "--max-open-orders-per-session", "0"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

pub async fn wait_healthy(http: &reqwest::Client, base: &str, child: &mut Child, log: &std::path::Path) {
    for _ in 0..1200 {
        if http.get(format!("{base}/healthz")).send().await.is_ok_and(|r| r.status().is_success()) {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{base} exited with {status}: {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{base} did not become healthy: {}", std::fs::read_to_string(log).unwrap_or_default());
}

/// What the buyers saw: orders placed (order, attempt), refused for stock, lost in flight, paid.
#[derive(Default)]
pub struct Tally {
    pub placed: Vec<(String, String)>,
    pub out_of_stock: usize,
    pub unknown: usize,
    pub paid_at_gateway: Vec<String>,
}

/// The `k`-th live instance, round robin.
async fn pick(bases: &[String], alive: &Mutex<Vec<bool>>, k: usize) -> String {
    let alive = alive.lock().await.clone();
    let live: Vec<usize> = (0..bases.len()).filter(|j| alive[*j]).collect();
    bases[live[k % live.len()]].clone()
}

/// One buyer: a session, a basket, a checkout on one live instance, and what they do at the
/// gateway (pay, pay late, walk away, fail) with the notifications sent through the others.
pub async fn buyer(
    http: reqwest::Client,
    bases: Vec<String>,
    i: usize,
    alive: Arc<Mutex<Vec<bool>>>,
    tally: Arc<Mutex<Tally>>,
) {
    let base = pick(&bases, &alive, i).await;
    let step = async {
        let token: Value = http.post(format!("{base}/api/v1/sessions")).send().await?.json().await?;
        let token = s(&token["token"]);
        let basket: Value =
            http.post(format!("{base}/api/v1/baskets")).bearer_auth(&token).send().await?.json().await?;
        let basket = s(&basket["basket_id"]);
        let sku = if i.is_multiple_of(3) { "WARM" } else { "HOT" };
        http.put(format!("{base}/api/v1/baskets/{basket}/lines/{sku}"))
            .bearer_auth(&token)
            .json(&json!({"quantity": 1 + i % 2}))
            .send()
            .await?;
        let r = http
            .post(format!("{base}/api/v1/baskets/{basket}/checkout"))
            .bearer_auth(&token)
            .json(&json!({"gateway": "sandbox"}))
            .send()
            .await?;
        let status = r.status();
        let body: Value = r.json().await?;
        Ok::<_, reqwest::Error>((status, body))
    };
    let (status, body) = match step.await {
        Ok(x) => x,
        Err(_) => {
            tally.lock().await.unknown += 1;
            return;
        }
    };
    if status == StatusCode::CONFLICT {
        assert_eq!(body["error"]["code"], "out_of_stock", "{body}");
        tally.lock().await.out_of_stock += 1;
        return;
    }
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (order_no, attempt_ref) = (s(&body["order_no"]), s(&body["attempt_ref"]));
    tally.lock().await.placed.push((order_no, attempt_ref.clone()));
    // What the buyer does at the gateway; sent to another instance than the checkout.
    let (outcome, copies, delay_ms) = match i % 4 {
        0 => ("succeeded", 3, 0),
        1 => ("succeeded", 2, 2_500 + (i as u64 % 10) * 100), // notification racing the expiry
        2 => return,                                          // walks away: the hold expires
        _ => ("failed", 2, 0),
    };
    let other = pick(&bases, &alive, i + 1).await;
    let url = format!("{other}/sandbox/api/payments/{attempt_ref}/complete");
    let paid = http.post(&url).json(&json!({"outcome": outcome, "copies": copies, "delay_ms": delay_ms})).send().await;
    if paid.is_ok_and(|r| r.status() == StatusCode::OK) && outcome == "succeeded" {
        tally.lock().await.paid_at_gateway.push(attempt_ref.clone());
        // The same event again, through a third instance: duplicates land on different instances.
        let third = pick(&bases, &alive, i + 2).await;
        let _ = http
            .post(format!("{third}/sandbox/api/payments/{attempt_ref}/complete"))
            .json(&json!({"outcome": outcome, "copies": 2}))
            .send()
            .await;
    }
}

#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_instances_on_one_postgres_survive_a_sigkill() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let database_url = fresh_database(&backend, dir.path()).await;
    let ports: Vec<u16> = (0..INSTANCES).map(|_| free_port()).collect();
    let addrs: Vec<SocketAddr> = ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect();
    let backends = Arc::new(Mutex::new(addrs.clone()));
    let lb = load_balancer(backends.clone()).await;
    let mut children: Vec<Child> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| {
            start_instance(
                env!("CARGO_BIN_EXE_kassa"),
                &database_url,
                *p,
                lb,
                &dir.path().join(format!("kassa-{i}.log")),
            )
        })
        .collect();
    let bases: Vec<String> = addrs.iter().map(|a| format!("http://{a}")).collect();
    let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build().unwrap();
    for (i, b) in bases.iter().enumerate() {
        wait_healthy(&http, b, &mut children[i], &dir.path().join(format!("kassa-{i}.log"))).await;
    }
    for (sku, stock) in [("HOT", STOCK), ("WARM", STOCK)] {
        let r = http
            .post(format!("{}/api/v1/admin/skus", bases[0]))
            .bearer_auth(ADMIN)
            .json(&json!({"sku": sku, "name": sku, "price_minor": 990, "currency": "CNY", "stock": stock}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::CREATED);
    }

    let alive = Arc::new(Mutex::new(vec![true; INSTANCES]));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..BUYERS {
        tasks.spawn(buyer(http.clone(), bases.clone(), i, alive.clone(), tally.clone()));
        if i == BUYERS / 3 {
            // In the middle of the load: SIGKILL one instance.
            tokio::time::sleep(Duration::from_millis(100)).await;
            children[2].kill().unwrap();
            children[2].wait().unwrap();
            alive.lock().await[2] = false;
            backends.lock().await.retain(|a| *a != addrs[2]);
        }
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    let tally = tally.lock().await;
    eprintln!(
        "fleet: {} placed, {} out of stock, {} unknown (in flight on the killed instance), {} paid at the gateway",
        tally.placed.len(),
        tally.out_of_stock,
        tally.unknown,
        tally.paid_at_gateway.len()
    );
    assert!(tally.placed.len() >= 40, "too few orders placed to mean anything");
    assert!(tally.out_of_stock > 0, "the stock was meant to run out");

    settle_and_verify(&database_url, &database_url, &tally, STOCK, &[env!("CARGO_BIN_EXE_kassa")]).await;
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Waits (bounded: synchronisation, not a timing assertion) until no order is pending and the
/// sandbox has no notification left to send, then checks what the buyers saw against the books:
/// every acknowledged order exists, every payment the gateway took ended paid, every acknowledged
/// notification is in the inbox, the units add up per SKU (`HOT`, `WARM`, `stock` each), and `kassa
/// check` of each binary in `checkers` finds nothing. `sandbox_url` is the sandbox's database
/// (kassa's own on PostgreSQL, a file beside it on SQLite).
pub async fn settle_and_verify(database_url: &str, sandbox_url: &str, tally: &Tally, stock: i64, checkers: &[&str]) {
    // The sweepers and the sandbox's retries settle (leases of a dead instance run out first).
    let db = kassa::store::Db::connect(database_url, 4).await.unwrap();
    let sandbox = kassa::store::Db::connect(sandbox_url, 2).await.unwrap();
    let (pool, sandbox_pool) = (db.read_pool(), sandbox.read_pool());
    let count = |pool, sql: &'static str| async move { sql::query_scalar::<i64>(sql).fetch_one(pool).await.unwrap() };
    let mut settled = false;
    for _ in 0..600 {
        let pending = count(pool, "SELECT CAST(COUNT(*) AS BIGINT) FROM orders WHERE status = 'pending_payment'").await;
        let deliveries =
            count(sandbox_pool, "SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries WHERE status = 'pending'")
                .await;
        if pending == 0 && deliveries == 0 {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(settled, "orders or notifications did not settle");

    // Every order whose confirm returned 201 exists; every payment the gateway took ended paid (the
    // close answered "paid" where it raced the expiry).
    let placed: Vec<String> = tally.placed.iter().map(|(o, _)| o.clone()).collect();
    crate::common::assert_acknowledged(pool, &placed, &tally.paid_at_gateway).await;
    // Every acknowledged notification was applied (its event is in the inbox).
    let delivered: Vec<String> =
        sql::query_scalar("SELECT event_id FROM sandbox_deliveries WHERE status = 'delivered'")
            .fetch_all(sandbox_pool)
            .await
            .unwrap();
    for event_id in &delivered {
        let n: i64 = sql::query_scalar(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM notifications WHERE gateway = 'sandbox' AND event_id = $1",
        )
        .bind(event_id.as_str())
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(n, 1, "acknowledged notification {event_id} missing from the inbox");
    }
    // The numbers add up: units ordered = units sold + units released, per SKU.
    for sku in ["HOT", "WARM"] {
        let (on_hand, reserved, sold, ordered, released) = crate::common::ledger(pool, sku).await;
        eprintln!("fleet {sku}: ordered {ordered} = sold {sold} + released {released}; on hand {on_hand}");
        assert_eq!(reserved, 0);
        assert_eq!(ordered, sold + released);
        assert_eq!(on_hand + sold, stock);
    }
    sandbox.close().await;
    db.close().await;
    // And the invariant checker agrees.
    let no_data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for bin in checkers {
        let out = Command::new(bin)
            .current_dir(env!("CARGO_TARGET_TMPDIR"))
            .args(["check", "--database-url", database_url])
            .arg("--data-dir")
            .arg(no_data.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{bin}: {}", String::from_utf8_lossy(&out.stdout));
    }
}

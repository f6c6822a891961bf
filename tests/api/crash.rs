//! Crash tests: one kassa under concurrent load is SIGKILLed at random moments and restarted on
//! the same database, many times in one run; then the sweeper and the notification retries settle
//! and nothing may be lost or doubled: every acknowledged confirm exists, every payment the gateway
//! took is applied exactly once, stock adds up, the checker is clean. `KASSA_CRASH_ROUNDS` sets the
//! number of kills (default 6).

use kassa::store::sql;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::common::{ADMIN, Backend, fresh_database, s};
use crate::fleet::{free_port, wait_healthy};
use crate::on_both;

const STOCK: i64 = 400;

/// The served kassa, killed when the test ends, however it ends.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(database_url: &str, port: u16, log: &std::path::Path) -> Child {
    crate::common::kassa_command()
        .args(["serve", "--database-url", database_url, "--listen", &format!("127.0.0.1:{port}"), "--sandbox"])
        .arg("--data-dir")
        .arg(log.with_extension("data"))
        .args(["--admin-token", ADMIN, "--hold-seconds", "2", "--sweep-interval-ms", "200", "--rate-limits", "off"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap())
        .spawn()
        .unwrap()
}

#[derive(Default)]
struct Acknowledged {
    orders: Vec<String>,
    paid_at_gateway: Vec<String>,
}

async fn load(base: String, stop: Arc<AtomicBool>, acked: Arc<Mutex<Acknowledged>>, i: usize) {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    while !stop.load(Ordering::Relaxed) {
        let flow = async {
            let token: Value = http.post(format!("{base}/api/v1/sessions")).send().await?.json().await?;
            let token = s(&token["token"]);
            let basket: Value =
                http.post(format!("{base}/api/v1/baskets")).bearer_auth(&token).send().await?.json().await?;
            let basket = s(&basket["basket_id"]);
            http.put(format!("{base}/api/v1/baskets/{basket}/lines/ITEM"))
                .bearer_auth(&token)
                .json(&json!({"quantity": 1}))
                .send()
                .await?;
            let r = http
                .post(format!("{base}/api/v1/baskets/{basket}/checkout"))
                .bearer_auth(&token)
                .json(&json!({}))
                .send()
                .await?;
            if r.status() != StatusCode::CREATED {
                return Ok(());
            }
            let placed: Value = r.json().await?;
            acked.lock().await.orders.push(s(&placed["order_no"]));
            if i % 3 != 2 {
                let attempt_ref = s(&placed["attempt_ref"]);
                let r = http
                    .post(format!("{base}/sandbox/api/payments/{attempt_ref}/complete"))
                    .json(&json!({"outcome": "succeeded", "copies": 2}))
                    .send()
                    .await?;
                if r.status() == StatusCode::OK {
                    acked.lock().await.paid_at_gateway.push(attempt_ref);
                }
            }
            Ok::<_, reqwest::Error>(())
        };
        if flow.await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

on_both!(sigkill_under_load_loses_nothing, crash_rounds);
async fn crash_rounds(backend: Backend) {
    let rounds: usize = std::env::var("KASSA_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(6);
    let dir = tempfile::tempdir().unwrap();
    let database_url = fresh_database(&backend, dir.path()).await;
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let log = dir.path().join("kassa.log");
    let http = reqwest::Client::new();
    let mut child = Served(start(&database_url, port, &log));
    wait_healthy(&http, &base, &mut child.0, &log).await;
    let r = http
        .post(format!("{base}/api/v1/admin/skus"))
        .bearer_auth(ADMIN)
        .json(&json!({"sku": "ITEM", "name": "Item", "price_minor": 500, "currency": "CNY", "stock": STOCK}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    let acked = Arc::new(Mutex::new(Acknowledged::default()));
    for round in 0..rounds {
        let stop = Arc::new(AtomicBool::new(false));
        let mut buyers = tokio::task::JoinSet::new();
        for i in 0..16 {
            buyers.spawn(load(base.clone(), stop.clone(), acked.clone(), i));
        }
        // A random moment under load, then SIGKILL; the buyers see errors meanwhile.
        let pause = 150 + (rand::random::<u64>() % 500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        child.0.kill().unwrap();
        child.0.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        while buyers.join_next().await.is_some() {}
        child = Served(start(&database_url, port, &log));
        wait_healthy(&http, &base, &mut child.0, &log).await;
        eprintln!("crash round {round}: killed after {pause} ms");
    }
    // Settle: holds run out, the sweeper closes and expires, notification retries land.
    let db = kassa::store::Db::connect(&database_url, 2).await.unwrap();
    let pool = db.read_pool();
    let records = db.open_sandbox(&database_url).await.unwrap();
    let mut settled = false;
    for _ in 0..900 {
        let pending: i64 =
            sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM orders WHERE status = 'pending_payment'")
                .fetch_one(pool)
                .await
                .unwrap();
        let deliveries: i64 =
            sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries WHERE status = 'pending'")
                .fetch_one(records.read_pool())
                .await
                .unwrap();
        if pending == 0 && deliveries == 0 {
            settled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(settled, "did not settle: {}", std::fs::read_to_string(&log).unwrap_or_default());
    let acked = acked.lock().await;
    eprintln!(
        "crash test: {rounds} kills, {} acknowledged orders, {} payments taken",
        acked.orders.len(),
        acked.paid_at_gateway.len()
    );
    assert!(!acked.orders.is_empty());
    crate::common::assert_acknowledged(pool, &acked.orders, &acked.paid_at_gateway).await;
    // Every payment the gateway recorded (acknowledged to us or not) was applied exactly once.
    // (The sandbox's records are in a file of their own on SQLite: two reads, compared here.)
    let taken: Vec<String> = sql::query_scalar("SELECT attempt_ref FROM sandbox_payments WHERE status = 'succeeded'")
        .fetch_all(records.read_pool())
        .await
        .unwrap();
    let applied: std::collections::HashSet<String> =
        sql::query_scalar("SELECT attempt_ref FROM payment_attempts WHERE status = 'succeeded'")
            .fetch_all(pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    let unapplied: Vec<&String> = taken.iter().filter(|a| !applied.contains(*a)).collect();
    assert!(unapplied.is_empty(), "payments taken but not applied: {unapplied:?}");
    let (on_hand, reserved, sold, ordered, released) = crate::common::ledger(pool, "ITEM").await;
    assert_eq!((reserved, ordered), (0, sold + released));
    assert_eq!(on_hand + sold, STOCK);
    let violations = kassa::store::check::run(&db).await.unwrap();
    assert!(violations.is_empty(), "{violations:?}");
    db.close().await;
    drop(child);
}

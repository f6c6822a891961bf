//! Model-based randomized schedules. A reference model of orders, stock, attempts, keys and refunds
//! runs beside the real store; random schedules of confirm, double confirm, pay (with duplicated
//! notifications), pay an old attempt, fail, clock ticks, sweeps, retry, cancel, refund and engine
//! restarts are applied to both, and after every step the real system must agree with the model
//! and `kassa check` must find nothing. Failing schedules shrink to a minimal one; the seed is
//! printed so `KASSA_MODEL_SEED=<seed>` replays the run. `KASSA_MODEL_CASES` and
//! `KASSA_MODEL_CASES_PG` set how many schedules run (default 600 on SQLite, 40 on PostgreSQL; CI
//! runs 2,000 and 100).

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

use crate::common::{Backend, KEYS_SECRET, fresh_database};
use kassa::clock::{Clock as _, ManualClock};
use kassa::domain::decide::LatePolicy;
use kassa::domain::{Currency, Money};
use kassa::store::payments::{Applied, Outcome, VerifiedEvent};
use kassa::store::{Db, catalog, check, checkout, fulfilment, orders, payments, refunds};
use kassa::vault::Vault;

const HOLD_MS: i64 = 60_000;
/// (sku, unit price, stock, digital)
const SKUS: [(&str, i64, i64, bool); 2] = [("A", 1000, 5, false), ("K", 300, 4, true)];

#[derive(Debug, Clone)]
enum Op {
    Confirm { buyer: usize, sku: usize, qty: i64 },
    Reconfirm { order: usize },
    Pay { order: usize, copies: u8 },
    PayOld { order: usize },
    Fail { order: usize },
    Tick { secs: i64 },
    Sweep,
    Retry { order: usize },
    Cancel { order: usize },
    Refund { order: usize, quarters: i64 },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3_usize, 0..2_usize, 1..3_i64).prop_map(|(buyer, sku, qty)| Op::Confirm { buyer, sku, qty }),
        1 => (0..8_usize).prop_map(|order| Op::Reconfirm { order }),
        4 => (0..8_usize, 1..4_u8).prop_map(|(order, copies)| Op::Pay { order, copies }),
        1 => (0..8_usize).prop_map(|order| Op::PayOld { order }),
        1 => (0..8_usize).prop_map(|order| Op::Fail { order }),
        2 => (1..90_i64).prop_map(|secs| Op::Tick { secs }),
        2 => Just(Op::Sweep),
        1 => (0..8_usize).prop_map(|order| Op::Retry { order }),
        1 => (0..8_usize).prop_map(|order| Op::Cancel { order }),
        2 => (0..8_usize, 1..5_i64).prop_map(|(order, quarters)| Op::Refund { order, quarters }),
        1 => Just(Op::Restart),
    ]
}

#[derive(Debug, Clone)]
struct MOrder {
    order_no: String,
    session: String,
    basket: String,
    sku: usize,
    qty: i64,
    total: i64,
    status: &'static str,
    /// Attempt references, oldest first, with whether each is the active one.
    attempts: Vec<(String, &'static str)>,
    hold_until: i64,
    captured: i64,
    refunded: i64,
    ever_paid: bool,
}

#[derive(Debug, Default)]
struct Model {
    /// (on_hand, reserved, sold) per SKU.
    stock: Vec<(i64, i64, i64)>,
    orders: Vec<MOrder>,
    sessions: Vec<Option<String>>,
    refund_seq: usize,
}

struct Real {
    db: Db,
    url: String,
    clock: ManualClock,
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

fn event(attempt_ref: &str, ok: bool, amount: i64) -> VerifiedEvent {
    let outcome = if ok {
        Outcome::Succeeded {
            gateway_txn_id: format!("txn-{attempt_ref}"),
            amount: Money::new(amount, Currency::parse("CNY").unwrap()).unwrap(),
        }
    } else {
        Outcome::Failed
    };
    VerifiedEvent {
        gateway: "sandbox".into(),
        event_id: format!("evt-{attempt_ref}-{}", if ok { "ok" } else { "fail" }),
        attempt_ref: attempt_ref.to_string(),
        outcome,
        raw_body: b"{}".to_vec(),
    }
}

async fn setup(backend: &Backend, dir: &std::path::Path) -> (Real, Model) {
    let url = match backend {
        Backend::Sqlite => format!("sqlite://{}", dir.join("model.db").display()),
        pg => fresh_database(pg, dir).await,
    };
    let db = Db::connect(&url, 8).await.unwrap();
    db.migrate().await.unwrap();
    let clock = ManualClock::default();
    let vault = Vault::from_hex(KEYS_SECRET).unwrap();
    let mut model = Model { sessions: vec![None; 3], ..Default::default() };
    for (sku, price, stock, digital) in SKUS {
        let kind = if digital { catalog::SkuKind::Digital } else { catalog::SkuKind::Physical };
        let new = catalog::NewSku {
            sku: sku.into(),
            name: sku.into(),
            kind,
            price: Money::new(price, Currency::parse("CNY").unwrap()).unwrap(),
            stock: if digital { 0 } else { stock },
        };
        catalog::create_sku(&db, &new, false, clock.now_ms()).await.unwrap();
        if digital {
            let keys: Vec<String> = (0..stock).map(|i| format!("{sku}-KEY-{i}")).collect();
            fulfilment::import_keys(&db, &vault, sku, &keys, clock.now_ms()).await.unwrap();
        }
        model.stock.push((stock, 0, 0));
    }
    (Real { db, url, clock }, model)
}

fn pick(model: &Model, i: usize) -> Option<usize> {
    (!model.orders.is_empty()).then(|| i % model.orders.len())
}

async fn step(real: &mut Real, model: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let now = real.clock.now_ms();
    let db = &real.db;
    match *op {
        Op::Confirm { buyer, sku, qty } => {
            let session = match &model.sessions[buyer] {
                Some(s) => s.clone(),
                None => {
                    let (_, s) = catalog::create_session(db, now).await.unwrap();
                    model.sessions[buyer] = Some(s.id.clone());
                    s.id
                }
            };
            let basket = catalog::create_basket(db, &session, now).await.unwrap();
            catalog::set_basket_line(db, &session, &basket, SKUS[sku].0, qty, now).await.unwrap();
            let req = checkout::ConfirmRequest {
                currencies: None,
                session_id: &session,
                basket_id: &basket,
                gateway: "sandbox",
                channel: "form",
                idempotency_key: None,
                hold_ms: HOLD_MS,
                now,
            };
            let result = checkout::confirm(db, &req).await;
            let (on_hand, reserved, _) = model.stock[sku];
            if on_hand - reserved >= qty {
                let placed = result.map_err(|e| fail(format!("confirm refused: {e}")))?;
                model.stock[sku].1 += qty;
                model.orders.push(MOrder {
                    order_no: placed.order_no,
                    session,
                    basket,
                    sku,
                    qty,
                    total: SKUS[sku].1 * qty,
                    status: "pending_payment",
                    attempts: vec![(placed.attempt_ref, "created")],
                    hold_until: now + HOLD_MS,
                    captured: 0,
                    refunded: 0,
                    ever_paid: false,
                });
            } else {
                match result {
                    Err(e) if e.code() == "out_of_stock" => {}
                    other => return Err(fail(format!("expected out_of_stock, got {other:?}"))),
                }
            }
        }
        Op::Reconfirm { order } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let o = &model.orders[i];
            let req = checkout::ConfirmRequest {
                currencies: None,
                session_id: &o.session,
                basket_id: &o.basket,
                gateway: "sandbox",
                channel: "form",
                idempotency_key: None,
                hold_ms: HOLD_MS,
                now,
            };
            let placed = checkout::confirm(db, &req).await.map_err(|e| fail(format!("reconfirm: {e}")))?;
            if placed.order_no != o.order_no || placed.created {
                return Err(fail("a repeated confirm created another order".into()));
            }
        }
        Op::Pay { order, copies } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let (attempt_ref, state) = model.orders[i].attempts.last().cloned().unwrap();
            if state == "failed" {
                return Ok(());
            }
            pay(real, model, i, &attempt_ref, copies).await?;
        }
        Op::PayOld { order } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let Some((attempt_ref, _)) = model.orders[i].attempts.iter().find(|(_, s)| *s == "superseded").cloned()
            else {
                return Ok(());
            };
            pay(real, model, i, &attempt_ref, 1).await?;
        }
        Op::Fail { order } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let (attempt_ref, state) = model.orders[i].attempts.last().cloned().unwrap();
            let applied = payments::apply_event(db, &event(&attempt_ref, false, 0), LatePolicy::Manual, now)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let active = matches!(state, "created");
            if active {
                model.orders[i].attempts.last_mut().unwrap().1 = "failed";
            }
            let changed = matches!(applied, Applied::Changed { .. });
            if changed != active {
                return Err(fail(format!("failure on {state} attempt: {applied:?}")));
            }
        }
        Op::Tick { secs } => real.clock.advance_ms(secs * 1000),
        Op::Sweep => {
            for i in 0..model.orders.len() {
                let o = model.orders[i].clone();
                let expiry = payments::expire_order(db, &o.order_no, now).await.map_err(|e| fail(e.to_string()))?;
                let due = o.status == "pending_payment" && o.hold_until <= now;
                if due != (expiry == payments::Expiry::Expired) {
                    return Err(fail(format!("sweep of {} ({}, due {due}): {expiry:?}", o.order_no, o.status)));
                }
                if due {
                    let o = &mut model.orders[i];
                    o.status = "expired";
                    for a in &mut o.attempts {
                        if a.1 == "created" {
                            a.1 = "expired";
                        }
                    }
                    model.stock[o.sku].1 -= o.qty;
                }
            }
        }
        Op::Retry { order } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let o = model.orders[i].clone();
            let result = orders::new_attempt(db, Some(&o.session), &o.order_no, "sandbox", "form", now).await;
            if o.status == "pending_payment" && o.hold_until > now {
                let (placed, _) = result.map_err(|e| fail(format!("retry: {e}")))?;
                let o = &mut model.orders[i];
                for a in &mut o.attempts {
                    if a.1 == "created" {
                        a.1 = "superseded";
                    }
                }
                o.attempts.push((placed.attempt_ref, "created"));
            } else if result.is_ok() {
                return Err(fail(format!("retry allowed on a {} order", o.status)));
            }
        }
        Op::Cancel { order } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let o = model.orders[i].clone();
            let result = orders::cancel(db, Some(&o.session), &o.order_no, false, now).await;
            if o.status == "pending_payment" {
                result.map_err(|e| fail(format!("cancel: {e}")))?;
                let o = &mut model.orders[i];
                o.status = "cancelled";
                for a in &mut o.attempts {
                    if a.1 == "created" {
                        a.1 = "cancelled";
                    }
                }
                model.stock[o.sku].1 -= o.qty;
            } else if result.is_ok() {
                return Err(fail(format!("cancel allowed on a {} order", o.status)));
            }
        }
        Op::Refund { order, quarters } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            model.refund_seq += 1;
            let refund_no = format!("R{}", model.refund_seq);
            let o = model.orders[i].clone();
            let amount = o.total * quarters / 4;
            let result = refunds::request(db, &o.order_no, &refund_no, amount, "model", now).await;
            let refundable = matches!(o.status, "paid" | "delivered" | "paid_after_expiry");
            if refundable && o.refunded + amount <= o.captured {
                result.map_err(|e| fail(format!("refund: {e}")))?;
                // The gateway answers at once.
                refunds::settle(db, &refund_no, true, "", None, now).await.map_err(|e| fail(e.to_string()))?;
                let o = &mut model.orders[i];
                o.refunded += amount;
                if o.refunded == o.captured {
                    o.status = "refunded";
                }
            } else {
                match result {
                    Err(e) if ["refund_exceeds_captured", "not_refundable"].contains(&e.code()) => {}
                    other => {
                        return Err(fail(format!(
                            "refund of {amount} on {} ({}/{}): {other:?}",
                            o.status, o.refunded, o.captured
                        )));
                    }
                }
            }
        }
        Op::Restart => {
            real.db.close().await;
            real.db = Db::connect(&real.url, 8).await.map_err(|e| fail(e.to_string()))?;
        }
    }
    Ok(())
}

async fn pay(real: &mut Real, model: &mut Model, i: usize, attempt_ref: &str, copies: u8) -> Result<(), TestCaseError> {
    let now = real.clock.now_ms();
    let o = model.orders[i].clone();
    let ev = event(attempt_ref, true, o.total);
    let mut changed = 0;
    for _ in 0..copies {
        let applied =
            payments::apply_event(&real.db, &ev, LatePolicy::Manual, now).await.map_err(|e| fail(e.to_string()))?;
        if matches!(applied, Applied::Changed { .. }) {
            changed += 1;
        }
    }
    let state = o.attempts.iter().find(|(r, _)| r == attempt_ref).map(|(_, s)| *s).unwrap_or("");
    if state == "succeeded" {
        return if changed == 0 { Ok(()) } else { Err(fail("a repeated success changed something".into())) };
    }
    if changed != 1 {
        return Err(fail(format!("a new success applied {changed} times")));
    }
    let o = &mut model.orders[i];
    let digital = SKUS[o.sku].3;
    match o.status {
        "pending_payment" => {
            o.status = if digital { "delivered" } else { "paid" };
            o.captured = o.total;
            o.ever_paid = true;
            let s = &mut model.stock[o.sku];
            s.1 -= o.qty;
            s.0 -= o.qty;
            s.2 += o.qty;
            for a in &mut o.attempts {
                if a.1 == "created" {
                    a.1 = "superseded";
                }
            }
        }
        "expired" | "cancelled" => {
            o.status = "paid_after_expiry";
            o.captured = o.total;
        }
        _ => {} // a duplicate payment: refunded automatically, the order stays as it is
    }
    if let Some(a) = o.attempts.iter_mut().find(|(r, _)| r == attempt_ref) {
        a.1 = "succeeded";
    }
    Ok(())
}

async fn compare(real: &Real, model: &Model, after: &Op) -> Result<(), TestCaseError> {
    for o in &model.orders {
        let view = payments::get_order(&real.db, &o.order_no, false).await.map_err(|e| fail(e.to_string()))?;
        if view.status != o.status {
            return Err(fail(format!(
                "after {after:?}: order {} is {} but the model says {}",
                o.order_no, view.status, o.status
            )));
        }
        let active =
            view.attempts.iter().filter(|a| matches!(a.status.as_str(), "created" | "redirected" | "unknown")).count();
        let model_active = o.attempts.iter().filter(|(_, s)| *s == "created").count();
        if active != model_active {
            return Err(fail(format!(
                "after {after:?}: order {} has {active} active attempts, model {model_active}",
                o.order_no
            )));
        }
    }
    for (i, (sku, ..)) in SKUS.iter().enumerate() {
        let v = catalog::get_sku(&real.db, sku).await.map_err(|e| fail(e.to_string()))?;
        if (v.on_hand, v.reserved, v.sold) != model.stock[i] {
            return Err(fail(format!(
                "after {after:?}: sku {sku} is {:?}, model {:?}",
                (v.on_hand, v.reserved, v.sold),
                model.stock[i]
            )));
        }
    }
    let violations = check::run(&real.db).await.map_err(|e| fail(e.to_string()))?;
    if !violations.is_empty() {
        return Err(fail(format!("after {after:?}: kassa check: {violations:?}")));
    }
    Ok(())
}

fn run_model(backend: Backend, default_cases: u32) {
    let var = match backend {
        Backend::Sqlite => "KASSA_MODEL_CASES",
        Backend::Postgres(_) => "KASSA_MODEL_CASES_PG",
    };
    let cases = std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default_cases);
    let seed = std::env::var("KASSA_MODEL_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random::<u64>);
    let name = match backend {
        Backend::Sqlite => "SQLite",
        Backend::Postgres(_) => "PostgreSQL",
    };
    eprintln!("model-based schedules on {name}: {cases} cases, KASSA_MODEL_SEED={seed}");
    let config = Config { cases, rng_seed: RngSeed::Fixed(seed), failure_persistence: None, ..Config::default() };
    let rt = Arc::new(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap());
    // A tmpfs makes each schedule's durable commits cheap, so thousands of schedules fit in CI.
    let base = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&proptest::collection::vec(op(), 1..40), |ops| {
        rt.block_on(async {
            let dir = tempfile::tempdir_in(&base).unwrap();
            let (mut real, mut model) = setup(&backend, dir.path()).await;
            let mut outcome = Ok(());
            for op in &ops {
                outcome = step(&mut real, &mut model, op).await;
                if outcome.is_ok() {
                    outcome = compare(&real, &model, op).await;
                }
                if outcome.is_err() {
                    break;
                }
            }
            real.db.close().await;
            if let Backend::Postgres(server) = &backend {
                drop_database(server, &real.url).await;
            }
            outcome
        })
    });
    if let Err(e) = result {
        panic!("{e}\nreplay with KASSA_MODEL_SEED={seed}");
    }
}

async fn drop_database(server: &str, url: &str) {
    use sqlx::Connection as _;
    let name = url.rsplit('/').next().unwrap_or_default().split('?').next().unwrap_or_default().to_string();
    if let Ok(mut conn) = sqlx::PgConnection::connect(server).await {
        let _ =
            sqlx::Executor::execute(&mut conn, format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str()).await;
    }
}

#[test]
fn random_schedules_agree_with_the_model_sqlite() {
    run_model(Backend::Sqlite, 600);
}

#[test]
fn random_schedules_agree_with_the_model_postgres() {
    if let Some(b) = Backend::postgres() {
        run_model(b, 40);
    }
}

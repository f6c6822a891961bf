//! Model-based randomized schedules. A reference model of orders, stock, attempts, keys and refunds
//! runs beside the real store; random schedules of confirm, double confirm, pay (with duplicated
//! notifications), pay an old attempt, failed and cancelled attempts, clock ticks, sweeps, retry,
//! cancel, partial, failed and repeated refunds, the operator's moves (stock changes on both kinds
//! of SKU, key imports with duplicates, price changes down to zero), confirms with a promotion code
//! limited in all and per buyer (its uses given back by expiry, cancel and a full refund that asks,
//! the promotion paused, resumed and ended), Stripe disputes on paid orders (reports arriving late,
//! won, lost, reopened) with refunds made through them, and engine restarts are applied
//! to both, and after every step the real system must agree with the model, each order's outbox
//! must be a legal sequence, and `kassa check` (with the keys secret) must find nothing. Failing schedules shrink to a minimal one; the seed is
//! printed so `KASSA_MODEL_SEED=<seed>` replays the run. `KASSA_MODEL_CASES` and
//! `KASSA_MODEL_CASES_PG` set how many schedules run (default 600 on SQLite, 40 on PostgreSQL; CI
//! runs 2,000 and 100).

use kassa::domain::ids::{AttemptRef, BasketId, OrderNo, RefundNo, Sku};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

use crate::common::{Backend, KEYS_SECRET, fresh_database};
use kassa::clock::{Clock as _, ManualClock};
use kassa::domain::decide::LatePolicy;
use kassa::domain::event::{Outcome, VerifiedEvent};
use kassa::domain::{Currency, Money};
use kassa::store::payments::Applied;
use kassa::store::{Db, catalog, checkout, fulfilment, orders, payments};
use kassa::vault::Vault;

mod cases;
mod checks;
mod promotions;
mod refunds;

use checks::compare;

const HOLD_MS: i64 = 60_000;
/// The gateway every order pays at: one that has cases, so disputes link to their payments.
const GATEWAY: &str = "stripe";
/// (sku, unit price, stock, digital)
const SKUS: [(&str, i64, i64, bool); 2] = [("A", 1000, 5, false), ("K", 300, 4, true)];

#[derive(Debug, Clone)]
enum Op {
    Confirm {
        buyer: usize,
        sku: usize,
        qty: i64,
        /// With the promotion's code.
        code: bool,
    },
    Reconfirm {
        order: usize,
    },
    Pay {
        order: usize,
        copies: u8,
    },
    PayOld {
        order: usize,
    },
    Fail {
        order: usize,
        cancel: bool,
    },
    Tick {
        secs: i64,
    },
    Sweep,
    Retry {
        order: usize,
    },
    Cancel {
        order: usize,
    },
    Refund {
        order: usize,
        quarters: i64,
        succeed: bool,
    },
    /// The last refund number of the order again: the same terms replay, others are refused.
    RefundAgain {
        order: usize,
        same: bool,
    },
    /// The operator restocks or writes off (a digital SKU's stock is its keys: refused).
    Stock {
        sku: usize,
        delta: i64,
    },
    /// The operator imports `new` keys, and one already imported when `dup`.
    ImportKeys {
        new: i64,
        dup: bool,
    },
    /// The operator changes a SKU's price (zero included) and name.
    Price {
        sku: usize,
        price: i64,
    },
    Restart,
    /// The operator pauses, resumes or ends the promotion.
    Promotion {
        to: promotions::To,
    },
    /// Everything still captured refunded at once, giving the promotion's use back when asked.
    RefundRest {
        order: usize,
        give_back: bool,
    },
    /// Stripe reports the order's dispute, `late_ms` behind the clock.
    Case {
        order: usize,
        word: cases::Word,
        late_ms: i64,
    },
    /// The operator refunds quarters of the order through its case.
    CaseRefund {
        order: usize,
        quarters: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3_usize, 0..2_usize, 1..3_i64, any::<bool>())
            .prop_map(|(buyer, sku, qty, code)| Op::Confirm { buyer, sku, qty, code }),
        1 => (0..8_usize).prop_map(|order| Op::Reconfirm { order }),
        4 => (0..8_usize, 1..4_u8).prop_map(|(order, copies)| Op::Pay { order, copies }),
        1 => (0..8_usize).prop_map(|order| Op::PayOld { order }),
        1 => (0..8_usize, any::<bool>()).prop_map(|(order, cancel)| Op::Fail { order, cancel }),
        2 => (1..90_i64).prop_map(|secs| Op::Tick { secs }),
        2 => Just(Op::Sweep),
        1 => (0..8_usize).prop_map(|order| Op::Retry { order }),
        1 => (0..8_usize).prop_map(|order| Op::Cancel { order }),
        2 => (0..8_usize, 1..5_i64, prop::bool::weighted(0.8))
            .prop_map(|(order, quarters, succeed)| Op::Refund { order, quarters, succeed }),
        1 => (0..8_usize, any::<bool>()).prop_map(|(order, same)| Op::RefundAgain { order, same }),
        1 => (0..2_usize, -3..4_i64).prop_map(|(sku, delta)| Op::Stock { sku, delta }),
        1 => (0..3_i64, any::<bool>()).prop_map(|(new, dup)| Op::ImportKeys { new, dup }),
        1 => (0..2_usize, prop_oneof![Just(0_i64), Just(300), Just(1000)]).prop_map(|(sku, price)| Op::Price { sku, price }),
        1 => Just(Op::Restart),
        1 => promotions::to().prop_map(|to| Op::Promotion { to }),
        1 => (0..8_usize, any::<bool>()).prop_map(|(order, give_back)| Op::RefundRest { order, give_back }),
        2 => (0..8_usize, cases::word(), prop_oneof![Just(0_i64), Just(1_000), 0..120_000_i64])
            .prop_map(|(order, word, late_ms)| Op::Case { order, word, late_ms }),
        1 => (0..8_usize, 1..5_i64).prop_map(|(order, quarters)| Op::CaseRefund { order, quarters }),
    ]
}

#[derive(Debug, Clone)]
struct MOrder {
    order_no: OrderNo,
    session: kassa::domain::ids::SessionId,
    /// Which of the model's buyers placed it.
    buyer: usize,
    basket: BasketId,
    sku: usize,
    qty: i64,
    total: i64,
    status: &'static str,
    /// Attempt references, oldest first, with whether each is the active one.
    attempts: Vec<(AttemptRef, &'static str)>,
    hold_until: i64,
    captured: i64,
    refunded: i64,
    ever_paid: bool,
    /// Refunds asked for and accepted: (refund number, amount, whether it went through).
    refunds: Vec<(RefundNo, i64, bool)>,
    /// Automatic refunds of a second capture.
    duplicate_refunds: usize,
    /// Its use of the promotion: what it took off, and where the use is.
    promotion: Option<(i64, promotions::Use)>,
    /// The dispute about its payment.
    case: Option<cases::MCase>,
}

#[derive(Debug, Default)]
struct Model {
    /// (on_hand, reserved, sold) per SKU.
    stock: Vec<(i64, i64, i64)>,
    orders: Vec<MOrder>,
    sessions: Vec<Option<kassa::domain::ids::SessionId>>,
    refund_seq: usize,
    /// Today's unit price per SKU.
    prices: Vec<i64>,
    /// Keys imported into the digital SKU so far.
    keys_imported: i64,
    promotion: promotions::MPromotion,
    /// Provider messages about cases sent so far (each its own id).
    case_messages: usize,
}

struct Real {
    db: Db,
    url: String,
    /// The PostgreSQL database, dropped with this whatever the outcome.
    _database: Option<crate::common::TestDb>,
    clock: ManualClock,
    vault: Vault,
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
        gateway: GATEWAY.into(),
        event_id: format!("evt-{attempt_ref}-{}", if ok { "ok" } else { "fail" }),
        attempt_ref: attempt_ref.to_string(),
        outcome,
        raw_body: b"{}".to_vec(),
    }
}

async fn setup(backend: &Backend, dir: &std::path::Path) -> (Real, Model) {
    let (url, database) = match backend {
        Backend::Sqlite => (format!("sqlite://{}", dir.join("model.db").display()), None),
        pg => {
            let database = fresh_database(pg, dir).await;
            (database.url.clone(), Some(database))
        }
    };
    let db = Db::connect(&url, 8).await.unwrap();
    db.migrate().await.unwrap();
    let clock = ManualClock::default();
    let vault = Vault::from_hex(KEYS_SECRET).unwrap();
    let mut model = Model { sessions: vec![None; 3], ..Default::default() };
    for (sku, price, stock, digital) in SKUS {
        let kind = if digital { catalog::SkuKind::Digital } else { catalog::SkuKind::Physical };
        let new = catalog::NewSku {
            sku: Sku::parse(sku).unwrap(),
            name: sku.into(),
            kind,
            price: Money::new(price, Currency::parse("CNY").unwrap()).unwrap(),
            stock: if digital { 0 } else { stock },
            limits: Default::default(),
        };
        catalog::create_sku(&db, &new, false, clock.now_ms()).await.unwrap();
        if digital {
            let keys: Vec<String> = (0..stock).map(|i| format!("{sku}-KEY-{i}")).collect();
            fulfilment::import_keys(&db, &vault, &Sku::parse(sku).unwrap(), &keys, clock.now_ms()).await.unwrap();
        }
        model.stock.push((stock, 0, 0));
        model.prices.push(price);
        if digital {
            model.keys_imported = stock;
        }
    }
    model.promotion = promotions::create(&db, clock.now_ms()).await;
    (Real { db, url, _database: database, clock, vault }, model)
}

fn pick(model: &Model, i: usize) -> Option<usize> {
    (!model.orders.is_empty()).then(|| i % model.orders.len())
}

async fn step(real: &mut Real, model: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    let now = real.clock.now_ms();
    let db = &real.db;
    match *op {
        Op::Confirm { buyer, sku, qty, code } => {
            let session = match &model.sessions[buyer] {
                Some(s) => s.clone(),
                None => {
                    let (_, s) = catalog::create_session(db, now).await.unwrap();
                    model.sessions[buyer] = Some(s.id.clone());
                    s.id
                }
            };
            let basket = catalog::create_basket(db, &session, now).await.unwrap();
            catalog::set_basket_line(db, &session, &basket, &Sku::parse(SKUS[sku].0).unwrap(), qty, now).await.unwrap();
            let req = checkout::ConfirmRequest {
                hold_ms: HOLD_MS,
                promotion_code: code.then(|| promotions::CODE.to_string()),
                ..checkout::ConfirmRequest::new(session.clone(), basket.clone(), GATEWAY, "form", now)
            };
            let result = checkout::confirm(db, &req).await;
            let (on_hand, reserved, _) = model.stock[sku];
            let lines_total = model.prices[sku] * qty;
            let refused = promotions::refusal(model, code, buyer, lines_total, on_hand - reserved >= qty);
            if let Some(expected) = refused {
                match result {
                    Err(e) if e.code() == expected => {}
                    other => return Err(fail(format!("expected {expected}, got {other:?}"))),
                }
            } else if on_hand - reserved >= qty {
                let placed = result.map_err(|e| fail(format!("confirm refused: {e}")))?;
                let discount = if code { promotions::discount(lines_total) } else { 0 };
                let total = lines_total - discount;
                let mut o = MOrder {
                    order_no: placed.order_no,
                    session,
                    buyer,
                    basket,
                    sku,
                    qty,
                    total,
                    status: "pending_payment",
                    attempts: vec![(placed.attempt_ref, "created")],
                    hold_until: now + HOLD_MS,
                    captured: 0,
                    refunded: 0,
                    ever_paid: false,
                    refunds: Vec::new(),
                    duplicate_refunds: 0,
                    promotion: None,
                    case: None,
                };
                if code {
                    o.promotion = Some((discount, promotions::Use::Reserved));
                    model.promotion.take(buyer);
                }
                if total == 0 {
                    // A zero total completes at once, without a gateway.
                    o.status = if SKUS[sku].3 { "delivered" } else { "paid" };
                    o.ever_paid = true;
                    o.attempts[0].1 = "succeeded";
                    let s = &mut model.stock[sku];
                    s.0 -= qty;
                    s.2 += qty;
                } else {
                    model.stock[sku].1 += qty;
                }
                if placed.status.as_str() != o.status {
                    return Err(fail(format!("confirm answered {} but the model says {}", placed.status, o.status)));
                }
                model.orders.push(o);
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
                hold_ms: HOLD_MS,
                ..checkout::ConfirmRequest::new(o.session.clone(), o.basket.clone(), GATEWAY, "form", now)
            };
            let placed = checkout::confirm(db, &req).await.map_err(|e| fail(format!("reconfirm: {e}")))?;
            if placed.order_no != o.order_no || placed.created {
                return Err(fail("a repeated confirm created another order".into()));
            }
        }
        Op::Pay { order, copies } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let (attempt_ref, state) = model.orders[i].attempts.last().cloned().unwrap();
            if matches!(state, "failed" | "cancelled") {
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
        Op::Fail { order, cancel } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let (attempt_ref, state) = model.orders[i].attempts.last().cloned().unwrap();
            let mut ev = event(&attempt_ref, false, 0);
            if cancel {
                ev.outcome = Outcome::Cancelled;
                ev.event_id = format!("evt-{attempt_ref}-cancel");
            }
            let applied =
                payments::apply_event(db, &ev, LatePolicy::Manual, now).await.map_err(|e| fail(e.to_string()))?;
            let active = matches!(state, "created");
            if active {
                model.orders[i].attempts.last_mut().unwrap().1 = if cancel { "cancelled" } else { "failed" };
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
                let expiry =
                    kassa::store::expiry::expire_order(db, &o.order_no, now).await.map_err(|e| fail(e.to_string()))?;
                let due = o.status == "pending_payment" && o.hold_until <= now;
                if due != (expiry == kassa::store::expiry::Expiry::Expired) {
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
                    model.promotion.release(&mut o.promotion, o.buyer, promotions::Use::Reserved);
                    model.stock[o.sku].1 -= o.qty;
                }
            }
        }
        Op::Retry { order } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let o = model.orders[i].clone();
            let result = orders::new_attempt(db, Some(&o.session), &o.order_no, GATEWAY, "form", None, now).await;
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
                model.promotion.release(&mut o.promotion, o.buyer, promotions::Use::Reserved);
                model.stock[o.sku].1 -= o.qty;
            } else if result.is_ok() {
                return Err(fail(format!("cancel allowed on a {} order", o.status)));
            }
        }
        Op::Refund { order, quarters, succeed } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            model.refund_seq += 1;
            let refund_no = RefundNo::parse(&format!("R{}", model.refund_seq)).unwrap();
            let amount = model.orders[i].total * quarters / 4;
            refunds::refund(real, model, i, refund_no, amount, succeed).await?;
        }
        Op::RefundAgain { order, same } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            let o = model.orders[i].clone();
            let Some((refund_no, amount, _)) = o.refunds.last().cloned() else { return Ok(()) };
            let asked = if same { amount } else { amount + 1 };
            // The same terms, the promotion's return included.
            let ask = kassa::store::refunds::RefundAsk {
                amount_minor: Some(asked),
                reason: "model".into(),
                return_promotion: model.promotion.returning.contains(refund_no.as_str()),
                ..Default::default()
            };
            let result =
                kassa::store::refunds::request_asked(db, Default::default(), &o.order_no, &refund_no, &ask, now).await;
            match (same, result) {
                (true, Ok((_, false))) => {}
                (false, Err(e)) if e.code() == "refund_no_reused" => {}
                (_, other) => return Err(fail(format!("refund number {refund_no} again (same {same}): {other:?}"))),
            }
        }
        Op::Stock { sku, delta } => {
            let result = catalog::adjust_stock(db, &Sku::parse(SKUS[sku].0).unwrap(), delta, now).await;
            let (on_hand, reserved, _) = model.stock[sku];
            let expected = if delta == 0 {
                Err("invalid_quantity")
            } else if SKUS[sku].3 {
                Err("digital_stock_is_keys")
            } else if on_hand + delta < reserved {
                Err("insufficient_stock")
            } else {
                Ok(())
            };
            match (expected, result) {
                (Ok(()), Ok(_)) => model.stock[sku].0 += delta,
                (Err(code), Err(e)) if e.code() == code => {}
                (expected, got) => {
                    return Err(fail(format!("stock {delta} on {}: {got:?}, expected {expected:?}", SKUS[sku].0)));
                }
            }
        }
        Op::ImportKeys { new, dup } => {
            let (sku, ..) = SKUS[1];
            let mut keys: Vec<String> = (0..new).map(|n| format!("{sku}-KEY-{}", model.keys_imported + n)).collect();
            if dup {
                keys.push(format!("{sku}-KEY-0"));
            }
            if keys.is_empty() {
                return Ok(());
            }
            let count = fulfilment::import_keys(db, &real.vault, &Sku::parse(sku).unwrap(), &keys, now)
                .await
                .map_err(|e| fail(e.to_string()))?;
            if (count.imported, count.duplicates) != (new, i64::from(dup)) {
                return Err(fail(format!("import of {new} new keys (dup {dup}): {count:?}")));
            }
            model.keys_imported += new;
            model.stock[1].0 += new;
        }
        Op::Price { sku, price } => {
            let name = format!("{} at {price}", SKUS[sku].0);
            catalog::update_sku(
                db,
                &Sku::parse(SKUS[sku].0).unwrap(),
                Some(&name),
                Some(price),
                Default::default(),
                now,
            )
            .await
            .map_err(|e| fail(e.to_string()))?;
            model.prices[sku] = price;
        }
        Op::Promotion { to } => promotions::operate(real, model, to).await?,
        Op::RefundRest { order, give_back } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            promotions::refund_rest(real, model, i, give_back).await?;
        }
        Op::Case { order, word, late_ms } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            cases::report(real, model, i, word, late_ms).await?;
        }
        Op::CaseRefund { order, quarters } => {
            let Some(i) = pick(model, order) else { return Ok(()) };
            cases::refund(real, model, i, quarters).await?;
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
            if let Some((_, used)) = &mut o.promotion {
                *used = promotions::Use::Consumed;
            }
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
        // A duplicate payment: refunded automatically, the order stays as it is.
        _ => o.duplicate_refunds += 1,
    }
    if let Some(a) = o.attempts.iter_mut().find(|(r, _)| r == attempt_ref) {
        a.1 = "succeeded";
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
    let name = url.rsplit('/').next().unwrap_or_default().split('?').next().unwrap_or_default().to_string();
    let _ = crate::common::pg_admin(server, &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
}

#[test]
fn random_schedules_agree_with_the_model_sqlite() {
    run_model(Backend::Sqlite, 600);
}

#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[test]
fn random_schedules_agree_with_the_model_postgres() {
    if let Some(b) = Backend::postgres() {
        run_model(b, 40);
    }
}

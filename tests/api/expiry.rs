use reqwest::StatusCode;

use crate::common::{Backend, Opts, TestApp, s};
use crate::on_both;
use kassa::domain::ids::OrderNo;
use kassa::store::expiry::{self, Expiry};
use kassa::store::payments;

on_both!(sweeper_releases_stock_once, sweeper_once);
async fn sweeper_once(backend: Backend) {
    let t = TestApp::spawn_with(backend, Opts { hold_seconds: 60, manual_clock: true, ..Default::default() }).await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 2)]).await;
    // Not due yet.
    let r = t.app.sweeper.step().await.unwrap();
    assert_eq!(r.examined, 0);
    t.clock.as_ref().unwrap().advance_ms(60_000);
    let r = t.app.sweeper.step().await.unwrap();
    assert_eq!((r.examined, r.expired), (1, 1));
    // Twice: nothing more happens, stock is not returned twice.
    let r = t.app.sweeper.step().await.unwrap();
    assert_eq!(r.examined, 0);
    assert_eq!(
        expiry::expire_order(&t.app.state.db, &OrderNo::parse(&order_no).unwrap(), t.now_ms()).await.unwrap(),
        Expiry::Skipped(kassa::domain::OrderStatus::Expired)
    );
    let order = t.order(&order_no).await;
    assert_eq!(order["status"], "expired");
    assert_eq!(order["attempts"][0]["status"], "expired");
    let sku = t.sku("MUG").await;
    assert_eq!(
        (sku["on_hand"].as_i64(), sku["reserved"].as_i64(), sku["available"].as_i64()),
        (Some(5), Some(0), Some(5))
    );
    // The gateway side was closed first: the buyer can no longer pay.
    let (status, body) = t.complete(&attempt_ref, "succeeded", 1).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["code"], "payment_closed");
    t.assert_clean().await;
}

on_both!(payment_after_expiry_is_recorded_and_alerted, late_payment);
async fn late_payment(backend: Backend) {
    let t = TestApp::spawn_with(
        backend,
        Opts {
            hold_seconds: 0,
            ignore_close: true,
            late_policy: kassa::domain::decide::LatePolicy::Manual,
            ..Default::default()
        },
    )
    .await;
    t.create_sku("MUG", "Mug", 8900, 5).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    let r = t.app.sweeper.step().await.unwrap();
    assert_eq!(r.expired, 1);
    // The faulty gateway ignored the close and lets the buyer pay anyway.
    let (status, _) = t.complete(&attempt_ref, "succeeded", 2).await;
    assert_eq!(status, StatusCode::OK);
    t.settle().await;
    let order = t.order(&order_no).await;
    assert_eq!(order["status"], "paid_after_expiry");
    assert_eq!(order["captured_minor"], 8900);
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'late_payment'").await, 1);
    // The released stock was not taken back silently.
    assert_eq!(t.sku("MUG").await["available"], 5);
    t.assert_clean().await;
}

on_both!(sweeper_races_payment_200_times, race);
async fn race(backend: Backend) {
    let t = TestApp::spawn_with(backend, Opts { hold_seconds: 0, ..Default::default() }).await;
    const ROUNDS: usize = 200;
    t.create_sku("RACE", "Contested item", 500, ROUNDS as i64).await;
    let (mut paid, mut expired) = (0, 0);
    for round in 0..ROUNDS {
        let (_, order_no, attempt_ref) = t.pending_order(&[("RACE", 1)]).await;
        // The buyer pays at the gateway while the sweeper closes and expires the order.
        let sweeper = t.app.sweeper.clone();
        let (completed, swept) =
            tokio::join!(t.complete(&attempt_ref, "succeeded", 1), async move { sweeper.step().await });
        swept.unwrap();
        assert!(completed.0 == StatusCode::OK || completed.1["error"]["code"] == "payment_closed", "{completed:?}");
        t.settle().await;
        match t.status(&order_no).await.as_str() {
            "paid" => paid += 1,
            "expired" => expired += 1,
            other => panic!("round {round}: order {order_no} ended {other}"),
        }
    }
    eprintln!("race outcomes over {ROUNDS} rounds: {paid} paid, {expired} expired");
    let sku = t.sku("RACE").await;
    assert_eq!(sku["sold"].as_i64(), Some(paid));
    assert_eq!(sku["reserved"].as_i64(), Some(0));
    assert_eq!(sku["on_hand"].as_i64(), Some(ROUNDS as i64 - paid));
    assert_eq!(t.count("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").await, ROUNDS as i64);
    t.assert_clean().await;
    let _ = s;
}

on_both!(engine_level_race_of_apply_and_expire, engine_race);
/// The same race one level down, without the gateway's serialisation: the success is applied and
/// the order expired at the same instant. Exactly one wins; a success that loses becomes a
/// recorded late payment, never a lost one.
async fn engine_race(backend: Backend) {
    use kassa::domain::event::{Outcome, VerifiedEvent};
    use kassa::domain::{Currency, Money};
    let t = TestApp::spawn_with(backend, Opts { hold_seconds: 0, ..Default::default() }).await;
    const ROUNDS: usize = 200;
    t.create_sku("RACE", "Contested item", 500, ROUNDS as i64).await;
    let db = t.app.state.db.clone();
    let (mut paid, mut late) = (0_i64, 0_i64);
    for round in 0..ROUNDS {
        let (_, order_no, attempt_ref) = t.pending_order(&[("RACE", 1)]).await;
        let event = VerifiedEvent {
            gateway: "sandbox".into(),
            event_id: format!("evt_race_{round}"),
            attempt_ref: attempt_ref.clone(),
            outcome: Outcome::Succeeded {
                gateway_txn_id: format!("txn_{round}"),
                amount: Money::new(500, Currency::parse("CNY").unwrap()).unwrap(),
            },
            raw_body: b"{}".to_vec(),
        };
        let now = t.now_ms();
        let (db1, db2, no) = (db.clone(), db.clone(), OrderNo::parse(&order_no).unwrap());
        let apply = tokio::spawn(async move {
            payments::apply_event(&db1, &event, kassa::domain::decide::LatePolicy::Manual, now).await
        });
        let expire = tokio::spawn(async move { expiry::expire_order(&db2, &no, now).await });
        apply.await.unwrap().unwrap();
        expire.await.unwrap().unwrap();
        match t.status(&order_no).await.as_str() {
            "paid" => paid += 1,
            "paid_after_expiry" => late += 1,
            other => panic!("round {round}: {other}"),
        }
    }
    eprintln!("engine race over {ROUNDS} rounds: {paid} paid, {late} paid after expiry");
    let sku = t.sku("RACE").await;
    assert_eq!(sku["sold"].as_i64(), Some(paid));
    assert_eq!(sku["reserved"].as_i64(), Some(0));
    t.assert_clean().await;
}

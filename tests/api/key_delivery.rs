//! Card keys handed out by the payment's own batch: every digital line of an order takes its
//! quantity of keys, the oldest first and each key once; an order with a physical line stays
//! `paid` with its keys; a SKU with fewer unsold keys than its stock says refuses the payment
//! and changes nothing; a late payment's order takes its keys once it is paid after all.

use kassa::domain::decide::LatePolicy;
use kassa::error::Error;
use kassa::store::sql;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::common::{Backend, Opts, TestApp, s};
use crate::lifecycle::digital_sku;

/// The keys a buyer sees on each line of their order, and its status.
async fn keys_of(t: &TestApp, buyer: &str, order_no: &str) -> (String, Vec<Vec<String>>) {
    let r = t.http.get(t.url(&format!("/api/v1/orders/{order_no}"))).bearer_auth(buyer).send().await.unwrap();
    let order: Value = r.json().await.unwrap();
    let lines = order["lines"].as_array().unwrap().iter().map(|line| {
        line.get("keys").and_then(Value::as_array).map_or_else(Vec::new, |keys| keys.iter().map(s).collect())
    });
    (s(&order["status"]), lines.collect())
}

/// Moves card key `id` to `sku` by hand, as a repair that went wrong would.
async fn move_key(t: &TestApp, id: &str, sku: &str) {
    kassa::write_tx!(t.app.state.db, |tx| {
        sql::query("UPDATE card_keys SET sku = $1 WHERE id = $2").bind(sku).bind(id).execute(&mut **tx).await?;
        Ok::<(), Error>(())
    })
    .unwrap();
}

crate::on_both!(every_digital_line_takes_its_keys_in_the_payments_batch, several_lines);
async fn several_lines(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    digital_sku(&t, "GAME-A", &["A-1", "A-2", "A-3", "A-4"]).await;
    digital_sku(&t, "GAME-B", &["B-1", "B-2"]).await;
    t.create_sku("BOOK", "Book", 500, 5).await;

    // Two digital lines: delivered, each line its quantity of its own SKU's keys.
    let (buyer, order_no, attempt_ref) = t.pending_order(&[("GAME-A", 2), ("GAME-B", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 2).await;
    t.settle().await;
    let (status, lines) = keys_of(&t, &buyer, &order_no).await;
    assert_eq!(status, "delivered");
    assert_eq!(lines.iter().map(Vec::len).collect::<Vec<_>>(), [2, 1]);
    assert!(lines[0].iter().all(|k| k.starts_with("A-")) && lines[1][0].starts_with("B-"), "{lines:?}");
    assert_ne!(lines[0][0], lines[0][1]);

    // A digital line beside a physical one: paid, the digital line's key handed out, the book to ship.
    let (buyer, order_no, attempt_ref) = t.pending_order(&[("BOOK", 1), ("GAME-B", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let (status, lines) = keys_of(&t, &buyer, &order_no).await;
    assert_eq!(status, "paid");
    let handed: Vec<&String> = lines.iter().flatten().collect();
    assert_eq!(handed.len(), 1);
    assert!(handed[0].starts_with("B-"));

    // The stock says a key is left that is not there (moved away by hand): the payment is refused
    // as a whole, the order stays pending with its reservation, and no key moves.
    let (buyer, order_no, attempt_ref) = t.pending_order(&[("GAME-A", 2)]).await;
    let moved: String = sql::query_scalar(
        "SELECT id FROM card_keys WHERE sku = 'GAME-A' AND status = 'available' ORDER BY created_at DESC, id DESC LIMIT 1",
    )
    .fetch_one(t.app.state.db.read_pool())
    .await
    .unwrap();
    move_key(&t, &moved, "GAME-B").await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    let failed = "SELECT CAST(COUNT(*) AS BIGINT) FROM sandbox_deliveries WHERE last_error IS NOT NULL";
    let mut waited = 0;
    while t.sandbox_count(failed).await == 0 {
        assert!(waited < 3_000, "the notification was never refused");
        waited += 1;
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let (status, lines) = keys_of(&t, &buyer, &order_no).await;
    assert_eq!((status.as_str(), lines), ("pending_payment", vec![Vec::<String>::new()]));
    let available = "SELECT CAST(COUNT(*) AS BIGINT) FROM card_keys WHERE status = 'available'";
    assert_eq!(t.count(available).await, 2, "one key of each SKU, none handed out");
    let sku = t.sku("GAME-A").await;
    assert_eq!((sku["on_hand"].as_i64(), sku["reserved"].as_i64(), sku["sold"].as_i64()), (Some(2), Some(2), Some(2)));

    // Put back, the books agree again.
    move_key(&t, &moved, "GAME-A").await;
    t.assert_clean().await;
}

// A digital order paid after its hold ran out takes its keys once it is paid after all: taken
// again at once (`reallocate`), or when an operator accepts the late payment (`manual`).
crate::on_both!(a_late_digital_order_takes_its_keys_once_paid_after_all, late_digital);
async fn late_digital(backend: Backend) {
    for policy in [LatePolicy::Reallocate, LatePolicy::Manual] {
        let opts = Opts { hold_seconds: 0, ignore_close: true, late_policy: policy, ..Default::default() };
        let t = TestApp::spawn_with(backend.clone(), opts).await;
        digital_sku(&t, "GAME", &["G-1", "G-2", "G-3"]).await;
        let (buyer, order_no, attempt_ref) = t.pending_order(&[("GAME", 2)]).await;
        t.app.sweeper.step().await.unwrap();
        t.complete(&attempt_ref, "succeeded", 1).await;
        t.settle().await;
        if policy == LatePolicy::Manual {
            let (status, lines) = keys_of(&t, &buyer, &order_no).await;
            assert_eq!((status.as_str(), lines), ("paid_after_expiry", vec![Vec::<String>::new()]));
            let (status, body) = t.admin_post(&format!("/api/v1/admin/orders/{order_no}/accept"), json!({})).await;
            assert_eq!(status, StatusCode::OK, "{body}");
        }
        let (status, lines) = keys_of(&t, &buyer, &order_no).await;
        assert_eq!(status, "delivered", "{policy:?}");
        assert_eq!(lines[0].len(), 2, "{policy:?}");
        assert_ne!(lines[0][0], lines[0][1]);
        let sku = t.sku("GAME").await;
        assert_eq!(
            (sku["on_hand"].as_i64(), sku["reserved"].as_i64(), sku["sold"].as_i64()),
            (Some(1), Some(0), Some(2))
        );
        t.assert_clean().await;
    }
}

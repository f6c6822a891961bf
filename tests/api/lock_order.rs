//! The order in which a payment and a confirm lock rows on PostgreSQL: a SKU's stock row before
//! its buyer's session row. A buyer's next confirm and the payment of their last order touch
//! both; were one to take the session's row first, the two would deadlock (each command is
//! re-run after PostgreSQL's deadlock timeout, a second lost each time). The test holds the
//! session's row itself, lets the command run into it, and asks for the stock row without
//! waiting: the command must hold it already. (PostgreSQL only: SQLite has one writer.)

use kassa::store::sql;
use reqwest::StatusCode;

use crate::common::{Backend, TestApp};

/// Waits (bounded) until a backend of this database waits for a lock: the command under test
/// has run into the held session row.
async fn until_a_command_waits(t: &TestApp) {
    let waiting = "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_stat_activity \
                   WHERE datname = current_database() AND wait_event_type = 'Lock'";
    for _ in 0..3_000 {
        if t.count(waiting).await > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no command came to wait for the held session row");
}

/// Whether `sku`'s stock row is locked by another transaction now (asked without waiting).
async fn stock_row_locked(db: &kassa::store::Db, sku: &str) -> bool {
    let mut tx = db.begin().await.unwrap();
    let probe = sql::query("SELECT sku FROM skus WHERE sku = $1 FOR UPDATE NOWAIT").bind(sku).fetch_all(&mut *tx).await;
    match probe {
        Ok(_) => {
            tx.rollback().await.unwrap();
            false
        }
        Err(e) => {
            assert!(e.to_string().contains("could not obtain lock"), "{e}");
            true
        }
    }
}

#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_payment_and_a_confirm_lock_the_stock_before_the_session() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    t.create_sku("HOT", "Hot", 100, 10).await;
    let (buyer, order_no, attempt_ref) = t.pending_order(&[("HOT", 1)]).await;
    let next_basket = t.basket(&buyer, &[("HOT", 1)]).await;
    let session: String = sql::query_scalar("SELECT session_id FROM orders WHERE order_no = $1")
        .bind(&order_no)
        .fetch_one(t.app.state.db.read_pool())
        .await
        .unwrap();
    // A handle of its own, so the probes do not wait for a connection the commands hold.
    let db = kassa::store::Db::connect(&t.database_url, 4).await.unwrap();
    let hold_session = || async {
        let mut tx = db.begin().await.unwrap();
        sql::query("SELECT id FROM sessions WHERE id = $1 FOR UPDATE")
            .bind(&session)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        tx
    };

    // The payment of the buyer's order: its stock moves come before the status change that moves
    // the session's count of open orders.
    let held = hold_session().await;
    let (status, body) = t.complete(&attempt_ref, "succeeded", 1).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    until_a_command_waits(&t).await;
    assert!(stock_row_locked(&db, "HOT").await, "the payment waits for the session without holding the stock");
    held.rollback().await.unwrap();
    t.settle().await;
    assert_eq!(t.status(&order_no).await, "paid");

    // The buyer's next confirm: its hold on the stock comes before the session's counter.
    let held = hold_session().await;
    let confirm = tokio::spawn(t.checkout_request(&buyer, &next_basket, &serde_json::json!({})).send());
    until_a_command_waits(&t).await;
    assert!(stock_row_locked(&db, "HOT").await, "the confirm waits for the session without holding the stock");
    held.rollback().await.unwrap();
    assert_eq!(confirm.await.unwrap().unwrap().status(), StatusCode::CREATED);

    let sku = t.sku("HOT").await;
    assert_eq!((sku["on_hand"].as_i64(), sku["reserved"].as_i64(), sku["sold"].as_i64()), (Some(9), Some(1), Some(1)));
    t.assert_clean().await;
    db.close().await;
}

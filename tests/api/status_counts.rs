//! The orders' count by status (the `kassa_orders` gauges, the dashboard) is counted once and then
//! carried on from the status log; at every reading it equals a count of the orders themselves,
//! on PostgreSQL also when a log row committed after a higher one was read.

use kassa::store::{sql, status_counts};

use crate::common::{Backend, TestApp};
use crate::on_both;

/// The orders counted by status from their rows, as the tally must read.
async fn counted(t: &TestApp) -> Vec<(String, i64)> {
    let rows: Vec<String> =
        sql::query_scalar("SELECT status || ' ' || CAST(COUNT(*) AS TEXT) FROM orders GROUP BY status ORDER BY status")
            .fetch_all(t.app.state.db.read_pool())
            .await
            .unwrap();
    rows.iter()
        .map(|r| {
            let (status, n) = r.split_once(' ').unwrap();
            (status.to_string(), n.parse().unwrap())
        })
        .collect()
}

async fn assert_tally(t: &TestApp, when: &str) {
    let tally = status_counts::by_status(&t.app.state.db).await.unwrap();
    assert_eq!(tally, counted(t).await, "{when}");
}

async fn the_count_follows_every_change(backend: Backend) {
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 100, 50).await;
    assert_tally(&t, "no order yet").await;
    let (_, _, paid_ref) = t.pending_order(&[("MUG", 1)]).await;
    assert_tally(&t, "one order placed").await;
    t.complete(&paid_ref, "succeeded", 2).await;
    t.settle().await;
    assert_tally(&t, "paid").await;
    let (buyer, cancelled, _) = t.pending_order(&[("MUG", 2)]).await;
    let _pending = t.pending_order(&[("MUG", 1)]).await;
    let cancel = t
        .http
        .post(t.url(&format!("/api/v1/orders/{cancelled}/cancel")))
        .bearer_auth(&buyer)
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(cancel.status(), reqwest::StatusCode::OK);
    assert_tally(&t, "one cancelled, one pending, one paid").await;
    assert_eq!(
        status_counts::by_status(&t.app.state.db).await.unwrap().iter().map(|(_, n)| n).sum::<i64>(),
        3,
        "every order counted once"
    );
}

on_both!(the_count_follows_every_change, the_count_follows_every_change);

#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_committed_below_a_higher_log_row_is_counted() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 100, 50).await;
    let (_, held_order, _) = t.pending_order(&[("MUG", 1)]).await;
    let (_, dropped_order, _) = t.pending_order(&[("MUG", 1)]).await;
    assert_tally(&t, "two orders placed").await;

    // Two transactions of their own each move an order and log it, and stay open: one will
    // commit, one roll back.
    let writer = kassa::store::Db::connect(&t.database_url, 4).await.unwrap();
    let by_hand = |order_no: String| {
        let writer = writer.clone();
        async move {
            let mut tx = writer.begin().await.unwrap();
            sql::query("UPDATE orders SET status = 'cancelled' WHERE order_no = $1")
                .bind(&order_no)
                .execute(&mut *tx)
                .await
                .unwrap();
            sql::query(
                "INSERT INTO status_events (order_no, entity, entity_id, from_status, to_status, trigger_name, at) \
                 VALUES ($1, 'order', $1, 'pending_payment', 'cancelled', 'by_hand', 0)",
            )
            .bind(&order_no)
            .execute(&mut *tx)
            .await
            .unwrap();
            tx
        }
    };
    let held = by_hand(held_order).await;
    let dropped = by_hand(dropped_order).await;
    // Later log rows commit and are read meanwhile.
    let (_, _, later_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&later_ref, "succeeded", 1).await;
    t.settle().await;
    assert_tally(&t, "the two moves not committed").await;
    dropped.rollback().await.unwrap();
    held.commit().await.unwrap();
    assert_tally(&t, "one move committed below the rows read, one rolled back").await;
    t.pending_order(&[("MUG", 1)]).await;
    assert_tally(&t, "and after more").await;
}

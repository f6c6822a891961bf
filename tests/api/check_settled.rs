//! A check that reads what changed records as read only the part of the status log that no
//! transaction is still writing. PostgreSQL hands out the log's ids as rows are written and shows
//! the rows as their transactions commit, in another order; a run that recorded the highest id it
//! saw would leave a lower one, committed after it, to no later run. (PostgreSQL only: SQLite's one
//! writer commits in id order.)

use kassa::store::check::{self, Scope};
use kassa::store::sql;

use crate::common::{Backend, TestApp};

/// On PostgreSQL, a shop with one paid order and a clean check recorded; the order's number.
async fn paid_and_checked() -> Option<(TestApp, String)> {
    let backend @ Backend::Postgres(_) = Backend::postgres()? else { return None };
    let t = TestApp::spawn(backend).await;
    t.create_sku("MUG", "Mug", 100, 50).await;
    let (_, order_no, attempt_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&attempt_ref, "succeeded", 1).await;
    t.settle().await;
    let db = &t.app.state.db;
    let (violations, checked) = check::run_scoped(db, None, Scope::Full).await.unwrap();
    assert!(violations.is_empty(), "{violations:?}");
    check::record_clean(db, checked).await.unwrap();
    Some((t, order_no))
}

/// A transaction of `writer`'s own logs a change the order's row does not show (a log that no
/// longer replays to the order's status), and is left open; with the log row's id.
async fn logged_by_hand(writer: &kassa::store::Db, order_no: &str) -> (kassa::store::Tx<'static>, i64) {
    let mut open = writer.begin().await.unwrap();
    let held: i64 = sql::query_scalar(
        "INSERT INTO status_events (order_no, entity, entity_id, from_status, to_status, trigger_name, at) \
         VALUES ($1, 'order', $1, 'paid', 'cancelled', 'by_hand', 0) RETURNING id",
    )
    .bind(order_no)
    .fetch_one(&mut *open)
    .await
    .unwrap();
    (open, held)
}

#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_log_row_committed_after_a_check_began_is_read_by_the_next_one() {
    let Some((t, order_no)) = paid_and_checked().await else { return };
    let db = &t.app.state.db;
    let writer = kassa::store::Db::connect(&t.database_url, 2).await.unwrap();
    let (open, held) = logged_by_hand(&writer, &order_no).await;
    // Later log rows commit meanwhile: another order is bought and paid.
    let (_, _, later_ref) = t.pending_order(&[("MUG", 1)]).await;
    t.complete(&later_ref, "succeeded", 1).await;
    t.settle().await;
    let committed: i64 = t.count("SELECT CAST(MAX(id) AS BIGINT) FROM status_events").await;
    assert!(committed > held, "the later rows' ids are above the open transaction's");

    // The run cannot see the open row, and must not record as read what lies below it.
    let since = check::since_last_clean(db).await.unwrap();
    let (violations, checked) = check::run_scoped(db, None, since).await.unwrap();
    assert!(violations.is_empty(), "the open row is not seen yet: {violations:?}");
    assert!(checked.through < held, "recorded as read through {} with row {held} in flight", checked.through);
    check::record_clean(db, checked).await.unwrap();

    open.commit().await.unwrap();
    let since = check::since_last_clean(db).await.unwrap();
    let (violations, _) = check::run_scoped(db, None, since).await.unwrap();
    assert!(
        violations.iter().any(|v| v.invariant == "I7" && v.detail.contains(&order_no)),
        "the row committed after the last run is read by the next: {violations:?}"
    );
}

/// A check that waits for a transaction writing the log goes on once it commits, and reads it.
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_check_waits_out_a_log_write_in_flight() {
    let Some((t, order_no)) = paid_and_checked().await else { return };
    let db = t.app.state.db.clone();
    let writer = kassa::store::Db::connect(&t.database_url, 2).await.unwrap();
    let (open, held) = logged_by_hand(&writer, &order_no).await;
    let since = check::since_last_clean(&db).await.unwrap();
    let run = tokio::spawn({
        let db = db.clone();
        async move { check::run_scoped(&db, None, since).await.unwrap() }
    });
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    open.commit().await.unwrap();
    let (violations, checked) = run.await.unwrap();
    assert!(checked.through >= held, "read through {} after row {held} committed", checked.through);
    assert!(
        violations.iter().any(|v| v.invariant == "I7" && v.detail.contains(&order_no)),
        "the row committed while the run waited is read: {violations:?}"
    );
}

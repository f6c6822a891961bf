use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::common::{Backend, TestApp};
use kassa::error::Error;

/// Two commands that lock the same rows in opposite order deadlock on PostgreSQL; the one the
/// database aborts (40P01) is re-run by `write_tx!` and both commit. (PostgreSQL only: SQLite has
/// a single writer, so the two could not even interleave.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlocked_transactions_are_retried() {
    let Some(backend @ Backend::Postgres(_)) = Backend::postgres() else { return };
    let t = TestApp::spawn(backend).await;
    t.create_sku("A", "A", 100, 10).await;
    t.create_sku("B", "B", 100, 10).await;
    let db = t.app.state.db.clone();
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let runs = Arc::new(AtomicU32::new(0));
    let command = |first: &'static str, second: &'static str| {
        let (db, barrier, runs) = (db.clone(), barrier.clone(), runs.clone());
        async move {
            kassa::write_tx!(db, |tx| {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                sqlx::query("UPDATE skus SET on_hand = on_hand + 1 WHERE sku = $1")
                    .bind(first)
                    .execute(&mut **tx)
                    .await?;
                if run < 2 {
                    // Only the first two runs meet, so the retry does not wait for a partner.
                    barrier.wait().await;
                }
                sqlx::query("UPDATE skus SET on_hand = on_hand + 1 WHERE sku = $1")
                    .bind(second)
                    .execute(&mut **tx)
                    .await?;
                Ok::<(), Error>(())
            })
        }
    };
    let (a, b) = tokio::join!(tokio::spawn(command("A", "B")), tokio::spawn(command("B", "A")));
    a.unwrap().unwrap();
    b.unwrap().unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3, "one of the two was aborted and re-run once");
    assert_eq!(t.sku("A").await["on_hand"], 12);
    assert_eq!(t.sku("B").await["on_hand"], 12);
}

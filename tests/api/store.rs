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

/// Group commit (SQLite): in batches shared by many concurrent commands, a command that fails
/// after writing, and one cancelled midway, leave nothing behind, while every other command of
/// the same batches commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn group_commit_isolates_failed_and_cancelled_commands() {
    let t = TestApp::spawn(Backend::Sqlite).await;
    let db = t.app.state.db.clone();
    // A cancelled command reports that it has written, then waits forever until it is aborted.
    let (written_tx, mut written_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let command = |i: u32| {
        let (db, written) = (db.clone(), written_tx.clone());
        async move {
            kassa::write_tx!(db, |tx| {
                sqlx::query("INSERT INTO settings (name, value) VALUES ($1, 'x')")
                    .bind(format!("cmd-{i}"))
                    .execute(&mut **tx)
                    .await?;
                match i % 3 {
                    // Fails after its write: the write must be undone.
                    1 => Err(Error::conflict("test_failure", "on purpose")),
                    // Abandoned after its write (its request went away): the write must be undone.
                    2 => {
                        let _ = written.send(i);
                        std::future::pending::<()>().await;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            })
        }
    };
    let mut handles = std::collections::HashMap::new();
    for i in 0..90_u32 {
        handles.insert(i, tokio::spawn(command(i)));
    }
    let mut results = Vec::new();
    for i in 0..90_u32 {
        if i % 3 == 2 {
            continue;
        }
        // Abort the abandoned ones as they report, so the others behind them can run.
        loop {
            let handle = &handles[&i];
            if handle.is_finished() {
                break;
            }
            tokio::select! {
                Some(n) = written_rx.recv() => handles[&n].abort(),
                _ = tokio::time::sleep(std::time::Duration::from_millis(5)) => {}
            }
        }
        results.push((i, handles.remove(&i).unwrap().await.unwrap()));
    }
    for (i, result) in results {
        if i % 3 == 0 {
            assert!(result.is_ok(), "command {i}: {result:?}");
        } else {
            assert_eq!(result.unwrap_err().code(), "test_failure", "command {i}");
        }
    }
    for (i, handle) in handles {
        assert!(handle.await.unwrap_err().is_cancelled(), "command {i} should have been cancelled");
    }
    // One more command makes sure any batch left open is committed.
    command(300).await.unwrap();
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM settings WHERE name LIKE 'cmd-%' ORDER BY name")
        .fetch_all(t.app.state.db.read_pool())
        .await
        .unwrap();
    let mut expected: Vec<String> = (0..90).filter(|i| i % 3 == 0).map(|i| format!("cmd-{i}")).collect();
    expected.push("cmd-300".into());
    expected.sort();
    assert_eq!(names, expected);
}

//! How the sandbox records what it does: notifications queued for delivery, and payments and
//! deliveries written together — every write submitted while one runs goes in the next, as one
//! statement with its list padded to a few fixed lengths.

use super::*;

/// A notification to queue: for which attempt, its event, body and where it goes.
pub(super) struct Queued<'a> {
    pub(super) attempt_ref: &'a str,
    pub(super) event_id: &'a str,
    pub(super) body: &'a str,
    pub(super) notify_url: &'a str,
}

/// Adds `copies` deliveries of one notification to `batch`, due at `next_at` and leased to this
/// instance.
pub(super) fn enqueue(batch: &mut Batch, q: &Queued<'_>, copies: u32, next_at: i64, now: i64) -> Vec<Delivery> {
    let mut deliveries = Vec::new();
    for _ in 0..copies {
        let id = new_id();
        // Leased to this instance for its first try; if it dies, the worker takes over after.
        let lease_until = next_at.saturating_add(DELIVERY_LEASE_MS);
        batch.expect(
            "INSERT INTO sandbox_deliveries (id, attempt_ref, event_id, body, notify_url, status, tries, next_at, lease_until, created_at) \
             VALUES ($1, $2, $3, $4, $5, 'pending', 0, $6, $7, $8)",
            args![&id, q.attempt_ref, q.event_id, q.body, q.notify_url, next_at, lease_until, now],
            1,
            "the sandbox notification was not queued",
        );
        deliveries.push(Delivery { id, body: q.body.to_string(), url: q.notify_url.to_string() });
    }
    deliveries
}

/// A notification copy to send.
pub(super) struct Delivery {
    pub(super) id: String,
    pub(super) body: String,
    pub(super) url: String,
}

/// A record waiting for its recorder, and who waits for it to be written.
pub(super) struct Pending<T> {
    pub(super) item: T,
    pub(super) done: tokio::sync::oneshot::Sender<std::result::Result<(), String>>,
}

pub(super) type Queue<T> = tokio::sync::mpsc::UnboundedSender<Pending<T>>;

/// Hands `item` to its recorder ([`coalesce`]) and waits until it is written.
pub(super) async fn submit<T>(queue: &Queue<T>, item: T, recorder: &str) -> std::result::Result<(), String> {
    let (done, written) = tokio::sync::oneshot::channel();
    queue.send(Pending { item, done }).map_err(|_| format!("{recorder} has stopped"))?;
    written.await.map_err(|_| format!("{recorder} has stopped"))?
}

/// Writes records as they come, on `db`'s writer: whatever queued up while the previous write
/// ran goes in the next one (at most `max`), so under load one write records many, and an idle
/// recorder writes a lone record at once.
pub(super) async fn coalesce<T, W, F>(
    db: Db,
    mut queue: tokio::sync::mpsc::UnboundedReceiver<Pending<T>>,
    max: usize,
    write: W,
) where
    W: Fn(Db, Vec<T>) -> F,
    F: std::future::Future<Output = Result<u64>> + Send + 'static,
{
    while let Some(first) = queue.recv().await {
        let mut pending = vec![first];
        while pending.len() < max {
            match queue.try_recv() {
                Ok(p) => pending.push(p),
                Err(_) => break,
            }
        }
        let (items, waiting): (Vec<T>, Vec<_>) = pending.into_iter().map(|p| (p.item, p.done)).unzip();
        let outcome = db.on_writer(write(db.clone(), items)).await.and_then(|w| w).map(drop).map_err(|e| e.to_string());
        for done in waiting {
            // The submitter may have gone (its request was cancelled): the record stands anyway.
            drop(done.send(outcome.clone()));
        }
    }
}

/// `items` with the last one repeated up to the next power of two: a multi-row statement then
/// has one of a handful of texts, each prepared once per connection.
pub(super) fn padded<T>(items: &[T]) -> Vec<&T> {
    let Some(last) = items.last() else { return Vec::new() };
    items.iter().chain(std::iter::repeat(last)).take(items.len().next_power_of_two()).collect()
}

/// `$from, $from+1, …`, `n` of them, comma-separated.
pub(super) fn params(from: usize, n: usize) -> String {
    (from..from + n).map(|i| format!("${i}")).collect::<Vec<_>>().join(", ")
}

/// Marks `ids` delivered, in one statement; returns how many it changed.
pub(super) async fn mark_delivered(db: Db, ids: Vec<String>, now: i64) -> Result<u64> {
    let ids = padded(&ids);
    if ids.is_empty() {
        return Ok(0);
    }
    let sql = format!(
        "UPDATE sandbox_deliveries SET status = 'delivered', tries = tries + 1, next_at = $1, lease_until = 0, \
         last_error = NULL WHERE id IN ({})",
        params(2, ids.len())
    );
    db.write_one(|| ids.iter().fold(sql::query(&sql).bind(now), |q, id| q.bind(*id))).await
}

/// A payment the merchant asked for, to record.
pub(super) struct Registration {
    pub(super) attempt_ref: String,
    pub(super) merchant_id: String,
    pub(super) amount: Money,
    pub(super) subject: String,
    pub(super) notify_url: String,
    pub(super) return_url: String,
    pub(super) expires_at_ms: i64,
    pub(super) now: i64,
}

/// Columns of a [`Registration`] as bound, in order.
pub(super) const REGISTRATION_COLUMNS: usize = 9;

/// Records `rows`, in one statement on the records' writer. A payment already known keeps its
/// record (registering is idempotent: the pay page registers again what the hand-off did).
pub(super) async fn insert_payments(db: Db, rows: Vec<Registration>) -> Result<u64> {
    let rows = padded(&rows);
    if rows.is_empty() {
        return Ok(0);
    }
    let values: Vec<String> = (0..rows.len())
        .map(|i| {
            let p = i * REGISTRATION_COLUMNS;
            // The last value (now) serves both created_at and updated_at.
            format!(
                "({}, 'open', 0, ${now}, ${now})",
                params(p + 1, REGISTRATION_COLUMNS - 1),
                now = p + REGISTRATION_COLUMNS
            )
        })
        .collect();
    let sql = format!(
        "INSERT INTO sandbox_payments (attempt_ref, merchant_id, amount_minor, currency, subject, notify_url, \
         return_url, expires_at, status, closed, created_at, updated_at) VALUES {} ON CONFLICT (attempt_ref) DO NOTHING",
        values.join(", ")
    );
    db.write_one(|| {
        rows.iter().fold(sql::query(&sql), |q, r| {
            q.bind(&r.attempt_ref)
                .bind(&r.merchant_id)
                .bind(r.amount.amount_minor())
                .bind(r.amount.currency().code())
                .bind(&r.subject)
                .bind(&r.notify_url)
                .bind(&r.return_url)
                .bind(r.expires_at_ms)
                .bind(r.now)
        })
    })
    .await
}

/// A paid sandbox payment as a verified success; `source` (close, query) keeps the event id
/// stable per payment so repeated answers de-duplicate.
pub(super) fn paid_event(p: &sql::Row, attempt_ref: &str, source: &str) -> Result<VerifiedEvent> {
    let event_id: Option<String> = col(p, "event_id")?;
    let amount = Money::new(col(p, "amount_minor")?, Currency::parse(&col::<String>(p, "currency")?)?)?;
    let body = json!({source: attempt_ref, "status": "succeeded"}).to_string();
    Ok(VerifiedEvent {
        gateway: protocol::NAME.to_string(),
        event_id: format!("{source}_{}", event_id.unwrap_or_default()),
        attempt_ref: attempt_ref.to_string(),
        outcome: Outcome::Succeeded { gateway_txn_id: col::<Option<String>>(p, "txn_id")?.unwrap_or_default(), amount },
        raw_body: body.into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three ids go as a list of four (the last repeated): exactly those three are marked
    /// delivered, one try more each, and a fourth delivery is left as it was.
    #[tokio::test]
    async fn delivered_ids_are_marked_in_one_padded_statement() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("kassa.db").display());
        let db = Db::connect(&url, 2).await.unwrap();
        db.migrate().await.unwrap();
        let records = db.open_sandbox(&url).await.unwrap();
        let ids: Vec<String> = (0..4).map(|i| format!("d{i}")).collect();
        for id in &ids {
            records
                .write_one(|| {
                    sql::query(
                        "INSERT INTO sandbox_deliveries (id, attempt_ref, event_id, body, notify_url, status, tries, next_at, \
                         lease_until, last_error, created_at) VALUES ($1, 'a', 'e', '{}', 'u', 'pending', 2, 5, 9, 'x', 1)",
                    )
                    .bind(id)
                })
                .await
                .unwrap();
        }
        assert_eq!(mark_delivered(records.clone(), ids[..3].to_vec(), 77).await.unwrap(), 3);
        assert_eq!(mark_delivered(records.clone(), Vec::new(), 77).await.unwrap(), 0);
        let rows: Vec<(String, String, i64, i64, i64, Option<String>)> = sql::query_as(
            "SELECT id, status, tries, next_at, lease_until, last_error FROM sandbox_deliveries ORDER BY id",
        )
        .fetch_all(records.read_pool())
        .await
        .unwrap();
        let delivered = |id: &str| (id.to_string(), "delivered".to_string(), 3, 77, 0, None);
        let untouched = ("d3".to_string(), "pending".to_string(), 2, 5, 9, Some("x".to_string()));
        assert_eq!(rows, vec![delivered("d0"), delivered("d1"), delivered("d2"), untouched]);
    }

    fn registration(attempt_ref: &str, subject: &str, amount_minor: i64) -> Registration {
        Registration {
            attempt_ref: attempt_ref.to_string(),
            merchant_id: "m".to_string(),
            amount: Money::new(amount_minor, Currency::parse("CNY").unwrap()).unwrap(),
            subject: subject.to_string(),
            notify_url: format!("https://shop.test/notify/{attempt_ref}"),
            return_url: format!("https://shop.test/return/{attempt_ref}"),
            expires_at_ms: 9_000,
            now: 42,
        }
    }

    /// Three payments go as a list of four (the last repeated); one of them is known already and
    /// keeps its record: registering is idempotent. Every value lands in its own column.
    #[tokio::test]
    async fn payments_are_registered_in_one_padded_statement() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("kassa.db").display());
        let db = Db::connect(&url, 2).await.unwrap();
        db.migrate().await.unwrap();
        let records = db.open_sandbox(&url).await.unwrap();
        assert_eq!(insert_payments(records.clone(), vec![registration("a1", "first", 100)]).await.unwrap(), 1);
        let again =
            vec![registration("a0", "zero", 50), registration("a1", "again", 999), registration("a2", "two", 7)];
        assert_eq!(insert_payments(records.clone(), again).await.unwrap(), 2);
        assert_eq!(insert_payments(records.clone(), Vec::new()).await.unwrap(), 0);
        type Row = (String, String, i64, String, String, String, String, i64, String, i64, i64, i64);
        let rows: Vec<Row> = sql::query_as(
            "SELECT attempt_ref, merchant_id, amount_minor, currency, subject, notify_url, return_url, expires_at, \
             status, closed, created_at, updated_at FROM sandbox_payments ORDER BY attempt_ref",
        )
        .fetch_all(records.read_pool())
        .await
        .unwrap();
        let row = |r: &str, subject: &str, amount: i64| {
            let (notify, back) = (format!("https://shop.test/notify/{r}"), format!("https://shop.test/return/{r}"));
            (r.into(), "m".into(), amount, "CNY".into(), subject.into(), notify, back, 9_000, "open".into(), 0, 42, 42)
        };
        assert_eq!(rows, vec![row("a0", "zero", 50), row("a1", "first", 100), row("a2", "two", 7)]);
    }

    /// Records submitted while a write runs go together in the next one, and every submitter is
    /// answered with its own write's outcome: a failed write fails its records only.
    #[tokio::test]
    async fn the_recorder_writes_what_queued_meanwhile_together() {
        let db = Db::connect("sqlite::memory:", 1).await.unwrap();
        let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (queue, taken) = tokio::sync::mpsc::unbounded_channel();
        let seen = Arc::clone(&batches);
        tokio::spawn(coalesce(db, taken, 3, move |_db, items: Vec<u32>| {
            seen.lock().unwrap().push(items.clone());
            async move { if items.contains(&13) { Err(Error::internal("thirteen")) } else { Ok(items.len() as u64) } }
        }));
        // Queued before the recorder runs: taken three at a time, in order.
        let submits: Vec<_> = [1, 2, 3, 4, 13, 6, 7].into_iter().map(|i| submit(&queue, i, "the recorder")).collect();
        let outcomes = futures_util::future::join_all(submits).await;
        assert_eq!(*batches.lock().unwrap(), vec![vec![1, 2, 3], vec![4, 13, 6], vec![7]]);
        let failed: Vec<bool> = outcomes.iter().map(|o| o.is_err()).collect();
        assert_eq!(failed, vec![false, false, false, true, true, true, false]);
        assert!(outcomes[4].as_ref().unwrap_err().contains("thirteen"));
        let (gone, taken) = tokio::sync::mpsc::unbounded_channel();
        drop(taken);
        assert_eq!(submit(&gone, 1, "a gone recorder").await.unwrap_err(), "a gone recorder has stopped");
    }
}

//! The engine scenarios (the store alone, no HTTP) and the durable-commit limit.

use super::*;
use kassa::domain::ids::{BasketId, Sku};
use kassa::store::sql;

/// In-process: the store alone, no HTTP.
pub(super) async fn engine_scenario(args: &BenchArgs) -> anyhow::Result<Report> {
    use kassa::store::{catalog, checkout, payments};
    let dir = ScratchDir::new()?;
    let url = args.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", dir.join("kassa.db").display()));
    let db = Db::connect_with(&url, 32, kassa::config::engine_from_env()?).await?;
    db.migrate().await?;
    let now = SystemClock.now_ms();
    let hot = args.scenario == "hot";
    let hot_stock = hot.then_some(args.hot_stock);
    let cny = kassa::domain::Currency::parse("CNY")?;
    let skus: Vec<Sku> = if hot {
        vec![Sku::stored("HOT")]
    } else {
        (0..SPREAD_SKUS).map(|i| Sku::stored(format!("E-{i:04}"))).collect()
    };
    for sku in &skus {
        let new = catalog::NewSku {
            sku: sku.clone(),
            name: sku.to_string(),
            kind: catalog::SkuKind::Physical,
            price: kassa::domain::Money::new(990, cny)?,
            stock: hot_stock.unwrap_or(SPREAD_STOCK),
            limits: Default::default(),
        };
        catalog::create_sku(&db, &new, true, now).await?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut set = tokio::task::JoinSet::new();
    let skus = Arc::new(skus);
    // `confirm`: baskets are prepared before the clock starts, so only confirms are timed.
    let confirm_only = args.scenario == "confirm";
    let line_request = args.line_request;
    let start = Arc::new(tokio::sync::Barrier::new(args.buyers + 1));
    for i in 0..args.buyers {
        let (db, stop, tally, skus, start) = (db.clone(), stop.clone(), tally.clone(), skus.clone(), start.clone());
        set.spawn(async move {
            let session = catalog::create_session(&db, SystemClock.now_ms()).await.ok().map(|(_, s)| s);
            let mut prepared = Vec::new();
            if let (true, Some(session)) = (confirm_only, &session) {
                for n in 0..PREPARED_BASKETS {
                    let now = SystemClock.now_ms();
                    let Ok(basket) = catalog::create_basket(&db, &session.id, now).await else { continue };
                    let sku = &skus[(i * 7919 + n * 104_729) % skus.len()];
                    if catalog::set_basket_line(&db, &session.id, &basket, sku, 1, now).await.is_ok() {
                        prepared.push(basket);
                    }
                }
            }
            start.wait().await;
            let Some(session) = session else { return };
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let now = SystemClock.now_ms();
                let basket = if confirm_only {
                    let Some(b) = prepared.pop() else { return };
                    b
                } else {
                    let sku = &skus[(i * 7919 + n * 104_729) % skus.len()];
                    if line_request {
                        let Ok(basket) = catalog::create_basket(&db, &session.id, now).await else { continue };
                        if catalog::set_basket_line(&db, &session.id, &basket, sku, 1, now).await.is_err() {
                            continue;
                        }
                        basket
                    } else {
                        let lines = vec![(sku.to_string(), 1)];
                        let Ok(basket) = catalog::open_basket(&db, &session.id, lines, now).await else { continue };
                        BasketId::stored(basket.basket_id)
                    }
                };
                // The engine bench holds orders open by the thousand: no per-buyer limit.
                let req = checkout::ConfirmRequest {
                    limits: kassa::domain::checkout::OrderLimits::default(),
                    ..checkout::ConfirmRequest::new(session.id.clone(), basket, "sandbox", "form", now)
                };
                let t0 = Instant::now();
                let result = checkout::confirm(&db, &req).await;
                let us = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
                let mut t = tally.lock().await;
                t.confirm_us.push(us);
                match result {
                    Ok(p) => {
                        t.confirms += 1;
                        t.last_confirm = Some(Instant::now());
                        t.placed.push(p.attempt_ref.to_string());
                    }
                    Err(e) => *t.errors.entry(e.code().to_string()).or_default() += 1,
                }
            }
        });
    }
    start.wait().await;
    let started = Instant::now();
    let deadline = tokio::time::sleep(Duration::from_secs(args.seconds));
    tokio::pin!(deadline);
    let mut running = args.buyers;
    while running > 0 {
        tokio::select! {
            _ = &mut deadline => break,
            done = set.join_next() => match done {
                Some(_) => running -= 1,
                None => break,
            },
        }
    }
    stop.store(true, Ordering::Relaxed);
    while set.join_next().await.is_some() {}
    let secs = started.elapsed().as_secs_f64();
    // Notifications: apply one verified success per placed order, concurrently, plus a duplicate.
    let placed = std::mem::take(&mut tally.lock().await.placed);
    let queue = Arc::new(Mutex::new(placed.clone()));
    let timer = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..args.buyers {
        let (db, queue) = (db.clone(), queue.clone());
        set.spawn(async move {
            loop {
                let Some(attempt_ref) = queue.lock().await.pop() else { return 0_u64 };
                let Ok(amount) = kassa::domain::Money::new(990, cny) else { return 0 };
                // Each payment its own transaction, as a gateway's are.
                let gateway_txn_id = format!("txn_{attempt_ref}");
                let ev = kassa::domain::event::VerifiedEvent {
                    gateway: "sandbox".into(),
                    event_id: format!("evt_{attempt_ref}"),
                    attempt_ref,
                    outcome: kassa::domain::event::Outcome::Succeeded { gateway_txn_id, amount },
                    raw_body: b"{}".to_vec(),
                };
                for _ in 0..2 {
                    let _ = payments::apply_event(&db, &ev, Default::default(), SystemClock.now_ms()).await;
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    let nsecs = timer.elapsed().as_secs_f64();
    let mut t = tally.lock().await;
    let violations = kassa::store::check::run(&db).await?.len();
    db.close().await;
    Ok(Report {
        scenario: args.scenario.clone(),
        mode: "engine (in-process, no HTTP)".into(),
        flow: flow(args.line_request),
        database: url.split(':').next().unwrap_or_default().to_string(),
        buyers: args.buyers,
        seconds: secs,
        confirms: t.confirms,
        confirms_per_s: t.confirms as f64 / selling_secs(&t, hot_stock, started, secs),
        notifications_applied: placed.len() as u64,
        notifications_per_s: placed.len() as f64 / nsecs,
        latency_ms: latency(std::mem::take(&mut t.confirm_us)),
        errors: t.errors.clone(),
        stock: hot_stock,
        check_violations: Some(violations),
        ..Default::default()
    })
}

/// The physical limit: sequential single-row durable commits (one flush each).
pub(super) async fn commit_limit(args: &BenchArgs) -> anyhow::Result<Report> {
    let dir = ScratchDir::new()?;
    let url = args.database_url.clone().unwrap_or_else(|| format!("sqlite://{}", dir.join("limit.db").display()));
    let db = Db::connect_with(&url, 4, kassa::config::engine_from_env()?).await?;
    db.migrate().await?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let started = Instant::now();
    let mut n = 0_u64;
    while Instant::now() < deadline {
        n += 1;
        let mut tx = db.begin().await?;
        // A value that changes every time: SQLite skips writing a row overwritten with the same
        // bytes, and a commit that changed nothing flushes nothing.
        sql::query("INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value")
            .bind(format!("bench-{}", n % 1000))
            .bind(n.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
    }
    let secs = started.elapsed().as_secs_f64();
    db.close().await;
    Ok(Report {
        scenario: "commit-limit".into(),
        mode: "one durable commit at a time".into(),
        database: url.split(':').next().unwrap_or_default().to_string(),
        seconds: secs,
        commits_per_s: Some(n as f64 / secs),
        ..Default::default()
    })
}

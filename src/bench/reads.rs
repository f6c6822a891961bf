//! `--scenario reads`: what an operator waits on, one request at a time as one operator makes them —
//! the admin order list's first page and a page half-way down the history, a search by each thing
//! it finds an order by (and one that finds nothing), each filter, and the CSV export of the last
//! month and of everything. Run it on a database with history (`kassa bench seed`, then
//! `--database-url`): on an empty one every read is fast.

use super::*;
use anyhow::Context as _;
use kassa::store::sql;

/// Requests of each read; fewer when its share of `--seconds` runs out first.
const READS_PER_QUERY: usize = 200;
/// Orders a page of the list holds in this scenario (the console's page size).
const PAGE: usize = 50;

/// Figures of one read.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ReadFigures {
    pub requests: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// Rows of a CSV export, and how many a second it streamed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows_per_s: Option<f64>,
    /// A statement day: the first run (which records the day), apart from the runs after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_ms: Option<f64>,
}

/// Values of the history to search for, read from its database.
struct Samples {
    orders: i64,
    deep_cursor: String,
    order_no: String,
    reference: Option<String>,
    txn: Option<String>,
    sku: Option<String>,
    newest: i64,
}

async fn samples(url: &str) -> anyhow::Result<Samples> {
    let db = Db::connect(url, 2).await?;
    let pool = db.read_pool();
    let orders: i64 = sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM orders").fetch_one(pool).await?;
    anyhow::ensure!(orders > 0, "the database has no orders: seed a history first (kassa bench seed)");
    let order_no: String =
        sql::query_scalar("SELECT order_no FROM orders ORDER BY created_at DESC, order_no DESC LIMIT 1 OFFSET $1")
            .bind(orders / 2)
            .fetch_one(pool)
            .await?;
    let at: i64 =
        sql::query_scalar("SELECT created_at FROM orders WHERE order_no = $1").bind(&order_no).fetch_one(pool).await?;
    let text = |sql: &'static str| async move { sql::query_scalar::<Option<String>>(sql).fetch_optional(pool).await };
    let reference =
        text("SELECT merchant_reference FROM orders WHERE merchant_reference IS NOT NULL ORDER BY order_no LIMIT 1")
            .await?
            .flatten();
    let txn = text(
        "SELECT gateway_txn_id FROM payment_attempts WHERE gateway_txn_id IS NOT NULL ORDER BY attempt_ref LIMIT 1",
    )
    .await?
    .flatten();
    let sku = text("SELECT sku FROM order_lines ORDER BY order_no LIMIT 1").await?.flatten();
    let newest: i64 = sql::query_scalar("SELECT MAX(created_at) FROM orders").fetch_one(pool).await?;
    db.close().await;
    Ok(Samples {
        orders,
        deep_cursor: kassa::store::listing::Cursor { at, key: order_no.clone() }.encode(),
        order_no,
        reference,
        txn,
        sku,
        newest,
    })
}

/// A read's query string, as pairs.
type Query = Vec<(&'static str, String)>;

fn page(more: &[(&'static str, &str)]) -> Query {
    let mut q = vec![("limit", PAGE.to_string())];
    q.extend(more.iter().map(|(k, v)| (*k, (*v).to_string())));
    q
}

fn figures(mut us: Vec<u64>) -> ReadFigures {
    us.sort_unstable();
    let at = |q: f64| us.get(((us.len() as f64 - 1.0) * q).round() as usize).map_or(0.0, |v| *v as f64 / 1000.0);
    ReadFigures { requests: us.len(), p50_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1.0), ..ReadFigures::default() }
}

pub(super) async fn reads_scenario(args: &BenchArgs) -> anyhow::Result<Report> {
    let server = http::start_server(args, 900).await?;
    let url = server.database_url.clone().context("the reads scenario needs --database-url (with --url)")?;
    let s = samples(&url).await?;
    let client = reqwest::Client::new();
    let month_from = jiff::Timestamp::from_millisecond(s.newest - 30 * 86_400_000)?.to_string();
    let mut queries: Vec<(&str, Query)> = vec![
        ("list: first page", page(&[])),
        ("list: page half-way down", page(&[("cursor", &s.deep_cursor)])),
        ("search: order number", vec![("q", s.order_no.clone())]),
        ("search: nothing found", vec![("q", "no-such-order".into())]),
        ("filter: status refunded", page(&[("status", "refunded")])),
        ("filter: gateway stripe", page(&[("gateway", "stripe")])),
        ("filter: gateway no order has", page(&[("gateway", "sandbox")])),
        ("filter: last month", page(&[("from", &month_from)])),
    ];
    if let Some(reference) = &s.reference {
        queries.push(("search: merchant reference", vec![("q", reference.clone())]));
    }
    if let Some(txn) = &s.txn {
        queries.push(("search: gateway transaction", vec![("q", txn.clone())]));
    }
    if let Some(sku) = &s.sku {
        queries.push(("filter: SKU", page(&[("sku", sku)])));
    }
    // A SKU no order has (one just added, or long unsold): the rarest a SKU can be.
    queries.push(("filter: SKU never sold", page(&[("sku", "NEVER-SOLD")])));
    let budget = Duration::from_secs(args.seconds.max(1)).div_f64(queries.len() as f64);
    let started = Instant::now();
    let mut reads = BTreeMap::new();
    for (name, query) in &queries {
        let mut us = Vec::new();
        let began = Instant::now();
        while us.len() < READS_PER_QUERY && (us.is_empty() || began.elapsed() < budget) {
            let t = Instant::now();
            let r = client
                .get(format!("{}/api/v1/admin/orders", server.base))
                .query(query)
                .bearer_auth(&server.admin)
                .send()
                .await?;
            anyhow::ensure!(r.status().is_success(), "{name}: {}", r.status());
            r.bytes().await?;
            us.push(t.elapsed().as_micros() as u64);
        }
        let f = figures(us);
        eprintln!("{name}: p50 {:.1} ms, p99 {:.1} ms", f.p50_ms, f.p99_ms);
        reads.insert((*name).to_string(), f);
    }
    for (name, query) in
        [("export: last month", vec![("from", month_from.clone())]), ("export: everything", Vec::new())]
    {
        let t = Instant::now();
        let mut r = client
            .get(format!("{}/api/v1/admin/orders.csv", server.base))
            .query(&query)
            .bearer_auth(&server.admin)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "{name}: {}", r.status());
        let mut lines = 0_u64;
        while let Some(chunk) = r.chunk().await? {
            lines += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        }
        let secs = t.elapsed().as_secs_f64();
        let rows = lines.saturating_sub(1);
        let mut f = figures(vec![t.elapsed().as_micros() as u64]);
        f.rows = Some(rows);
        f.rows_per_s = Some(rows as f64 / secs);
        eprintln!("{name}: {rows} rows in {secs:.1} s");
        reads.insert(name.to_string(), f);
    }
    let f = statement_day(&url, s.newest).await?;
    eprintln!(
        "statement day: {} lines, first run {:.1} ms, then p50 {:.1} ms",
        f.rows.unwrap_or(0),
        f.first_ms.unwrap_or(0.0),
        f.p50_ms
    );
    reads.insert("statement day: alipay".to_string(), f);
    let report = Report {
        scenario: "reads".into(),
        seconds: started.elapsed().as_secs_f64(),
        buyers: 1,
        history_orders: Some(s.orders),
        reads,
        ..Report::default()
    };
    let mut report = http::finish(args, &server, report).await?;
    report.buyers = 1;
    Ok(report)
}

/// Runs of one statement day's reconciliation, the first of them recording the day.
const STATEMENT_RUNS: usize = 5;

/// One statement day's reconciliation (对账) on the history: Alipay's day before the newest order's
/// (in Beijing time), its statement made of kassa's own payments and refunds of that day as an
/// agreeing day's file lists them (each payment with a fee of 0.6 %), reconciled against kassa's
/// side and recorded as a run does once it has the file ([`kassa::usecase::statements::reconcile_had`];
/// the download apart). The first run records the day and its fees; the runs after find it
/// unchanged. `rows`: the statement's lines; `first_ms`: the first run; the percentiles: the rest.
async fn statement_day(url: &str, newest: i64) -> anyhow::Result<ReadFigures> {
    use kassa::domain::statement::{LineKind, Statement, StatementLine, day_window, format_day};
    let db = Db::connect(url, 4).await?;
    let offset = time::UtcOffset::from_hms(8, 0, 0)?;
    let day = time::OffsetDateTime::from_unix_timestamp(newest / 1000)?.to_offset(offset).date() - time::Duration::DAY;
    let ours = kassa::store::statements::ours(
        &db,
        "alipay",
        (&format_day(day), day_window(day, offset)),
        &Statement::default(),
    )
    .await?;
    let line =
        |kind, merchant_ref: &str, txn: Option<&str>, refund_no: Option<&str>, amount_minor: i64, currency: &str| {
            StatementLine {
                kind,
                merchant_ref: merchant_ref.to_string(),
                gateway_txn_id: txn.unwrap_or_default().to_string(),
                refund_no: refund_no.map(str::to_string),
                amount_minor,
                fee_minor: if kind == LineKind::Payment { amount_minor * 6 / 1000 } else { 0 },
                currency: currency.to_string(),
            }
        };
    let mut lines: Vec<StatementLine> = ours
        .payments
        .iter()
        .map(|p| {
            line(LineKind::Payment, &p.attempt_ref, p.gateway_txn_id.as_deref(), None, p.amount_minor, &p.currency)
        })
        .collect();
    lines.extend(
        ours.refunds.iter().map(|r| line(LineKind::Refund, "", None, Some(&r.refund_no), r.amount_minor, &r.currency)),
    );
    let statement = Statement { lines, ..Statement::default() };
    let mut us = Vec::new();
    for _ in 0..STATEMENT_RUNS {
        let t = Instant::now();
        let changes = kassa::usecase::statements::reconcile_had(
            &db,
            ("alipay", None),
            (day, offset),
            &statement,
            SystemClock.now_ms(),
        )
        .await?;
        us.push(t.elapsed().as_micros() as u64);
        anyhow::ensure!(changes.opened == 0, "the statement made of kassa's own rows disagrees: {changes:?}");
    }
    db.close().await;
    let mut f = figures(us[1..].to_vec());
    f.first_ms = Some(us[0] as f64 / 1000.0);
    f.requests = STATEMENT_RUNS;
    f.rows = Some(statement.lines.len() as u64);
    f.rows_per_s = Some(statement.lines.len() as f64 * 1000.0 / f.p50_ms.max(0.001));
    Ok(f)
}

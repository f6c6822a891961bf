//! Shipping reports to WeChat (`domain::shipping`): queued in the transaction that delivers the
//! order (so a delivered JSAPI order always has its report, and only once), claimed by the
//! shipping worker under a lease, and finished with WeChat's answer; one given up is alerted in the
//! same transaction.

use crate::domain::status::ReportStatus;
use serde::Serialize;

use crate::args;
use crate::clock::{Millis, rfc3339};
use crate::domain::ids::{AttemptRef, OrderNo};
use crate::domain::shipping::{self, Logistics};
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::events::{self, Severity};
use crate::store::{Db, col, sql};

/// The setting naming the mini program whose payments are reported (absent: reports are off).
const REPORTING_APPID: &str = "wechatpay.shipping_reports_appid";

/// Turns reports on for payments under `appid` (the configured mini program's), or off; set at
/// start from the configuration, so the delivering transaction knows without being told.
pub async fn set_reporting(db: &Db, appid: Option<&str>) -> Result<()> {
    super::settings::set(db, REPORTING_APPID, appid).await
}

/// Queues the report of `order_no`'s shipment when the order was paid by a reported payment
/// (WeChat Pay JSAPI with the payer known, [`shipping::is_reported`], under the mini program
/// reports are on for); nothing otherwise. A second delivery of the same order queues nothing
/// more.
pub(super) fn add_report(batch: &mut Batch, order_no: &str, logistics: &Logistics, now: Millis) {
    let (tracking_no, express_company) = match logistics {
        Logistics::Express { tracking_no, express_company } => {
            (Some(tracking_no.as_str()), Some(express_company.as_str()))
        }
        _ => (None, None),
    };
    batch.add(
        "INSERT INTO shipping_reports (order_no, attempt_ref, status, logistics_type, tracking_no, express_company, tries, next_at, created_at) \
         SELECT o.order_no, a.attempt_ref, 'pending', $2, $3, $4, 0, $5, $5 FROM orders o \
         JOIN payment_attempts a ON a.attempt_ref = o.captured_attempt_ref \
         WHERE o.order_no = $1 AND a.gateway = $6 AND a.channel = $7 AND a.payer_openid IS NOT NULL \
         AND a.payer_appid = (SELECT value FROM settings WHERE name = $8) \
         ON CONFLICT (order_no) DO NOTHING",
        args![
            order_no,
            logistics.code(),
            tracking_no,
            express_company,
            now,
            shipping::GATEWAY,
            shipping::CHANNEL,
            REPORTING_APPID
        ],
    );
}

/// A report due to be sent, with what it says.
#[derive(Debug, Clone)]
pub struct DueReport {
    pub order_no: OrderNo,
    pub attempt_ref: AttemptRef,
    pub payer_openid: String,
    pub payer_appid: Option<String>,
    pub logistics: Logistics,
    pub tries: i64,
    /// The order's lines: name and quantity.
    pub lines: Vec<(String, i64)>,
}

/// Claims up to `limit` due reports for `lease_ms` (several instances never send the same one at
/// once; a crashed sender's lease runs out).
pub async fn claim(db: &Db, now: Millis, lease_ms: i64, limit: i64) -> Result<Vec<DueReport>> {
    let due = db.kind().claimed(
        "order_no",
        "SELECT order_no FROM shipping_reports \
         WHERE status = 'pending' AND next_at <= $2 AND lease_until <= $2 ORDER BY next_at, order_no LIMIT $3",
    );
    let claimed = crate::write_tx!(db, |tx| {
        let rows = sql::query(&format!(
            "UPDATE shipping_reports SET lease_until = $1 WHERE {due} \
             RETURNING order_no, attempt_ref, logistics_type, tracking_no, express_company, tries"
        ))
        .bind(now.saturating_add(lease_ms))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut **tx)
        .await?;
        rows.iter()
            .map(|r| {
                let code: i64 = col(r, "logistics_type")?;
                let logistics = Logistics::from_stored(code, col(r, "tracking_no")?, col(r, "express_company")?)
                    .ok_or_else(|| Error::internal(format!("shipping report with logistics type {code}")))?;
                Ok((
                    OrderNo::stored(col::<String>(r, "order_no")?),
                    AttemptRef::stored(col::<String>(r, "attempt_ref")?),
                    logistics,
                    col::<i64>(r, "tries")?,
                ))
            })
            .collect::<Result<Vec<_>>>()
    })?;
    let mut due = Vec::with_capacity(claimed.len());
    for (order_no, attempt_ref, logistics, tries) in claimed {
        let payer = sql::query("SELECT payer_openid, payer_appid FROM payment_attempts WHERE attempt_ref = $1")
            .bind(&attempt_ref)
            .fetch_one(db.read_pool())
            .await?;
        let lines = sql::query("SELECT name, quantity FROM order_lines WHERE order_no = $1 ORDER BY line_no")
            .bind(&order_no)
            .fetch_all(db.read_pool())
            .await?
            .iter()
            .map(|r| Ok((col(r, "name")?, col(r, "quantity")?)))
            .collect::<Result<Vec<_>>>()?;
        due.push(DueReport {
            order_no,
            attempt_ref,
            payer_openid: col(&payer, "payer_openid")?,
            payer_appid: col(&payer, "payer_appid")?,
            logistics,
            tries,
            lines,
        });
    }
    due.sort_by(|a, b| a.order_no.cmp(&b.order_no));
    Ok(due)
}

/// How a try ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    Reported,
    /// To be sent again at `next_at`.
    Retry {
        next_at: Millis,
        error: String,
    },
    /// Given up: alerted.
    Failed {
        error: String,
    },
}

/// Records a try of `order_no`'s report (its `tries`th).
pub async fn finish(db: &Db, order_no: &OrderNo, finish: &Finish, tries: i64, now: Millis) -> Result<()> {
    let (status, next_at, error) = match finish {
        Finish::Reported => (ReportStatus::Reported, now, None),
        Finish::Retry { next_at, error } => (ReportStatus::Pending, *next_at, Some(error.as_str())),
        Finish::Failed { error } => (ReportStatus::Failed, now, Some(error.as_str())),
    };
    crate::write_tx!(db, |tx| {
        sql::query(
            "UPDATE shipping_reports SET status = $1, tries = $2, next_at = $3, lease_until = 0, last_error = $4, \
             reported_at = CASE WHEN $1 = 'reported' THEN $5 ELSE reported_at END WHERE order_no = $6 AND status = 'pending'",
        )
        .bind(status.as_str())
        .bind(tries)
        .bind(next_at)
        .bind(error)
        .bind(now)
        .bind(order_no)
        .execute(&mut **tx)
        .await?;
        if let Finish::Failed { error } = finish {
            let details = format!(
                "WeChat did not take the shipping report of order {order_no} after {tries} tries: {error}; until it is \
                 reported, WeChat holds the payment's funds (report it in the mini program's admin console)"
            );
            events::raise_alert(tx, "shipping_report", Severity::Critical, order_no, Some(order_no), &details, now)
                .await?;
        }
        Ok(())
    })?;
    metrics::counter!("kassa_shipping_reports_total", "result" => match finish {
        Finish::Reported => "reported",
        Finish::Retry { .. } => "retry",
        Finish::Failed { .. } => "failed",
    })
    .increment(1);
    Ok(())
}

/// An order's shipping report, as the admin API and console show it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ShippingReportView {
    #[schema(schema_with = crate::store::views::report_status_schema)]
    pub status: ReportStatus,
    /// WeChat's `logistics_type`: 1 express, 2 same city, 3 virtual goods, 4 picked up.
    pub logistics_type: i64,
    pub tracking_no: Option<String>,
    pub express_company: Option<String>,
    pub tries: i64,
    pub last_error: Option<String>,
    pub reported_at: Option<String>,
}

pub async fn report_of(db: &Db, order_no: &OrderNo) -> Result<Option<ShippingReportView>> {
    let row = sql::query(
        "SELECT status, logistics_type, tracking_no, express_company, tries, last_error, reported_at FROM shipping_reports WHERE order_no = $1",
    )
    .bind(order_no)
    .fetch_optional(db.read_pool())
    .await?;
    row.map(|r| {
        Ok(ShippingReportView {
            status: col(&r, "status")?,
            logistics_type: col(&r, "logistics_type")?,
            tracking_no: col(&r, "tracking_no")?,
            express_company: col(&r, "express_company")?,
            tries: col(&r, "tries")?,
            last_error: col(&r, "last_error")?,
            reported_at: col::<Option<i64>>(&r, "reported_at")?.map(rfc3339),
        })
    })
    .transpose()
}

/// Reports waiting to be sent (for the monitor's gauge).
pub async fn backlog(db: &Db) -> Result<i64> {
    sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM shipping_reports WHERE status = 'pending'")
        .fetch_one(db.read_pool())
        .await
}

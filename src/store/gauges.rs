//! The gauges `/metrics` shows about the database, read from it when asked: each scrape sees the
//! counts as they are, and a status no order holds any longer reads 0. The orders' count by status
//! is carried on from the status log since the last scrape ([`status_counts`]), not counted again.

use crate::domain::OrderStatus;
use crate::error::Result;
use crate::store::{Db, cases, outbox, shipping, statements, status_counts};

/// Sets every database gauge from the database now. Without a webhook URL no message is waiting
/// to be sent, so the outbox backlog reads 0 (the messages are kept, marked unsent on the order).
pub async fn refresh(db: &Db, webhook_configured: bool) -> Result<()> {
    let counts = status_counts::by_status(db).await?;
    for status in OrderStatus::ALL {
        let n = counts.iter().find(|(s, _)| s == status.as_str()).map_or(0, |(_, n)| *n);
        metrics::gauge!("kassa_orders", "status" => status.as_str()).set(n as f64);
    }
    let backlog = if webhook_configured { outbox::backlog(db).await? } else { 0 };
    metrics::gauge!("kassa_outbox_backlog").set(backlog as f64);
    metrics::gauge!("kassa_shipping_reports_backlog").set(shipping::backlog(db).await? as f64);
    metrics::gauge!("kassa_statement_findings_open").set(statements::open_findings(db).await? as f64);
    let open_cases = cases::open_counts(db).await?;
    for provider in ["stripe", "wechatpay", "alipay"] {
        for state in ["needs_response", "under_review"] {
            let n = open_cases.iter().find(|(p, s, _)| p == provider && s == state).map_or(0, |c| c.2);
            metrics::gauge!("kassa_cases_open", "provider" => provider, "state" => state).set(n as f64);
        }
    }
    let (open, idle) = db.connections();
    metrics::gauge!("kassa_db_pool_connections", "state" => "open").set(open as f64);
    metrics::gauge!("kassa_db_pool_connections", "state" => "idle").set(idle as f64);
    Ok(())
}

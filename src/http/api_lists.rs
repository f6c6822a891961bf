//! The JSON API's lists and exports: the public catalog, orders (filtered, paged by cursor), the
//! orders and refunds of a date range as CSV (streamed: a year of orders is never held in
//! memory), and the shop's webhook messages with a resend.

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use utoipa::IntoParams;

use super::schema::{self, Catalog, CatalogItem, FILTER_LEN_MAX, MessagePage, OrderPage};
use super::{Admin, AppState};
use crate::clock::{Millis, rfc3339};
use crate::domain::OrderStatus;
// A money column of an export: major units, plain (`306.00`).
use crate::domain::money::decimal_minor as major;
use crate::error::{Error, Result};
use crate::store::catalog;
use crate::store::listing::{self, Cursor, OrderFilter};

/// Rows one query of an export reads (and one chunk of the response carries).
pub const EXPORT_BATCH: i64 = 500;

pub(super) async fn catalog_json(State(state): State<AppState>) -> Result<Response> {
    let items: Vec<CatalogItem> = catalog::list_skus(&state.db)
        .await?
        .into_iter()
        .map(|s| CatalogItem {
            sku: s.sku,
            name: s.name,
            kind: s.kind,
            price_minor: s.price_minor,
            currency: s.currency,
            available: s.available.max(0),
            max_per_order: s.max_per_order,
        })
        .collect();
    Ok(axum::Json(Catalog { items }).into_response())
}

/// The filters of the order list and its CSV export.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OrderFilterQuery {
    /// Orders in this status.
    #[param(schema_with = schema::order_status_filter)]
    status: Option<String>,
    /// Orders with a payment attempt on this gateway.
    #[param(schema_with = schema::filter_text)]
    gateway: Option<String>,
    /// Created at or after: a date (its day starts at midnight UTC) or an RFC 3339 time.
    #[param(schema_with = schema::time_bound)]
    from: Option<String>,
    /// Created before: a date (included whole, UTC) or an RFC 3339 time.
    #[param(schema_with = schema::time_bound)]
    to: Option<String>,
    /// Orders with a line of this SKU.
    #[param(schema_with = schema::filter_text)]
    sku: Option<String>,
    /// An order number, attempt reference, gateway transaction id or merchant reference (exactly).
    #[param(schema_with = schema::filter_text)]
    q: Option<String>,
}

/// A page of the order list: its filters (documented by [`OrderFilterQuery`]), how many rows and
/// after which.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OrdersQuery {
    #[serde(flatten)]
    #[param(ignore)]
    filter: OrderFilterQuery,
    #[param(schema_with = schema::page_limit)]
    limit: Option<String>,
    #[param(schema_with = schema::page_cursor)]
    cursor: Option<String>,
}

/// The date range of the refunds export.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RangeQuery {
    /// Requested at or after: a date (UTC) or an RFC 3339 time.
    #[param(schema_with = schema::time_bound)]
    from: Option<String>,
    /// Requested before: a date (included whole, UTC) or an RFC 3339 time.
    #[param(schema_with = schema::time_bound)]
    to: Option<String>,
}

/// How a CSV export is written.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ExportQuery {
    /// Start the file with a UTF-8 byte-order mark, so that Excel reads its text (Chinese names
    /// included) as UTF-8.
    bom: Option<bool>,
}

impl ExportQuery {
    pub(super) fn bom(&self) -> bool {
        self.bom.unwrap_or(false)
    }
}

/// What a CSV file starts with when it is to open in Excel.
pub(super) const UTF8_BOM: &str = "\u{feff}";

/// The filters of the webhook message list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WebhooksQuery {
    /// Messages in this state.
    #[param(schema_with = schema::message_status)]
    status: Option<String>,
    /// Messages about this order.
    #[param(schema_with = schema::filter_text)]
    order_no: Option<String>,
    #[param(schema_with = schema::page_limit)]
    limit: Option<String>,
    #[param(schema_with = schema::page_cursor)]
    cursor: Option<String>,
}

/// A query string read into `T`; one that cannot be is `invalid_filter`.
pub(super) fn read_query<T>(query: std::result::Result<Query<T>, QueryRejection>) -> Result<T> {
    query
        .map(|Query(q)| q)
        .map_err(|e| Error::invalid("invalid_filter", format!("the query string: {}", e.body_text())))
}

/// A query parameter that is text, bounded.
pub(super) fn text(value: Option<&String>, name: &str) -> Result<Option<String>> {
    let refused = || Error::invalid("invalid_filter", format!("{name}: at most {FILTER_LEN_MAX} printable characters"));
    match value {
        Some(v) if v.chars().count() > FILTER_LEN_MAX || v.chars().any(char::is_control) => Err(refused()),
        Some(v) => Ok(Some(v.trim().to_string()).filter(|v| !v.is_empty())),
        None => Ok(None),
    }
}

/// A time bound: an RFC 3339 time, or a date (UTC) — `from`'s day starts at its midnight, `to`'s
/// day is included whole.
fn time_bound(value: Option<&String>, name: &str, end: bool) -> Result<Option<Millis>> {
    let Some(v) = text(value, name)? else { return Ok(None) };
    let invalid = || Error::invalid("invalid_filter", format!("{name}: a date (2026-12-01) or an RFC 3339 time"));
    let at = match time::Date::parse(&v, time::macros::format_description!("[year]-[month]-[day]")) {
        Ok(date) => {
            let date = if end { date.next_day().ok_or_else(invalid)? } else { date };
            date.midnight().assume_utc()
        }
        Err(_) => {
            time::OffsetDateTime::parse(&v, &time::format_description::well_known::Rfc3339).map_err(|_| invalid())?
        }
    };
    Ok(Some(i64::try_from(at.unix_timestamp_nanos() / 1_000_000).map_err(|_| invalid())?))
}

fn order_filter(query: &OrderFilterQuery) -> Result<OrderFilter> {
    let status = text(query.status.as_ref(), "status")?
        .map(|s| {
            OrderStatus::parse(&s).ok_or_else(|| {
                let all: Vec<&str> = OrderStatus::ALL.iter().map(|s| s.as_str()).collect();
                Error::invalid("invalid_filter", format!("status: one of {}", all.join(", ")))
            })
        })
        .transpose()?;
    Ok(OrderFilter {
        status,
        gateway: text(query.gateway.as_ref(), "gateway")?,
        created_from: time_bound(query.from.as_ref(), "from", false)?,
        created_to: time_bound(query.to.as_ref(), "to", true)?,
        sku: text(query.sku.as_ref(), "sku")?,
        q: text(query.q.as_ref(), "q")?,
    })
}

fn cursor(value: Option<&String>) -> Result<Option<Cursor>> {
    value.filter(|c| !c.is_empty()).map(|c| Cursor::parse(c)).transpose()
}

pub(super) fn page_limit(value: Option<&String>) -> Result<i64> {
    let asked = value
        .map(|l| {
            let l = l.trim();
            let digits = l.strip_prefix('-').unwrap_or(l);
            match l.parse::<i64>() {
                Ok(n) => Ok(n),
                // A whole number too large for any page is held to the largest.
                Err(_) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                    Ok(if l.starts_with('-') { i64::MIN } else { i64::MAX })
                }
                Err(_) => Err(Error::invalid(
                    "invalid_filter",
                    format!("limit: a whole number from 1 to {}", listing::PAGE_MAX),
                )),
            }
        })
        .transpose()?;
    Ok(listing::limit(asked))
}

pub(super) async fn list_orders(
    State(state): State<AppState>,
    _admin: Admin,
    query: std::result::Result<Query<OrdersQuery>, QueryRejection>,
) -> Result<Response> {
    let query = read_query(query)?;
    let filter = order_filter(&query.filter)?;
    let page =
        listing::orders(&state.db, &filter, cursor(query.cursor.as_ref())?.as_ref(), page_limit(query.limit.as_ref())?)
            .await?;
    Ok(axum::Json(OrderPage::from(page)).into_response())
}

/// A text cell a person's spreadsheet will open: one starting like a formula is quoted with `'`
/// so it is shown, not run.
fn cell(text: &str) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{text}") } else { text.to_string() }
}

/// A CSV response whose body is written batch by batch: `batch(cursor)` reads the rows after
/// `cursor` and writes them; it answers the next cursor, `None` at the end.
fn csv_stream<F, Fut>(name: &str, header: &'static [&'static str], bom: bool, batch: F) -> Response
where
    F: Fn(Option<Cursor>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(Vec<Vec<String>>, Option<String>)>> + Send,
{
    enum Step {
        Header,
        After(Option<Cursor>),
        Done,
    }
    let write = |rows: &[Vec<String>]| -> std::io::Result<Bytes> {
        let mut w = csv::Writer::from_writer(Vec::new());
        for row in rows {
            w.write_record(row)?;
        }
        w.into_inner().map(Bytes::from).map_err(|e| e.into_error())
    };
    let stream = futures_util::stream::unfold((Step::Header, batch), move |(step, batch)| async move {
        match step {
            Step::Header => {
                let row: Vec<String> = header.iter().map(|h| (*h).to_string()).collect();
                let first = write(&[row])
                    .map(|h| if bom { Bytes::from([UTF8_BOM.as_bytes(), h.as_ref()].concat()) } else { h });
                Some((first, (Step::After(None), batch)))
            }
            Step::After(after) => match batch(after).await {
                Ok((rows, next)) => {
                    let next = match next.map(|c| Cursor::parse(&c)).transpose() {
                        Ok(Some(c)) => Step::After(Some(c)),
                        Ok(None) => Step::Done,
                        Err(e) => return Some((Err(std::io::Error::other(e.to_string())), (Step::Done, batch))),
                    };
                    Some((write(&rows), (next, batch)))
                }
                Err(e) => {
                    // The answer has begun: all that can be done is to cut it short, so the client
                    // sees an incomplete transfer rather than a file that looks whole.
                    tracing::warn!(error = %e, "export failed part way");
                    Some((Err(std::io::Error::other("export failed")), (Step::Done, batch)))
                }
            },
            Step::Done => None,
        }
    });
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/csv; charset=utf-8"));
    if let Ok(v) = header::HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    response
}

const ORDERS_CSV_HEADER: &[&str] = &[
    "order_no",
    "created_at",
    "status",
    "currency",
    "total",
    "captured",
    "refunded",
    "gateway",
    "attempt_ref",
    "gateway_txn_id",
    "merchant_reference",
    "lines",
    "metadata",
    "fee",
    "contact_email",
    "contact_phone",
    "discount",
    "promotion_code",
];

pub(super) async fn orders_csv(
    State(state): State<AppState>,
    _admin: Admin,
    query: std::result::Result<Query<OrderFilterQuery>, QueryRejection>,
    export: std::result::Result<Query<ExportQuery>, QueryRejection>,
) -> Result<Response> {
    orders_export(&state, &read_query(query)?, &read_query(export)?)
}

/// The orders export, for the admin API and the console alike.
pub(super) fn orders_export(state: &AppState, query: &OrderFilterQuery, export: &ExportQuery) -> Result<Response> {
    let filter = order_filter(query)?;
    let db = state.db.clone();
    Ok(csv_stream("orders.csv", ORDERS_CSV_HEADER, export.bom(), move |after| {
        let (db, filter) = (db.clone(), filter.clone());
        async move {
            let page = listing::export_orders(&db, &filter, after.as_ref(), EXPORT_BATCH).await?;
            let rows = page
                .items
                .iter()
                .map(|o| {
                    let s = &o.summary;
                    let lines: Vec<String> = o.lines.iter().map(|(sku, n)| format!("{sku} x{n}")).collect();
                    vec![
                        s.order_no.clone(),
                        s.created_at.clone(),
                        s.status.to_string(),
                        s.currency.clone(),
                        major(s.total_minor, &s.currency),
                        s.captured_minor.map(|c| major(c, &s.currency)).unwrap_or_default(),
                        major(s.refunded_minor, &s.currency),
                        s.gateway.clone(),
                        o.attempt_ref.clone().unwrap_or_default(),
                        cell(o.gateway_txn_id.as_deref().unwrap_or_default()),
                        cell(s.merchant_reference.as_deref().unwrap_or_default()),
                        cell(&lines.join("; ")),
                        if s.metadata.is_empty() { String::new() } else { cell(&json!(s.metadata).to_string()) },
                        o.fee_minor.map(|f| major(f, &s.currency)).unwrap_or_default(),
                        cell(s.contact.email.as_deref().unwrap_or_default()),
                        cell(s.contact.phone.as_deref().unwrap_or_default()),
                        major(s.discount_minor, &s.currency),
                        cell(s.promotion_code.as_deref().unwrap_or_default()),
                    ]
                })
                .collect();
            Ok((rows, page.next_cursor))
        }
    }))
}

const REFUNDS_CSV_HEADER: &[&str] = &[
    "refund_no",
    "order_no",
    "created_at",
    "updated_at",
    "status",
    "kind",
    "currency",
    "amount",
    "gateway",
    "attempt_ref",
    "gateway_txn_id",
    "merchant_reference",
    "reason",
    "fee",
];

pub(super) async fn refunds_csv(
    State(state): State<AppState>,
    _admin: Admin,
    query: std::result::Result<Query<RangeQuery>, QueryRejection>,
    export: std::result::Result<Query<ExportQuery>, QueryRejection>,
) -> Result<Response> {
    refunds_export(&state, &read_query(query)?, &read_query(export)?)
}

/// The refunds export, for the admin API and the console alike.
pub(super) fn refunds_export(state: &AppState, query: &RangeQuery, export: &ExportQuery) -> Result<Response> {
    let (from, to) = (time_bound(query.from.as_ref(), "from", false)?, time_bound(query.to.as_ref(), "to", true)?);
    let db = state.db.clone();
    Ok(csv_stream("refunds.csv", REFUNDS_CSV_HEADER, export.bom(), move |after| {
        let db = db.clone();
        async move {
            let page = listing::export_refunds(&db, from, to, after.as_ref(), EXPORT_BATCH).await?;
            let rows = page
                .items
                .iter()
                .map(|r| {
                    vec![
                        cell(&r.refund_no),
                        r.order_no.clone(),
                        rfc3339(r.created_at_ms),
                        rfc3339(r.updated_at_ms),
                        r.status.to_string(),
                        r.kind.clone(),
                        r.currency.clone(),
                        major(r.amount_minor, &r.currency),
                        r.gateway.clone(),
                        r.attempt_ref.clone(),
                        cell(r.gateway_txn_id.as_deref().unwrap_or_default()),
                        cell(r.merchant_reference.as_deref().unwrap_or_default()),
                        cell(&r.reason),
                        r.fee_minor.map(|f| major(f, &r.currency)).unwrap_or_default(),
                    ]
                })
                .collect();
            Ok((rows, page.next_cursor))
        }
    }))
}

pub(super) async fn list_webhooks(
    State(state): State<AppState>,
    _admin: Admin,
    query: std::result::Result<Query<WebhooksQuery>, QueryRejection>,
) -> Result<Response> {
    let query = read_query(query)?;
    let status = text(query.status.as_ref(), "status")?;
    if let Some(s) = &status
        && crate::domain::status::MessageStatus::parse(s).is_none()
    {
        return Err(Error::invalid("invalid_filter", "status: one of pending, delivered, dead"));
    }
    let order_no = text(query.order_no.as_ref(), "order_no")?;
    let page = listing::messages(
        &state.db,
        status.as_deref(),
        order_no.as_deref(),
        cursor(query.cursor.as_ref())?.as_ref(),
        page_limit(query.limit.as_ref())?,
    )
    .await?;
    Ok(axum::Json(MessagePage::from(page)).into_response())
}

pub(super) async fn resend_webhook(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
) -> Result<Response> {
    if !crate::domain::ids::is_plain_id(&id) {
        return Err(Error::not_found("webhook message"));
    }
    let message = crate::usecase::webhook::resend(&state.cx, &id).await?;
    Ok((StatusCode::OK, axum::Json(message)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> OrdersQuery {
        serde_urlencoded::from_str(&serde_urlencoded::to_string(pairs).unwrap()).unwrap()
    }

    #[test]
    fn a_date_bound_covers_its_whole_day() {
        let day = 1_764_547_200_000; // 2025-12-01T00:00:00Z
        let v = |s: &str| Some(s.to_string());
        assert_eq!(time_bound(v("2025-12-01").as_ref(), "from", false).unwrap(), Some(day));
        assert_eq!(time_bound(v("2025-12-01").as_ref(), "to", true).unwrap(), Some(day + 86_400_000));
        let exact = time_bound(v("2025-12-01T08:00:00+08:00").as_ref(), "to", true).unwrap();
        assert_eq!(exact, Some(day), "a time is taken as given");
        assert_eq!(time_bound(v("yesterday").as_ref(), "from", false).unwrap_err().code(), "invalid_filter");
        assert_eq!(time_bound(None, "from", false).unwrap(), None);
    }

    #[test]
    fn filters_refuse_what_they_cannot_mean() {
        assert_eq!(order_filter(&q(&[("status", "lost")]).filter).unwrap_err().code(), "invalid_filter");
        assert_eq!(order_filter(&q(&[("q", &"x".repeat(129))]).filter).unwrap_err().code(), "invalid_filter");
        assert_eq!(order_filter(&q(&[("q", "\rK")]).filter).unwrap_err().code(), "invalid_filter");
        assert_eq!(page_limit(q(&[("limit", "ten")]).limit.as_ref()).unwrap_err().code(), "invalid_filter");
        assert_eq!(page_limit(q(&[("limit", "100000")]).limit.as_ref()).unwrap(), listing::PAGE_MAX);
        assert_eq!(page_limit(q(&[("limit", "42995530787960897536")]).limit.as_ref()).unwrap(), listing::PAGE_MAX);
        assert_eq!(page_limit(q(&[("limit", "-42995530787960897536")]).limit.as_ref()).unwrap(), 1);
        let f = order_filter(&q(&[("status", "paid"), ("sku", "MUG"), ("q", " PO-1 ")]).filter).unwrap();
        assert_eq!((f.status, f.sku.as_deref(), f.q.as_deref()), (Some(OrderStatus::Paid), Some("MUG"), Some("PO-1")));
    }

    #[test]
    fn money_is_written_in_major_units_and_formulas_are_quoted() {
        assert_eq!(major(30600, "CNY"), "306.00");
        assert_eq!(major(1200, "JPY"), "1200");
        assert_eq!(cell("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
        assert_eq!(cell("-1"), "'-1");
        assert_eq!(cell("PO-1"), "PO-1");
    }
}

//! Lists that page: orders, refunds and webhook messages, newest first, by keyset — a cursor
//! names the last row a page showed, so a page costs the same however deep it is, and rows added
//! meanwhile neither repeat nor skip what follows.

use base64::Engine as _;
use serde::Serialize;

use crate::clock::{Millis, rfc3339};
use crate::domain::OrderStatus;
use crate::domain::shop::Metadata;
use crate::error::{Error, Result};
use crate::store::sql;
use crate::store::{Db, col};

/// Most rows one page holds.
pub const PAGE_MAX: i64 = 200;
/// Rows a page holds when the request names no limit.
pub const PAGE_DEFAULT: i64 = 50;

/// Where a page ends: the last row's time and key. Opaque to callers (URL-safe base64).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at: Millis,
    pub key: String,
}

impl Cursor {
    pub fn encode(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}:{}", self.at, self.key))
    }

    /// A cursor this kassa handed out; anything else is 400 `invalid_cursor`.
    pub fn parse(text: &str) -> Result<Cursor> {
        let invalid = || Error::invalid("invalid_cursor", "cursor is not one a page of this list returned");
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text).map_err(|_| invalid())?;
        let text = String::from_utf8(bytes).map_err(|_| invalid())?;
        let (at, key) = text.split_once(':').ok_or_else(invalid)?;
        let at = at.parse().map_err(|_| invalid())?;
        if key.is_empty() || key.len() > crate::domain::ids::MAX_ID_LEN {
            return Err(invalid());
        }
        Ok(Cursor { at, key: key.to_string() })
    }
}

/// One page, and the cursor of the next when there may be more.
#[derive(Debug, Clone, Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// The rows fetched with one more than `limit`: a page, and the cursor of the next if that extra
/// row came.
pub(crate) fn page<T>(mut items: Vec<T>, limit: i64, cursor_of: impl Fn(&T) -> Cursor) -> Page<T> {
    let limit = usize::try_from(limit).unwrap_or(0);
    let more = items.len() > limit;
    items.truncate(limit);
    let next_cursor = if more { items.last().map(|last| cursor_of(last).encode()) } else { None };
    Page { items, next_cursor }
}

/// A requested page size, held to 1..=[`PAGE_MAX`].
pub fn limit(asked: Option<i64>) -> i64 {
    asked.unwrap_or(PAGE_DEFAULT).clamp(1, PAGE_MAX)
}

/// Which orders a list shows; every field narrows it.
#[derive(Debug, Clone, Default)]
pub struct OrderFilter {
    pub status: Option<OrderStatus>,
    /// Orders with an attempt on this gateway.
    pub gateway: Option<String>,
    /// Created at or after (ms).
    pub created_from: Option<Millis>,
    /// Created before (ms).
    pub created_to: Option<Millis>,
    /// Orders with a line of this SKU.
    pub sku: Option<String>,
    /// An order number, attempt reference, gateway transaction id or merchant reference, exactly.
    pub q: Option<String>,
}

/// An order as a list shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct OrderSummary {
    pub order_no: String,
    #[schema(schema_with = crate::store::views::order_status_schema)]
    pub status: crate::domain::OrderStatus,
    pub total_minor: i64,
    pub currency: String,
    pub captured_minor: Option<i64>,
    pub refunded_minor: i64,
    pub gateway: String,
    pub merchant_reference: Option<String>,
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub metadata: Metadata,
    /// How the buyer may be reached.
    pub contact: crate::store::views::ContactView,
    /// What a promotion took off the lines (0 without one), and its code.
    pub discount_minor: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion_code: Option<String>,
    pub created_at: String,
    #[serde(skip)]
    pub created_at_ms: Millis,
}

impl OrderSummary {
    pub fn total_display(&self) -> String {
        crate::domain::money::format_minor(self.total_minor, &self.currency)
    }
}

/// What the order lists and the export read of an order: its row, what its refunds returned.
const ORDER_COLUMNS: &str = "o.order_no, o.status, o.total_minor, o.currency, o.captured_minor, o.gateway, \
     o.merchant_reference, o.metadata, o.contact_email, o.contact_phone, o.created_at, o.captured_attempt_ref, \
     o.discount_minor, o.promotion_code, CAST(COALESCE((SELECT SUM(r.amount_minor) FROM refunds r WHERE r.order_no = o.order_no \
     AND r.kind <> 'duplicate_payment' AND r.status = 'succeeded'), 0) AS BIGINT) AS refunded_minor";

/// The filter's conditions on `o` (only those it sets) and the keyset (rows before the cursor),
/// with their values. Each combination of filters is a statement of its own, planned for what it
/// asks: a search looks its value up by index (order number, merchant reference, attempt, gateway
/// transaction), a status reads its own index, a SKU its lines' index, a gateway its attempts'
/// index; the keyset is a comparison an index seeks to, so a page deep in a long history costs
/// what the first does.
fn order_where(filter: &OrderFilter, cursor: Option<&Cursor>) -> (String, Vec<sql::Arg>) {
    let mut conditions: Vec<String> = Vec::new();
    let mut args: Vec<sql::Arg> = Vec::new();
    let mut bind = |value: sql::Arg| {
        args.push(value);
        format!("${}", args.len())
    };
    let status = filter.status.map(|status| bind(status.as_str().into()));
    if let Some(p) = &status {
        conditions.push(format!("o.status = {p}"));
    }
    let read_by = read_by(filter);
    if let Some(gateway) = &filter.gateway {
        let p = bind(gateway.as_str().into());
        conditions.push(if matches!(read_by, Some(("ga", _))) {
            // Each order once: its last attempt on the gateway. The gateway is stated a second
            // time as a range of one value, for PostgreSQL's generic plan (the statement cache's):
            // it takes an equality to a parameter to hold one gateway's share of the attempts (a
            // third, in a shop of three) and would read every attempt newest first, each tested;
            // a range between parameters it takes as narrow, so it reads the gateway's index.
            format!(
                "ga.gateway = {p} AND ga.gateway >= {p} AND ga.gateway <= {p} AND NOT EXISTS (SELECT 1 \
                 FROM payment_attempts gb WHERE gb.order_no = ga.order_no AND gb.gateway = ga.gateway \
                 AND gb.seq > ga.seq)"
            )
        } else {
            format!("EXISTS (SELECT 1 FROM payment_attempts g WHERE g.order_no = o.order_no AND g.gateway = {p})")
        });
    }
    if let Some(from) = filter.created_from {
        conditions.push(format!("o.created_at >= {}", bind(from.into())));
    }
    if let Some(to) = filter.created_to {
        conditions.push(format!("o.created_at < {}", bind(to.into())));
    }
    if let Some(sku) = &filter.sku {
        let p = bind(sku.as_str().into());
        conditions.push(format!("sl.sku = {p}"));
    }
    if let Some(q) = filter.q.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
        let p = bind(q.into());
        // A buyer's contact, as the operator answering them types it: normalised as checkouts are.
        let mut contact = String::new();
        if let Ok(email) = crate::domain::contact::Email::parse(q) {
            let e = bind(email.as_str().into());
            contact.push_str(&format!(" UNION SELECT e.order_no FROM orders e WHERE e.contact_email = {e}"));
        } else if let Ok(phone) = crate::domain::contact::Phone::parse(q) {
            let f = bind(phone.as_str().into());
            contact.push_str(&format!(" UNION SELECT f.order_no FROM orders f WHERE f.contact_phone = {f}"));
        }
        conditions.push(format!(
            "o.order_no IN (SELECT {p} UNION SELECT r.order_no FROM orders r WHERE r.merchant_reference = {p} \
             UNION SELECT a.order_no FROM payment_attempts a WHERE a.attempt_ref = {p} \
             UNION SELECT t.order_no FROM payment_attempts t WHERE t.gateway_txn_id = {p}{contact})"
        ));
    }
    if let Some(c) = cursor {
        // A SKU's lines or a gateway's attempts are read newest first by order number (see
        // [`order_query`]): the cursor's order number is the seek. With a status, the row leads
        // with it: a seek in its index.
        match (&status, read_by) {
            (_, Some((key, _))) => conditions.push(format!("{key}.order_no < {}", bind(c.key.as_str().into()))),
            (Some(p), None) => {
                let (at, key) = (bind(c.at.into()), bind(c.key.as_str().into()));
                conditions.push(format!("(o.status, o.created_at, o.order_no) < ({p}, {at}, {key})"));
            }
            (None, None) => {
                let (at, key) = (bind(c.at.into()), bind(c.key.as_str().into()));
                conditions.push(format!("(o.created_at, o.order_no) < ({at}, {key})"));
            }
        }
    }
    let sql = if conditions.is_empty() { "1 = 1".to_string() } else { conditions.join(" AND ") };
    (sql, args)
}

/// The rows a filter reads newest first by order number instead of the orders themselves, when
/// it has them: a SKU's lines (`order_lines_by_sku`), else a gateway's attempts
/// (`payment_attempts_by_gateway`). Their alias, and what takes the place of `orders o`.
fn read_by(filter: &OrderFilter) -> Option<(&'static str, &'static str)> {
    if filter.sku.is_some() {
        Some(("sl", "order_lines sl JOIN orders o ON o.order_no = sl.order_no"))
    } else if filter.gateway.is_some() {
        Some(("ga", "payment_attempts ga JOIN orders o ON o.order_no = ga.order_no"))
    } else {
        None
    }
}

/// `SELECT {columns} FROM {from} WHERE` the filter, newest first, at most `limit` rows.
pub fn order_query(
    columns: &str,
    from: &str,
    filter: &OrderFilter,
    cursor: Option<&Cursor>,
    limit: i64,
) -> (String, Vec<sql::Arg>) {
    let (conditions, mut args) = order_where(filter, cursor);
    args.push(limit.into());
    let limit = args.len();
    if let Some((key, rows)) = read_by(filter) {
        // A SKU's orders come from its lines' index, a gateway's from its attempts' index, newest
        // first by order number, which is the list's order: an order number leads with its
        // creation time (the same instant as `created_at`) and breaks ties as the list does. A
        // rare SKU's or gateway's page costs what a common one's does, instead of every order
        // tested against it.
        let from = from.replacen("orders o", rows, 1);
        let sql =
            format!("SELECT {columns} FROM {from} WHERE {conditions} ORDER BY {key}.order_no DESC LIMIT ${limit}");
        return (sql, args);
    }
    // With one status, ordering by it too (it is the same order) is what its index gives: the
    // plan reads that index, whichever status it is asked for, instead of every order newest first.
    let by_status = if filter.status.is_some() { "o.status DESC, " } else { "" };
    let sql = format!(
        "SELECT {columns} FROM {from} WHERE {conditions} ORDER BY {by_status}o.created_at DESC, o.order_no DESC LIMIT ${limit}"
    );
    (sql, args)
}

fn order_summary(r: &sql::Row) -> Result<OrderSummary> {
    let created_at_ms: Millis = col(r, "created_at")?;
    Ok(OrderSummary {
        order_no: col(r, "order_no")?,
        status: col(r, "status")?,
        total_minor: col(r, "total_minor")?,
        currency: col(r, "currency")?,
        captured_minor: col(r, "captured_minor")?,
        refunded_minor: col(r, "refunded_minor")?,
        gateway: col(r, "gateway")?,
        merchant_reference: col(r, "merchant_reference")?,
        metadata: Metadata::from_stored(col::<Option<String>>(r, "metadata")?.as_deref()),
        contact: crate::store::views::ContactView::of_row(r)?,
        discount_minor: col(r, "discount_minor")?,
        promotion_code: col(r, "promotion_code")?,
        created_at: rfc3339(created_at_ms),
        created_at_ms,
    })
}

/// A page of orders matching `filter`, newest first, after `cursor`.
pub async fn orders(db: &Db, filter: &OrderFilter, cursor: Option<&Cursor>, limit: i64) -> Result<Page<OrderSummary>> {
    let (sql, args) = order_query(ORDER_COLUMNS, "orders o", filter, cursor, limit + 1);
    let rows = sql::query(&sql).bind_all(args).fetch_all(db.read_pool()).await?;
    let items = rows.iter().map(order_summary).collect::<Result<Vec<_>>>()?;
    Ok(page(items, limit, |o| Cursor { at: o.created_at_ms, key: o.order_no.clone() }))
}

/// An order as the export writes it: the summary, the attempt that captured, and its lines.
#[derive(Debug, Clone)]
pub struct OrderExport {
    pub summary: OrderSummary,
    pub attempt_ref: Option<String>,
    pub gateway_txn_id: Option<String>,
    /// The gateway's fee on the capturing payment, once a statement showed it.
    pub fee_minor: Option<i64>,
    /// `(sku, quantity)` in line order.
    pub lines: Vec<(String, i64)>,
}

/// A batch of the export of orders matching `filter`, newest first, after `cursor`; the next
/// batch's cursor when there may be more.
pub async fn export_orders(
    db: &Db,
    filter: &OrderFilter,
    cursor: Option<&Cursor>,
    limit: i64,
) -> Result<Page<OrderExport>> {
    let (sql, args) = order_query(
        &format!("{ORDER_COLUMNS}, a.gateway_txn_id, a.fee_minor"),
        "orders o LEFT JOIN payment_attempts a ON a.attempt_ref = o.captured_attempt_ref",
        filter,
        cursor,
        limit + 1,
    );
    let rows = sql::query(&sql).bind_all(args).fetch_all(db.read_pool()).await?;
    let mut items = rows
        .iter()
        .map(|r| {
            Ok(OrderExport {
                summary: order_summary(r)?,
                attempt_ref: col(r, "captured_attempt_ref")?,
                gateway_txn_id: col(r, "gateway_txn_id")?,
                fee_minor: col(r, "fee_minor")?,
                lines: Vec::new(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // The batch's lines in one statement.
    if !items.is_empty() {
        let marks: Vec<String> = (1..=items.len()).map(|i| format!("${i}")).collect();
        let orders: Vec<sql::Arg> = items.iter().map(|o| sql::Arg::from(o.summary.order_no.as_str())).collect();
        let lines = sql::query(&format!(
            "SELECT order_no, sku, quantity FROM order_lines WHERE order_no IN ({}) ORDER BY order_no, line_no",
            marks.join(", ")
        ))
        .bind_all(orders)
        .fetch_all(db.read_pool())
        .await?;
        let mut by_order: std::collections::HashMap<String, Vec<(String, i64)>> = Default::default();
        for l in &lines {
            by_order.entry(col(l, "order_no")?).or_default().push((col(l, "sku")?, col(l, "quantity")?));
        }
        for item in &mut items {
            item.lines = by_order.remove(&item.summary.order_no).unwrap_or_default();
        }
    }
    Ok(page(items, limit, |o| Cursor { at: o.summary.created_at_ms, key: o.summary.order_no.clone() }))
}

/// A refund as the export writes it.
#[derive(Debug, Clone)]
pub struct RefundExport {
    pub refund_no: String,
    pub order_no: String,
    pub status: crate::domain::status::RefundStatus,
    pub kind: String,
    pub amount_minor: i64,
    pub currency: String,
    pub reason: String,
    pub attempt_ref: String,
    pub gateway: String,
    pub gateway_txn_id: Option<String>,
    pub merchant_reference: Option<String>,
    /// The gateway's fee on the refund (negative: returned), once a statement showed it.
    pub fee_minor: Option<i64>,
    pub created_at_ms: Millis,
    pub updated_at_ms: Millis,
}

/// A batch of the refunds requested in `[from, to)`, newest first, after `cursor`.
pub async fn export_refunds(
    db: &Db,
    from: Option<Millis>,
    to: Option<Millis>,
    cursor: Option<&Cursor>,
    limit: i64,
) -> Result<Page<RefundExport>> {
    let (at, key) = cursor.map_or((Millis::MAX, String::new()), |c| (c.at, c.key.clone()));
    let rows = sql::query(
        "SELECT r.refund_no, r.order_no, r.status, r.kind, r.amount_minor, r.currency, r.reason, r.attempt_ref, \
         r.created_at, r.updated_at, r.fee_minor, a.gateway, a.gateway_txn_id, o.merchant_reference \
         FROM refunds r JOIN payment_attempts a ON a.attempt_ref = r.attempt_ref JOIN orders o ON o.order_no = r.order_no \
         WHERE r.created_at >= $1 AND r.created_at < $2 AND (r.created_at < $3 OR (r.created_at = $3 AND r.refund_no < $4)) \
         ORDER BY r.created_at DESC, r.refund_no DESC LIMIT $5",
    )
    .bind(from.unwrap_or(Millis::MIN))
    .bind(to.unwrap_or(Millis::MAX))
    .bind(at)
    .bind(key)
    .bind(limit + 1)
    .fetch_all(db.read_pool())
    .await?;
    let items = rows
        .iter()
        .map(|r| {
            Ok(RefundExport {
                refund_no: col(r, "refund_no")?,
                order_no: col(r, "order_no")?,
                status: col(r, "status")?,
                kind: col(r, "kind")?,
                amount_minor: col(r, "amount_minor")?,
                currency: col(r, "currency")?,
                reason: col::<Option<String>>(r, "reason")?.unwrap_or_default(),
                attempt_ref: col(r, "attempt_ref")?,
                gateway: col(r, "gateway")?,
                gateway_txn_id: col(r, "gateway_txn_id")?,
                merchant_reference: col(r, "merchant_reference")?,
                fee_minor: col(r, "fee_minor")?,
                created_at_ms: col(r, "created_at")?,
                updated_at_ms: col(r, "updated_at")?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(page(items, limit, |r| Cursor { at: r.created_at_ms, key: r.refund_no.clone() }))
}

/// A webhook message as the console and the admin API show it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MessageView {
    pub id: String,
    pub order_no: String,
    pub topic: String,
    #[schema(schema_with = crate::store::views::message_status_schema)]
    pub status: crate::domain::status::MessageStatus,
    /// Delivery tries since it was (last) queued.
    pub tries: i64,
    /// Times an operator sent it again.
    pub resends: i64,
    pub last_error: Option<String>,
    pub created_at: String,
    pub delivered_at: Option<String>,
    #[serde(skip)]
    pub created_at_ms: Millis,
}

fn message_view(r: &sql::Row) -> Result<MessageView> {
    let created_at_ms: Millis = col(r, "created_at")?;
    Ok(MessageView {
        id: col(r, "id")?,
        order_no: col(r, "order_no")?,
        topic: col(r, "topic")?,
        status: col(r, "status")?,
        tries: col(r, "tries")?,
        resends: col(r, "resends")?,
        last_error: col(r, "last_error")?,
        created_at: rfc3339(created_at_ms),
        delivered_at: col::<Option<Millis>>(r, "delivered_at")?.map(rfc3339),
        created_at_ms,
    })
}

const MESSAGE_COLUMNS: &str = "id, order_no, topic, status, tries, resends, last_error, created_at, delivered_at";

/// A page of webhook messages, newest first, of one status and/or order, after `cursor`.
pub async fn messages(
    db: &Db,
    status: Option<&str>,
    order_no: Option<&str>,
    cursor: Option<&Cursor>,
    limit: i64,
) -> Result<Page<MessageView>> {
    let (at, key) = cursor.map_or((Millis::MAX, String::new()), |c| (c.at, c.key.clone()));
    let rows = sql::query(&format!(
        "SELECT {MESSAGE_COLUMNS} FROM outbox WHERE ($1 = '' OR status = $1) AND ($2 = '' OR order_no = $2) \
         AND (created_at < $3 OR (created_at = $3 AND id < $4)) ORDER BY created_at DESC, id DESC LIMIT $5"
    ))
    .bind(status.unwrap_or_default())
    .bind(order_no.unwrap_or_default())
    .bind(at)
    .bind(key)
    .bind(limit + 1)
    .fetch_all(db.read_pool())
    .await?;
    let items = rows.iter().map(message_view).collect::<Result<Vec<_>>>()?;
    Ok(page(items, limit, |m| Cursor { at: m.created_at_ms, key: m.id.clone() }))
}

/// One webhook message.
pub async fn message(db: &Db, id: &str) -> Result<MessageView> {
    let row = sql::query(&format!("SELECT {MESSAGE_COLUMNS} FROM outbox WHERE id = $1"))
        .bind(id)
        .fetch_optional(db.read_pool())
        .await?
        .ok_or_else(|| Error::not_found("webhook message"))?;
    message_view(&row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_round_trips_and_nothing_else_parses() {
        let c = Cursor { at: 1_700_000_000_123, key: "KS1ABC".into() };
        assert_eq!(Cursor::parse(&c.encode()).unwrap(), c);
        for bad in ["", "!!", "MTIz", "eDpL"] {
            assert_eq!(Cursor::parse(bad).unwrap_err().code(), "invalid_cursor", "{bad}");
        }
    }

    #[test]
    fn a_page_has_a_next_cursor_only_when_more_came() {
        let rows: Vec<(i64, String)> = (0..4).map(|i| (10 - i, format!("k{i}"))).collect();
        let cursor_of = |r: &(i64, String)| Cursor { at: r.0, key: r.1.clone() };
        let full = page(rows.clone(), 3, cursor_of);
        assert_eq!(full.items.len(), 3);
        assert_eq!(Cursor::parse(full.next_cursor.as_deref().unwrap()).unwrap(), Cursor { at: 8, key: "k2".into() });
        let last = page(rows[..3].to_vec(), 3, cursor_of);
        assert_eq!(last.next_cursor, None);
        assert_eq!(limit(None), PAGE_DEFAULT);
        assert_eq!(limit(Some(0)), 1);
        assert_eq!(limit(Some(10_000)), PAGE_MAX);
    }
}

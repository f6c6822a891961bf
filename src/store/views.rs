//! Read models of an order: its lines, attempts, refunds and event log as the API, the pages and
//! the console show them.

use crate::store::sql;
use serde::Serialize;

use crate::clock::rfc3339;
use crate::domain::ids::{AttemptRef, OrderNo, SessionId};
use crate::domain::{AttemptStatus, OrderStatus};
use crate::error::{Error, Result};
use crate::store::{Db, col};

/// An order's status as the API and the webhooks write it: one of the transition table's.
pub fn order_status_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    status_schema(OrderStatus::ALL.iter().map(|s| s.as_str()))
}

/// A payment attempt's status as the API writes it: one of the transition table's.
pub fn attempt_status_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    status_schema(AttemptStatus::ALL.iter().map(|s| s.as_str()))
}

/// A refund's status as the API writes it.
pub fn refund_status_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    status_schema(crate::domain::status::RefundStatus::ALL.iter().map(|s| s.as_str()))
}

/// A webhook message's status as the API writes it.
pub fn message_status_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    status_schema(crate::domain::status::MessageStatus::ALL.iter().map(|s| s.as_str()))
}

/// A shipping report's status as the API writes it.
pub fn report_status_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    status_schema(crate::domain::status::ReportStatus::ALL.iter().map(|s| s.as_str()))
}

fn status_schema<'a>(all: impl Iterator<Item = &'a str>) -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    utoipa::openapi::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .enum_values(Some(all.collect::<Vec<_>>()))
        .into()
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct OrderLineView {
    pub sku: String,
    pub name: String,
    pub quantity: i64,
    pub unit_price_minor: i64,
    pub line_total_minor: i64,
    /// The line's share of the order's promotion discount (0 without one).
    pub discount_minor: i64,
    /// The card keys delivered for this line (a digital SKU's, to its buyer and admins).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<String>,
    /// Delivered keys that cannot be read with the server's keys secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_unavailable: Option<i64>,
    /// Delivered keys held back from the buyer while a complaint or dispute about the order's
    /// payment is open.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keys_held: Option<i64>,
}

impl AttemptView {
    /// The gateway's fee as money, empty until a statement showed it.
    pub fn fee_display(&self) -> String {
        self.fee_minor.map(|f| crate::domain::money::format_minor(f, &self.currency)).unwrap_or_default()
    }

    pub fn amount_display(&self) -> String {
        crate::domain::money::format_minor(self.amount_minor, &self.currency)
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AttemptView {
    #[schema(value_type = String)]
    pub attempt_ref: AttemptRef,
    #[schema(schema_with = attempt_status_schema)]
    pub status: AttemptStatus,
    pub gateway: String,
    pub channel: String,
    pub amount_minor: i64,
    pub currency: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_txn_id: Option<String>,
    /// The gateway's fee on this payment, from its statement (admin view only; absent until a
    /// statement showed the payment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fee_minor: Option<i64>,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct EventView {
    pub entity: String,
    pub entity_id: String,
    pub from: Option<String>,
    pub to: String,
    pub trigger: String,
    pub at: String,
}

/// The buyer's contact on an order (`null` each when the checkout named none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ContactView {
    pub email: Option<String>,
    pub phone: Option<String>,
}

impl ContactView {
    /// From an order row's `contact_email` and `contact_phone`.
    pub fn of_row(row: &sql::Row) -> Result<ContactView> {
        Ok(ContactView { email: col(row, "contact_email")?, phone: col(row, "contact_phone")? })
    }

    pub fn is_empty(&self) -> bool {
        self.email.is_none() && self.phone.is_none()
    }
}

/// One time an order's card keys were shown: when, on which channel, to which address and user
/// agent.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RevealView {
    pub at: String,
    /// `order_page`, `api`, `lookup_link`, `admin` or `email`.
    pub channel: String,
    /// How many keys were shown.
    pub keys: i64,
    pub client_addr: Option<String>,
    pub user_agent: Option<String>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct OrderView {
    #[schema(value_type = String)]
    pub order_no: OrderNo,
    #[schema(schema_with = order_status_schema)]
    pub status: OrderStatus,
    /// What the buyer pays: the lines less `discount_minor`.
    pub total_minor: i64,
    pub currency: String,
    /// What a promotion took off the lines (0 without one).
    pub discount_minor: i64,
    /// The promotion code the order used, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion_code: Option<String>,
    pub captured_minor: Option<i64>,
    /// What the order's refunds that went through add up to (a duplicate payment's refund aside).
    pub refunded_minor: i64,
    pub expires_at: String,
    pub created_at: String,
    /// The shop's own reference, if its checkout named one.
    pub merchant_reference: Option<String>,
    /// The shop's string pairs (an empty object when none).
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub metadata: crate::domain::shop::Metadata,
    /// How the buyer may be reached (the buyer's own session, the shop and admins only).
    pub contact: ContactView,
    pub lines: Vec<OrderLineView>,
    pub attempts: Vec<AttemptView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventView>>,
    /// Every time the order's card keys were shown (admin view).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reveals: Option<Vec<RevealView>>,
    /// The language the buyer checked out in.
    #[serde(skip)]
    pub lang: Option<String>,
    #[serde(skip)]
    pub session_id: SessionId,
}

impl OrderView {
    pub fn total_display(&self) -> String {
        crate::domain::money::format_minor(self.total_minor, &self.currency)
    }

    /// An amount of this order's currency, for people (`12.34 CNY`).
    pub fn money(&self, amount_minor: &i64) -> String {
        crate::domain::money::format_minor(*amount_minor, &self.currency)
    }

    /// An amount of this order's currency in major units without it (`12.34`), as a form takes it.
    pub fn decimal(&self, amount_minor: &i64) -> String {
        crate::domain::money::decimal_minor(*amount_minor, &self.currency)
    }
}

/// Finds the order an attempt reference belongs to.
pub async fn order_no_for_attempt(db: &Db, attempt_ref: &AttemptRef) -> Result<Option<OrderNo>> {
    let found: Option<String> = sql::query_scalar("SELECT order_no FROM payment_attempts WHERE attempt_ref = $1")
        .bind(attempt_ref)
        .fetch_optional(db.read_pool())
        .await?;
    Ok(found.map(OrderNo::stored))
}

/// The order with lines and attempts; with `with_events` the whole event log too (admin view).
pub async fn get_order(db: &Db, order_no: &OrderNo, with_events: bool) -> Result<OrderView> {
    let pool = db.read_pool();
    let o = sql::query(
        "SELECT order_no, session_id, status, total_minor, currency, captured_minor, hold_expires_at, created_at, \
         merchant_reference, metadata, contact_email, contact_phone, lang, discount_minor, promotion_code, \
         CAST(COALESCE((SELECT SUM(r.amount_minor) FROM refunds r WHERE r.order_no = orders.order_no \
         AND r.kind <> 'duplicate_payment' AND r.status = 'succeeded'), 0) AS BIGINT) AS refunded_minor \
         FROM orders WHERE order_no = $1",
    )
    .bind(order_no)
    .fetch_optional(pool)
    .await?
    .ok_or_else(|| Error::not_found("order"))?;
    let lines = sql::query("SELECT sku, name, quantity, unit_price_minor, line_total_minor, discount_minor FROM order_lines WHERE order_no = $1 ORDER BY line_no")
        .bind(order_no)
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| {
            Ok(OrderLineView {
                sku: col(r, "sku")?,
                name: col(r, "name")?,
                quantity: col(r, "quantity")?,
                unit_price_minor: col(r, "unit_price_minor")?,
                line_total_minor: col(r, "line_total_minor")?,
                discount_minor: col(r, "discount_minor")?,
                keys: Vec::new(),
                keys_unavailable: None,
                keys_held: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let attempts = sql::query(
        "SELECT attempt_ref, status, gateway, channel, amount_minor, currency, gateway_txn_id, fee_minor, created_at \
         FROM payment_attempts WHERE order_no = $1 ORDER BY seq",
    )
    .bind(order_no)
    .fetch_all(pool)
    .await?
    .iter()
    .map(|r| {
        Ok(AttemptView {
            attempt_ref: AttemptRef::stored(col::<String>(r, "attempt_ref")?),
            status: col(r, "status")?,
            gateway: col(r, "gateway")?,
            channel: col(r, "channel")?,
            amount_minor: col(r, "amount_minor")?,
            currency: col(r, "currency")?,
            gateway_txn_id: col(r, "gateway_txn_id")?,
            fee_minor: if with_events { col(r, "fee_minor")? } else { None },
            created_at: rfc3339(col(r, "created_at")?),
        })
    })
    .collect::<Result<Vec<_>>>()?;
    let events = if with_events {
        let rows = sql::query(
            "SELECT entity, entity_id, from_status, to_status, trigger_name, at FROM status_events WHERE order_no = $1 ORDER BY id",
        )
        .bind(order_no)
        .fetch_all(pool)
        .await?;
        Some(
            rows.iter()
                .map(|r| {
                    Ok(EventView {
                        entity: col(r, "entity")?,
                        entity_id: col(r, "entity_id")?,
                        from: col(r, "from_status")?,
                        to: col(r, "to_status")?,
                        trigger: col(r, "trigger_name")?,
                        at: rfc3339(col(r, "at")?),
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        )
    } else {
        None
    };
    let reveals = if with_events { Some(reveals_of(db, order_no).await?) } else { None };
    Ok(OrderView {
        order_no: order_no.clone(),
        session_id: SessionId::stored(col::<String>(&o, "session_id")?),
        status: col(&o, "status")?,
        total_minor: col(&o, "total_minor")?,
        currency: col(&o, "currency")?,
        discount_minor: col(&o, "discount_minor")?,
        promotion_code: col(&o, "promotion_code")?,
        captured_minor: col(&o, "captured_minor")?,
        refunded_minor: col(&o, "refunded_minor")?,
        expires_at: rfc3339(col(&o, "hold_expires_at")?),
        created_at: rfc3339(col(&o, "created_at")?),
        merchant_reference: col(&o, "merchant_reference")?,
        metadata: crate::domain::shop::Metadata::from_stored(col::<Option<String>>(&o, "metadata")?.as_deref()),
        contact: ContactView::of_row(&o)?,
        lang: col(&o, "lang")?,
        lines,
        attempts,
        events,
        reveals,
    })
}

/// Every reveal of an order's keys, oldest first.
pub async fn reveals_of(db: &Db, order_no: &OrderNo) -> Result<Vec<RevealView>> {
    sql::query(
        "SELECT revealed_at, channel, keys, client_addr, user_agent FROM key_reveals WHERE order_no = $1 \
         ORDER BY revealed_at, id",
    )
    .bind(order_no)
    .fetch_all(db.read_pool())
    .await?
    .iter()
    .map(|r| {
        Ok(RevealView {
            at: rfc3339(col(r, "revealed_at")?),
            channel: col(r, "channel")?,
            keys: col(r, "keys")?,
            client_addr: col(r, "client_addr")?,
            user_agent: col(r, "user_agent")?,
        })
    })
    .collect()
}

//! The transactional outbox: order events for the shop's own systems, written in the same
//! transaction as the change they describe, relayed at least once by the outbox worker.

use crate::domain::status::MessageStatus;
use crate::store::Conn;
use crate::store::sql;
use serde::Serialize;

use crate::args;
use crate::clock::{Millis, rfc3339};
use crate::domain::OrderStatus;
use crate::domain::refund;
use crate::domain::shop::Metadata;
use crate::domain::status::RefundStatus;
use crate::error::Result;
use crate::store::batch::Batch;
use crate::store::lines::{self, OrderLine};
use crate::store::views::ContactView;
use crate::store::{Db, col, new_id};

/// Adds the messages of an order's change `from -> status` to `batch`, as
/// [`refund::status_messages`] decides them: `order.<status>`, and `fulfilment.requested` when an
/// order first paid has physical goods to ship. Reads what the messages carry now, so the batch
/// must not change those columns before it.
pub(super) async fn add_order_event(
    conn: &mut Conn,
    batch: &mut Batch,
    order_no: &str,
    from: OrderStatus,
    status: OrderStatus,
    now: Millis,
) -> Result<()> {
    let messages = refund::status_messages(from, status);
    if !messages.status && !messages.fulfilment {
        super::mail::add_change_mail(batch, order_no, from, status, now);
        super::subscribe::add_message(batch, order_no, from, status, now);
        return Ok(());
    }
    // The attempt concerned: the one that captured, else the newest.
    let row = sql::query(
        "SELECT o.total_minor, o.currency, o.captured_minor, o.merchant_reference, o.metadata, o.contact_email, o.contact_phone, \
         o.promotion_code, o.discount_minor, a.attempt_ref, a.gateway, a.gateway_txn_id, \
         CAST(COALESCE((SELECT SUM(r.amount_minor) FROM refunds r WHERE r.order_no = o.order_no \
         AND r.kind <> 'duplicate_payment' AND r.status = 'succeeded'), 0) AS BIGINT) AS refunded_minor \
         FROM orders o LEFT JOIN payment_attempts a ON a.attempt_ref = COALESCE(o.captured_attempt_ref, \
         (SELECT n.attempt_ref FROM payment_attempts n WHERE n.order_no = o.order_no ORDER BY n.seq DESC LIMIT 1)) \
         WHERE o.order_no = $1",
    )
    .bind(order_no)
    .fetch_one(&mut *conn)
    .await?;
    let lines = if messages.fulfilment { lines::order_lines(conn, order_no).await? } else { Vec::new() };
    let text = |name: &str| col::<Option<String>>(&row, name);
    let (merchant_reference, metadata) = (text("merchant_reference")?, text("metadata")?);
    let (contact_email, contact_phone) = (text("contact_email")?, text("contact_phone")?);
    let (attempt_ref, gateway, gateway_txn_id) = (text("attempt_ref")?, text("gateway")?, text("gateway_txn_id")?);
    let promotion_code = text("promotion_code")?;
    let facts = OrderFacts {
        total_minor: col(&row, "total_minor")?,
        currency: &col::<String>(&row, "currency")?,
        captured_minor: col(&row, "captured_minor")?,
        refunded_minor: col(&row, "refunded_minor")?,
        lines: &lines,
        context: OrderContext {
            merchant_reference: merchant_reference.as_deref(),
            metadata: metadata.as_deref(),
            contact_email: contact_email.as_deref(),
            contact_phone: contact_phone.as_deref(),
            attempt_ref: attempt_ref.as_deref(),
            gateway: gateway.as_deref(),
            gateway_txn_id: gateway_txn_id.as_deref(),
            promotion_code: promotion_code.as_deref(),
            discount_minor: col(&row, "discount_minor")?,
        },
    };
    add_order_event_with(batch, order_no, from, status, &facts, now);
    Ok(())
}

/// What every message about an order carries besides its own facts: the shop's reference and
/// metadata, and the payment attempt concerned (the one that captured, else the newest).
#[derive(Debug, Default, Clone, Copy)]
pub struct OrderContext<'a> {
    pub merchant_reference: Option<&'a str>,
    /// As stored: a JSON object of strings.
    pub metadata: Option<&'a str>,
    /// The buyer's contact, as the checkout named it.
    pub contact_email: Option<&'a str>,
    pub contact_phone: Option<&'a str>,
    pub attempt_ref: Option<&'a str>,
    pub gateway: Option<&'a str>,
    pub gateway_txn_id: Option<&'a str>,
    /// The promotion code the order used, and what it took off.
    pub promotion_code: Option<&'a str>,
    pub discount_minor: i64,
}

impl OrderContext<'_> {
    /// As a message carries it.
    fn message(&self) -> MessageContext<'_> {
        MessageContext {
            merchant_reference: self.merchant_reference,
            metadata: Metadata::from_stored(self.metadata),
            contact: ContactView {
                email: self.contact_email.map(str::to_string),
                phone: self.contact_phone.map(str::to_string),
            },
            attempt_ref: self.attempt_ref,
            gateway: self.gateway,
            gateway_txn_id: self.gateway_txn_id,
            promotion: self.promotion_code.map(|code| MessagePromotion { code, discount_minor: self.discount_minor }),
        }
    }
}

/// The promotion an order used, as its messages carry it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessagePromotion<'a> {
    pub code: &'a str,
    /// What it took off the order's lines (the order's total is after it).
    pub discount_minor: i64,
}

/// Every webhook message: its id (`Kassa-Event-Id`, kept on retries and resends), its topic, the
/// order it is about, and the topic's `data`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookMessage<'a> {
    pub id: &'a str,
    pub topic: &'a str,
    pub order_no: &'a str,
    /// When the change happened (RFC 3339).
    pub created_at: String,
    /// The topic's facts: `OrderChanged`, `FulfilmentRequested` or `RefundChanged`.
    #[schema(value_type = Object)]
    pub data: &'a serde_json::value::RawValue,
}

/// What every message about an order carries: the shop's reference and metadata (`null` and `{}`
/// when its checkout named none), and the payment concerned — the attempt that captured, before a
/// capture the newest, for a refund the payment it returns.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct MessageContext<'a> {
    pub merchant_reference: Option<&'a str>,
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub metadata: Metadata,
    /// How the buyer may be reached (`null` each when the checkout named none).
    pub contact: ContactView,
    pub attempt_ref: Option<&'a str>,
    pub gateway: Option<&'a str>,
    pub gateway_txn_id: Option<&'a str>,
    /// The promotion the order used (absent without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<MessagePromotion<'a>>,
}

/// `order.<status>`: the order reached `status`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct OrderChanged<'a> {
    pub order_no: &'a str,
    #[schema(schema_with = super::views::order_status_schema)]
    pub status: &'a str,
    pub total_minor: i64,
    pub currency: &'a str,
    /// What the gateway captured (`null` before a payment).
    pub captured_minor: Option<i64>,
    /// What the order's refunds that went through add up to.
    pub refunded_minor: i64,
    /// When (RFC 3339).
    pub at: String,
    #[serde(flatten)]
    pub context: MessageContext<'a>,
}

/// `fulfilment.requested`: a paid order's physical goods are to be shipped.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FulfilmentRequested<'a> {
    pub order_no: &'a str,
    pub lines: Vec<ShipLine<'a>>,
    pub at: String,
    #[serde(flatten)]
    pub context: MessageContext<'a>,
}

/// A line to ship.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ShipLine<'a> {
    pub sku: &'a str,
    pub name: &'a str,
    pub quantity: i64,
}

/// `refund.<status>`: a refund was requested, went through or failed.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RefundChanged<'a> {
    pub refund_no: &'a str,
    pub order_no: &'a str,
    /// `requested`, `succeeded` or `failed`.
    pub status: &'a str,
    pub amount_minor: i64,
    pub currency: &'a str,
    /// `merchant`, `late_payment` or `duplicate_payment`.
    pub kind: &'a str,
    /// What the order's refunds that went through add up to, this one included.
    pub refunded_minor: i64,
    pub captured_minor: Option<i64>,
    pub at: String,
    #[serde(flatten)]
    pub context: MessageContext<'a>,
}

/// A case's facts as the shop hears them (`dispute.*`, `complaint.*`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CaseFacts<'a> {
    /// kassa's id of the case (the admin API's `/api/v1/admin/cases/{id}`).
    pub case_id: &'a str,
    /// `stripe`, `wechatpay` or `alipay`.
    pub provider: &'a str,
    pub provider_case_id: &'a str,
    /// `dispute`, `fraud_warning` or `complaint`.
    pub kind: &'a str,
    pub order_no: &'a str,
    /// `needs_response`, `under_review` or `closed`.
    pub state: &'a str,
    /// How a closed case ended: `won`, `lost`, `prevented`, `warning_closed`, `not_actionable`,
    /// `resolved`, `withdrawn`, `platform_decided`, `system_closed`.
    pub outcome: Option<&'a str>,
    /// The provider's own status, as it said it.
    pub provider_status: &'a str,
    pub reason: Option<&'a str>,
    pub amount_minor: Option<i64>,
    pub currency: Option<&'a str>,
    /// The deadline that matters next (RFC 3339).
    pub due_at: Option<String>,
    pub at: String,
}

/// `dispute.<opened|updated|closed>` (a Stripe dispute or early fraud warning) and
/// `complaint.<…>` (a WeChat Pay or Alipay complaint): a case about one of the order's payments
/// opened, moved, or closed; with the order's context, the payment the case is about.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CaseChanged<'a> {
    #[serde(flatten)]
    pub case: CaseFacts<'a>,
    #[serde(flatten)]
    pub context: MessageContext<'a>,
}

/// Adds a case's message for the order it is about, with the order's context (read here) and the
/// payment `attempt_ref` the case is about.
pub async fn add_case_event(
    conn: &mut Conn,
    batch: &mut Batch,
    case: CaseFacts<'_>,
    attempt_ref: &str,
    topic: &str,
    now: Millis,
) -> Result<()> {
    let row = sql::query(
        "SELECT o.merchant_reference, o.metadata, o.contact_email, o.contact_phone, o.promotion_code, o.discount_minor, \
         a.gateway, a.gateway_txn_id FROM orders o JOIN payment_attempts a ON a.order_no = o.order_no \
         WHERE o.order_no = $1 AND a.attempt_ref = $2",
    )
    .bind(case.order_no)
    .bind(attempt_ref)
    .fetch_one(&mut *conn)
    .await?;
    let text = |name: &str| col::<Option<String>>(&row, name);
    let (merchant_reference, metadata) = (text("merchant_reference")?, text("metadata")?);
    let (contact_email, contact_phone) = (text("contact_email")?, text("contact_phone")?);
    let (gateway, gateway_txn_id, promotion_code) =
        (text("gateway")?, text("gateway_txn_id")?, text("promotion_code")?);
    let context = OrderContext {
        merchant_reference: merchant_reference.as_deref(),
        metadata: metadata.as_deref(),
        contact_email: contact_email.as_deref(),
        contact_phone: contact_phone.as_deref(),
        attempt_ref: Some(attempt_ref),
        gateway: gateway.as_deref(),
        gateway_txn_id: gateway_txn_id.as_deref(),
        promotion_code: promotion_code.as_deref(),
        discount_minor: col(&row, "discount_minor")?,
    };
    let order_no = case.order_no;
    let data = CaseChanged { case, context: context.message() };
    add(batch, order_no, topic, &payload(&data), now);
    Ok(())
}

/// Every topic the outbox sends, what it means, and which `data` it carries.
pub const TOPICS: &[(&str, &str, DataKind)] = &[
    ("order.paid", "the order is paid (once, ever)", DataKind::Order),
    ("order.delivered", "card keys handed out, or the admin marked it shipped", DataKind::Order),
    ("order.expired", "never paid in time: stock released", DataKind::Order),
    ("order.cancelled", "cancelled before payment: stock released", DataKind::Order),
    ("order.paid_after_expiry", "a payment arrived after the order expired", DataKind::Order),
    ("order.refunding", "refunds in flight cover everything captured", DataKind::Order),
    ("order.refunded", "refunds went through for everything captured", DataKind::Order),
    ("fulfilment.requested", "a paid order has physical goods to ship", DataKind::Fulfilment),
    ("refund.requested", "a refund was asked of the gateway", DataKind::Refund),
    ("refund.succeeded", "a refund went through", DataKind::Refund),
    ("refund.failed", "a refund was refused for good", DataKind::Refund),
    ("dispute.opened", "Stripe opened a dispute or an early fraud warning on the order's payment", DataKind::Case),
    ("dispute.updated", "a dispute or early fraud warning changed state or status", DataKind::Case),
    ("dispute.closed", "a dispute was won, lost or closed; a fraud warning can no longer be acted on", DataKind::Case),
    ("complaint.opened", "the buyer complained to WeChat Pay or Alipay about the order's payment", DataKind::Case),
    ("complaint.updated", "a complaint changed state or status", DataKind::Case),
    ("complaint.closed", "a complaint was settled", DataKind::Case),
];

/// Which payload type a topic's `data` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    Order,
    Fulfilment,
    Refund,
    Case,
}

fn payload<T: Serialize>(data: &T) -> String {
    serde_json::to_string(data).unwrap_or_default()
}

/// What an order's messages carry, when the caller has read it already.
#[derive(Debug)]
pub struct OrderFacts<'a> {
    pub total_minor: i64,
    pub currency: &'a str,
    pub captured_minor: Option<i64>,
    /// What the order's refunds that went through add up to (a duplicate payment's refund aside).
    pub refunded_minor: i64,
    /// The order's lines (only a paid order's are used: its physical ones are to be shipped).
    pub lines: &'a [OrderLine],
    pub context: OrderContext<'a>,
}

/// [`add_order_event`] from facts the caller read (or is writing in the same batch).
pub(super) fn add_order_event_with(
    batch: &mut Batch,
    order_no: &str,
    from: OrderStatus,
    status: OrderStatus,
    facts: &OrderFacts<'_>,
    now: Millis,
) {
    // The buyer's e-mail and mini-program message, when the order asked for them, in this same
    // transaction (an order without an address, or not paid with WeChat Pay, needs no statement).
    if facts.context.contact_email.is_some() {
        super::mail::add_change_mail(batch, order_no, from, status, now);
    }
    if facts.context.gateway == Some(crate::domain::shipping::GATEWAY) {
        super::subscribe::add_message(batch, order_no, from, status, now);
    }
    let messages = refund::status_messages(from, status);
    if messages.status {
        add_status_message(batch, order_no, status, facts, now);
    }
    if messages.fulfilment {
        let lines: Vec<ShipLine<'_>> = facts
            .lines
            .iter()
            .filter(|l| l.kind == "physical")
            .map(|l| ShipLine { sku: &l.sku, name: &l.name, quantity: l.quantity })
            .collect();
        if !lines.is_empty() {
            let data = FulfilmentRequested { order_no, lines, at: rfc3339(now), context: facts.context.message() };
            add(batch, order_no, "fulfilment.requested", &payload(&data), now);
        }
    }
}

fn add_status_message(batch: &mut Batch, order_no: &str, status: OrderStatus, facts: &OrderFacts<'_>, now: Millis) {
    let data = OrderChanged {
        order_no,
        status: status.as_str(),
        total_minor: facts.total_minor,
        currency: facts.currency,
        captured_minor: facts.captured_minor,
        refunded_minor: facts.refunded_minor,
        at: rfc3339(now),
        context: facts.context.message(),
    };
    add(batch, order_no, &format!("order.{}", status.as_str()), &payload(&data), now);
}

/// A refund's change, as the shop hears of it: `refund.requested`, `refund.succeeded` or
/// `refund.failed`.
#[derive(Debug)]
pub struct RefundFacts<'a> {
    pub refund_no: &'a str,
    pub order_no: &'a str,
    pub status: RefundStatus,
    pub amount_minor: i64,
    pub currency: &'a str,
    pub kind: &'a str,
    /// What the order's refunds that went through add up to, this change included.
    pub refunded_minor: i64,
}

/// Adds the message of a refund's change to `batch`, with the order's context and the payment it
/// returns (read here: a second capture's refund names that capture's transaction).
pub async fn add_refund_event(conn: &mut Conn, batch: &mut Batch, facts: &RefundFacts<'_>, now: Millis) -> Result<()> {
    let row = sql::query(
        "SELECT o.captured_minor, o.merchant_reference, o.metadata, o.contact_email, o.contact_phone, o.promotion_code, \
         o.discount_minor, a.attempt_ref, a.gateway, \
         COALESCE(r.gateway_txn_id, a.gateway_txn_id) AS gateway_txn_id \
         FROM refunds r JOIN orders o ON o.order_no = r.order_no JOIN payment_attempts a ON a.attempt_ref = r.attempt_ref \
         WHERE r.refund_no = $1",
    )
    .bind(facts.refund_no)
    .fetch_one(&mut *conn)
    .await?;
    let text = |name: &str| col::<Option<String>>(&row, name);
    let (merchant_reference, metadata) = (text("merchant_reference")?, text("metadata")?);
    let (contact_email, contact_phone) = (text("contact_email")?, text("contact_phone")?);
    let (attempt_ref, gateway, gateway_txn_id) = (text("attempt_ref")?, text("gateway")?, text("gateway_txn_id")?);
    let promotion_code = text("promotion_code")?;
    let context = OrderContext {
        merchant_reference: merchant_reference.as_deref(),
        metadata: metadata.as_deref(),
        contact_email: contact_email.as_deref(),
        contact_phone: contact_phone.as_deref(),
        attempt_ref: attempt_ref.as_deref(),
        gateway: gateway.as_deref(),
        gateway_txn_id: gateway_txn_id.as_deref(),
        promotion_code: promotion_code.as_deref(),
        discount_minor: col(&row, "discount_minor")?,
    };
    let data = RefundChanged {
        refund_no: facts.refund_no,
        order_no: facts.order_no,
        status: facts.status.as_str(),
        amount_minor: facts.amount_minor,
        currency: facts.currency,
        kind: facts.kind,
        refunded_minor: facts.refunded_minor,
        captured_minor: col::<Option<i64>>(&row, "captured_minor")?,
        at: rfc3339(now),
        context: context.message(),
    };
    add(batch, facts.order_no, &format!("refund.{}", facts.status.as_str()), &payload(&data), now);
    Ok(())
}

fn add(batch: &mut Batch, order_no: &str, topic: &str, payload: &str, now: Millis) {
    // Appended: a command's messages go in as one INSERT, in the order they were raised.
    batch.append(
        "INSERT INTO outbox (id, order_no, topic, payload, status, tries, next_at, lease_until, created_at)",
        "($1, $2, $3, $4, 'pending', 0, $5, 0, $5)",
        args![&new_id(), order_no, topic, payload, now],
        "outbox insert",
    );
}

/// A message claimed for delivery.
#[derive(Debug, Clone)]
pub struct Message {
    pub id: String,
    pub order_no: String,
    pub topic: String,
    pub payload: String,
    pub created_at: Millis,
    pub tries: i64,
}

/// Claims up to `limit` due messages for `lease_ms` (several instances never send the same one at
/// the same time; a crashed sender's lease runs out).
pub async fn claim(db: &Db, now: Millis, lease_ms: i64, limit: i64) -> Result<Vec<Message>> {
    let due = db.kind().claimed(
        "id",
        "SELECT id FROM outbox WHERE status = 'pending' \
         AND next_at <= $2 AND lease_until <= $2 ORDER BY created_at, id LIMIT $3",
    );
    crate::write_tx!(db, |tx| {
        let rows = sql::query(&format!(
            "UPDATE outbox SET lease_until = $1 WHERE {due} RETURNING id, order_no, topic, payload, created_at, tries"
        ))
        .bind(now.saturating_add(lease_ms))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut **tx)
        .await?;
        let mut messages = rows
            .iter()
            .map(|r| {
                Ok(Message {
                    id: col(r, "id")?,
                    order_no: col(r, "order_no")?,
                    topic: col(r, "topic")?,
                    payload: col(r, "payload")?,
                    created_at: col(r, "created_at")?,
                    tries: col(r, "tries")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // RETURNING does not keep the sub-select's order: send oldest first.
        messages.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(messages)
    })
}

/// Records the result of one delivery try.
pub async fn finish(
    db: &Db,
    id: &str,
    result: std::result::Result<(), String>,
    tries: i64,
    next_at: Millis,
    dead: bool,
    now: Millis,
) -> Result<()> {
    let (status, error) = match (&result, dead) {
        (Ok(()), _) => (MessageStatus::Delivered, None),
        (Err(e), true) => (MessageStatus::Dead, Some(e.clone())),
        (Err(e), false) => (MessageStatus::Pending, Some(e.clone())),
    };
    crate::write_tx!(db, |tx| {
        sql::query(
            "UPDATE outbox SET status = $1, tries = $2, next_at = $3, lease_until = 0, last_error = $4, \
             delivered_at = CASE WHEN $1 = 'delivered' THEN $5 ELSE delivered_at END WHERE id = $6",
        )
        .bind(status.as_str())
        .bind(tries)
        .bind(next_at)
        .bind(&error)
        .bind(now)
        .bind(id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    })?;
    // A try's outcome: delivered, to be retried ("pending") or given up ("dead").
    metrics::counter!("kassa_outbox_deliveries_total", "result" => if status == MessageStatus::Pending { "retry" } else { status.as_str() })
        .increment(1);
    Ok(())
}

pub async fn backlog(db: &Db) -> Result<i64> {
    sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM outbox WHERE status = 'pending'")
        .fetch_one(db.read_pool())
        .await
}

/// Queues a delivered or given-up message to be sent again, as it was (its id, which the shop
/// de-duplicates by, included), with its tries counted afresh. Returns it as queued.
pub async fn resend(db: &Db, id: &str, now: Millis) -> Result<super::listing::MessageView> {
    let lock = db.for_update();
    let (owned, select) = (id.to_string(), format!("SELECT status FROM outbox WHERE id = $1{lock}"));
    db.command(move |db| async move {
        let id = owned.as_str();
        crate::write_tx!(db, |tx| {
            let status: Option<MessageStatus> = sql::query_scalar(&select).bind(id).fetch_optional(&mut **tx).await?;
            let status = status.ok_or_else(|| crate::error::Error::not_found("webhook message"))?;
            crate::domain::webhook::may_resend(status)?;
            sql::query(
                "UPDATE outbox SET status = 'pending', tries = 0, next_at = $1, lease_until = 0, resends = resends + 1 \
                 WHERE id = $2",
            )
            .bind(now)
            .bind(id)
            .execute(&mut **tx)
            .await?;
            Ok(())
        })
    })
    .await?;
    metrics::counter!("kassa_outbox_resends_total").increment(1);
    super::listing::message(db, id).await
}

//! Checkout confirm: the one atomic step that turns a basket into a pending order.

use crate::store::sql;

use crate::args;
use crate::clock::Millis;
use crate::domain::basket::BasketStatus;
use crate::domain::checkout::{self, OrderLimits, PricedLine, QuotedLine};
use crate::domain::contact::{Contact, Email, Phone};
use crate::domain::ids::{self, AttemptRef, BasketId, IdempotencyKey, OrderNo, SessionId};
use crate::domain::promotion::{self, Discount, Offer};
use crate::domain::shop::{self, MerchantReference, Metadata, ShopData};
use crate::domain::{AttemptStatus, Currency, Money, OrderStatus};
use crate::error::{Error, Result};
use crate::store::batch::{self, Batch, Named};
use crate::store::events::{self, Cause};
use crate::store::lines::OrderLine;
use crate::store::promotion_uses::{self, Reservation, Short};
use crate::store::{Db, Tx, col};

/// A confirm, as the use case asks for it. [`ConfirmRequest::new`] gives one with nothing but
/// the basket, its buyer, the gateway and the time; set what differs with struct update syntax.
#[derive(Debug, Clone)]
pub struct ConfirmRequest {
    pub session_id: SessionId,
    pub basket_id: BasketId,
    pub gateway: String,
    pub channel: String,
    pub idempotency_key: Option<IdempotencyKey>,
    pub hold_ms: i64,
    /// Unpaid orders the buyer may have open at once; 0 for no limit.
    pub max_open_orders: u32,
    /// The shop's limits on one order's units.
    pub limits: OrderLimits,
    pub now: Millis,
    /// The currencies the chosen gateway takes; `None` for any. Checked before anything is held.
    pub currencies: Option<Vec<Currency>>,
    /// The shop's reference, metadata and return URLs, kept on the order.
    pub shop: ShopData,
    /// Who pays, when the channel names them (WeChat Pay JSAPI), kept on the attempt.
    pub payer: Option<AttemptPayer>,
    /// The buyer's contact, lookup password hash and language, kept on the order.
    pub buyer: BuyerData,
    /// The promotion code the checkout named (normalised), used instead of the basket's.
    pub promotion_code: Option<String>,
}

/// What the buyer left on an order for the way back to it.
#[derive(Debug, Clone, Default)]
pub struct BuyerData {
    pub contact: Contact,
    /// The lookup password's slow hash (a PHC string).
    pub lookup_hash: Option<String>,
    /// The language the buyer checked out in (`en`, `zh`).
    pub lang: Option<String>,
    /// Whether the buyer gets e-mail about the order: an address was given while e-mail is on.
    pub mail_enabled: bool,
}

impl ConfirmRequest {
    /// A confirm of basket `basket_id` by buyer `session_id`, to be paid with `gateway` and
    /// `channel`, at `now`: no idempotency key, the default hold, no open-orders limit, no limits
    /// on units, any currency, nothing from the shop, no named payer.
    pub fn new(
        session_id: SessionId,
        basket_id: BasketId,
        gateway: impl Into<String>,
        channel: impl Into<String>,
        now: Millis,
    ) -> ConfirmRequest {
        ConfirmRequest {
            session_id,
            basket_id,
            gateway: gateway.into(),
            channel: channel.into(),
            idempotency_key: None,
            hold_ms: i64::try_from(checkout::HOLD_SECONDS_DEFAULT * 1000).unwrap_or(i64::MAX),
            max_open_orders: 0,
            limits: OrderLimits::NONE,
            now,
            currencies: None,
            shop: ShopData::default(),
            payer: None,
            buyer: BuyerData::default(),
            promotion_code: None,
        }
    }
}

/// A payer kept on an attempt: their openid, and the app id it is under (what a WeChat
/// mini-program shipping report names).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptPayer {
    pub openid: String,
    pub appid: String,
}

/// A pending order and its active attempt, as the buyer needs them for the hand-off.
#[derive(Debug, Clone)]
pub struct Placed {
    pub order_no: OrderNo,
    pub attempt_ref: AttemptRef,
    pub gateway: String,
    pub channel: String,
    pub status: OrderStatus,
    pub total: Money,
    pub expires_at: Millis,
    pub subject: String,
    /// False when a repeated confirm (double click, same key) returned the existing order.
    pub created: bool,
    /// What the shop attached at checkout.
    pub shop: ShopData,
}

/// Confirms a basket in one transaction: re-price, hold stock, freeze the basket, create the order,
/// its line snapshot, reservations with `expires_at`, and the first payment attempt. Nothing remote
/// happens here; the hand-off is built by the caller after commit.
pub async fn confirm(db: &Db, req: &ConfirmRequest) -> Result<Placed> {
    match confirm_once(db, req).await {
        // Two checkouts with one merchant reference at once (PostgreSQL): the second waited for the
        // first's order and found its reference taken; run again, it reads that order.
        Err(Error::Db(e)) if req.shop.merchant_reference.is_some() && e.code() == Some(UNIQUE_VIOLATION_PG) => {
            confirm_once(db, req).await
        }
        other => other,
    }
}

/// PostgreSQL's unique_violation.
const UNIQUE_VIOLATION_PG: &str = "23505";

async fn confirm_once(db: &Db, req: &ConfirmRequest) -> Result<Placed> {
    let req = req.clone();
    db.command(move |db| async move {
        let (db, req) = (&db, &req);
        let lock = db.for_update();
        let result = crate::write_tx!(db, |tx| {
            match read_basket(tx, req, lock).await? {
                Found::Order(order_no) => load_placed(tx, &order_no, false).await,
                Found::Lines(quoted, code) => place(tx, req, &quoted, code).await,
            }
        });
        match &result {
            Ok(p) if p.created => metrics::counter!("kassa_confirms_total", "result" => "created").increment(1),
            Err(e) if e.code().starts_with("promotion_") => {
                metrics::counter!("kassa_confirms_total", "result" => "promotion_refused").increment(1);
            }
            Ok(_) => metrics::counter!("kassa_confirms_total", "result" => "replayed").increment(1),
            Err(e) => metrics::counter!("kassa_confirms_total", "result" => e.code()).increment(1),
        }
        result
    })
    .await
}

/// The promotion code a confirm applies: the checkout's, read with the basket; or the basket's,
/// to be read.
enum Code {
    Read(Box<Offer>),
    Named(String),
}

/// What a confirm finds under the basket's lock.
enum Found {
    /// The order this confirm repeats (its idempotency key's, the shop's reference's, or the one
    /// the basket is frozen with); the request's key is remembered for it.
    Order(OrderNo),
    /// The basket's lines as quoted, beside today's catalog, and the promotion code to apply: an
    /// order to place.
    Lines(Vec<QuotedLine>, Option<Code>),
}

/// The offer of `code` (normalised by the caller, or refused as unknown) applied to the order's
/// lines: the discount taken off `pricing`, or the promotion's refusal.
async fn priced_offer(
    tx: &mut Tx<'_>,
    req: &ConfirmRequest,
    pricing: &mut checkout::Pricing,
    code: Code,
) -> Result<(Offer, Discount)> {
    let offer = match code {
        Code::Read(offer) => *offer,
        Code::Named(code) => promotion_uses::read_offer(tx, &code).await?,
    };
    let earlier = match offer.rules.first_order_only {
        false => false,
        true => {
            let contact = &req.buyer.contact;
            promotion_uses::has_earlier_orders(
                tx,
                req.session_id.as_str(),
                contact.email.as_ref().map(Email::as_str),
                contact.phone.as_ref().map(Phone::as_str),
            )
            .await?
        }
    };
    let discount = promotion::apply(&offer, &pricing.lines, pricing.total.currency().code(), req.now, earlier)?;
    pricing.apply_discount(discount.total_minor, &discount.per_line)?;
    Ok((offer, discount))
}

/// Reads, in one round trip on PostgreSQL: the order of the request's idempotency key, the order
/// with the shop's reference, the basket (locked: lock order basket, stock rows by SKU, the
/// buyer's session and its open-orders counter, then the order — the order every command that
/// moves an order out of pending_payment follows too), and its lines at today's prices, read under
/// the lock.
async fn read_basket(tx: &mut Tx<'_>, req: &ConfirmRequest, lock: &str) -> Result<Found> {
    let basket_sql =
        format!("SELECT status, order_no, promotion_code FROM baskets WHERE id = $1 AND session_id = $2{lock}");
    let mut reads = Vec::with_capacity(4);
    if let Some(key) = &req.idempotency_key {
        reads.push((IDEMPOTENCY_KEY_SQL, args![&req.session_id, key]));
    }
    if let Some(reference) = &req.shop.merchant_reference {
        reads.push((MERCHANT_REFERENCE_SQL, args![reference.as_str()]));
    }
    reads.push((basket_sql.as_str(), args![&req.basket_id, &req.session_id]));
    reads.push((PRICE_LINES_SQL, args![&req.basket_id]));
    // The checkout's own code, read with the rest (a code put on the basket is read after it).
    if let Some(code) = &req.promotion_code {
        reads.push((promotion_uses::OFFER_SQL, args![code]));
    }
    let mut read = batch::together(tx, reads).await?.into_iter().map(|o| o.rows.into_iter());
    if req.idempotency_key.is_some()
        && let Some(row) = read.next().and_then(|mut rows| rows.next())
    {
        checkout::may_replay_key(&col::<String>(&row, "basket_id")?, req.basket_id.as_str())?;
        return Ok(Found::Order(OrderNo::stored(col::<String>(&row, "order_no")?)));
    }
    if req.shop.merchant_reference.is_some()
        && let Some(row) = read.next().and_then(|mut rows| rows.next())
    {
        // The shop's reference is its key for the order: the first one is the answer.
        shop::on_reference_taken(&col::<String>(&row, "session_id")?, &req.session_id)?;
        let order_no = OrderNo::stored(col::<String>(&row, "order_no")?);
        remember_key(tx, req, &order_no).await?;
        return Ok(Found::Order(order_no));
    }
    let basket = read.next().and_then(|mut rows| rows.next()).ok_or_else(|| Error::not_found("basket"))?;
    if let Some(order_no) = col::<Option<String>>(&basket, "order_no")?.map(OrderNo::stored) {
        // A double-clicked confirm: the basket is frozen with its order.
        remember_key(tx, req, &order_no).await?;
        return Ok(Found::Order(order_no));
    }
    let lines = quoted_lines(&read.next().map(Iterator::collect::<Vec<_>>).unwrap_or_default())?;
    let code = match &req.promotion_code {
        Some(code) => match read.next().and_then(|mut rows| rows.next()) {
            Some(row) => Some(Code::Read(Box::new(promotion_uses::offer_of(&row)?))),
            None => return Err(promotion::unknown(code).into()),
        },
        None => col::<Option<String>>(&basket, "promotion_code")?.map(Code::Named),
    };
    Ok(Found::Lines(lines, code))
}

/// A statement of the confirm's batch whose rows changed decide it.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// The stock hold of line `.0`: no row changed when its SKU has too little left.
    Hold(usize),
    /// The order counted on the buyer's session: no row changed when it is at its limit.
    CountOpen,
    /// A use of the promotion counted: no row changed when its limit is reached.
    Promotion(Short),
}

/// Places the order: re-priced from today's catalog (the preview's total is never trusted), in one
/// batch (one round trip on PostgreSQL, see store::batch) —
/// 1. stock held, conditionally, in SKU order (a consistent lock order, no oversell);
/// 2. the order counted on the buyer's session, conditionally: under the limit or not at all (the
///    row lock makes two confirms of one buyer take turns);
/// 3. the promotion's use counted, conditionally (in all, on a batch code, for the buyer);
/// 4. the order, its lines, reservations, first attempt and promotion use created, the basket
///    frozen.
///
/// A hold that finds too little stock, a session at its limit or a promotion at its limit changes
/// no row; the confirm is then refused and rolls back. A zero total is completed here, without a gateway (none takes a
/// zero amount).
async fn place(tx: &mut Tx<'_>, req: &ConfirmRequest, quoted: &[QuotedLine], code: Option<Code>) -> Result<Placed> {
    let mut pricing = checkout::price(quoted, &req.limits, &req.gateway, req.currencies.as_deref())?;
    let promotion = match code {
        None => None,
        Some(code) => Some(priced_offer(tx, req, &mut pricing, code).await?),
    };
    let buyer = promotion::buyer_key(
        req.buyer.contact.email.as_ref().map(Email::as_str),
        req.buyer.contact.phone.as_ref().map(Phone::as_str),
        req.session_id.as_str(),
    );
    let reservation = promotion.as_ref().map(|(offer, discount)| Reservation {
        offer,
        discount,
        buyer: &buyer,
        currency: pricing.total.currency().code(),
    });
    let (gateway, channel) = pricing.payer(&req.gateway, &req.channel);
    let order_no = ids::new_order_no(req.now);
    let attempt_ref = ids::attempt_ref(&order_no, 1);
    let expires_at = checkout::hold_expires_at(req.now, checkout::hold_ms(req.hold_ms, quoted));
    let total = pricing.total;
    let mut batch = Batch::new();
    let mut steps = Named::new();
    for (i, line) in pricing.lines.iter().enumerate() {
        steps.add(
            &mut batch,
            "UPDATE skus SET reserved = reserved + $1, updated_at = $2 WHERE sku = $3 AND on_hand - reserved >= $1",
            args![line.quantity, req.now, &line.sku],
            1,
            Step::Hold(i),
        );
    }
    match req.max_open_orders {
        0 => steps.add(&mut batch, COUNT_OPEN_SQL, args![&req.session_id], 1, Step::CountOpen),
        max => steps.add(&mut batch, COUNT_OPEN_UNDER_SQL, args![&req.session_id, i64::from(max)], 1, Step::CountOpen),
    }
    if let Some(r) = &reservation {
        promotion_uses::add_reserve(&mut batch, &mut steps, r, req.now, Step::Promotion);
    }
    // The basket was read open under its lock: the freeze changes its row. Before the inserts,
    // so that they go in as one run (on PostgreSQL one statement: store::engine::fold).
    batch.expect(
        "UPDATE baskets SET status = $1, order_no = $2, updated_at = $3 WHERE id = $4 AND status = $5",
        args![BasketStatus::Frozen.as_str(), &order_no, req.now, &req.basket_id, BasketStatus::Open.as_str()],
        1,
        "basket freeze",
    );
    batch.expect(
        "INSERT INTO orders (order_no, session_id, basket_id, status, total_minor, currency, gateway, hold_expires_at, created_at, updated_at, \
         merchant_reference, metadata, return_url, cancel_url, open_counted, contact_email, contact_phone, lookup_hash, lang, mail_enabled, \
         discount_minor, promotion_code) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13, 1, $14, $15, $16, $17, $18, $19, $20)",
        args![
            &order_no,
            &req.session_id,
            &req.basket_id,
            OrderStatus::PendingPayment.as_str(),
            total.amount_minor(),
            total.currency().code(),
            gateway,
            expires_at,
            req.now,
            req.shop.merchant_reference.as_ref().map(MerchantReference::as_str),
            req.shop.metadata.to_stored(),
            req.shop.return_url.as_deref(),
            req.shop.cancel_url.as_deref(),
            req.buyer.contact.email.as_ref().map(Email::as_str),
            req.buyer.contact.phone.as_ref().map(Phone::as_str),
            req.buyer.lookup_hash.as_deref(),
            req.buyer.lang.as_deref(),
            i64::from(req.buyer.mail_enabled && req.buyer.contact.email.is_some()),
            pricing.discount_minor,
            reservation.as_ref().map(|r| r.offer.code.as_str())
        ],
        1,
        "order insert",
    );
    if let Some(r) = &reservation {
        promotion_uses::add_use_row(&mut batch, r, &order_no, req.now);
    }
    for (line_no, line) in (1_i64..).zip(&pricing.lines) {
        batch.expect(
            "INSERT INTO order_lines (order_no, line_no, sku, name, kind, unit_price_minor, quantity, line_total_minor, discount_minor) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            args![
                &order_no,
                line_no,
                &line.sku,
                &line.name,
                &line.kind,
                line.unit.amount_minor(),
                line.quantity,
                line.line_total.amount_minor(),
                line.discount_minor
            ],
            1,
            "order line insert",
        );
        batch.expect(
            "INSERT INTO reservations (order_no, sku, quantity, status, expires_at, updated_at) VALUES ($1, $2, $3, 'active', $4, $5)",
            args![&order_no, &line.sku, line.quantity, expires_at, req.now],
            1,
            "reservation insert",
        );
    }
    batch.expect(
        "INSERT INTO payment_attempts (attempt_ref, order_no, seq, gateway, channel, status, amount_minor, currency, created_at, updated_at, payer_openid, payer_appid) \
         VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $8, $8, $9, $10)",
        args![
            &attempt_ref,
            &order_no,
            gateway,
            channel,
            AttemptStatus::Created.as_str(),
            total.amount_minor(),
            total.currency().code(),
            req.now,
            req.payer.as_ref().map(|p| p.openid.as_str()),
            req.payer.as_ref().map(|p| p.appid.as_str())
        ],
        1,
        "attempt insert",
    );
    let cause = Cause { trigger: "checkout", notification_id: None, at: req.now };
    let pending = OrderStatus::PendingPayment.as_str();
    events::add_event(&mut batch, &order_no, "order", &order_no, None, pending, cause);
    events::add_event(&mut batch, &order_no, "attempt", &attempt_ref, None, AttemptStatus::Created.as_str(), cause);
    // Last, unchecked: a key recorded already stays.
    add_remember_key(&mut batch, req, &order_no);
    // An order to pay is placed by the confirm's last statements: with the commit, in one round
    // trip on PostgreSQL. A free one is paid next, in the same transaction.
    let short =
        if pricing.free { batch.run_named(tx, &steps).await? } else { batch.run_named_and_commit(tx, &steps).await? };
    if let Some(step) = short {
        if let (Step::Promotion(short), Some((offer, _))) = (step, &promotion) {
            return Err(promotion_uses::refusal(tx, offer, short).await?);
        }
        return Err(refusal(tx, req, &pricing.lines, step).await?);
    }
    if pricing.free {
        let lines = pricing.lines.iter().zip(1_i64..).map(|(l, line_no)| OrderLine::of_priced(l, line_no)).collect();
        let metadata = req.shop.metadata.to_stored();
        let context = crate::store::outbox::OrderContext {
            merchant_reference: req.shop.merchant_reference.as_ref().map(MerchantReference::as_str),
            metadata: metadata.as_deref(),
            contact_email: req.buyer.contact.email.as_ref().map(Email::as_str),
            contact_phone: req.buyer.contact.phone.as_ref().map(Phone::as_str),
            gateway: Some(gateway),
            promotion_code: reservation.as_ref().map(|r| r.offer.code.as_str()),
            discount_minor: pricing.discount_minor,
            ..Default::default()
        };
        crate::store::paid::complete_free(tx, &order_no, &attempt_ref, total, lines, context, req.now).await?;
        return load_placed(tx, &order_no, true).await;
    }
    Ok(Placed {
        subject: pricing.subject(),
        order_no,
        attempt_ref,
        gateway: req.gateway.clone(),
        channel: req.channel.clone(),
        status: OrderStatus::PendingPayment,
        total,
        expires_at,
        created: true,
        shop: req.shop.clone(),
    })
}

/// The refusal of a confirm whose `step` changed no row, from what its row shows now.
async fn refusal(tx: &mut Tx<'_>, req: &ConfirmRequest, lines: &[PricedLine], step: Step) -> Result<Error> {
    Ok(match step {
        Step::Hold(i) => {
            let line = lines.get(i).ok_or_else(|| Error::internal("a hold of no line"))?;
            let available: i64 = sql::query_scalar("SELECT on_hand - reserved FROM skus WHERE sku = $1")
                .bind(&line.sku)
                .fetch_one(&mut **tx)
                .await?;
            checkout::out_of_stock(&line.sku, line.quantity, available).into()
        }
        Step::Promotion(_) => Error::internal("a promotion's refusal read without its offer"),
        Step::CountOpen => {
            let open: i64 = sql::query_scalar("SELECT open_orders FROM sessions WHERE id = $1")
                .bind(&req.session_id)
                .fetch_one(&mut **tx)
                .await?;
            match checkout::check_open_orders(open, req.max_open_orders) {
                Err(refused) => refused.into(),
                Ok(()) => Error::internal("the open-orders count changed no row under the limit"),
            }
        }
    })
}

async fn remember_key(tx: &mut Tx<'_>, req: &ConfirmRequest, order_no: &str) -> Result<()> {
    let mut batch = Batch::new();
    add_remember_key(&mut batch, req, order_no);
    batch.run(tx).await.map(drop)
}

/// Records the request's idempotency key (if any) for `order_no`; a key recorded already stays.
fn add_remember_key(batch: &mut Batch, req: &ConfirmRequest, order_no: &str) {
    if let Some(key) = &req.idempotency_key {
        batch.add(
            "INSERT INTO idempotency_keys (session_id, idem_key, basket_id, order_no, created_at) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (session_id, idem_key) DO NOTHING",
            args![&req.session_id, key, &req.basket_id, order_no, req.now],
        );
    }
}

/// The order a buyer's idempotency key `$2` made (session `$1`), if any.
const IDEMPOTENCY_KEY_SQL: &str =
    "SELECT basket_id, order_no FROM idempotency_keys WHERE session_id = $1 AND idem_key = $2";

/// The order (and its buyer) that has the shop's reference `$1`, if any.
const MERCHANT_REFERENCE_SQL: &str = "SELECT order_no, session_id FROM orders WHERE merchant_reference = $1";

/// PostgreSQL: the buyer session `$1`, locked against the buyer's other confirms.
/// Counts a new order on buyer session `$1` (no limit). The order is inserted `open_counted`, so
/// the database's own count of pending inserts (migration 16) leaves it to this statement.
const COUNT_OPEN_SQL: &str = "UPDATE sessions SET open_orders = open_orders + 1 WHERE id = $1";
/// [`COUNT_OPEN_SQL`] only while the session has fewer than `$2` orders awaiting payment: no row
/// changed is the limit reached.
const COUNT_OPEN_UNDER_SQL: &str =
    "UPDATE sessions SET open_orders = open_orders + 1 WHERE id = $1 AND open_orders < $2";

/// The lines of basket `$1` with today's prices, in SKU order; [`price_lines`] reads them.
pub const PRICE_LINES_SQL: &str = "SELECT l.sku, l.quantity, l.quoted_unit_minor, l.currency AS quoted_currency, s.name, s.kind, s.price_minor, s.currency, \
     s.max_per_order, s.hold_seconds, s.on_hand \
     FROM basket_lines l JOIN skus s ON s.sku = l.sku WHERE l.basket_id = $1 ORDER BY l.sku";

/// The basket's lines as quoted, beside today's catalog ([`PRICE_LINES_SQL`]).
fn quoted_lines(rows: &[sql::Row]) -> Result<Vec<QuotedLine>> {
    rows.iter()
        .map(|r| {
            Ok(QuotedLine {
                sku: col(r, "sku")?,
                name: col(r, "name")?,
                kind: col(r, "kind")?,
                quantity: col(r, "quantity")?,
                quoted_unit_minor: col(r, "quoted_unit_minor")?,
                quoted_currency: col(r, "quoted_currency")?,
                price_minor: col(r, "price_minor")?,
                currency: col(r, "currency")?,
                max_per_order: col(r, "max_per_order")?,
                hold_seconds: col(r, "hold_seconds")?,
                on_hand: col(r, "on_hand")?,
            })
        })
        .collect()
}

/// The order with its newest attempt, for repeated confirms and retries of the hand-off.
pub async fn load_placed(tx: &mut Tx<'_>, order_no: &OrderNo, created: bool) -> Result<Placed> {
    let order = sql::query(
        "SELECT status, total_minor, currency, hold_expires_at, merchant_reference, metadata, return_url, cancel_url \
         FROM orders WHERE order_no = $1",
    )
    .bind(order_no)
    .fetch_optional(&mut **tx)
    .await?
    .ok_or_else(|| Error::not_found("order"))?;
    let attempt = sql::query(
        "SELECT attempt_ref, gateway, channel FROM payment_attempts WHERE order_no = $1 ORDER BY seq DESC LIMIT 1",
    )
    .bind(order_no)
    .fetch_one(&mut **tx)
    .await?;
    let names: Vec<String> = sql::query_scalar("SELECT name FROM order_lines WHERE order_no = $1 ORDER BY line_no")
        .bind(order_no)
        .fetch_all(&mut **tx)
        .await?;
    let status: String = col(&order, "status")?;
    let subject = checkout::subject(names.iter().map(String::as_str));
    Ok(Placed {
        order_no: order_no.clone(),
        attempt_ref: AttemptRef::stored(col::<String>(&attempt, "attempt_ref")?),
        gateway: col(&attempt, "gateway")?,
        channel: col(&attempt, "channel")?,
        status: OrderStatus::parse(&status).ok_or_else(|| Error::internal("unknown order status in database"))?,
        total: Money::new(col(&order, "total_minor")?, Currency::parse(&col::<String>(&order, "currency")?)?)?,
        expires_at: col(&order, "hold_expires_at")?,
        subject,
        created,
        shop: shop_data(&order)?,
    })
}

/// The shop's data on an order row (`merchant_reference`, `metadata`, `return_url`, `cancel_url`).
pub fn shop_data(row: &sql::Row) -> Result<ShopData> {
    Ok(ShopData {
        merchant_reference: col::<Option<String>>(row, "merchant_reference")?.map(MerchantReference::stored),
        metadata: Metadata::from_stored(col::<Option<String>>(row, "metadata")?.as_deref()),
        return_url: col(row, "return_url")?,
        cancel_url: col(row, "cancel_url")?,
    })
}

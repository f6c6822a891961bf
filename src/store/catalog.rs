//! Catalog (SKUs and stock), buyer sessions and baskets.

use crate::store::sql;
use serde::Serialize;

use crate::args;
use crate::clock::Millis;
use crate::domain::Money;
use crate::domain::basket::{self, BasketStatus};
use crate::domain::catalog;
use crate::domain::checkout::SkuLimits;
use crate::domain::ids::{self, BasketId, SessionId, Sku};
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::{Db, col, new_id};

pub use crate::domain::catalog::{STOCK_DELTA_MAX, SkuKind};

/// Sessions are looked up by a hash of their bearer token, so a database dump does not hand out
/// live sessions.
pub fn token_hash(token: &str) -> String {
    hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes()))
}

#[derive(Debug, Clone)]
pub struct NewSku {
    pub sku: Sku,
    pub name: String,
    pub kind: SkuKind,
    pub price: Money,
    pub stock: i64,
    pub limits: SkuLimits,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SkuView {
    pub sku: String,
    pub name: String,
    pub kind: String,
    pub price_minor: i64,
    pub currency: String,
    pub on_hand: i64,
    pub reserved: i64,
    pub sold: i64,
    pub available: i64,
    /// Most units of this SKU in one order (`null`: no limit of its own).
    pub max_per_order: Option<i64>,
    /// How long an order holds this SKU, when shorter than the shop's default (`null`: the default).
    pub hold_seconds: Option<i64>,
}

impl SkuView {
    pub fn limits(&self) -> SkuLimits {
        SkuLimits { max_per_order: self.max_per_order, hold_seconds: self.hold_seconds }
    }
}

/// A change to a SKU's limits: `None` leaves a limit as it is, `Some(None)` removes it.
#[derive(Debug, Clone, Copy, Default)]
pub struct LimitsPatch {
    pub max_per_order: Option<Option<i64>>,
    pub hold_seconds: Option<Option<i64>>,
}

const SKU_COLUMNS: &str =
    "sku, name, kind, price_minor, currency, on_hand, reserved, sold, max_per_order, hold_seconds";

fn sku_from_row(row: &sql::Row) -> Result<SkuView> {
    let on_hand: i64 = col(row, "on_hand")?;
    let reserved: i64 = col(row, "reserved")?;
    Ok(SkuView {
        sku: col(row, "sku")?,
        name: col(row, "name")?,
        kind: col(row, "kind")?,
        price_minor: col(row, "price_minor")?,
        currency: col(row, "currency")?,
        on_hand,
        reserved,
        sold: col(row, "sold")?,
        available: on_hand - reserved,
        max_per_order: col(row, "max_per_order")?,
        hold_seconds: col(row, "hold_seconds")?,
    })
}

/// Creates a SKU. `if_absent` makes it idempotent (demo seeding by several instances at once);
/// otherwise an existing SKU is a `sku_exists` conflict.
pub async fn create_sku(db: &Db, new: &NewSku, if_absent: bool, now: Millis) -> Result<SkuView> {
    let stock = catalog::starting_stock(new.kind, new.stock)?;
    new.limits.check()?;
    let created = crate::write_tx!(db, |tx| {
        let done = sql::query(
                "INSERT INTO skus (sku, name, kind, price_minor, currency, on_hand, reserved, sold, max_per_order, hold_seconds, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, 0, 0, $7, $8, $9, $9) ON CONFLICT (sku) DO NOTHING",
            )
            .bind(&new.sku)
            .bind(&new.name)
            .bind(new.kind.as_str())
            .bind(new.price.amount_minor())
            .bind(new.price.currency().code())
            .bind(stock)
            .bind(new.limits.max_per_order)
            .bind(new.limits.hold_seconds)
            .bind(now)
            .execute(&mut **tx)
            .await?;
        Ok(done.rows_affected() == 1)
    })?;
    if !created && !if_absent {
        return Err(catalog::sku_exists(new.sku.as_str()).into());
    }
    get_sku(db, &new.sku).await
}

pub async fn get_sku(db: &Db, sku: &Sku) -> Result<SkuView> {
    let row = sql::query(&format!("SELECT {SKU_COLUMNS} FROM skus WHERE sku = $1"))
        .bind(sku)
        .fetch_optional(db.read_pool())
        .await?
        .ok_or_else(|| Error::not_found("SKU"))?;
    sku_from_row(&row)
}

pub async fn list_skus(db: &Db) -> Result<Vec<SkuView>> {
    let rows = sql::query(&format!("SELECT {SKU_COLUMNS} FROM skus ORDER BY sku")).fetch_all(db.read_pool()).await?;
    rows.iter().map(sku_from_row).collect()
}

/// Changes a SKU's price, name and/or limits. Open baskets keep their quote; their confirm then
/// answers `price_changed` so the buyer sees the new price before paying it. A lowered limit
/// applies to every confirm from now on; orders placed already keep what they hold.
pub async fn update_sku(
    db: &Db,
    sku: &Sku,
    name: Option<&str>,
    price_minor: Option<i64>,
    limits: LimitsPatch,
    now: Millis,
) -> Result<SkuView> {
    SkuLimits { max_per_order: limits.max_per_order.flatten(), hold_seconds: limits.hold_seconds.flatten() }.check()?;
    let set = |patch: Option<Option<i64>>| (i64::from(patch.is_some()), patch.flatten());
    let (set_max, max) = set(limits.max_per_order);
    let (set_hold, hold) = set(limits.hold_seconds);
    crate::write_tx!(db, |tx| {
        let done = sql::query(
            "UPDATE skus SET name = COALESCE($1, name), price_minor = COALESCE($2, price_minor), \
             max_per_order = CASE WHEN $5 = 1 THEN $6 ELSE max_per_order END, \
             hold_seconds = CASE WHEN $7 = 1 THEN $8 ELSE hold_seconds END, updated_at = $3 WHERE sku = $4",
        )
        .bind(name)
        .bind(price_minor)
        .bind(now)
        .bind(sku)
        .bind(set_max)
        .bind(max)
        .bind(set_hold)
        .bind(hold)
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() == 1 { Ok(()) } else { Err(Error::not_found("SKU")) }
    })?;
    get_sku(db, sku).await
}

/// Restock (positive) or write off (negative) a physical SKU. A write-off can never take away
/// held units. A digital SKU's stock is its unsold keys: it changes by key imports and sales only.
pub async fn adjust_stock(db: &Db, sku: &Sku, delta: i64, now: Millis) -> Result<SkuView> {
    catalog::check_stock_delta(delta)?;
    crate::write_tx!(db, |tx| {
        let done = sql::query(
            "UPDATE skus SET on_hand = on_hand + $1, updated_at = $2 WHERE sku = $3 AND kind = $4 AND on_hand + $1 >= reserved",
        )
        .bind(delta)
        .bind(now)
        .bind(sku)
        .bind(SkuKind::Physical.as_str())
        .execute(&mut **tx)
        .await?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        // The move changed nothing: the row shows why.
        let row = sql::query("SELECT kind, on_hand, reserved FROM skus WHERE sku = $1")
            .bind(sku)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| Error::not_found("SKU"))?;
        let kind = SkuKind::parse(&col::<String>(&row, "kind")?).ok_or_else(|| Error::internal("unknown SKU kind"))?;
        let after = col::<i64>(&row, "on_hand")?.saturating_add(delta);
        catalog::may_adjust_stock(kind, after, col(&row, "reserved")?)?;
        Err(Error::internal("a stock move that may go ahead changed no row"))
    })?;
    get_sku(db, sku).await
}

/// A buyer session as the HTTP layer sees it.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: SessionId,
    /// Per-session token that HTML forms must echo (cross-site request forgery protection).
    pub csrf_token: String,
}

/// Creates an anonymous buyer and returns its bearer token (shown once, stored hashed). One
/// statement (on PostgreSQL one round trip); the new session goes into this instance's cache, so
/// the buyer's next request does not read it back.
pub async fn create_session(db: &Db, now: Millis) -> Result<(String, Session)> {
    let token = ids::new_secret_token();
    let hash = token_hash(&token);
    let session = Session { id: SessionId::stored(new_id()), csrf_token: ids::new_secret_token() };
    db.write_one(|| {
        sql::query("INSERT INTO sessions (id, token_hash, csrf_token, created_at) VALUES ($1, $2, $3, $4)")
            .bind(&session.id)
            .bind(&hash)
            .bind(&session.csrf_token)
            .bind(now)
    })
    .await?;
    db.sessions().put(hash, session.clone(), now);
    Ok((token, session))
}

/// Sessions most kept in memory; past it the cache starts over (a miss only costs a read).
const SESSION_CACHE_MAX: usize = 50_000;
/// Sessions younger than this are answered from the cache. Retention prunes a session only after
/// it has been unused for at least a day (`retention::Retention`), so a session this young exists
/// for good; an older one is read from the database on every request (it may have been pruned).
pub const SESSION_CACHE_AGE_MAX_MS: Millis = 24 * 3600 * 1000;

/// Buyer sessions already read, by token hash, with their creation time. A buyer session never
/// changes; only finds are kept, never "no such session". Every request of a buyer looks its
/// session up, so this saves a read per request (three per purchase).
#[derive(Debug, Default)]
pub struct SessionCache(std::sync::Mutex<std::collections::HashMap<String, (Session, Millis)>>);

impl SessionCache {
    fn get(&self, hash: &str, now: Millis) -> Option<Session> {
        let map = self.0.lock().ok()?;
        let (session, created_at) = map.get(hash)?;
        (now.saturating_sub(*created_at) < SESSION_CACHE_AGE_MAX_MS).then(|| session.clone())
    }

    fn put(&self, hash: String, session: Session, created_at: Millis) {
        if let Ok(mut map) = self.0.lock() {
            if map.len() >= SESSION_CACHE_MAX {
                map.clear();
            }
            map.insert(hash, (session, created_at));
        }
    }
}

pub async fn session_by_token(db: &Db, token: &str, now: Millis) -> Result<Option<Session>> {
    if token.is_empty() || token.len() > 128 {
        return Ok(None);
    }
    let hash = token_hash(token);
    if let Some(found) = db.sessions().get(&hash, now) {
        return Ok(Some(found));
    }
    let row = sql::query("SELECT id, csrf_token, created_at FROM sessions WHERE token_hash = $1")
        .bind(&hash)
        .fetch_optional(db.read_pool())
        .await?;
    let Some(row) = row else { return Ok(None) };
    let session = Session { id: SessionId::stored(col::<String>(&row, "id")?), csrf_token: col(&row, "csrf_token")? };
    db.sessions().put(hash, session.clone(), col(&row, "created_at")?);
    Ok(Some(session))
}

pub async fn create_basket(db: &Db, session_id: &SessionId, now: Millis) -> Result<BasketId> {
    Ok(BasketId::stored(open_basket(db, session_id, Vec::new(), now).await?.basket_id))
}

/// Opens a basket holding `lines` (SKU, quantity), quoting today's prices: all of them or,
/// on any bad line, nothing at all. One write command however many lines (a "buy now" button
/// needs one request, not one per line). Returns the basket as created.
pub async fn open_basket(
    db: &Db,
    session_id: &SessionId,
    lines: Vec<(String, i64)>,
    now: Millis,
) -> Result<BasketView> {
    basket::check_new_lines(&lines)?;
    let session_id = session_id.clone();
    db.command(move |db| async move {
        let (db, session_id, lines) = (&db, &session_id, lines.as_slice());
        let id = new_id();
        if db.kind() == crate::store::DbKind::Postgres {
            return open_basket_pg(db, &id, session_id, lines, now).await;
        }
        let sql = skus_sql(lines.len());
        crate::write_tx!(db, |tx| {
            let found = if lines.is_empty() { Vec::new() } else { bind_skus(&sql, lines).fetch_all(&mut **tx).await? };
            let (view, batch) = new_basket(&id, session_id, lines, &found, now)?;
            batch.run_checked_by_commit(tx).await?;
            Ok(view)
        })
    })
    .await
}

/// A basket line priced by the database as it goes in, returned with the SKU's name: no row for
/// an unknown SKU. (The quote needs no lock: a confirm re-prices every line anyway.)
const INSERT_PRICED_LINE_SQL: &str = "INSERT INTO basket_lines (basket_id, sku, quantity, quoted_unit_minor, currency) \
     SELECT CAST($1 AS TEXT), sku, CAST($3 AS BIGINT), price_minor, currency FROM skus WHERE sku = $2 \
     RETURNING sku, quoted_unit_minor AS price_minor, currency, (SELECT name FROM skus WHERE skus.sku = basket_lines.sku) AS name, \
     (SELECT max_per_order FROM skus WHERE skus.sku = basket_lines.sku) AS max_per_order";
const INSERT_BASKET_SQL: &str =
    "INSERT INTO baskets (id, session_id, status, created_at, updated_at) VALUES ($1, $2, 'open', $3, $3)";

/// PostgreSQL: the basket and its lines in one script — one round trip, one implicit
/// transaction, where a quote read first and the inserts after were two — each line priced as it
/// goes in. The checks come after the commit: a basket refused (an unknown SKU went in as no
/// row, currencies differ, the total overflows) is deleted again, before anyone knows its id.
async fn open_basket_pg(
    db: &Db,
    id: &str,
    session_id: &SessionId,
    lines: &[(String, i64)],
    now: Millis,
) -> Result<BasketView> {
    let mut run = Vec::with_capacity(lines.len() + 1);
    run.push((INSERT_BASKET_SQL, args![id, session_id, now]));
    for (sku, quantity) in lines {
        run.push((INSERT_PRICED_LINE_SQL, args![id, sku.as_str(), *quantity]));
    }
    let stored = db.pg_script(run).await?.ok_or_else(|| Error::internal("a script needs PostgreSQL"))?;
    let quoted: Vec<sql::Row> = stored.into_iter().skip(1).flat_map(|o| o.rows).collect();
    match new_basket(id, session_id, lines, &quoted, now) {
        Ok((view, _as_stored)) => Ok(view),
        Err(refused) => {
            db.pg_script(vec![
                ("DELETE FROM basket_lines WHERE basket_id = $1", args![id]),
                ("DELETE FROM baskets WHERE id = $1", args![id]),
            ])
            .await?;
            Err(refused)
        }
    }
}

/// Today's prices of `n` SKUs, in one read.
fn skus_sql(n: usize) -> String {
    let params: Vec<String> = (1..=n).map(|i| format!("${i}")).collect();
    format!("SELECT sku, name, price_minor, currency, max_per_order FROM skus WHERE sku IN ({})", params.join(", "))
}

fn bind_skus<'q>(sql: &'q str, lines: &'q [(String, i64)]) -> sql::Query<'q> {
    lines.iter().fold(sql::query(sql), |q, (sku, _)| q.bind(sku))
}

/// A new basket of `lines` quoted at the prices `found`: its view and the batch that stores it.
/// Refused (nothing to store) if a SKU is unknown, the currencies differ or the total overflows.
fn new_basket(
    id: &str,
    session_id: &SessionId,
    lines: &[(String, i64)],
    found: &[sql::Row],
    now: Millis,
) -> Result<(BasketView, Batch)> {
    let mut rows = Vec::with_capacity(lines.len());
    for (sku, quantity) in lines {
        let r = found
            .iter()
            .find(|r| col::<String>(r, "sku").is_ok_and(|s| &s == sku))
            .ok_or_else(|| Error::not_found("SKU"))?;
        basket::check_line_limit(sku, *quantity, col(r, "max_per_order")?)?;
        let price: i64 = col(r, "price_minor")?;
        rows.push(LineRow {
            sku: sku.clone(),
            name: col(r, "name")?,
            quantity: *quantity,
            quoted: price,
            current: price,
            currency: col(r, "currency")?,
        });
    }
    basket::check_one_currency(rows.iter().map(|r| r.currency.as_str()))?;
    let mut batch = Batch::new();
    batch.expect(INSERT_BASKET_SQL, args![id, session_id, now], 1, "basket insert");
    for l in &rows {
        batch.expect(
            "INSERT INTO basket_lines (basket_id, sku, quantity, quoted_unit_minor, currency) VALUES ($1, $2, $3, $4, $5)",
            args![id, &l.sku, l.quantity, l.quoted, &l.currency],
            1,
            "basket line insert",
        );
    }
    // The view checks the total (overflow) before anything is written.
    Ok((basket_view(id, BasketStatus::Open, None, rows)?, batch))
}

/// Sets the quantity of one SKU in an open basket (0 removes it), quoting today's price; returns
/// the basket as this change left it (read in the change's own transaction, so no second read).
pub async fn set_basket_line(
    db: &Db,
    session_id: &SessionId,
    basket_id: &BasketId,
    sku: &Sku,
    quantity: i64,
    now: Millis,
) -> Result<BasketView> {
    let (session_id, basket_id, sku) = (session_id.to_string(), basket_id.clone(), sku.clone());
    db.command(move |db| async move {
        let (db, session_id, basket_id, sku) = (&db, session_id.as_str(), basket_id.as_str(), sku.as_str());
        basket::check_set_quantity(quantity)?;
        crate::write_tx!(db, |tx| {
            // PostgreSQL: lock the basket first, in a statement of its own. A statement that waited
            // for a row lock re-reads only the locked row, not the rows it joined, so reading the
            // lines in the locking statement could miss a line a concurrent change just committed
            // (and let two currencies in). The next statement reads everything committed. SQLite's
            // write transaction already excludes every other writer: one read is enough.
            if db.kind() == crate::store::DbKind::Postgres {
                sql::query("SELECT id FROM baskets WHERE id = $1 AND session_id = $2 FOR UPDATE")
                    .bind(basket_id)
                    .bind(session_id)
                    .fetch_optional(&mut **tx)
                    .await?
                    .ok_or_else(|| Error::not_found("basket"))?;
            }
            // The basket, today's price of the SKU and the basket's other lines (one currency, a
            // representable total, a bounded size; their names and today's prices for the answer),
            // in one read: a row per other line, or one row with null line columns.
            let rows = sql::query(
                "SELECT b.status, b.promotion_code, s.name, s.price_minor, s.currency, s.max_per_order, l.sku AS line_sku, ls.name AS line_name, \
                 ls.price_minor AS line_price_minor, l.quoted_unit_minor, l.quantity, l.currency AS line_currency \
                 FROM baskets b LEFT JOIN skus s ON s.sku = $3 LEFT JOIN basket_lines l ON l.basket_id = b.id AND l.sku <> $3 \
                 LEFT JOIN skus ls ON ls.sku = l.sku \
                 WHERE b.id = $1 AND b.session_id = $2",
            )
            .bind(basket_id)
            .bind(session_id)
            .bind(sku)
            .fetch_all(&mut **tx)
            .await?;
            let Some(row) = rows.first() else { return Err(Error::not_found("basket")) };
            basket::may_change(col::<BasketStatus>(row, "status")?)?;
            let code: Option<String> = col(row, "promotion_code")?;
            let mut others = Vec::with_capacity(rows.len());
            for r in &rows {
                if let Some(line_sku) = col::<Option<String>>(r, "line_sku")? {
                    others.push(LineRow {
                        sku: line_sku,
                        name: col(r, "line_name")?,
                        quantity: col(r, "quantity")?,
                        quoted: col(r, "quoted_unit_minor")?,
                        current: col(r, "line_price_minor")?,
                        currency: col(r, "line_currency")?,
                    });
                }
            }
            if quantity == 0 {
                sql::query("DELETE FROM basket_lines WHERE basket_id = $1 AND sku = $2")
                    .bind(basket_id)
                    .bind(sku)
                    .execute(&mut **tx)
                    .await?;
                return basket_view(basket_id, BasketStatus::Open, None, others).map(|v| v.with_code(code));
            }
            let (Some(name), Some(price), Some(currency)) = (
                col::<Option<String>>(row, "name")?,
                col::<Option<i64>>(row, "price_minor")?,
                col::<Option<String>>(row, "currency")?,
            ) else {
                return Err(Error::not_found("SKU"));
            };
            basket::check_line_limit(sku, quantity, col(row, "max_per_order")?)?;
            basket::check_one_currency(others.iter().map(|l| l.currency.as_str()).chain([currency.as_str()]))?;
            basket::total_minor(others.iter().map(|l| (l.quoted, l.quantity)).chain([(price, quantity)]))?;
            basket::check_room_for_line(others.len())?;
            let mut batch = Batch::new();
            batch.expect(
                "INSERT INTO basket_lines (basket_id, sku, quantity, quoted_unit_minor, currency) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (basket_id, sku) DO UPDATE SET quantity = excluded.quantity, \
                 quoted_unit_minor = excluded.quoted_unit_minor, currency = excluded.currency",
                args![basket_id, sku, quantity, price, &currency],
                1,
                "basket line upsert",
            );
            batch.expect("UPDATE baskets SET updated_at = $1 WHERE id = $2", args![now, basket_id], 1, "basket touch");
            batch.run_checked_by_commit(tx).await?;
            others.push(LineRow { sku: sku.to_string(), name, quantity, quoted: price, current: price, currency });
            basket_view(basket_id, BasketStatus::Open, None, others).map(|v| v.with_code(code))
        })
    })
    .await
}

/// One line of a basket as read from the database: its SKU's name and today's price beside the
/// quoted one.
struct LineRow {
    sku: String,
    name: String,
    quantity: i64,
    quoted: i64,
    current: i64,
    currency: String,
}

/// The basket view from its lines, in SKU order, with the total at the quoted prices.
fn basket_view(
    basket_id: &str,
    status: BasketStatus,
    order_no: Option<String>,
    mut rows: Vec<LineRow>,
) -> Result<BasketView> {
    rows.sort_by(|a, b| a.sku.cmp(&b.sku));
    let total = basket::total_minor(rows.iter().map(|r| (r.quoted, r.quantity)))?;
    let mut lines = Vec::with_capacity(rows.len());
    let mut currency = None;
    for r in rows {
        // Within the total, which did not overflow.
        let line_total = r.quoted.saturating_mul(r.quantity);
        currency = Some(r.currency);
        lines.push(BasketLineView {
            sku: r.sku,
            name: r.name,
            quantity: r.quantity,
            unit_price_minor: r.quoted,
            current_unit_price_minor: r.current,
            line_total_minor: line_total,
            price_changed: r.quoted != r.current,
        });
    }
    Ok(BasketView {
        basket_id: basket_id.to_string(),
        status,
        lines,
        total_minor: total,
        currency,
        order_no,
        promotion: None,
    })
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BasketLineView {
    pub sku: String,
    pub name: String,
    pub quantity: i64,
    /// The price the buyer was quoted; confirm refuses with `price_changed` if it moved.
    pub unit_price_minor: i64,
    pub current_unit_price_minor: i64,
    pub line_total_minor: i64,
    pub price_changed: bool,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BasketView {
    pub basket_id: String,
    /// `open` while lines may change, `frozen` once confirmed.
    #[schema(value_type = String)]
    pub status: BasketStatus,
    pub lines: Vec<BasketLineView>,
    pub total_minor: i64,
    pub currency: Option<String>,
    pub order_no: Option<String>,
    /// The promotion code put on the basket and what it takes off now (absent: none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<BasketPromotion>,
}

/// A basket's promotion code, priced against its lines as they are now.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BasketPromotion {
    pub code: String,
    /// What the code takes off the lines now (0 while it does not apply).
    pub discount_minor: i64,
    /// What the order would cost: the lines less the discount.
    pub total_minor: i64,
    /// Why the code does not apply now (`promotion_minimum_not_met`, …), if it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<PromotionRefusal>,
}

/// Why a basket's code does not apply now: the code, message and details confirm would refuse
/// with (`promotion_minimum_not_met` names `min_spend_minor` and `currency`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PromotionRefusal {
    pub code: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

impl BasketView {
    /// The view with the basket's promotion code, not yet priced.
    pub fn with_code(mut self, code: Option<String>) -> BasketView {
        self.promotion =
            code.map(|code| BasketPromotion { code, discount_minor: 0, total_minor: self.total_minor, refusal: None });
        self
    }

    pub fn total_display(&self) -> String {
        self.money(&self.total_minor)
    }

    /// An amount of this basket's currency, for people (`178.00 CNY`).
    pub fn money(&self, amount_minor: &i64) -> String {
        self.currency.as_deref().map(|c| crate::domain::money::format_minor(*amount_minor, c)).unwrap_or_default()
    }
}

/// The basket view's one read. Every join goes by key: a line always has its SKU (foreign key), so
/// the second join is left only to keep a basket without lines. (A parenthesised `lines JOIN skus`
/// made SQLite materialise every basket's lines on each view: a scan that grew with the shop's
/// history. `tests/api/plans.rs` checks the plan.)
pub const BASKET_VIEW_SQL: &str = "SELECT b.status, b.order_no, b.promotion_code, l.sku, s.name, l.quantity, l.quoted_unit_minor, l.currency, s.price_minor \
     FROM baskets b LEFT JOIN basket_lines l ON l.basket_id = b.id LEFT JOIN skus s ON s.sku = l.sku \
     WHERE b.id = $1 AND b.session_id = $2 ORDER BY l.sku";

pub async fn get_basket(db: &Db, session_id: &SessionId, basket_id: &BasketId) -> Result<BasketView> {
    // The basket and its lines in one read (one consistent view); a basket without lines is one
    // row whose line columns are null.
    let rows = sql::query(BASKET_VIEW_SQL).bind(basket_id).bind(session_id).fetch_all(db.read_pool()).await?;
    let basket = rows.first().ok_or_else(|| Error::not_found("basket"))?;
    let (status, order_no): (BasketStatus, Option<String>) = (col(basket, "status")?, col(basket, "order_no")?);
    let code: Option<String> = col(basket, "promotion_code")?;
    let mut lines = Vec::with_capacity(rows.len());
    for r in &rows {
        if let Some(sku) = col::<Option<String>>(r, "sku")? {
            lines.push(LineRow {
                sku,
                name: col(r, "name")?,
                quantity: col(r, "quantity")?,
                quoted: col(r, "quoted_unit_minor")?,
                current: col(r, "price_minor")?,
                currency: col(r, "currency")?,
            });
        }
    }
    basket_view(basket_id, status, order_no, lines).map(|v| v.with_code(code))
}

/// Puts a promotion code on the buyer's open basket (`None` takes it off). The code is checked
/// by the caller; confirm applies it.
pub async fn set_basket_code(
    db: &Db,
    session_id: &SessionId,
    basket_id: &BasketId,
    code: Option<&str>,
    now: Millis,
) -> Result<()> {
    let done = db
        .write_one(|| {
            sql::query(
                "UPDATE baskets SET promotion_code = $1, updated_at = $2 WHERE id = $3 AND session_id = $4 AND status = 'open'",
            )
            .bind(code)
            .bind(now)
            .bind(basket_id)
            .bind(session_id)
        })
        .await?;
    if done == 1 {
        return Ok(());
    }
    let status: Option<BasketStatus> =
        sql::query_scalar("SELECT status FROM baskets WHERE id = $1 AND session_id = $2")
            .bind(basket_id)
            .bind(session_id)
            .fetch_optional(db.read_pool())
            .await?;
    match status {
        None => Err(Error::not_found("basket")),
        Some(status) => {
            Err(basket::may_change(status).err().map(Error::from).unwrap_or_else(|| Error::internal("basket changed")))
        }
    }
}

/// After a `price_changed` refusal: quote today's prices so the buyer can review and confirm again.
pub async fn requote_basket(db: &Db, basket_id: &BasketId) -> Result<()> {
    crate::write_tx!(db, |tx| {
        sql::query(
            "UPDATE basket_lines SET quoted_unit_minor = (SELECT price_minor FROM skus WHERE skus.sku = basket_lines.sku) \
             WHERE basket_id = $1 AND EXISTS (SELECT 1 FROM baskets b WHERE b.id = $1 AND b.status = 'open')",
        )
        .bind(basket_id)
        .execute(&mut **tx)
        .await?;
        Ok(())
    })
}

//! Promotions as the shop manages them: created with their rules and code, paused, resumed and
//! ended, batches of single-use codes generated and exported, uses and what was given away read.
//! What a use does to an order is `store::promotion_uses`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::args;
use crate::clock::{Millis, rfc3339};
use crate::domain::promotion::{self, Benefit, PromotionStatus, Rules};
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::{Db, col, new_id, sql};

/// A promotion as the shop creates it.
#[derive(Debug, Clone)]
pub struct NewPromotion {
    pub name: String,
    /// The code buyers type, if the promotion has one of its own (a promotion of batch codes
    /// only has none).
    pub code: Option<String>,
    pub rules: Rules,
}

/// A promotion with where it stands.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct PromotionView {
    pub id: String,
    pub name: String,
    /// The shop's own code, if it has one.
    pub code: Option<String>,
    /// `active`, `paused` or `ended`.
    #[schema(value_type = String)]
    pub status: PromotionStatus,
    pub percent_off: Option<i64>,
    /// Minor units off per currency.
    pub amount_off: Option<BTreeMap<String, i64>>,
    /// The SKUs it applies to; empty: the whole order.
    pub skus: Vec<String>,
    /// The least an order's lines must add up to, per currency; empty: no minimum.
    pub min_spend: BTreeMap<String, i64>,
    pub starts_at: Option<String>,
    pub ends_at: Option<String>,
    pub max_uses: Option<i64>,
    pub per_buyer: Option<i64>,
    pub first_order_only: bool,
    /// Uses taken: held by pending orders and kept by paid ones.
    pub uses: i64,
    /// Uses held by orders awaiting payment.
    pub reserved: i64,
    /// Uses left under `max_uses` (`null`: no limit).
    pub uses_left: Option<i64>,
    /// What paid orders got off, per currency (minor units).
    pub given_away: BTreeMap<String, i64>,
    pub batches: Vec<BatchView>,
    pub created_at: String,
}

/// A batch of single-use codes.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct BatchView {
    pub batch: String,
    pub codes: i64,
    /// Codes held or used.
    pub used: i64,
}

/// One use of a promotion, as the shop reads it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct UseView {
    pub order_no: String,
    pub code: String,
    /// `reserved`, `consumed` or `released`.
    pub status: String,
    pub discount_minor: i64,
    pub currency: String,
    pub created_at: String,
}

/// A code of a batch, as exported.
#[derive(Debug, Clone, Serialize)]
pub struct CodeRow {
    pub code: String,
    pub batch: String,
    pub used: bool,
}

const PROMOTION_COLUMNS: &str = "p.id, p.name, p.percent_off, p.amounts_off, p.skus, p.min_spend, p.starts_at, p.ends_at, \
     p.max_uses, p.per_buyer, p.first_order_only, p.status, p.uses";

/// A promotion's rules and status from its row ([`PROMOTION_COLUMNS`]).
pub(crate) fn rules_of(row: &sql::Row) -> Result<(PromotionStatus, Rules)> {
    let status = PromotionStatus::parse(&col::<String>(row, "status")?)
        .ok_or_else(|| Error::internal("unknown promotion status in database"))?;
    let json_map = |name: &str| -> Result<BTreeMap<String, i64>> {
        match col::<Option<String>>(row, name)? {
            None => Ok(BTreeMap::new()),
            Some(text) => {
                serde_json::from_str(&text).map_err(|_| Error::internal(format!("promotion {name} unreadable")))
            }
        }
    };
    let benefit = match col::<Option<i64>>(row, "percent_off")? {
        Some(p) => Benefit::PercentOff(p),
        None => Benefit::AmountOff(json_map("amounts_off")?),
    };
    let skus = match col::<Option<String>>(row, "skus")? {
        None => Vec::new(),
        Some(text) => serde_json::from_str(&text).map_err(|_| Error::internal("promotion skus unreadable"))?,
    };
    Ok((
        status,
        Rules {
            benefit,
            skus,
            min_spend: json_map("min_spend")?,
            starts_at: col(row, "starts_at")?,
            ends_at: col(row, "ends_at")?,
            max_uses: col(row, "max_uses")?,
            per_buyer: col(row, "per_buyer")?,
            first_order_only: col::<i64>(row, "first_order_only")? == 1,
        },
    ))
}

/// Creates a promotion and its code; a code taken already is `code_exists`.
pub async fn create(db: &Db, new: &NewPromotion, now: Millis) -> Result<PromotionView> {
    new.rules.check()?;
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > promotion::NAME_LEN_MAX {
        return Err(Error::unprocessable(
            "invalid_promotion",
            format!("name must be 1 to {} characters", promotion::NAME_LEN_MAX),
        ));
    }
    let code = new.code.as_deref().map(promotion::shop_code).transpose()?;
    let id = format!("pm_{}", new_id());
    let (percent, amounts) = match &new.rules.benefit {
        Benefit::PercentOff(p) => (Some(*p), None),
        Benefit::AmountOff(a) => (None, Some(serde_json::to_string(a).unwrap_or_default())),
    };
    let as_json = |m: &BTreeMap<String, i64>| (!m.is_empty()).then(|| serde_json::to_string(m).unwrap_or_default());
    let skus = (!new.rules.skus.is_empty()).then(|| serde_json::to_string(&new.rules.skus).unwrap_or_default());
    let r = &new.rules;
    let taken = crate::write_tx!(db, |tx| {
        if let Some(code) = &code {
            let taken: Option<String> = sql::query_scalar("SELECT code FROM promotion_codes WHERE code = $1")
                .bind(code)
                .fetch_optional(&mut **tx)
                .await?;
            if taken.is_some() {
                return Ok(true);
            }
        }
        let mut batch = Batch::new();
        batch.expect(
            "INSERT INTO promotions (id, name, percent_off, amounts_off, skus, min_spend, starts_at, ends_at, max_uses, per_buyer, \
             first_order_only, status, uses, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'active', 0, $12, $12)",
            args![
                &id,
                name,
                percent,
                amounts.as_deref(),
                skus.as_deref(),
                as_json(&r.min_spend).as_deref(),
                r.starts_at,
                r.ends_at,
                r.max_uses,
                r.per_buyer,
                i64::from(r.first_order_only),
                now
            ],
            1,
            "promotion insert",
        );
        if let Some(code) = &code {
            batch.expect(
                "INSERT INTO promotion_codes (code, promotion_id, batch, single_use, uses, created_at) VALUES ($1, $2, NULL, 0, 0, $3)",
                args![code, &id, now],
                1,
                "promotion code insert",
            );
        }
        batch.run_checked(tx).await?;
        Ok(false)
    });
    match taken {
        Ok(true) => Err(code_exists()),
        // Two shops' requests for one code at once: the second's insert found it taken.
        Err(Error::Db(e)) if matches!(e.code(), Some("23505" | "1555" | "2067")) => Err(code_exists()),
        Err(e) => Err(e),
        Ok(false) => get(db, &id).await,
    }
}

fn code_exists() -> Error {
    Error::conflict("code_exists", "another promotion has this code")
}

/// Every promotion, newest first (at most `limit`).
pub async fn list(db: &Db, limit: i64) -> Result<Vec<PromotionView>> {
    let ids: Vec<String> = sql::query_scalar("SELECT id FROM promotions ORDER BY created_at DESC, id DESC LIMIT $1")
        .bind(limit)
        .fetch_all(db.read_pool())
        .await?;
    let mut views = Vec::with_capacity(ids.len());
    for id in ids {
        views.push(get(db, &id).await?);
    }
    Ok(views)
}

/// One promotion, with its uses, what it gave away and its batches.
pub async fn get(db: &Db, id: &str) -> Result<PromotionView> {
    let row = sql::query(&format!(
        "SELECT {PROMOTION_COLUMNS}, p.created_at, (SELECT MIN(code) FROM promotion_codes c WHERE c.promotion_id = p.id AND c.batch IS NULL) AS code \
         FROM promotions p WHERE p.id = $1"
    ))
    .bind(id)
    .fetch_optional(db.read_pool())
    .await?
    .ok_or_else(|| Error::not_found("promotion"))?;
    let (status, rules) = rules_of(&row)?;
    let uses: i64 = col(&row, "uses")?;
    let sums = sql::query(
        "SELECT status, currency, CAST(COUNT(*) AS BIGINT) AS n, CAST(SUM(discount_minor) AS BIGINT) AS off FROM promotion_uses \
         WHERE promotion_id = $1 AND status <> 'released' GROUP BY status, currency",
    )
    .bind(id)
    .fetch_all(db.read_pool())
    .await?;
    let (mut reserved, mut given_away) = (0, BTreeMap::new());
    for s in &sums {
        if col::<String>(s, "status")? == "reserved" {
            reserved += col::<i64>(s, "n")?;
        } else {
            *given_away.entry(col::<String>(s, "currency")?).or_insert(0) += col::<i64>(s, "off")?;
        }
    }
    let batches = sql::query(
        "SELECT batch, CAST(COUNT(*) AS BIGINT) AS codes, CAST(SUM(uses) AS BIGINT) AS used FROM promotion_codes \
         WHERE promotion_id = $1 AND batch IS NOT NULL GROUP BY batch ORDER BY batch",
    )
    .bind(id)
    .fetch_all(db.read_pool())
    .await?
    .iter()
    .map(|r| Ok(BatchView { batch: col(r, "batch")?, codes: col(r, "codes")?, used: col(r, "used")? }))
    .collect::<Result<Vec<_>>>()?;
    let (percent_off, amount_off) = match rules.benefit {
        Benefit::PercentOff(p) => (Some(p), None),
        Benefit::AmountOff(a) => (None, Some(a)),
    };
    Ok(PromotionView {
        id: col(&row, "id")?,
        name: col(&row, "name")?,
        code: col(&row, "code")?,
        status,
        percent_off,
        amount_off,
        skus: rules.skus,
        min_spend: rules.min_spend,
        starts_at: rules.starts_at.map(rfc3339),
        ends_at: rules.ends_at.map(rfc3339),
        max_uses: rules.max_uses,
        per_buyer: rules.per_buyer,
        first_order_only: rules.first_order_only,
        uses,
        reserved,
        uses_left: rules.max_uses.map(|m| (m - uses).max(0)),
        given_away,
        batches,
        created_at: rfc3339(col(&row, "created_at")?),
    })
}

/// Pauses, resumes or ends a promotion. Uses already held stay with their orders.
pub async fn set_status(db: &Db, id: &str, to: PromotionStatus, now: Millis) -> Result<PromotionView> {
    let lock = db.for_update();
    crate::write_tx!(db, |tx| {
        let from: String = sql::query_scalar(&format!("SELECT status FROM promotions WHERE id = $1{lock}"))
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
            .ok_or_else(|| Error::not_found("promotion"))?;
        let from = PromotionStatus::parse(&from).ok_or_else(|| Error::internal("unknown promotion status"))?;
        promotion::may_move(from, to)?;
        sql::query("UPDATE promotions SET status = $1, updated_at = $2 WHERE id = $3")
            .bind(to.as_str())
            .bind(now)
            .bind(id)
            .execute(&mut **tx)
            .await?;
        Ok(())
    })?;
    get(db, id).await
}

/// Rows a batch's codes go in per statement.
const CODES_PER_INSERT: usize = 500;
/// Rounds of drawing again for codes that collided with existing ones.
const DRAWS_MAX: usize = 8;

/// Generates `count` single-use codes (`prefix` and random characters) for promotion `id` as a
/// new batch; returns the batch's name and its codes.
pub async fn add_batch(
    db: &Db,
    id: &str,
    prefix: Option<&str>,
    count: i64,
    now: Millis,
) -> Result<(String, Vec<String>)> {
    let prefix = promotion::batch_prefix(prefix)?;
    let count = usize::try_from(promotion::batch_count(count)?).unwrap_or(0);
    let status: Option<String> = sql::query_scalar("SELECT status FROM promotions WHERE id = $1")
        .bind(id)
        .fetch_optional(db.read_pool())
        .await?;
    match status.as_deref().and_then(PromotionStatus::parse) {
        None => return Err(Error::not_found("promotion")),
        Some(PromotionStatus::Ended) => {
            return Err(Error::conflict("promotion_ended", "an ended promotion takes no new codes"));
        }
        Some(_) => {}
    }
    // The time, and random hex: two batches made in one millisecond stay two.
    let random = new_id();
    let batch = format!("b{now}-{}", random.get(random.len().saturating_sub(8)..).unwrap_or_default());
    let mut codes = Vec::with_capacity(count);
    for _ in 0..DRAWS_MAX {
        if codes.len() == count {
            break;
        }
        let drawn = draw(&prefix, count - codes.len());
        let lock = db.for_update();
        let added: Vec<String> = crate::write_tx!(db, |tx| {
            // Under the promotion's lock: one ended meanwhile takes no new codes.
            let status: Option<String> =
                sql::query_scalar(&format!("SELECT status FROM promotions WHERE id = $1{lock}"))
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?;
            if status.as_deref().and_then(PromotionStatus::parse) != Some(PromotionStatus::Active)
                && status.as_deref().and_then(PromotionStatus::parse) != Some(PromotionStatus::Paused)
            {
                return Err(Error::conflict("promotion_ended", "an ended promotion takes no new codes"));
            }
            let mut added = Vec::new();
            for chunk in drawn.chunks(CODES_PER_INSERT) {
                let mut text = String::from(
                    "INSERT INTO promotion_codes (code, promotion_id, batch, single_use, uses, created_at) VALUES ",
                );
                let mut values = Vec::with_capacity(chunk.len() * 4);
                for (i, code) in chunk.iter().enumerate() {
                    let n = i * 4;
                    if i > 0 {
                        text.push_str(", ");
                    }
                    text.push_str(&format!("(${}, ${}, ${}, 1, 0, ${})", n + 1, n + 2, n + 3, n + 4));
                    values.extend(args![code, id, &batch, now]);
                }
                text.push_str(" ON CONFLICT (code) DO NOTHING RETURNING code");
                let rows = sql::query(&text).bind_all(values).fetch_all(&mut **tx).await?;
                for r in &rows {
                    added.push(col::<String>(r, "code")?);
                }
            }
            Ok(added)
        })?;
        codes.extend(added);
    }
    if codes.len() < count {
        return Err(Error::internal("could not draw enough distinct codes"));
    }
    codes.sort();
    Ok((batch, codes))
}

fn draw(prefix: &str, count: usize) -> Vec<String> {
    use rand::RngCore;
    let mut rng = rand::rng();
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < count {
        let mut bytes = [0_u8; promotion::GENERATED_LEN];
        rng.fill_bytes(&mut bytes);
        seen.insert(promotion::generated_code(prefix, &bytes));
    }
    seen.into_iter().collect()
}

/// A promotion's batch codes (one batch, or all), in batch and code order.
pub async fn batch_codes(db: &Db, id: &str, batch: Option<&str>) -> Result<Vec<CodeRow>> {
    let exists: Option<String> =
        sql::query_scalar("SELECT id FROM promotions WHERE id = $1").bind(id).fetch_optional(db.read_pool()).await?;
    if exists.is_none() {
        return Err(Error::not_found("promotion"));
    }
    let rows = sql::query(
        "SELECT code, batch, uses FROM promotion_codes WHERE promotion_id = $1 AND batch IS NOT NULL \
         AND ($2 IS NULL OR batch = $2) ORDER BY batch, code",
    )
    .bind(id)
    .bind(batch)
    .fetch_all(db.read_pool())
    .await?;
    rows.iter()
        .map(|r| Ok(CodeRow { code: col(r, "code")?, batch: col(r, "batch")?, used: col::<i64>(r, "uses")? > 0 }))
        .collect()
}

/// A promotion's uses, newest first: at most `limit`, before `before` (ms) when given.
pub async fn uses(db: &Db, id: &str, limit: i64, before: Option<Millis>) -> Result<Vec<UseView>> {
    let rows = sql::query(
        "SELECT order_no, code, status, discount_minor, currency, created_at FROM promotion_uses \
         WHERE promotion_id = $1 AND created_at < $2 ORDER BY created_at DESC, order_no DESC LIMIT $3",
    )
    .bind(id)
    .bind(before.unwrap_or(i64::MAX))
    .bind(limit)
    .fetch_all(db.read_pool())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(UseView {
                order_no: col(r, "order_no")?,
                code: col(r, "code")?,
                status: col(r, "status")?,
                discount_minor: col(r, "discount_minor")?,
                currency: col(r, "currency")?,
                created_at: rfc3339(col(r, "created_at")?),
            })
        })
        .collect()
}

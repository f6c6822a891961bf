//! An order's use of a promotion: reserved in the confirm's own batch by conditional updates of
//! the promotion's uses (and the code's and the buyer's, where they are limited) — no row changed
//! is the limit reached. The use follows its order as the open-orders count does, whichever
//! binary moves the order: kept when it is paid, given back when it expires or is cancelled, by
//! the database's trigger on the order's status (migration 21). Here besides: taken again for a
//! late payment, and given back by a full refund when the shop says so.
//!
//! Rows are locked in one order by every command: stock rows, the buyer's session, then the
//! promotion, its code and the buyer's count (confirm's batch in that order; an order leaving
//! pending_payment locks its stock rows, then its session and promotion through the triggers,
//! named so that the session's fires first; a refund or a late payment locks no session).

use crate::args;
use crate::clock::Millis;
use crate::domain::promotion::{self, Discount, Offer, PromotionStatus, UseStatus};
use crate::error::{Error, Result};
use crate::store::batch::{Batch, Named};
use crate::store::{Tx, col, sql};

/// The promotion and code of code `$1`, as confirm reads them.
pub const OFFER_SQL: &str = "SELECT p.id, p.percent_off, p.amounts_off, p.skus, p.min_spend, p.starts_at, p.ends_at, p.max_uses, \
     p.per_buyer, p.first_order_only, p.status, p.uses, c.code, c.single_use, c.uses AS code_uses \
     FROM promotion_codes c JOIN promotions p ON p.id = c.promotion_id WHERE c.code = $1";

/// The offer of [`OFFER_SQL`]'s row.
pub fn offer_of(row: &sql::Row) -> Result<Offer> {
    let (status, rules) = crate::store::promotions::rules_of(row)?;
    Ok(Offer {
        promotion_id: col(row, "id")?,
        code: col(row, "code")?,
        status,
        rules,
        single_use: col::<i64>(row, "single_use")? == 1,
        uses: col(row, "uses")?,
        code_uses: col(row, "code_uses")?,
    })
}

/// Reads the offer of `code` (already normalised), or refuses it as unknown.
pub async fn read_offer(tx: &mut Tx<'_>, code: &str) -> Result<Offer> {
    let row = sql::query(OFFER_SQL).bind(code).fetch_optional(&mut **tx).await?;
    row.as_ref().map(offer_of).transpose()?.ok_or_else(|| promotion::unknown(code).into())
}

/// The offer of `code` (already normalised) as it stands, outside any transaction.
pub async fn find_offer(db: &crate::store::Db, code: &str) -> Result<Option<Offer>> {
    let row = sql::query(OFFER_SQL).bind(code).fetch_optional(db.read_pool()).await?;
    row.as_ref().map(offer_of).transpose()
}

/// Whether the buyer (session `$1`, or its contact) has placed an order before that did not
/// simply lapse: what a first-order promotion asks.
pub async fn has_earlier_orders(
    tx: &mut Tx<'_>,
    session_id: &str,
    email: Option<&str>,
    phone: Option<&str>,
) -> Result<bool> {
    let mut found = sql::query_scalar::<i64>(
        "SELECT 1 FROM orders WHERE session_id = $1 AND status <> 'expired' AND status <> 'cancelled' LIMIT 1",
    )
    .bind(session_id)
    .fetch_optional(&mut **tx)
    .await?
    .is_some();
    for (column, value) in [("contact_email", email), ("contact_phone", phone)] {
        if let (false, Some(value)) = (found, value) {
            found = sql::query_scalar::<i64>(&format!(
                "SELECT 1 FROM orders WHERE {column} = $1 AND status <> 'expired' AND status <> 'cancelled' LIMIT 1"
            ))
            .bind(value)
            .fetch_optional(&mut **tx)
            .await?
            .is_some();
        }
    }
    Ok(found)
}

/// A use to reserve for an order: the offer, what it takes off, and who the buyer is.
#[derive(Debug, Clone)]
pub struct Reservation<'a> {
    pub offer: &'a Offer,
    pub discount: &'a Discount,
    pub buyer: &'a str,
    pub currency: &'a str,
}

/// Which of the reservation's conditional updates changed no row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Short {
    Promotion,
    Code,
    Buyer,
}

/// Adds the reservation's conditional updates to the confirm's batch, each named by `name` so
/// that the confirm learns which one fell short.
pub fn add_reserve<T: Copy>(
    batch: &mut Batch,
    steps: &mut Named<T>,
    r: &Reservation<'_>,
    now: Millis,
    name: impl Fn(Short) -> T,
) {
    steps.add(
        batch,
        "UPDATE promotions SET uses = uses + 1, updated_at = $2 WHERE id = $1 AND status = 'active' \
         AND (max_uses IS NULL OR uses < max_uses)",
        args![&r.offer.promotion_id, now],
        1,
        name(Short::Promotion),
    );
    if r.offer.single_use {
        steps.add(
            batch,
            "UPDATE promotion_codes SET uses = uses + 1 WHERE code = $1 AND uses < 1",
            args![&r.offer.code],
            1,
            name(Short::Code),
        );
    }
    if let Some(per_buyer) = r.offer.rules.per_buyer {
        steps.add(
            batch,
            "INSERT INTO promotion_buyers (promotion_id, buyer, uses) VALUES ($1, $2, 1) ON CONFLICT (promotion_id, buyer) \
             DO UPDATE SET uses = promotion_buyers.uses + 1 WHERE promotion_buyers.uses < $3",
            args![&r.offer.promotion_id, r.buyer, per_buyer],
            1,
            name(Short::Buyer),
        );
    }
}

/// Adds the use's own row (after the order's insert).
pub fn add_use_row(batch: &mut Batch, r: &Reservation<'_>, order_no: &str, now: Millis) {
    batch.expect(
        "INSERT INTO promotion_uses (order_no, promotion_id, code, buyer, buyer_counted, code_counted, status, discount_minor, \
         currency, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, 'reserved', $7, $8, $9, $9)",
        args![
            order_no,
            &r.offer.promotion_id,
            &r.offer.code,
            r.buyer,
            i64::from(r.offer.rules.per_buyer.is_some()),
            i64::from(r.offer.single_use),
            r.discount.total_minor,
            r.currency,
            now
        ],
        1,
        "promotion use insert",
    );
}

/// Why a reservation fell short, from what its rows show now.
pub async fn refusal(tx: &mut Tx<'_>, offer: &Offer, short: Short) -> Result<Error> {
    Ok(match short {
        Short::Promotion => {
            let status: String = sql::query_scalar("SELECT status FROM promotions WHERE id = $1")
                .bind(&offer.promotion_id)
                .fetch_one(&mut **tx)
                .await?;
            match PromotionStatus::parse(&status) {
                Some(PromotionStatus::Active) | None => promotion::used_up(&offer.code).into(),
                Some(status) => {
                    let now_offer = Offer { status, ..offer.clone() };
                    match promotion::apply(&now_offer, &[], "", 0, false) {
                        Err(refused) => refused.into(),
                        Ok(_) => promotion::used_up(&offer.code).into(),
                    }
                }
            }
        }
        Short::Code => promotion::used_up(&offer.code).into(),
        Short::Buyer => promotion::limit_per_buyer(&offer.code, offer.rules.per_buyer.unwrap_or(0)).into(),
    })
}

/// An order's use as its rows count it.
struct Held {
    promotion_id: String,
    code: String,
    buyer: String,
    buyer_counted: bool,
    code_counted: bool,
}

async fn read_use(tx: &mut Tx<'_>, order_no: &str, status: UseStatus) -> Result<Option<Held>> {
    let row = sql::query(
        "SELECT promotion_id, code, buyer, buyer_counted, code_counted FROM promotion_uses WHERE order_no = $1 AND status = $2",
    )
    .bind(order_no)
    .bind(status.as_str())
    .fetch_optional(&mut **tx)
    .await?;
    row.map(|r| {
        Ok(Held {
            promotion_id: col(&r, "promotion_id")?,
            code: col(&r, "code")?,
            buyer: col(&r, "buyer")?,
            buyer_counted: col::<i64>(&r, "buyer_counted")? == 1,
            code_counted: col::<i64>(&r, "code_counted")? == 1,
        })
    })
    .transpose()
}

/// Gives a paid order's kept use back (a full refund that returns it): the counts it took go
/// down, the use is released. Nothing when the order keeps no use.
pub async fn give_back(tx: &mut Tx<'_>, order_no: &str, now: Millis) -> Result<bool> {
    let from = UseStatus::Consumed;
    let Some(held) = read_use(tx, order_no, from).await? else {
        return Ok(false);
    };
    let mut batch = Batch::new();
    batch.expect(
        "UPDATE promotions SET uses = uses - 1, updated_at = $2 WHERE id = $1 AND uses >= 1",
        args![&held.promotion_id, now],
        1,
        format!("the uses of {} do not count the use of {order_no}", held.promotion_id),
    );
    if held.code_counted {
        batch.expect(
            "UPDATE promotion_codes SET uses = uses - 1 WHERE code = $1 AND uses >= 1",
            args![&held.code],
            1,
            format!("code {} does not count the use of {order_no}", held.code),
        );
    }
    if held.buyer_counted {
        batch.expect(
            "UPDATE promotion_buyers SET uses = uses - 1 WHERE promotion_id = $1 AND buyer = $2 AND uses >= 1",
            args![&held.promotion_id, &held.buyer],
            1,
            format!("the buyer's uses do not count the use of {order_no}"),
        );
    }
    batch.expect(
        "UPDATE promotion_uses SET status = 'released', updated_at = $1 WHERE order_no = $2 AND status = $3",
        args![now, order_no, from.as_str()],
        1,
        "promotion use release",
    );
    batch.run_checked(tx).await?;
    Ok(true)
}

/// Takes a released use again for a late payment, within the promotion's limits as at confirm (in
/// all, per code, per buyer; a promotion paused or ended since still honours a payment for an
/// order placed while it ran). Returns whether it could (or there was none to take); when it could
/// not, nothing changed.
pub async fn retake(tx: &mut Tx<'_>, order_no: &str, now: Millis) -> Result<bool> {
    let Some(held) = read_use(tx, order_no, UseStatus::Released).await? else {
        return Ok(true);
    };
    // Each count in turn, as at confirm; one that is full puts back what the others took.
    let mut takes: Vec<(&str, &str, Vec<sql::Arg>)> = vec![(
        "UPDATE promotions SET uses = uses + 1, updated_at = $2 WHERE id = $1 AND (max_uses IS NULL OR uses < max_uses)",
        "UPDATE promotions SET uses = uses - 1, updated_at = $2 WHERE id = $1",
        args![&held.promotion_id, now],
    )];
    if held.code_counted {
        takes.push((
            "UPDATE promotion_codes SET uses = uses + 1 WHERE code = $1 AND uses < 1",
            "UPDATE promotion_codes SET uses = uses - 1 WHERE code = $1",
            args![&held.code],
        ));
    }
    if held.buyer_counted {
        takes.push((
            "UPDATE promotion_buyers SET uses = uses + 1 WHERE promotion_id = $1 AND buyer = $2 \
             AND uses < (SELECT per_buyer FROM promotions WHERE id = $1)",
            "UPDATE promotion_buyers SET uses = uses - 1 WHERE promotion_id = $1 AND buyer = $2",
            args![&held.promotion_id, &held.buyer],
        ));
    }
    for (i, (take, _, values)) in takes.iter().enumerate() {
        let done = sql::query(take).bind_all(values.clone()).execute(&mut **tx).await?;
        if done.rows_affected() != 1 {
            for (_, put_back, values) in takes.iter().take(i) {
                sql::query(put_back).bind_all(values.clone()).execute(&mut **tx).await?;
            }
            return Ok(false);
        }
    }
    sql::query(
        "UPDATE promotion_uses SET status = 'consumed', updated_at = $1 WHERE order_no = $2 AND status = 'released'",
    )
    .bind(now)
    .bind(order_no)
    .execute(&mut **tx)
    .await?;
    Ok(true)
}

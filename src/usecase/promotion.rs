//! Promotions: the shop's campaigns (created, paused, resumed, ended; batches of single-use
//! codes), and the buyer's code on a basket, priced against its lines before confirm reserves it.

use super::Context;
use crate::domain::checkout::PricedLine;
use crate::domain::ids::{BasketId, SessionId};
use crate::domain::promotion::{self, PromotionStatus};
use crate::domain::{Currency, Money};
use crate::error::{Error, Result};
use crate::store::catalog::{self, BasketView, PromotionRefusal};
use crate::store::promotion_uses;
use crate::store::promotions::{self, NewPromotion, PromotionView};

/// Most promotions one list shows.
pub const LIST_MAX: i64 = 500;

pub async fn create(cx: &Context, new: &NewPromotion) -> Result<PromotionView> {
    promotions::create(&cx.db, new, cx.now_ms()).await
}

pub async fn set_status(cx: &Context, id: &str, to: PromotionStatus) -> Result<PromotionView> {
    promotions::set_status(&cx.db, id, to, cx.now_ms()).await
}

pub async fn add_batch(cx: &Context, id: &str, prefix: Option<&str>, count: i64) -> Result<(String, Vec<String>)> {
    promotions::add_batch(&cx.db, id, prefix, count, cx.now_ms()).await
}

/// Refusals that keep a code off a basket: it can never apply as things stand. Others (a minimum
/// not met, no line it applies to) may change with the lines, so the code stays and the basket
/// says why it does not apply yet.
const KEEPS_OFF: &[&str] = &["promotion_unknown", "promotion_expired", "promotion_used_up"];

/// Puts a code on the buyer's open basket (refused when it is no code, has ended or is used up)
/// and answers the basket priced with it; `None` takes the code off.
pub async fn set_basket_code(
    cx: &Context,
    session_id: &SessionId,
    basket_id: &BasketId,
    typed: Option<&str>,
) -> Result<BasketView> {
    let code = typed.map(super::checkout::promotion_code).transpose()?;
    if let Some(code) = &code {
        let Some(offer) = promotion_uses::find_offer(&cx.db, code).await? else {
            return Err(promotion::unknown(code).into());
        };
        let basket = catalog::get_basket(&cx.db, session_id, basket_id).await?;
        if let Err(refused) = apply(&offer, &basket, cx.now_ms())
            && KEEPS_OFF.contains(&refused.code)
        {
            return Err(refused.into());
        }
    }
    catalog::set_basket_code(&cx.db, session_id, basket_id, code.as_deref(), cx.now_ms()).await?;
    basket(cx, session_id, basket_id).await
}

/// The buyer's basket, with its code priced against its lines.
pub async fn basket(cx: &Context, session_id: &SessionId, basket_id: &BasketId) -> Result<BasketView> {
    let view = catalog::get_basket(&cx.db, session_id, basket_id).await?;
    priced(cx, view).await
}

/// `view` with its code (if any) priced against its lines as they are now.
pub async fn priced(cx: &Context, mut view: BasketView) -> Result<BasketView> {
    let Some(code) = view.promotion.as_ref().map(|p| p.code.clone()) else {
        return Ok(view);
    };
    let answer = match promotion_uses::find_offer(&cx.db, &code).await? {
        None => Err(promotion::unknown(&code)),
        Some(offer) => apply(&offer, &view, cx.now_ms()),
    };
    let total = view.total_minor;
    if let Some(p) = view.promotion.as_mut() {
        match answer {
            Ok(discount) => {
                p.discount_minor = discount;
                p.total_minor = total - discount;
            }
            Err(refused) => {
                p.refusal = Some(PromotionRefusal {
                    code: refused.code.to_string(),
                    message: refused.message,
                    details: refused.details,
                });
            }
        }
    }
    Ok(view)
}

/// What `offer` takes off the basket's lines at their quoted prices (a first-order promotion is
/// checked against the buyer's orders at confirm).
fn apply(
    offer: &promotion::Offer,
    view: &BasketView,
    now: i64,
) -> std::result::Result<i64, crate::domain::refusal::Refusal> {
    let Some(currency) = view.currency.as_deref() else {
        return Err(promotion::nothing_to_apply(&offer.code));
    };
    let currency = Currency::parse(currency)?;
    let lines = view
        .lines
        .iter()
        .map(|l| {
            let unit = Money::new(l.unit_price_minor, currency)?;
            Ok(PricedLine {
                sku: l.sku.clone(),
                name: l.name.clone(),
                kind: String::new(),
                quantity: l.quantity,
                unit,
                line_total: unit.checked_mul(l.quantity)?,
                discount_minor: 0,
            })
        })
        .collect::<std::result::Result<Vec<_>, crate::domain::refusal::Refusal>>()?;
    promotion::apply(offer, &lines, currency.code(), now, false).map(|d| d.total_minor)
}

/// An admin's view of one promotion.
pub async fn get(cx: &Context, id: &str) -> Result<PromotionView> {
    promotions::get(&cx.db, id).await
}

/// Refused unless `text` names a promotion status an operator may set.
pub fn status_named(text: &str) -> Result<PromotionStatus> {
    match text {
        "pause" => Ok(PromotionStatus::Paused),
        "resume" => Ok(PromotionStatus::Active),
        "end" => Ok(PromotionStatus::Ended),
        _ => Err(Error::not_found("action")),
    }
}

//! The promotion in the model: one code, half off, two uses in all and one per buyer. Its uses
//! follow the orders (reserved at confirm, kept with the payment, given back by an expiry, a
//! cancel, or a full refund that asks for it), and the operator pauses, resumes and ends it.

use kassa::clock::Clock as _;
use kassa::domain::ids::RefundNo;
use kassa::domain::promotion::{Benefit, PromotionStatus, Rules};
use kassa::domain::refund::RefundPolicy;
use kassa::store::promotions::{self, NewPromotion};
use kassa::store::{Db, refunds};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::{Model, Real, fail};

pub(super) const CODE: &str = "HALF";
const PERCENT_OFF: i64 = 50;
const MAX_USES: i64 = 2;
const PER_BUYER: i64 = 1;

/// Where an order's use is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Use {
    Reserved,
    Consumed,
    Released,
}

/// An operator's move.
#[derive(Debug, Clone, Copy)]
pub(super) enum To {
    Pause,
    Resume,
    End,
}

pub(super) fn to() -> impl Strategy<Value = To> {
    prop_oneof![3 => Just(To::Pause), 3 => Just(To::Resume), 1 => Just(To::End)]
}

/// The promotion as the model has it.
#[derive(Debug, Clone)]
pub(super) struct MPromotion {
    pub(super) id: String,
    pub(super) status: PromotionStatus,
    /// Uses held or kept, in all and per buyer.
    pub(super) uses: i64,
    pub(super) by_buyer: [i64; 3],
    /// Refund numbers that asked to give the use back.
    pub(super) returning: std::collections::BTreeSet<String>,
}

impl Default for MPromotion {
    fn default() -> Self {
        MPromotion {
            id: String::new(),
            status: PromotionStatus::Active,
            uses: 0,
            by_buyer: [0; 3],
            returning: Default::default(),
        }
    }
}

impl MPromotion {
    pub(super) fn take(&mut self, buyer: usize) {
        self.uses += 1;
        self.by_buyer[buyer] += 1;
    }

    /// Gives an order's use back when it is `from`.
    pub(super) fn release(&mut self, used: &mut Option<(i64, Use)>, buyer: usize, from: Use) {
        if let Some((_, state)) = used
            && *state == from
        {
            *state = Use::Released;
            self.uses -= 1;
            self.by_buyer[buyer] -= 1;
        }
    }
}

pub(super) async fn create(db: &Db, now: i64) -> MPromotion {
    let new = NewPromotion {
        name: "Half".into(),
        code: Some(CODE.into()),
        rules: Rules {
            benefit: Benefit::PercentOff(PERCENT_OFF),
            skus: Vec::new(),
            min_spend: Default::default(),
            starts_at: None,
            ends_at: None,
            max_uses: Some(MAX_USES),
            per_buyer: Some(PER_BUYER),
            first_order_only: false,
        },
    };
    let view = promotions::create(db, &new, now).await.unwrap();
    MPromotion { id: view.id, ..MPromotion::default() }
}

/// What the code takes off lines of `total`.
pub(super) fn discount(total: i64) -> i64 {
    total * PERCENT_OFF / 100
}

/// The refusal a confirm by `buyer` of lines of `total` gets (`in_stock`: whether the stock is
/// there), in the order confirm decides: the promotion's rules, the stock, then the buyer's limit.
pub(super) fn refusal(model: &Model, code: bool, buyer: usize, total: i64, in_stock: bool) -> Option<&'static str> {
    if !code {
        return None;
    }
    let p = &model.promotion;
    match p.status {
        PromotionStatus::Ended => return Some("promotion_expired"),
        PromotionStatus::Paused => return Some("promotion_not_applicable"),
        PromotionStatus::Active => {}
    }
    if p.uses >= MAX_USES {
        return Some("promotion_used_up");
    }
    if discount(total) == 0 {
        return Some("promotion_not_applicable");
    }
    if !in_stock {
        return Some("out_of_stock");
    }
    (p.by_buyer[buyer] >= PER_BUYER).then_some("promotion_limit_per_buyer")
}

pub(super) async fn operate(real: &Real, model: &mut Model, to: To) -> Result<(), TestCaseError> {
    let now = real.clock.now_ms();
    let target = match to {
        To::Pause => PromotionStatus::Paused,
        To::Resume => PromotionStatus::Active,
        To::End => PromotionStatus::Ended,
    };
    let allowed = kassa::domain::promotion::may_move(model.promotion.status, target).is_ok();
    let result = promotions::set_status(&real.db, &model.promotion.id, target, now).await;
    match (allowed, result) {
        (true, Ok(view)) if view.status == target => model.promotion.status = target,
        (false, Err(e)) if e.code() == "invalid_transition" => {}
        (_, other) => return Err(fail(format!("promotion to {target:?}: {other:?}"))),
    }
    Ok(())
}

/// Refunds everything order `i` still has captured, succeeding at once; with `give_back`, the
/// order's kept use goes back to the promotion once it is refunded.
pub(super) async fn refund_rest(
    real: &Real,
    model: &mut Model,
    i: usize,
    give_back: bool,
) -> Result<(), TestCaseError> {
    let now = real.clock.now_ms();
    let o = model.orders[i].clone();
    let refundable = matches!(o.status, "paid" | "delivered" | "paid_after_expiry");
    let committed: i64 = o.refunds.iter().filter(|r| r.2).map(|r| r.1).sum();
    let amount = o.captured - committed;
    if !refundable || amount <= 0 {
        return Ok(());
    }
    model.refund_seq += 1;
    let refund_no = RefundNo::parse(&format!("R{}", model.refund_seq)).unwrap();
    let ask = refunds::RefundAsk {
        amount_minor: Some(amount),
        reason: "model".into(),
        return_promotion: give_back,
        ..Default::default()
    };
    refunds::request_asked(&real.db, RefundPolicy::default(), &o.order_no, &refund_no, &ask, now)
        .await
        .map_err(|e| fail(format!("refund of the rest: {e}")))?;
    refunds::settle(&real.db, &refund_no, true, "", None, now).await.map_err(|e| fail(e.to_string()))?;
    if give_back {
        model.promotion.returning.insert(refund_no.as_str().to_string());
    }
    let o = &mut model.orders[i];
    o.refunds.push((refund_no, amount, true));
    o.refunded += amount;
    o.status = "refunded";
    if give_back {
        let buyer = o.buyer;
        model.promotion.release(&mut o.promotion, buyer, Use::Consumed);
    }
    Ok(())
}

/// The promotion's counts as the model has them.
pub(super) async fn compare(real: &Real, model: &Model) -> Result<(), TestCaseError> {
    let view = promotions::get(&real.db, &model.promotion.id).await.map_err(|e| fail(e.to_string()))?;
    let reserved = model.orders.iter().filter(|o| matches!(o.promotion, Some((_, Use::Reserved)))).count();
    let expected = (model.promotion.status, model.promotion.uses, i64::try_from(reserved).unwrap_or(0));
    if (view.status, view.uses, view.reserved) != expected {
        return Err(fail(format!("promotion is {:?}, model {expected:?}", (view.status, view.uses, view.reserved))));
    }
    Ok(())
}

//! Promotions: a code that takes a percentage or a fixed amount off an order or off named SKUs,
//! within a minimum spend, a time window, a number of uses in all and per buyer. Whether a code
//! applies and what it takes off each line is decided here; the store reserves the use in the
//! confirm's own transaction (a conditional update of the uses, as stock is held), so a code is
//! never used more often than its limit.

use std::collections::BTreeMap;

use serde_json::json;

use super::checkout::PricedLine;
use super::refusal::Refusal;

/// Shortest and longest code, in characters.
pub const CODE_LEN_MIN: usize = 3;
pub const CODE_LEN_MAX: usize = 32;
/// Longest promotion name, in characters.
pub const NAME_LEN_MAX: usize = 120;
/// Most SKUs a promotion may name.
pub const SKUS_MAX: usize = 100;
/// Most codes one batch generates.
pub const BATCH_CODES_MAX: i64 = 10_000;
/// Characters of a generated code after its prefix: 12 of [`GENERATED_ALPHABET`] are 60 bits.
pub const GENERATED_LEN: usize = 12;
/// Letters and digits with no pair misread as each other (no O, 0, I, 1): 32 of them, 5 bits each.
pub const GENERATED_ALPHABET: &[u8; 32] = b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789";
/// Longest prefix of generated codes, in characters.
pub const PREFIX_LEN_MAX: usize = 12;

/// A promotion's life: taking uses, paused (no new uses, may resume), or ended for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PromotionStatus {
    Active,
    Paused,
    Ended,
}

impl PromotionStatus {
    pub const ALL: &'static [PromotionStatus] =
        &[PromotionStatus::Active, PromotionStatus::Paused, PromotionStatus::Ended];

    pub fn as_str(self) -> &'static str {
        match self {
            PromotionStatus::Active => "active",
            PromotionStatus::Paused => "paused",
            PromotionStatus::Ended => "ended",
        }
    }

    pub fn parse(text: &str) -> Option<PromotionStatus> {
        Self::ALL.iter().copied().find(|s| s.as_str() == text)
    }
}

/// An operator's move of a promotion: pause and resume while it runs; end is for good.
pub fn may_move(from: PromotionStatus, to: PromotionStatus) -> Result<(), Refusal> {
    use PromotionStatus::*;
    match (from, to) {
        (Active, Paused) | (Paused, Active) | (Active | Paused, Ended) => Ok(()),
        _ => Err(Refusal::conflict(
            "invalid_transition",
            format!("a promotion that is {} cannot become {}", from.as_str(), to.as_str()),
        )),
    }
}

/// What one use of a promotion is at: held by a pending order, kept by a paid one, or given back
/// (the order expired or was cancelled, or a refund returned it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UseStatus {
    Reserved,
    Consumed,
    Released,
}

impl UseStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            UseStatus::Reserved => "reserved",
            UseStatus::Consumed => "consumed",
            UseStatus::Released => "released",
        }
    }
}

/// What a promotion takes off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Benefit {
    /// A percentage (1 to 100) of what the promotion applies to, rounded down to the minor unit.
    PercentOff(i64),
    /// A fixed amount per currency (minor units), at most what the promotion applies to.
    AmountOff(BTreeMap<String, i64>),
}

/// A promotion's rules, as the shop set them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub benefit: Benefit,
    /// The SKUs it applies to; empty: the whole order.
    pub skus: Vec<String>,
    /// The least the order's lines must add up to, per currency (minor units); a currency the map
    /// does not name may not use the promotion. Empty: no minimum.
    pub min_spend: BTreeMap<String, i64>,
    /// When it starts and ends (ms since the Unix epoch); `None`: open.
    pub starts_at: Option<i64>,
    pub ends_at: Option<i64>,
    /// Uses in all and per buyer; `None`: no limit.
    pub max_uses: Option<i64>,
    pub per_buyer: Option<i64>,
    /// Only for a buyer who has placed no order before.
    pub first_order_only: bool,
}

/// Largest number of uses a limit may name.
pub const USES_MAX: i64 = 100_000_000;

impl Rules {
    /// Refused (`invalid_promotion`) unless every rule is within its range.
    pub fn check(&self) -> Result<(), Refusal> {
        let bad = |message: String| Err(Refusal::unprocessable("invalid_promotion", message));
        match &self.benefit {
            Benefit::PercentOff(p) if !(1..=100).contains(p) => {
                return bad("percent_off must be between 1 and 100".into());
            }
            Benefit::AmountOff(amounts) if amounts.is_empty() => {
                return bad("amount_off must name at least one currency".into());
            }
            Benefit::AmountOff(amounts) => check_amounts("amount_off", amounts, 1)?,
            Benefit::PercentOff(_) => {}
        }
        check_amounts("min_spend", &self.min_spend, 0)?;
        if self.skus.len() > SKUS_MAX {
            return bad(format!("at most {SKUS_MAX} skus"));
        }
        if let (Some(start), Some(end)) = (self.starts_at, self.ends_at)
            && end <= start
        {
            return bad("ends_at must be after starts_at".into());
        }
        for (name, limit) in [("max_uses", self.max_uses), ("per_buyer", self.per_buyer)] {
            if limit.is_some_and(|n| !(1..=USES_MAX).contains(&n)) {
                return bad(format!("{name} must be between 1 and {USES_MAX}"));
            }
        }
        Ok(())
    }
}

fn check_amounts(field: &str, amounts: &BTreeMap<String, i64>, least: i64) -> Result<(), Refusal> {
    for (currency, amount) in amounts {
        super::Currency::parse(currency)?;
        if *amount < least {
            return Err(Refusal::unprocessable(
                "invalid_promotion",
                format!("{field} of {currency} must be at least {least}"),
            ));
        }
    }
    Ok(())
}

/// A code as kept: trimmed and in upper case, [`CODE_LEN_MIN`] to [`CODE_LEN_MAX`] of A–Z, 0–9,
/// `-` and `_`. A buyer's code that is not one is simply unknown.
pub fn normalize_code(text: &str) -> Option<String> {
    let code = text.trim().to_ascii_uppercase();
    let fits = (CODE_LEN_MIN..=CODE_LEN_MAX).contains(&code.len())
        && code.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    fits.then_some(code)
}

/// A code the shop chose, checked (`invalid_code`).
pub fn shop_code(text: &str) -> Result<String, Refusal> {
    normalize_code(text).ok_or_else(|| {
        Refusal::unprocessable(
            "invalid_code",
            format!("a code is {CODE_LEN_MIN} to {CODE_LEN_MAX} letters, digits, '-' or '_'"),
        )
    })
}

/// A batch's prefix, checked: up to [`PREFIX_LEN_MAX`] of what a code may hold (empty: none).
pub fn batch_prefix(text: Option<&str>) -> Result<String, Refusal> {
    let prefix = text.unwrap_or("").trim().to_ascii_uppercase();
    let fits = prefix.len() <= PREFIX_LEN_MAX
        && prefix.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if fits {
        Ok(prefix)
    } else {
        Err(Refusal::unprocessable(
            "invalid_code",
            format!("a prefix is at most {PREFIX_LEN_MAX} letters, digits, '-' or '_'"),
        ))
    }
}

/// How many codes a batch makes, checked.
pub fn batch_count(count: i64) -> Result<i64, Refusal> {
    if (1..=BATCH_CODES_MAX).contains(&count) {
        Ok(count)
    } else {
        Err(Refusal::unprocessable("invalid_promotion", format!("count must be between 1 and {BATCH_CODES_MAX}")))
    }
}

/// A generated single-use code: the prefix, then [`GENERATED_LEN`] characters of
/// [`GENERATED_ALPHABET`] from `random` (5 bits of each byte).
pub fn generated_code(prefix: &str, random: &[u8; GENERATED_LEN]) -> String {
    let mut code = String::with_capacity(prefix.len() + GENERATED_LEN);
    code.push_str(prefix);
    code.extend(random.iter().map(|b| char::from(GENERATED_ALPHABET[usize::from(b & 31)])));
    code
}

/// Who a per-buyer limit counts: the checkout's contact (its address, else its number) when it
/// has one, so another session with the same contact is the same buyer; else the buyer session.
pub fn buyer_key(email: Option<&str>, phone: Option<&str>, session_id: &str) -> String {
    match (email, phone) {
        (Some(email), _) => format!("email:{email}"),
        (None, Some(phone)) => format!("phone:{phone}"),
        (None, None) => format!("session:{session_id}"),
    }
}

/// A promotion as confirm reads it: its rules and where it stands.
#[derive(Debug, Clone)]
pub struct Offer {
    pub promotion_id: String,
    pub code: String,
    pub status: PromotionStatus,
    pub rules: Rules,
    /// A code of a batch: one use in all.
    pub single_use: bool,
    /// Uses already taken (reserved or kept), of the promotion and of this code.
    pub uses: i64,
    pub code_uses: i64,
}

/// The discount a promotion gives an order: in all, and each line's share (in line order; 0 for
/// a line it does not apply to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discount {
    pub total_minor: i64,
    pub per_line: Vec<i64>,
}

/// Whether `offer` applies to an order of `lines` (all in `currency`) at `now`, and what it takes
/// off; `earlier_orders`: whether the buyer has placed an order before (read only for a
/// first-order promotion). Whether uses are left is decided by the reservation itself
/// ([`used_up`], [`limit_per_buyer`]); what is read here only answers sooner.
pub fn apply(
    offer: &Offer,
    lines: &[PricedLine],
    currency: &str,
    now: i64,
    earlier_orders: bool,
) -> Result<Discount, Refusal> {
    let rules = &offer.rules;
    let ended = offer.status == PromotionStatus::Ended || rules.ends_at.is_some_and(|end| now >= end);
    if ended {
        return Err(Refusal::unprocessable("promotion_expired", format!("the code {} has ended", offer.code)));
    }
    if offer.status == PromotionStatus::Paused {
        return Err(not_applicable(offer, "paused", "is paused"));
    }
    if rules.starts_at.is_some_and(|start| now < start) {
        return Err(not_applicable(offer, "not_started", "has not started yet"));
    }
    if rules.max_uses.is_some_and(|max| offer.uses >= max) || (offer.single_use && offer.code_uses >= 1) {
        return Err(used_up(&offer.code));
    }
    if rules.first_order_only && earlier_orders {
        return Err(not_applicable(offer, "first_order_only", "is for a first order only"));
    }
    let subtotal: i64 = lines.iter().map(|l| l.line_total.amount_minor()).fold(0, i64::saturating_add);
    if !rules.min_spend.is_empty() {
        let Some(min) = rules.min_spend.get(currency) else {
            return Err(not_applicable(offer, "currency", &format!("does not apply to orders in {currency}")));
        };
        if subtotal < *min {
            return Err(Refusal::unprocessable(
                "promotion_minimum_not_met",
                format!(
                    "the code {} needs an order of at least {}",
                    offer.code,
                    super::money::format_minor(*min, currency)
                ),
            )
            .with_details(json!({"min_spend_minor": min, "currency": currency, "subtotal_minor": subtotal})));
        }
    }
    let eligible: Vec<bool> = lines.iter().map(|l| rules.skus.is_empty() || rules.skus.contains(&l.sku)).collect();
    let base: i64 = lines.iter().zip(&eligible).filter(|(_, e)| **e).map(|(l, _)| l.line_total.amount_minor()).sum();
    if base == 0 {
        return Err(not_applicable(offer, "skus", "applies to nothing in this order"));
    }
    let total = match &rules.benefit {
        Benefit::PercentOff(p) => i64::try_from(i128::from(base) * i128::from(*p) / 100).unwrap_or(base),
        Benefit::AmountOff(amounts) => match amounts.get(currency) {
            Some(amount) => (*amount).min(base),
            None => return Err(not_applicable(offer, "currency", &format!("does not apply to orders in {currency}"))),
        },
    };
    if total == 0 {
        return Err(not_applicable(offer, "nothing_off", "takes nothing off this order"));
    }
    let weights: Vec<i64> =
        lines.iter().zip(&eligible).map(|(l, e)| if *e { l.line_total.amount_minor() } else { 0 }).collect();
    Ok(Discount { total_minor: total, per_line: allocate(total, &weights) })
}

/// Shares `amount` among lines in proportion to `weights` (each share at most its weight when
/// `amount` is at most their sum): each line its share rounded down, then the minor units left one
/// each to the lines with the largest remainders, the earlier line first among equals.
pub fn allocate(amount: i64, weights: &[i64]) -> Vec<i64> {
    let sum: i128 = weights.iter().map(|w| i128::from(*w)).sum();
    if sum <= 0 {
        return vec![0; weights.len()];
    }
    let mut shares = Vec::with_capacity(weights.len());
    let mut remainders = Vec::with_capacity(weights.len());
    for (i, w) in weights.iter().enumerate() {
        let exact = i128::from(amount) * i128::from(*w);
        shares.push(i64::try_from(exact / sum).unwrap_or(0));
        remainders.push((exact % sum, i));
    }
    let mut left = amount - shares.iter().sum::<i64>();
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (remainder, i) in remainders {
        if left <= 0 || remainder == 0 {
            break;
        }
        shares[i] += 1;
        left -= 1;
    }
    shares
}

fn not_applicable(offer: &Offer, reason: &str, why: &str) -> Refusal {
    Refusal::unprocessable("promotion_not_applicable", format!("the code {} {why}", offer.code))
        .with_details(json!({"reason": reason}))
}

/// A code on a basket with no lines yet.
pub fn nothing_to_apply(code: &str) -> Refusal {
    Refusal::unprocessable("promotion_not_applicable", format!("the code {code} applies to nothing in this basket"))
        .with_details(json!({"reason": "skus"}))
}

/// A code no promotion has.
pub fn unknown(code: &str) -> Refusal {
    Refusal::unprocessable("promotion_unknown", format!("there is no code {code}"))
}

/// A code whose uses are all taken (found by its reservation changing no row).
pub fn used_up(code: &str) -> Refusal {
    Refusal::unprocessable("promotion_used_up", format!("the code {code} has been used up"))
}

/// A buyer who used the code as often as it allows.
pub fn limit_per_buyer(code: &str, per_buyer: i64) -> Refusal {
    Refusal::unprocessable(
        "promotion_limit_per_buyer",
        format!("the code {code} may be used {per_buyer} times per buyer"),
    )
    .with_details(json!({"per_buyer": per_buyer}))
}

#[cfg(test)]
#[path = "promotion_tests.rs"]
mod tests;

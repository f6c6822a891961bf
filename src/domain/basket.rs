//! Basket rules: how much a line may hold, how many lines a basket may have, one currency per
//! basket, and a total that is representable. The store reads the lines and writes what passes.

use serde_json::json;

use super::ids;
use super::refusal::Refusal;

/// Largest quantity of one SKU in one basket line: bounds every stock update and money product.
pub const LINE_QUANTITY_MAX: i64 = 10_000;
/// Most lines in a basket: bounds the checkout transaction.
pub const BASKET_LINES_MAX: i64 = 100;

/// A basket's status: open while the buyer fills it, frozen with its order once checked out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BasketStatus {
    Open,
    Frozen,
}

impl BasketStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BasketStatus::Open => "open",
            BasketStatus::Frozen => "frozen",
        }
    }

    pub fn parse(text: &str) -> Option<BasketStatus> {
        match text {
            "open" => Some(BasketStatus::Open),
            "frozen" => Some(BasketStatus::Frozen),
            _ => None,
        }
    }
}

/// Whether a basket's lines may change: only while it is open.
pub fn may_change(status: BasketStatus) -> Result<(), Refusal> {
    match status {
        BasketStatus::Open => Ok(()),
        BasketStatus::Frozen => {
            Err(Refusal::conflict("basket_frozen", "the basket has been checked out and can no longer change"))
        }
    }
}

fn too_large() -> Refusal {
    Refusal::unprocessable("basket_too_large", format!("a basket holds at most {BASKET_LINES_MAX} lines"))
}

/// Lines (SKU, quantity) for a new basket, refused without reading anything: each quantity in
/// 1..=[`LINE_QUANTITY_MAX`], no SKU twice, at most [`BASKET_LINES_MAX`] lines. A SKU that is not
/// a plain identifier cannot exist.
pub fn check_new_lines(lines: &[(String, i64)]) -> Result<(), Refusal> {
    if i64::try_from(lines.len()).unwrap_or(i64::MAX) > BASKET_LINES_MAX {
        return Err(too_large());
    }
    let mut seen = std::collections::BTreeSet::new();
    for (sku, quantity) in lines {
        if !(1..=LINE_QUANTITY_MAX).contains(quantity) {
            return Err(Refusal::unprocessable(
                "invalid_quantity",
                format!("a new line's quantity must be between 1 and {LINE_QUANTITY_MAX}"),
            ));
        }
        if !ids::is_plain_id(sku) {
            return Err(Refusal::not_found("SKU"));
        }
        if !seen.insert(sku.as_str()) {
            return Err(Refusal::unprocessable("duplicate_line", format!("SKU {sku} is listed twice")));
        }
    }
    Ok(())
}

/// The quantity a line is set to (0 removes it).
pub fn check_set_quantity(quantity: i64) -> Result<(), Refusal> {
    if (0..=LINE_QUANTITY_MAX).contains(&quantity) {
        Ok(())
    } else {
        Err(Refusal::unprocessable("invalid_quantity", format!("quantity must be between 0 and {LINE_QUANTITY_MAX}")))
    }
}

/// A line of `quantity` units of `sku`, whose SKU allows at most `max_per_order` in one order
/// (`None`: no limit beyond [`LINE_QUANTITY_MAX`]). Checked when a basket line is written and again
/// at confirm (the limit may have been lowered since).
pub fn check_line_limit(sku: &str, quantity: i64, max_per_order: Option<i64>) -> Result<(), Refusal> {
    match max_per_order {
        Some(max) if quantity > max => {
            Err(Refusal::unprocessable("quantity_limit", format!("at most {max} of {sku} may be bought in one order"))
                .with_details(json!({"sku": sku, "max": max})))
        }
        _ => Ok(()),
    }
}

/// A line added beside `others` existing lines.
pub fn check_room_for_line(others: usize) -> Result<(), Refusal> {
    if i64::try_from(others).unwrap_or(i64::MAX) >= BASKET_LINES_MAX { Err(too_large()) } else { Ok(()) }
}

/// All lines of a basket share one currency.
pub fn check_one_currency<'a>(currencies: impl IntoIterator<Item = &'a str>) -> Result<(), Refusal> {
    let mut first = None;
    for c in currencies {
        match first {
            None => first = Some(c),
            Some(f) if f != c => {
                return Err(Refusal::unprocessable(
                    "currency_mismatch",
                    "all lines of a basket must share one currency",
                )
                .with_details(json!({"currencies": [f, c]})));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The basket total of (unit price, quantity) lines in minor units, refused if it overflows.
pub fn total_minor(lines: impl IntoIterator<Item = (i64, i64)>) -> Result<i64, Refusal> {
    let overflow = || Refusal::amount_overflow("the basket total would overflow");
    lines.into_iter().try_fold(0_i64, |total, (unit, quantity)| {
        total.checked_add(unit.checked_mul(quantity).ok_or_else(overflow)?).ok_or_else(overflow)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_open_basket_changes() {
        for status in [BasketStatus::Open, BasketStatus::Frozen] {
            assert_eq!(BasketStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(BasketStatus::parse("closed"), None);
        assert!(may_change(BasketStatus::Open).is_ok());
        assert_eq!(may_change(BasketStatus::Frozen).unwrap_err().code, "basket_frozen");
    }

    fn line(sku: &str, q: i64) -> (String, i64) {
        (sku.to_string(), q)
    }

    #[test]
    fn new_lines_are_bounded_and_distinct() {
        assert!(check_new_lines(&[]).is_ok());
        assert!(check_new_lines(&[line("A", 1), line("B", LINE_QUANTITY_MAX)]).is_ok());
        let code = |lines: &[(String, i64)]| check_new_lines(lines).err().map(|r| r.code);
        assert_eq!(code(&[line("A", 0)]), Some("invalid_quantity"));
        assert_eq!(code(&[line("A", LINE_QUANTITY_MAX + 1)]), Some("invalid_quantity"));
        assert_eq!(code(&[line("A", 1), line("A", 2)]), Some("duplicate_line"));
        assert_eq!(code(&[line("a/b", 1)]), Some("not_found"));
        let many: Vec<_> = (0..=BASKET_LINES_MAX).map(|n| line(&format!("S{n}"), 1)).collect();
        assert_eq!(code(&many), Some("basket_too_large"));
        assert!(check_new_lines(&many[1..]).is_ok());
    }

    #[test]
    fn set_quantity_allows_zero_and_the_maximum() {
        assert!(check_set_quantity(0).is_ok());
        assert!(check_set_quantity(LINE_QUANTITY_MAX).is_ok());
        assert!(check_set_quantity(-1).is_err());
        assert!(check_set_quantity(LINE_QUANTITY_MAX + 1).is_err());
        let full = usize::try_from(BASKET_LINES_MAX).unwrap_or(usize::MAX);
        assert!(check_room_for_line(full - 1).is_ok());
        assert_eq!(check_room_for_line(full).err().map(|r| r.code), Some("basket_too_large"));
    }

    #[test]
    fn one_currency_per_basket() {
        assert!(check_one_currency([]).is_ok());
        assert!(check_one_currency(["EUR", "EUR"]).is_ok());
        assert_eq!(check_one_currency(["EUR", "EUR", "CNY"]).err().map(|r| r.code), Some("currency_mismatch"));
    }

    #[test]
    fn totals_refuse_overflow() {
        assert_eq!(total_minor([(250, 2), (100, 1)]), Ok(600));
        assert_eq!(total_minor([]), Ok(0));
        assert!(total_minor([(i64::MAX, 2)]).is_err());
        assert!(total_minor([(i64::MAX, 1), (1, 1)]).is_err());
    }
}

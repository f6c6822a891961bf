//! The catalog's rules: what a SKU is, what its stock may become, and what may be added to it.

use serde::Serialize;

use super::refusal::Refusal;

/// Largest stock a SKU starts with, and largest stock movement in one call.
pub const STOCK_DELTA_MAX: i64 = 1_000_000_000;

/// Longest SKU display name, in characters.
pub const SKU_NAME_LEN_MAX: usize = 200;

/// What a SKU sells: goods shipped, or card keys delivered on payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SkuKind {
    Physical,
    Digital,
}

impl SkuKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SkuKind::Physical => "physical",
            SkuKind::Digital => "digital",
        }
    }

    /// A kind as stored.
    pub fn parse(text: &str) -> Option<SkuKind> {
        match text {
            "physical" => Some(SkuKind::Physical),
            "digital" => Some(SkuKind::Digital),
            _ => None,
        }
    }

    /// The kind a new SKU names: physical unless it says otherwise.
    pub fn asked(text: Option<&str>) -> Result<SkuKind, Refusal> {
        text.map_or(Some(SkuKind::Physical), SkuKind::parse)
            .ok_or_else(|| Refusal::unprocessable("unsupported_kind", "kind must be physical or digital"))
    }
}

/// A SKU's display name, trimmed: 1–200 printable characters.
pub fn valid_name(name: &str) -> Result<&str, Refusal> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > SKU_NAME_LEN_MAX || name.chars().any(char::is_control) {
        return Err(Refusal::unprocessable("invalid_name", "name must be 1-200 printable characters"));
    }
    Ok(name)
}

/// The stock a new SKU starts with: what the shop named, except that a digital SKU's stock is its
/// unsold keys, so it starts at zero and grows by key imports.
pub fn starting_stock(kind: SkuKind, named: i64) -> Result<i64, Refusal> {
    if !(0..=STOCK_DELTA_MAX).contains(&named) {
        return Err(Refusal::unprocessable("invalid_quantity", "stock must be between 0 and 1000000000"));
    }
    Ok(if kind == SkuKind::Digital { 0 } else { named })
}

/// A restock (positive) or write-off (negative) of `delta` units.
pub fn check_stock_delta(delta: i64) -> Result<(), Refusal> {
    if delta == 0 || !(-STOCK_DELTA_MAX..=STOCK_DELTA_MAX).contains(&delta) {
        return Err(Refusal::unprocessable("invalid_quantity", "delta must be non-zero and within ±1000000000"));
    }
    Ok(())
}

/// Stock is moved by hand only on a physical SKU, and a write-off never takes away units that are
/// held or sold: `kind` is the SKU's, `after` its stock after the move, `held` its units held.
pub fn may_adjust_stock(kind: SkuKind, after: i64, held: i64) -> Result<(), Refusal> {
    if kind == SkuKind::Digital {
        return Err(Refusal::unprocessable(
            "digital_stock_is_keys",
            "a digital SKU's stock is its unsold keys: import keys to add stock",
        ));
    }
    if after < held {
        return Err(Refusal::conflict(
            "insufficient_stock",
            "the write-off would take away units that are held or sold",
        ));
    }
    Ok(())
}

/// Card keys are added to a digital SKU only.
pub fn may_import_keys(kind: SkuKind) -> Result<(), Refusal> {
    match kind {
        SkuKind::Digital => Ok(()),
        SkuKind::Physical => Err(Refusal::unprocessable("not_digital", "keys can only be added to a digital SKU")),
    }
}

/// Longest card key, in characters.
pub const KEY_LEN_MAX: usize = 512;

/// A card key as imported, trimmed: 1–512 printable characters.
pub fn valid_key(key: &str) -> Result<&str, Refusal> {
    let key = key.trim();
    if key.is_empty() || key.chars().count() > KEY_LEN_MAX || key.chars().any(char::is_control) {
        return Err(Refusal::unprocessable(
            "invalid_key",
            format!("keys must be 1-{KEY_LEN_MAX} printable characters"),
        ));
    }
    Ok(key)
}

/// A new SKU whose code is taken already.
pub fn sku_exists(sku: &str) -> Refusal {
    Refusal::conflict("sku_exists", format!("SKU {sku} already exists"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digital_sku_starts_with_no_stock_whatever_is_named() {
        assert_eq!(starting_stock(SkuKind::Digital, 50), Ok(0));
        assert_eq!(starting_stock(SkuKind::Physical, 50), Ok(50));
        assert_eq!(starting_stock(SkuKind::Physical, -1).unwrap_err().code, "invalid_quantity");
        assert_eq!(starting_stock(SkuKind::Digital, STOCK_DELTA_MAX + 1).unwrap_err().code, "invalid_quantity");
    }

    #[test]
    fn stock_moves_by_hand_only_on_physical_skus_and_never_below_what_is_held() {
        assert!(may_adjust_stock(SkuKind::Physical, 5, 5).is_ok());
        assert_eq!(may_adjust_stock(SkuKind::Physical, 4, 5).unwrap_err().code, "insufficient_stock");
        assert_eq!(may_adjust_stock(SkuKind::Digital, 10, 0).unwrap_err().code, "digital_stock_is_keys");
        assert_eq!(check_stock_delta(0).unwrap_err().code, "invalid_quantity");
        assert!(check_stock_delta(-STOCK_DELTA_MAX).is_ok());
        assert_eq!(may_import_keys(SkuKind::Physical).unwrap_err().code, "not_digital");
        assert_eq!(valid_key("  ABCD-1234 "), Ok("ABCD-1234"));
        for bad in ["", "   ", "a\u{7}b", &"k".repeat(KEY_LEN_MAX + 1)] {
            assert_eq!(valid_key(bad).unwrap_err().code, "invalid_key", "{bad:?}");
        }
    }

    #[test]
    fn kinds_and_names() {
        assert_eq!(SkuKind::asked(None), Ok(SkuKind::Physical));
        assert_eq!(SkuKind::asked(Some("digital")), Ok(SkuKind::Digital));
        assert_eq!(SkuKind::asked(Some("service")).unwrap_err().code, "unsupported_kind");
        assert_eq!(valid_name("  Tea  "), Ok("Tea"));
        assert_eq!(valid_name(" ").unwrap_err().code, "invalid_name");
        assert_eq!(valid_name(&"x".repeat(201)).unwrap_err().code, "invalid_name");
    }
}

//! The catalogue as the API and the console change it: SKUs and card keys.

use super::Context;
use crate::domain::ids::Sku;
use crate::error::{Error, Result};
use crate::store::catalog::{self, LimitsPatch, NewSku, SkuKind, SkuView};
use crate::store::fulfilment::{self, ImportCount};

/// A SKU's display name, trimmed: 1–200 printable characters.
pub fn valid_name(name: &str) -> Result<&str> {
    Ok(crate::domain::catalog::valid_name(name)?)
}

/// A new SKU as the API or the console names it, before it is checked.
pub struct SkuDraft<'a> {
    pub sku: &'a str,
    pub name: &'a str,
    /// `physical` (the default) or `digital`.
    pub kind: Option<&'a str>,
    pub price: crate::domain::Money,
    /// The shop means a price of 0 (`free: true`).
    pub free: bool,
    /// Units on hand (a digital SKU's stock is its keys: ignored).
    pub stock: i64,
    pub limits: crate::domain::checkout::SkuLimits,
}

/// Creates a SKU.
pub async fn create_sku(cx: &Context, draft: &SkuDraft<'_>) -> Result<SkuView> {
    let sku = Sku::parse(draft.sku)
        .map_err(|_| Error::unprocessable("invalid_sku", "SKU codes are 1-64 letters, digits, '_', '-' or '.'"))?;
    let name = valid_name(draft.name)?;
    crate::domain::checkout::check_price(draft.price.amount_minor(), draft.free)?;
    let kind = SkuKind::asked(draft.kind)?;
    let new =
        NewSku { sku, name: name.to_string(), kind, price: draft.price, stock: draft.stock, limits: draft.limits };
    catalog::create_sku(&cx.db, &new, false, cx.now_ms()).await
}

/// Changes a SKU's name, price (with whether the shop means a price of 0) and/or limits.
pub async fn edit_sku(
    cx: &Context,
    sku: &Sku,
    name: Option<&str>,
    price: Option<(i64, bool)>,
    limits: LimitsPatch,
) -> Result<SkuView> {
    let name = name.map(valid_name).transpose()?;
    if let Some((price_minor, free)) = price {
        crate::domain::checkout::check_price(price_minor, free)?;
    }
    let price_minor = price.map(|(p, _)| p);
    catalog::update_sku(&cx.db, sku, name, price_minor, limits, cx.now_ms()).await
}

/// Restocks (positive `delta`) or writes off (negative) a physical SKU's stock.
pub async fn adjust_stock(cx: &Context, sku: &Sku, delta: i64) -> Result<SkuView> {
    catalog::adjust_stock(&cx.db, sku, delta, cx.now_ms()).await
}

/// Imports card keys into a digital SKU, in batches of [`fulfilment::IMPORT_BATCH_MAX`].
pub async fn import_keys(cx: &Context, sku: &Sku, keys: &[String]) -> Result<ImportCount> {
    let vault = cx
        .vault
        .as_ref()
        .ok_or_else(|| Error::unprocessable("keys_secret_missing", "digital goods need --keys-secret"))?;
    if keys.len() > fulfilment::IMPORT_API_MAX {
        return Err(Error::unprocessable(
            "too_many_keys",
            format!("at most {} keys per call; use `kassa keys import` for files", fulfilment::IMPORT_API_MAX),
        ));
    }
    let mut total = ImportCount::default();
    for chunk in keys.chunks(fulfilment::IMPORT_BATCH_MAX) {
        let n = fulfilment::import_keys(&cx.db, vault, sku, chunk, cx.now_ms()).await?;
        total.imported += n.imported;
        total.duplicates += n.duplicates;
    }
    Ok(total)
}

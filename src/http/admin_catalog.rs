//! The console's catalog editing: create a SKU, change its name and price, add or write off stock,
//! import card keys — through the same use cases as the admin API ([`super::flows`]). Prices are
//! typed as money (major units of the SKU's currency). A key import from the page's script comes in
//! batches, each answered with JSON, so the operator sees its progress; without the script the form
//! posts every key at once.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, post};

use super::console::Operator;
use super::i18n::Lang;
use super::{AppState, Content, FormBody, RouteDoc};
use crate::domain::checkout::SkuLimits;
use crate::domain::ids::Sku;
use crate::domain::{Currency, Money};
use crate::error::{Error, Result};
use crate::store::catalog::{self, LimitsPatch};
use crate::usecase::catalog::{self as uc, SkuDraft};

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let doc = |method, path, summary| {
        RouteDoc::page(method, path, summary, "admin console").answer(303, "back to the SKUs page", Content::Empty)
    };
    vec![
        (doc("post", "/admin/skus", "Admin console: create a SKU (price in major units)"), post(create)),
        (doc("post", "/admin/skus/{sku}/edit", "Admin console: change a SKU's name and price"), post(edit)),
        (doc("post", "/admin/skus/{sku}/stock", "Admin console: add stock or write it off"), post(stock)),
        (
            doc(
                "post",
                "/admin/skus/{sku}/keys",
                "Admin console: import card keys, one per line (JSON answer with Accept: application/json)",
            ),
            post(import_keys),
        ),
    ]
}

/// A price typed as money: major units of `currency` (`12.50`).
fn price(form: &BTreeMap<String, String>, currency: Currency) -> Result<Money> {
    let text = form.get("price").map(|p| p.trim()).unwrap_or_default();
    Money::parse_decimal(text, currency).ok_or_else(|| {
        Error::unprocessable("invalid_price", format!("the price is an amount of {currency}, such as 12.50"))
    })
}

fn whole(form: &BTreeMap<String, String>, name: &str) -> Result<i64> {
    let text = form.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()).unwrap_or("0");
    text.parse().map_err(|_| Error::unprocessable("invalid_quantity", format!("{name} must be a whole number")))
}

/// Runs a console form's action, then back to the SKUs page (saying what was done), or the error
/// page with a way back.
async fn act<F>(op: Operator, lang: Lang, form: &BTreeMap<String, String>, action: F) -> Response
where
    F: std::future::Future<Output = Result<String>>,
{
    let result = async {
        op.check(form)?;
        action.await
    }
    .await;
    match result {
        Ok(done) => Redirect::to(&format!("/admin/skus?done={done}")).into_response(),
        Err(e) => super::pages::console_error_page(lang, &e, "/admin/skus"),
    }
}

async fn create(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let action = async {
        let currency = Currency::parse(form.get("currency").map(String::as_str).unwrap_or("CNY"))?;
        let mut draft = SkuDraft {
            sku: form.get("sku").map(|s| s.trim()).unwrap_or_default(),
            name: form.get("name").map(String::as_str).unwrap_or_default(),
            kind: form.get("kind").map(String::as_str),
            price: price(&form, currency)?,
            free: false,
            stock: whole(&form, "stock")?,
            limits: SkuLimits::default(),
        };
        // The box confirms a price of 0; left ticked beside a price, it is moot.
        draft.free = form.contains_key("free") && draft.price.amount_minor() == 0;
        uc::create_sku(&state.cx, &draft).await?;
        Ok("created".to_string())
    };
    act(op, lang, &form, action).await
}

async fn edit(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Path(sku): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let action = async {
        let sku = Sku::parse(&sku)?;
        let current = catalog::get_sku(&state.db, &sku).await?;
        let price = price(&form, Currency::parse(&current.currency)?)?;
        let name = form.get("name").map(String::as_str);
        let free = form.contains_key("free") && price.amount_minor() == 0;
        uc::edit_sku(&state.cx, &sku, name, Some((price.amount_minor(), free)), LimitsPatch::default()).await?;
        Ok("edited".to_string())
    };
    act(op, lang, &form, action).await
}

async fn stock(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Path(sku): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let action = async {
        let sku = Sku::parse(&sku)?;
        let quantity = whole(&form, "quantity")?;
        if quantity <= 0 {
            return Err(Error::unprocessable("invalid_quantity", "the quantity is a whole number above 0"));
        }
        let delta = match form.get("action").map(String::as_str) {
            Some("add") => quantity,
            Some("write_off") => -quantity,
            _ => return Err(Error::invalid("invalid_action", "add or write_off")),
        };
        crate::usecase::catalog::adjust_stock(&state.cx, &sku, delta).await?;
        Ok("stock".to_string())
    };
    act(op, lang, &form, action).await
}

/// Imports the keys of the form's `keys` field, one per line (blank lines skipped). The page's
/// script sends them in batches with `Accept: application/json` and shows the running count.
async fn import_keys(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    headers: HeaderMap,
    Path(sku): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let wants_json =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("application/json"));
    let result = async {
        op.check(&form)?;
        let sku = Sku::parse(&sku)?;
        let keys: Vec<String> = form
            .get("keys")
            .map(String::as_str)
            .unwrap_or_default()
            .lines()
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map(str::to_string)
            .collect();
        uc::import_keys(&state.cx, &sku, &keys).await
    }
    .await;
    match (result, wants_json) {
        (Ok(count), true) => (StatusCode::OK, axum::Json(count)).into_response(),
        (Ok(count), false) => {
            Redirect::to(&format!("/admin/skus?done=keys&n={}&dup={}", count.imported, count.duplicates))
                .into_response()
        }
        (Err(e), true) => e.into_response(),
        (Err(e), false) => super::pages::console_error_page(lang, &e, "/admin/skus"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn prices_are_typed_as_money() {
        let cny = Currency::parse("CNY").unwrap();
        assert_eq!(price(&form(&[("price", " 12.5 ")]), cny).unwrap().amount_minor(), 1250);
        assert_eq!(price(&form(&[("price", "1200")]), Currency::parse("JPY").unwrap()).unwrap().amount_minor(), 1200);
        for bad in ["", "12.345", "-1", "1e3", "twelve"] {
            assert_eq!(price(&form(&[("price", bad)]), cny).unwrap_err().code(), "invalid_price", "{bad}");
        }
    }
}

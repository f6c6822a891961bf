//! The console's promotions: the list with what each has given away, a form to create one (its
//! amounts typed as money, its dates as the console's other times are read: UTC), and a page per
//! promotion with its rules, uses, batches of single-use codes and the moves an operator makes —
//! all through the same use cases as the admin API ([`super::promotions`]).

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get, post};

use super::console::Operator;
use super::i18n::{Lang, Texts};
use super::{AppState, Content, FormBody, RouteDoc, render};
use crate::domain::ids::{self, Sku};
use crate::domain::money::format_minor;
use crate::domain::promotion::{Benefit, Rules};
use crate::domain::{Currency, Money};
use crate::error::{Error, Result};
use crate::store::promotions::{NewPromotion, PromotionView};
use crate::usecase::promotion as uc;

/// Most uses a promotion's page lists.
const USES_SHOWN: i64 = 50;
/// Most codes of a new batch its page lists; the CSV holds them all.
const CODES_SHOWN: usize = 500;

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let page = |path, summary| {
        RouteDoc::page("get", path, summary, "admin console").answer(200, "HTML page", Content::Other("text/html"))
    };
    let form = |path, summary| {
        RouteDoc::page("post", path, summary, "admin console").answer(303, "to the promotion's page", Content::Empty)
    };
    vec![
        (
            page("/admin/promotions", "Admin console: promotions with their uses, and the form to create one"),
            get(list_page),
        ),
        (
            form("/admin/promotions", "Admin console: create a promotion (amounts in major units, dates in UTC)"),
            post(create),
        ),
        (
            page(
                "/admin/promotions/{id}",
                "Admin console: a promotion's rules, uses, what it gave away and its batches of codes",
            ),
            get(promotion_page),
        ),
        (form("/admin/promotions/{id}/status", "Admin console: pause, resume or end a promotion"), post(set_status)),
        (
            form("/admin/promotions/{id}/batches", "Admin console: generate a batch of single-use codes"),
            post(add_batch),
        ),
        (
            RouteDoc::page(
                "get",
                "/admin/promotions/{id}/codes.csv",
                "Admin console: a promotion's batch codes as CSV (code, batch, used), one batch with ?batch=",
                "admin console",
            )
            .answer(200, "the file", Content::Other("text/csv")),
            get(codes_csv),
        ),
    ]
}

/// A promotion as the console shows it: what it takes off and its amounts written as money.
struct Shown {
    p: PromotionView,
    /// `10%`, or the amounts off (`5.00 CNY`).
    discount: String,
    /// The minimum spend as money; empty: none.
    min_spend: String,
    /// What paid orders got off, as money; `0` before any.
    given_away: String,
}

/// Amounts per currency as money, joined (`5.00 CNY, 1.00 USD`).
fn amounts(map: &BTreeMap<String, i64>) -> String {
    map.iter().map(|(currency, minor)| format_minor(*minor, currency)).collect::<Vec<_>>().join(", ")
}

impl From<PromotionView> for Shown {
    fn from(p: PromotionView) -> Shown {
        let discount = match (&p.percent_off, &p.amount_off) {
            (Some(percent), _) => format!("{percent}%"),
            (None, Some(off)) => amounts(off),
            (None, None) => String::new(),
        };
        let given_away = if p.given_away.is_empty() { "0".to_string() } else { amounts(&p.given_away) };
        Shown { discount, min_spend: amounts(&p.min_spend), given_away, p }
    }
}

#[derive(Template)]
#[template(path = "admin/promotions.html")]
struct ListPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    rows: Vec<Shown>,
    /// The currencies an amount may be typed in, the shop's first.
    currencies: Vec<&'static str>,
}

async fn list_page(State(state): State<AppState>, op: Operator, lang: Lang) -> Result<Response> {
    let rows = crate::store::promotions::list(&state.db, uc::LIST_MAX).await?.into_iter().map(Shown::from).collect();
    let currencies = Currency::known().collect();
    Ok(render(&ListPage { t: lang.texts(), csrf: &op.csrf, rows, currencies }))
}

/// One use of the promotion, as its page lists it.
struct UseRow {
    order_no: String,
    code: String,
    status: String,
    discount: String,
    created_at: String,
}

/// The batch just generated: its name, the first of its codes and how many it has.
struct NewBatch {
    batch: String,
    codes: Vec<String>,
    total: usize,
}

#[derive(Template)]
#[template(path = "admin/promotion.html")]
struct PromotionPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    s: Shown,
    uses: Vec<UseRow>,
    message: String,
    new_batch: Option<NewBatch>,
}

async fn promotion_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let p = uc::get(&state.cx, &id).await?;
    let uses = crate::store::promotions::uses(&state.db, &p.id, USES_SHOWN, None)
        .await?
        .into_iter()
        .map(|u| UseRow {
            discount: format_minor(u.discount_minor, &u.currency),
            order_no: u.order_no,
            code: u.code,
            status: u.status,
            created_at: u.created_at,
        })
        .collect();
    let new_batch = match query.get("batch").filter(|b| p.batches.iter().any(|known| &known.batch == *b)) {
        Some(batch) => {
            let codes = crate::store::promotions::batch_codes(&state.db, &p.id, Some(batch)).await?;
            let total = codes.len();
            let codes = codes.into_iter().take(CODES_SHOWN).map(|c| c.code).collect();
            Some(NewBatch { batch: batch.clone(), codes, total })
        }
        None => None,
    };
    let t = lang.texts();
    let message = match query.get("done").map(String::as_str) {
        Some("created") => t.t("admin.promotions.done_created").to_string(),
        Some("pause") => t.t("admin.promotions.done_pause").to_string(),
        Some("resume") => t.t("admin.promotions.done_resume").to_string(),
        Some("end") => t.t("admin.promotions.done_end").to_string(),
        Some("batch") => match &new_batch {
            Some(b) => t.f2("admin.promotions.done_batch", "count", b.total, "batch", &b.batch),
            None => String::new(),
        },
        _ => String::new(),
    };
    Ok(render(&PromotionPage { t, csrf: &op.csrf, s: Shown::from(p), uses, message, new_batch }))
}

/// The field `name`, trimmed; `None` when empty or absent.
fn field<'a>(form: &'a BTreeMap<String, String>, name: &str) -> Option<&'a str> {
    form.get(name).map(|v| v.trim()).filter(|v| !v.is_empty())
}

fn refused(message: impl Into<String>) -> Error {
    Error::unprocessable("invalid_promotion", message)
}

/// A whole number field; empty: `None`.
fn whole(form: &BTreeMap<String, String>, name: &str, what: &str) -> Result<Option<i64>> {
    field(form, name).map(|v| v.parse().map_err(|_| refused(format!("{what} must be a whole number")))).transpose()
}

/// An amount typed as money: major units of `currency` (`12.50`); empty: `None`.
fn money(form: &BTreeMap<String, String>, name: &str, what: &str, currency: Currency) -> Result<Option<i64>> {
    field(form, name)
        .map(|text| {
            Money::parse_decimal(text, currency)
                .map(Money::amount_minor)
                .ok_or_else(|| refused(format!("{what} is an amount of {currency}, such as 12.50")))
        })
        .transpose()
}

/// A `datetime-local` field (`2026-05-01T10:00`, seconds optional) read in UTC, as the console
/// reads and shows every time; empty: `None`.
fn moment(form: &BTreeMap<String, String>, name: &str, what: &str) -> Result<Option<i64>> {
    use time::macros::format_description;
    let Some(text) = field(form, name) else { return Ok(None) };
    let minutes = format_description!("[year]-[month]-[day]T[hour]:[minute]");
    let seconds = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
    let at = time::PrimitiveDateTime::parse(text, minutes)
        .or_else(|_| time::PrimitiveDateTime::parse(text, seconds))
        .map_err(|_| refused(format!("{what} is a date and time, such as 2026-05-01T10:00")))?;
    let millis = at.assume_utc().unix_timestamp_nanos() / 1_000_000;
    i64::try_from(millis).map(Some).map_err(|_| refused(format!("{what} is out of range")))
}

/// The promotion the console's form describes: a percentage or an amount off (not both), the
/// SKUs comma-separated, the minimum spend in the currency of the form.
fn new_promotion(form: &BTreeMap<String, String>) -> Result<NewPromotion> {
    let currency = Currency::parse(field(form, "currency").unwrap_or("CNY"))?;
    let percent = whole(form, "percent_off", "the percentage off")?;
    let amount = money(form, "amount_off", "the amount off", currency)?;
    let benefit = match (percent, amount) {
        (Some(p), None) => Benefit::PercentOff(p),
        (None, Some(a)) => Benefit::AmountOff(BTreeMap::from([(currency.code().to_string(), a)])),
        _ => return Err(refused("give either a percentage off or an amount off")),
    };
    let skus = field(form, "skus")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let min_spend = money(form, "min_spend", "the minimum spend", currency)?
        .map(|m| BTreeMap::from([(currency.code().to_string(), m)]))
        .unwrap_or_default();
    let rules = Rules {
        benefit,
        skus,
        min_spend,
        starts_at: moment(form, "starts_at", "the start")?,
        ends_at: moment(form, "ends_at", "the end")?,
        max_uses: whole(form, "max_uses", "the uses in all")?,
        per_buyer: whole(form, "per_buyer", "the uses per buyer")?,
        first_order_only: form.contains_key("first_order_only"),
    };
    Ok(NewPromotion {
        name: form.get("name").cloned().unwrap_or_default(),
        code: field(form, "code").map(str::to_string),
        rules,
    })
}

/// Where a promotion's forms lead back to: its page, or the list for an id that cannot be one.
fn back_to(id: &str) -> String {
    if ids::is_plain_id(id) { format!("/admin/promotions/{id}") } else { "/admin/promotions".to_string() }
}

async fn create(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        op.check(&form)?;
        let new = new_promotion(&form)?;
        // A SKU the shop does not sell is a typo here: the promotion would never apply to it.
        for sku in &new.rules.skus {
            let known = match Sku::parse(sku) {
                Ok(sku) => crate::store::catalog::get_sku(&state.db, &sku)
                    .await
                    .map(|_| true)
                    .or_else(|e| if e.code() == "not_found" { Ok(false) } else { Err(e) })?,
                Err(_) => false,
            };
            if !known {
                return Err(refused(format!("there is no SKU {sku}")));
            }
        }
        let p = uc::create(&state.cx, &new).await?;
        Ok(Redirect::to(&format!("/admin/promotions/{}?done=created", p.id)).into_response())
    }
    .await;
    result.unwrap_or_else(|e| super::pages::console_error_page(lang, &e, "/admin/promotions"))
}

async fn set_status(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Path(id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        op.check(&form)?;
        let action = form.get("action").map(String::as_str).unwrap_or_default();
        let to = uc::status_named(action).map_err(|_| Error::invalid("invalid_action", "pause, resume or end"))?;
        let p = uc::set_status(&state.cx, &id, to).await?;
        Ok(Redirect::to(&format!("/admin/promotions/{}?done={action}", p.id)).into_response())
    }
    .await;
    result.unwrap_or_else(|e| super::pages::console_error_page(lang, &e, &back_to(&id)))
}

async fn add_batch(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Path(id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        op.check(&form)?;
        let count = whole(&form, "count", "the number of codes")?
            .ok_or_else(|| refused("give the number of codes to generate"))?;
        let p = uc::get(&state.cx, &id).await?;
        let (batch, _) = uc::add_batch(&state.cx, &p.id, field(&form, "prefix"), count).await?;
        let query = serde_urlencoded::to_string([("done", "batch"), ("batch", batch.as_str())]).unwrap_or_default();
        Ok(Redirect::to(&format!("/admin/promotions/{}?{query}", p.id)).into_response())
    }
    .await;
    result.unwrap_or_else(|e| super::pages::console_error_page(lang, &e, &back_to(&id)))
}

/// The batch codes behind the console's sign-in (its cookie is sent under `/admin` only).
async fn codes_csv(
    State(state): State<AppState>,
    _op: Operator,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let batch = query.get("batch").map(String::as_str).filter(|b| !b.is_empty());
    super::promotions::codes_file(&state, &id, batch).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn the_form_reads_money_dates_and_limits() {
        let new = new_promotion(&form(&[
            ("name", "Spring"),
            ("code", " spring10 "),
            ("amount_off", "5.5"),
            ("currency", "CNY"),
            ("skus", " TEA, MUG-1 ,,"),
            ("min_spend", "50"),
            ("starts_at", "2026-05-01T10:00"),
            ("ends_at", "2026-05-31T23:59:30"),
            ("max_uses", "100"),
            ("per_buyer", ""),
            ("first_order_only", "1"),
        ]))
        .unwrap();
        assert_eq!(new.code.as_deref(), Some("spring10"));
        let r = new.rules;
        assert_eq!(r.benefit, Benefit::AmountOff(BTreeMap::from([("CNY".to_string(), 550)])));
        assert_eq!(r.skus, ["TEA", "MUG-1"]);
        assert_eq!(r.min_spend, BTreeMap::from([("CNY".to_string(), 5000)]));
        assert_eq!(r.starts_at, Some(1_777_629_600_000));
        assert_eq!(r.ends_at, Some(1_780_271_970_000));
        assert_eq!((r.max_uses, r.per_buyer, r.first_order_only), (Some(100), None, true));
        let percent = new_promotion(&form(&[("name", "Ten"), ("percent_off", "10")])).unwrap();
        assert_eq!(percent.rules.benefit, Benefit::PercentOff(10));
        assert!(percent.code.is_none() && percent.rules.min_spend.is_empty() && !percent.rules.first_order_only);
    }

    #[test]
    fn the_form_refuses_what_it_cannot_read() {
        for bad in [
            vec![("name", "X")],
            vec![("name", "X"), ("percent_off", "10"), ("amount_off", "5")],
            vec![("name", "X"), ("amount_off", "5.555")],
            vec![("name", "X"), ("percent_off", "ten")],
            vec![("name", "X"), ("percent_off", "10"), ("starts_at", "tomorrow")],
            vec![("name", "X"), ("percent_off", "10"), ("max_uses", "1.5")],
        ] {
            assert_eq!(new_promotion(&form(&bad)).unwrap_err().code(), "invalid_promotion", "{bad:?}");
        }
        let unknown = form(&[("name", "X"), ("amount_off", "5"), ("currency", "XXX")]);
        assert_ne!(new_promotion(&unknown).unwrap_err().code(), "invalid_promotion");
    }
}

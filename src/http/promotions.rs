//! Promotions over JSON: the shop's admin API (create, pause, resume, end; batches of single-use
//! codes exported as CSV; uses) and the buyer's code on a basket.

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post, put};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Admin, ApiJson, AppState, Auth, Buyer, Content, RouteDoc};
use crate::domain::ids::BasketId;
use crate::domain::promotion::{Benefit, Rules};
use crate::error::{Error, Result};
use crate::store::catalog::BasketView;
use crate::store::promotions::{NewPromotion, PromotionView, UseView};
use crate::usecase::promotion as uc;

/// Codes a promotion's creation is refused with.
const RULE_CODES: &[&str] = &["invalid_promotion", "invalid_code", "unknown_currency"];
pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    use Auth::*;
    let op = RouteDoc::new;
    let moved = |path: &'static str, summary: &'static str| {
        op("post", path, summary, "admin", Admin)
            .ok::<PromotionView>(200, "the promotion")
            .errors(404, &["not_found"])
            .errors(409, &["invalid_transition"])
    };
    vec![
        (
            op("post", "/api/v1/admin/promotions", "Create a promotion, with its code", "admin", Admin)
                .body::<PromotionBody>("its rules")
                .ok::<PromotionView>(201, "the promotion")
                .link("read", "get_api_v1_admin_promotions_id", "id", "$response.body#/id")
                .link("uses", "get_api_v1_admin_promotions_id_uses", "id", "$response.body#/id")
                .link("codes", "get_api_v1_admin_promotions_id_codes_csv", "id", "$response.body#/id")
                .link("batch", "post_api_v1_admin_promotions_id_batches", "id", "$response.body#/id")
                .link("pause", "post_api_v1_admin_promotions_id_pause", "id", "$response.body#/id")
                .link("resume", "post_api_v1_admin_promotions_id_resume", "id", "$response.body#/id")
                .link("end", "post_api_v1_admin_promotions_id_end", "id", "$response.body#/id")
                .errors(409, &["code_exists"])
                .errors(422, RULE_CODES),
            post(create),
        ),
        (
            op("get", "/api/v1/admin/promotions", "Every promotion, newest first, with its uses", "admin", Admin)
                .ok::<PromotionList>(200, "the promotions"),
            get(list),
        ),
        (
            op(
                "get",
                "/api/v1/admin/promotions/{id}",
                "A promotion: its rules, uses, what it gave away and its batches",
                "admin",
                Admin,
            )
            .ok::<PromotionView>(200, "the promotion")
            .errors(404, &["not_found"]),
            get(show),
        ),
        (moved("/api/v1/admin/promotions/{id}/pause", "Pause a promotion: no new uses until it resumes"), post(pause)),
        (moved("/api/v1/admin/promotions/{id}/resume", "Resume a paused promotion"), post(resume)),
        (
            moved("/api/v1/admin/promotions/{id}/end", "End a promotion for good (orders holding a use keep it)"),
            post(end),
        ),
        (
            op("post", "/api/v1/admin/promotions/{id}/batches", "Generate a batch of single-use codes", "admin", Admin)
                .body::<BatchBody>("how many, and their prefix")
                .ok::<BatchCreated>(201, "the batch and its codes")
                .errors(404, &["not_found"])
                .errors(409, &["promotion_ended"])
                .errors(422, &["invalid_promotion", "invalid_code"]),
            post(add_batch),
        ),
        (
            op(
                "get",
                "/api/v1/admin/promotions/{id}/codes.csv",
                "A promotion's batch codes as CSV (code, batch, used)",
                "admin",
                Admin,
            )
            .query::<CodesQuery>()
            .answer(200, "the codes", Content::Other("text/csv"))
            .errors(400, &["invalid_filter"])
            .errors(404, &["not_found"]),
            get(codes_csv),
        ),
        (
            op("get", "/api/v1/admin/promotions/{id}/uses", "A promotion's uses, newest first", "admin", Admin)
                .query::<UsesQuery>()
                .ok::<UseList>(200, "the uses")
                .errors(400, &["invalid_filter"])
                .errors(404, &["not_found"]),
            get(uses),
        ),
        (
            op(
                "put",
                "/api/v1/baskets/{basket_id}/promotion",
                "Put a promotion code on the basket: refused when it is no code, has ended or is used up; otherwise the basket shows what it takes off, or why it does not apply yet",
                "buyer",
                Buyer,
            )
            .body::<CodeBody>("the code")
            .ok::<BasketView>(200, "the basket, priced with the code")
            .errors(404, &["not_found"])
            .errors(409, &["basket_frozen"])
            .errors(422, &["promotion_unknown", "promotion_expired", "promotion_used_up"])
            .errors(429, &["rate_limited"]),
            put(set_code),
        ),
        (
            op("delete", "/api/v1/baskets/{basket_id}/promotion", "Take the promotion code off the basket", "buyer", Buyer)
                .ok::<BasketView>(200, "the basket")
                .errors(404, &["not_found"])
                .errors(409, &["basket_frozen"])
                .errors(429, &["rate_limited"]),
            axum::routing::delete(remove_code),
        ),
    ]
}

/// A promotion's rules: `percent_off` or `amount_off`, and the limits wanted.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromotionBody {
    /// What the shop calls it (1 to 120 characters).
    name: String,
    /// The code buyers type (3 to 32 letters, digits, `-`, `_`; kept in upper case). Leave it out
    /// for a promotion of batch codes only.
    #[serde(default)]
    code: Option<String>,
    /// A percentage off (1 to 100).
    #[serde(default)]
    percent_off: Option<i64>,
    /// Minor units off, per currency (`{"CNY": 500}`).
    #[serde(default)]
    amount_off: Option<BTreeMap<String, i64>>,
    /// The SKUs it applies to; absent or empty: the whole order.
    #[serde(default)]
    skus: Vec<String>,
    /// The least the order's lines must add up to, per currency; an order in a currency it does
    /// not name cannot use the code.
    #[serde(default)]
    min_spend: BTreeMap<String, i64>,
    /// When it starts and ends (RFC 3339).
    #[serde(default)]
    starts_at: Option<String>,
    #[serde(default)]
    ends_at: Option<String>,
    /// Uses in all (absent: no limit).
    #[serde(default)]
    max_uses: Option<i64>,
    /// Uses per buyer: the checkout's contact, else its buyer session (absent: no limit).
    #[serde(default)]
    per_buyer: Option<i64>,
    /// Only for a buyer's first order.
    #[serde(default)]
    first_order_only: bool,
}

fn instant(field: &str, text: Option<&str>) -> Result<Option<i64>> {
    text.map(|t| {
        let at = time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339)
            .map_err(|_| Error::unprocessable("invalid_promotion", format!("{field} must be an RFC 3339 time")))?;
        i64::try_from(at.unix_timestamp_nanos() / 1_000_000)
            .map_err(|_| Error::unprocessable("invalid_promotion", format!("{field} is out of range")))
    })
    .transpose()
}

impl PromotionBody {
    fn new_promotion(self) -> Result<NewPromotion> {
        let benefit = match (self.percent_off, self.amount_off) {
            (Some(p), None) => Benefit::PercentOff(p),
            (None, Some(a)) => Benefit::AmountOff(a),
            _ => {
                return Err(Error::unprocessable("invalid_promotion", "give either percent_off or amount_off"));
            }
        };
        let rules = Rules {
            benefit,
            skus: self.skus,
            min_spend: self.min_spend,
            starts_at: instant("starts_at", self.starts_at.as_deref())?,
            ends_at: instant("ends_at", self.ends_at.as_deref())?,
            max_uses: self.max_uses,
            per_buyer: self.per_buyer,
            first_order_only: self.first_order_only,
        };
        Ok(NewPromotion { name: self.name, code: self.code, rules })
    }
}

#[derive(Serialize, ToSchema)]
pub struct PromotionList {
    promotions: Vec<PromotionView>,
}

/// A batch to generate.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchBody {
    /// How many codes (1 to 10000).
    #[schema(minimum = 1, maximum = 10000)]
    count: i64,
    /// What each code starts with (up to 12 letters, digits, `-`, `_`).
    #[serde(default)]
    #[schema(max_length = 12, pattern = "^[A-Za-z0-9_-]*$")]
    prefix: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct BatchCreated {
    batch: String,
    codes: Vec<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CodesQuery {
    /// One batch only.
    batch: Option<String>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsesQuery {
    #[param(schema_with = super::schema::page_limit)]
    limit: Option<String>,
    /// Uses made before this time (RFC 3339): the next page.
    before: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct UseList {
    uses: Vec<UseView>,
}

/// A code for a basket.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeBody {
    /// A promotion code (any case).
    #[schema(min_length = 1, max_length = 32)]
    code: String,
}

async fn create(
    State(state): State<AppState>,
    _admin: Admin,
    ApiJson(body): ApiJson<PromotionBody>,
) -> Result<Response> {
    let view = uc::create(&state.cx, &body.new_promotion()?).await?;
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

async fn list(State(state): State<AppState>, _admin: Admin) -> Result<Response> {
    let promotions = crate::store::promotions::list(&state.db, uc::LIST_MAX).await?;
    Ok(axum::Json(PromotionList { promotions }).into_response())
}

async fn show(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    Ok(axum::Json(uc::get(&state.cx, &id).await?).into_response())
}

async fn pause(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    Ok(axum::Json(uc::set_status(&state.cx, &id, uc::status_named("pause")?).await?).into_response())
}

async fn resume(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    Ok(axum::Json(uc::set_status(&state.cx, &id, uc::status_named("resume")?).await?).into_response())
}

async fn end(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    Ok(axum::Json(uc::set_status(&state.cx, &id, uc::status_named("end")?).await?).into_response())
}

async fn add_batch(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<BatchBody>,
) -> Result<Response> {
    let (batch, codes) = uc::add_batch(&state.cx, &id, body.prefix.as_deref(), body.count).await?;
    Ok((StatusCode::CREATED, axum::Json(BatchCreated { batch, codes })).into_response())
}

async fn codes_csv(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
    q: std::result::Result<Query<CodesQuery>, QueryRejection>,
) -> Result<Response> {
    let q = super::api_lists::read_query(q)?;
    codes_file(&state, &id, q.batch.as_deref()).await
}

/// A promotion's batch codes (one batch, or all) as a CSV file: code, batch, used. The admin API
/// and the console serve the same file.
pub(super) async fn codes_file(state: &AppState, id: &str, batch: Option<&str>) -> Result<Response> {
    let rows = crate::store::promotions::batch_codes(&state.db, id, batch).await?;
    let mut out = csv::Writer::from_writer(Vec::new());
    let fail = |_| Error::internal("CSV writing failed");
    out.write_record(["code", "batch", "used"]).map_err(fail)?;
    for r in &rows {
        out.write_record([r.code.as_str(), r.batch.as_str(), if r.used { "yes" } else { "no" }]).map_err(fail)?;
    }
    let body = out.into_inner().map_err(|_| Error::internal("CSV writing failed"))?;
    let disposition = format!("attachment; filename=\"promotion-codes-{}.csv\"", sanitize(id));
    Ok((
        [(header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()), (header::CONTENT_DISPOSITION, disposition)],
        body,
    )
        .into_response())
}

/// A promotion id fit for a file name.
fn sanitize(id: &str) -> String {
    id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').take(64).collect()
}

async fn uses(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
    q: std::result::Result<Query<UsesQuery>, QueryRejection>,
) -> Result<Response> {
    let q = super::api_lists::read_query(q)?;
    uc::get(&state.cx, &id).await?;
    let limit = super::api_lists::page_limit(q.limit.as_ref())?;
    let before = instant("before", q.before.as_deref())
        .map_err(|_| Error::invalid("invalid_filter", "before: an RFC 3339 time"))?;
    let uses = crate::store::promotions::uses(&state.db, &id, limit, before).await?;
    Ok(axum::Json(UseList { uses }).into_response())
}

async fn set_code(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    Path(basket_id): Path<String>,
    ApiJson(body): ApiJson<CodeBody>,
) -> Result<Response> {
    let basket_id = BasketId::parse(&basket_id)?;
    Ok(axum::Json(uc::set_basket_code(&state.cx, &session.id, &basket_id, Some(&body.code)).await?).into_response())
}

async fn remove_code(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    Path(basket_id): Path<String>,
) -> Result<Response> {
    let basket_id = BasketId::parse(&basket_id)?;
    Ok(axum::Json(uc::set_basket_code(&state.cx, &session.id, &basket_id, None).await?).into_response())
}

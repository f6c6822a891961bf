//! JSON API handlers (docs/CONTRACT.md, "HTTP").

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::schema::{
    self, AdminOrderBody, Health, OrderBody, OrderStatusBody, PlacedOrder, Readiness, SessionCreated, SkuList,
};

/// Reconciliation findings shown on the admin's view of one order.
const FINDINGS_SHOWN_MAX: i64 = 100;

use super::flows::{CheckoutBody, RetryBody, place_order, retry_flow};
use super::{Admin, ApiJson, AppState, Buyer, Caller};
use crate::clock::rfc3339;
use crate::domain::checkout::SkuLimits;
use crate::domain::ids::{BasketId, IdempotencyKey, OrderNo, RefundNo, Sku};
use crate::domain::{Currency, Money, OrderStatus};
use crate::error::{Error, Result};
use crate::gateway::Handoff;
use crate::store::catalog::{self, LimitsPatch};
use crate::store::checkout::Placed;
use crate::store::views;
use crate::store::{gauges, refunds};
use crate::usecase::catalog::{self as uc, SkuDraft};
use crate::usecase::payment::{self, query_for_buyer};
use crate::usecase::{lookup, refund};

/// Liveness: the process serves requests (whatever the database does).
pub(super) async fn healthz() -> Response {
    axum::Json(Health { status: "ok" }).into_response()
}

/// Readiness: the database answers and every migration this binary knows is applied, so a load
/// balancer may send traffic here.
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    let unavailable =
        |status, pending| (StatusCode::SERVICE_UNAVAILABLE, axum::Json(Readiness { status, pending })).into_response();
    if let Err(e) = state.db.ping().await {
        tracing::error!(error = %e, "readiness check: the database does not answer");
        return unavailable("database_unavailable", Vec::new());
    }
    match state.db.pending_migrations().await {
        Ok(pending) if pending.is_empty() => {
            axum::Json(Readiness { status: "ready", pending: Vec::new() }).into_response()
        }
        Ok(pending) => unavailable("migrations_pending", pending.iter().map(|(_, name, _)| *name).collect()),
        Err(e) => {
            tracing::error!(error = %e, "readiness check: migrations could not be read");
            unavailable("database_unavailable", Vec::new())
        }
    }
}

/// How long a scrape waits for the database gauges before it answers with the last ones.
const GAUGES_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether `client` may read `/metrics`: any client with `--metrics-public`; else one on this
/// machine (a loopback address, not behind a proxy that names another), or one with the metrics
/// token or the admin token as bearer.
async fn may_read_metrics(state: &AppState, client: &super::guard::Client, headers: &HeaderMap) -> Result<()> {
    // This machine: a loopback peer (or one a trusted proxy names), never an address the shop's
    // server named for a buyer.
    if state.protection.metrics_public || (!client.shop && client.addr.to_canonical().is_loopback()) {
        return Ok(());
    }
    let Some(given) = super::bearer(headers) else { return Err(Error::unauthorized()) };
    let metrics_token = state.protection.metrics_token.as_deref().is_some_and(|expected| {
        let digest = |t: &str| aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, t.as_bytes());
        aws_lc_rs::constant_time::verify_slices_are_equal(digest(given).as_ref(), digest(expected).as_ref()).is_ok()
    });
    if metrics_token || state.is_admin_token(given) {
        return Ok(());
    }
    Err(super::admin::wrong_admin_token(state, Some(client)).await)
}

pub(super) async fn metrics(
    State(state): State<AppState>,
    axum::Extension(client): axum::Extension<super::guard::Client>,
    headers: HeaderMap,
) -> Response {
    if let Err(e) = may_read_metrics(&state, &client, &headers).await {
        return e.into_response();
    }
    // The database gauges are read now, so a scrape never shows counts the monitor has not caught
    // up with; if the database cannot answer in time, the last values are shown.
    let refreshed = tokio::time::timeout(GAUGES_TIMEOUT, gauges::refresh(&state.db, state.webhook_configured)).await;
    if !matches!(refreshed, Ok(Ok(()))) {
        tracing::warn!("metrics: the database gauges could not be read; showing the last values");
    }
    let body = state.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

pub(super) async fn create_session(State(state): State<AppState>) -> Result<Response> {
    let (token, _) = crate::usecase::basket::start_session(&state.cx).await?;
    Ok((StatusCode::CREATED, axum::Json(SessionCreated { token })).into_response())
}

/// A new basket: empty, or with its lines (all of them or nothing).
#[derive(Deserialize, Default, ToSchema)]
pub struct NewBasketBody {
    #[serde(default)]
    #[schema(schema_with = schema::basket_lines)]
    lines: Vec<schema::NewLine>,
}

pub(super) async fn create_basket(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    ApiJson(body): ApiJson<NewBasketBody>,
) -> Result<Response> {
    let lines = body.lines.into_iter().map(|l| (l.sku, l.quantity)).collect();
    let basket = crate::usecase::basket::open_basket(&state.cx, &session.id, lines).await?;
    Ok((StatusCode::CREATED, axum::Json(basket)).into_response())
}

/// A basket line's new quantity.
#[derive(Deserialize, ToSchema)]
pub struct LineBody {
    #[schema(schema_with = schema::set_quantity)]
    quantity: i64,
}

pub(super) async fn set_line(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    Path((basket_id, sku)): Path<(String, String)>,
    ApiJson(body): ApiJson<LineBody>,
) -> Result<Response> {
    let basket_id = BasketId::parse(&basket_id)?;
    let sku = Sku::parse(&sku)?;
    let basket = crate::usecase::basket::set_line(&state.cx, &session.id, &basket_id, &sku, body.quantity).await?;
    Ok(axum::Json(basket).into_response())
}

pub(super) async fn get_basket(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    Path(basket_id): Path<String>,
) -> Result<Response> {
    let basket_id = BasketId::parse(&basket_id)?;
    Ok(axum::Json(crate::usecase::promotion::basket(&state.cx, &session.id, &basket_id).await?).into_response())
}

pub(super) async fn retry_payment(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    Path(order_no): Path<String>,
    ApiJson(body): ApiJson<RetryBody>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let session = owner(&caller)?;
    let (placed, handoff) = retry_flow(&state, session, &order_no, &body, super::negotiate::device(&headers)).await?;
    Ok((StatusCode::CREATED, axum::Json(placed_body(&placed, Some(&handoff)))).into_response())
}

/// The buyer's session id, or `None` for the admin (who may act on any order).
fn owner(caller: &Caller) -> Result<Option<&crate::domain::ids::SessionId>> {
    match (&caller.session, caller.admin) {
        (_, true) => Ok(None),
        (Some(s), false) => Ok(Some(&s.id)),
        (None, false) => Err(Error::unauthorized()),
    }
}

/// How to cancel: with `rebasket`, the order's lines come back in a new editable basket.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelBody {
    #[serde(default)]
    rebasket: bool,
}

pub(super) async fn cancel_order(
    State(state): State<AppState>,
    caller: Caller,
    Path(order_no): Path<String>,
    ApiJson(body): ApiJson<CancelBody>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let session = owner(&caller)?;
    let current = views::get_order(&state.db, &order_no, false).await?;
    crate::domain::decide::may_act_on(session.map(|s| s.as_str()), &current.session_id)?;
    let basket_id = payment::cancel(&state.cx, session, &current, body.rebasket).await?;
    let answer = OrderStatusBody {
        order_no: order_no.to_string(),
        status: OrderStatus::Cancelled.as_str().to_string(),
        basket_id: basket_id.map(|id| id.to_string()),
    };
    Ok(axum::Json(answer).into_response())
}

/// A refund: the shop's number for it (its idempotency key) and either the amount or units of
/// named lines (what was paid for them: a discounted line pays back its share of the discount).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundBody {
    #[schema(schema_with = schema::refund_no)]
    refund_no: String,
    #[serde(default)]
    #[schema(schema_with = schema::refund_amount)]
    amount_minor: Option<i64>,
    /// Units of the order's lines to pay back, instead of an amount.
    #[serde(default)]
    #[schema(schema_with = schema::refund_lines)]
    lines: Vec<RefundLineBody>,
    #[serde(default)]
    #[schema(schema_with = schema::refund_reason)]
    reason: String,
    /// When the refunds leave nothing captured, give the order's promotion use back.
    #[serde(default)]
    return_promotion: bool,
}

/// Units of one order line to refund.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundLineBody {
    line_no: i64,
    quantity: i64,
}

pub(super) async fn request_refund(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
    ApiJson(body): ApiJson<RefundBody>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let refund_no = RefundNo::parse(&body.refund_no)?;
    let ask = crate::store::refunds::RefundAsk {
        amount_minor: body.amount_minor,
        lines: body.lines.iter().map(|l| (l.line_no, l.quantity)).collect(),
        reason: body.reason,
        return_promotion: body.return_promotion,
    };
    let (refund, created) = refund::request_asked(&state.cx, &order_no, &refund_no, &ask).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(refund)).into_response())
}

/// How a physical order was shipped: an express shipment names its tracking number and company;
/// without them `logistics` says how the goods went (`same_city` when left out). It is what a
/// mini-program payment's shipping report tells WeChat.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeliverBody {
    #[serde(default)]
    #[schema(schema_with = super::schema::logistics_schema)]
    logistics: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::tracking_no_schema)]
    tracking_no: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::express_company_schema)]
    express_company: Option<String>,
}

pub(super) async fn mark_delivered(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
    ApiJson(body): ApiJson<DeliverBody>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let shipment = crate::usecase::fulfilment::Shipment {
        logistics: body.logistics.as_deref(),
        tracking_no: body.tracking_no.as_deref(),
        express_company: body.express_company.as_deref(),
    };
    crate::usecase::fulfilment::deliver(&state.cx, &order_no, shipment).await?;
    let status = OrderStatus::Delivered.as_str().to_string();
    Ok(axum::Json(OrderStatusBody { order_no: order_no.to_string(), status, basket_id: None }).into_response())
}

pub(super) async fn accept_late(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let status = crate::usecase::fulfilment::accept_late(&state.cx, &order_no).await?.as_str().to_string();
    Ok(axum::Json(OrderStatusBody { order_no: order_no.to_string(), status, basket_id: None }).into_response())
}

/// Card keys to import, one per item (surrounding spaces trimmed).
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeysBody {
    #[schema(schema_with = schema::card_keys)]
    keys: Vec<String>,
}

pub(super) async fn import_keys(
    State(state): State<AppState>,
    _admin: Admin,
    Path(sku): Path<String>,
    ApiJson(body): ApiJson<KeysBody>,
) -> Result<Response> {
    let sku = Sku::parse(&sku)?;
    Ok(axum::Json(uc::import_keys(&state.cx, &sku, &body.keys).await?).into_response())
}

/// The order as its buyer (and admins) read it, with the card keys of delivered digital lines.
pub(super) async fn order_body(
    state: &AppState,
    order_no: &OrderNo,
    admin: bool,
    viewer: &crate::store::lookup::Viewer,
) -> Result<OrderBody> {
    let mut order = views::get_order(&state.db, order_no, admin).await?;
    let channel = if admin { lookup::Channel::Admin } else { lookup::Channel::Api };
    let keys = lookup::reveal_keys(&state.cx, order_no, channel, viewer).await?;
    for (i, line) in order.lines.iter_mut().enumerate() {
        let line_no = i64::try_from(i).unwrap_or(i64::MAX) + 1;
        line.keys = keys.keys.iter().filter(|(n, _)| *n == line_no).map(|(_, k)| k.clone()).collect();
        let unreadable = keys.unreadable_on(line_no);
        line.keys_unavailable = (unreadable > 0).then_some(unreadable);
        let held = keys.held_on(line_no);
        line.keys_held = (held > 0).then_some(held);
    }
    let refunds = refunds::list_for_order(&state.db, order_no).await?;
    Ok(OrderBody { order, refunds })
}

pub fn placed_body(placed: &Placed, handoff: Option<&Handoff>) -> PlacedOrder {
    PlacedOrder {
        order_no: placed.order_no.to_string(),
        attempt_ref: placed.attempt_ref.to_string(),
        status: placed.status.as_str(),
        total_minor: placed.total.amount_minor(),
        currency: placed.total.currency().code().to_string(),
        expires_at: rfc3339(placed.expires_at),
        merchant_reference: placed.shop.merchant_reference.as_ref().map(|r| r.as_str().to_string()),
        metadata: placed.shop.metadata.clone(),
        payment: handoff.cloned(),
    }
}

pub(super) async fn checkout_json(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    lang: super::i18n::Lang,
    Path(basket_id): Path<String>,
    headers: HeaderMap,
    axum::Extension(client): axum::Extension<super::guard::Client>,
    ApiJson(body): ApiJson<CheckoutBody>,
) -> Result<Response> {
    let basket_id = BasketId::parse(&basket_id)?;
    let key = headers
        .get("idempotency-key")
        .map(|v| v.to_str().map_err(|_| Error::invalid("invalid_idempotency_key", "Idempotency-Key must be ASCII")))
        .transpose()?
        .map(IdempotencyKey::parse)
        .transpose()?;
    let (placed, handoff) = place_order(
        &state,
        &session.id,
        &basket_id,
        &body,
        key.as_ref(),
        super::flows::Asker { client: &client, device: super::negotiate::device(&headers), lang },
    )
    .await?;
    if super::negotiate::wants_html(&headers) {
        return Ok(super::pages::handoff_page(&state, lang, &placed, handoff.as_ref()).await);
    }
    let mut response = (StatusCode::CREATED, axum::Json(placed_body(&placed, handoff.as_ref()))).into_response();
    if !placed.created {
        response.headers_mut().insert("idempotent-replayed", header::HeaderValue::from_static("true"));
    }
    Ok(response)
}

#[derive(Deserialize, Default, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct OrderQuery {
    /// Ask the gateway now if the order is still pending (after `wx.requestPayment` succeeded,
    /// or a redirect back): at most once per [`payment::BUYER_QUERY_GAP_MS`] per attempt.
    #[serde(default)]
    refresh: bool,
}

pub(super) async fn get_order(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    client: Option<axum::Extension<super::guard::Client>>,
    Path(order_no): Path<String>,
    query: std::result::Result<Query<OrderQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    if caller.session.is_none() && !caller.admin {
        return Err(Error::unauthorized());
    }
    let Query(query) =
        query.map_err(|_| Error::unprocessable("invalid_query", "the only query parameter is refresh=true"))?;
    super::note_order(&order_no);
    let order = views::get_order(&state.db, &order_no, false).await?;
    let own = caller.session.as_ref().is_some_and(|s| s.id == order.session_id);
    if !own && !caller.admin {
        // Same answer as a missing order: another buyer's order numbers are not confirmed.
        return Err(Error::not_found("order"));
    }
    if query.refresh {
        query_for_buyer(&state.cx, &order).await;
    }
    let viewer = super::viewer(client.as_ref().map(|c| &c.0), &headers);
    Ok(axum::Json(order_body(&state, &order_no, false, &viewer).await?).into_response())
}

/// A new SKU.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SkuBody {
    #[schema(schema_with = schema::sku_code)]
    sku: String,
    #[schema(schema_with = schema::sku_name)]
    name: String,
    #[schema(schema_with = schema::amount_minor)]
    price_minor: i64,
    #[schema(schema_with = schema::currency)]
    currency: String,
    /// Units on hand (a digital SKU's stock is its keys: ignored).
    #[serde(default)]
    #[schema(schema_with = schema::stock)]
    stock: i64,
    #[serde(default)]
    #[schema(schema_with = schema::sku_kind)]
    kind: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::max_per_order)]
    max_per_order: Option<i64>,
    #[serde(default)]
    #[schema(schema_with = schema::hold_seconds)]
    hold_seconds: Option<i64>,
    /// Required, and true, with a price of 0: the goods are given away on purpose.
    #[serde(default)]
    free: bool,
}

pub(super) async fn create_sku(
    State(state): State<AppState>,
    _admin: Admin,
    ApiJson(body): ApiJson<SkuBody>,
) -> Result<Response> {
    let draft = SkuDraft {
        sku: &body.sku,
        name: &body.name,
        kind: body.kind.as_deref(),
        price: Money::new(body.price_minor, Currency::parse(&body.currency)?)?,
        free: body.free,
        stock: body.stock,
        limits: SkuLimits { max_per_order: body.max_per_order, hold_seconds: body.hold_seconds },
    };
    let view = uc::create_sku(&state.cx, &draft).await?;
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

pub(super) async fn list_skus(State(state): State<AppState>, _admin: Admin) -> Result<Response> {
    Ok(axum::Json(SkuList { skus: catalog::list_skus(&state.db).await? }).into_response())
}

pub(super) async fn get_sku(State(state): State<AppState>, _admin: Admin, Path(sku): Path<String>) -> Result<Response> {
    let sku = Sku::parse(&sku)?;
    Ok(axum::Json(catalog::get_sku(&state.db, &sku).await?).into_response())
}

/// Changes to a SKU: each field present is changed; a limit set to `null` is removed.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SkuPatch {
    #[serde(default)]
    #[schema(schema_with = schema::sku_name_change)]
    name: Option<String>,
    #[serde(default)]
    #[schema(schema_with = schema::amount_change)]
    price_minor: Option<i64>,
    /// Absent: unchanged; `null`: removed.
    #[serde(default, deserialize_with = "present")]
    #[schema(schema_with = schema::max_per_order)]
    max_per_order: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    #[schema(schema_with = schema::hold_seconds)]
    hold_seconds: Option<Option<i64>>,
    /// Required, and true, with a new price of 0: the goods are given away on purpose.
    #[serde(default)]
    free: bool,
}

/// A field that is present, with a value or `null` (an absent one stays `None` by `default`).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

pub(super) async fn update_sku(
    State(state): State<AppState>,
    _admin: Admin,
    Path(sku): Path<String>,
    ApiJson(body): ApiJson<SkuPatch>,
) -> Result<Response> {
    let sku = Sku::parse(&sku)?;
    let limits = LimitsPatch { max_per_order: body.max_per_order, hold_seconds: body.hold_seconds };
    let price = body.price_minor.map(|p| (p, body.free));
    let view = uc::edit_sku(&state.cx, &sku, body.name.as_deref(), price, limits).await?;
    Ok(axum::Json(view).into_response())
}

/// A stock movement.
#[derive(Deserialize, ToSchema)]
pub struct StockBody {
    #[schema(schema_with = schema::stock_delta)]
    delta: i64,
}

pub(super) async fn adjust_stock(
    State(state): State<AppState>,
    _admin: Admin,
    Path(sku): Path<String>,
    ApiJson(body): ApiJson<StockBody>,
) -> Result<Response> {
    let sku = Sku::parse(&sku)?;
    Ok(axum::Json(crate::usecase::catalog::adjust_stock(&state.cx, &sku, body.delta).await?).into_response())
}

pub(super) async fn admin_order(
    State(state): State<AppState>,
    _admin: Admin,
    headers: HeaderMap,
    client: Option<axum::Extension<super::guard::Client>>,
    Path(order_no): Path<String>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let viewer = super::viewer(client.as_ref().map(|c| &c.0), &headers);
    let order = order_body(&state, &order_no, true, &viewer).await?;
    let mail = crate::store::mail::of_order(&state.db, &order_no).await?;
    let subscribe_messages = crate::store::subscribe::of_order(&state.db, &order_no).await?;
    let reconciliation = crate::store::reconcile::list_findings(&state.db, Some(&order_no), FINDINGS_SHOWN_MAX).await?;
    let shipping_report = crate::store::shipping::report_of(&state.db, &order_no).await?;
    let second_captures = crate::store::second_captures::of_order(&state.db, &order_no).await?;
    Ok(axum::Json(AdminOrderBody { order, reconciliation, second_captures, shipping_report, mail, subscribe_messages })
        .into_response())
}

/// Runs every request-body decoder of the API on `data` (JSON bodies and HTML forms). For the fuzz
/// targets in `fuzz/`: decoding must refuse bad input with an error, never panic.
#[doc(hidden)]
pub fn decode_bodies_for_fuzzing(data: &[u8]) {
    let _ = serde_json::from_slice::<LineBody>(data);
    let _ = serde_json::from_slice::<CheckoutBody>(data);
    let _ = serde_json::from_slice::<RetryBody>(data);
    let _ = serde_json::from_slice::<SkuBody>(data);
    let _ = serde_json::from_slice::<SkuPatch>(data);
    let _ = serde_json::from_slice::<StockBody>(data);
    let _ = serde_json::from_slice::<RefundBody>(data);
    let _ = serde_json::from_slice::<CancelBody>(data);
    let _ = serde_json::from_slice::<KeysBody>(data);
    let _ = serde_urlencoded::from_bytes::<std::collections::BTreeMap<String, String>>(data);
    let _ = serde_json::from_slice::<crate::gateway::sandbox::WireNotification>(data);
}

//! JSON API handlers (docs/CONTRACT.md, "HTTP").

use crate::store::sql;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::flows::{
    CheckoutBody, RetryBody, SkuDraft, cancel_flow, create_sku_flow, edit_sku_flow, import_keys_flow, place_order,
    query_for_buyer, refund_flow, retry_flow,
};
use super::{Admin, ApiJson, AppState, Buyer, Caller, RawBody};
use crate::clock::rfc3339;
use crate::domain::checkout::SkuLimits;
use crate::domain::ids::{BasketId, IdempotencyKey, OrderNo, RefundNo, Sku};
use crate::domain::{Currency, Money, OrderStatus};
use crate::error::{Error, Result};
use crate::gateway::Handoff;
use crate::store::catalog::{self, LimitsPatch};
use crate::store::checkout::Placed;
use crate::store::payments::{self, Applied};
use crate::store::views;
use crate::store::{fulfilment, orders, refunds};

/// Liveness: the process serves requests (whatever the database does).
pub(super) async fn healthz() -> Response {
    axum::Json(json!({"status": "ok"})).into_response()
}

/// Readiness: the database answers and every migration this binary knows is applied, so a load
/// balancer may send traffic here.
pub(super) async fn readyz(State(state): State<AppState>) -> Response {
    let unavailable = |body: Value| (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    if let Err(e) = sql::query_scalar::<i64>("SELECT 1").fetch_one(state.db.read_pool()).await {
        tracing::error!(error = %e, "readiness check: the database does not answer");
        return unavailable(json!({"status": "database_unavailable"}));
    }
    match state.db.pending_migrations().await {
        Ok(pending) if pending.is_empty() => axum::Json(json!({"status": "ready"})).into_response(),
        Ok(pending) => {
            let names: Vec<&str> = pending.iter().map(|(_, name, _)| *name).collect();
            unavailable(json!({"status": "migrations_pending", "pending": names}))
        }
        Err(e) => {
            tracing::error!(error = %e, "readiness check: migrations could not be read");
            unavailable(json!({"status": "database_unavailable"}))
        }
    }
}

pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let body = state.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

pub(super) async fn create_session(State(state): State<AppState>) -> Result<Response> {
    let (token, _) = catalog::create_session(&state.db, state.now_ms()).await?;
    Ok((StatusCode::CREATED, axum::Json(json!({"token": token}))).into_response())
}

#[derive(Deserialize, Default)]
pub(super) struct NewBasketBody {
    #[serde(default)]
    lines: Vec<NewLine>,
}

#[derive(Deserialize)]
pub(super) struct NewLine {
    sku: String,
    quantity: i64,
}

pub(super) async fn create_basket(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    ApiJson(body): ApiJson<NewBasketBody>,
) -> Result<Response> {
    let lines = body.lines.into_iter().map(|l| (l.sku, l.quantity)).collect();
    let basket = catalog::open_basket(&state.db, &session.id, lines, state.now_ms()).await?;
    Ok((StatusCode::CREATED, axum::Json(basket)).into_response())
}

#[derive(Deserialize)]
pub(super) struct LineBody {
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
    let basket =
        catalog::set_basket_line(&state.db, &session.id, &basket_id, &sku, body.quantity, state.now_ms()).await?;
    Ok(axum::Json(basket).into_response())
}

pub(super) async fn get_basket(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    Path(basket_id): Path<String>,
) -> Result<Response> {
    let basket_id = BasketId::parse(&basket_id)?;
    Ok(axum::Json(catalog::get_basket(&state.db, &session.id, &basket_id).await?).into_response())
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
    let (placed, handoff) = retry_flow(&state, session, &order_no, &body, device(&headers)).await?;
    Ok((StatusCode::CREATED, axum::Json(placed_json(&placed, Some(&handoff)))).into_response())
}

/// The buyer's session id, or `None` for the admin (who may act on any order).
fn owner(caller: &Caller) -> Result<Option<&str>> {
    match (&caller.session, caller.admin) {
        (_, true) => Ok(None),
        (Some(s), false) => Ok(Some(s.id.as_str())),
        (None, false) => Err(Error::unauthorized()),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct CancelBody {
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
    crate::domain::decide::may_act_on(session, &current.session_id)?;
    let basket_id = cancel_flow(&state, session, &current, body.rebasket).await?;
    let mut answer = json!({"order_no": order_no, "status": OrderStatus::Cancelled.as_str()});
    if let Some(id) = basket_id {
        answer["basket_id"] = json!(id);
    }
    Ok(axum::Json(answer).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RefundBody {
    refund_no: String,
    amount_minor: i64,
    #[serde(default)]
    reason: String,
}

pub(super) async fn request_refund(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
    ApiJson(body): ApiJson<RefundBody>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let refund_no = RefundNo::parse(&body.refund_no)?;
    let (refund, created) = refund_flow(&state, &order_no, &refund_no, body.amount_minor, &body.reason).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(refund)).into_response())
}

pub(super) async fn mark_delivered(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    fulfilment::mark_delivered(&state.db, &order_no, state.now_ms()).await?;
    Ok(axum::Json(json!({"order_no": order_no, "status": "delivered"})).into_response())
}

pub(super) async fn accept_late(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    orders::accept_late_payment(&state.db, &order_no, state.now_ms()).await?;
    let order = views::get_order(&state.db, &order_no, false).await?;
    Ok(axum::Json(json!({"order_no": order_no, "status": order.status})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct KeysBody {
    keys: Vec<String>,
}

pub(super) async fn import_keys(
    State(state): State<AppState>,
    _admin: Admin,
    Path(sku): Path<String>,
    ApiJson(body): ApiJson<KeysBody>,
) -> Result<Response> {
    let sku = Sku::parse(&sku)?;
    Ok(axum::Json(import_keys_flow(&state, &sku, &body.keys).await?).into_response())
}

/// The order as JSON, with the card keys of delivered digital lines (for its buyer and admins).
pub(super) async fn order_json(state: &AppState, order_no: &OrderNo, admin: bool) -> Result<Value> {
    let order = views::get_order(&state.db, order_no, admin).await?;
    let keys = fulfilment::order_keys(&state.db, state.vault.as_deref(), order_no, state.now_ms()).await?;
    let mut value = serde_json::to_value(&order).map_err(|e| Error::internal(e.to_string()))?;
    if let Some(lines) = value["lines"].as_array_mut() {
        for (i, line) in lines.iter_mut().enumerate() {
            let line_no = i64::try_from(i).unwrap_or(i64::MAX) + 1;
            let line_keys: Vec<&String> = keys.keys.iter().filter(|(n, _)| *n == line_no).map(|(_, k)| k).collect();
            if !line_keys.is_empty() {
                line["keys"] = json!(line_keys);
            }
            let unreadable = keys.unreadable_on(line_no);
            if unreadable > 0 {
                line["keys_unavailable"] = json!(unreadable);
            }
        }
    }
    value["refunds"] = serde_json::to_value(refunds::list_for_order(&state.db, order_no).await?)
        .map_err(|e| Error::internal(e.to_string()))?;
    Ok(value)
}

pub fn placed_json(placed: &Placed, handoff: Option<&Handoff>) -> Value {
    json!({
        "order_no": placed.order_no,
        "attempt_ref": placed.attempt_ref,
        "status": placed.status.as_str(),
        "total_minor": placed.total.amount_minor(),
        "currency": placed.total.currency().code(),
        "expires_at": rfc3339(placed.expires_at),
        "merchant_reference": placed.shop.merchant_reference,
        "metadata": placed.shop.metadata,
        "payment": handoff,
    })
}

/// The buyer's device, from the request's `User-Agent` (chooses a channel when none is named).
pub(super) fn device(headers: &HeaderMap) -> crate::domain::channel::Device {
    crate::domain::channel::device_of(headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()))
}

fn wants_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

pub(super) async fn checkout_json(
    State(state): State<AppState>,
    Buyer(session): Buyer,
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
    let (placed, handoff) =
        place_order(&state, &session.id, &basket_id, &body, key.as_ref(), client.addr, device(&headers)).await?;
    if wants_html(&headers) {
        return Ok(super::pages::handoff_page(&placed, handoff.as_ref()));
    }
    let mut response = (StatusCode::CREATED, axum::Json(placed_json(&placed, handoff.as_ref()))).into_response();
    if !placed.created {
        response.headers_mut().insert("idempotent-replayed", header::HeaderValue::from_static("true"));
    }
    Ok(response)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct OrderQuery {
    /// Ask the gateway now if the order is still pending (after `wx.requestPayment` succeeded,
    /// or a redirect back): at most once per [`BUYER_QUERY_GAP_MS`] per attempt.
    #[serde(default)]
    refresh: bool,
}

pub(super) async fn get_order(
    State(state): State<AppState>,
    caller: Caller,
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
        query_for_buyer(&state, &order).await;
    }
    Ok(axum::Json(order_json(&state, &order_no, false).await?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SkuBody {
    sku: String,
    name: String,
    price_minor: i64,
    currency: String,
    #[serde(default)]
    stock: i64,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    max_per_order: Option<i64>,
    #[serde(default)]
    hold_seconds: Option<i64>,
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
        stock: body.stock,
        limits: SkuLimits { max_per_order: body.max_per_order, hold_seconds: body.hold_seconds },
    };
    let view = create_sku_flow(&state, &draft).await?;
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

pub(super) async fn list_skus(State(state): State<AppState>, _admin: Admin) -> Result<Response> {
    Ok(axum::Json(json!({"skus": catalog::list_skus(&state.db).await?})).into_response())
}

pub(super) async fn get_sku(State(state): State<AppState>, _admin: Admin, Path(sku): Path<String>) -> Result<Response> {
    let sku = Sku::parse(&sku)?;
    Ok(axum::Json(catalog::get_sku(&state.db, &sku).await?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SkuPatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    price_minor: Option<i64>,
    /// Absent: unchanged; `null`: removed.
    #[serde(default, deserialize_with = "present")]
    max_per_order: Option<Option<i64>>,
    #[serde(default, deserialize_with = "present")]
    hold_seconds: Option<Option<i64>>,
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
    let view = edit_sku_flow(&state, &sku, body.name.as_deref(), body.price_minor, limits).await?;
    Ok(axum::Json(view).into_response())
}

#[derive(Deserialize)]
pub(super) struct StockBody {
    delta: i64,
}

pub(super) async fn adjust_stock(
    State(state): State<AppState>,
    _admin: Admin,
    Path(sku): Path<String>,
    ApiJson(body): ApiJson<StockBody>,
) -> Result<Response> {
    let sku = Sku::parse(&sku)?;
    Ok(axum::Json(catalog::adjust_stock(&state.db, &sku, body.delta, state.now_ms()).await?).into_response())
}

pub(super) async fn admin_order(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let mut value = order_json(&state, &order_no, true).await?;
    let findings = crate::store::reconcile::list_findings(&state.db, Some(&order_no), 100).await?;
    value["reconciliation"] = serde_json::to_value(findings).map_err(|e| Error::internal(e.to_string()))?;
    Ok(axum::Json(value).into_response())
}

/// Gateway notifications: verify, store, apply once, and answer in the gateway's own words.
pub(super) async fn notify(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: std::result::Result<RawBody, Error>,
) -> Response {
    let Some(gateway) = state.gateways.get(&name).cloned() else {
        return Error::not_found("gateway").into_response();
    };
    let reply = |r: crate::gateway::Reply| {
        (
            StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST),
            [(header::CONTENT_TYPE, r.content_type)],
            r.body,
        )
            .into_response()
    };
    let body = match body {
        Ok(RawBody(b)) => b,
        Err(e) => {
            let status = if e.code() == "payload_too_large" { 413 } else { 400 };
            let mut r = gateway.nack(e.code(), &e.to_string());
            r.status = status;
            return reply(r);
        }
    };
    let now = state.now_ms();
    match gateway.verify(&headers, &body, now) {
        Err(rejection) if rejection.code == crate::gateway::IGNORED_EVENT => {
            // Genuine, but nothing kassa acts on (another event type): acknowledged, not stored.
            tracing::info!(gateway = %name, detail = %rejection.detail, "notification acknowledged and ignored");
            reply(gateway.ack())
        }
        Err(rejection) => {
            tracing::warn!(gateway = %name, code = rejection.code, detail = %rejection.detail, "notification rejected");
            let reason = format!("{}: {}", rejection.code, rejection.detail);
            if let Err(e) = payments::record_rejected(
                &state.db,
                gateway.name(),
                rejection.claimed_event_id.as_deref(),
                &reason,
                &body,
                now,
            )
            .await
            {
                tracing::error!(error = %e, "could not record a rejected notification");
            }
            reply(gateway.nack(rejection.code, &rejection.detail))
        }
        Ok(event) => {
            tracing::Span::current().record("attempt_ref", event.attempt_ref.as_str());
            let span = tracing::info_span!("notification", gateway = %name, event_id = %event.event_id, attempt_ref = %event.attempt_ref);
            let applied =
                tracing::Instrument::instrument(payments::apply_event(&state.db, &event, state.late_policy, now), span)
                    .await;
            match applied {
                Ok(Applied::Rejected { code, reason }) => {
                    tracing::warn!(code, reason = %reason, "notification refused");
                    reply(gateway.nack(code, &reason))
                }
                Ok(applied) => {
                    tracing::info!(result = ?applied, "notification applied");
                    reply(gateway.ack())
                }
                Err(e) => {
                    // Not acknowledged: the gateway will retry.
                    tracing::error!(error = %e, "notification could not be applied");
                    reply(crate::gateway::json_error_reply(500, "internal", "try again later"))
                }
            }
        }
    }
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

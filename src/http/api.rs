//! JSON API handlers (CONTRACT.md "HTTP").

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Admin, ApiJson, AppState, Auth, Buyer, Caller, RawBody, RouteDoc};
use crate::clock::rfc3339;
use crate::domain::{Currency, Money, OrderStatus, ids};
use crate::error::{Error, Result};
use crate::gateway::{Handoff, HandoffRequest};
use crate::store::catalog::{self, NewSku, SkuKind};
use crate::store::checkout::{self, ConfirmRequest, Placed};
use crate::store::payments::{self, Applied};

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    use Auth::*;
    let doc = |method, path, summary, tag, auth, body: Option<Value>, responses| RouteDoc {
        method,
        path,
        summary,
        tag,
        auth,
        body,
        responses,
    };
    vec![
        (
            doc(
                "get",
                "/healthz",
                "Liveness and database reachability",
                "operations",
                None,
                Option::None,
                &[(200, "ok"), (503, "database unreachable")],
            ),
            get(healthz),
        ),
        (
            doc(
                "get",
                "/metrics",
                "Prometheus metrics (text format)",
                "operations",
                None,
                Option::None,
                &[(200, "metrics")],
            ),
            get(metrics),
        ),
        (
            doc(
                "get",
                "/openapi.json",
                "This document",
                "operations",
                None,
                Option::None,
                &[(200, "OpenAPI 3.1 document")],
            ),
            get(super::openapi::serve),
        ),
        (
            doc(
                "post",
                "/api/v1/sessions",
                "Create an anonymous buyer; returns its bearer token",
                "buyer",
                None,
                Option::None,
                &[(201, "{token}")],
            ),
            post(create_session),
        ),
        (
            doc(
                "post",
                "/api/v1/baskets",
                "Create an empty basket",
                "buyer",
                Buyer,
                Option::None,
                &[(201, "{basket_id}"), (401, "unauthorized")],
            ),
            post(create_basket),
        ),
        (
            doc(
                "put",
                "/api/v1/baskets/{basket_id}/lines/{sku}",
                "Set a line's quantity (0 removes it)",
                "buyer",
                Buyer,
                Some(
                    json!({"type": "object", "required": ["quantity"], "properties": {"quantity": {"type": "integer", "minimum": 0, "maximum": catalog::LINE_QUANTITY_MAX}}}),
                ),
                &[
                    (200, "the basket"),
                    (404, "not_found"),
                    (409, "basket_frozen"),
                    (422, "invalid_quantity / currency_mismatch"),
                ],
            ),
            put(set_line),
        ),
        (
            doc(
                "get",
                "/api/v1/baskets/{basket_id}",
                "The basket with its lines and quote",
                "buyer",
                Buyer,
                Option::None,
                &[(200, "the basket"), (404, "not_found")],
            ),
            get(get_basket),
        ),
        (
            doc(
                "post",
                "/api/v1/baskets/{basket_id}/checkout",
                "Confirm: create the pending order and its payment attempt; returns the hand-off (HTML form page with Accept: text/html). Optional Idempotency-Key header.",
                "buyer",
                Buyer,
                Some(
                    json!({"type": "object", "properties": {"gateway": {"type": "string", "default": "sandbox"}, "channel": {"type": "string"}, "payer": {"type": "object"}}}),
                ),
                &[
                    (201, "{order_no, attempt_ref, expires_at, payment}"),
                    (409, "out_of_stock / price_changed"),
                    (422, "basket_empty / unknown_gateway"),
                    (502, "gateway_unavailable"),
                ],
            ),
            post(checkout_json),
        ),
        (
            doc(
                "get",
                "/api/v1/orders/{order_no}",
                "Order status, lines and attempts (own orders only, or admin)",
                "buyer",
                Buyer,
                Option::None,
                &[(200, "the order"), (403, "forbidden"), (404, "not_found")],
            ),
            get(get_order),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/skus",
                "Create a SKU",
                "admin",
                Admin,
                Some(
                    json!({"type": "object", "required": ["sku", "name", "price_minor", "currency"], "properties": {"sku": {"type": "string"}, "name": {"type": "string"}, "price_minor": {"type": "integer", "minimum": 0}, "currency": {"type": "string"}, "stock": {"type": "integer", "minimum": 0}, "kind": {"type": "string", "enum": ["physical"]}}}),
                ),
                &[(201, "the SKU"), (409, "sku_exists"), (422, "invalid input")],
            ),
            post(create_sku).get(list_skus),
        ),
        (
            doc(
                "get",
                "/api/v1/admin/skus/{sku}",
                "Stock of a SKU: on_hand, reserved, sold, available (PATCH: change price or name)",
                "admin",
                Admin,
                Some(
                    json!({"type": "object", "properties": {"name": {"type": "string"}, "price_minor": {"type": "integer", "minimum": 0}}}),
                ),
                &[(200, "the SKU"), (404, "not_found")],
            ),
            get(get_sku).patch(update_sku),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/skus/{sku}/stock",
                "Restock (positive delta) or write off (negative)",
                "admin",
                Admin,
                Some(json!({"type": "object", "required": ["delta"], "properties": {"delta": {"type": "integer"}}})),
                &[(200, "the SKU"), (409, "insufficient_stock")],
            ),
            post(adjust_stock),
        ),
        (
            doc(
                "get",
                "/api/v1/admin/orders/{order_no}",
                "Order with attempts, refunds and its event log",
                "admin",
                Admin,
                Option::None,
                &[(200, "the order"), (404, "not_found")],
            ),
            get(admin_order),
        ),
        (
            doc(
                "post",
                "/notify/{gateway}",
                "Gateway notification; answered with the gateway's own acknowledgement",
                "gateways",
                None,
                Option::None,
                &[
                    (200, "accepted or duplicate"),
                    (400, "invalid_signature / malformed_body / mismatch"),
                    (404, "unknown gateway"),
                ],
            ),
            post(notify),
        ),
    ]
}

async fn healthz(State(state): State<AppState>) -> Response {
    match sqlx::query_scalar::<_, i64>("SELECT 1").fetch_one(state.db.read_pool()).await {
        Ok(_) => axum::Json(json!({"status": "ok"})).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "health check failed");
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(json!({"status": "unavailable"}))).into_response()
        }
    }
}

async fn metrics(State(state): State<AppState>) -> Response {
    let body = state.metrics.as_ref().map(|h| h.render()).unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

async fn create_session(State(state): State<AppState>) -> Result<Response> {
    let (token, _) = catalog::create_session(&state.db, state.now_ms()).await?;
    Ok((StatusCode::CREATED, axum::Json(json!({"token": token}))).into_response())
}

async fn create_basket(State(state): State<AppState>, Buyer(session): Buyer) -> Result<Response> {
    let id = catalog::create_basket(&state.db, &session.id, state.now_ms()).await?;
    Ok((StatusCode::CREATED, axum::Json(json!({"basket_id": id}))).into_response())
}

fn plain(id: &str, what: &str) -> Result<()> {
    if ids::is_plain_id(id) { Ok(()) } else { Err(Error::not_found(what)) }
}

#[derive(Deserialize)]
struct LineBody {
    quantity: i64,
}

async fn set_line(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    Path((basket_id, sku)): Path<(String, String)>,
    ApiJson(body): ApiJson<LineBody>,
) -> Result<Response> {
    plain(&basket_id, "basket")?;
    plain(&sku, "SKU")?;
    catalog::set_basket_line(&state.db, &session.id, &basket_id, &sku, body.quantity, state.now_ms()).await?;
    let basket = catalog::get_basket(&state.db, &session.id, &basket_id).await?;
    Ok(axum::Json(basket).into_response())
}

async fn get_basket(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    Path(basket_id): Path<String>,
) -> Result<Response> {
    plain(&basket_id, "basket")?;
    Ok(axum::Json(catalog::get_basket(&state.db, &session.id, &basket_id).await?).into_response())
}

#[derive(Deserialize, Default)]
pub struct CheckoutBody {
    #[serde(default)]
    pub gateway: Option<String>,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub payer: Option<Value>,
}

/// Confirms the basket (one transaction), then — after commit — builds the gateway hand-off.
pub async fn place_order(
    state: &AppState,
    session_id: &str,
    basket_id: &str,
    body: &CheckoutBody,
    idempotency_key: Option<&str>,
) -> Result<(Placed, Option<Handoff>)> {
    plain(basket_id, "basket")?;
    let name = body
        .gateway
        .as_deref()
        .or(state.gateways.default)
        .ok_or_else(|| Error::api(422, "unknown_gateway", "no gateway configured"))?;
    let gateway = state.gateways.get(name).ok_or_else(|| {
        Error::api(422, "unknown_gateway", format!("gateway must be one of {:?}", state.gateways.names()))
    })?;
    let channel = body.channel.as_deref().unwrap_or(gateway.default_channel());
    if channel != gateway.default_channel() {
        return Err(Error::api(
            422,
            "unsupported_channel",
            format!("gateway {name} supports channel {:?}", gateway.default_channel()),
        ));
    }
    let request = ConfirmRequest {
        session_id,
        basket_id,
        gateway: gateway.name(),
        channel,
        idempotency_key,
        hold_ms: state.hold_ms,
        now: state.now_ms(),
    };
    let placed = match checkout::confirm(&state.db, &request).await {
        Err(e) if e.code() == "price_changed" => {
            catalog::requote_basket(&state.db, basket_id).await?;
            return Err(e);
        }
        other => other?,
    };
    if placed.status != OrderStatus::PendingPayment {
        return Ok((placed, None));
    }
    // The order is committed; only now is the gateway involved (no remote call inside a transaction).
    let gateway =
        state.gateways.get(&placed.gateway).ok_or_else(|| Error::internal("order names an unconfigured gateway"))?;
    let base = state.public_url.trim_end_matches('/');
    let req = HandoffRequest {
        attempt_ref: placed.attempt_ref.clone(),
        order_no: placed.order_no.clone(),
        amount: placed.total,
        subject: placed.subject.clone(),
        expires_at: placed.expires_at,
        notify_url: format!("{base}/notify/{}", gateway.name()),
        return_url: format!("{base}/checkout/return/{}", placed.attempt_ref),
        channel: placed.channel.clone(),
    };
    let handoff = gateway.handoff(&req).await.map_err(|e| {
        tracing::warn!(order_no = %placed.order_no, error = %e, "hand-off failed");
        Error::api(
            502,
            "gateway_unavailable",
            format!("the gateway could not be reached; order {} is kept, retry the checkout", placed.order_no),
        )
    })?;
    Ok((placed, Some(handoff)))
}

pub fn placed_json(placed: &Placed, handoff: Option<&Handoff>) -> Value {
    json!({
        "order_no": placed.order_no,
        "attempt_ref": placed.attempt_ref,
        "status": placed.status.as_str(),
        "total_minor": placed.total.amount_minor(),
        "currency": placed.total.currency().code(),
        "expires_at": rfc3339(placed.expires_at),
        "payment": handoff,
    })
}

fn wants_html(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|a| a.contains("text/html"))
}

async fn checkout_json(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    Path(basket_id): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<CheckoutBody>,
) -> Result<Response> {
    let key = headers
        .get("idempotency-key")
        .map(|v| v.to_str().map_err(|_| Error::invalid("invalid_idempotency_key", "Idempotency-Key must be ASCII")))
        .transpose()?;
    let (placed, handoff) = place_order(&state, &session.id, &basket_id, &body, key).await?;
    if wants_html(&headers) {
        return Ok(super::pages::handoff_page(&placed, handoff.as_ref()));
    }
    let mut response = (StatusCode::CREATED, axum::Json(placed_json(&placed, handoff.as_ref()))).into_response();
    if !placed.created {
        response.headers_mut().insert("idempotent-replayed", header::HeaderValue::from_static("true"));
    }
    Ok(response)
}

async fn get_order(State(state): State<AppState>, caller: Caller, Path(order_no): Path<String>) -> Result<Response> {
    plain(&order_no, "order")?;
    if caller.session.is_none() && !caller.admin {
        return Err(Error::unauthorized());
    }
    let order = payments::get_order(&state.db, &order_no, false).await?;
    let own = caller.session.as_ref().is_some_and(|s| s.id == order.session_id);
    if !own && !caller.admin {
        // Same answer as a missing order: another buyer's order numbers are not confirmed.
        return Err(Error::not_found("order"));
    }
    Ok(axum::Json(order).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkuBody {
    sku: String,
    name: String,
    price_minor: i64,
    currency: String,
    #[serde(default)]
    stock: i64,
    #[serde(default)]
    kind: Option<String>,
}

/// Longest SKU display name.
const SKU_NAME_LEN_MAX: usize = 200;

async fn create_sku(State(state): State<AppState>, _admin: Admin, ApiJson(body): ApiJson<SkuBody>) -> Result<Response> {
    let sku = ids::parse_sku(&body.sku)
        .ok_or_else(|| Error::api(422, "invalid_sku", "SKU codes are 1-64 letters, digits, '_', '-' or '.'"))?;
    let name = valid_name(&body.name)?;
    let kind = match body.kind.as_deref() {
        None | Some("physical") => SkuKind::Physical,
        Some(_) => return Err(Error::api(422, "unsupported_kind", "only physical SKUs are supported so far")),
    };
    let new = NewSku {
        sku: sku.to_string(),
        name: name.to_string(),
        kind,
        price: Money::new(body.price_minor, Currency::parse(&body.currency)?)?,
        stock: body.stock,
    };
    let view = catalog::create_sku(&state.db, &new, false, state.now_ms()).await?;
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

async fn list_skus(State(state): State<AppState>, _admin: Admin) -> Result<Response> {
    Ok(axum::Json(json!({"skus": catalog::list_skus(&state.db).await?})).into_response())
}

async fn get_sku(State(state): State<AppState>, _admin: Admin, Path(sku): Path<String>) -> Result<Response> {
    plain(&sku, "SKU")?;
    Ok(axum::Json(catalog::get_sku(&state.db, &sku).await?).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkuPatch {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    price_minor: Option<i64>,
}

async fn update_sku(
    State(state): State<AppState>,
    _admin: Admin,
    Path(sku): Path<String>,
    ApiJson(body): ApiJson<SkuPatch>,
) -> Result<Response> {
    plain(&sku, "SKU")?;
    let name = body.name.as_deref().map(valid_name).transpose()?;
    Ok(axum::Json(catalog::update_sku(&state.db, &sku, name, body.price_minor, state.now_ms()).await?).into_response())
}

fn valid_name(name: &str) -> Result<&str> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > SKU_NAME_LEN_MAX || name.chars().any(char::is_control) {
        return Err(Error::api(422, "invalid_name", "name must be 1-200 printable characters"));
    }
    Ok(name)
}

#[derive(Deserialize)]
struct StockBody {
    delta: i64,
}

async fn adjust_stock(
    State(state): State<AppState>,
    _admin: Admin,
    Path(sku): Path<String>,
    ApiJson(body): ApiJson<StockBody>,
) -> Result<Response> {
    plain(&sku, "SKU")?;
    Ok(axum::Json(catalog::adjust_stock(&state.db, &sku, body.delta, state.now_ms()).await?).into_response())
}

async fn admin_order(State(state): State<AppState>, _admin: Admin, Path(order_no): Path<String>) -> Result<Response> {
    plain(&order_no, "order")?;
    let order = payments::get_order(&state.db, &order_no, true).await?;
    let mut value = serde_json::to_value(&order).map_err(|e| Error::internal(e.to_string()))?;
    // Refunds arrive with the refund issue; the key is present so clients can rely on it.
    value["refunds"] = json!([]);
    Ok(axum::Json(value).into_response())
}

/// Gateway notifications: verify, store, apply once, and answer in the gateway's own words.
async fn notify(
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
            let span = tracing::info_span!("notification", gateway = %name, event_id = %event.event_id, attempt_ref = %event.attempt_ref);
            let applied = tracing::Instrument::instrument(payments::apply_event(&state.db, &event, now), span).await;
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

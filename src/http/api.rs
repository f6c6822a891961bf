//! JSON API handlers (docs/CONTRACT.md, "HTTP").

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Admin, ApiJson, AppState, Auth, Buyer, Caller, RawBody, RouteDoc};
use crate::clock::rfc3339;
use crate::domain::{Currency, Money, OrderStatus, ids};
use crate::error::{Error, Result};
use crate::gateway::CloseOutcome;
use crate::gateway::{GatewayError, Handoff, HandoffRequest, Payer};
use crate::store::catalog::{self, NewSku, SkuKind};
use crate::store::checkout::{self, ConfirmRequest, Placed};
use crate::store::payments::{self, Applied};
use crate::store::{fulfilment, orders, refunds};

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
                "Create a basket, empty or with its lines (all of them or nothing)",
                "buyer",
                Buyer,
                Some(json!({"type": "object", "properties": {"lines": {
                    "type": "array", "maxItems": catalog::BASKET_LINES_MAX,
                    "items": {"type": "object", "required": ["sku", "quantity"], "properties": {
                        "sku": {"type": "string"},
                        "quantity": {"type": "integer", "minimum": 1, "maximum": catalog::LINE_QUANTITY_MAX}}}}}})),
                &[
                    (201, "the basket {basket_id, status, lines, total_minor, currency}"),
                    (401, "unauthorized"),
                    (404, "not_found (a SKU)"),
                    (422, "invalid_quantity / duplicate_line / currency_mismatch / basket_too_large / amount_overflow"),
                ],
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
                    json!({"type": "object", "properties": {"gateway": {"type": "string", "enum": ["sandbox", "alipay", "wechatpay", "stripe"], "description": "default: the configured default gateway"}, "channel": {"type": "string", "description": "sandbox: form; alipay: page; wechatpay: jsapi (default) or h5; stripe: checkout"}, "payer": {"type": "object", "description": "WeChat jsapi: openid; WeChat h5: client_ip", "properties": {"openid": {"type": "string"}, "client_ip": {"type": "string"}}, "additionalProperties": false}}}),
                ),
                &[
                    (
                        201,
                        "{order_no, attempt_ref, status, expires_at, payment}; a zero total is paid at once: payment null",
                    ),
                    (409, "out_of_stock / price_changed"),
                    (
                        422,
                        "basket_empty / unknown_gateway / unsupported_channel / unsupported_currency / payer_required / invalid_payer",
                    ),
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
                &[(200, "the SKU"), (409, "insufficient_stock"), (422, "digital_stock_is_keys / invalid_quantity")],
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
                "/api/v1/orders/{order_no}/attempts",
                "Retry: a new payment attempt (the active one is superseded and closed at its gateway)",
                "buyer",
                Buyer,
                Some(
                    json!({"type": "object", "properties": {"gateway": {"type": "string"}, "channel": {"type": "string"}, "payer": {"type": "object", "description": "WeChat jsapi: openid; WeChat h5: client_ip", "properties": {"openid": {"type": "string"}, "client_ip": {"type": "string"}}, "additionalProperties": false}}}),
                ),
                &[
                    (201, "{order_no, attempt_ref, expires_at, payment}"),
                    (409, "not_payable / order_expired / already_paid"),
                ],
            ),
            post(retry_payment),
        ),
        (
            doc(
                "post",
                "/api/v1/orders/{order_no}/cancel",
                "Cancel a pending order: stock released, attempt closed; rebasket=true returns a new editable basket",
                "buyer",
                Buyer,
                Some(json!({"type": "object", "properties": {"rebasket": {"type": "boolean", "default": false}}})),
                &[(200, "{status, basket_id?}"), (409, "not_cancellable / already_paid")],
            ),
            post(cancel_order),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/orders/{order_no}/refunds",
                "Refund (full or partial) with a caller-supplied refund number; the same number and terms return the same refund, other terms are refund_no_reused; a partial refund keeps the order's status",
                "admin",
                Admin,
                Some(
                    json!({"type": "object", "required": ["refund_no", "amount_minor"], "properties": {"refund_no": {"type": "string"}, "amount_minor": {"type": "integer", "minimum": 1}, "reason": {"type": "string"}}}),
                ),
                &[
                    (201, "the refund"),
                    (200, "the existing refund"),
                    (409, "refund_exceeds_captured / not_refundable / refund_no_reused / refund_window_closed"),
                ],
            ),
            post(request_refund),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/orders/{order_no}/deliver",
                "Mark a paid physical order delivered (shipped)",
                "admin",
                Admin,
                Option::None,
                &[(200, "delivered"), (409, "not_deliverable")],
            ),
            post(mark_delivered),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/orders/{order_no}/accept",
                "Accept a late payment (paid_after_expiry): stock is taken again and the order paid",
                "admin",
                Admin,
                Option::None,
                &[(200, "paid"), (409, "out_of_stock / not_late_payment")],
            ),
            post(accept_late),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/skus/{sku}/keys",
                "Import card keys into a digital SKU (encrypted at rest; duplicates within the SKU are refused)",
                "admin",
                Admin,
                Some(
                    json!({"type": "object", "required": ["keys"], "properties": {"keys": {"type": "array", "items": {"type": "string"}}}}),
                ),
                &[
                    (200, "{imported, duplicates}"),
                    (409, "keys_secret_mismatch"),
                    (422, "not_digital / keys_secret_missing"),
                ],
            ),
            post(import_keys),
        ),
        (
            doc(
                "post",
                "/notify/{gateway}",
                "Gateway notification (sandbox, alipay, wechatpay, stripe); answered with the gateway's own acknowledgement (alipay: success/fail; wechatpay: 204 or 4xx FAIL; stripe and sandbox: 200 JSON or 4xx error)",
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

#[derive(Deserialize, Default)]
struct NewBasketBody {
    #[serde(default)]
    lines: Vec<NewLine>,
}

#[derive(Deserialize)]
struct NewLine {
    sku: String,
    quantity: i64,
}

async fn create_basket(
    State(state): State<AppState>,
    Buyer(session): Buyer,
    ApiJson(body): ApiJson<NewBasketBody>,
) -> Result<Response> {
    let lines = body.lines.into_iter().map(|l| (l.sku, l.quantity)).collect();
    let basket = catalog::open_basket(&state.db, &session.id, lines, state.now_ms()).await?;
    Ok((StatusCode::CREATED, axum::Json(basket)).into_response())
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
    let basket =
        catalog::set_basket_line(&state.db, &session.id, &basket_id, &sku, body.quantity, state.now_ms()).await?;
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
        .ok_or_else(|| Error::unprocessable("unknown_gateway", "no gateway configured"))?;
    let gateway = state.gateways.get(name).ok_or_else(|| {
        Error::unprocessable("unknown_gateway", format!("gateway must be one of {:?}", state.gateways.names()))
    })?;
    let channel = checked_channel(gateway.as_ref(), body.channel.as_deref())?;
    let payer = parse_payer(body.payer.as_ref())?;
    gateway.check_payer(channel, &payer).map_err(gateway_error)?;
    let request = ConfirmRequest {
        currencies: gateway.currencies(),
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
    super::note_attempt(&placed.order_no, &placed.attempt_ref);
    if placed.status != OrderStatus::PendingPayment {
        return Ok((placed, None));
    }
    // The order is committed; only now is the gateway involved (no remote call inside a transaction).
    let handoff = build_handoff(state, &placed, &payer).await?;
    Ok((placed, Some(handoff)))
}

/// The channel a checkout asked for (or the gateway's default), if the gateway offers it.
fn checked_channel<'a>(gateway: &'a dyn crate::gateway::Gateway, asked: Option<&'a str>) -> Result<&'a str> {
    let channel = asked.unwrap_or(gateway.default_channel());
    if !gateway.channels().contains(&channel) {
        return Err(Error::unprocessable(
            "unsupported_channel",
            format!("gateway {} offers the channels {:?}", gateway.name(), gateway.channels()),
        ));
    }
    Ok(channel)
}

/// The optional `payer` object of a checkout: `openid` (WeChat JSAPI), `client_ip` (WeChat H5).
fn parse_payer(value: Option<&Value>) -> Result<Payer> {
    let invalid = |m: &str| Error::unprocessable("invalid_payer", m.to_string());
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(Payer::default());
    };
    let object = value.as_object().ok_or_else(|| invalid("payer must be an object"))?;
    let mut payer = Payer::default();
    for (key, v) in object {
        let text = v.as_str().filter(|t| !t.is_empty() && t.len() <= 128 && !t.chars().any(char::is_control));
        let text = text.ok_or_else(|| invalid("payer fields are non-empty strings of at most 128 characters"))?;
        match key.as_str() {
            "openid" => payer.openid = Some(text.to_string()),
            "client_ip" => {
                text.parse::<std::net::IpAddr>().map_err(|_| invalid("payer.client_ip is not an IP address"))?;
                payer.client_ip = Some(text.to_string());
            }
            _ => return Err(invalid("payer takes openid and client_ip only")),
        }
    }
    Ok(payer)
}

/// A gateway's refusal or failure as an API error.
fn gateway_error(e: GatewayError) -> Error {
    match e {
        GatewayError::Invalid { code, message } => Error::unprocessable(code, message),
        GatewayError::Unavailable(_) => {
            Error::upstream("gateway_unavailable", "the gateway could not be reached; retry the payment")
        }
    }
}

/// Builds the hand-off of the order's newest attempt (after commit).
async fn build_handoff(state: &AppState, placed: &Placed, payer: &Payer) -> Result<Handoff> {
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
        payer: payer.clone(),
        now: state.now_ms(),
    };
    let handed = gateway.handoff(&req).await.map_err(|e| {
        tracing::warn!(order_no = %placed.order_no, error = %e, "hand-off failed");
        match e {
            GatewayError::Invalid { code, message } => {
                Error::unprocessable(code, format!("{message}; order {} is kept, retry the payment", placed.order_no))
            }
            GatewayError::Unavailable(_) => Error::upstream(
                "gateway_unavailable",
                format!("the gateway could not be reached; order {} is kept, retry the payment", placed.order_no),
            ),
        }
    })?;
    if let Some(gateway_ref) = &handed.gateway_ref {
        payments::set_gateway_ref(&state.db, &placed.attempt_ref, gateway_ref).await?;
    }
    Ok(handed.handoff)
}

/// Closes attempts at their gateways (after commit). A close that answers "already paid" is
/// applied as the payment it is. Returns whether any turned out paid.
pub async fn close_at_gateways(state: &AppState, attempts: &[orders::ToClose]) -> Result<bool> {
    let mut paid = false;
    for a in attempts {
        let Some(gateway) = state.gateways.get(&a.gateway) else { continue };
        match gateway.close(&a.key()).await {
            Ok(CloseOutcome::AlreadyPaid(event)) => {
                payments::apply_event(&state.db, &event, state.late_policy, state.now_ms()).await?;
                paid = true;
            }
            Ok(CloseOutcome::Closed | CloseOutcome::NotFound) => {}
            Err(e) => {
                tracing::warn!(attempt_ref = %a.attempt_ref, error = %e, "close failed");
                return Err(Error::upstream("gateway_unavailable", "the gateway could not be reached; try again"));
            }
        }
    }
    Ok(paid)
}

async fn retry_payment(
    State(state): State<AppState>,
    caller: Caller,
    Path(order_no): Path<String>,
    ApiJson(body): ApiJson<CheckoutBody>,
) -> Result<Response> {
    let session = owner(&caller)?;
    let (placed, handoff) = retry_flow(&state, session, &order_no, &body).await?;
    Ok((StatusCode::CREATED, axum::Json(placed_json(&placed, Some(&handoff)))).into_response())
}

/// A new attempt on a pending order (the old one closed at its gateway, after commit) and its
/// hand-off. `session` is the buyer's (`None`: an admin). Shared by the API and the pages.
pub async fn retry_flow(
    state: &AppState,
    session: Option<&str>,
    order_no: &str,
    body: &CheckoutBody,
) -> Result<(Placed, Handoff)> {
    plain(order_no, "order")?;
    let current = payments::get_order(&state.db, order_no, false).await?;
    if session.is_some_and(|s| s != current.session_id) {
        return Err(Error::not_found("order"));
    }
    let name = body.gateway.clone().or_else(|| current.attempts.last().map(|a| a.gateway.clone())).unwrap_or_default();
    let gateway = state.gateways.get(&name).ok_or_else(|| {
        Error::unprocessable("unknown_gateway", format!("gateway must be one of {:?}", state.gateways.names()))
    })?;
    let channel = checked_channel(gateway.as_ref(), body.channel.as_deref())?;
    let payer = parse_payer(body.payer.as_ref())?;
    gateway.check_payer(channel, &payer).map_err(gateway_error)?;
    if let Some(accepted) = gateway.currencies()
        && let Ok(currency) = crate::domain::Currency::parse(&current.currency)
        && !accepted.contains(&currency)
    {
        return Err(Error::unprocessable("unsupported_currency", format!("gateway {name} does not take {currency}")));
    }
    let (placed, superseded) =
        orders::new_attempt(&state.db, session, order_no, gateway.name(), channel, state.now_ms()).await?;
    if close_at_gateways(state, &superseded).await? {
        // The superseded attempt had been paid after all: the order is paid, nothing to hand off.
        return Err(Error::conflict("already_paid", "the previous attempt was paid; no new payment is needed"));
    }
    let handoff = build_handoff(state, &placed, &payer).await?;
    Ok((placed, handoff))
}

/// The buyer's session id, or `None` for the admin (who may act on any order).
fn owner(caller: &Caller) -> Result<Option<&str>> {
    match (&caller.session, caller.admin) {
        (_, true) => Ok(None),
        (Some(s), false) => Ok(Some(s.id.as_str())),
        (None, false) => Err(Error::unauthorized()),
    }
}

/// Cancels a pending order: close at the gateway first (outside any transaction: after this the
/// buyer cannot pay), then cancel and release the stock. Shared by the API and the admin console.
pub async fn cancel_flow(
    state: &AppState,
    session: Option<&str>,
    current: &payments::OrderView,
    rebasket: bool,
) -> Result<Option<String>> {
    let order_no = current.order_no.as_str();
    let status = OrderStatus::parse(&current.status).ok_or_else(|| Error::internal("unknown order status"))?;
    crate::domain::decide::may_cancel(status)?;
    if let Some(active) = orders::active_attempt(&state.db, order_no).await?
        && close_at_gateways(state, &[active]).await?
    {
        return Err(Error::conflict("already_paid", "the order was paid before it could be cancelled"));
    }
    orders::cancel(&state.db, session, order_no, rebasket, state.now_ms()).await
}

/// Requests a refund and sends it right away, outside the transaction (the refund worker catches
/// it if that fails). Shared by the API and the admin console.
pub async fn refund_flow(
    state: &AppState,
    order_no: &str,
    refund_no: &str,
    amount_minor: i64,
    reason: &str,
) -> Result<(refunds::RefundView, bool)> {
    let (refund, created) =
        refunds::request(&state.db, state.refund_policy, order_no, refund_no, amount_minor, reason, state.now_ms())
            .await?;
    if created && let Err(e) = state.refunder.send_now(&refund.refund_no).await {
        tracing::warn!(refund_no = %refund.refund_no, error = %e, "refund send deferred to the worker");
    }
    Ok((refunds::get(&state.db, &refund.refund_no).await?, created))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CancelBody {
    #[serde(default)]
    rebasket: bool,
}

async fn cancel_order(
    State(state): State<AppState>,
    caller: Caller,
    Path(order_no): Path<String>,
    ApiJson(body): ApiJson<CancelBody>,
) -> Result<Response> {
    plain(&order_no, "order")?;
    let session = owner(&caller)?;
    let current = payments::get_order(&state.db, &order_no, false).await?;
    if session.is_some_and(|s| s != current.session_id) {
        return Err(Error::not_found("order"));
    }
    let basket_id = cancel_flow(&state, session, &current, body.rebasket).await?;
    let mut answer = json!({"order_no": order_no, "status": OrderStatus::Cancelled.as_str()});
    if let Some(id) = basket_id {
        answer["basket_id"] = json!(id);
    }
    Ok(axum::Json(answer).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RefundBody {
    refund_no: String,
    amount_minor: i64,
    #[serde(default)]
    reason: String,
}

async fn request_refund(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
    ApiJson(body): ApiJson<RefundBody>,
) -> Result<Response> {
    plain(&order_no, "order")?;
    let (refund, created) = refund_flow(&state, &order_no, &body.refund_no, body.amount_minor, &body.reason).await?;
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(refund)).into_response())
}

async fn mark_delivered(
    State(state): State<AppState>,
    _admin: Admin,
    Path(order_no): Path<String>,
) -> Result<Response> {
    plain(&order_no, "order")?;
    fulfilment::mark_delivered(&state.db, &order_no, state.now_ms()).await?;
    Ok(axum::Json(json!({"order_no": order_no, "status": "delivered"})).into_response())
}

async fn accept_late(State(state): State<AppState>, _admin: Admin, Path(order_no): Path<String>) -> Result<Response> {
    plain(&order_no, "order")?;
    orders::accept_late_payment(&state.db, &order_no, state.now_ms()).await?;
    let order = payments::get_order(&state.db, &order_no, false).await?;
    Ok(axum::Json(json!({"order_no": order_no, "status": order.status})).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysBody {
    keys: Vec<String>,
}

async fn import_keys(
    State(state): State<AppState>,
    _admin: Admin,
    Path(sku): Path<String>,
    ApiJson(body): ApiJson<KeysBody>,
) -> Result<Response> {
    plain(&sku, "SKU")?;
    let vault = state
        .vault
        .as_ref()
        .ok_or_else(|| Error::unprocessable("keys_secret_missing", "digital goods need --keys-secret"))?;
    if body.keys.len() > fulfilment::IMPORT_API_MAX {
        return Err(Error::unprocessable(
            "too_many_keys",
            format!("at most {} keys per call; use `kassa keys import` for files", fulfilment::IMPORT_API_MAX),
        ));
    }
    let mut total = fulfilment::ImportCount::default();
    for chunk in body.keys.chunks(fulfilment::IMPORT_BATCH_MAX) {
        let n = fulfilment::import_keys(&state.db, vault, &sku, chunk, state.now_ms()).await?;
        total.imported += n.imported;
        total.duplicates += n.duplicates;
    }
    Ok(axum::Json(total).into_response())
}

/// The order as JSON, with the card keys of delivered digital lines (for its buyer and admins).
async fn order_json(state: &AppState, order_no: &str, admin: bool) -> Result<Value> {
    let order = payments::get_order(&state.db, order_no, admin).await?;
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

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct OrderQuery {
    /// Ask the gateway now if the order is still pending (after `wx.requestPayment` succeeded,
    /// or a redirect back): at most once per [`BUYER_QUERY_GAP_MS`] per attempt.
    #[serde(default)]
    refresh: bool,
}

/// Shortest time between two buyer-triggered gateway queries of one attempt.
pub const BUYER_QUERY_GAP_MS: i64 = 5_000;
/// How long a buyer-triggered query may hold up the answer.
const BUYER_QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The buyer is waiting for a pending order: ask its gateway about the active attempt now and
/// apply a payment it reports, instead of waiting for the notification. Bounded in time and rate;
/// failures only mean the buyer keeps waiting for the notification or the reconciler.
pub async fn query_for_buyer(state: &AppState, order: &payments::OrderView) {
    if order.status != OrderStatus::PendingPayment.as_str() {
        return;
    }
    let Some(attempt) = order
        .attempts
        .iter()
        .rev()
        .find(|a| crate::domain::AttemptStatus::parse(&a.status).is_some_and(|st| st.is_active()))
    else {
        return;
    };
    let Some(gateway) = state.gateways.get(&attempt.gateway) else { return };
    let claimed =
        crate::store::reconcile::claim_for_buyer(&state.db, &attempt.attempt_ref, state.now_ms(), BUYER_QUERY_GAP_MS)
            .await;
    let Ok(Some(claimed)) = claimed else { return };
    let key = crate::gateway::AttemptKey::new(&claimed.attempt_ref, claimed.gateway_ref.as_deref());
    match tokio::time::timeout(BUYER_QUERY_TIMEOUT, gateway.query(&key)).await {
        Ok(Ok(crate::gateway::PaymentState::Paid(event))) => {
            match payments::apply_event(&state.db, &event, state.late_policy, state.now_ms()).await {
                Ok(applied) => {
                    tracing::info!(attempt_ref = %claimed.attempt_ref, ?applied, "payment found by buyer-triggered query")
                }
                Err(e) => {
                    tracing::warn!(attempt_ref = %claimed.attempt_ref, error = %e, "could not apply a queried payment")
                }
            }
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(attempt_ref = %claimed.attempt_ref, error = %e, "buyer-triggered query failed"),
        Err(_) => tracing::warn!(attempt_ref = %claimed.attempt_ref, "buyer-triggered query timed out"),
    }
}

async fn get_order(
    State(state): State<AppState>,
    caller: Caller,
    Path(order_no): Path<String>,
    query: std::result::Result<Query<OrderQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    plain(&order_no, "order")?;
    if caller.session.is_none() && !caller.admin {
        return Err(Error::unauthorized());
    }
    let Query(query) =
        query.map_err(|_| Error::unprocessable("invalid_query", "the only query parameter is refresh=true"))?;
    super::note_order(&order_no);
    let order = payments::get_order(&state.db, &order_no, false).await?;
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
        .ok_or_else(|| Error::unprocessable("invalid_sku", "SKU codes are 1-64 letters, digits, '_', '-' or '.'"))?;
    let name = valid_name(&body.name)?;
    let kind = match body.kind.as_deref() {
        None | Some("physical") => SkuKind::Physical,
        Some("digital") => SkuKind::Digital,
        Some(_) => return Err(Error::unprocessable("unsupported_kind", "kind must be physical or digital")),
    };
    // A digital SKU's stock is its unsold keys: it starts at zero and grows by key imports.
    let stock = if kind == SkuKind::Digital { 0 } else { body.stock };
    let new = NewSku {
        sku: sku.to_string(),
        name: name.to_string(),
        kind,
        price: Money::new(body.price_minor, Currency::parse(&body.currency)?)?,
        stock,
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
        return Err(Error::unprocessable("invalid_name", "name must be 1-200 printable characters"));
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
    let mut value = order_json(&state, &order_no, true).await?;
    let findings = crate::store::reconcile::list_findings(&state.db, Some(&order_no), 100).await?;
    value["reconciliation"] = serde_json::to_value(findings).map_err(|e| Error::internal(e.to_string()))?;
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
    let _ = serde_json::from_slice::<SkuBody>(data);
    let _ = serde_json::from_slice::<SkuPatch>(data);
    let _ = serde_json::from_slice::<StockBody>(data);
    let _ = serde_json::from_slice::<RefundBody>(data);
    let _ = serde_json::from_slice::<CancelBody>(data);
    let _ = serde_json::from_slice::<KeysBody>(data);
    let _ = serde_urlencoded::from_bytes::<std::collections::BTreeMap<String, String>>(data);
    let _ = serde_json::from_slice::<crate::gateway::sandbox::WireNotification>(data);
}

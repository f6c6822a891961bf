//! The use cases the API, the pages and the console share: place an order and hand it to its
//! gateway, retry, cancel, refund, ask a gateway on the buyer's behalf. Each loads and decides
//! through the store and the domain; the remote calls run outside any transaction.

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use crate::domain::OrderStatus;
use crate::domain::channel::{self, Device};
use crate::domain::ids::{BasketId, IdempotencyKey, OrderNo, RefundNo};
use crate::domain::shop::{self, MerchantReference, Metadata, ShopData};
use crate::error::{Error, Result};
use crate::gateway::CloseOutcome;
use crate::gateway::{GatewayError, Handoff, HandoffRequest, Payer};
use crate::store::checkout::{self, ConfirmRequest, Placed};
use crate::store::payments;
use crate::store::views;
use crate::store::{catalog, orders, refunds};

/// A checkout: how to pay (each field may be left out: the configured default gateway, and the
/// channel that suits the buyer's device) and the shop's own data for the order.
#[derive(Deserialize, Default, ToSchema)]
pub struct CheckoutBody {
    #[serde(default)]
    #[schema(schema_with = super::schema::gateway_name)]
    pub gateway: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::channel_name)]
    pub channel: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::payer)]
    pub payer: Option<Value>,
    /// The bot check's response token, when the server requires one.
    #[serde(default)]
    #[schema(schema_with = super::schema::captcha_token)]
    pub captcha_token: Option<String>,
    /// The shop's own reference for the order (unique; a repeat answers the first order).
    #[serde(default)]
    #[schema(schema_with = super::schema::merchant_reference)]
    pub merchant_reference: Option<String>,
    /// The shop's string pairs, kept on the order and sent in every webhook about it.
    #[serde(default)]
    #[schema(schema_with = super::schema::metadata)]
    pub metadata: Option<serde_json::Map<String, Value>>,
    /// Where the buyer goes after paying; under `--allowed-return-origins`.
    #[serde(default)]
    #[schema(schema_with = super::schema::return_url)]
    pub return_url: Option<String>,
    /// Where a buyer who gives up goes; under `--allowed-return-origins`.
    #[serde(default)]
    #[schema(schema_with = super::schema::return_url)]
    pub cancel_url: Option<String>,
}

/// What a payment retry may choose: the gateway, its channel and the payer.
#[derive(Deserialize, Default, ToSchema)]
pub struct RetryBody {
    #[serde(default)]
    #[schema(schema_with = super::schema::gateway_name)]
    pub gateway: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::channel_name)]
    pub channel: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::payer)]
    pub payer: Option<Value>,
    /// Accepted and not needed: a retry creates no order.
    #[serde(default)]
    #[schema(schema_with = super::schema::captcha_token)]
    pub captcha_token: Option<String>,
}

/// The shop's data a checkout named, checked ([`crate::domain::shop`]).
fn shop_data(state: &AppState, body: &CheckoutBody) -> Result<ShopData> {
    let metadata = match &body.metadata {
        None => Metadata::default(),
        Some(map) => {
            let mut pairs = Vec::with_capacity(map.len());
            for (k, v) in map {
                let v = v.as_str().ok_or_else(|| {
                    Error::unprocessable("invalid_metadata", format!("metadata value of {k:?} must be a string"))
                })?;
                pairs.push((k.as_str(), v));
            }
            Metadata::parse(pairs)?
        }
    };
    let url = |field: &str, url: &Option<String>| {
        url.as_deref().map(|u| shop::check_return_url(field, u, &state.allowed_return_origins)).transpose()
    };
    Ok(ShopData {
        merchant_reference: body.merchant_reference.as_deref().map(MerchantReference::parse).transpose()?,
        metadata,
        return_url: url("return_url", &body.return_url)?,
        cancel_url: url("cancel_url", &body.cancel_url)?,
    })
}

/// Confirms the basket (one transaction), then — after commit — builds the gateway hand-off.
/// With a bot check configured, a basket still open needs a verified `captcha_token` first (a
/// repeated confirm of a basket checked out already creates nothing, and needs none).
pub async fn place_order(
    state: &AppState,
    session_id: &str,
    basket_id: &BasketId,
    body: &CheckoutBody,
    idempotency_key: Option<&IdempotencyKey>,
    client: std::net::IpAddr,
    device: Device,
) -> Result<(Placed, Option<Handoff>)> {
    super::guard::token_fits(body.captcha_token.as_deref())?;
    if state.guard.captcha_required() && catalog::get_basket(&state.db, session_id, basket_id).await?.status == "open" {
        state.guard.verify_captcha(body.captcha_token.as_deref(), client).await?;
    }
    let name = body
        .gateway
        .as_deref()
        .or(state.gateways.default)
        .ok_or_else(|| Error::unprocessable("unknown_gateway", "no gateway configured"))?;
    let gateway = state.gateways.get(name).ok_or_else(|| {
        Error::unprocessable("unknown_gateway", format!("gateway must be one of {:?}", state.gateways.names()))
    })?;
    let payer = parse_payer(body.payer.as_ref())?;
    let channel = checked_channel(gateway.as_ref(), body.channel.as_deref(), device, &payer)?;
    gateway.check_payer(channel, &payer).map_err(gateway_error)?;
    let shop = shop_data(state, body)?;
    let request = ConfirmRequest {
        payer: attempt_payer(gateway.as_ref(), channel, &payer),
        shop: &shop,
        currencies: gateway.currencies(),
        session_id,
        basket_id,
        gateway: gateway.name(),
        channel,
        idempotency_key,
        hold_ms: state.hold_ms,
        max_open_orders: state.protection.max_open_orders_per_session,
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

/// The channel a checkout asked for, if the gateway offers it; when it asked for none, the one
/// that suits the buyer's device and payer ([`crate::domain::channel::choose`]).
fn checked_channel<'a>(
    gateway: &'a dyn crate::gateway::Gateway,
    asked: Option<&'a str>,
    device: Device,
    payer: &Payer,
) -> Result<&'a str> {
    let channel = asked.unwrap_or_else(|| {
        let (openid, client_ip) = (payer.openid.is_some(), payer.client_ip.is_some());
        channel::choose(gateway.name(), gateway.channels(), gateway.default_channel(), device, openid, client_ip)
    });
    if !gateway.channels().contains(&channel) {
        return Err(Error::unprocessable(
            "unsupported_channel",
            format!("gateway {} offers the channels {:?}", gateway.name(), gateway.channels()),
        ));
    }
    Ok(channel)
}

/// The optional `payer` object of a checkout: `openid` (WeChat JSAPI), `client_ip` (WeChat H5).
/// Longest payer field (an openid, an address), in characters.
pub const PAYER_FIELD_LEN_MAX: usize = 128;

fn parse_payer(value: Option<&Value>) -> Result<Payer> {
    let invalid = |m: &str| Error::unprocessable("invalid_payer", m.to_string());
    let Some(value) = value.filter(|v| !v.is_null()) else {
        return Ok(Payer::default());
    };
    let object = value.as_object().ok_or_else(|| invalid("payer must be an object"))?;
    let mut payer = Payer::default();
    for (key, v) in object {
        let text = v
            .as_str()
            .filter(|t| !t.is_empty() && t.chars().count() <= PAYER_FIELD_LEN_MAX && !t.chars().any(char::is_control));
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

/// The payer kept on a new attempt: a WeChat Pay JSAPI payer's openid under the gateway's app id
/// (what a mini-program shipping report names); nobody for other channels.
fn attempt_payer<'a>(
    gateway: &'a dyn crate::gateway::Gateway,
    channel: &str,
    payer: &'a Payer,
) -> Option<crate::store::checkout::AttemptPayer<'a>> {
    let openid = payer.openid.as_deref()?;
    crate::domain::shipping::is_reported(gateway.name(), channel, true)
        .then(|| gateway.app_id().map(|appid| crate::store::checkout::AttemptPayer { openid, appid }))
        .flatten()
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
        attempt_ref: placed.attempt_ref.to_string(),
        order_no: placed.order_no.to_string(),
        amount: placed.total,
        subject: placed.subject.clone(),
        expires_at: placed.expires_at,
        notify_url: format!("{base}/notify/{}", gateway.name()),
        return_url: placed.shop.return_url.as_deref().map_or_else(
            || format!("{base}/checkout/return/{}", placed.attempt_ref),
            |u| shop::with_order_no(u, &placed.order_no),
        ),
        cancel_url: placed.shop.cancel_url.as_deref().map(|u| shop::with_order_no(u, &placed.order_no)),
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

/// A new attempt on a pending order (the old one closed at its gateway, after commit) and its
/// hand-off. `session` is the buyer's (`None`: an admin). Shared by the API and the pages.
pub async fn retry_flow(
    state: &AppState,
    session: Option<&str>,
    order_no: &OrderNo,
    body: &RetryBody,
    device: Device,
) -> Result<(Placed, Handoff)> {
    super::guard::token_fits(body.captcha_token.as_deref())?;
    let current = views::get_order(&state.db, order_no, false).await?;
    crate::domain::decide::may_act_on(session, &current.session_id)?;
    let name = body.gateway.clone().or_else(|| current.attempts.last().map(|a| a.gateway.clone())).unwrap_or_default();
    let gateway = state.gateways.get(&name).ok_or_else(|| {
        Error::unprocessable("unknown_gateway", format!("gateway must be one of {:?}", state.gateways.names()))
    })?;
    let payer = parse_payer(body.payer.as_ref())?;
    let channel = checked_channel(gateway.as_ref(), body.channel.as_deref(), device, &payer)?;
    gateway.check_payer(channel, &payer).map_err(gateway_error)?;
    let currency = crate::domain::Currency::parse(&current.currency)?;
    crate::domain::checkout::check_currency(gateway.name(), currency, gateway.currencies())?;
    let kept = attempt_payer(gateway.as_ref(), channel, &payer);
    let (placed, superseded) =
        orders::new_attempt(&state.db, session, order_no, gateway.name(), channel, kept, state.now_ms()).await?;
    if close_at_gateways(state, &superseded).await? {
        // The superseded attempt had been paid after all: the order is paid, nothing to hand off.
        return Err(Error::conflict("already_paid", "the previous attempt was paid; no new payment is needed"));
    }
    let handoff = build_handoff(state, &placed, &payer).await?;
    Ok((placed, handoff))
}

/// Cancels a pending order: close at the gateway first (outside any transaction: after this the
/// buyer cannot pay), then cancel and release the stock. Shared by the API and the admin console.
pub async fn cancel_flow(
    state: &AppState,
    session: Option<&str>,
    current: &views::OrderView,
    rebasket: bool,
) -> Result<Option<String>> {
    let order_no = &current.order_no;
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
    order_no: &OrderNo,
    refund_no: &RefundNo,
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

/// Shortest time between two buyer-triggered gateway queries of one attempt.
pub const BUYER_QUERY_GAP_MS: i64 = 5_000;
/// How long a buyer-triggered query may hold up the answer.
const BUYER_QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The buyer is waiting for a pending order: ask its gateway about the active attempt now and
/// apply a payment it reports, instead of waiting for the notification. Bounded in time and rate;
/// failures only mean the buyer keeps waiting for the notification or the reconciler.
pub async fn query_for_buyer(state: &AppState, order: &views::OrderView) {
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

/// Longest SKU display name.
pub const SKU_NAME_LEN_MAX: usize = 200;

/// A SKU's display name, trimmed: 1–200 printable characters.
pub fn valid_name(name: &str) -> Result<&str> {
    let name = name.trim();
    if name.is_empty() || name.chars().count() > SKU_NAME_LEN_MAX || name.chars().any(char::is_control) {
        return Err(Error::unprocessable("invalid_name", "name must be 1-200 printable characters"));
    }
    Ok(name)
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

/// Creates a SKU (API and console).
pub async fn create_sku_flow(state: &AppState, draft: &SkuDraft<'_>) -> Result<catalog::SkuView> {
    use crate::store::catalog::{NewSku, SkuKind};
    let sku = crate::domain::ids::Sku::parse(draft.sku)
        .map_err(|_| Error::unprocessable("invalid_sku", "SKU codes are 1-64 letters, digits, '_', '-' or '.'"))?;
    let name = valid_name(draft.name)?;
    crate::domain::checkout::check_price(draft.price.amount_minor(), draft.free)?;
    let kind = match draft.kind {
        None | Some("physical") => SkuKind::Physical,
        Some("digital") => SkuKind::Digital,
        Some(_) => return Err(Error::unprocessable("unsupported_kind", "kind must be physical or digital")),
    };
    // A digital SKU's stock is its unsold keys: it starts at zero and grows by key imports.
    let stock = if kind == SkuKind::Digital { 0 } else { draft.stock };
    let new = NewSku { sku, name: name.to_string(), kind, price: draft.price, stock, limits: draft.limits };
    catalog::create_sku(&state.db, &new, false, state.now_ms()).await
}

/// Changes a SKU's name, price (with whether the shop means a price of 0) and/or limits (API and
/// console).
pub async fn edit_sku_flow(
    state: &AppState,
    sku: &crate::domain::ids::Sku,
    name: Option<&str>,
    price: Option<(i64, bool)>,
    limits: catalog::LimitsPatch,
) -> Result<catalog::SkuView> {
    let name = name.map(valid_name).transpose()?;
    if let Some((price_minor, free)) = price {
        crate::domain::checkout::check_price(price_minor, free)?;
    }
    let price_minor = price.map(|(p, _)| p);
    catalog::update_sku(&state.db, sku, name, price_minor, limits, state.now_ms()).await
}

/// Imports card keys into a digital SKU, in batches (API and console).
pub async fn import_keys_flow(
    state: &AppState,
    sku: &crate::domain::ids::Sku,
    keys: &[String],
) -> Result<crate::store::fulfilment::ImportCount> {
    use crate::store::fulfilment;
    let vault = state
        .vault
        .as_ref()
        .ok_or_else(|| Error::unprocessable("keys_secret_missing", "digital goods need --keys-secret"))?;
    if keys.len() > fulfilment::IMPORT_API_MAX {
        return Err(Error::unprocessable(
            "too_many_keys",
            format!("at most {} keys per call; use `kassa keys import` for files", fulfilment::IMPORT_API_MAX),
        ));
    }
    let mut total = fulfilment::ImportCount::default();
    for chunk in keys.chunks(fulfilment::IMPORT_BATCH_MAX) {
        let n = fulfilment::import_keys(&state.db, vault, sku, chunk, state.now_ms()).await?;
        total.imported += n.imported;
        total.duplicates += n.duplicates;
    }
    Ok(total)
}

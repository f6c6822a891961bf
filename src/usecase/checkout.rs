//! Placing an order: the basket confirmed in one transaction, then (after commit) handed to its
//! gateway.

use serde_json::Value;

use super::Context;
use super::payment::{attempt_payer, build_handoff, checked_channel, gateway_error, gateway_named, parse_payer};
use crate::domain::OrderStatus;
use crate::domain::channel::{self, Device};
use crate::domain::contact::{self, Contact};
use crate::domain::ids::{BasketId, IdempotencyKey, SessionId};
use crate::domain::shop::{self, MerchantReference, Metadata, ShopData};
use crate::error::{Error, Result};
use crate::gateway::Handoff;
use crate::store::catalog;
use crate::store::checkout::{self, BuyerData, ConfirmRequest, Placed};

/// A checkout as the buyer or the shop named it, before it is checked: how to pay (each may be
/// left out: the configured default gateway, and the channel that suits the buyer's device) and
/// the shop's own data for the order.
#[derive(Debug, Default, Clone, Copy)]
pub struct Checkout<'a> {
    pub gateway: Option<&'a str>,
    pub channel: Option<&'a str>,
    pub payer: Option<&'a Value>,
    pub merchant_reference: Option<&'a str>,
    pub metadata: Option<&'a serde_json::Map<String, Value>>,
    pub return_url: Option<&'a str>,
    pub cancel_url: Option<&'a str>,
    /// Asked by the shop's own server (its API key), which alone may name its own fields.
    pub by_shop: bool,
    /// The buyer's contact (`contact.email`, `contact.phone`), as given.
    pub email: Option<&'a str>,
    pub phone: Option<&'a str>,
    /// The lookup password the buyer chose, as given (only its slow hash is kept).
    pub lookup_password: Option<&'a str>,
    /// The language of the checkout's request (`en`, `zh-CN`).
    pub lang: Option<&'a str>,
    /// A promotion code, as typed (used instead of the basket's).
    pub promotion_code: Option<&'a str>,
}

/// Lookup passwords hashed at once (each hash holds 19 MiB for its time): more wait their turn.
pub const PASSWORD_HASHES_AT_ONCE: usize = 4;
static HASHING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(PASSWORD_HASHES_AT_ONCE);

/// A turn to hash or check a lookup password.
pub(super) async fn hashing_turn() -> Result<tokio::sync::SemaphorePermit<'static>> {
    HASHING.acquire().await.map_err(|_| Error::internal("password hashing closed"))
}

/// The buyer's data a checkout named, checked: the contact normalised, the lookup password
/// hashed (off the async threads, [`PASSWORD_HASHES_AT_ONCE`] at a time).
async fn buyer_data(cx: &Context, asked: &Checkout<'_>) -> Result<BuyerData> {
    let contact = Contact::parse(asked.email, asked.phone)?;
    let lookup_hash = match asked.lookup_password {
        None => None,
        Some(password) => {
            contact::check_lookup_password(password)?;
            let _turn = hashing_turn().await?;
            let password = password.to_string();
            let hashed = tokio::task::spawn_blocking(move || crate::vault::hash_password(&password))
                .await
                .map_err(|_| Error::internal("password hashing stopped"))?;
            Some(hashed.map_err(|_| Error::internal("password hashing failed"))?)
        }
    };
    Ok(BuyerData { contact, lookup_hash, lang: asked.lang.map(str::to_string), mail_enabled: cx.mail.is_some() })
}

/// A promotion code as the buyer typed it, normalised; one that cannot be a code is unknown.
pub(super) fn promotion_code(typed: &str) -> Result<String> {
    crate::domain::promotion::normalize_code(typed).ok_or_else(|| {
        crate::domain::promotion::unknown(
            &typed.trim().chars().take(crate::domain::promotion::CODE_LEN_MAX).collect::<String>(),
        )
        .into()
    })
}

/// The shop's data a checkout named, checked ([`crate::domain::shop`]).
fn shop_data(cx: &Context, asked: &Checkout<'_>) -> Result<ShopData> {
    shop::may_set_shop_fields(asked.by_shop, asked.merchant_reference.is_some(), asked.metadata.is_some())?;
    let metadata = match asked.metadata {
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
    let url = |field: &str, url: Option<&str>| {
        url.map(|u| shop::check_return_url(field, u, &cx.allowed_return_origins)).transpose()
    };
    Ok(ShopData {
        merchant_reference: asked.merchant_reference.map(MerchantReference::parse).transpose()?,
        metadata,
        return_url: url("return_url", asked.return_url)?,
        cancel_url: url("cancel_url", asked.cancel_url)?,
    })
}

/// Confirms the basket (one transaction), then — after commit — builds the gateway hand-off. A
/// repeated confirm answers the order it placed the first time, with no new hand-off unless it is
/// still pending.
pub async fn place_order(
    cx: &Context,
    session_id: &SessionId,
    basket_id: &BasketId,
    asked: &Checkout<'_>,
    idempotency_key: Option<&IdempotencyKey>,
    device: Device,
) -> Result<(Placed, Option<Handoff>)> {
    let gateway = match asked.gateway {
        Some(named) => gateway_named(cx, Some(named))?,
        None => {
            let names = cx.gateways.names();
            gateway_named(cx, channel::default_gateway(device, cx.gateways.default, &names)?)?
        }
    };
    let payer = parse_payer(asked.payer)?;
    let channel = checked_channel(gateway.as_ref(), asked.channel, device, &payer)?;
    gateway.check_payer(channel, &payer).map_err(gateway_error)?;
    let shop = shop_data(cx, asked)?;
    let buyer = buyer_data(cx, asked).await?;
    let request = ConfirmRequest {
        buyer,
        payer: attempt_payer(gateway.as_ref(), channel, &payer),
        shop,
        currencies: gateway.currencies().map(<[_]>::to_vec),
        idempotency_key: idempotency_key.cloned(),
        hold_ms: cx.hold_ms,
        max_open_orders: cx.max_open_orders_per_session,
        limits: cx.order_limits,
        promotion_code: asked.promotion_code.map(promotion_code).transpose()?,
        ..ConfirmRequest::new(session_id.clone(), basket_id.clone(), gateway.name(), channel, cx.now_ms())
    };
    let placed = match checkout::confirm(&cx.db, &request).await {
        Err(e) if e.code() == "price_changed" => {
            catalog::requote_basket(&cx.db, basket_id).await?;
            return Err(e);
        }
        other => other?,
    };
    if placed.status != OrderStatus::PendingPayment {
        return Ok((placed, None));
    }
    // The order is committed; only now is the gateway involved (no remote call inside a transaction).
    let handoff = build_handoff(cx, &placed, &payer).await?;
    Ok((placed, Some(handoff)))
}

//! The HTTP side of the buyer's use cases ([`crate::usecase`]): the request bodies, the bot check
//! of a checkout, and the span fields of a placed order.

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::AppState;
use crate::domain::basket::BasketStatus;
use crate::domain::channel::Device;
use crate::domain::ids::{BasketId, IdempotencyKey, OrderNo, SessionId};
use crate::error::Result;
use crate::gateway::Handoff;
use crate::store::catalog;
use crate::store::checkout::Placed;
use crate::usecase::checkout::Checkout;
use crate::usecase::payment::Retry;

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

impl CheckoutBody {
    /// The checkout as the use case reads it; `by_shop`: the request carries the shop's key.
    pub fn as_checkout(&self, by_shop: bool) -> Checkout<'_> {
        Checkout {
            gateway: self.gateway.as_deref(),
            channel: self.channel.as_deref(),
            payer: self.payer.as_ref(),
            merchant_reference: self.merchant_reference.as_deref(),
            metadata: self.metadata.as_ref(),
            return_url: self.return_url.as_deref(),
            cancel_url: self.cancel_url.as_deref(),
            by_shop,
        }
    }
}

impl RetryBody {
    /// The retry as the use case reads it.
    pub fn as_retry(&self) -> Retry<'_> {
        Retry { gateway: self.gateway.as_deref(), channel: self.channel.as_deref(), payer: self.payer.as_ref() }
    }
}

/// Places the order ([`crate::usecase::checkout::place_order`]). With a bot check configured, a
/// basket still open needs a verified `captcha_token` first (a repeated confirm of a basket checked
/// out already creates nothing, and needs none).
pub async fn place_order(
    state: &AppState,
    session_id: &SessionId,
    basket_id: &BasketId,
    body: &CheckoutBody,
    idempotency_key: Option<&IdempotencyKey>,
    client: &super::guard::Client,
    device: Device,
) -> Result<(Placed, Option<Handoff>)> {
    super::guard::token_fits(body.captcha_token.as_deref())?;
    let open = |status: &BasketStatus| *status == BasketStatus::Open;
    if state.guard.captcha_required() && open(&catalog::get_basket(&state.db, session_id, basket_id).await?.status) {
        state.guard.verify_captcha(body.captcha_token.as_deref(), client.addr).await?;
    }
    let placed = crate::usecase::checkout::place_order(
        &state.cx,
        session_id,
        basket_id,
        &body.as_checkout(client.shop),
        idempotency_key,
        device,
    )
    .await?;
    super::note_attempt(&placed.0.order_no, &placed.0.attempt_ref);
    Ok(placed)
}

/// A new attempt on a pending order and its hand-off ([`crate::usecase::payment::retry`]).
/// `session` is the buyer's (`None`: an admin).
pub async fn retry_flow(
    state: &AppState,
    session: Option<&SessionId>,
    order_no: &OrderNo,
    body: &RetryBody,
    device: Device,
) -> Result<(Placed, Handoff)> {
    super::guard::token_fits(body.captcha_token.as_deref())?;
    crate::usecase::payment::retry(&state.cx, session, order_no, &body.as_retry(), device).await
}

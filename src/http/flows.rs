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
    /// How the buyer may be reached about the order and find it again (`POST /api/v1/lookup`);
    /// shown to the buyer's own session, the shop's server and admins only.
    #[serde(default)]
    pub contact: Option<ContactBody>,
    /// A password the buyer chooses to look the order up with; only its slow hash is kept.
    #[serde(default)]
    #[schema(schema_with = super::schema::lookup_password)]
    pub lookup_password: Option<String>,
    /// A promotion code, used instead of the one put on the basket.
    #[serde(default)]
    #[schema(schema_with = super::schema::promotion_code)]
    pub promotion_code: Option<String>,
}

/// The buyer's contact at checkout: either or both (an empty string is a field left out).
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContactBody {
    /// An e-mail address; kept in lower case.
    #[serde(default)]
    #[schema(schema_with = super::schema::contact_email)]
    pub email: Option<String>,
    /// A phone number: digits with an optional leading + and spaces, hyphens, dots or
    /// parentheses; kept as the digits (and the +).
    #[serde(default)]
    #[schema(schema_with = super::schema::contact_phone)]
    pub phone: Option<String>,
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
    pub fn as_checkout<'a>(&'a self, by_shop: bool, lang: Option<&'a str>) -> Checkout<'a> {
        let contact = self.contact.as_ref();
        Checkout {
            email: contact.and_then(|c| c.email.as_deref()),
            phone: contact.and_then(|c| c.phone.as_deref()),
            lookup_password: self.lookup_password.as_deref(),
            promotion_code: self.promotion_code.as_deref(),
            lang,
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

/// Who asks for a checkout: the client (its address, the shop's key), the buyer's device and the
/// language of the request.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub client: &'a super::guard::Client,
    pub device: Device,
    pub lang: super::i18n::Lang,
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
    asker: Asker<'_>,
) -> Result<(Placed, Option<Handoff>)> {
    let Asker { client, device, lang } = asker;
    super::guard::token_fits(body.captcha_token.as_deref())?;
    let open = |status: &BasketStatus| *status == BasketStatus::Open;
    if state.guard.captcha_required() && open(&catalog::get_basket(&state.db, session_id, basket_id).await?.status) {
        state.guard.verify_captcha(body.captcha_token.as_deref(), client.addr).await?;
    }
    let placed = crate::usecase::checkout::place_order(
        &state.cx,
        session_id,
        basket_id,
        &body.as_checkout(client.shop, Some(lang.code())),
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

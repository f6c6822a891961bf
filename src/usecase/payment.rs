//! A payment's life after the order is placed: the hand-off to the gateway, a retry on a new
//! attempt, a cancel, closing attempts at their gateways and asking a gateway on the buyer's
//! behalf. Remote calls run outside any transaction.

use serde_json::Value;

use super::Context;
use crate::domain::channel::{self, Device};
use crate::domain::event::VerifiedEvent;
use crate::domain::ids::{AttemptKey, OrderNo, SessionId};
use crate::domain::{OrderStatus, shop};
use crate::error::{Error, Result};
use crate::gateway::{CloseOutcome, Gateway, GatewayError, Handoff, HandoffRequest, Payer, PaymentState};
use crate::store::checkout::{AttemptPayer, Placed};
use crate::store::payments::Applied;
use crate::store::{orders, payments, views};

/// Longest payer field (an openid, an address), in characters.
pub const PAYER_FIELD_LEN_MAX: usize = 128;
/// Shortest time between two buyer-triggered gateway queries of one attempt.
pub const BUYER_QUERY_GAP_MS: i64 = 5_000;
/// How long a buyer-triggered query may hold up the answer.
const BUYER_QUERY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// The channel a checkout asked for, if the gateway offers it; when it asked for none, the one
/// that suits the buyer's device and payer ([`crate::domain::channel::choose`]).
pub(super) fn checked_channel<'a>(
    gateway: &'a dyn Gateway,
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
pub(super) fn parse_payer(value: Option<&Value>) -> Result<Payer> {
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

/// A gateway's refusal or failure as an API error.
pub(super) fn gateway_error(e: GatewayError) -> Error {
    match e {
        GatewayError::Invalid { code, message } => Error::unprocessable(code, message),
        GatewayError::Unavailable(_) => {
            Error::upstream("gateway_unavailable", "the gateway could not be reached; retry the payment")
        }
    }
}

/// Builds the hand-off of the order's newest attempt (after commit).
pub(super) async fn build_handoff(cx: &Context, placed: &Placed, payer: &Payer) -> Result<Handoff> {
    let gateway =
        cx.gateways.get(&placed.gateway).ok_or_else(|| Error::internal("order names an unconfigured gateway"))?;
    let base = cx.public_url.trim_end_matches('/');
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
        now: cx.now_ms(),
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
        payments::set_gateway_ref(&cx.db, &placed.attempt_ref, gateway_ref).await?;
    }
    Ok(handed.handoff)
}

/// What closing one attempt at its gateway came to.
/// The gateway a checkout or a retry named, or the configured default.
pub(super) fn gateway_named<'g>(cx: &'g Context, name: Option<&str>) -> Result<&'g std::sync::Arc<dyn Gateway>> {
    let name =
        name.or(cx.gateways.default).ok_or_else(|| Error::unprocessable("unknown_gateway", "no gateway configured"))?;
    cx.gateways.get(name).ok_or_else(|| {
        Error::unprocessable("unknown_gateway", format!("gateway must be one of {:?}", cx.gateways.names()))
    })
}

/// The payer kept on a new attempt: a WeChat Pay JSAPI payer's openid under the gateway's app id
/// (what a mini-program shipping report names); nobody for other channels.
pub(super) fn attempt_payer(gateway: &dyn Gateway, channel: &str, payer: &Payer) -> Option<AttemptPayer> {
    let openid = payer.openid.as_deref()?;
    crate::domain::shipping::is_reported(gateway.name(), channel, true)
        .then(|| gateway.app_id().map(|appid| AttemptPayer { openid: openid.to_string(), appid: appid.to_string() }))
        .flatten()
}

/// Applies a verified gateway event, whichever way it was learnt (a notification, an active query
/// by the reconciler or for a waiting buyer, a close that found the attempt paid), under the
/// shop's late-payment policy: one path from a gateway's truth to the order.
pub async fn apply_verified(cx: &Context, event: &VerifiedEvent) -> Result<Applied> {
    payments::apply_event(&cx.db, event, cx.late_policy, cx.now_ms()).await
}

#[derive(Debug)]
pub enum Closed {
    /// Closed, or the gateway never knew it: the buyer cannot pay it any more.
    Closed,
    /// The gateway answered "already paid": the payment is applied, as this says.
    Paid(payments::Applied),
    /// The gateway could not be reached or refused; nothing changed.
    Failed(GatewayError),
}

/// Closes one attempt at its gateway (after commit); a close answered "already paid" is applied as
/// the payment it is. No gateway of that name configured: nothing to close.
pub async fn close_attempt(cx: &Context, gateway: &str, key: &AttemptKey) -> Result<Closed> {
    let Some(gateway) = cx.gateways.get(gateway) else { return Ok(Closed::Closed) };
    match gateway.close(key).await {
        Ok(CloseOutcome::AlreadyPaid(event)) => Ok(Closed::Paid(apply_verified(cx, &event).await?)),
        Ok(CloseOutcome::Closed | CloseOutcome::NotFound) => Ok(Closed::Closed),
        Err(e) => Ok(Closed::Failed(e)),
    }
}

/// Closes attempts at their gateways (after commit). Returns whether any turned out paid; the
/// first that cannot be closed stops the rest with `gateway_unavailable`.
pub async fn close_at_gateways(cx: &Context, attempts: &[orders::ToClose]) -> Result<bool> {
    let mut paid = false;
    for a in attempts {
        match close_attempt(cx, &a.gateway, &a.key()).await? {
            Closed::Paid(_) => paid = true,
            Closed::Closed => {}
            Closed::Failed(e) => {
                tracing::warn!(attempt_ref = %a.attempt_ref, error = %e, "close failed");
                return Err(Error::upstream("gateway_unavailable", "the gateway could not be reached; try again"));
            }
        }
    }
    Ok(paid)
}

/// What a payment retry may choose: the gateway (the last attempt's when left out), its channel
/// and the payer.
#[derive(Debug, Default, Clone, Copy)]
pub struct Retry<'a> {
    pub gateway: Option<&'a str>,
    pub channel: Option<&'a str>,
    pub payer: Option<&'a Value>,
}

/// A new attempt on a pending order (the old one closed at its gateway, after commit) and its
/// hand-off. `session` is the buyer's (`None`: an admin).
pub async fn retry(
    cx: &Context,
    session: Option<&SessionId>,
    order_no: &OrderNo,
    asked: &Retry<'_>,
    device: Device,
) -> Result<(Placed, Handoff)> {
    let current = views::get_order(&cx.db, order_no, false).await?;
    crate::domain::decide::may_act_on(session.map(SessionId::as_str), &current.session_id)?;
    let name = asked.gateway.or_else(|| current.attempts.last().map(|a| a.gateway.as_str())).unwrap_or_default();
    let gateway = gateway_named(cx, Some(name))?;
    let payer = parse_payer(asked.payer)?;
    let channel = checked_channel(gateway.as_ref(), asked.channel, device, &payer)?;
    gateway.check_payer(channel, &payer).map_err(gateway_error)?;
    let currency = crate::domain::Currency::parse(&current.currency)?;
    crate::domain::checkout::check_currency(gateway.name(), currency, gateway.currencies())?;
    let kept = attempt_payer(gateway.as_ref(), channel, &payer);
    let (placed, superseded) =
        orders::new_attempt(&cx.db, session, order_no, gateway.name(), channel, kept.as_ref(), cx.now_ms()).await?;
    if close_at_gateways(cx, &superseded).await? {
        // The superseded attempt had been paid after all: the order is paid, nothing to hand off.
        return Err(Error::conflict("already_paid", "the previous attempt was paid; no new payment is needed"));
    }
    let handoff = build_handoff(cx, &placed, &payer).await?;
    Ok((placed, handoff))
}

/// Cancels a pending order: close at the gateway first (outside any transaction: after this the
/// buyer cannot pay), then cancel and release the stock. `rebasket`: the lines go back into a new
/// open basket. Returns that basket's id.
pub async fn cancel(
    cx: &Context,
    session: Option<&SessionId>,
    current: &views::OrderView,
    rebasket: bool,
) -> Result<Option<String>> {
    let order_no = &current.order_no;
    crate::domain::decide::may_cancel(current.status)?;
    if let Some(active) = orders::active_attempt(&cx.db, order_no).await?
        && close_at_gateways(cx, &[active]).await?
    {
        return Err(Error::conflict("already_paid", "the order was paid before it could be cancelled"));
    }
    orders::cancel(&cx.db, session, order_no, rebasket, cx.now_ms()).await
}

/// The buyer is waiting for a pending order: ask its gateway about the active attempt now and
/// apply a payment it reports, instead of waiting for the notification. Bounded in time and rate;
/// failures only mean the buyer keeps waiting for the notification or the reconciler.
pub async fn query_for_buyer(cx: &Context, order: &views::OrderView) {
    if order.status != OrderStatus::PendingPayment {
        return;
    }
    let Some(attempt) = order.attempts.iter().rev().find(|a| a.status.is_active()) else {
        return;
    };
    let Some(gateway) = cx.gateways.get(&attempt.gateway) else { return };
    let claimed =
        crate::store::reconcile::claim_for_buyer(&cx.db, &attempt.attempt_ref, cx.now_ms(), BUYER_QUERY_GAP_MS).await;
    let Ok(Some(claimed)) = claimed else { return };
    let key = AttemptKey::new(&claimed.attempt_ref, claimed.gateway_ref.as_deref());
    match tokio::time::timeout(BUYER_QUERY_TIMEOUT, gateway.query(&key)).await {
        Ok(Ok(PaymentState::Paid(event))) => match apply_verified(cx, &event).await {
            Ok(applied) => {
                tracing::info!(attempt_ref = %claimed.attempt_ref, ?applied, "payment found by buyer-triggered query")
            }
            Err(e) => {
                tracing::warn!(attempt_ref = %claimed.attempt_ref, error = %e, "could not apply a queried payment")
            }
        },
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::warn!(attempt_ref = %claimed.attempt_ref, error = %e, "buyer-triggered query failed"),
        Err(_) => tracing::warn!(attempt_ref = %claimed.attempt_ref, "buyer-triggered query timed out"),
    }
}

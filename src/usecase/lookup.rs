//! The buyer's way back to an order: a lookup by the order number and what only its buyer knows
//! (the contact, or the lookup password), a signed single-use link to the order, and the log of
//! every reveal of an order's card keys.

use std::sync::OnceLock;

use super::Context;
use crate::domain::contact::{self, LINK_PURPOSE, LinkState, Proof};
use crate::domain::ids::OrderNo;
use crate::error::{Error, Result};
use crate::store::fulfilment::{self, OrderKeys};
use crate::store::lookup::{self, Viewer};
use crate::store::views::{self, OrderView};

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// The lookup password matched: the link, and when it stops working.
    Link { url: String, expires_at: i64 },
    /// The contact matched: a link was sent to the order's e-mail address.
    Sent,
    /// Nothing matched (no such order, another contact, a wrong password).
    Nothing,
}

/// Looks `order_no` up with `proof`. A password is checked against its slow hash, and against a
/// stand-in hash when the order has none, so a miss takes as long as a match.
pub async fn lookup(cx: &Context, order_no: &OrderNo, proof: &Proof) -> Result<Found> {
    let target = lookup::target(&cx.db, order_no).await?;
    match proof {
        Proof::Password(password) => {
            let hash = target.as_ref().and_then(|t| t.lookup_hash.clone());
            let matched = password_matches(password, hash).await?;
            if !matched {
                return Ok(Found::Nothing);
            }
            let (url, expires_at) = new_link(cx, order_no).await?;
            Ok(Found::Link { url, expires_at })
        }
        Proof::Email(_) | Proof::Phone(_) => {
            // Refused alike whether or not anything matches: e-mail is off for every order.
            super::mail::require_mail(cx)?;
            let Some(target) = target.filter(|t| proof.matches_contact(&t.contact)) else {
                return Ok(Found::Nothing);
            };
            let Some(email) = target.contact.email else {
                // A phone number matched, and there is no address to send the link to.
                return Ok(Found::Nothing);
            };
            super::mail::send_link(cx, order_no, &email, target.lang.as_deref()).await?;
            Ok(Found::Sent)
        }
    }
}

/// A stand-in hash a miss is checked against (the same cost as a real one).
fn stand_in_hash() -> Option<&'static str> {
    static HASH: OnceLock<Option<String>> = OnceLock::new();
    HASH.get_or_init(|| crate::vault::hash_password("kassa: no lookup password").ok()).as_deref()
}

async fn password_matches(password: &str, hash: Option<String>) -> Result<bool> {
    let _turn = super::checkout::hashing_turn().await?;
    let password = password.to_string();
    tokio::task::spawn_blocking(move || match hash {
        Some(h) => crate::vault::verify_password(&password, &h),
        None => {
            let _ = stand_in_hash().map(|h| crate::vault::verify_password(&password, h));
            false
        }
    })
    .await
    .map_err(|_| Error::internal("password check stopped"))
}

/// A new link to `order_no`: kept, signed; its URL and expiry.
async fn new_link(cx: &Context, order_no: &OrderNo) -> Result<(String, i64)> {
    let now = cx.now_ms();
    let id = crate::vault::LinkSigner::new_link_id();
    let expires_at = contact::link_expires_at(now, cx.link_hours);
    lookup::create_link(&cx.db, &id, order_no, expires_at, now).await?;
    let token = cx.links.sign(order_no.as_str(), LINK_PURPOSE, &id, expires_at);
    Ok((format!("{}/lookup/open/{token}", cx.public_url.trim_end_matches('/')), expires_at))
}

/// An order opened by its link, before anything is revealed.
#[derive(Debug, Clone)]
pub struct Opened {
    pub order: OrderView,
    pub state: LinkState,
    pub expires_at: i64,
    link_id: String,
}

/// The order a link names, and what the link can still do. A token whose signature does not hold,
/// or that names no kept link, is not found.
pub async fn open_link(cx: &Context, token: &str) -> Result<Opened> {
    let claims = cx.links.verify(token, LINK_PURPOSE).ok_or_else(|| Error::not_found("link"))?;
    let link = lookup::link(&cx.db, &claims.link_id)
        .await?
        .filter(|l| l.order_no.as_str() == claims.order_no && l.expires_at == claims.expires_at)
        .ok_or_else(|| Error::not_found("link"))?;
    let order = views::get_order(&cx.db, &link.order_no, false).await?;
    let state = contact::link_state(link.expires_at, link.used_at, cx.now_ms());
    Ok(Opened { order, state, expires_at: link.expires_at, link_id: claims.link_id })
}

/// The order and its keys, through its link. The first reveal of keys uses the link up (logged
/// with `viewer`); an order with no keys to show leaves the link as it is.
pub async fn reveal_by_link(cx: &Context, token: &str, viewer: &Viewer) -> Result<(Opened, OrderKeys)> {
    let opened = open_link(cx, token).await?;
    if let Some(refused) = contact::link_refusal(opened.state) {
        return Err(refused.into());
    }
    let order_no = opened.order.order_no.clone();
    let keys = fulfilment::order_keys(&cx.db, cx.vault.as_deref(), &order_no, cx.now_ms()).await?;
    if keys.keys.is_empty() {
        return Ok((opened, keys));
    }
    if crate::store::cases::keys_held(&cx.db, order_no.as_str()).await? {
        // Held back while a case is open: the link stays unused.
        return Ok((opened, keys.held_back()));
    }
    let shown = i64::try_from(keys.keys.len()).unwrap_or(i64::MAX);
    if !lookup::use_link(&cx.db, &opened.link_id, &order_no, shown, viewer, cx.now_ms()).await? {
        // Another tab used it a moment ago.
        return Err(contact::link_refusal(LinkState::Used).map_or_else(|| Error::not_found("link"), Error::from));
    }
    Ok((Opened { state: LinkState::Used, ..opened }, keys))
}

/// Where an order's keys are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The buyer's own pages (return, H5).
    OrderPage,
    /// `GET /api/v1/orders/{order_no}` by the buyer or the shop.
    Api,
    /// The admin API and console.
    Admin,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::OrderPage => "order_page",
            Channel::Api => "api",
            Channel::Admin => "admin",
        }
    }
}

/// The delivered keys of `order_no`, decrypted, with the reveal logged when there are any; held
/// back from everyone but the operator while a case about the order's payment holds them.
pub async fn reveal_keys(cx: &Context, order_no: &OrderNo, channel: Channel, viewer: &Viewer) -> Result<OrderKeys> {
    let keys = fulfilment::order_keys(&cx.db, cx.vault.as_deref(), order_no, cx.now_ms()).await?;
    if !keys.keys.is_empty()
        && channel != Channel::Admin
        && crate::store::cases::keys_held(&cx.db, order_no.as_str()).await?
    {
        // Held back from the buyer while a complaint or dispute is open; the operator sees them.
        return Ok(keys.held_back());
    }
    if !keys.keys.is_empty() {
        let shown = i64::try_from(keys.keys.len()).unwrap_or(i64::MAX);
        lookup::record_reveal(&cx.db, order_no, channel.as_str(), shown, viewer, cx.now_ms()).await?;
    }
    Ok(keys)
}

//! The use cases: one function per command, shared by the HTTP layer and the workers. Each takes a
//! [`Context`] (the store, the gateways, the clock and the shop's policies), loads what it needs,
//! lets the domain decide and has the store carry the decision out; remote calls run after commit,
//! outside any transaction. Nothing here knows HTTP: bodies, cookies, the bot check and status
//! codes stay in [`crate::http`].

pub mod basket;
pub mod cases;
pub mod catalog;
pub mod checkout;
pub mod expiry;
pub mod fulfilment;
pub mod lookup;
pub mod mail;
pub mod payment;
pub mod promotion;
pub mod reconcile;
pub mod refund;
pub mod statements;
pub mod webhook;

use std::sync::Arc;

use crate::clock::SharedClock;
use crate::domain::decide::LatePolicy;
use crate::domain::refund::RefundPolicy;
use crate::domain::shop::Origin;
use crate::gateway::Gateways;
use crate::store::Db;
use crate::vault::Vault;

/// What a use case may reach: the database, the gateways, the clock and the shop's policies.
#[derive(Clone)]
pub struct Context {
    pub db: Db,
    pub clock: SharedClock,
    pub gateways: Gateways,
    /// The address buyers and gateways reach kassa at (notify and return URLs).
    pub public_url: String,
    /// How long a confirmed order holds its stock.
    pub hold_ms: i64,
    /// Unpaid orders per buyer session; 0 for no limit.
    pub max_open_orders_per_session: u32,
    /// The shop's limits on one order's units (hoarding).
    pub order_limits: crate::domain::checkout::OrderLimits,
    pub late_policy: LatePolicy,
    pub refund_policy: RefundPolicy,
    /// Where a checkout may send its buyer back to (`--allowed-return-origins`).
    pub allowed_return_origins: Vec<Origin>,
    /// Card-key encryption; `None` when no keys secret is configured (digital goods disabled).
    pub vault: Option<Arc<Vault>>,
    /// Signs the links to an order a lookup hands out.
    pub links: Arc<crate::vault::LinkSigner>,
    /// How long such a link stays good.
    pub link_hours: u64,
    /// E-mail to the buyer; `None` when no `[email]` server is configured.
    pub mail: Option<mail::MailPolicy>,
}

impl Context {
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

//! What an operator (or the shop's server) does to a paid order: ship it, or accept a payment
//! that arrived after the order had expired.

use super::Context;
use crate::domain::OrderStatus;
use crate::domain::ids::OrderNo;
use crate::domain::shipping::Logistics;
use crate::error::Result;
use crate::store::{fulfilment, orders, views};

/// How a shipment went out, as the operator names it; each field optional.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shipment<'a> {
    pub logistics: Option<&'a str>,
    pub tracking_no: Option<&'a str>,
    pub express_company: Option<&'a str>,
}

/// Marks a paid order delivered, with how it was shipped (checked by the domain: a tracking
/// number names its carrier).
pub async fn deliver(cx: &Context, order_no: &OrderNo, shipment: Shipment<'_>) -> Result<()> {
    let logistics = Logistics::of_shipment(shipment.logistics, shipment.tracking_no, shipment.express_company)?;
    fulfilment::mark_delivered(&cx.db, order_no, &logistics, cx.now_ms()).await
}

/// Accepts a payment that came after its order expired: the order is paid if its stock can still
/// be held, as the domain decides. Returns the order's status after.
pub async fn accept_late(cx: &Context, order_no: &OrderNo) -> Result<OrderStatus> {
    orders::accept_late_payment(&cx.db, order_no, cx.now_ms()).await?;
    Ok(views::get_order(&cx.db, order_no, false).await?.status)
}

//! The buyer's side before confirm: a session, and baskets whose lines it sets.

use super::Context;
use crate::domain::ids::{BasketId, SessionId, Sku};
use crate::error::Result;
use crate::store::catalog::{self, BasketView, Session};

/// A new buyer session: its bearer token (shown once) and the session.
pub async fn start_session(cx: &Context) -> Result<(String, Session)> {
    catalog::create_session(&cx.db, cx.now_ms()).await
}

/// A new open basket of the buyer's, empty or with `lines` (SKU, quantity): all of them or none.
pub async fn open_basket(cx: &Context, session_id: &SessionId, lines: Vec<(String, i64)>) -> Result<BasketView> {
    catalog::open_basket(&cx.db, session_id, lines, cx.now_ms()).await
}

/// Sets a line of the buyer's open basket (0 removes it).
pub async fn set_line(
    cx: &Context,
    session_id: &SessionId,
    basket: &BasketId,
    sku: &Sku,
    quantity: i64,
) -> Result<BasketView> {
    let view = catalog::set_basket_line(&cx.db, session_id, basket, sku, quantity, cx.now_ms()).await?;
    super::promotion::priced(cx, view).await
}

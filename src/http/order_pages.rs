//! The buyer's pages of an order after the hand-off: the return page (what kassa knows, the keys,
//! *Try again*), its status poll, a retry from the page, and the H5 order page.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use std::collections::BTreeMap;

use super::i18n::{Lang, Texts};
use super::pages::{OrderLines, error_page, form_session, handoff_page, order_lines, page_payer};
use super::{AppState, Caller, Content, FormBody, RouteDoc, render};
use crate::domain::decide;
use crate::domain::ids::{self, AttemptRef, OrderNo};
use crate::domain::{AttemptStatus, OrderStatus};
use crate::error::{Error, Result};
use crate::store::views;
use crate::usecase::lookup;

#[derive(Template)]
#[template(path = "return.html")]
struct ReturnPage<'a> {
    t: &'static Texts,
    switch_href: String,
    attempt_ref: &'a str,
    order_no: &'a str,
    status: &'a str,
    /// This attempt's status: a failed or cancelled one is said so, with *Try again*.
    attempt_status: &'a str,
    total: String,
    settled: bool,
    poll_url: String,
    own: bool,
    /// The buyer's CSRF token for *Try again* (own buyer only).
    csrf: &'a str,
    keys: Vec<String>,
    keys_unavailable: i64,
    keys_held: i64,
    lines: OrderLines,
    placed_at: String,
    pay_by: String,
    /// Where the order's e-mail goes, masked (empty: none).
    sent_to: String,
}

/// Where an order's e-mail goes, masked for a page: empty when it has no address or e-mail is off.
fn sent_to(state: &AppState, order: &views::OrderView) -> String {
    match (&state.mail, &order.contact.email) {
        (Some(_), Some(e)) => crate::domain::contact::Email::stored(e.clone()).masked(),
        _ => String::new(),
    }
}

/// The buyer's pages of one order: the return page and its status, *Try again*, the H5 order page.
pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let doc = |method, path, summary| {
        RouteDoc::page(method, path, summary, "pages").answer(200, "HTML page", Content::Other("text/html"))
    };
    vec![
        (
            doc(
                "get",
                "/checkout/return/{attempt_ref}",
                "Return page after the gateway: shows the locally known status (HTML)",
            ),
            get(return_page),
        ),
        (
            doc(
                "get",
                "/checkout/return/{attempt_ref}/status",
                "Status polled by the return page: {status, settled, attempt_status, can_retry}",
            ),
            get(return_status),
        ),
        (
            doc(
                "post",
                "/checkout/retry/{order_no}",
                "Try again after a failed or cancelled payment: a new attempt and its hand-off (HTML form)",
            ),
            post(retry_page),
        ),
        (
            doc(
                "get",
                "/h5/orders/{order_no}",
                "H5 order-status page: polls the order until final, shows delivered keys (buyer's cookie)",
            ),
            get(h5_order),
        ),
    ]
}

/// The status of `attempt_ref` on its order.
fn attempt_status_of(order: &views::OrderView, attempt_ref: &str) -> Option<AttemptStatus> {
    order.attempts.iter().find(|a| a.attempt_ref == attempt_ref).map(|a| a.status)
}

/// Shows what kassa knows. Query parameters are ignored: the browser coming back proves nothing
/// about payment; for the order's own buyer a pending order is queried at its gateway first.
pub(super) async fn return_page(
    State(state): State<AppState>,
    lang: Lang,
    caller: Caller,
    headers: HeaderMap,
    client: Option<axum::Extension<super::guard::Client>>,
    Path(attempt_ref): Path<String>,
) -> Response {
    let t = lang.texts();
    let viewer = super::viewer(client.as_ref().map(|c| &c.0), &headers);
    let result = async {
        let attempt_ref = AttemptRef::parse(&attempt_ref)?;
        let order_no =
            views::order_no_for_attempt(&state.db, &attempt_ref).await?.ok_or_else(|| Error::not_found("payment"))?;
        let mut order = views::get_order(&state.db, &order_no, false).await?;
        let session = caller.session.as_ref().filter(|s| s.id == order.session_id);
        if session.is_some() && order.status == OrderStatus::PendingPayment {
            // The buyer is back from the gateway and waiting: ask it now rather than wait for the
            // notification (the redirect itself proves nothing).
            crate::usecase::payment::query_for_buyer(&state.cx, &order).await;
            order = views::get_order(&state.db, &order_no, false).await?;
        }
        let status = order.status;
        // Delivered card keys are shown to the order's own buyer only.
        let keys = match session {
            Some(_) => lookup::reveal_keys(&state.cx, &order_no, lookup::Channel::OrderPage, &viewer).await?,
            None => Default::default(),
        };
        Ok(render(&ReturnPage {
            t,
            switch_href: t.switch_href(&format!("/checkout/return/{attempt_ref}")),
            lines: order_lines(&order),
            placed_at: t.time(&order.created_at, &state.time_zone),
            pay_by: t.time(&order.expires_at, &state.time_zone),
            sent_to: sent_to(&state, &order),
            keys: keys.keys.iter().map(|(_, k)| k.clone()).collect(),
            keys_unavailable: keys.unreadable_total(),
            keys_held: keys.held_total(),
            attempt_ref: &attempt_ref,
            order_no: &order_no,
            status: status.as_str(),
            attempt_status: attempt_status_of(&order, &attempt_ref).map_or("", AttemptStatus::as_str),
            total: order.total_display(),
            settled: status.is_settled(),
            poll_url: format!("/checkout/return/{attempt_ref}/status"),
            own: session.is_some(),
            csrf: session.map_or("", |s| s.csrf_token.as_str()),
        }))
    }
    .await;
    result.unwrap_or_else(|e| error_page(lang, &e, "/"))
}

#[derive(Template)]
#[template(path = "h5_order.html")]
struct H5Order<'a> {
    t: &'static Texts,
    switch_href: String,
    order_no: &'a str,
    status: &'a str,
    /// The newest attempt's status: a failed or cancelled one is said so, with *Try again*.
    attempt_status: &'a str,
    total: String,
    settled: bool,
    csrf: &'a str,
    keys: Vec<String>,
    keys_unavailable: i64,
    keys_held: i64,
    lines: OrderLines,
    placed_at: String,
    pay_by: String,
    sent_to: String,
}

pub(super) async fn h5_order(
    State(state): State<AppState>,
    lang: Lang,
    caller: Caller,
    headers: HeaderMap,
    client: Option<axum::Extension<super::guard::Client>>,
    Path(order_no): Path<String>,
) -> Response {
    let t = lang.texts();
    let viewer = super::viewer(client.as_ref().map(|c| &c.0), &headers);
    let result = async {
        let order_no = OrderNo::parse(&order_no)?;
        let order = views::get_order(&state.db, &order_no, false).await?;
        // Only the buyer's own session sees the page (and the keys on it).
        let session =
            caller.session.as_ref().filter(|s| s.id == order.session_id).ok_or_else(|| Error::not_found("order"))?;
        super::note_order(&order_no);
        let keys = lookup::reveal_keys(&state.cx, &order_no, lookup::Channel::OrderPage, &viewer).await?;
        let status = order.status;
        Ok(render(&H5Order {
            t,
            switch_href: t.switch_href(&format!("/h5/orders/{order_no}")),
            placed_at: t.time(&order.created_at, &state.time_zone),
            pay_by: t.time(&order.expires_at, &state.time_zone),
            order_no: &order_no,
            status: status.as_str(),
            attempt_status: order.attempts.last().map_or("", |a| a.status.as_str()),
            total: order.total_display(),
            settled: status.is_settled() && status != OrderStatus::Paid,
            csrf: &session.csrf_token,
            keys: keys.keys.iter().map(|(_, k)| k.clone()).collect(),
            keys_unavailable: keys.unreadable_total(),
            keys_held: keys.held_total(),
            sent_to: sent_to(&state, &order),
            lines: order_lines(&order),
        }))
    }
    .await;
    result.unwrap_or_else(|e| error_page(lang, &e, "/"))
}

/// *Try again* from the return or the H5 page: a new attempt on the same order, handed off as at
/// confirm (the same flow as `POST /api/v1/orders/{order_no}/attempts`).
pub(super) async fn retry_page(
    State(state): State<AppState>,
    lang: Lang,
    headers: HeaderMap,
    axum::Extension(client): axum::Extension<super::guard::Client>,
    Path(order_no): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        let order_no = OrderNo::parse(&order_no)?;
        let session = form_session(&state, &headers, &form).await?;
        let device = super::negotiate::device(&headers);
        let body = super::flows::RetryBody { payer: page_payer(device, &client), ..Default::default() };
        let (placed, handoff) = super::flows::retry_flow(&state, Some(&session.id), &order_no, &body, device).await?;
        Ok(handoff_page(&state, lang, &placed, Some(&handoff)).await)
    }
    .await;
    let back = if ids::is_plain_id(&order_no) { format!("/h5/orders/{order_no}") } else { "/".to_string() };
    result.unwrap_or_else(|e| error_page(lang, &e, &back))
}

pub(super) async fn return_status(State(state): State<AppState>, Path(attempt_ref): Path<String>) -> Result<Response> {
    let attempt_ref = AttemptRef::parse(&attempt_ref)?;
    let order_no =
        views::order_no_for_attempt(&state.db, &attempt_ref).await?.ok_or_else(|| Error::not_found("payment"))?;
    let order = views::get_order(&state.db, &order_no, false).await?;
    let attempt_status = attempt_status_of(&order, &attempt_ref);
    Ok(axum::Json(serde_json::json!({
        "status": order.status,
        "settled": order.status.is_settled(),
        "attempt_status": attempt_status.map_or("", AttemptStatus::as_str),
        "can_retry": attempt_status.is_some_and(|a| decide::offers_try_again(order.status, a)),
    }))
    .into_response())
}

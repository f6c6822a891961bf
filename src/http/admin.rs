//! The admin console (`/admin`): sign in with the admin token, then an HttpOnly, SameSite=Strict
//! session cookie; every form carries the session's CSRF token. Server-rendered, escaped by askama.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get, post};

use super::api_lists::{self, ExportQuery, OrderFilterQuery, RangeQuery, read_query};
use super::console::{ADMIN_COOKIE, Operator, done_message};
use super::guard::{Bucket, Client};
use super::i18n::{Lang, Texts};
use super::{AppState, Content, FormBody, RouteDoc, cookie, render, set_cookie};
use crate::clock::Millis;
use crate::domain::ids::{self, OrderNo, RefundNo, Sku};
use crate::domain::signin::{LockoutPolicy, Verdict, verdict};
use crate::error::{Error, Result};
use crate::store::admin::{self, AlertRow, Dashboard, NotificationRow, SkuRow};
use crate::store::fulfilment;
use crate::store::listing::{self, Cursor, MessageView, OrderFilter, OrderSummary};
use crate::store::refunds::{self, RefundView};
use crate::store::views::{self, OrderView};
use crate::usecase::{payment, refund};
use cookie::SameSite;

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let doc = |method, path, summary| {
        RouteDoc::page(method, path, summary, "admin console").answer(200, "HTML page", Content::Other("text/html"))
    };
    let csv = |path, summary| {
        RouteDoc::page("get", path, summary, "admin console").answer(200, "the file", Content::Other("text/csv"))
    };
    vec![
        (doc("get", "/admin/login", "Admin console: sign in with the admin token (POST)"), get(login_page).post(login)),
        (doc("post", "/admin/logout", "Admin console: sign out"), post(logout)),
        (doc("get", "/admin", "Admin console: dashboard"), get(dashboard)),
        (
            doc(
                "get",
                "/admin/orders",
                "Admin console: orders, filtered by status or searched by order number, attempt reference or gateway transaction id",
            ),
            get(orders_page),
        ),
        (
            doc(
                "get",
                "/admin/orders/{order_no}",
                "Admin console: one order with its timeline, attempts, notifications, refunds and outbox",
            ),
            get(order_page),
        ),
        (
            doc(
                "post",
                "/admin/orders/{order_no}/action",
                "Admin console: accept a late payment, refund, mark delivered or cancel",
            ),
            post(order_action),
        ),
        (
            csv("/admin/orders.csv", "Admin console: orders as CSV, with the filters of /api/v1/admin/orders.csv"),
            get(orders_csv),
        ),
        (
            csv("/admin/refunds.csv", "Admin console: refunds as CSV, with the dates of /api/v1/admin/refunds.csv"),
            get(refunds_csv),
        ),
        (doc("get", "/admin/skus", "Admin console: SKUs with stock, limits and key pools"), get(skus_page)),
        (
            doc(
                "post",
                "/admin/skus/{sku}/limits",
                "Admin console: set a SKU's limit per order and hold (empty: none)",
            ),
            post(set_sku_limits),
        ),
        (
            doc("get", "/admin/notifications", "Admin console: notification inbox (rejected ones highlighted)"),
            get(inbox_page),
        ),
        (doc("get", "/admin/alerts", "Admin console: alerts"), get(alerts_page)),
        (doc("post", "/admin/alerts/{id}/ack", "Admin console: acknowledge an alert"), post(ack_alert)),
    ]
}

#[derive(Template)]
#[template(path = "admin/login.html")]
struct LoginPage<'a> {
    t: &'static Texts,
    error: &'a str,
}

async fn login_page(lang: Lang) -> Response {
    render(&LoginPage { t: lang.texts(), error: "" })
}

/// The sign-in page answered with `status` and `error`.
fn login_refused(t: &'static Texts, status: StatusCode, error: &str) -> Response {
    let mut r = render(&LoginPage { t, error });
    *r.status_mut() = status;
    r
}

/// A wrong admin token on the API (`Authorization: Bearer`). With rate limits on it counts against
/// the address as a failed sign-in does — the address's sign-in bucket, then the stored lockout —
/// and while the address is backed off its wrong tokens are answered 429 (`rate_limited`, with
/// Retry-After) without being counted again; otherwise 403. The right token is never refused, so a
/// guesser cannot lock the admin out.
pub(super) async fn wrong_admin_token(state: &AppState, client: Option<&Client>) -> Error {
    let (Some(limits), Some(client)) = (state.protection.rate_limits, client) else { return Error::forbidden() };
    if client.exempt {
        return Error::forbidden();
    }
    let address = client.addr.to_string();
    tracing::warn!(client = %address, "wrong admin token");
    if let Err(limited) = state.guard.take(Bucket::Signins, client) {
        return limited;
    }
    let now = state.now_ms();
    let policy = LockoutPolicy { max_failures: limits.signin_lockout_failures, lockout_ms: limits.signin_lockout_ms };
    let backed_off = |until: Millis| {
        let retry_after_s = until.saturating_sub(now).max(1000) / 1000;
        Error::refused(
            crate::error::RefusalKind::TooMany,
            "rate_limited",
            format!("too many wrong admin tokens from this address; retry in {retry_after_s} s"),
        )
        .with_details(serde_json::json!({"bucket": "signins", "retry_after_s": retry_after_s}))
    };
    let locked_until = match admin::signin_locked_until(&state.db, &address, now).await {
        Ok(until) => until,
        Err(e) => return e,
    };
    match verdict(false, locked_until, now) {
        Verdict::BackedOff(until) => backed_off(until),
        _ => match admin::record_signin_failure(&state.db, &address, now, policy).await {
            Ok(Some(until)) => backed_off(until),
            Ok(None) => Error::forbidden(),
            Err(e) => e,
        },
    }
}

/// Signs in with the admin token. The right token always signs in. With rate limits on, wrong
/// tokens draw from the address's sign-in bucket, and an address that fails too often (or all
/// addresses together, ten times as often) is backed off for a while: its wrong tokens are answered
/// 429 without being counted again. The counts are in the database, so every instance agrees, and
/// a lockout raises an alert.
async fn login(
    State(state): State<AppState>,
    axum::Extension(client): axum::Extension<Client>,
    lang: Lang,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let t = lang.texts();
    let now = state.now_ms();
    let address = client.addr.to_string();
    let lockout = state
        .protection
        .rate_limits
        .map(|r| LockoutPolicy { max_failures: r.signin_lockout_failures, lockout_ms: r.signin_lockout_ms });
    let locked = |until: Millis| {
        let seconds = until.saturating_sub(now).max(1000) / 1000;
        let mut r =
            login_refused(t, StatusCode::TOO_MANY_REQUESTS, &t.f("admin.login.locked", "minutes", (seconds + 59) / 60));
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        r
    };
    let token = form.get("token").map(String::as_str).unwrap_or_default();
    let correct = state.is_admin_token(token);
    if let Some(policy) = lockout {
        if !correct {
            tracing::warn!(client = %address, "admin sign-in refused");
            if let Err(e) = state.guard.take(Bucket::Signins, &client) {
                return e.into_response();
            }
        }
        let locked_until = if correct {
            None
        } else {
            match admin::signin_locked_until(&state.db, &address, now).await {
                Ok(until) => until,
                Err(e) => return e.into_response(),
            }
        };
        match verdict(correct, locked_until, now) {
            Verdict::Admit => {
                if let Err(e) = admin::clear_signin_failures(&state.db, &address).await {
                    return e.into_response();
                }
            }
            Verdict::BackedOff(until) => return locked(until),
            Verdict::Refuse => {
                return match admin::record_signin_failure(&state.db, &address, now, policy).await {
                    Ok(Some(until)) => locked(until),
                    Ok(None) => login_refused(t, StatusCode::UNAUTHORIZED, t.t("admin.login.invalid")),
                    Err(e) => e.into_response(),
                };
            }
        }
    } else if !correct {
        tracing::warn!(client = %address, "admin sign-in refused");
        return login_refused(t, StatusCode::UNAUTHORIZED, t.t("admin.login.invalid"));
    }
    match admin::create_session(&state.db, now, state.protection.admin_idle_ms).await {
        Ok((session, _)) => {
            let mut r = Redirect::to("/admin").into_response();
            // Secure whenever kassa is reached over https: the cookie then never travels in clear.
            let secure = state.public_url.starts_with("https://");
            let max_age = Some(admin::ADMIN_SESSION_MS / 1000);
            let c = set_cookie(ADMIN_COOKIE, &session, "/admin", max_age, SameSite::Strict, true, secure);
            if let Ok(v) = HeaderValue::from_str(&c) {
                r.headers_mut().append(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => e.into_response(),
    }
}

async fn logout(
    State(state): State<AppState>,
    op: Operator,
    headers: HeaderMap,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    if let Err(e) = op.check(&form) {
        return e.into_response();
    }
    if let Some(token) = cookie(&headers, ADMIN_COOKIE)
        && let Err(e) = admin::end_session(&state.db, token).await
    {
        return e.into_response();
    }
    let mut r = Redirect::to("/admin/login").into_response();
    let gone = set_cookie(ADMIN_COOKIE, "", "/admin", Some(0), SameSite::Strict, true, false);
    if let Ok(v) = HeaderValue::from_str(&gone) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

#[derive(Template)]
#[template(path = "admin/dashboard.html")]
struct DashboardPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    d: Dashboard,
}

async fn dashboard(State(state): State<AppState>, op: Operator, lang: Lang) -> Result<Response> {
    let d = admin::dashboard(&state.db, state.now_ms()).await?;
    Ok(render(&DashboardPage { t: lang.texts(), csrf: &op.csrf, d }))
}

#[derive(Template)]
#[template(path = "admin/orders.html")]
struct OrdersPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    rows: Vec<OrderSummary>,
    status: String,
    q: String,
    statuses: Vec<&'static str>,
    /// The link to the next (older) page, when there is one.
    older: Option<String>,
}

async fn orders_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let status = query.get("status").and_then(|s| crate::domain::OrderStatus::parse(s));
    let q: String = query.get("q").cloned().unwrap_or_default().trim().chars().take(ids::MAX_ID_LEN).collect();
    let cursor = page_cursor(&query)?;
    let filter = OrderFilter { status, q: Some(q.clone()).filter(|q| !q.is_empty()), ..Default::default() };
    let page = listing::orders(&state.db, &filter, cursor.as_ref(), listing::PAGE_MAX).await?;
    let status = status.map(|s| s.as_str().to_string()).unwrap_or_default();
    let older = older_link("/admin/orders", &[("status", status.as_str()), ("q", q.as_str())], page.next_cursor);
    let statuses = crate::domain::OrderStatus::ALL.iter().map(|s| s.as_str()).collect();
    Ok(render(&OrdersPage { t: lang.texts(), csrf: &op.csrf, rows: page.items, status, q, statuses, older }))
}

/// The orders export behind the console's sign-in (its cookie is sent under `/admin` only).
async fn orders_csv(
    State(state): State<AppState>,
    _op: Operator,
    query: std::result::Result<Query<OrderFilterQuery>, QueryRejection>,
    export: std::result::Result<Query<ExportQuery>, QueryRejection>,
) -> Result<Response> {
    api_lists::orders_export(&state, &read_query(query)?, &read_query(export)?)
}

/// The refunds export behind the console's sign-in.
async fn refunds_csv(
    State(state): State<AppState>,
    _op: Operator,
    query: std::result::Result<Query<RangeQuery>, QueryRejection>,
    export: std::result::Result<Query<ExportQuery>, QueryRejection>,
) -> Result<Response> {
    api_lists::refunds_export(&state, &read_query(query)?, &read_query(export)?)
}

#[derive(Template)]
#[template(path = "admin/order.html")]
struct OrderPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    order: OrderView,
    total: String,
    keys_delivered: usize,
    keys_unreadable: i64,
    notifications: Vec<NotificationRow>,
    refunds: Vec<RefundView>,
    outbox: Vec<MessageView>,
    /// Without a webhook URL the outbox's messages are kept but never sent.
    webhook_configured: bool,
    findings: Vec<crate::store::reconcile::FindingView>,
    statement_findings: Vec<crate::store::statements::StatementFindingView>,
    shipping_report: Option<crate::store::shipping::ShippingReportView>,
    second_captures: Vec<crate::store::second_captures::SecondCaptureView>,
    refund_no: String,
    message: String,
    mail: Vec<crate::store::mail::Mail>,
    subscribe: Vec<crate::store::subscribe::SubscribeView>,
}

async fn order_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Path(order_no): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let order_no = OrderNo::parse(&order_no)?;
    let order = views::get_order(&state.db, &order_no, true).await?;
    let keys = fulfilment::order_keys(&state.db, state.vault.as_deref(), &order_no, state.now_ms()).await?;
    let keys_unreadable = keys.unreadable_total();
    let keys_delivered = keys.keys.len() + usize::try_from(keys_unreadable).unwrap_or(0);
    let t = lang.texts();
    let message = match query.get("done").map(String::as_str) {
        Some("accept") => t.t("admin.order.done_accept"),
        Some("refund") => t.t("admin.order.done_refund"),
        Some("deliver") => t.t("admin.order.done_deliver"),
        Some("cancel") => t.t("admin.order.done_cancel"),
        Some("resend") => t.t("admin.order.done_resend"),
        _ => "",
    };
    Ok(render(&OrderPage {
        t,
        csrf: &op.csrf,
        total: order.total_display(),
        notifications: admin::notifications(&state.db, Some(&order_no), false, None).await?.items,
        refunds: refunds::list_for_order(&state.db, &order_no).await?,
        outbox: listing::messages(&state.db, None, Some(&order_no), None, listing::PAGE_MAX).await?.items,
        webhook_configured: state.webhook_configured,
        findings: crate::store::reconcile::list_findings(&state.db, Some(&order_no), 100).await?,
        statement_findings: crate::store::statements::findings_of_order(&state.db, &order_no).await?,
        shipping_report: crate::store::shipping::report_of(&state.db, &order_no).await?,
        second_captures: crate::store::second_captures::of_order(&state.db, &order_no).await?,
        refund_no: admin::suggest_refund_no(),
        message: message.to_string(),
        mail: crate::store::mail::of_order(&state.db, &order_no).await?,
        subscribe: crate::store::subscribe::of_order(&state.db, &order_no).await?,
        keys_delivered,
        keys_unreadable,
        order,
    }))
}

async fn order_action(
    State(state): State<AppState>,
    op: Operator,
    Path(order_no): Path<String>,
    lang: Lang,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        op.check(&form)?;
        let order_no = OrderNo::parse(&order_no)?;
        let action = form.get("action").map(String::as_str).unwrap_or_default();
        match action {
            "accept" => drop(crate::usecase::fulfilment::accept_late(&state.cx, &order_no).await?),
            "deliver" => {
                let field = |name: &str| form.get(name).map(String::as_str).filter(|v| !v.trim().is_empty());
                let shipment = crate::usecase::fulfilment::Shipment {
                    logistics: field("logistics"),
                    tracking_no: field("tracking_no"),
                    express_company: field("express_company"),
                };
                crate::usecase::fulfilment::deliver(&state.cx, &order_no, shipment).await?
            }
            "cancel" => {
                let current = views::get_order(&state.db, &order_no, false).await?;
                payment::cancel(&state.cx, None, &current, false).await?;
            }
            "refund" => {
                // The operator types money as money: major units of the order's currency.
                let order = views::get_order(&state.db, &order_no, false).await?;
                let currency = crate::domain::Currency::parse(&order.currency)?;
                let text = form.get("amount").map(|a| a.trim()).unwrap_or_default();
                let amount = crate::domain::Money::parse_decimal(text, currency).ok_or_else(|| {
                    Error::unprocessable(
                        "invalid_amount",
                        format!("the amount is in {currency}, such as {}", order.decimal(&order.total_minor)),
                    )
                })?;
                let refund_no = RefundNo::parse(form.get("refund_no").map(String::as_str).unwrap_or_default())?;
                let reason = form.get("reason").map(String::as_str).unwrap_or_default();
                refund::request(&state.cx, &order_no, &refund_no, amount.amount_minor(), reason).await?;
            }
            "resend" => {
                let id = form.get("message").map(String::as_str).unwrap_or_default();
                let message = listing::message(&state.db, id).await?;
                if message.order_no != order_no.as_str() {
                    return Err(Error::not_found("webhook message"));
                }
                crate::usecase::webhook::resend(&state.cx, id).await?;
            }
            _ => return Err(Error::invalid("invalid_action", "unknown action")),
        }
        Ok(Redirect::to(&format!("/admin/orders/{order_no}?done={action}")).into_response())
    }
    .await;
    result.unwrap_or_else(|e| super::pages::console_error_page(lang, &e, &format!("/admin/orders/{order_no}")))
}

#[derive(Template)]
#[template(path = "admin/skus.html")]
struct SkusPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    rows: Vec<SkuRow>,
    message: String,
    /// The currencies a new SKU may be priced in, the shop's first.
    currencies: Vec<&'static str>,
}

async fn skus_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let t = lang.texts();
    let message = done_message(t, &query);
    let currencies = crate::domain::Currency::known().collect();
    Ok(render(&SkusPage { t, csrf: &op.csrf, rows: admin::skus(&state.db).await?, message, currencies }))
}

#[derive(Template)]
#[template(path = "admin/notifications.html")]
struct InboxPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    rows: Vec<NotificationRow>,
    only_rejected: bool,
    /// The link to the next (older) page, when there is one.
    older: Option<String>,
}

/// A console list's cursor (`?cursor=`), and the link to the page after this one.
fn page_cursor(query: &BTreeMap<String, String>) -> Result<Option<Cursor>> {
    query.get("cursor").filter(|c| !c.is_empty()).map(|c| Cursor::parse(c)).transpose()
}

fn older_link(path: &str, pairs: &[(&str, &str)], next: Option<String>) -> Option<String> {
    next.map(|c| {
        let mut query: Vec<(&str, &str)> = pairs.iter().filter(|(_, v)| !v.is_empty()).copied().collect();
        query.push(("cursor", c.as_str()));
        format!("{path}?{}", serde_urlencoded::to_string(query).unwrap_or_default())
    })
}

async fn inbox_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let only_rejected = query.get("rejected").is_some_and(|v| v == "1");
    let page = admin::notifications(&state.db, None, only_rejected, page_cursor(&query)?.as_ref()).await?;
    let older =
        older_link("/admin/notifications", &[("rejected", if only_rejected { "1" } else { "" })], page.next_cursor);
    Ok(render(&InboxPage { t: lang.texts(), csrf: &op.csrf, rows: page.items, only_rejected, older }))
}

#[derive(Template)]
#[template(path = "admin/alerts.html")]
struct AlertsPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    rows: Vec<AlertRow>,
    all: bool,
    older: Option<String>,
}

async fn alerts_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let all = query.get("all").is_some_and(|v| v == "1");
    let page = admin::alerts(&state.db, all, page_cursor(&query)?.as_ref()).await?;
    let older = older_link("/admin/alerts", &[("all", if all { "1" } else { "" })], page.next_cursor);
    Ok(render(&AlertsPage { t: lang.texts(), csrf: &op.csrf, rows: page.items, all, older }))
}

/// A limit field of the console's form: empty for none, else a whole number.
fn limit_field(form: &BTreeMap<String, String>, name: &str) -> Result<Option<i64>> {
    match form.get(name).map(|v| v.trim()).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| Error::unprocessable("invalid_limit", format!("{name} must be a whole number or empty"))),
    }
}

async fn set_sku_limits(
    State(state): State<AppState>,
    op: Operator,
    Path(sku): Path<String>,
    lang: Lang,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        op.check(&form)?;
        let sku = Sku::parse(&sku)?;
        let limits = crate::store::catalog::LimitsPatch {
            max_per_order: Some(limit_field(&form, "max_per_order")?),
            hold_seconds: Some(limit_field(&form, "hold_seconds")?),
        };
        crate::store::catalog::update_sku(&state.db, &sku, None, None, limits, state.now_ms()).await?;
        Ok(Redirect::to("/admin/skus").into_response())
    }
    .await;
    result.unwrap_or_else(|e| super::pages::console_error_page(lang, &e, "/admin/skus"))
}

async fn ack_alert(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    lang: Lang,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        op.check(&form)?;
        admin::acknowledge_alert(&state.db, &id).await?;
        Ok(Redirect::to("/admin/alerts").into_response())
    }
    .await;
    result.unwrap_or_else(|e| super::pages::console_error_page(lang, &e, "/admin/alerts"))
}

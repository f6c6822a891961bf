//! Server-rendered pages: the demo storefront, the basket (with its promotion code), the gateway
//! hand-off page and the return page.
//! askama escapes every value, attributes included.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get, post};
use std::collections::BTreeMap;

use super::flows::{CheckoutBody, place_order};
use super::i18n::{Lang, Next, Texts};
use super::{AppState, Content, FormBody, RouteDoc, SESSION_COOKIE, cookie, render};
use crate::domain::OrderStatus;
use crate::domain::ids::{self, BasketId, IdempotencyKey};
use crate::error::{Error, Result};
use crate::gateway::Handoff;
use crate::store::catalog::{self, BasketView, Session, SkuView};
use crate::store::checkout::Placed;
use crate::store::views;

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let doc = |method, path, summary| {
        RouteDoc::page(method, path, summary, "pages").answer(200, "HTML page", Content::Other("text/html"))
    };
    vec![
        (doc("get", "/", "Demo storefront (HTML, --demo only)"), get(storefront)),
        (doc("get", "/assets/{name}", "The pages' scripts (JavaScript)"), get(asset)),
        (
            doc("post", "/shop/basket", "Storefront: put the chosen goods in a new basket (HTML form)"),
            post(shop_basket),
        ),
        (doc("get", "/shop/basket/{basket_id}", "Storefront: review the basket (HTML)"), get(shop_review)),
        (
            doc(
                "post",
                "/shop/basket/{basket_id}/promotion",
                "Storefront: put a promotion code on the basket (HTML form); a refused code is said on the basket page",
            ),
            post(shop_code),
        ),
        (
            doc(
                "post",
                "/shop/basket/{basket_id}/promotion/remove",
                "Storefront: take the promotion code off the basket (HTML form)",
            ),
            post(shop_code_remove),
        ),
        (
            doc(
                "post",
                "/shop/basket/{basket_id}/confirm",
                "Storefront: confirm and hand off to the gateway (HTML form)",
            ),
            post(shop_confirm),
        ),
    ]
}

/// An order's lines as a page shows them, with what its promotion took off.
#[derive(Default)]
pub(super) struct OrderLines {
    /// Name, quantity, line total as money.
    pub rows: Vec<(String, i64, String)>,
    /// The promotion's code and what it took off, as money; `None` without a discount.
    pub discount: Option<(String, String)>,
}

impl OrderLines {
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// The lines of `order`, and its discount, as its pages show them.
pub(super) fn order_lines(order: &views::OrderView) -> OrderLines {
    OrderLines {
        rows: order.lines.iter().map(|l| (l.name.clone(), l.quantity, order.money(&l.line_total_minor))).collect(),
        discount: (order.discount_minor > 0)
            .then(|| (order.promotion_code.clone().unwrap_or_default(), order.money(&order.discount_minor))),
    }
}

#[derive(Template)]
#[template(path = "handoff.html")]
struct HandoffPage<'a> {
    t: &'static Texts,
    order_no: &'a str,
    lines: OrderLines,
    /// The shop's cancel URL when its checkout named one, else the storefront.
    back_url: String,
    total: String,
    action: &'a str,
    method: &'a str,
    fields: &'a BTreeMap<String, String>,
}

/// The QR hand-off (WeChat Pay Native): the code drawn by kassa, the amount, the time left, and
/// the order's status polled until it is known.
#[derive(Template)]
#[template(path = "qr.html")]
struct QrPage<'a> {
    t: &'static Texts,
    /// The app's name in the buyer's language.
    app: &'a str,
    order_no: &'a str,
    total: String,
    /// Inline SVG made by [`super::qr::svg`]: shapes only, no text of the buyer's or the gateway's.
    svg: String,
    lines: OrderLines,
    expires_at: &'a str,
    /// `expires_at` in the shop's time zone, as the buyer reads it.
    expires_local: String,
    poll_url: String,
    return_url: String,
    /// The shop's cancel URL when its checkout named one, else the storefront.
    back_url: String,
}

#[derive(Template)]
#[template(path = "message.html")]
struct MessagePage<'a> {
    t: &'static Texts,
    /// The other language's link, or empty on a page that offers none (the console's).
    switch_href: String,
    title: &'a str,
    message: &'a str,
    /// The next step.
    link: &'a str,
    link_text: &'a str,
    /// Whether to offer the storefront besides (buyer pages; not the console's).
    shop_link: bool,
}

/// The light page whose hidden-field form auto-submits to the gateway (with a `<noscript>` button),
/// or the QR page; either shows the order's lines, its amount and a way back to the shop.
pub async fn handoff_page(state: &AppState, lang: Lang, placed: &Placed, handoff: Option<&Handoff>) -> Response {
    let t = lang.texts();
    let lines = match handoff {
        Some(Handoff::Form { .. } | Handoff::Qr { .. }) => {
            match views::get_order(&state.db, &placed.order_no, false).await {
                Ok(order) => order_lines(&order),
                Err(e) => {
                    // The hand-off matters more than the list: the page goes on without it.
                    tracing::warn!(order_no = %placed.order_no, error = %e, "hand-off page without its lines");
                    OrderLines::default()
                }
            }
        }
        _ => OrderLines::default(),
    };
    let back_url = placed.shop.cancel_url.clone().unwrap_or_else(|| "/".to_string());
    match handoff {
        Some(Handoff::Form { action, method, fields }) => render(&HandoffPage {
            t,
            lines,
            back_url,
            order_no: &placed.order_no,
            total: placed.total.display_major(),
            action,
            method,
            fields,
        }),
        Some(Handoff::Redirect { url }) => Redirect::to(url).into_response(),
        Some(Handoff::Qr { code_url, expires_at }) => match super::qr::svg(code_url) {
            Ok(svg) => render(&QrPage {
                t,
                app: t.t(super::qr::app_of(&placed.gateway)),
                order_no: &placed.order_no,
                total: placed.total.display_major(),
                svg,
                expires_at,
                expires_local: t.time(expires_at, &state.time_zone),
                lines,
                poll_url: format!("/checkout/return/{}/status", placed.attempt_ref),
                return_url: format!("/checkout/return/{}", placed.attempt_ref),
                back_url,
            }),
            Err(e) => error_page(lang, &e, &format!("/checkout/return/{}", placed.attempt_ref)),
        },
        Some(Handoff::Client { .. }) => message(
            StatusCode::OK,
            &MessagePage {
                t,
                switch_href: String::new(),
                title: t.t("handoff.in_app_title"),
                message: t.t("handoff.in_app"),
                link: "/",
                link_text: t.t("common.back_to_shop"),
                shop_link: false,
            },
        ),
        None => Redirect::to(&format!("/checkout/return/{}", placed.attempt_ref)).into_response(),
    }
}

fn message(status: StatusCode, page: &MessagePage<'_>) -> Response {
    let mut r = render(page);
    *r.status_mut() = status;
    r
}

/// The page a buyer reaches when a request of theirs is refused or fails: in their language, what
/// happened and the next step ([`super::i18n::explain`]): the storefront, or `back` (the page the
/// handler came from).
pub fn error_page(lang: Lang, e: &Error, back: &str) -> Response {
    let status = match e {
        Error::Refused(r) => super::status_of(r.kind),
        _ if e.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let code = match e {
        // An order that cannot be paid because its time ran out is told as such.
        Error::Refused(r)
            if r.code == "not_payable"
                && r.details.as_ref().is_some_and(|d| d["status"] == OrderStatus::Expired.as_str()) =>
        {
            "order_expired"
        }
        Error::Refused(r) => r.code,
        _ if e.is_unavailable() => {
            tracing::warn!(error = %e, "page failed: database unavailable");
            "db_unavailable"
        }
        _ => {
            tracing::error!(error = %e, "page failed");
            "internal"
        }
    };
    let mut r = refusal_page(lang, status, code, back);
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(crate::error::DB_UNAVAILABLE_RETRY_AFTER_S));
    }
    r
}

/// The buyer's page for a refusal with `code` and `status`.
pub fn refusal_page(lang: Lang, status: StatusCode, code: &str, back: &str) -> Response {
    let t = lang.texts();
    let (text, next, to) = super::i18n::explain(code, status);
    let link = match to {
        Next::Shop => "/",
        Next::Back => back,
    };
    let title = if status == StatusCode::SERVICE_UNAVAILABLE { "error.unavailable_title" } else { "error.title" };
    message(
        status,
        &MessagePage {
            t,
            switch_href: t.switch_href(link),
            title: t.t(title),
            message: t.t(text),
            link,
            link_text: t.t(next),
            shop_link: link != "/",
        },
    )
}

/// The console's error page: in the operator's language, what the refusal says (in English, as
/// the refusal words it), and a way back into the console.
pub fn console_error_page(lang: Lang, e: &Error, link: &str) -> Response {
    let status = match e {
        Error::Refused(r) => super::status_of(r.kind),
        _ if e.is_unavailable() => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let t = lang.texts();
    let text = match e {
        Error::Refused(_) => e.to_string(),
        _ if e.is_unavailable() => {
            tracing::warn!(error = %e, "console page failed: database unavailable");
            t.t("error.unavailable").to_string()
        }
        _ => {
            tracing::error!(error = %e, "console page failed");
            t.t("error.internal").to_string()
        }
    };
    let mut r = message(
        status,
        &MessagePage {
            t,
            switch_href: t.switch_href(link),
            title: t.t("error.title"),
            message: &text,
            link,
            link_text: t.t("error.back"),
            shop_link: false,
        },
    );
    if status == StatusCode::SERVICE_UNAVAILABLE {
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from(crate::error::DB_UNAVAILABLE_RETRY_AFTER_S));
    }
    r
}

#[derive(Template)]
#[template(path = "storefront.html")]
struct Storefront<'a> {
    t: &'static Texts,
    switch_href: String,
    skus: &'a [SkuView],
    csrf: &'a str,
}

impl Storefront<'_> {
    /// Most a buyer may put in: what is available, and the SKU's limit per order.
    fn most(&self, sku: &SkuView) -> i64 {
        sku.max_per_order.map_or(sku.available, |m| m.min(sku.available)).max(0)
    }

    fn price(&self, sku: &SkuView) -> String {
        crate::domain::money::format_minor(sku.price_minor, &sku.currency)
    }
}

/// The buyer's session from the cookie, or a new one (with the cookie to set).
pub(super) async fn page_session(state: &AppState, headers: &HeaderMap) -> Result<(Session, Option<String>)> {
    if let Some(token) = cookie(headers, SESSION_COOKIE)
        && let Some(session) = catalog::session_by_token(&state.db, token, state.now_ms()).await?
    {
        return Ok((session, None));
    }
    let (token, session) = crate::usecase::basket::start_session(&state.cx).await?;
    // Secure whenever kassa is reached over https: the buyer's token then never travels in clear.
    let secure = state.public_url.starts_with("https://");
    let c = super::set_cookie(SESSION_COOKIE, &token, "/", None, cookie::SameSite::Lax, true, secure);
    Ok((session, Some(c)))
}

pub(super) fn with_cookie(mut response: Response, set_cookie: Option<String>) -> Response {
    if let Some(c) = set_cookie.and_then(|c| header::HeaderValue::from_str(&c).ok()) {
        response.headers_mut().append(header::SET_COOKIE, c);
    }
    response
}

async fn storefront(State(state): State<AppState>, lang: Lang, headers: HeaderMap) -> Response {
    if !state.demo {
        return Error::not_found("page").into_response();
    }
    let t = lang.texts();
    let result = async {
        let (session, set_cookie) = page_session(&state, &headers).await?;
        let skus = catalog::list_skus(&state.db).await?;
        Ok::<_, Error>(with_cookie(
            render(&Storefront { t, switch_href: t.switch_href("/"), skus: &skus, csrf: &session.csrf_token }),
            set_cookie,
        ))
    }
    .await;
    result.unwrap_or_else(|e| error_page(lang, &e, "/"))
}

/// A form post must carry the session's CSRF token (and the cookie is SameSite=Lax).
pub(super) async fn form_session(
    state: &AppState,
    headers: &HeaderMap,
    form: &BTreeMap<String, String>,
) -> Result<Session> {
    let token = cookie(headers, SESSION_COOKIE).ok_or_else(Error::unauthorized)?;
    let session = catalog::session_by_token(&state.db, token, state.now_ms()).await?.ok_or_else(Error::unauthorized)?;
    let given = form.get("csrf").map(String::as_bytes).unwrap_or_default();
    if aws_lc_rs::constant_time::verify_slices_are_equal(given, session.csrf_token.as_bytes()).is_err() {
        return Err(Error::refused(
            crate::error::RefusalKind::Forbidden,
            "csrf_failed",
            "the form has expired; reload the page",
        ));
    }
    Ok(session)
}

async fn shop_basket(
    State(state): State<AppState>,
    lang: Lang,
    headers: HeaderMap,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        let session = form_session(&state, &headers, &form).await?;
        let mut lines = Vec::new();
        for (key, value) in &form {
            let Some(sku) = key.strip_prefix("qty_") else { continue };
            let quantity: i64 = value
                .trim()
                .parse()
                .map_err(|_| Error::unprocessable("invalid_quantity", "quantities must be whole numbers"))?;
            if quantity > 0 && ids::is_plain_id(sku) {
                lines.push((sku.to_string(), quantity));
            }
        }
        if lines.is_empty() {
            return Err(Error::unprocessable("basket_empty", "choose at least one item"));
        }
        // Every chosen line or, if one is refused, no basket at all.
        let basket_id = crate::usecase::basket::open_basket(&state.cx, &session.id, lines).await?.basket_id;
        Ok(Redirect::to(&format!("/shop/basket/{basket_id}")).into_response())
    }
    .await;
    result.unwrap_or_else(|e| error_page(lang, &e, "/"))
}

#[derive(Template)]
#[template(path = "basket.html")]
struct BasketPage<'a> {
    t: &'static Texts,
    switch_href: String,
    basket: &'a BasketView,
    csrf: &'a str,
    idempotency_key: String,
    /// Gateways a web page can hand off to, the default first.
    gateways: Vec<&'static str>,
    /// Why the basket's code takes nothing off now, in the buyer's words (empty: it applies).
    code_note: String,
    /// Why the code just typed was refused, in the buyer's words (empty: none was).
    code_refused: String,
}

impl BasketPage<'_> {
    /// The catalog key of a gateway's name.
    fn gateway_key(&self, name: &str) -> &'static str {
        match name {
            "alipay" => "gateway.alipay",
            "wechatpay" => "gateway.wechatpay",
            "stripe" => "gateway.stripe",
            _ => "gateway.sandbox",
        }
    }

    fn any_price_changed(&self) -> bool {
        self.basket.lines.iter().any(|l| l.price_changed)
    }
}

/// The configured gateways that work from a browser page: form, redirect and QR hand-offs.
fn web_gateways(state: &AppState) -> Vec<&'static str> {
    let mut names: Vec<&'static str> = state
        .gateways
        .names()
        .into_iter()
        .filter(|n| matches!(*n, "alipay" | "wechatpay" | "stripe" | "sandbox"))
        .collect();
    names.sort_by_key(|n| Some(*n) != state.gateways.default);
    names
}

/// Why the basket's code takes nothing off now, in the buyer's words: a minimum spend names its
/// amount (the refusal's details) in the basket's currency.
fn code_note(t: &Texts, basket: &BasketView) -> String {
    let Some(refusal) = basket.promotion.as_ref().and_then(|p| p.refusal.as_ref()) else {
        return String::new();
    };
    let details = refusal.details.as_ref();
    if refusal.code == "promotion_minimum_not_met"
        && let Some(least) = details.and_then(|d| d["min_spend_minor"].as_i64())
        && let Some(currency) = details.and_then(|d| d["currency"].as_str())
    {
        let amount = crate::domain::money::format_minor(least, currency);
        return t.f("basket.promotion_minimum", "amount", amount);
    }
    t.t(super::i18n::promotion_refusal(&refusal.code)).to_string()
}

async fn shop_review(
    State(state): State<AppState>,
    lang: Lang,
    headers: HeaderMap,
    Path(basket_id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        let basket_id = BasketId::parse(&basket_id)?;
        let token = cookie(&headers, SESSION_COOKIE).ok_or_else(Error::unauthorized)?;
        let session =
            catalog::session_by_token(&state.db, token, state.now_ms()).await?.ok_or_else(Error::unauthorized)?;
        let basket = crate::usecase::promotion::basket(&state.cx, &session.id, &basket_id).await?;
        let t = lang.texts();
        let code_refused = match query.get("code_refused") {
            Some(code) if code.starts_with("promotion_") => t.t(super::i18n::promotion_refusal(code)).to_string(),
            _ => String::new(),
        };
        // One key per rendered page: a double-clicked confirm sends the same key twice.
        Ok(render(&BasketPage {
            t,
            switch_href: t.switch_href(&format!("/shop/basket/{basket_id}")),
            code_note: code_note(t, &basket),
            basket: &basket,
            csrf: &session.csrf_token,
            idempotency_key: ids::new_secret_token(),
            gateways: web_gateways(&state),
            code_refused,
        }))
    }
    .await;
    result.unwrap_or_else(|e| error_page(lang, &e, "/"))
}

/// Puts the form's code on the basket (an empty field changes nothing), then back to the basket
/// page; a code refused (no such code, ended, used up) is said on that page.
async fn shop_code(
    State(state): State<AppState>,
    lang: Lang,
    headers: HeaderMap,
    Path(basket_id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    match form.get("code").map(|c| c.trim()).filter(|c| !c.is_empty()) {
        Some(code) => basket_code(&state, lang, &headers, &basket_id, &form, Some(code)).await,
        None => Redirect::to(&basket_page(&basket_id)).into_response(),
    }
}

async fn shop_code_remove(
    State(state): State<AppState>,
    lang: Lang,
    headers: HeaderMap,
    Path(basket_id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    basket_code(&state, lang, &headers, &basket_id, &form, None).await
}

/// Puts `code` on the basket, or takes it off (`None`), for the form's buyer.
async fn basket_code(
    state: &AppState,
    lang: Lang,
    headers: &HeaderMap,
    basket_id: &str,
    form: &BTreeMap<String, String>,
    code: Option<&str>,
) -> Response {
    let result = async {
        let session = form_session(state, headers, form).await?;
        let id = BasketId::parse(basket_id)?;
        crate::usecase::promotion::set_basket_code(&state.cx, &session.id, &id, code).await?;
        Ok(Redirect::to(&format!("/shop/basket/{id}")).into_response())
    }
    .await;
    let back = basket_page(basket_id);
    match result {
        Ok(r) => r,
        Err(Error::Refused(r)) if r.code.starts_with("promotion_") && back != "/" => {
            Redirect::to(&format!("{back}?code_refused={}", r.code)).into_response()
        }
        Err(e) => error_page(lang, &e, &back),
    }
}

/// The basket's page, or the storefront for an id that cannot be a basket's.
fn basket_page(basket_id: &str) -> String {
    if ids::is_plain_id(basket_id) { format!("/shop/basket/{basket_id}") } else { "/".to_string() }
}

/// What a page knows of its payer for the gateway: on a phone's browser, the buyer's address,
/// which WeChat Pay's H5 channel (the one a phone gets) needs; nothing elsewhere (an address would
/// turn a desktop's QR code into H5, which WeChat refuses outside phones).
pub(super) fn page_payer(
    device: crate::domain::channel::Device,
    client: &super::guard::Client,
) -> Option<serde_json::Value> {
    (device == crate::domain::channel::Device::Phone).then(|| serde_json::json!({"client_ip": client.addr.to_string()}))
}

/// The pages' scripts, served from kassa itself so the Content-Security-Policy needs no inline
/// script.
const ASSETS: &[(&str, &str)] = &[
    ("basket.js", include_str!("../../assets/basket.js")),
    ("handoff.js", include_str!("../../assets/handoff.js")),
    ("return.js", include_str!("../../assets/return.js")),
    ("h5_order.js", include_str!("../../assets/h5_order.js")),
    ("admin_keys.js", include_str!("../../assets/admin_keys.js")),
    ("qr.js", include_str!("../../assets/qr.js")),
];

async fn asset(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _)| *n == name) {
        Some((_, body)) => (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8"), (header::CACHE_CONTROL, "public, max-age=300")],
            *body,
        )
            .into_response(),
        None => Error::not_found("asset").into_response(),
    }
}

async fn shop_confirm(
    State(state): State<AppState>,
    lang: Lang,
    headers: HeaderMap,
    axum::Extension(client): axum::Extension<super::guard::Client>,
    Path(basket_id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let back = format!("/shop/basket/{basket_id}");
    let result = async {
        let session = form_session(&state, &headers, &form).await?;
        let device = super::negotiate::device(&headers);
        let body = CheckoutBody {
            gateway: form.get("gateway").cloned(),
            channel: None,
            payer: page_payer(device, &client),
            captcha_token: super::guard::CAPTCHA_FORM_FIELDS.iter().find_map(|f| form.get(*f)).cloned(),
            contact: Some(super::flows::ContactBody {
                email: form.get("email").cloned(),
                phone: form.get("phone").cloned(),
            }),
            ..Default::default()
        };
        let basket_id = BasketId::parse(&basket_id)?;
        let key = form.get("idempotency_key").map(|k| IdempotencyKey::parse(k)).transpose()?;
        let (placed, handoff) = place_order(
            &state,
            &session.id,
            &basket_id,
            &body,
            key.as_ref(),
            super::flows::Asker { client: &client, device, lang },
        )
        .await?;
        Ok(handoff_page(&state, lang, &placed, handoff.as_ref()).await)
    }
    .await;
    result.unwrap_or_else(|e| error_page(lang, &e, if ids::is_plain_id(&basket_id) { &back } else { "/" }))
}

/// Most bytes of a JSON error body read back to turn it into a page.
const ERROR_BODY_READ_MAX: usize = 64 * 1024;

/// Paths whose errors are never turned into pages: the API, the console, gateways' callbacks and
/// the operations endpoints answer what their callers read.
fn machine_path(path: &str) -> bool {
    ["/api/", "/admin", "/notify", "/openapi", "/metrics", "/healthz", "/readyz", "/sandbox/api"]
        .iter()
        .any(|p| path.starts_with(p))
}

/// Around every request: the buyer's language for the handlers (`?lang=` is kept in a cookie),
/// and, for a browser that asked for a page, any JSON refusal (a rate limit, an unreadable form,
/// an unknown address) turned into the buyer's error page with its next step.
pub async fn buyer_language(mut req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let asked = super::i18n::query_lang(req.uri().query());
    let lang = super::i18n::of_request(req.uri().query(), req.headers());
    let page_wanted = super::negotiate::wants_html(req.headers()) && !machine_path(req.uri().path());
    req.extensions_mut().insert(lang);
    let mut response = next.run(req).await;
    if page_wanted
        && (response.status().is_client_error() || response.status().is_server_error())
        && response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|c| c.starts_with("application/json"))
    {
        let status = response.status();
        let retry_after = response.headers().get(header::RETRY_AFTER).cloned();
        let body = axum::body::to_bytes(std::mem::take(response.body_mut()), ERROR_BODY_READ_MAX).await;
        let code = body
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
            .unwrap_or_default();
        response = refusal_page(lang, status, &code, "/");
        if let Some(v) = retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    if let Some(lang) = asked
        && let Ok(v) = header::HeaderValue::from_str(&super::i18n::lang_cookie(lang))
    {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

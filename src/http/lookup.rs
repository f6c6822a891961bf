//! The buyer's way back to an order ([`crate::usecase::lookup`]): the lookup (API and page), and
//! the page a link opens — the order at once, its keys only on a POST from that page, so that a
//! mail scanner following the link does not use it up.

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

use super::guard::Client;
use super::i18n::{Lang, Texts};
use super::pages::{OrderLines, error_page, order_lines};
use super::{ApiJson, AppState, Auth, Content, FormBody, RouteDoc, render};
use crate::clock::rfc3339;
use crate::domain::contact::{Email, LinkState, Proof};
use crate::domain::ids::OrderNo;
use crate::error::{Error, Result};
use crate::usecase::lookup::{self, Found};
use crate::vault::LINK_TOKEN_LEN_MAX;

/// A lookup: the order number and one of the e-mail address, the phone number or the lookup
/// password given at checkout.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LookupBody {
    #[schema(schema_with = super::schema::lookup_order_no)]
    pub order_no: String,
    #[serde(default)]
    #[schema(schema_with = super::schema::contact_email)]
    pub email: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::contact_phone)]
    pub phone: Option<String>,
    #[serde(default)]
    #[schema(schema_with = super::schema::lookup_password_given)]
    pub password: Option<String>,
    /// The bot check's response token, asked for after repeated lookups that matched nothing.
    #[serde(default)]
    #[schema(schema_with = super::schema::captcha_token)]
    pub captcha_token: Option<String>,
}

/// The answer to a lookup by contact, and to any lookup that matched nothing: the same whether or
/// not the order exists or the contact is its own.
#[derive(Serialize, ToSchema)]
pub struct LookupAccepted {
    /// `accepted`.
    pub status: &'static str,
    pub message: &'static str,
}

/// The answer to a lookup whose password matched: the link to the order.
#[derive(Serialize, ToSchema)]
pub struct LookupLink {
    /// `link`.
    pub status: &'static str,
    /// Opens the order (`GET`); its keys are shown by a `POST` from that page, once.
    pub url: String,
    /// When the link stops working (RFC 3339).
    pub expires_at: String,
}

const ACCEPTED: &str = "If this order is yours, a link to it is on its way to the order's e-mail address.";

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let page = |method, path, summary| {
        RouteDoc::page(method, path, summary, "pages").answer(200, "HTML page", Content::Other("text/html"))
    };
    vec![
        (
            RouteDoc::new(
                "post",
                "/api/v1/lookup",
                "Find an order again: its number and the contact or the lookup password given at checkout. A contact that matches has a link sent to the order's e-mail address; the answer is the same whether or not anything matched. A password that matches answers the link itself.",
                "buyer",
                Auth::None,
            )
            .body::<LookupBody>("the order number and one proof")
            .ok::<LookupAccepted>(202, "accepted: a link was sent if anything matched")
            .ok::<LookupLink>(200, "the lookup password matched: the link to the order")
            .errors(409, &["mail_off"])
            .errors(422, &["invalid_lookup", "invalid_contact", "invalid_lookup_password", "captcha_failed"])
            .errors(502, &["captcha_unavailable"]),
            post(lookup_json),
        ),
        (page("get", "/lookup", "The lookup page: find an order again (HTML)"), get(lookup_page).post(lookup_form)),
        (
            page(
                "get",
                "/lookup/open/{token}",
                "The page a link opens: the order, and a button that shows its keys (the POST, once)",
            ),
            get(open_page).post(reveal_page),
        ),
    ]
}

/// The lookup's proof, the rate limits and the bot check; then the use case. A miss is counted
/// against the address.
async fn run_lookup(state: &AppState, client: &Client, body: &LookupBody) -> Result<Found> {
    super::guard::token_fits(body.captcha_token.as_deref())?;
    let order_no = body.order_no.trim();
    let proof = Proof::parse(body.email.as_deref(), body.phone.as_deref(), body.password.as_deref())?;
    if !client.exempt && state.guard.lookup_needs_captcha(client.addr) {
        state.guard.verify_captcha(body.captcha_token.as_deref(), client.addr).await?;
    }
    state.guard.take_lookup_key(&format!("order {order_no}"))?;
    if let Some(contact) = proof.limit_key() {
        state.guard.take_lookup_key(&format!("contact {contact}"))?;
    }
    // An order number that cannot be one matches nothing, like an unknown one.
    let found = match OrderNo::parse(order_no) {
        Ok(order_no) => lookup::lookup(&state.cx, &order_no, &proof).await?,
        Err(_) => Found::Nothing,
    };
    if found == Found::Nothing {
        state.guard.note_lookup_miss(client.addr);
    }
    Ok(found)
}

async fn lookup_json(
    State(state): State<AppState>,
    axum::Extension(client): axum::Extension<Client>,
    ApiJson(body): ApiJson<LookupBody>,
) -> Result<Response> {
    Ok(match run_lookup(&state, &client, &body).await? {
        Found::Link { url, expires_at } => {
            axum::Json(LookupLink { status: "link", url, expires_at: rfc3339(expires_at) }).into_response()
        }
        Found::Sent | Found::Nothing => {
            (StatusCode::ACCEPTED, axum::Json(LookupAccepted { status: "accepted", message: ACCEPTED })).into_response()
        }
    })
}

#[derive(Template)]
#[template(path = "lookup.html")]
struct LookupPage<'a> {
    t: &'static Texts,
    switch_href: String,
    accepted: bool,
    link_hours: u64,
    order_no: &'a str,
}

async fn lookup_page(State(state): State<AppState>, lang: Lang) -> Response {
    let t = lang.texts();
    render(&LookupPage {
        t,
        switch_href: t.switch_href("/lookup"),
        accepted: false,
        link_hours: state.link_hours,
        order_no: "",
    })
}

async fn lookup_form(
    State(state): State<AppState>,
    lang: Lang,
    axum::Extension(client): axum::Extension<Client>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let body = LookupBody {
        order_no: form.get("order_no").cloned().unwrap_or_default(),
        email: form.get("email").cloned(),
        phone: form.get("phone").cloned(),
        password: form.get("password").cloned(),
        captcha_token: super::guard::CAPTCHA_FORM_FIELDS.iter().find_map(|f| form.get(*f)).cloned(),
    };
    match run_lookup(&state, &client, &body).await {
        Ok(Found::Link { url, .. }) => (StatusCode::SEE_OTHER, [(axum::http::header::LOCATION, url)]).into_response(),
        Ok(Found::Sent | Found::Nothing) => {
            let t = lang.texts();
            render(&LookupPage {
                t,
                switch_href: t.switch_href("/lookup"),
                accepted: true,
                link_hours: state.link_hours,
                order_no: "",
            })
        }
        Err(e) => error_page(lang, &e, "/lookup"),
    }
}

#[derive(Template)]
#[template(path = "lookup_open.html")]
struct OpenPage<'a> {
    t: &'static Texts,
    order_no: &'a str,
    status: &'a str,
    lines: OrderLines,
    total: String,
    revealed: bool,
    keys: Vec<String>,
    keys_unavailable: i64,
    keys_held: i64,
    action: String,
    link_until: String,
    /// The order's e-mail address, masked: where its messages go.
    sent_to: String,
    /// Awaiting payment: the page refreshes itself.
    pending: bool,
    /// Its last payment failed or was cancelled: *Try again* is on the pages of the browser it
    /// was ordered in.
    attempt_failed: bool,
}

fn checked_token(token: &str) -> Result<&str> {
    if token.len() > LINK_TOKEN_LEN_MAX {
        return Err(Error::not_found("link"));
    }
    Ok(token)
}

/// The page before anything is revealed: the order, and the button. A link used or expired says
/// so, with the way to a new one.
async fn open_page(State(state): State<AppState>, lang: Lang, Path(token): Path<String>) -> Response {
    let t = lang.texts();
    let result = async {
        let opened = lookup::open_link(&state.cx, checked_token(&token)?).await?;
        if let Some(refused) = crate::domain::contact::link_refusal(opened.state) {
            return Err(refused.into());
        }
        let order = &opened.order;
        Ok(render(&OpenPage {
            t,
            order_no: &order.order_no,
            status: order.status.as_str(),
            lines: order_lines(order),
            total: order.total_display(),
            revealed: false,
            keys: Vec::new(),
            keys_unavailable: 0,
            keys_held: 0,
            action: format!("/lookup/open/{token}"),
            pending: order.status == crate::domain::OrderStatus::PendingPayment,
            attempt_failed: order.attempts.last().is_some_and(|a| {
                matches!(a.status, crate::domain::AttemptStatus::Failed | crate::domain::AttemptStatus::Cancelled)
            }),
            link_until: t.time(&rfc3339(opened.expires_at), &state.time_zone),
            sent_to: masked(order.contact.email.as_deref()),
        }))
    }
    .await;
    result.unwrap_or_else(|e| error_page(lang, &e, "/lookup"))
}

fn masked(email: Option<&str>) -> String {
    email.map(|e| Email::stored(e.to_string()).masked()).unwrap_or_default()
}

/// The reveal: the order with its keys; the first reveal of keys uses the link up and is logged.
async fn reveal_page(
    State(state): State<AppState>,
    lang: Lang,
    headers: HeaderMap,
    client: Option<axum::Extension<Client>>,
    Path(token): Path<String>,
) -> Response {
    let t = lang.texts();
    let viewer = super::viewer(client.as_ref().map(|c| &c.0), &headers);
    let result = async {
        let (opened, keys) = lookup::reveal_by_link(&state.cx, checked_token(&token)?, &viewer).await?;
        let order = &opened.order;
        let mut page = render(&OpenPage {
            t,
            order_no: &order.order_no,
            status: order.status.as_str(),
            lines: order_lines(order),
            total: order.total_display(),
            revealed: true,
            keys: keys.keys.iter().map(|(_, k)| k.clone()).collect(),
            keys_unavailable: keys.unreadable_total(),
            keys_held: keys.held_total(),
            action: String::new(),
            pending: false,
            attempt_failed: false,
            link_until: String::new(),
            sent_to: masked(order.contact.email.as_deref()),
        });
        if opened.state == LinkState::Used {
            // Keys on the page: nothing keeps a copy.
            page.headers_mut()
                .insert(axum::http::header::CACHE_CONTROL, axum::http::HeaderValue::from_static("no-store"));
        }
        Ok::<_, Error>(page)
    }
    .await;
    result.unwrap_or_else(|e| error_page(lang, &e, "/lookup"))
}

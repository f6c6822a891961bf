//! The HTTP layer: JSON API, server-rendered pages, gateway notifications, operations endpoints.
//! Routes are declared once in [`routes`], which feeds both the router and `/openapi.json`.

pub mod admin;
pub mod admin_cases;
pub mod admin_catalog;
pub mod admin_mail;
pub mod admin_promotions;
pub mod api;
pub mod api_lists;
pub mod api_routes;
pub mod cases;
pub mod console;
pub mod flows;
pub mod guard;
pub mod i18n;
pub mod lookup;
pub mod negotiate;
pub mod notify;
pub mod openapi;
pub mod order_pages;
pub mod pages;
pub mod promotions;
pub mod protection;
pub mod qr;
pub mod sandbox;
pub mod schema;
pub mod server;
pub mod statements;

pub use openapi::{Content, RouteDoc};

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRef, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::sandbox::Sandbox;
use crate::store::catalog::{self, Session};

/// Largest request body accepted anywhere (docs/CONTRACT.md): bigger ones get 413 `payload_too_large`.
pub const BODY_LIMIT_BYTES: usize = 1024 * 1024;
/// Name of the cookie that carries the buyer token for HTML pages.
pub const SESSION_COOKIE: &str = "kassa_session";

#[derive(Clone)]
pub struct AppState(pub Arc<Inner>);

pub struct Inner {
    /// What the use cases reach: the database, the gateways, the clock and the shop's policies
    /// (`state.db` and the like read through it).
    pub cx: crate::usecase::Context,
    pub sandbox: Option<Arc<Sandbox>>,
    /// SHA-256 of the admin token; compared in constant time, never stored in clear.
    pub admin_token_hash: Option<Vec<u8>>,
    pub demo: bool,
    /// The shop's time zone: times on the buyer pages are shown in it.
    pub time_zone: crate::clock::Zone,
    pub protection: protection::Protection,
    /// Per-address rate limits and the client address of a request ([`guard`]).
    pub guard: Arc<guard::Guard>,
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// Whether the shop's webhook URL (and secret) is configured: without it outbox messages are
    /// kept but never sent.
    pub webhook_configured: bool,
}

impl std::ops::Deref for Inner {
    type Target = crate::usecase::Context;
    fn deref(&self) -> &crate::usecase::Context {
        &self.cx
    }
}

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// The HTTP status of a refusal: the one place a kind of refusal becomes a status.
pub fn status_of(kind: crate::error::RefusalKind) -> StatusCode {
    use crate::error::RefusalKind::*;
    match kind {
        Malformed => StatusCode::BAD_REQUEST,
        Unauthenticated => StatusCode::UNAUTHORIZED,
        Forbidden => StatusCode::FORBIDDEN,
        NotFound => StatusCode::NOT_FOUND,
        Conflict => StatusCode::CONFLICT,
        TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        TooMany => StatusCode::TOO_MANY_REQUESTS,
        Upstream => StatusCode::BAD_GATEWAY,
    }
}

/// Every refusal's body: `{"error": {"code", "message", "details"?}}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// A refusal: its stable code, a message for people, and what else helps (the limit that was
/// hit, when to retry).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    pub code: &'static str,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

fn error_body(code: &'static str, message: String, details: Option<serde_json::Value>) -> axum::Json<ErrorBody> {
    axum::Json(ErrorBody { error: ErrorDetail { code, message, details } })
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        match &self {
            Error::Refused(r) => {
                let retry_after = r.details.as_ref().and_then(|d| d.get("retry_after_s")).and_then(|v| v.as_u64());
                let mut response =
                    (status_of(r.kind), error_body(r.code, r.message.clone(), r.details.clone())).into_response();
                if let Some(seconds) = retry_after {
                    response.headers_mut().insert(header::RETRY_AFTER, axum::http::HeaderValue::from(seconds));
                }
                response
            }
            Error::Db(_) | Error::Internal(_) if self.is_unavailable() => {
                tracing::warn!(error = %self, "database unavailable");
                let body = error_body(
                    "database_unavailable",
                    "the database cannot be reached right now; try again shortly".into(),
                    None,
                );
                let mut response = (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
                response.headers_mut().insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from(crate::error::DB_UNAVAILABLE_RETRY_AFTER_S),
                );
                response
            }
            Error::Db(_) | Error::Internal(_) => {
                // Logged in full here, shown to nobody.
                tracing::error!(error = %self, "internal error");
                let body = error_body("internal", "internal error; it has been logged".into(), None);
                (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
            }
        }
    }
}

/// The raw body, with the size limit reported in the contract's shape.
pub struct RawBody(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = Error;
    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        match Bytes::from_request(req, state).await {
            Ok(b) => Ok(RawBody(b)),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(payload_too_large()),
            Err(_) => Err(Error::invalid("invalid_body", "the request body could not be read")),
        }
    }
}

pub fn payload_too_large() -> Error {
    Error::refused(
        crate::error::RefusalKind::TooLarge,
        "payload_too_large",
        format!("request bodies are limited to {BODY_LIMIT_BYTES} bytes"),
    )
}

/// A JSON body; an empty body reads as `{}` so all-optional bodies may be left out.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = Error;
    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        read_json_object(&bytes).map(ApiJson)
    }
}

/// A JSON body that is an object (every body of the API is one; serde alone would also take an
/// array for a struct). A whole number written with a fraction (`250.0`, `2e2`) is an integer, as
/// JSON Schema counts it; such bodies take a second, slower read.
fn read_json_object<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let invalid = |e: &dyn std::fmt::Display| Error::invalid("invalid_json", format!("invalid JSON body: {e}"));
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) { b"{}" } else { bytes };
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(invalid(&"the body must be a JSON object"));
    }
    match serde_json::from_slice(bytes) {
        Ok(value) => Ok(value),
        Err(first) if first.is_data() => {
            let mut value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| invalid(&e))?;
            if !integral_floats_to_integers(&mut value) {
                return Err(invalid(&first));
            }
            serde_json::from_value(value).map_err(|_| invalid(&first))
        }
        Err(e) => Err(invalid(&e)),
    }
}

/// Writes every whole number that `value` holds as a float (`250.0`) as an integer; whether there
/// was one.
fn integral_floats_to_integers(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Number(n) if n.is_f64() => {
            let whole = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15);
            // Within ±9e15 a float is an exact integer and the cast below cannot truncate.
            #[allow(clippy::cast_possible_truncation)]
            let whole = whole.map(|f| f as i64);
            match whole {
                Some(i) => {
                    *value = Value::from(i);
                    true
                }
                None => false,
            }
        }
        // Every member is visited (no short cut): each whole float is rewritten.
        Value::Array(items) => items.iter_mut().map(integral_floats_to_integers).filter(|changed| *changed).count() > 0,
        Value::Object(members) => {
            members.values_mut().map(integral_floats_to_integers).filter(|changed| *changed).count() > 0
        }
        _ => false,
    }
}

/// An HTML form body.
pub struct FormBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for FormBody<T> {
    type Rejection = Error;
    async fn from_request(req: Request, state: &S) -> Result<Self, Error> {
        let RawBody(bytes) = RawBody::from_request(req, state).await?;
        serde_urlencoded_form(&bytes).map(FormBody)
    }
}

fn serde_urlencoded_form<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    serde_urlencoded::from_bytes(bytes).map_err(|_| Error::invalid("invalid_form", "the form could not be read"))
}

pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// The value of the request's cookie `name` (the first, if sent twice), as sent.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(std::result::Result::ok)
        .find(|c| c.name_raw() == Some(name))
        .and_then(|c| c.value_raw())
}

/// A `Set-Cookie` value: `name=value` for `path`, kept `max_age_s` seconds (`None`: until the
/// browser closes), HttpOnly unless the pages' scripts read it, sent over https only when `secure`.
pub fn set_cookie(
    name: &str,
    value: &str,
    path: &str,
    max_age_s: Option<i64>,
    same_site: cookie::SameSite,
    http_only: bool,
    secure: bool,
) -> String {
    let mut c =
        cookie::Cookie::build((name, value)).path(path).same_site(same_site).http_only(http_only).secure(secure);
    if let Some(s) = max_age_s {
        c = c.max_age(cookie::time::Duration::seconds(s));
    }
    c.build().to_string()
}

/// An authenticated buyer (bearer token, or the session cookie of the HTML pages).
pub struct Buyer(pub Session);

impl<S: Send + Sync> FromRequestParts<S> for Buyer
where
    AppState: FromRef<S>,
{
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let state = AppState::from_ref(state);
        let token = bearer(&parts.headers)
            .or_else(|| cookie(&parts.headers, SESSION_COOKIE))
            .ok_or_else(Error::unauthorized)?;
        let session =
            catalog::session_by_token(&state.db, token, state.now_ms()).await?.ok_or_else(Error::unauthorized)?;
        cookie_write_allowed(parts, &session)?;
        Ok(Buyer(session))
    }
}

/// Header a script sends the session's CSRF token in, for an API write on the session cookie that
/// is not JSON.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// An API write (`/api/…`, not GET or HEAD) that authenticates with the buyer's session cookie
/// rather than a bearer token must be one no other site can make a browser send: a JSON body
/// (`Content-Type: application/json`, which a cross-site form cannot set), or the session's CSRF
/// token in [`CSRF_HEADER`]. Else 403 `csrf_required`. Bearer requests and the HTML forms (which
/// carry their own CSRF field) are not concerned.
fn cookie_write_allowed(parts: &Parts, session: &Session) -> Result<(), Error> {
    let read = parts.method == axum::http::Method::GET || parts.method == axum::http::Method::HEAD;
    if read || bearer(&parts.headers).is_some() || !parts.uri.path().starts_with("/api/") {
        return Ok(());
    }
    let json = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    let token = parts.headers.get(CSRF_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    let csrf = aws_lc_rs::constant_time::verify_slices_are_equal(token, session.csrf_token.as_bytes()).is_ok();
    if json || csrf {
        return Ok(());
    }
    Err(Error::refused(
        crate::error::RefusalKind::Forbidden,
        "csrf_required",
        "a write on the session cookie must send Content-Type: application/json or the X-CSRF-Token header",
    ))
}

/// The caller may be a buyer, the admin, or nobody; used where both may read.
pub struct Caller {
    pub session: Option<Session>,
    pub admin: bool,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller
where
    AppState: FromRef<S>,
{
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let state = AppState::from_ref(state);
        let admin = bearer(&parts.headers).is_some_and(|t| state.is_admin_token(t));
        let token = bearer(&parts.headers).or_else(|| cookie(&parts.headers, SESSION_COOKIE));
        let session = match token {
            Some(t) if !admin => catalog::session_by_token(&state.db, t, state.now_ms()).await?,
            _ => None,
        };
        if let Some(session) = &session {
            cookie_write_allowed(parts, session)?;
        }
        // A bearer token that is neither the admin's nor a buyer's counts against the address as
        // a wrong admin token: backed off (429) past the sign-in limits, answered as before else.
        if !admin && session.is_none() && bearer(&parts.headers).is_some() {
            let refused = admin::wrong_admin_token(&state, parts.extensions.get::<guard::Client>()).await;
            if refused.code() == "rate_limited" {
                return Err(refused);
            }
        }
        Ok(Caller { session, admin })
    }
}

/// The admin, by `Authorization: Bearer <admin token>`.
pub struct Admin;

impl<S: Send + Sync> FromRequestParts<S> for Admin
where
    AppState: FromRef<S>,
{
    type Rejection = Error;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        let state = AppState::from_ref(state);
        match bearer(&parts.headers) {
            Some(t) if state.is_admin_token(t) => Ok(Admin),
            Some(_) => Err(admin::wrong_admin_token(&state, parts.extensions.get::<guard::Client>()).await),
            None => Err(Error::unauthorized()),
        }
    }
}

impl Inner {
    pub fn is_admin_token(&self, token: &str) -> bool {
        let Some(expected) = &self.admin_token_hash else {
            return false;
        };
        let given = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token.as_bytes());
        aws_lc_rs::constant_time::verify_slices_are_equal(given.as_ref(), expected).is_ok()
    }
}

/// Who may call an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    None,
    Buyer,
    Admin,
    /// The order's buyer, or an admin.
    BuyerOrAdmin,
}

/// All routes. Sandbox routes are included only when the sandbox is mounted.
pub fn routes(with_sandbox: bool) -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let mut all = api_routes::routes();
    all.extend(pages::routes());
    all.extend(order_pages::routes());
    all.extend(lookup::routes());
    all.extend(admin::routes());
    all.extend(admin_catalog::routes());
    all.extend(admin_cases::routes());
    all.extend(admin_mail::routes());
    all.extend(admin_promotions::routes());
    all.extend(statements::routes());
    all.extend(promotions::routes());
    all.extend(cases::routes());
    if with_sandbox {
        all.extend(sandbox::routes());
    }
    all
}

pub fn router(state: AppState) -> Router {
    let with_sandbox = state.sandbox.is_some();
    let mut router = Router::new();
    for (doc, method_router) in routes(with_sandbox) {
        router = router.route(doc.path, method_router);
    }
    let request_timeout = state.protection.request_timeout;
    router
        .fallback(|| async { Error::not_found("route") })
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), guard::guard_requests))
        .route_layer(axum::middleware::from_fn(track_requests))
        .layer(axum::middleware::from_fn(pages::buyer_language))
        .layer(axum::middleware::from_fn_with_state(request_timeout, server::within_time))
        .layer(axum::middleware::from_fn(server::security_headers))
        .with_state(state)
}

/// Request latency by matched route, and a request id on every log line of the request.
async fn track_requests(req: Request, next: axum::middleware::Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = req.method().to_string();
    let request_id = uuid::Uuid::now_v7().simple().to_string();
    let span = tracing::info_span!(
        "request",
        %method,
        %route,
        %request_id,
        order_no = tracing::field::Empty,
        attempt_ref = tracing::field::Empty,
        client = tracing::field::Empty,
        client_source = tracing::field::Empty
    );
    let started = std::time::Instant::now();
    let response = tracing::Instrument::instrument(next.run(req), span.clone()).await;
    let status = response.status().as_u16().to_string();
    span.in_scope(
        || tracing::info!(status = %status, elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX), "request done"),
    );
    metrics::histogram!("kassa_http_request_duration_seconds", "route" => route, "method" => method, "status" => status)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Puts the order (and attempt) a request is about on every log line of the request.
/// Who a request shows an order's keys to: the client's address and its user agent.
pub fn viewer(client: Option<&guard::Client>, headers: &HeaderMap) -> crate::store::lookup::Viewer {
    let agent = headers.get(axum::http::header::USER_AGENT).and_then(|v| v.to_str().ok());
    crate::store::lookup::Viewer::new(client.map(|c| c.addr), agent)
}

pub fn note_order(order_no: &str) {
    tracing::Span::current().record("order_no", order_no);
}

pub fn note_attempt(order_no: &str, attempt_ref: &str) {
    let span = tracing::Span::current();
    span.record("order_no", order_no);
    span.record("attempt_ref", attempt_ref);
}

/// Renders an askama template, turning a render failure into an internal error.
pub fn render(t: &impl askama::Template) -> Response {
    match t.render() {
        Ok(html) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
        Err(e) => Error::internal(format!("template: {e}")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Body {
        quantity: i64,
        #[serde(default)]
        lines: Vec<i64>,
    }

    #[test]
    fn a_body_is_an_object_and_whole_floats_are_integers() {
        let read = |text: &str| read_json_object::<Body>(text.as_bytes());
        assert_eq!(read(r#"{"quantity": 3}"#).unwrap(), Body { quantity: 3, lines: vec![] });
        assert_eq!(
            read(r#"{"quantity": 250.0, "lines": [1, 2e2]}"#).unwrap(),
            Body { quantity: 250, lines: vec![1, 200] }
        );
        for refused in [r#"[3]"#, r#"{"quantity": 2.5}"#, r#"{"quantity": 1e300}"#, r#"{"quantity": "3"}"#, "3", "{"] {
            assert_eq!(read(refused).unwrap_err().code(), "invalid_json", "{refused}");
        }
        assert_eq!(read_json_object::<std::collections::BTreeMap<String, i64>>(b"  ").unwrap().len(), 0);
    }
}

//! `/openapi.json`, generated from the route table ([`super::routes`]: the same list that builds the
//! router) and from the Rust types the handlers read and answer (utoipa's `ToSchema` and
//! `IntoParams`), so the document cannot drift from what is served. Webhook messages are described
//! from the outbox's own payload type.

use std::borrow::Cow;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use utoipa::openapi::path::{Parameter, ParameterIn};
use utoipa::openapi::{RefOr, schema::Schema};
use utoipa::{IntoParams, ToSchema};

use super::{AppState, Auth};

type Collected = Vec<(String, RefOr<Schema>)>;

/// A Rust type's schema: its component name and how to collect it (with every type it names).
#[derive(Clone, Copy)]
pub struct Typed {
    name: fn() -> Cow<'static, str>,
    collect: fn(&mut Collected),
}

/// The schema of `T`, listed under `components.schemas` and referenced by name.
pub fn of<T: ToSchema + 'static>() -> Typed {
    Typed {
        name: T::name,
        collect: |all| {
            all.push((T::name().into_owned(), T::schema()));
            T::schemas(all);
        },
    }
}

/// What a response carries.
#[derive(Clone, Copy)]
pub enum Content {
    Empty,
    Json(Typed),
    /// Another media type, described in words (`text/csv`, `text/html`, `text/plain`).
    Other(&'static str),
}

/// A response header: name, whether it is always sent, its JSON type and what it means.
pub type HeaderDoc = (&'static str, bool, &'static str, &'static str);

/// One documented response of an operation.
#[derive(Clone)]
pub struct Resp {
    pub status: u16,
    pub what: &'static str,
    pub content: Content,
    /// The stable error codes this status carries (`error.code`); empty for a success.
    pub codes: Vec<&'static str>,
    pub headers: Vec<HeaderDoc>,
    /// Operations this answer leads to: (link name, their operationId, parameter, where its value is
    /// in this answer as a runtime expression).
    pub links: Vec<(&'static str, &'static str, &'static str, &'static str)>,
}

/// Where a route's parameters come from: a type whose fields are the query string, and the
/// request headers it reads.
type Params = fn() -> Vec<Parameter>;

/// The query parameters of `T` (its fields, as `serde` reads them).
pub fn query<T: IntoParams>() -> Vec<Parameter> {
    T::into_params(|| Some(ParameterIn::Query))
}

/// One documented route: the single source of both the router and the OpenAPI document.
pub struct RouteDoc {
    pub method: &'static str,
    pub path: &'static str,
    pub summary: &'static str,
    pub tag: &'static str,
    pub auth: Auth,
    pub body: Option<(Typed, &'static str)>,
    pub params: Vec<Params>,
    pub request_headers: Vec<(&'static str, Value, &'static str)>,
    pub responses: Vec<Resp>,
    /// A page or form for people, or an endpoint that answers in a gateway's own words: described,
    /// but outside the JSON API's refusals (`x-page`).
    pub page: bool,
}

/// `Retry-After` as every rate-limited or unavailable answer may send it.
const RETRY_AFTER: HeaderDoc = ("Retry-After", false, "integer", "seconds to wait before trying again");

impl RouteDoc {
    pub fn new(method: &'static str, path: &'static str, summary: &'static str, tag: &'static str, auth: Auth) -> Self {
        RouteDoc {
            method,
            path,
            summary,
            tag,
            auth,
            body: None,
            params: Vec::new(),
            request_headers: Vec::new(),
            responses: Vec::new(),
            page: false,
        }
    }

    /// A page or form for people (HTML), or a gateway-facing endpoint: its answers described in words.
    pub fn page(method: &'static str, path: &'static str, summary: &'static str, tag: &'static str) -> Self {
        RouteDoc { page: true, ..RouteDoc::new(method, path, summary, tag, Auth::None) }
    }

    /// The JSON request body, as type `T` reads it.
    pub fn body<T: ToSchema + 'static>(mut self, what: &'static str) -> Self {
        self.body = Some((of::<T>(), what));
        self
    }

    /// The query string, as type `T` reads it (several: the parameters of each).
    pub fn query<T: IntoParams>(mut self) -> Self {
        self.params.push(query::<T>);
        self
    }

    /// A request header this operation reads (never required).
    pub fn header(mut self, name: &'static str, schema: Value, what: &'static str) -> Self {
        self.request_headers.push((name, schema, what));
        self
    }

    /// A JSON answer of type `T`.
    pub fn ok<T: ToSchema + 'static>(self, status: u16, what: &'static str) -> Self {
        self.answer(status, what, Content::Json(of::<T>()))
    }

    /// An answer of another media type (or none).
    pub fn answer(mut self, status: u16, what: &'static str, content: Content) -> Self {
        self.responses.push(Resp { status, what, content, codes: Vec::new(), headers: vec![], links: vec![] });
        self
    }

    /// A response header of the answer last added.
    pub fn with_header(mut self, header: HeaderDoc) -> Self {
        if let Some(last) = self.responses.last_mut() {
            last.headers.push(header);
        }
        self
    }

    /// An operation the answer last added leads to, with the parameter it fills from the answer
    /// (`$response.body#/basket_id`).
    pub fn link(
        mut self,
        name: &'static str,
        operation_id: &'static str,
        parameter: &'static str,
        from: &'static str,
    ) -> Self {
        if let Some(last) = self.responses.last_mut() {
            last.links.push((name, operation_id, parameter, from));
        }
        self
    }

    /// Error answers: a status and the stable codes it carries.
    pub fn errors(mut self, status: u16, codes: &[&'static str]) -> Self {
        self.add_codes(status, codes);
        self
    }

    fn add_codes(&mut self, status: u16, codes: &[&'static str]) {
        if let Some(r) = self.responses.iter_mut().find(|r| r.status == status && !r.codes.is_empty()) {
            for c in codes {
                if !r.codes.contains(c) {
                    r.codes.push(c);
                }
            }
            return;
        }
        let headers = if matches!(status, 429 | 503) { vec![RETRY_AFTER] } else { vec![] };
        self.responses.push(Resp {
            status,
            what: "refused",
            content: Content::Json(of::<super::ErrorBody>()),
            codes: codes.to_vec(),
            headers,
            links: vec![],
        });
    }

    /// The refusals every JSON operation may meet, whatever it does: a request the guard refuses
    /// (a wrong shop key, a bad buyer address), credentials (missing, or for an admin operation
    /// not the admin's), an unreadable body, a database that
    /// cannot be reached, and an internal error.
    fn with_common_errors(mut self, rate_limited: bool) -> Self {
        self.add_codes(400, &["invalid_buyer_ip"]);
        self.add_codes(401, &["invalid_shop_key"]);
        if self.auth != Auth::None {
            self.add_codes(401, &["unauthorized"]);
        }
        if matches!(self.auth, Auth::Buyer | Auth::BuyerOrAdmin) && !matches!(self.method, "get" | "head") {
            // A write on the session cookie that is neither JSON nor carries the CSRF token.
            self.add_codes(403, &["csrf_required"]);
        }
        if self.auth == Auth::Admin {
            // A bearer token that is not the admin's (a buyer's, a mistyped one); an address
            // that sends wrong ones too often is backed off (the sign-in lockout's limits).
            self.add_codes(403, &["forbidden"]);
        }
        if matches!(self.auth, Auth::Admin | Auth::BuyerOrAdmin) {
            self.add_codes(429, &["rate_limited"]);
        }
        if self.body.is_some() {
            self.add_codes(400, &["invalid_json", "invalid_body"]);
            self.add_codes(413, &["payload_too_large"]);
        }
        if rate_limited {
            self.add_codes(429, &["rate_limited"]);
        }
        self.add_codes(500, &["internal"]);
        self.add_codes(503, &["database_unavailable"]);
        self
    }
}

/// A path parameter: every identifier in a path is a plain one (`domain::ids::is_plain_id`); a
/// gateway is one of kassa's.
fn path_param(name: &str) -> Value {
    let schema = match name {
        "gateway" => json!({"type": "string", "enum": ["sandbox", "alipay", "wechatpay", "stripe"]}),
        _ => super::schema::plain_id_json(),
    };
    json!({"name": name, "in": "path", "required": true, "schema": schema})
}

fn json_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn response(r: &Resp, schemas: &mut Collected) -> Value {
    let mut out = json!({"description": r.what});
    if !r.codes.is_empty() {
        out["description"] = json!(r.codes.join(" / "));
    }
    match r.content {
        Content::Empty => {}
        Content::Json(t) => {
            (t.collect)(schemas);
            let reference = json!({"$ref": format!("#/components/schemas/{}", (t.name)())});
            let schema = if r.codes.is_empty() {
                reference
            } else {
                // The error object, narrowed to the codes this answer carries.
                json!({"allOf": [reference, {"type": "object", "properties": {"error": {"type": "object", "properties": {"code": {"enum": r.codes}}}}}]})
            };
            out["content"] = json!({"application/json": {"schema": schema}});
        }
        Content::Other(media) => out["content"] = json!({media: {"schema": {"type": "string"}}}),
    }
    if !r.links.is_empty() {
        let links: Map<String, Value> = r
            .links
            .iter()
            .map(|(name, operation, parameter, from)| {
                ((*name).to_string(), json!({"operationId": operation, "parameters": {*parameter: from}}))
            })
            .collect();
        out["links"] = Value::Object(links);
    }
    if !r.headers.is_empty() {
        let headers: Map<String, Value> = r
            .headers
            .iter()
            .map(|(name, required, kind, what)| {
                ((*name).to_string(), json!({"required": required, "schema": {"type": kind}, "description": what}))
            })
            .collect();
        out["headers"] = Value::Object(headers);
    }
    out
}

fn operation(doc: &RouteDoc, schemas: &mut Collected) -> Value {
    let mut params: Vec<Value> = doc
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(path_param)
        .collect();
    for query in &doc.params {
        params.extend(query().iter().map(json_value));
    }
    for (name, schema, what) in &doc.request_headers {
        params.push(json!({"name": name, "in": "header", "required": false, "schema": schema, "description": what}));
    }
    let mut responses = Map::new();
    for r in &doc.responses {
        responses.insert(r.status.to_string(), response(r, schemas));
    }
    let mut op = json!({
        "summary": doc.summary,
        "tags": [doc.tag],
        "operationId": format!("{}_{}", doc.method, doc.path.trim_matches('/').replace(['{', '}'], "").replace(['/', '.'], "_")),
        "parameters": params,
        "responses": responses,
    });
    match doc.auth {
        Auth::None => {}
        Auth::Buyer => op["security"] = json!([{"buyer": []}]),
        Auth::Admin => op["security"] = json!([{"admin": []}]),
        Auth::BuyerOrAdmin => op["security"] = json!([{"buyer": []}, {"admin": []}]),
    }
    if let Some((t, what)) = doc.body {
        (t.collect)(schemas);
        // A body with required members must be sent; one without may be left out (read as `{}`).
        let required = schemas
            .iter()
            .find(|(name, _)| *name == (t.name)())
            .is_some_and(|(_, schema)| json_value(schema)["required"].as_array().is_some_and(|r| !r.is_empty()));
        op["requestBody"] = json!({
            "required": required,
            "description": what,
            "content": {"application/json": {"schema": {"$ref": format!("#/components/schemas/{}", (t.name)())}}}
        });
    }
    if doc.page {
        op["x-page"] = json!(true);
    }
    op
}

/// The routes' operations, each with the refusals common to its kind added.
fn documented(with_sandbox: bool) -> Vec<RouteDoc> {
    super::routes(with_sandbox)
        .into_iter()
        .map(|(doc, _)| {
            if doc.page {
                doc
            } else {
                let limited = super::guard::bucket_of_documented(doc.method, doc.path);
                doc.with_common_errors(limited)
            }
        })
        .collect()
}

/// What this server serves that the document states: whether the sandbox is mounted, and the
/// gateways configured with their channels (a checkout naming another is refused).
pub struct Served {
    pub sandbox: bool,
    pub gateways: Vec<(&'static str, &'static [&'static str])>,
    /// `--allowed-return-origins`: what a checkout's return and cancel URLs may start with.
    pub return_origins: Vec<String>,
}

impl Served {
    pub fn of(state: &AppState) -> Served {
        let gateways = state
            .gateways
            .names()
            .into_iter()
            .filter_map(|name| state.gateways.get(name).map(|g| (name, g.channels())))
            .collect();
        let return_origins = state.allowed_return_origins.iter().map(|o| o.as_str().to_string()).collect();
        Served { sandbox: state.sandbox.is_some(), gateways, return_origins }
    }
}

/// A pattern matching URLs under one of `origins` (scheme and host in any case, as
/// `domain::shop::check_return_url` compares them), or `None` when there are none.
fn origins_pattern(origins: &[String]) -> Option<String> {
    if origins.is_empty() {
        return None;
    }
    let alternatives: Vec<String> = origins
        .iter()
        .map(|origin| {
            origin
                .chars()
                .map(|c| match c {
                    c if c.is_ascii_alphabetic() => format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase()),
                    c if "\\^$.|?*+()[]{}".contains(c) => format!("\\{c}"),
                    c => c.to_string(),
                })
                .collect()
        })
        .collect();
    Some(format!("^({})([/?#][^\\s\"\\u0000-\\u001f\\u007f-\\u009f]*)?$", alternatives.join("|")))
}

/// Narrows the gateway and channel of the bodies that name them to what this server serves.
fn narrow_to_served(components: &mut Map<String, Value>, served: &Served) {
    let mut gateways: Vec<Value> = served.gateways.iter().map(|(name, _)| json!(name)).collect();
    let mut channels: Vec<&str> = served.gateways.iter().flat_map(|(_, channels)| channels.iter().copied()).collect();
    channels.sort_unstable();
    channels.dedup();
    let mut channels: Vec<Value> = channels.into_iter().map(|c| json!(c)).collect();
    gateways.push(Value::Null);
    channels.push(Value::Null);
    for body in ["CheckoutBody", "RetryBody"] {
        if let Some(properties) = components.get_mut(body).and_then(|b| b.get_mut("properties")) {
            properties["gateway"]["enum"] = Value::Array(gateways.clone());
            properties["channel"]["enum"] = Value::Array(channels.clone());
        }
    }
    // Return and cancel URLs: under the allowed origins, or none at all when there are none.
    if let Some(properties) = components.get_mut("CheckoutBody").and_then(|b| b.get_mut("properties")) {
        for field in ["return_url", "cancel_url"] {
            match origins_pattern(&served.return_origins) {
                Some(pattern) => properties[field]["pattern"] = json!(pattern),
                None => {
                    properties[field] =
                        json!({"type": "null", "description": "no --allowed-return-origins: kassa's own return page"});
                }
            }
        }
    }
}

/// Rules between the fields of one body that each field's own schema cannot state.
fn cross_field_rules(components: &mut Map<String, Value>) {
    // A shipment (`domain::shipping::Logistics::of_shipment`): a tracking number names its
    // carrier and the other way round, `express` names both, the other modes neither. A blank
    // field counts as absent.
    let named = |field: &str| json!({"properties": {field: {"type": "string", "pattern": "\\S"}}, "required": [field]});
    let mode = |modes: &[&str]| json!({"properties": {"logistics": {"enum": modes}}, "required": ["logistics"]});
    if let Some(body) = components.get_mut("DeliverBody").and_then(Value::as_object_mut) {
        body.insert(
            "allOf".into(),
            json!([
                {"if": named("tracking_no"), "then": named("express_company")},
                {"if": named("express_company"), "then": named("tracking_no")},
                {"if": mode(&["express"]), "then": named("tracking_no")},
                {"if": mode(&["same_city", "pickup"]), "then": {"not": {"anyOf": [named("tracking_no"), named("express_company")]}}},
            ]),
        );
    }
}

pub fn document(served: &Served) -> Value {
    let with_sandbox = served.sandbox;
    let mut schemas: Collected = Vec::new();
    let mut paths = Map::new();
    for doc in documented(with_sandbox) {
        let op = operation(&doc, &mut schemas);
        let entry = paths.entry(doc.path.to_string()).or_insert_with(|| json!({}));
        entry[doc.method] = op;
    }
    let webhooks = webhooks(&mut schemas);
    let mut components = Map::new();
    for (name, schema) in &schemas {
        components.entry(name.clone()).or_insert_with(|| json_value(schema));
    }
    narrow_to_served(&mut components, served);
    cross_field_rules(&mut components);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "kassa",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Self-hosted payment order engine. Money is an integer of minor units (`*_minor`) with an ISO 4217 `currency`. Errors are {\"error\": {\"code\", \"message\", \"details\"?}} with a stable code; each response lists the codes it carries. Operations marked `x-page` are pages and forms for people (HTML).",
        },
        "paths": paths,
        "webhooks": webhooks,
        "components": {
            "securitySchemes": {
                "buyer": {"type": "http", "scheme": "bearer", "description": "a buyer's token from POST /api/v1/sessions (pages: the kassa_session cookie)"},
                "admin": {"type": "http", "scheme": "bearer", "description": "the admin token (--admin-token)"},
                "shop": {"type": "apiKey", "in": "header", "name": super::guard::SHOP_KEY_HEADER, "description": "the shop server's API key (--shop-api-key), sent beside a buyer's token: the buyer's address is then taken from Kassa-Buyer-IP (rate limits, bot checks)"}
            },
            "schemas": components,
        }
    })
}

/// `webhooks`: every message the outbox sends the shop, with its signature headers.
fn webhooks(schemas: &mut Collected) -> Value {
    use crate::store::outbox::{
        CaseChanged, CaseFacts, DataKind, FulfilmentRequested, MessageContext, OrderChanged, RefundChanged, TOPICS,
        WebhookMessage,
    };
    let envelope = of::<WebhookMessage>();
    (envelope.collect)(schemas);
    for t in [
        of::<OrderChanged>(),
        of::<FulfilmentRequested>(),
        of::<RefundChanged>(),
        of::<CaseChanged>(),
        of::<CaseFacts>(),
        of::<MessageContext>(),
    ] {
        (t.collect)(schemas);
    }
    let header = |name: &str, schema: Value, what: &str| json!({"name": name, "in": "header", "required": true, "schema": schema, "description": what});
    let headers = json!([
        header(
            "Kassa-Event-Id",
            json!({"type": "string"}),
            "the message's id; the same on every retry and on a resend: de-duplicate on it"
        ),
        header("Kassa-Topic", json!({"type": "string"}), "the message's topic"),
        header(
            "Kassa-Signature",
            json!({"type": "string", "pattern": "^t=[0-9]+,v1=[0-9a-f]{64}$"}),
            "t=<unix seconds>,v1=<hex HMAC-SHA256(webhook secret, \"<t>.<raw body>\")>; compare in constant time and refuse a t more than 5 minutes from your clock (docs/webhooks.md)",
        ),
    ]);
    let mut out = Map::new();
    for (topic, what, kind) in TOPICS {
        let data = match kind {
            DataKind::Order => "OrderChanged",
            DataKind::Fulfilment => "FulfilmentRequested",
            DataKind::Refund => "RefundChanged",
            DataKind::Case => "CaseChanged",
        };
        out.insert(
            (*topic).to_string(),
            json!({"post": {
                "summary": what,
                "operationId": format!("webhook_{}", topic.replace('.', "_")),
                "parameters": headers,
                "requestBody": {"required": true, "content": {"application/json": {"schema": {"allOf": [
                    {"$ref": format!("#/components/schemas/{}", (envelope.name)())},
                    {"type": "object", "properties": {"topic": {"const": topic}, "data": {"$ref": format!("#/components/schemas/{data}")}}}
                ]}}}},
                "responses": {"2XX": {"description": "received; any other answer is tried again later (12 tries), then the message is dead until resent"}}
            }}),
        );
    }
    Value::Object(out)
}

pub async fn serve(State(state): State<AppState>) -> Response {
    axum::Json(document(&Served::of(&state))).into_response()
}

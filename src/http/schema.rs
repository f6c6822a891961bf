//! The JSON API's own answer types (those the store does not already define), and the schemas of
//! the fields whose limits live in constants: `/openapi.json` states the limits the code enforces,
//! taken from the same constants ([`super::openapi`]).

use serde::Serialize;
use serde_json::{Value, json};
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::Schema;

use crate::domain::{basket, checkout, contact, ids, refund, shop};
use crate::store::{catalog, fulfilment, reconcile, refunds, views};

/// A schema written as JSON Schema (for limits that are constants, which the derive cannot read).
pub fn schema_of(v: Value) -> RefOr<Schema> {
    let schema = serde_json::from_value(v.clone()).unwrap_or_else(|_| RefOr::T(Schema::default()));
    // utoipa's model holds a subset of JSON Schema: the tests call every schema written here, and
    // one it cannot hold whole fails them.
    #[cfg(test)]
    assert_eq!(serde_json::to_value(&schema).ok().as_ref(), Some(&v), "utoipa cannot hold this schema");
    schema
}

/// Characters the API refuses in text: Unicode's control characters (`char::is_control`).
const CONTROL: &str = "\\u0000-\\u001f\\u007f-\\u009f";

/// Text of printable characters, with something in it that is not a space.
fn printable_pattern(trimmed: bool) -> String {
    if trimmed {
        // No surrounding spaces at all.
        format!("^[^\\s{CONTROL}]([^{CONTROL}]*[^\\s{CONTROL}])?$")
    } else {
        format!("^[^{CONTROL}]*[^\\s{CONTROL}][^{CONTROL}]*$")
    }
}

/// `schema` that may also be `null` (a field serde reads as absent when null).
fn nullable(mut schema: Value) -> Value {
    if let Some(kind) = schema.get("type").and_then(Value::as_str).map(str::to_string) {
        schema["type"] = json!([kind, "null"]);
    }
    if let Some(values) = schema.get_mut("enum").and_then(Value::as_array_mut) {
        values.push(Value::Null);
    }
    schema
}

/// A plain identifier: what URLs and references accept (`domain::ids::is_plain_id`).
pub fn plain_id_json() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": ids::MAX_ID_LEN, "pattern": "^[A-Za-z0-9_.-]+$"})
}

pub fn sku_code() -> RefOr<Schema> {
    schema_of(plain_id_json())
}

pub fn refund_no() -> RefOr<Schema> {
    schema_of(
        json!({"type": "string", "minLength": 1, "maxLength": ids::REFUND_NO_LEN_MAX, "pattern": "^[A-Za-z0-9_.-]+$"}),
    )
}

fn sku_name_json() -> Value {
    json!({
        "type": "string", "minLength": 1, "maxLength": crate::domain::catalog::SKU_NAME_LEN_MAX, "pattern": printable_pattern(false),
        "description": "printable characters"
    })
}

pub fn sku_name() -> RefOr<Schema> {
    schema_of(sku_name_json())
}

/// A new name; `null` leaves it as it is.
pub fn sku_name_change() -> RefOr<Schema> {
    schema_of(nullable(sku_name_json()))
}

pub fn sku_kind() -> RefOr<Schema> {
    schema_of(json!({"type": ["string", "null"], "enum": ["physical", "digital", null], "default": "physical"}))
}

pub fn currency() -> RefOr<Schema> {
    let known: Vec<&str> = crate::domain::Currency::known().collect();
    schema_of(json!({"type": "string", "enum": known, "description": "ISO 4217 code"}))
}

fn amount_json() -> Value {
    json!({"type": "integer", "format": "int64", "minimum": 0, "maximum": i64::MAX, "description": "minor units (12.34 CNY is 1234)"})
}

/// An amount of money in minor units (`12.34 CNY` is 1234).
pub fn amount_minor() -> RefOr<Schema> {
    schema_of(amount_json())
}

/// A new price; `null` leaves it as it is.
pub fn amount_change() -> RefOr<Schema> {
    schema_of(nullable(amount_json()))
}

pub fn line_quantity() -> RefOr<Schema> {
    schema_of(json!({"type": "integer", "minimum": 1, "maximum": basket::LINE_QUANTITY_MAX}))
}

pub fn set_quantity() -> RefOr<Schema> {
    schema_of(
        json!({"type": "integer", "minimum": 0, "maximum": basket::LINE_QUANTITY_MAX, "description": "0 removes the line"}),
    )
}

pub fn basket_lines() -> RefOr<Schema> {
    let line = serde_json::to_value(<NewLine as utoipa::PartialSchema>::schema()).unwrap_or_default();
    schema_of(json!({"type": "array", "maxItems": basket::BASKET_LINES_MAX, "items": line}))
}

pub fn stock() -> RefOr<Schema> {
    schema_of(json!({"type": "integer", "minimum": 0, "maximum": catalog::STOCK_DELTA_MAX, "default": 0}))
}

pub fn stock_delta() -> RefOr<Schema> {
    schema_of(json!({
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": catalog::STOCK_DELTA_MAX, "description": "restock"},
            {"type": "integer", "minimum": -catalog::STOCK_DELTA_MAX, "maximum": -1, "description": "write off"}
        ]
    }))
}

pub fn max_per_order() -> RefOr<Schema> {
    schema_of(
        json!({"type": ["integer", "null"], "minimum": 1, "maximum": basket::LINE_QUANTITY_MAX, "description": "most units in one order; null: no limit of its own"}),
    )
}

pub fn hold_seconds() -> RefOr<Schema> {
    schema_of(
        json!({"type": ["integer", "null"], "minimum": 1, "maximum": checkout::HOLD_SECONDS_MAX, "description": "how long an order holds this SKU's stock; null: the server's --hold-seconds"}),
    )
}

pub fn refund_amount() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["integer", "null"], "format": "int64", "minimum": 1, "maximum": i64::MAX,
        "description": "the amount to pay back; or name lines instead"
    }))
}

pub fn refund_lines() -> RefOr<Schema> {
    schema_of(json!({
        "type": "array", "maxItems": refund::REFUND_LINES_MAX,
        "items": {
            "type": "object", "additionalProperties": false, "required": ["line_no", "quantity"],
            "properties": {
                "line_no": {"type": "integer", "format": "int64", "minimum": 1, "maximum": i64::MAX},
                "quantity": {"type": "integer", "format": "int64", "minimum": 1, "maximum": i64::MAX}
            }
        },
        "description": "units of the order's lines (line_no from 1, in the order's line order) to pay back, instead of amount_minor"
    }))
}

pub fn refund_reason() -> RefOr<Schema> {
    schema_of(json!({"type": "string", "maxLength": refund::REASON_LEN_MAX, "default": ""}))
}

pub fn card_keys() -> RefOr<Schema> {
    schema_of(json!({
        "type": "array", "maxItems": fulfilment::IMPORT_API_MAX,
        "items": {"type": "string", "minLength": 1, "maxLength": crate::vault::KEY_LEN_MAX, "pattern": printable_pattern(false),
                  "description": "printable characters; surrounding spaces are trimmed"}
    }))
}

/// How a shipment went, when it names no tracking number.
pub fn logistics_schema() -> RefOr<Schema> {
    schema_of(json!({"type": ["string", "null"], "enum": ["express", "same_city", "pickup", null]}))
}

fn shipment_text(max: usize) -> Value {
    json!({"type": ["string", "null"], "maxLength": max, "pattern": format!("^[^{CONTROL}]*$")})
}

pub fn tracking_no_schema() -> RefOr<Schema> {
    schema_of(shipment_text(crate::domain::shipping::TRACKING_NO_CHARS_MAX))
}

pub fn express_company_schema() -> RefOr<Schema> {
    schema_of(shipment_text(crate::domain::shipping::EXPRESS_COMPANY_CHARS_MAX))
}

pub fn merchant_reference() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "minLength": 1, "maxLength": shop::MERCHANT_REFERENCE_LEN_MAX, "pattern": printable_pattern(true),
        "description": "the shop's own reference, set only from the shop's server with its Kassa-Shop-Key (else shop_key_required), unique: a checkout naming one that an order of the same buyer has answers that order (merchant_reference_taken for another buyer's)"
    }))
}

pub fn metadata() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["object", "null"], "maxProperties": shop::METADATA_PAIRS_MAX,
        "additionalProperties": {"type": "string", "maxLength": shop::METADATA_VALUE_LEN_MAX, "pattern": format!("^[^{CONTROL}]*$")},
        "description": format!("the shop's string pairs, set only from the shop's server with its Kassa-Shop-Key (else shop_key_required), returned on the order and in every webhook about it; keys of 1-{} printable characters (else invalid_metadata)", shop::METADATA_KEY_LEN_MAX)
    }))
}

pub fn return_url() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "maxLength": shop::RETURN_URL_LEN_MAX, "pattern": format!("^https?://[^\\s\"{CONTROL}]+$"),
        "description": "under --allowed-return-origins (else return_url_not_allowed); {order_no} is replaced by the order number"
    }))
}

pub fn contact_email() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "maxLength": contact::EMAIL_LEN_MAX,
        "description": "an e-mail address (else invalid_contact); kept in lower case"
    }))
}

pub fn contact_phone() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "maxLength": contact::PHONE_LEN_MAX,
        "description": format!("{}-{} digits, an optional leading + and spaces, hyphens, dots or parentheses (else invalid_contact); kept as the digits and the +", contact::PHONE_DIGITS_MIN, contact::PHONE_DIGITS_MAX)
    }))
}

pub fn lookup_password() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "minLength": contact::LOOKUP_PASSWORD_LEN_MIN, "maxLength": contact::LOOKUP_PASSWORD_LEN_MAX,
        "pattern": format!("^[^{CONTROL}]*$"),
        "description": "a password the buyer chooses to look the order up with (else invalid_lookup_password); only its slow hash is kept"
    }))
}

pub fn lookup_order_no() -> RefOr<Schema> {
    schema_of(json!({
        "type": "string", "maxLength": ids::MAX_ID_LEN,
        "description": "the order number (one that is not an order's matches nothing)"
    }))
}

pub fn lookup_password_given() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "maxLength": contact::LOOKUP_PASSWORD_LEN_MAX,
        "description": "the lookup password chosen at checkout (else invalid_lookup_password)"
    }))
}

pub fn promotion_code() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "maxLength": crate::domain::promotion::CODE_LEN_MAX,
        "description": "a promotion code (any case; one that is no code is promotion_unknown)"
    }))
}

pub fn captcha_token() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "maxLength": super::guard::CAPTCHA_TOKEN_LEN_MAX,
        "description": "the bot check's response token; required when the server is started with --captcha-verify-url"
    }))
}

pub fn order_status() -> RefOr<Schema> {
    views::order_status_schema()
}

/// `GET /healthz`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`: the process serves requests.
    pub status: &'static str,
}

/// `GET /readyz`.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// `ready`, `database_unavailable` or `migrations_pending`.
    pub status: &'static str,
    /// The migrations this binary would still apply.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<&'static str>,
}

/// `POST /api/v1/sessions`: a new anonymous buyer.
#[derive(Serialize, ToSchema)]
pub struct SessionCreated {
    /// The buyer's bearer token.
    pub token: String,
}

/// A checkout's or a retry's answer: the order, its new payment attempt and the hand-off.
#[derive(Serialize, ToSchema)]
pub struct PlacedOrder {
    pub order_no: String,
    pub attempt_ref: String,
    #[schema(schema_with = order_status)]
    pub status: &'static str,
    pub total_minor: i64,
    pub currency: String,
    /// When the stock hold ends (RFC 3339).
    pub expires_at: String,
    pub merchant_reference: Option<String>,
    #[schema(value_type = std::collections::BTreeMap<String, String>)]
    pub metadata: shop::Metadata,
    /// How the buyer pays; `null` for an order whose total is zero (paid at once).
    pub payment: Option<crate::gateway::Handoff>,
}

/// An order as its buyer (and the admin) reads it: its lines with any delivered card keys, its
/// payment attempts and its refunds.
#[derive(Serialize, ToSchema)]
pub struct OrderBody {
    #[serde(flatten)]
    pub order: views::OrderView,
    pub refunds: Vec<refunds::RefundView>,
}

/// The admin's view of an order: the buyer's, with its event log (`events`) and what
/// reconciliation found about it.
#[derive(Serialize, ToSchema)]
pub struct AdminOrderBody {
    #[serde(flatten)]
    pub order: OrderBody,
    pub reconciliation: Vec<reconcile::FindingView>,
    /// Money a gateway took again on an attempt already paid, under another transaction, each with
    /// the automatic refund that returns it (empty when none).
    pub second_captures: Vec<crate::store::second_captures::SecondCaptureView>,
    /// The shipment's report to WeChat, for an order paid in a mini program (`null` otherwise).
    pub shipping_report: Option<crate::store::shipping::ShippingReportView>,
    /// The e-mail sent (or to be sent) to the buyer about the order, oldest first.
    pub mail: Vec<crate::store::mail::Mail>,
    /// The mini-program subscribe messages of the order, oldest first.
    pub subscribe_messages: Vec<crate::store::subscribe::SubscribeView>,
}

/// An order's status after an admin's or buyer's action.
#[derive(Serialize, ToSchema)]
pub struct OrderStatusBody {
    pub order_no: String,
    #[schema(schema_with = order_status)]
    pub status: String,
    /// After a cancel with `rebasket`: the new basket holding the order's lines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub basket_id: Option<String>,
}

/// `GET /api/v1/admin/skus`.
#[derive(Serialize, ToSchema)]
pub struct SkuList {
    pub skus: Vec<catalog::SkuView>,
}

/// One line of a new basket.
#[derive(serde::Deserialize, ToSchema)]
pub struct NewLine {
    #[schema(schema_with = sku_code)]
    pub sku: String,
    #[schema(schema_with = line_quantity)]
    pub quantity: i64,
}

/// A SKU as the public catalog shows it: what a buyer may order, at what price, and how many.
#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogItem {
    pub sku: String,
    pub name: String,
    pub kind: String,
    pub price_minor: i64,
    pub currency: String,
    /// Units that can be ordered now (stock not held by open orders; a digital SKU's keys).
    pub available: i64,
    /// Most units in one order (`null`: no limit of its own).
    pub max_per_order: Option<i64>,
}

/// Longest text filter of a list (order number, reference, search), in characters.
pub const FILTER_LEN_MAX: usize = 128;

/// Longest note an operator writes when resolving a statement finding, in characters.
pub const NOTE_LEN_MAX: usize = 500;

/// `GET /api/v1/catalog`.
#[derive(Serialize, ToSchema)]
pub struct Catalog {
    pub items: Vec<CatalogItem>,
}

/// One page of orders, newest first.
#[derive(Serialize, ToSchema)]
pub struct OrderPage {
    pub items: Vec<crate::store::listing::OrderSummary>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// One page of webhook messages, newest first.
#[derive(Serialize, ToSchema)]
pub struct MessagePage {
    pub items: Vec<crate::store::listing::MessageView>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

impl From<crate::store::listing::Page<crate::store::listing::OrderSummary>> for OrderPage {
    fn from(p: crate::store::listing::Page<crate::store::listing::OrderSummary>) -> Self {
        OrderPage { items: p.items, next_cursor: p.next_cursor }
    }
}

impl From<crate::store::listing::Page<crate::store::listing::MessageView>> for MessagePage {
    fn from(p: crate::store::listing::Page<crate::store::listing::MessageView>) -> Self {
        MessagePage { items: p.items, next_cursor: p.next_cursor }
    }
}

/// What a key import did.
pub type KeysImported = fulfilment::ImportCount;

pub fn gateway_name() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "enum": ["sandbox", "alipay", "wechatpay", "stripe", null],
        "description": "one this server is configured with (the document lists them; else unknown_gateway); default: the configured default gateway"
    }))
}

pub fn channel_name() -> RefOr<Schema> {
    schema_of(json!({
        "type": ["string", "null"], "enum": ["form", "page", "wap", "qr", "jsapi", "h5", "native", "checkout", null],
        "description": "sandbox: form; alipay: page, wap or qr; wechatpay: jsapi, h5 or native (a QR code); stripe: checkout. Default: by the payer, then the buyer's device (User-Agent)"
    }))
}

pub fn payer() -> RefOr<Schema> {
    let field = |what: &str| json!({"type": "string", "minLength": 1, "maxLength": crate::usecase::payment::PAYER_FIELD_LEN_MAX, "pattern": format!("^[^{CONTROL}]+$"), "description": what});
    schema_of(json!({
        "type": ["object", "null"], "additionalProperties": false,
        "properties": {
            "openid": field("WeChat JSAPI: the payer's openid"),
            "client_ip": {"anyOf": [
                {"type": "string", "format": "ipv4", "description": "WeChat H5: the buyer's IP address"},
                {"type": "string", "format": "ipv6", "description": "WeChat H5: the buyer's IP address"}
            ]}
        },
        "description": "who pays, where a channel needs it"
    }))
}

/// A status filter; empty: any.
pub fn order_status_filter() -> RefOr<Schema> {
    let mut all: Vec<&str> = crate::domain::OrderStatus::ALL.iter().map(|s| s.as_str()).collect();
    all.push("");
    schema_of(json!({"type": "string", "enum": all, "description": "empty: any"}))
}

/// A text filter of the lists: matched exactly, surrounding spaces ignored.
pub fn filter_text() -> RefOr<Schema> {
    schema_of(json!({"type": "string", "maxLength": FILTER_LEN_MAX, "pattern": format!("^[^{CONTROL}]*$")}))
}

pub fn time_bound() -> RefOr<Schema> {
    schema_of(json!({"anyOf": [
        {"type": "string", "format": "date", "examples": ["2026-12-01"]},
        {"type": "string", "format": "date-time", "examples": ["2026-12-01T08:00:00+08:00"]},
        {"type": "string", "maxLength": 0, "description": "empty: no bound"}
    ]}))
}

pub fn page_limit() -> RefOr<Schema> {
    schema_of(json!({
        "type": "integer", "default": crate::store::listing::PAGE_DEFAULT,
        "description": format!("rows per page; held to 1-{}", crate::store::listing::PAGE_MAX)
    }))
}

pub fn page_cursor() -> RefOr<Schema> {
    schema_of(json!({"type": "string", "description": "the previous page's next_cursor (invalid_cursor otherwise)"}))
}

pub fn statement_note() -> RefOr<Schema> {
    schema_of(json!({
        "type": "string", "minLength": 1, "maxLength": NOTE_LEN_MAX, "pattern": printable_pattern(true),
        "description": "what was done about the finding; printable characters"
    }))
}

pub fn message_status() -> RefOr<Schema> {
    let mut all: Vec<&str> = crate::domain::status::MessageStatus::ALL.iter().map(|s| s.as_str()).collect();
    all.push("");
    schema_of(json!({"type": "string", "enum": all, "description": "empty: any"}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_written_schema_survives_whole() {
        for f in [
            sku_code,
            refund_no,
            sku_name,
            sku_name_change,
            sku_kind,
            currency,
            amount_minor,
            amount_change,
            line_quantity,
            set_quantity,
            basket_lines,
            stock,
            stock_delta,
            max_per_order,
            hold_seconds,
            refund_amount,
            refund_reason,
            card_keys,
            logistics_schema,
            tracking_no_schema,
            express_company_schema,
            merchant_reference,
            metadata,
            return_url,
            captcha_token,
            order_status,
            gateway_name,
            channel_name,
            payer,
            order_status_filter,
            filter_text,
            time_bound,
            page_limit,
            page_cursor,
            message_status,
            statement_note,
        ] {
            f();
        }
    }

    #[test]
    fn the_document_is_generated_whole() {
        let served = crate::http::openapi::Served {
            sandbox: true,
            gateways: vec![("sandbox", &["form"])],
            return_origins: vec!["https://shop.example".into()],
        };
        let doc = crate::http::openapi::document(&served);
        let gateway = &doc["components"]["schemas"]["CheckoutBody"]["properties"]["gateway"]["enum"];
        assert_eq!(gateway, &serde_json::json!(["sandbox", null]), "only the gateways served");
        let pattern = doc["components"]["schemas"]["CheckoutBody"]["properties"]["return_url"]["pattern"].as_str();
        assert_eq!(
            pattern,
            Some(
                "^([hH][tT][tT][pP][sS]://[sS][hH][oO][pP]\\.[eE][xX][aA][mM][pP][lL][eE])([/?#][^\\s\"\\u0000-\\u001f\\u007f-\\u009f]*)?$"
            ),
            "return URLs under the allowed origins"
        );
        for schema in ["PlacedOrder", "OrderBody", "Error", "WebhookMessage", "OrderChanged", "RefundChanged"] {
            assert!(doc["components"]["schemas"][schema].is_object(), "{schema} missing");
        }
        // Every $ref names a schema that is there.
        let text = doc.to_string();
        for part in text.split("\"#/components/schemas/").skip(1) {
            let name = part.split('"').next().unwrap_or_default();
            assert!(doc["components"]["schemas"][name].is_object(), "{name} is referenced and missing");
        }
        assert_eq!(doc["webhooks"].as_object().map(|w| w.len()), Some(crate::store::outbox::TOPICS.len()));
        // Every link leads to an operation that is there, and fills one of its parameters.
        let operations: Vec<&serde_json::Value> = doc["paths"]
            .as_object()
            .into_iter()
            .flat_map(|paths| paths.values())
            .filter_map(|item| item.as_object())
            .flat_map(|item| item.values())
            .collect();
        let mut links = 0;
        for op in &operations {
            for response in op["responses"].as_object().into_iter().flat_map(|r| r.values()) {
                for link in response["links"].as_object().into_iter().flat_map(|l| l.values()) {
                    let target = operations.iter().find(|o| o["operationId"] == link["operationId"]);
                    let target = target.unwrap_or_else(|| panic!("link to a missing operation: {link}"));
                    let parameter =
                        link["parameters"].as_object().and_then(|p| p.keys().next()).cloned().unwrap_or_default();
                    let named =
                        target["parameters"].as_array().is_some_and(|ps| ps.iter().any(|p| p["name"] == parameter));
                    assert!(named, "{link} fills no parameter of its operation");
                    links += 1;
                }
            }
        }
        assert!(links >= 7, "{links} links");
    }
}

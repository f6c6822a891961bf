//! The JSON API's route table: every operation with its documentation (which `/openapi.json` is
//! generated from) and its handler in [`super::api`].

use axum::routing::{MethodRouter, get, post, put};
use serde_json::{Value, json};

use super::api::*;
use super::{AppState, Auth, RouteDoc};
use crate::domain::{basket, shop};

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    use Auth::*;
    let doc = |method, path, summary, tag, auth, body: Option<Value>, responses| RouteDoc {
        method,
        path,
        summary,
        tag,
        auth,
        body,
        responses,
    };
    vec![
        (
            doc(
                "get",
                "/healthz",
                "Liveness: the process serves requests",
                "operations",
                None,
                Option::None,
                &[(200, "ok")],
            ),
            get(healthz),
        ),
        (
            doc(
                "get",
                "/readyz",
                "Readiness: the database answers and its migrations are current",
                "operations",
                None,
                Option::None,
                &[(200, "ready"), (503, "database unavailable or migrations pending")],
            ),
            get(readyz),
        ),
        (
            doc(
                "get",
                "/metrics",
                "Prometheus metrics (text format)",
                "operations",
                None,
                Option::None,
                &[(200, "metrics")],
            ),
            get(metrics),
        ),
        (
            doc(
                "get",
                "/openapi.json",
                "This document",
                "operations",
                None,
                Option::None,
                &[(200, "OpenAPI 3.1 document")],
            ),
            get(super::openapi::serve),
        ),
        (
            doc(
                "post",
                "/api/v1/sessions",
                "Create an anonymous buyer; returns its bearer token",
                "buyer",
                None,
                Option::None,
                &[(201, "{token}"), (429, "rate_limited")],
            ),
            post(create_session),
        ),
        (
            doc(
                "post",
                "/api/v1/baskets",
                "Create a basket, empty or with its lines (all of them or nothing)",
                "buyer",
                Buyer,
                Some(json!({"type": "object", "properties": {"lines": {
                    "type": "array", "maxItems": basket::BASKET_LINES_MAX,
                    "items": {"type": "object", "required": ["sku", "quantity"], "properties": {
                        "sku": {"type": "string"},
                        "quantity": {"type": "integer", "minimum": 1, "maximum": basket::LINE_QUANTITY_MAX}}}}}})),
                &[
                    (201, "the basket {basket_id, status, lines, total_minor, currency}"),
                    (401, "unauthorized"),
                    (404, "not_found (a SKU)"),
                    (
                        422,
                        "invalid_quantity / quantity_limit / duplicate_line / currency_mismatch / basket_too_large / amount_overflow",
                    ),
                    (429, "rate_limited"),
                ],
            ),
            post(create_basket),
        ),
        (
            doc(
                "put",
                "/api/v1/baskets/{basket_id}/lines/{sku}",
                "Set a line's quantity (0 removes it)",
                "buyer",
                Buyer,
                Some(
                    json!({"type": "object", "required": ["quantity"], "properties": {"quantity": {"type": "integer", "minimum": 0, "maximum": basket::LINE_QUANTITY_MAX}}}),
                ),
                &[
                    (200, "the basket"),
                    (404, "not_found"),
                    (409, "basket_frozen"),
                    (422, "invalid_quantity / quantity_limit / currency_mismatch"),
                    (429, "rate_limited"),
                ],
            ),
            put(set_line),
        ),
        (
            doc(
                "get",
                "/api/v1/baskets/{basket_id}",
                "The basket with its lines and quote",
                "buyer",
                Buyer,
                Option::None,
                &[(200, "the basket"), (404, "not_found")],
            ),
            get(get_basket),
        ),
        (
            doc(
                "post",
                "/api/v1/baskets/{basket_id}/checkout",
                "Confirm: create the pending order and its payment attempt; returns the hand-off (HTML form page with Accept: text/html). Optional Idempotency-Key header.",
                "buyer",
                Buyer,
                Some(
                    json!({"type": "object", "properties": {"gateway": {"type": "string", "enum": ["sandbox", "alipay", "wechatpay", "stripe"], "description": "default: the configured default gateway"}, "channel": {"type": "string", "description": "sandbox: form; alipay: page (default), wap or qr; wechatpay: jsapi (default), h5 or native (a QR code); stripe: checkout"}, "payer": {"type": "object", "description": "WeChat jsapi: openid; WeChat h5: client_ip", "properties": {"openid": {"type": "string"}, "client_ip": {"type": "string"}}, "additionalProperties": false}, "captcha_token": {"type": "string", "maxLength": 4096, "description": "the bot check's response token; required when the server is started with --captcha-verify-url"}, "merchant_reference": {"type": "string", "minLength": 1, "maxLength": shop::MERCHANT_REFERENCE_LEN_MAX, "description": "the shop's own reference, unique: a checkout naming one an order of the same buyer has answers that order (merchant_reference_taken for another buyer's)"}, "metadata": {"type": "object", "maxProperties": shop::METADATA_PAIRS_MAX, "propertyNames": {"minLength": 1, "maxLength": shop::METADATA_KEY_LEN_MAX}, "additionalProperties": {"type": "string", "maxLength": shop::METADATA_VALUE_LEN_MAX}, "description": "the shop's string pairs, returned on the order and in every webhook about it"}, "return_url": {"type": "string", "format": "uri", "maxLength": shop::RETURN_URL_LEN_MAX, "description": "where the gateway sends the buyer after paying, under --allowed-return-origins; {order_no} is replaced by the order number (default: kassa's return page)"}, "cancel_url": {"type": "string", "format": "uri", "maxLength": shop::RETURN_URL_LEN_MAX, "description": "where a buyer who gives up at the gateway goes, under --allowed-return-origins; {order_no} as in return_url"}}}),
                ),
                &[
                    (
                        201,
                        "{order_no, attempt_ref, status, expires_at, merchant_reference, metadata, payment}; a zero total is paid at once: payment null; a repeated confirm answers the same order with Idempotent-Replayed: true",
                    ),
                    (409, "out_of_stock / price_changed / merchant_reference_taken"),
                    (
                        422,
                        "basket_empty / quantity_limit / captcha_failed / unknown_gateway / unsupported_channel / unsupported_currency / payer_required / invalid_payer / invalid_merchant_reference / invalid_metadata / return_url_not_allowed",
                    ),
                    (429, "too_many_open_orders / rate_limited"),
                    (502, "gateway_unavailable"),
                ],
            ),
            post(checkout_json),
        ),
        (
            doc(
                "get",
                "/api/v1/orders/{order_no}",
                "Order status, lines and attempts (own orders only, or admin)",
                "buyer",
                Buyer,
                Option::None,
                &[(200, "the order"), (403, "forbidden"), (404, "not_found")],
            ),
            get(get_order),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/skus",
                "Create a SKU",
                "admin",
                Admin,
                Some(
                    json!({"type": "object", "required": ["sku", "name", "price_minor", "currency"], "properties": {"sku": {"type": "string"}, "name": {"type": "string"}, "price_minor": {"type": "integer", "minimum": 0}, "currency": {"type": "string"}, "stock": {"type": "integer", "minimum": 0}, "kind": {"type": "string", "enum": ["physical", "digital"]}, "max_per_order": {"type": ["integer", "null"], "minimum": 1, "maximum": 10000}, "hold_seconds": {"type": ["integer", "null"], "minimum": 1, "maximum": 604800}}}),
                ),
                &[(201, "the SKU"), (409, "sku_exists"), (422, "invalid input")],
            ),
            post(create_sku).get(list_skus),
        ),
        (
            doc(
                "get",
                "/api/v1/admin/skus/{sku}",
                "Stock of a SKU: on_hand, reserved, sold, available, limits (PATCH: change price, name or limits; a limit set to null is removed)",
                "admin",
                Admin,
                Some(
                    json!({"type": "object", "properties": {"name": {"type": "string"}, "price_minor": {"type": "integer", "minimum": 0}, "max_per_order": {"type": ["integer", "null"], "minimum": 1, "maximum": 10000}, "hold_seconds": {"type": ["integer", "null"], "minimum": 1, "maximum": 604800}}}),
                ),
                &[(200, "the SKU"), (404, "not_found")],
            ),
            get(get_sku).patch(update_sku),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/skus/{sku}/stock",
                "Restock (positive delta) or write off (negative)",
                "admin",
                Admin,
                Some(json!({"type": "object", "required": ["delta"], "properties": {"delta": {"type": "integer"}}})),
                &[(200, "the SKU"), (409, "insufficient_stock"), (422, "digital_stock_is_keys / invalid_quantity")],
            ),
            post(adjust_stock),
        ),
        (
            doc(
                "get",
                "/api/v1/catalog",
                "The catalog: every SKU on sale with its price and the units that can be ordered now",
                "buyer",
                None,
                Option::None,
                &[
                    (200, "{items: [{sku, name, kind, price_minor, currency, available, max_per_order}]}"),
                    (429, "rate_limited"),
                ],
            ),
            get(super::api_lists::catalog_json),
        ),
        (
            doc(
                "get",
                "/api/v1/admin/orders",
                "Orders, newest first, one page at a time. Query: status, gateway (an attempt on it), from and to (a date, whole days UTC, or an RFC 3339 time), sku (a line of it), q (order number, attempt reference, gateway transaction id or merchant reference, exactly), limit (1-200, default 50), cursor (the previous page's next_cursor)",
                "admin",
                Admin,
                Option::None,
                &[
                    (
                        200,
                        "{items: [{order_no, status, total_minor, currency, captured_minor, refunded_minor, gateway, merchant_reference, metadata, created_at}], next_cursor}",
                    ),
                    (400, "invalid_filter / invalid_cursor"),
                ],
            ),
            get(super::api_lists::list_orders),
        ),
        (
            doc(
                "get",
                "/api/v1/admin/orders.csv",
                "Orders as CSV (streamed; amounts in major units), with the filters of /api/v1/admin/orders",
                "admin",
                Admin,
                Option::None,
                &[
                    (
                        200,
                        "text/csv: order_no, created_at, status, currency, total, captured, refunded, gateway, attempt_ref, gateway_txn_id, merchant_reference, lines, metadata",
                    ),
                    (400, "invalid_filter"),
                ],
            ),
            get(super::api_lists::orders_csv),
        ),
        (
            doc(
                "get",
                "/api/v1/admin/refunds.csv",
                "Refunds requested in a date range as CSV (streamed; amounts in major units). Query: from, to",
                "admin",
                Admin,
                Option::None,
                &[
                    (
                        200,
                        "text/csv: refund_no, order_no, created_at, updated_at, status, kind, currency, amount, gateway, attempt_ref, gateway_txn_id, merchant_reference, reason",
                    ),
                    (400, "invalid_filter"),
                ],
            ),
            get(super::api_lists::refunds_csv),
        ),
        (
            doc(
                "get",
                "/api/v1/admin/webhooks",
                "Webhook messages to the shop, newest first, with their tries and last error. Query: status (pending, delivered, dead), order_no, limit, cursor",
                "admin",
                Admin,
                Option::None,
                &[
                    (
                        200,
                        "{items: [{id, order_no, topic, status, tries, resends, last_error, created_at, delivered_at}], next_cursor}",
                    ),
                    (400, "invalid_filter / invalid_cursor"),
                ],
            ),
            get(super::api_lists::list_webhooks),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/webhooks/{id}/resend",
                "Send a delivered or dead webhook message again, with its original id (Kassa-Event-Id)",
                "admin",
                Admin,
                Option::None,
                &[(200, "the message, queued"), (404, "not_found"), (409, "webhook_pending")],
            ),
            post(super::api_lists::resend_webhook),
        ),
        (
            doc(
                "get",
                "/api/v1/admin/orders/{order_no}",
                "Order with attempts, refunds and its event log",
                "admin",
                Admin,
                Option::None,
                &[(200, "the order"), (404, "not_found")],
            ),
            get(admin_order),
        ),
        (
            doc(
                "post",
                "/api/v1/orders/{order_no}/attempts",
                "Retry: a new payment attempt (the active one is superseded and closed at its gateway)",
                "buyer",
                Buyer,
                Some(
                    json!({"type": "object", "properties": {"gateway": {"type": "string"}, "channel": {"type": "string"}, "payer": {"type": "object", "description": "WeChat jsapi: openid; WeChat h5: client_ip", "properties": {"openid": {"type": "string"}, "client_ip": {"type": "string"}}, "additionalProperties": false}, "captcha_token": {"type": "string", "maxLength": 4096, "description": "the bot check's response token; required when the server is started with --captcha-verify-url"}}}),
                ),
                &[
                    (201, "{order_no, attempt_ref, expires_at, payment}"),
                    (409, "not_payable / order_expired / already_paid"),
                ],
            ),
            post(retry_payment),
        ),
        (
            doc(
                "post",
                "/api/v1/orders/{order_no}/cancel",
                "Cancel a pending order: stock released, attempt closed; rebasket=true returns a new editable basket",
                "buyer",
                Buyer,
                Some(json!({"type": "object", "properties": {"rebasket": {"type": "boolean", "default": false}}})),
                &[(200, "{status, basket_id?}"), (409, "not_cancellable / already_paid")],
            ),
            post(cancel_order),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/orders/{order_no}/refunds",
                "Refund (full or partial) with a caller-supplied refund number; the same number and terms return the same refund, other terms are refund_no_reused; a partial refund keeps the order's status",
                "admin",
                Admin,
                Some(
                    json!({"type": "object", "required": ["refund_no", "amount_minor"], "properties": {"refund_no": {"type": "string"}, "amount_minor": {"type": "integer", "minimum": 1}, "reason": {"type": "string"}}}),
                ),
                &[
                    (201, "the refund"),
                    (200, "the existing refund"),
                    (409, "refund_exceeds_captured / not_refundable / refund_no_reused / refund_window_closed"),
                ],
            ),
            post(request_refund),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/orders/{order_no}/deliver",
                "Mark a paid physical order delivered (shipped)",
                "admin",
                Admin,
                Option::None,
                &[(200, "delivered"), (409, "not_deliverable")],
            ),
            post(mark_delivered),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/orders/{order_no}/accept",
                "Accept a late payment (paid_after_expiry): stock is taken again and the order paid",
                "admin",
                Admin,
                Option::None,
                &[(200, "paid"), (409, "out_of_stock / not_late_payment")],
            ),
            post(accept_late),
        ),
        (
            doc(
                "post",
                "/api/v1/admin/skus/{sku}/keys",
                "Import card keys into a digital SKU (encrypted at rest; duplicates within the SKU are refused)",
                "admin",
                Admin,
                Some(
                    json!({"type": "object", "required": ["keys"], "properties": {"keys": {"type": "array", "items": {"type": "string"}}}}),
                ),
                &[
                    (200, "{imported, duplicates}"),
                    (409, "keys_secret_mismatch"),
                    (422, "not_digital / keys_secret_missing"),
                ],
            ),
            post(import_keys),
        ),
        (
            doc(
                "post",
                "/notify/{gateway}",
                "Gateway notification (sandbox, alipay, wechatpay, stripe); answered with the gateway's own acknowledgement (alipay: success/fail; wechatpay: 204 or 4xx FAIL; stripe and sandbox: 200 JSON or 4xx error)",
                "gateways",
                None,
                Option::None,
                &[
                    (200, "accepted or duplicate"),
                    (400, "invalid_signature / malformed_body / mismatch"),
                    (404, "unknown gateway"),
                ],
            ),
            post(notify),
        ),
    ]
}

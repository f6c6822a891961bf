//! The JSON API's route table: every operation with its documentation — the types it reads and
//! answers, the codes it refuses with — from which `/openapi.json` is generated, and its handler in
//! [`super::api`].

use axum::routing::{MethodRouter, get, patch, post, put};
use serde_json::json;

use super::api::*;
use super::api_lists::{ExportQuery, OrderFilterQuery, OrdersQuery, RangeQuery, WebhooksQuery};
use super::flows::{CheckoutBody, RetryBody};
use super::schema::{
    AdminOrderBody, Catalog, Health, KeysImported, MessagePage, OrderBody, OrderPage, OrderStatusBody, PlacedOrder,
    Readiness, SessionCreated, SkuList,
};
use super::{AppState, Auth, Content, RouteDoc};
use crate::domain::ids::IDEMPOTENCY_KEY_LEN_MAX;
use crate::store::catalog::{BasketView, SkuView};
use crate::store::listing::MessageView;
use crate::store::refunds::RefundView;

/// Codes a basket's lines are refused with.
const LINE_CODES: &[&str] = &[
    "invalid_quantity",
    "quantity_limit",
    "duplicate_line",
    "currency_mismatch",
    "basket_too_large",
    "amount_overflow",
];

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    use Auth::*;
    let op = RouteDoc::new;
    vec![
        (
            op("get", "/healthz", "Liveness: the process serves requests", "operations", None).ok::<Health>(200, "ok"),
            get(healthz),
        ),
        (
            op("get", "/readyz", "Readiness: the database answers and its migrations are current", "operations", None)
                .ok::<Readiness>(200, "ready")
                .ok::<Readiness>(503, "database_unavailable, or migrations_pending with their names"),
            get(readyz),
        ),
        (
            op(
                "get",
                "/metrics",
                "Prometheus metrics (text format): open to this machine's clients; another machine sends Authorization: Bearer with --metrics-token or the admin token (or the server runs with --metrics-public)",
                "operations",
                None,
            )
            .answer(200, "metrics", Content::Other("text/plain"))
            .errors(401, &["unauthorized"])
            .errors(403, &["forbidden"])
            .errors(429, &["rate_limited"]),
            get(metrics),
        ),
        (
            op("get", "/openapi.json", "This document", "operations", None).answer(
                200,
                "OpenAPI 3.1 document",
                Content::Other("application/json"),
            ),
            get(super::openapi::serve),
        ),
        (
            op("post", "/api/v1/sessions", "Create an anonymous buyer; returns its bearer token", "buyer", None)
                .ok::<SessionCreated>(201, "the buyer's token"),
            post(create_session),
        ),
        (
            op("post", "/api/v1/baskets", "Create a basket, empty or with its lines (all of them or nothing)", "buyer", Buyer)
                .body::<NewBasketBody>("the lines")
                .ok::<BasketView>(201, "the basket")
                .link("checkout", "post_api_v1_baskets_basket_id_checkout", "basket_id", "$response.body#/basket_id")
                .link("read", "get_api_v1_baskets_basket_id", "basket_id", "$response.body#/basket_id")
                .link("set_line", "put_api_v1_baskets_basket_id_lines_sku", "basket_id", "$response.body#/basket_id")
                .errors(404, &["not_found"])
                .errors(422, LINE_CODES),
            post(create_basket),
        ),
        (
            op("put", "/api/v1/baskets/{basket_id}/lines/{sku}", "Set a line's quantity (0 removes it)", "buyer", Buyer)
                .body::<LineBody>("the quantity")
                .ok::<BasketView>(200, "the basket")
                .errors(404, &["not_found"])
                .errors(409, &["basket_frozen"])
                .errors(422, LINE_CODES),
            put(set_line),
        ),
        (
            op("get", "/api/v1/baskets/{basket_id}", "The basket with its lines and quote", "buyer", Buyer)
                .ok::<BasketView>(200, "the basket")
                .errors(404, &["not_found"]),
            get(get_basket),
        ),
        (
            op(
                "post",
                "/api/v1/baskets/{basket_id}/checkout",
                "Confirm: create the pending order and its payment attempt, and hand the buyer to the gateway. A repeated confirm (the same basket, or the same Idempotency-Key or merchant_reference) answers the same order with Idempotent-Replayed: true. With Accept: text/html the answer is the hand-off page.",
                "buyer",
                Buyer,
            )
            .body::<CheckoutBody>("how to pay, and the shop's own data")
            .header(
                "Idempotency-Key",
                json!({"type": "string", "minLength": 1, "maxLength": IDEMPOTENCY_KEY_LEN_MAX, "pattern": "^[\\x20-\\x7e]+$"}),
                "the client's key for this confirm: a repeat with it answers the first order. Kept for --idempotency-key-days (30) after the confirm; a repeat on the same basket later still answers its order",
            )
            .ok::<PlacedOrder>(201, "the order and its hand-off (payment null when the total is zero: paid at once)")
            .link("order", "get_api_v1_orders_order_no", "order_no", "$response.body#/order_no")
            .link("retry", "post_api_v1_orders_order_no_attempts", "order_no", "$response.body#/order_no")
            .link("cancel", "post_api_v1_orders_order_no_cancel", "order_no", "$response.body#/order_no")
            .link(
                "pay_in_sandbox",
                "post_sandbox_api_payments_attempt_ref_complete",
                "attempt_ref",
                "$response.body#/attempt_ref",
            )
            .with_header(("Idempotent-Replayed", false, "string", "`true` when this answers an order made before"))
            .answer(200, "the hand-off page (Accept: text/html)", Content::Other("text/html"))
            .errors(400, &["invalid_idempotency_key"])
            .errors(403, &["shop_key_required"])
            .errors(404, &["not_found"])
            .errors(409, &["out_of_stock", "price_changed", "merchant_reference_taken", "basket_frozen"])
            .errors(
                422,
                &[
                    "basket_empty",
                    "quantity_limit",
                    "currency_mismatch",
                    "amount_overflow",
                    "idempotency_key_reused",
                    "captcha_failed",
                    "unknown_gateway",
                    "unsupported_channel",
                    "unsupported_currency",
                    "payer_required",
                    "invalid_payer",
                    "invalid_merchant_reference",
                    "invalid_metadata",
                    "return_url_not_allowed",
                    "invalid_contact",
                    "invalid_lookup_password",
                    "open_in_browser",
                    "promotion_unknown",
                    "promotion_expired",
                    "promotion_used_up",
                    "promotion_not_applicable",
                    "promotion_minimum_not_met",
                    "promotion_limit_per_buyer",
                ],
            )
            .errors(429, &["too_many_open_orders"])
            .errors(502, &["gateway_unavailable", "gateway_refused", "captcha_unavailable"]),
            post(checkout_json),
        ),
        (
            op(
                "get",
                "/api/v1/orders/{order_no}",
                "Order status, lines (with delivered card keys), attempts and refunds: the buyer's own orders, or any for the admin",
                "buyer",
                BuyerOrAdmin,
            )
            .query::<OrderQuery>()
            .ok::<OrderBody>(200, "the order")
            .errors(404, &["not_found"])
            .errors(422, &["invalid_query"]),
            get(get_order),
        ),
        (
            op("post", "/api/v1/admin/skus", "Create a SKU", "admin", Admin)
                .body::<SkuBody>("the SKU")
                .ok::<SkuView>(201, "the SKU")
                .errors(409, &["sku_exists"])
                .errors(
                    422,
                    &[
                        "invalid_sku",
                        "invalid_name",
                        "invalid_amount",
                        "free_not_confirmed",
                        "unsupported_kind",
                        "unsupported_currency",
                        "unknown_currency",
                        "invalid_quantity",
                        "invalid_limit",
                    ],
                ),
            post(create_sku),
        ),
        (
            op("get", "/api/v1/admin/skus", "Every SKU with its stock and limits", "admin", Admin).ok::<SkuList>(200, "the SKUs"),
            get(list_skus),
        ),
        (
            op(
                "get",
                "/api/v1/admin/skus/{sku}",
                "A SKU's stock: on_hand, reserved, sold, available, and its limits",
                "admin",
                Admin,
            )
            .ok::<SkuView>(200, "the SKU")
            .errors(404, &["not_found"]),
            get(get_sku),
        ),
        (
            op(
                "patch",
                "/api/v1/admin/skus/{sku}",
                "Change a SKU's name, price or limits (a limit set to null is removed); orders already placed keep their prices",
                "admin",
                Admin,
            )
            .body::<SkuPatch>("the changes")
            .ok::<SkuView>(200, "the SKU")
            .errors(404, &["not_found"])
            .errors(422, &["invalid_name", "invalid_amount", "free_not_confirmed", "invalid_price", "invalid_limit"]),
            patch(update_sku),
        ),
        (
            op("post", "/api/v1/admin/skus/{sku}/stock", "Restock (positive delta) or write off (negative)", "admin", Admin)
                .body::<StockBody>("the movement")
                .ok::<SkuView>(200, "the SKU")
                .errors(404, &["not_found"])
                .errors(409, &["insufficient_stock"])
                .errors(422, &["digital_stock_is_keys", "invalid_quantity"]),
            post(adjust_stock),
        ),
        (
            op(
                "get",
                "/api/v1/catalog",
                "The catalog: every SKU on sale with its price and the units that can be ordered now",
                "buyer",
                None,
            )
            .ok::<Catalog>(200, "the SKUs on sale"),
            get(super::api_lists::catalog_json),
        ),
        (
            op("get", "/api/v1/admin/orders", "Orders, newest first, one page at a time", "admin", Admin)
                .query::<OrderFilterQuery>()
                .query::<OrdersQuery>()
                .ok::<OrderPage>(200, "a page of orders")
                .errors(400, &["invalid_filter", "invalid_cursor"]),
            get(super::api_lists::list_orders),
        ),
        (
            op(
                "get",
                "/api/v1/admin/orders.csv",
                "Orders as CSV (streamed; amounts in major units), with the filters of /api/v1/admin/orders. Columns: order_no, created_at, status, currency, total, captured, refunded, gateway, attempt_ref, gateway_txn_id, merchant_reference, lines, metadata",
                "admin",
                Admin,
            )
            .query::<OrderFilterQuery>()
            .query::<ExportQuery>()
            .answer(200, "the orders", Content::Other("text/csv"))
            .errors(400, &["invalid_filter", "invalid_cursor"]),
            get(super::api_lists::orders_csv),
        ),
        (
            op(
                "get",
                "/api/v1/admin/refunds.csv",
                "Refunds requested in a date range as CSV (streamed; amounts in major units). Columns: refund_no, order_no, created_at, updated_at, status, kind, currency, amount, gateway, attempt_ref, gateway_txn_id, merchant_reference, reason",
                "admin",
                Admin,
            )
            .query::<RangeQuery>()
            .query::<ExportQuery>()
            .answer(200, "the refunds", Content::Other("text/csv"))
            .errors(400, &["invalid_filter"]),
            get(super::api_lists::refunds_csv),
        ),
        (
            op(
                "get",
                "/api/v1/admin/webhooks",
                "Webhook messages to the shop, newest first, with their tries and last error",
                "admin",
                Admin,
            )
            .query::<WebhooksQuery>()
            .ok::<MessagePage>(200, "a page of messages")
            .errors(400, &["invalid_filter", "invalid_cursor"]),
            get(super::api_lists::list_webhooks),
        ),
        (
            op(
                "post",
                "/api/v1/admin/webhooks/{id}/resend",
                "Send a delivered or dead webhook message again, with its original id (Kassa-Event-Id) and body",
                "admin",
                Admin,
            )
            .ok::<MessageView>(200, "the message, queued")
            .errors(404, &["not_found"])
            .errors(409, &["webhook_pending"]),
            post(super::api_lists::resend_webhook),
        ),
        (
            op(
                "get",
                "/api/v1/admin/orders/{order_no}",
                "An order with its attempts, refunds, event log and reconciliation findings",
                "admin",
                Admin,
            )
            .ok::<AdminOrderBody>(200, "the order")
            .errors(404, &["not_found"]),
            get(admin_order),
        ),
        (
            op(
                "post",
                "/api/v1/orders/{order_no}/attempts",
                "Retry: a new payment attempt (the active one is superseded and closed at its gateway)",
                "buyer",
                BuyerOrAdmin,
            )
            .body::<RetryBody>("how to pay this time")
            .ok::<PlacedOrder>(201, "the order and its new hand-off")
            .errors(404, &["not_found"])
            .errors(409, &["not_payable", "order_expired", "already_paid"])
            .errors(
                422,
                &["unknown_gateway", "unsupported_channel", "unsupported_currency", "payer_required", "invalid_payer", "captcha_failed"],
            )
            .errors(502, &["gateway_unavailable", "gateway_refused"]),
            post(retry_payment),
        ),
        (
            op(
                "post",
                "/api/v1/orders/{order_no}/cancel",
                "Cancel a pending order: stock released, attempt closed; rebasket=true returns a new editable basket",
                "buyer",
                BuyerOrAdmin,
            )
            .body::<CancelBody>("how to cancel")
            .ok::<OrderStatusBody>(200, "cancelled")
            .errors(404, &["not_found"])
            .errors(409, &["not_cancellable", "already_paid"]),
            post(cancel_order),
        ),
        (
            op(
                "post",
                "/api/v1/admin/orders/{order_no}/refunds",
                "Refund (full or partial, an amount or units of named lines) with a caller-supplied refund number; the same number and terms return the same refund, other terms are refund_no_reused; a partial refund keeps the order's status",
                "admin",
                Admin,
            )
            .body::<RefundBody>("the refund")
            .ok::<RefundView>(201, "the refund")
            .ok::<RefundView>(200, "the refund made before with this number")
            .errors(404, &["not_found"])
            .errors(
                409,
                &["refund_exceeds_captured", "not_refundable", "refund_no_reused", "refund_window_closed", "refund_exceeds_line"],
            )
            .errors(422, &["invalid_refund_no", "invalid_amount", "invalid_reason", "unknown_line", "invalid_quantity"]),
            post(request_refund),
        ),
        (
            op("post", "/api/v1/admin/orders/{order_no}/deliver", "Mark a paid physical order delivered (shipped), saying how; a WeChat mini-program payment's shipment is reported to WeChat", "admin", Admin)
                .body::<super::api::DeliverBody>("how the goods were shipped (an empty body: same-city delivery)")
                .ok::<OrderStatusBody>(200, "delivered")
                .errors(404, &["not_found"])
                .errors(409, &["not_deliverable"])
                .errors(422, &["invalid_shipment"]),
            post(mark_delivered),
        ),
        (
            op(
                "post",
                "/api/v1/admin/orders/{order_no}/accept",
                "Accept a late payment (paid_after_expiry): stock is taken again and the order paid",
                "admin",
                Admin,
            )
            .ok::<OrderStatusBody>(200, "paid")
            .errors(404, &["not_found"])
            .errors(409, &["out_of_stock", "not_late_payment", "promotion_used_up"]),
            post(accept_late),
        ),
        (
            op(
                "post",
                "/api/v1/admin/skus/{sku}/keys",
                "Import card keys into a digital SKU (encrypted at rest; duplicates within the SKU are counted, not imported)",
                "admin",
                Admin,
            )
            .body::<KeysBody>("the keys")
            .ok::<KeysImported>(200, "how many were imported, and how many were duplicates")
            .errors(404, &["not_found"])
            .errors(409, &["keys_secret_mismatch"])
            .errors(422, &["not_digital", "keys_secret_missing", "invalid_key", "too_many_keys"]),
            post(import_keys),
        ),
        (
            RouteDoc::page(
                "post",
                "/notify/{gateway}",
                "Gateway notification (sandbox, alipay, wechatpay, stripe); answered in the gateway's own words (alipay: success/fail; wechatpay: 204 or 4xx FAIL; stripe and sandbox: 200 JSON or a 4xx error)",
                "gateways",
            )
            .answer(200, "accepted, or a duplicate", Content::Other("application/json"))
            .answer(400, "invalid_signature / malformed_body / merchant_mismatch", Content::Other("application/json"))
            .answer(404, "unknown gateway", Content::Other("application/json"))
            .errors(429, &["rate_limited"]),
            post(super::notify::notify),
        ),
    ]
}

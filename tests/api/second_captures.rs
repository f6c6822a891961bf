//! Second captures through the real gateway adapters: each fake takes the money again on a paid
//! trade under a new transaction, as a buyer paying twice on one prepay would. kassa records it
//! once, alerts, refunds it naming that transaction to the gateway, shows it to the operator and
//! the shop, and a statement day links the second line to it.

use serde_json::Value;

use crate::common::{Backend, Shop};
use crate::edges::payloads;
use crate::gateway_statements::{beijing, run_findings, wechat_bill, wechat_payment, wechat_refund_row, world};
use crate::on_both;

/// Pays an order at `gateway`, then has the gateway take the money again: (order_no, attempt_ref,
/// the first transaction, the second).
async fn paid_twice(w: &Shop, gateway: &str) -> (String, String, String, String) {
    let (order_no, attempt_ref) = w.paid(gateway).await;
    let first = w.t.order(&order_no).await["attempts"][0]["gateway_txn_id"].as_str().unwrap().to_string();
    let (second, (status, body)) = match gateway {
        "wechatpay" => w.wechat.pay_again(&attempt_ref).await,
        "alipay" => w.alipay.pay_again(&attempt_ref).await,
        _ => w.stripe.pay_again(&attempt_ref).await,
    };
    assert!(status < 300, "the second capture is acknowledged ({status}: {body})");
    assert_ne!(first, second);
    (order_no, attempt_ref, first, second)
}

/// What each fake refunded against second captures: refund number → transaction.
fn refunded_again(w: &Shop, gateway: &str) -> Vec<(String, String)> {
    let ledger = match gateway {
        "wechatpay" => &w.wechat.ledger,
        "alipay" => &w.alipay.ledger,
        _ => &w.stripe.ledger,
    };
    let l = ledger.lock().unwrap();
    l.trades.values().flat_map(|t| t.again_refunds.clone()).collect()
}

async fn through(backend: Backend, gateway: &str) {
    let w = world(backend).await;
    let (order_no, attempt_ref, first, second) = paid_twice(&w, gateway).await;
    assert_eq!(w.t.status(&order_no).await, "paid", "the order keeps its status");
    let admin = w.t.admin_get(&format!("/api/v1/admin/orders/{order_no}")).await;
    let captures = admin["second_captures"].as_array().unwrap_or_else(|| panic!("{admin}"));
    assert_eq!(captures.len(), 1, "{admin}");
    let c = &captures[0];
    let refund_no = format!("DUP-{second}");
    assert_eq!(
        (c["gateway"].as_str(), c["gateway_txn_id"].as_str(), c["attempt_ref"].as_str(), c["amount_minor"].as_i64()),
        (Some(gateway), Some(second.as_str()), Some(attempt_ref.as_str()), Some(8_888)),
        "{admin}"
    );
    assert_eq!((c["refund_no"].as_str(), c["refund_status"].as_str()), (Some(refund_no.as_str()), Some("requested")));
    assert_eq!(
        w.t.count(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM alerts WHERE kind = 'duplicate_payment' AND severity = 'critical'"
        )
        .await,
        1
    );
    // The shop hears of the refund, naming the transaction it returns.
    let requested = payloads(&w.t, &order_no, "refund.requested").await;
    assert_eq!(requested.len(), 1, "{requested:?}");
    let data: &Value = &requested[0];
    assert_eq!(
        (data["refund_no"].as_str(), data["kind"].as_str(), data["gateway_txn_id"].as_str()),
        (Some(refund_no.as_str()), Some("duplicate_payment"), Some(second.as_str())),
        "{data}"
    );
    // Sent again by the gateway (a retry): nothing new.
    let again = match gateway {
        "wechatpay" => w.wechat.pay_again(&attempt_ref).await.0,
        "alipay" => w.alipay.pay_again(&attempt_ref).await.0,
        _ => w.stripe.pay_again(&attempt_ref).await.0,
    };
    // The refunder returns both: each names its own transaction to the gateway, never the first.
    w.t.app.refunder.step().await.unwrap();
    let mut refunded = refunded_again(&w, gateway);
    refunded.sort();
    let mut expected = vec![(refund_no.clone(), second.clone()), (format!("DUP-{again}"), again.clone())];
    expected.sort();
    assert_eq!(refunded, expected);
    let order = w.t.order(&order_no).await;
    assert_eq!((order["status"].as_str(), order["refunded_minor"].as_i64()), (Some("paid"), Some(0)), "{order}");
    assert_eq!(order["attempts"][0]["gateway_txn_id"].as_str(), Some(first.as_str()), "{order}");
    let admin = w.t.admin_get(&format!("/api/v1/admin/orders/{order_no}")).await;
    let statuses: Vec<&str> =
        admin["second_captures"].as_array().unwrap().iter().map(|c| c["refund_status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["succeeded", "succeeded"], "{admin}");
    // The console's order page shows it apart from the payment.
    let html =
        w.t.http
            .get(w.t.url(&format!("/admin/orders/{order_no}")))
            .header("cookie", crate::pages::console(&w.t).await.1)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
    let table = html.split("id=\"second-captures\"").nth(1).unwrap_or_else(|| panic!("no second captures: {html}"));
    let table = table.split("</table>").next().unwrap();
    assert!(table.contains(&second) && table.contains(&refund_no) && table.contains("88.88 CNY"), "{table}");
    w.t.assert_clean().await;
}

async fn wechat(backend: Backend) {
    through(backend, "wechatpay").await;
}
on_both!(a_second_capture_at_wechat_pay_is_refunded_by_its_transaction_id, wechat);

async fn alipay(backend: Backend) {
    through(backend, "alipay").await;
}
on_both!(a_second_capture_at_alipay_is_refunded_by_its_trade_no, alipay);

async fn stripe(backend: Backend) {
    through(backend, "stripe").await;
}
on_both!(a_second_capture_at_stripe_is_refunded_by_its_payment_intent, stripe);

/// The day's WeChat bill has the order's two payments and the second one's refund: every line is
/// matched (the second to the capture kassa recorded, its refund to the DUP refund), nothing is
/// left unknown. Without the capture recorded, the second line would be a duplicate finding.
async fn statement(backend: Backend) {
    let w = world(backend).await;
    let day = w.today(beijing());
    let d = kassa::workers::statements::format_day(day);
    let (_, attempt_ref, first, second) = paid_twice(&w, "wechatpay").await;
    w.t.app.refunder.step().await.unwrap();
    let rows = vec![
        wechat_payment(&d, &attempt_ref, &first, 8_888, "CNY", 53),
        wechat_payment(&d, &attempt_ref, &second, 8_888, "CNY", 53),
        wechat_refund_row(&d, &attempt_ref, &format!("DUP-{second}"), 8_888, -53),
    ];
    w.wechat.publish_bill(&d, &wechat_bill(&rows, rows.len()), None);
    let run = w.run_day("wechatpay", day).await;
    assert_eq!(run.result, "reconciled", "{run:?}");
    assert_eq!(run_findings(&run), vec![], "{run:?}");
    let view = run.view.as_ref().unwrap();
    assert_eq!(view.gateway_totals.count, 2);
    w.t.assert_clean().await;
}
on_both!(a_statement_day_links_the_second_line_to_the_second_capture, statement);

//! What is checked after every step of a schedule: the real orders, stock and outbox against the
//! model, and `kassa check`.

use kassa::domain::ids::Sku;
use kassa::store::{catalog, check, sql};
use proptest::test_runner::TestCaseError;

use super::{Model, Op, Real, SKUS, fail};

/// After `after`: every order's status and active attempts and every SKU's stock as the model has
/// them, each order's outbox a legal sequence, and nothing for `kassa check` to find.
pub(super) async fn compare(real: &Real, model: &Model, after: &Op) -> Result<(), TestCaseError> {
    for o in &model.orders {
        let view =
            kassa::store::views::get_order(&real.db, &o.order_no, false).await.map_err(|e| fail(e.to_string()))?;
        if view.status.as_str() != o.status {
            return Err(fail(format!(
                "after {after:?}: order {} is {} but the model says {}",
                o.order_no, view.status, o.status
            )));
        }
        let active =
            view.attempts.iter().filter(|a| matches!(a.status.as_str(), "created" | "redirected" | "unknown")).count();
        let model_active = o.attempts.iter().filter(|(_, s)| *s == "created").count();
        if active != model_active {
            return Err(fail(format!(
                "after {after:?}: order {} has {active} active attempts, model {model_active}",
                o.order_no
            )));
        }
    }
    for (i, (sku, ..)) in SKUS.iter().enumerate() {
        let v = catalog::get_sku(&real.db, &Sku::parse(sku).unwrap()).await.map_err(|e| fail(e.to_string()))?;
        if (v.on_hand, v.reserved, v.sold) != model.stock[i] {
            return Err(fail(format!(
                "after {after:?}: sku {sku} is {:?}, model {:?}",
                (v.on_hand, v.reserved, v.sold),
                model.stock[i]
            )));
        }
    }
    outbox_agrees(real, model, after).await?;
    super::promotions::compare(real, model).await.map_err(|e| fail(format!("after {after:?}: {e}")))?;
    super::cases::compare(real, model).await.map_err(|e| fail(format!("after {after:?}: {e}")))?;
    let violations = check::run_with(&real.db, Some(&real.vault)).await.map_err(|e| fail(e.to_string()))?;
    if !violations.is_empty() {
        return Err(fail(format!("after {after:?}: kassa check: {violations:?}")));
    }
    Ok(())
}

/// Each order's outbox messages form a legal sequence: at most one `order.paid`, `order.delivered`
/// and `fulfilment.requested` ever, none of them (nor a refund message) for an order never paid,
/// and a `refund.*` message for every refund and for how it ended.
async fn outbox_agrees(real: &Real, model: &Model, after: &Op) -> Result<(), TestCaseError> {
    for o in &model.orders {
        let topics: Vec<String> =
            sql::query_scalar("SELECT topic FROM outbox WHERE order_no = $1 ORDER BY created_at, id")
                .bind(&o.order_no)
                .fetch_all(real.db.read_pool())
                .await
                .map_err(|e| fail(e.to_string()))?;
        let n = |topic: &str| topics.iter().filter(|t| *t == topic).count();
        let digital = SKUS[o.sku].3;
        let paid = usize::from(o.ever_paid);
        let succeeded = o.refunds.iter().filter(|r| r.2).count();
        let expected = [
            ("order.paid", paid),
            ("fulfilment.requested", if digital { 0 } else { paid }),
            ("order.delivered", if digital { paid } else { 0 }),
            ("refund.requested", o.refunds.len() + o.duplicate_refunds),
            ("refund.succeeded", succeeded),
            ("refund.failed", o.refunds.len() - succeeded),
        ];
        for (topic, count) in expected {
            if n(topic) != count {
                return Err(fail(format!(
                    "after {after:?}: order {} ({}) has {} {topic} messages, the model says {count}: {topics:?}",
                    o.order_no,
                    o.status,
                    n(topic)
                )));
            }
        }
    }
    Ok(())
}

//! The checks of promotions (part of `kassa check`): every count a promotion keeps equals the
//! uses it counts, and never exceeds its limit; each use follows its order; and each order's
//! lines less its discount are its total.

use crate::error::Result;
use crate::store::{Tx, col, sql};

/// Order statuses a use in each state goes with.
const USE_FOLLOWS_ORDER: &str = "(u.status = 'reserved' AND o.status = 'pending_payment') \
     OR (u.status = 'consumed' AND (o.status = 'paid' OR o.status = 'delivered' OR o.status = 'refunding' OR o.status = 'refunded')) \
     OR (u.status = 'released' AND (o.status = 'expired' OR o.status = 'cancelled' OR o.status = 'paid_after_expiry' \
     OR o.status = 'refunding' OR o.status = 'refunded'))";

/// The violations found (`since`, `changed`: as [`super::check`] scopes the orders; the counts are
/// shared and bounded by the promotions, so each run reads them all), as (invariant, detail).
pub(super) async fn check(tx: &mut Tx<'_>, since: Option<i64>, changed: &str) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    // P1: a promotion's count is its uses held or kept, within its limit.
    let rows = sql::query(
        "SELECT p.id, p.uses, p.max_uses, CAST((SELECT COUNT(*) FROM promotion_uses u WHERE u.promotion_id = p.id \
         AND u.status <> 'released') AS BIGINT) AS counted FROM promotions p ORDER BY p.id",
    )
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (id, uses, max, counted): (String, i64, Option<i64>, i64) =
            (col(r, "id")?, col(r, "uses")?, col(r, "max_uses")?, col(r, "counted")?);
        if uses != counted {
            out.push(("P1", format!("promotion {id} counts {uses} uses, but {counted} orders hold or kept one")));
        }
        if max.is_some_and(|max| counted > max) {
            out.push(("P1", format!("promotion {id} has {counted} uses, over its limit of {}", max.unwrap_or(0))));
        }
    }
    // P2: a single-use code is used at most once, and its count is its use.
    let rows = sql::query(
        "SELECT c.code, c.uses, CAST((SELECT COUNT(*) FROM promotion_uses u WHERE u.code = c.code AND u.code_counted = 1 \
         AND u.status <> 'released') AS BIGINT) AS counted FROM promotion_codes c WHERE c.single_use = 1 \
         AND (c.uses <> 0 OR EXISTS (SELECT 1 FROM promotion_uses u WHERE u.code = c.code)) ORDER BY c.code",
    )
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (code, uses, counted): (String, i64, i64) = (col(r, "code")?, col(r, "uses")?, col(r, "counted")?);
        if uses != counted || counted > 1 {
            out.push((
                "P2",
                format!("single-use code {code} counts {uses} uses, and {counted} orders hold or kept it"),
            ));
        }
    }
    // P3: a buyer's count is that buyer's uses, within the promotion's per-buyer limit.
    let rows = sql::query(
        "SELECT b.promotion_id, b.buyer, b.uses, p.per_buyer, CAST((SELECT COUNT(*) FROM promotion_uses u \
         WHERE u.promotion_id = b.promotion_id AND u.buyer = b.buyer AND u.buyer_counted = 1 AND u.status <> 'released') AS BIGINT) AS counted \
         FROM promotion_buyers b JOIN promotions p ON p.id = b.promotion_id ORDER BY b.promotion_id, b.buyer",
    )
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let (id, uses, per_buyer, counted): (String, i64, Option<i64>, i64) =
            (col(r, "promotion_id")?, col(r, "uses")?, col(r, "per_buyer")?, col(r, "counted")?);
        if uses != counted || per_buyer.is_some_and(|max| counted > max) {
            out.push((
                "P3",
                format!("promotion {id}: a buyer counts {uses} uses, holds or kept {counted}, limit {per_buyer:?}"),
            ));
        }
    }
    // P4: each use follows its order, and names the order's code (of its own promotion) and discount.
    let rows = sql::query(&format!(
        "SELECT o.order_no, o.status AS order_status, u.status AS use_status, o.promotion_code, u.code, o.discount_minor, \
         u.discount_minor AS use_discount FROM orders o LEFT JOIN promotion_uses u ON u.order_no = o.order_no \
         LEFT JOIN promotion_codes c ON c.code = u.code \
         WHERE (o.promotion_code IS NOT NULL OR u.order_no IS NOT NULL) AND {} \
         AND (u.order_no IS NULL OR o.promotion_code IS NULL OR o.promotion_code <> u.code \
         OR c.promotion_id IS NULL OR c.promotion_id <> u.promotion_id \
         OR o.discount_minor <> u.discount_minor OR NOT ({USE_FOLLOWS_ORDER})) ORDER BY o.order_no",
        changed.replace("{col}", "o.order_no")
    ))
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let order_no: String = col(r, "order_no")?;
        let (order_status, use_status): (String, Option<String>) = (col(r, "order_status")?, col(r, "use_status")?);
        out.push((
            "P4",
            format!(
                "order {order_no} ({order_status}) and its promotion use ({}) disagree",
                use_status.as_deref().unwrap_or("none")
            ),
        ));
    }
    // P5: an order's lines less its discount are its total; each line's share within the line.
    let rows = sql::query(&format!(
        "SELECT o.order_no FROM orders o WHERE {} AND (o.total_minor + o.discount_minor <> \
         (SELECT COALESCE(SUM(l.line_total_minor), 0) FROM order_lines l WHERE l.order_no = o.order_no) \
         OR o.discount_minor <> (SELECT COALESCE(SUM(l.discount_minor), 0) FROM order_lines l WHERE l.order_no = o.order_no) \
         OR EXISTS (SELECT 1 FROM order_lines l WHERE l.order_no = o.order_no AND (l.discount_minor < 0 OR l.discount_minor > l.line_total_minor))) \
         ORDER BY o.order_no",
        changed.replace("{col}", "o.order_no")
    ))
    .bind(since)
    .fetch_all(&mut **tx)
    .await?;
    for r in &rows {
        let order_no: String = col(r, "order_no")?;
        out.push(("P5", format!("order {order_no}: its lines less its discount are not its total")));
    }
    Ok(out)
}

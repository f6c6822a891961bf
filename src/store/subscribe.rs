//! WeChat mini-program subscribe messages (`domain::subscribe`): queued in the transaction that
//! pays or delivers the order (only for a JSAPI payment under the mini program the kind is
//! configured for, and once per order and kind), claimed by the subscribe worker under a lease,
//! finished with WeChat's answer (the worker alerts one given up).

use serde::Serialize;

use crate::args;
use crate::clock::{Millis, rfc3339};
use crate::domain::OrderStatus;
use crate::domain::ids::OrderNo;
use crate::domain::shipping;
use crate::domain::subscribe::SubscribeKind;
use crate::error::Result;
use crate::store::batch::Batch;
use crate::store::{Db, col, new_id, sql};

/// The setting naming the mini program whose buyers get the `paid` message (absent: off); the
/// same with `delivered`.
fn setting(kind: SubscribeKind) -> &'static str {
    match kind {
        SubscribeKind::Paid => "wechatpay.subscribe_paid_appid",
        SubscribeKind::Delivered => "wechatpay.subscribe_delivered_appid",
    }
}

/// Turns each kind of message on for payments under `appid`, or off; set at start from the
/// configuration, so the paying and delivering transactions know without being told.
pub async fn set_subscribing(db: &Db, appid: Option<&str>, kinds: &[SubscribeKind]) -> Result<()> {
    for kind in [SubscribeKind::Paid, SubscribeKind::Delivered] {
        super::settings::set(db, setting(kind), appid.filter(|_| kinds.contains(&kind))).await?;
    }
    Ok(())
}

/// Queues the message an order's change `from -> to` sends its mini-program buyer, when it has
/// one ([`SubscribeKind::of_change`]) and the order was paid by a JSAPI payment with its payer
/// known under the mini program that kind is on for; nothing otherwise, and nothing twice.
pub(super) fn add_message(batch: &mut Batch, order_no: &str, from: OrderStatus, to: OrderStatus, now: Millis) {
    let Some(kind) = SubscribeKind::of_change(from, to) else { return };
    batch.add(
        "INSERT INTO subscribe_messages (id, order_no, attempt_ref, kind, status, tries, next_at, created_at) \
         SELECT $1, o.order_no, a.attempt_ref, $2, 'pending', 0, $3, $3 FROM orders o \
         JOIN payment_attempts a ON a.attempt_ref = o.captured_attempt_ref \
         WHERE o.order_no = $4 AND a.gateway = $5 AND a.channel = $6 AND a.payer_openid IS NOT NULL \
         AND a.payer_appid = (SELECT value FROM settings WHERE name = $7) \
         ON CONFLICT (order_no, kind) DO NOTHING",
        args![new_id(), kind.as_str(), now, order_no, shipping::GATEWAY, shipping::CHANNEL, setting(kind)],
    );
}

/// A message due to be sent, with whom it goes to.
#[derive(Debug, Clone)]
pub struct Due {
    pub id: String,
    pub order_no: OrderNo,
    pub kind: SubscribeKind,
    pub openid: String,
    pub tries: i64,
    /// When the order was paid (for `paid`) or the message queued (for `delivered`).
    pub at: Millis,
}

/// Claims up to `limit` due messages for `lease_ms`, oldest first.
pub async fn claim(db: &Db, now: Millis, lease_ms: i64, limit: i64) -> Result<Vec<Due>> {
    let due = db.kind().claimed(
        "id",
        "SELECT id FROM subscribe_messages \
         WHERE status = 'pending' AND next_at <= $2 AND lease_until <= $2 ORDER BY created_at, id LIMIT $3",
    );
    let rows = crate::write_tx!(db, |tx| {
        sql::query(&format!(
            "UPDATE subscribe_messages SET lease_until = $1 WHERE {due} \
             RETURNING id, order_no, attempt_ref, kind, tries, created_at"
        ))
        .bind(now.saturating_add(lease_ms))
        .bind(now)
        .bind(limit)
        .fetch_all(&mut **tx)
        .await
    })?;
    let mut due = Vec::with_capacity(rows.len());
    for r in &rows {
        let attempt_ref: String = col(r, "attempt_ref")?;
        let openid: Option<String> =
            sql::query_scalar("SELECT payer_openid FROM payment_attempts WHERE attempt_ref = $1")
                .bind(&attempt_ref)
                .fetch_one(db.read_pool())
                .await?;
        let kind: String = col(r, "kind")?;
        due.push(Due {
            id: col(r, "id")?,
            order_no: OrderNo::stored(col::<String>(r, "order_no")?),
            kind: SubscribeKind::parse(&kind).unwrap_or(SubscribeKind::Paid),
            openid: openid.unwrap_or_default(),
            tries: col(r, "tries")?,
            at: col(r, "created_at")?,
        });
    }
    due.sort_by(|a, b| (a.at, &a.id).cmp(&(b.at, &b.id)));
    Ok(due)
}

/// How a try of a message ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    Sent,
    /// 43101: no consent; kept as refused, never tried again.
    Refused {
        errcode: i64,
        errmsg: String,
    },
    /// Tried again at `next_at`.
    Retry {
        next_at: Millis,
        errcode: Option<i64>,
        error: String,
    },
    /// Given up (the worker raises an alert).
    GiveUp {
        errcode: Option<i64>,
        error: String,
    },
}

/// Records try number `tries` of message `m`.
pub async fn finish(db: &Db, m: &Due, tries: i64, finish: &Finish, now: Millis) -> Result<()> {
    let (status, errcode, error, next_at) = match finish {
        Finish::Sent => ("sent", None, None, now),
        Finish::Refused { errcode, errmsg } => ("refused", Some(*errcode), Some(errmsg.as_str()), now),
        Finish::Retry { next_at, errcode, error } => ("pending", *errcode, Some(error.as_str()), *next_at),
        Finish::GiveUp { errcode, error } => ("failed", *errcode, Some(error.as_str()), now),
    };
    crate::write_tx!(db, |tx| {
        sql::query(
            "UPDATE subscribe_messages SET status = $1, tries = $2, next_at = $3, lease_until = 0, errcode = $4, \
             last_error = $5, sent_at = CASE WHEN $1 = 'sent' THEN $6 ELSE sent_at END WHERE id = $7",
        )
        .bind(status)
        .bind(tries)
        .bind(next_at)
        .bind(errcode)
        .bind(error)
        .bind(now)
        .bind(&m.id)
        .execute(&mut **tx)
        .await
        .map(drop)
    })?;
    let result = match finish {
        Finish::Retry { .. } => "retry",
        _ => status,
    };
    metrics::counter!("kassa_subscribe_messages_total", "result" => result).increment(1);
    Ok(())
}

/// A subscribe message as the admin order shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SubscribeView {
    /// `paid` or `delivered`.
    pub kind: String,
    /// `pending`, `sent`, `refused` (the buyer gave no consent) or `failed`.
    pub status: String,
    pub tries: i64,
    pub errcode: Option<i64>,
    pub last_error: Option<String>,
    pub created_at: String,
    pub sent_at: Option<String>,
}

/// The subscribe messages of an order, oldest first.
pub async fn of_order(db: &Db, order_no: &OrderNo) -> Result<Vec<SubscribeView>> {
    sql::query(
        "SELECT kind, status, tries, errcode, last_error, created_at, sent_at FROM subscribe_messages \
         WHERE order_no = $1 ORDER BY created_at, id",
    )
    .bind(order_no)
    .fetch_all(db.read_pool())
    .await?
    .iter()
    .map(|r| {
        Ok(SubscribeView {
            kind: col(r, "kind")?,
            status: col(r, "status")?,
            tries: col(r, "tries")?,
            errcode: col(r, "errcode")?,
            last_error: col(r, "last_error")?,
            created_at: rfc3339(col(r, "created_at")?),
            sent_at: col::<Option<Millis>>(r, "sent_at")?.map(rfc3339),
        })
    })
    .collect()
}

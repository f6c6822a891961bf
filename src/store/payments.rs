//! Payment truth applied to orders: verified gateway events (notifications, or a close/query that
//! answered "paid") and expiry. Each runs under the order's row lock through the transition table.

use crate::args;
use crate::clock::Millis;
use crate::domain::decide::{FailureDecision, LatePolicy, decide_failure};
use crate::domain::{AttemptStatus, Currency, Money, OrderStatus};
use crate::error::{Error, Result};
use crate::store::batch::{self, Batch};
use crate::store::events::{self, Cause, Severity};
use crate::store::outbox::OrderContext;
pub use crate::store::paid::{ORDER_PARTS_SQL, order_parts_of_attempt_sql};
use crate::store::paid::{OrderParts, PAID, Success, add_notification_outcome, apply_success, order_parts};
use crate::store::refunds;
use crate::store::sql;
use crate::store::{Db, Tx, col, new_id};

use crate::domain::event::{Claimed, Mismatch, Outcome, VerifiedEvent, check_payment, check_refund, on_claimed};

/// The result of applying one event, which decides the gateway's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// The event changed state; `effect` names what happened.
    Changed { order_no: String, effect: &'static str },
    /// Valid, but stale or already known: nothing changed.
    Ignored { order_no: String },
    /// The same event id was applied before: acknowledged, nothing changed.
    Duplicate,
    /// Signature was fine but the content does not match our records: refused.
    Rejected { code: &'static str, reason: String },
}

/// Applies a verified event exactly once: its event id claimed, its attempt and order read under
/// the order's lock, the domain's decision for its outcome carried out, and the notification's
/// outcome recorded — one transaction.
pub async fn apply_event(db: &Db, ev: &VerifiedEvent, policy: LatePolicy, now: Millis) -> Result<Applied> {
    let ev = ev.clone();
    db.command(move |db| async move {
        let (db, ev) = (&db, &ev);
        let lock_order = db.for_update_of("o");
        let applied = crate::write_tx!(db, |tx| {
            let id = new_id();
            if !claim_event(tx, &id, ev, now).await? {
                return Ok(Applied::Duplicate);
            }
            let Some(target) = read_target(tx, ev, &lock_order).await? else {
                return reject(tx, &id, ev, "unknown_reference", "no such attempt reference".into(), now).await;
            };
            let cause = Cause { trigger: "", notification_id: Some(&id), at: now };
            let verdict = match &ev.outcome {
                Outcome::Succeeded { gateway_txn_id, amount } => {
                    apply_payment(tx, ev, &target, gateway_txn_id, *amount, policy, cause).await?
                }
                Outcome::RefundSucceeded { refund_no, amount } => {
                    apply_refund_outcome(tx, ev, &target.order_no, refund_no, Some(*amount), cause).await?
                }
                Outcome::RefundFailed { refund_no } => {
                    apply_refund_outcome(tx, ev, &target.order_no, refund_no, None, cause).await?
                }
                Outcome::Pending => Verdict::Effect(None),
                Outcome::Failed | Outcome::Cancelled => Verdict::Effect(apply_failure(tx, ev, &target, cause).await?),
            };
            let order_no = target.order_no;
            let effect = match verdict {
                Verdict::Effect(effect) => effect,
                Verdict::Unknown(reason) => return reject(tx, &id, ev, "unknown_reference", reason.into(), now).await,
                Verdict::Mismatch(m) => return reject_mismatch(tx, &id, ev, &order_no, m.code, m.reason, now).await,
            };
            // A payment of a pending order recorded its notification's outcome in its own batch.
            if effect != Some(PAID) {
                let mut batch = Batch::new();
                let outcome = if effect.is_some() { "applied" } else { "ignored" };
                add_notification_outcome(&mut batch, &id, outcome, &order_no);
                batch.run_checked_by_commit(tx).await?;
            }
            Ok(match effect {
                Some(effect) => Applied::Changed { order_no, effect },
                None => Applied::Ignored { order_no },
            })
        });
        let label = match &applied {
            Ok(Applied::Changed { .. }) => "applied",
            Ok(Applied::Ignored { .. }) => "ignored",
            Ok(Applied::Duplicate) => "duplicate",
            Ok(Applied::Rejected { .. }) => "rejected",
            Err(_) => "error",
        };
        metrics::counter!("kassa_notifications_total", "gateway" => ev.gateway.clone(), "result" => label).increment(1);
        applied
    })
    .await
}

/// What applying an event's outcome came to.
enum Verdict {
    /// Applied: what changed, if anything.
    Effect(Option<&'static str>),
    /// It names something of the attempt that kassa does not know.
    Unknown(&'static str),
    /// Its content does not match kassa's records.
    Mismatch(Mismatch),
}

/// Claims the event's id for notification `id`; false for a copy of an event claimed already
/// (recorded as a duplicate arrival). An id a gateway reused for another attempt is claimed
/// under a key of its own ([`on_claimed`]), alerted, and weighed on its own.
async fn claim_event(tx: &mut Tx<'_>, id: &str, ev: &VerifiedEvent, now: Millis) -> Result<bool> {
    // Claimed first: a concurrent copy waits here and then sees the claim.
    if claim(tx, id, ev, &ev.event_id, now).await? {
        return Ok(true);
    }
    let claimed_by: Option<Option<String>> =
        sql::query_scalar("SELECT attempt_ref FROM notifications WHERE gateway = $1 AND event_id = $2")
            .bind(&ev.gateway)
            .bind(&ev.event_id)
            .fetch_optional(&mut **tx)
            .await?;
    let Claimed::Reused { key } = on_claimed(&ev.event_id, &ev.attempt_ref, claimed_by.flatten().as_deref()) else {
        record_arrival(tx, ev, "ignored_duplicate", None, now).await?;
        return Ok(false);
    };
    if !claim(tx, id, ev, &key, now).await? {
        record_arrival(tx, ev, "ignored_duplicate", None, now).await?;
        return Ok(false);
    }
    let details = format!(
        "{} sent event id {} for attempt {} after it was used for another attempt; weighed on its own",
        ev.gateway, ev.event_id, ev.attempt_ref
    );
    let subject = format!("{}:{}", ev.gateway, ev.event_id);
    events::raise_alert(tx, "notification_event_id_reused", Severity::Warning, &subject, None, &details, now).await?;
    Ok(true)
}

/// An event's attempt and its order, read under the order's lock.
struct Target {
    order_no: String,
    order_status: OrderStatus,
    /// The order's total (it never changes).
    order_total: Money,
    /// What the attempt asked for.
    asked: Money,
    /// The event's attempt's status.
    attempt_status: AttemptStatus,
    /// The transaction the attempt's success was recorded with, if it was.
    recorded_txn: Option<String>,
    gateway: Option<String>,
    merchant_reference: Option<String>,
    metadata: Option<String>,
    contact_email: Option<String>,
    contact_phone: Option<String>,
    promotion_code: Option<String>,
    discount_minor: i64,
    /// The order's other active attempts.
    others: Vec<(String, AttemptStatus)>,
    parts: OrderParts,
}

/// The attempt with its order's status and total, locking the order on PostgreSQL (SQLite's write
/// transaction already excludes every other writer). Then, under the lock, what the event may
/// change: read after it, since PostgreSQL re-reads only the locked row of a statement that waited
/// for its lock, not the rows it joined; the attempts may have moved meanwhile. The two go in one
/// round trip on PostgreSQL. (Not the claim as well: a duplicate would then run both reads for
/// nothing, and PostgreSQL's CPU per statement costs more than the round trip saved.)
async fn read_target(tx: &mut Tx<'_>, ev: &VerifiedEvent, lock_order: &str) -> Result<Option<Target>> {
    let attempt_sql = format!(
        "SELECT t.order_no, t.amount_minor, t.currency, t.gateway, t.gateway_txn_id AS recorded_txn, \
         o.status AS order_status, o.total_minor AS order_total_minor, o.currency AS order_currency, \
         o.merchant_reference, o.metadata, o.contact_email, o.contact_phone, o.promotion_code, o.discount_minor \
         FROM payment_attempts t JOIN orders o ON o.order_no = t.order_no WHERE t.attempt_ref = $1{lock_order}"
    );
    let reads =
        vec![(attempt_sql.as_str(), args![&ev.attempt_ref]), (order_parts_of_attempt_sql(), args![&ev.attempt_ref])];
    let mut read = batch::together(tx, reads).await?.into_iter();
    let Some(attempt) = read.next().and_then(|o| o.rows.into_iter().next()) else { return Ok(None) };
    let parts = order_parts(&read.next().map(|o| o.rows).unwrap_or_default())?;
    let mut attempt_status = None;
    let mut others = Vec::new();
    for (attempt_ref, status) in &parts.attempts {
        let status = parse_attempt_status(status)?;
        if *attempt_ref == ev.attempt_ref {
            attempt_status = Some(status);
        } else if status.is_active() {
            others.push((attempt_ref.clone(), status));
        }
    }
    let money = |minor: &str, currency: &str| -> Result<Money> {
        Ok(Money::new(col(&attempt, minor)?, Currency::parse(&col::<String>(&attempt, currency)?)?)?)
    };
    Ok(Some(Target {
        order_no: col(&attempt, "order_no")?,
        order_status: parse_order_status(&col::<String>(&attempt, "order_status")?)?,
        order_total: money("order_total_minor", "order_currency")?,
        asked: money("amount_minor", "currency")?,
        attempt_status: attempt_status.ok_or_else(|| Error::internal("the attempt vanished under the lock"))?,
        recorded_txn: col(&attempt, "recorded_txn")?,
        gateway: col(&attempt, "gateway")?,
        merchant_reference: col(&attempt, "merchant_reference")?,
        metadata: col(&attempt, "metadata")?,
        contact_email: col(&attempt, "contact_email")?,
        contact_phone: col(&attempt, "contact_phone")?,
        promotion_code: col(&attempt, "promotion_code")?,
        discount_minor: col(&attempt, "discount_minor")?,
        others,
        parts,
    }))
}

/// A payment of the event's attempt: checked against what it asked, then as the domain decides
/// ([`decide_success`]).
async fn apply_payment(
    tx: &mut Tx<'_>,
    ev: &VerifiedEvent,
    t: &Target,
    gateway_txn_id: &str,
    amount: Money,
    policy: LatePolicy,
    cause: Cause<'_>,
) -> Result<Verdict> {
    if let Err(mismatch) = check_payment(amount, t.asked) {
        return Ok(Verdict::Mismatch(mismatch));
    }
    let success = Success {
        order_no: &t.order_no,
        attempt_ref: &ev.attempt_ref,
        gateway_txn_id: Some(gateway_txn_id),
        recorded_txn: t.recorded_txn.as_deref(),
        amount,
        order_total: t.order_total,
        others: &t.others,
        parts: &t.parts,
        context: OrderContext {
            merchant_reference: t.merchant_reference.as_deref(),
            metadata: t.metadata.as_deref(),
            contact_email: t.contact_email.as_deref(),
            contact_phone: t.contact_phone.as_deref(),
            attempt_ref: Some(&ev.attempt_ref),
            gateway: t.gateway.as_deref(),
            gateway_txn_id: Some(gateway_txn_id),
            promotion_code: t.promotion_code.as_deref(),
            discount_minor: t.discount_minor,
        },
    };
    Ok(Verdict::Effect(apply_success(tx, &success, t.order_status, t.attempt_status, policy, cause).await?))
}

/// A refund of the event's attempt done (`reported`: `Some` with the amount the gateway names, if
/// it does) or failed (`None`).
async fn apply_refund_outcome(
    tx: &mut Tx<'_>,
    ev: &VerifiedEvent,
    order_no: &str,
    refund_no: &str,
    reported: Option<Option<Money>>,
    cause: Cause<'_>,
) -> Result<Verdict> {
    let refund = sql::query("SELECT amount_minor, currency FROM refunds WHERE refund_no = $1 AND attempt_ref = $2")
        .bind(refund_no)
        .bind(&ev.attempt_ref)
        .fetch_optional(&mut **tx)
        .await?;
    let Some(refund) = refund else { return Ok(Verdict::Unknown("no such refund for this attempt")) };
    let asked = Money::new(col(&refund, "amount_minor")?, Currency::parse(&col::<String>(&refund, "currency")?)?)?;
    if let Some(reported) = reported
        && let Err(mismatch) = check_refund(refund_no, reported, asked)
    {
        return Ok(Verdict::Mismatch(mismatch));
    }
    let (succeeded, why) = (reported.is_some(), "the gateway reported the refund failed");
    let settled =
        refunds::settle_locked(tx, order_no, refund_no, succeeded, why, cause.notification_id, cause.at).await?;
    Ok(Verdict::Effect(settled.then_some("refund_settled")))
}

/// The event's attempt failed or was cancelled at the gateway: closed, if the domain says so.
async fn apply_failure(
    tx: &mut Tx<'_>,
    ev: &VerifiedEvent,
    t: &Target,
    cause: Cause<'_>,
) -> Result<Option<&'static str>> {
    let to = if ev.outcome == Outcome::Failed { AttemptStatus::Failed } else { AttemptStatus::Cancelled };
    match decide_failure(t.attempt_status, to) {
        FailureDecision::CloseAttempt(to) => {
            let cause = Cause { trigger: "gateway_failure", ..cause };
            events::set_attempt_status(tx, &t.order_no, &ev.attempt_ref, t.attempt_status, to, cause).await?;
            Ok(Some("attempt_closed"))
        }
        FailureDecision::Ignore => Ok(None),
    }
}

/// Claims `key` (the event id, or the id with its attempt when the id was reused) for the
/// notification `id`; false when it is claimed already.
async fn claim(tx: &mut Tx<'_>, id: &str, ev: &VerifiedEvent, key: &str, now: Millis) -> Result<bool> {
    let claimed = sql::query(
        "INSERT INTO notifications (id, gateway, event_id, claimed_event_id, status, attempt_ref, raw_body, received_at) \
         VALUES ($1, $2, $3, $4, 'received', $5, $6, $7) ON CONFLICT (gateway, event_id) DO NOTHING",
    )
    .bind(id)
    .bind(&ev.gateway)
    .bind(key)
    .bind(&ev.event_id)
    .bind(&ev.attempt_ref)
    .bind(&ev.raw_body)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(claimed.rows_affected() == 1)
}

async fn reject(
    tx: &mut Tx<'_>,
    id: &str,
    ev: &VerifiedEvent,
    code: &'static str,
    reason: String,
    now: Millis,
) -> Result<Applied> {
    // Give the event id back: a rejected event is refused again when retried, never "duplicate".
    sql::query("UPDATE notifications SET event_id = NULL, status = 'rejected', reason = $1 WHERE id = $2")
        .bind(format!("{code}: {reason}"))
        .bind(id)
        .execute(&mut **tx)
        .await?;
    events::raise_alert(
        tx,
        "notification_rejected",
        Severity::Warning,
        &format!("{}:{code}", ev.gateway),
        None,
        &reason,
        now,
    )
    .await?;
    Ok(Applied::Rejected { code, reason })
}

async fn reject_mismatch(
    tx: &mut Tx<'_>,
    id: &str,
    ev: &VerifiedEvent,
    order_no: &str,
    code: &'static str,
    reason: String,
    now: Millis,
) -> Result<Applied> {
    sql::query("UPDATE notifications SET order_no = $1 WHERE id = $2")
        .bind(order_no)
        .bind(id)
        .execute(&mut **tx)
        .await?;
    events::raise_alert(tx, code, Severity::Critical, &ev.attempt_ref, Some(order_no), &reason, now).await?;
    reject(tx, id, ev, code, reason, now).await
}

/// Stores an arrival that does not hold the event id (a duplicate).
async fn record_arrival(
    tx: &mut Tx<'_>,
    ev: &VerifiedEvent,
    status: &str,
    reason: Option<&str>,
    now: Millis,
) -> Result<()> {
    sql::query(
        "INSERT INTO notifications (id, gateway, event_id, claimed_event_id, status, reason, attempt_ref, raw_body, received_at) \
         VALUES ($1, $2, NULL, $3, $4, $5, $6, $7, $8)",
    )
    .bind(new_id())
    .bind(&ev.gateway)
    .bind(&ev.event_id)
    .bind(status)
    .bind(reason)
    .bind(&ev.attempt_ref)
    .bind(&ev.raw_body)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Remembers the gateway's own id for an attempt (e.g. a Stripe Checkout Session), learnt from
/// the hand-off after the order committed. Set once: a later hand-off of the same attempt keeps it.
pub async fn set_gateway_ref(db: &Db, attempt_ref: &crate::domain::ids::AttemptRef, gateway_ref: &str) -> Result<()> {
    crate::write_tx!(db, |tx| {
        sql::query("UPDATE payment_attempts SET gateway_ref = $1 WHERE attempt_ref = $2 AND gateway_ref IS NULL")
            .bind(gateway_ref)
            .bind(attempt_ref)
            .execute(&mut **tx)
            .await?;
        Ok(())
    })
}

pub(crate) fn parse_order_status(s: &str) -> Result<OrderStatus> {
    OrderStatus::parse(s).ok_or_else(|| Error::internal(format!("unknown order status {s:?} in database")))
}

pub(crate) fn parse_attempt_status(s: &str) -> Result<AttemptStatus> {
    AttemptStatus::parse(s).ok_or_else(|| Error::internal(format!("unknown attempt status {s:?} in database")))
}

// ---- read models -------------------------------------------------------------------------------

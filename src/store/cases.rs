//! Complaints and disputes (`domain::case`): each case kept once per provider and case id, linked
//! to kassa's payment by the merchant reference or the provider's payment id; every message kept
//! as it arrived, once; the state the newest word gives, each change logged with the shop's
//! message and the operator's alerts in the same transaction.

use serde::Serialize;

use crate::args;
use crate::clock::{Millis, rfc3339};
use crate::domain::case::{self, CaseKind, CaseReport, CaseState};
use crate::error::{Error, Result};
use crate::store::batch::Batch;
use crate::store::events::{self, Severity};
use crate::store::{Conn, Db, col, new_id, sql};

/// Cases listed at most on one page.
pub const CASES_PAGE_MAX: i64 = 200;
/// Messages and state changes shown with a case, newest first.
pub const CASE_HISTORY_MAX: i64 = 200;
/// Cases whose deadlines one monitor pass looks at.
pub const DUE_BATCH_MAX: i64 = 500;

/// Where a message came from.
pub const FROM_NOTIFICATION: &str = "notification";
pub const FROM_POLL: &str = "poll";
pub const FROM_OPERATOR: &str = "operator";

/// A message of a case: `(case_id, source, message_id, kind, body, received_at)`.
const MESSAGE_INSERT: &str =
    "INSERT INTO case_messages (case_id, source, message_id, kind, body, received_at) VALUES ($1, $2, $3, $4, $5, $6)";

/// What recording a report did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    Opened {
        case_id: String,
    },
    Updated {
        case_id: String,
    },
    /// The message was kept (or known already) but changes nothing: an older word, or the same.
    Unchanged {
        case_id: String,
    },
}

impl Recorded {
    pub fn case_id(&self) -> &str {
        match self {
            Recorded::Opened { case_id } | Recorded::Updated { case_id } | Recorded::Unchanged { case_id } => case_id,
        }
    }
}

/// The payment a report names, as kassa knows it: `(order_no, attempt_ref)`.
async fn link(conn: &mut Conn, r: &CaseReport) -> Result<Option<(String, String)>> {
    let row = match (&r.attempt_ref, &r.gateway_txn_id) {
        (Some(attempt_ref), _) => {
            sql::query("SELECT order_no, attempt_ref FROM payment_attempts WHERE attempt_ref = $1 AND gateway = $2")
                .bind(attempt_ref)
                .bind(r.provider)
                .fetch_optional(&mut *conn)
                .await?
        }
        (None, Some(txn)) => {
            sql::query(
                "SELECT order_no, attempt_ref FROM payment_attempts WHERE gateway_txn_id = $1 AND gateway = $2 \
                 ORDER BY attempt_ref LIMIT 1",
            )
            .bind(txn)
            .bind(r.provider)
            .fetch_optional(&mut *conn)
            .await?
        }
        (None, None) => None,
    };
    row.map(|row| Ok((col(&row, "order_no")?, col(&row, "attempt_ref")?))).transpose()
}

/// The id a message is kept under: the provider's, or a digest of a copy that has none (a poll's).
fn message_id(r: &CaseReport) -> String {
    r.message_id.clone().unwrap_or_else(|| {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, r.body.as_bytes());
        format!("sha256:{}", hex::encode(digest.as_ref()))
    })
}

/// Records a provider's report of a case: opens it, moves it on (when the report is newer than
/// what the case keeps), or only keeps the message.
pub async fn record(db: &Db, r: &CaseReport, source: &'static str, now: Millis) -> Result<Recorded> {
    let lock = db.for_update();
    let decided = case::decide(r);
    crate::write_tx!(db, |tx| {
        let linked = link(tx, r).await?;
        let (order_no, attempt_ref) = (linked.as_ref().map(|l| l.0.as_str()), linked.as_ref().map(|l| l.1.as_str()));
        let fresh = new_id();
        let closed_at = (decided.state == CaseState::Closed).then_some(now);
        let inserted: Option<String> = sql::query_scalar(
            "INSERT INTO cases (id, provider, provider_case_id, kind, order_no, attempt_ref, gateway_txn_id, state, outcome, \
             provider_status, reason, amount_minor, currency, due_at, due_kind, as_of, opened_at, created_at, updated_at, closed_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $18, $19) \
             ON CONFLICT (provider, provider_case_id) DO NOTHING RETURNING id",
        )
        .bind_all(args![
            &fresh,
            r.provider,
            &r.case_id,
            r.kind.as_str(),
            order_no,
            attempt_ref,
            r.gateway_txn_id.as_deref(),
            decided.state.as_str(),
            decided.outcome,
            &r.status,
            r.reason.as_deref(),
            r.amount.map(|m| m.amount_minor()),
            r.amount.map(|m| m.currency().code().to_string()),
            decided.due.map(|d| d.1),
            decided.due.map(|d| d.0.as_str()),
            r.as_of,
            r.opened_at,
            now,
            closed_at
        ])
        .fetch_optional(&mut **tx)
        .await?;
        if let Some(case_id) = inserted {
            let mut batch = Batch::new();
            add_message(&mut batch, &case_id, source, r, now);
            add_event(&mut batch, &case_id, None, decided.state, &r.status, source, now);
            if let (Some(order_no), Some(attempt_ref)) = (order_no, attempt_ref) {
                let topic = case::topic(r.kind, true, false);
                add_shop_message(tx, &mut batch, &case_id, (order_no, attempt_ref), &topic, r, &decided, now).await?;
            }
            if let Some(order_no) = order_no {
                // Keys the buyer has not been shown yet are held back until the case is settled.
                batch.add(
                    "UPDATE cases SET keys_held = 1 WHERE id = $1 \
                     AND EXISTS (SELECT 1 FROM card_keys k WHERE k.order_no = $2 AND k.status = 'delivered') \
                     AND NOT EXISTS (SELECT 1 FROM key_reveals r WHERE r.order_no = $2)",
                    args![&case_id, order_no],
                );
            }
            batch.run(tx).await?;
            let what = format!(
                "{} {} {} opened ({}){}",
                r.provider,
                r.kind.as_str(),
                r.case_id,
                r.status,
                r.amount.map(|m| format!(", {}", m.display_major())).unwrap_or_default()
            );
            let severity = if r.kind == CaseKind::Complaint { Severity::Warning } else { Severity::Critical };
            events::raise_alert(tx, "case_opened", severity, &case_id, order_no, &what, now).await?;
            if linked.is_none() {
                let what = format!("{what}: it names no payment kassa knows");
                events::raise_alert(tx, "case_unlinked", Severity::Critical, &case_id, None, &what, now).await?;
            }
            return Ok(Recorded::Opened { case_id });
        }
        let row = sql::query(&format!(
            "SELECT id, state, as_of, provider_status, order_no, attempt_ref FROM cases WHERE provider = $1 AND provider_case_id = $2{lock}"
        ))
        .bind(r.provider)
        .bind(&r.case_id)
        .fetch_one(&mut **tx)
        .await?;
        let case_id: String = col(&row, "id")?;
        let kept =
            CaseState::parse(&col::<String>(&row, "state")?).ok_or_else(|| Error::internal("unknown case state"))?;
        let kept_status: String = col(&row, "provider_status")?;
        let kept_order: Option<String> = col(&row, "order_no")?;
        let kept_attempt: Option<String> = col(&row, "attempt_ref")?;
        let new_message = sql::query(&format!("{MESSAGE_INSERT} ON CONFLICT (case_id, message_id) DO NOTHING"))
            .bind_all(args![&case_id, source, message_id(r), &r.message_kind, &r.body, now])
            .execute(&mut **tx)
            .await?;
        if new_message.rows_affected() == 0 || !case::is_newer(col(&row, "as_of")?, kept, r, decided.state) {
            return Ok(Recorded::Unchanged { case_id });
        }
        // Linked now if it was not (a poll names what a notification did not).
        let order_no = kept_order.as_deref().or(order_no);
        let attempt = if kept_order.is_none() { attempt_ref } else { None };
        sql::query(
            "UPDATE cases SET state = $1, outcome = $2, provider_status = $3, reason = COALESCE($4, reason), \
             amount_minor = COALESCE($5, amount_minor), currency = COALESCE($6, currency), due_at = $7, due_kind = $8, \
             as_of = CASE WHEN as_of > $9 THEN as_of ELSE $9 END, updated_at = $10, closed_at = $11, order_no = COALESCE(order_no, $12), \
             attempt_ref = COALESCE(attempt_ref, $13) WHERE id = $14",
        )
        .bind_all(args![
            decided.state.as_str(),
            decided.outcome,
            &r.status,
            r.reason.as_deref(),
            r.amount.map(|m| m.amount_minor()),
            r.amount.map(|m| m.currency().code().to_string()),
            decided.due.map(|d| d.1),
            decided.due.map(|d| d.0.as_str()),
            r.as_of,
            now,
            closed_at,
            attempt.and(order_no),
            attempt,
            &case_id
        ])
        .execute(&mut **tx)
        .await?;
        if kept == decided.state && kept_status == r.status {
            return Ok(Recorded::Unchanged { case_id });
        }
        let mut batch = Batch::new();
        add_event(&mut batch, &case_id, Some(kept), decided.state, &r.status, source, now);
        if let (Some(order_no), Some(attempt_ref)) = (order_no, kept_attempt.as_deref().or(attempt_ref)) {
            let closed_now = decided.state == CaseState::Closed && kept != CaseState::Closed;
            let topic = case::topic(r.kind, false, closed_now);
            add_shop_message(tx, &mut batch, &case_id, (order_no, attempt_ref), &topic, r, &decided, now).await?;
        }
        batch.run(tx).await?;
        Ok(Recorded::Updated { case_id })
    })
}

fn add_message(batch: &mut Batch, case_id: &str, source: &str, r: &CaseReport, now: Millis) {
    batch.expect(
        MESSAGE_INSERT,
        args![case_id, source, message_id(r), &r.message_kind, &r.body, now],
        1,
        "case message insert",
    );
}

fn add_event(
    batch: &mut Batch,
    case_id: &str,
    from: Option<CaseState>,
    to: CaseState,
    status: &str,
    cause: &str,
    now: Millis,
) {
    batch.expect(
        "INSERT INTO case_events (case_id, from_state, to_state, provider_status, cause, at) VALUES ($1, $2, $3, $4, $5, $6)",
        args![case_id, from.map(CaseState::as_str), to.as_str(), status, cause, now],
        1,
        "case event insert",
    );
}

#[allow(clippy::too_many_arguments)]
async fn add_shop_message(
    conn: &mut Conn,
    batch: &mut Batch,
    case_id: &str,
    (order_no, attempt_ref): (&str, &str),
    topic: &str,
    r: &CaseReport,
    decided: &case::Decided,
    now: Millis,
) -> Result<()> {
    let case = crate::store::outbox::CaseFacts {
        case_id,
        provider: r.provider,
        provider_case_id: &r.case_id,
        kind: r.kind.as_str(),
        order_no,
        state: decided.state.as_str(),
        outcome: decided.outcome,
        provider_status: &r.status,
        reason: r.reason.as_deref(),
        amount_minor: r.amount.map(|m| m.amount_minor()),
        currency: r.amount.as_ref().map(|m| m.currency().code()),
        due_at: decided.due.map(|d| rfc3339(d.1)),
        at: rfc3339(now),
    };
    crate::store::outbox::add_case_event(conn, batch, case, attempt_ref, topic, now).await
}

/// Keeps a provider's message about a case kassa knows, without reading a state from it (a
/// WeChat complaint notification, which only names its complaint): the case's id, or `None` when
/// kassa does not know the case yet. A message kept already is kept once.
pub async fn keep_message(db: &Db, r: &CaseReport, source: &'static str, now: Millis) -> Result<Option<String>> {
    crate::write_tx!(db, |tx| {
        let case_id: Option<String> =
            sql::query_scalar("SELECT id FROM cases WHERE provider = $1 AND provider_case_id = $2")
                .bind(r.provider)
                .bind(&r.case_id)
                .fetch_optional(&mut **tx)
                .await?;
        if let Some(case_id) = &case_id {
            sql::query(&format!("{MESSAGE_INSERT} ON CONFLICT (case_id, message_id) DO NOTHING"))
                .bind_all(args![case_id, source, message_id(r), &r.message_kind, &r.body, now])
                .execute(&mut **tx)
                .await?;
        }
        Ok(case_id)
    })
}

/// Keeps what the operator did about a case (evidence submitted, the loss accepted, a reply) as
/// one of its messages.
pub async fn record_operator(db: &Db, case_id: &str, kind: &str, body: &str, now: Millis) -> Result<()> {
    let message_id = format!("operator:{}", new_id());
    crate::write_tx!(db, |tx| {
        sql::query(MESSAGE_INSERT)
            .bind_all(args![case_id, FROM_OPERATOR, &message_id, kind, body, now])
            .execute(&mut **tx)
            .await?;
        Ok(())
    })
}

/// A case as the desk lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct CaseView {
    pub id: String,
    /// `stripe`, `wechatpay` or `alipay`.
    pub provider: String,
    pub provider_case_id: String,
    /// `dispute`, `fraud_warning` or `complaint`.
    pub kind: String,
    pub order_no: Option<String>,
    pub attempt_ref: Option<String>,
    pub gateway_txn_id: Option<String>,
    /// `needs_response`, `under_review` or `closed`.
    pub state: String,
    /// How a closed case ended: `won`, `lost`, `prevented`, `warning_closed`, `not_actionable`,
    /// `resolved`, `withdrawn`, `platform_decided`, `system_closed`.
    pub outcome: Option<String>,
    pub provider_status: String,
    pub reason: Option<String>,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// The deadline that matters next, and which one: `evidence`, `first_reply`, `resolution`.
    pub due_at: Option<String>,
    pub due_kind: Option<String>,
    pub opened_at: String,
    pub updated_at: String,
    pub closed_at: Option<String>,
    /// Whether the order's card keys are held back from the buyer while the case is open (they
    /// had not been shown when it opened); the operator may release them.
    pub keys_held: bool,
}

const CASE_COLUMNS: &str = "id, provider, provider_case_id, kind, order_no, attempt_ref, gateway_txn_id, state, outcome, \
     provider_status, reason, amount_minor, currency, due_at, due_kind, opened_at, updated_at, closed_at, keys_held";

fn case_view(r: &sql::Row) -> Result<CaseView> {
    Ok(CaseView {
        id: col(r, "id")?,
        provider: col(r, "provider")?,
        provider_case_id: col(r, "provider_case_id")?,
        kind: col(r, "kind")?,
        order_no: col(r, "order_no")?,
        attempt_ref: col(r, "attempt_ref")?,
        gateway_txn_id: col(r, "gateway_txn_id")?,
        state: col(r, "state")?,
        outcome: col(r, "outcome")?,
        provider_status: col(r, "provider_status")?,
        reason: col(r, "reason")?,
        amount_minor: col(r, "amount_minor")?,
        currency: col(r, "currency")?,
        due_at: col::<Option<i64>>(r, "due_at")?.map(rfc3339),
        due_kind: col(r, "due_kind")?,
        opened_at: rfc3339(col(r, "opened_at")?),
        updated_at: rfc3339(col(r, "updated_at")?),
        closed_at: col::<Option<i64>>(r, "closed_at")?.map(rfc3339),
        keys_held: col::<i64>(r, "keys_held")? == 1,
    })
}

/// The desk's list: open cases first, the nearest deadline first (those without one after), then
/// the newest; closed ones after, the latest closed first. `open_only` leaves the closed out.
pub async fn list(db: &Db, open_only: bool, limit: i64) -> Result<Vec<CaseView>> {
    let filter = if open_only { "WHERE state <> 'closed' " } else { "" };
    let rows = sql::query(&format!(
        "SELECT {CASE_COLUMNS} FROM cases {filter}ORDER BY CASE WHEN state = 'closed' THEN 1 ELSE 0 END, \
         CASE WHEN due_at IS NULL THEN 1 ELSE 0 END, due_at, COALESCE(closed_at, 0) DESC, opened_at DESC, id LIMIT $1"
    ))
    .bind(limit.clamp(1, CASES_PAGE_MAX))
    .fetch_all(db.read_pool())
    .await?;
    rows.iter().map(case_view).collect()
}

/// A message of a case, as it arrived.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct CaseMessageView {
    /// `notification`, `poll` or `operator`.
    pub source: String,
    pub kind: String,
    pub body: String,
    pub received_at: String,
}

/// A change of a case's state.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct CaseEventView {
    pub from_state: Option<String>,
    pub to_state: String,
    pub provider_status: String,
    pub cause: String,
    pub at: String,
}

/// One case with its messages and state changes, newest first.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct CaseDetail {
    #[serde(flatten)]
    pub case: CaseView,
    pub messages: Vec<CaseMessageView>,
    pub events: Vec<CaseEventView>,
}

pub async fn get(db: &Db, id: &str) -> Result<CaseDetail> {
    let row = sql::query(&format!("SELECT {CASE_COLUMNS} FROM cases WHERE id = $1"))
        .bind(id)
        .fetch_optional(db.read_pool())
        .await?
        .ok_or_else(|| Error::not_found("case"))?;
    let messages = sql::query(
        "SELECT source, kind, body, received_at FROM case_messages WHERE case_id = $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(id)
    .bind(CASE_HISTORY_MAX)
    .fetch_all(db.read_pool())
    .await?
    .iter()
    .map(|m| {
        Ok(CaseMessageView {
            source: col(m, "source")?,
            kind: col(m, "kind")?,
            body: col(m, "body")?,
            received_at: rfc3339(col(m, "received_at")?),
        })
    })
    .collect::<Result<Vec<_>>>()?;
    let events = sql::query(
        "SELECT from_state, to_state, provider_status, cause, at FROM case_events WHERE case_id = $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(id)
    .bind(CASE_HISTORY_MAX)
    .fetch_all(db.read_pool())
    .await?
    .iter()
    .map(|e| {
        Ok(CaseEventView {
            from_state: col(e, "from_state")?,
            to_state: col(e, "to_state")?,
            provider_status: col(e, "provider_status")?,
            cause: col(e, "cause")?,
            at: rfc3339(col(e, "at")?),
        })
    })
    .collect::<Result<Vec<_>>>()?;
    Ok(CaseDetail { case: case_view(&row)?, messages, events })
}

/// Raises the deadline alerts of open cases: `case_due_soon` within `margin_ms` of a deadline,
/// `case_overdue` past it (each once per case and deadline). Answers how many were raised.
pub async fn alert_deadlines(db: &Db, now: Millis, margin_ms: Millis) -> Result<usize> {
    let rows = sql::query(
        "SELECT id, provider, provider_case_id, order_no, due_at, due_kind FROM cases \
         WHERE state <> 'closed' AND due_at IS NOT NULL AND due_at <= $1 ORDER BY due_at LIMIT $2",
    )
    .bind(now.saturating_add(margin_ms))
    .bind(DUE_BATCH_MAX)
    .fetch_all(db.read_pool())
    .await?;
    let mut raised = 0;
    for r in &rows {
        let (id, due_at): (String, i64) = (col(r, "id")?, col(r, "due_at")?);
        let (kind, severity) = match case::urgency(due_at, now, margin_ms) {
            case::Urgency::Later => continue,
            case::Urgency::DueSoon => ("case_due_soon", Severity::Warning),
            case::Urgency::Overdue => ("case_overdue", Severity::Critical),
        };
        let due_kind = col::<Option<String>>(r, "due_kind")?.unwrap_or_default();
        let key = format!("{id}:{due_kind}:{due_at}");
        let exists: Option<i64> = sql::query_scalar("SELECT count FROM alerts WHERE kind = $1 AND dedupe_key = $2")
            .bind(kind)
            .bind(&key)
            .fetch_optional(db.read_pool())
            .await?;
        if exists.is_some() {
            continue;
        }
        let details = format!(
            "{} case {}: the {due_kind} deadline {} is {}",
            col::<String>(r, "provider")?,
            col::<String>(r, "provider_case_id")?,
            rfc3339(due_at),
            if kind == "case_overdue" { "missed" } else { "near" }
        );
        let order_no: Option<String> = col(r, "order_no")?;
        crate::write_tx!(db, |tx| {
            events::raise_alert(tx, kind, severity, &key, order_no.as_deref(), &details, now).await
        })?;
        raised += 1;
    }
    Ok(raised)
}

/// Open cases by provider and state, for the gauges.
pub async fn open_counts(db: &Db) -> Result<Vec<(String, String, i64)>> {
    let rows = sql::query(
        "SELECT provider, state, CAST(COUNT(*) AS BIGINT) AS n FROM cases WHERE state <> 'closed' GROUP BY provider, state",
    )
    .fetch_all(db.read_pool())
    .await?;
    rows.iter().map(|r| Ok((col(r, "provider")?, col(r, "state")?, col(r, "n")?))).collect()
}

/// What an action on a case needs: whose it is and which order it is about.
#[derive(Debug, Clone)]
pub struct CaseKey {
    pub id: String,
    pub provider: String,
    pub provider_case_id: String,
    pub kind: CaseKind,
    pub state: CaseState,
    pub order_no: Option<String>,
}

pub async fn key_of(db: &Db, id: &str) -> Result<CaseKey> {
    let row = sql::query("SELECT id, provider, provider_case_id, kind, state, order_no FROM cases WHERE id = $1")
        .bind(id)
        .fetch_optional(db.read_pool())
        .await?
        .ok_or_else(|| Error::not_found("case"))?;
    Ok(CaseKey {
        id: col(&row, "id")?,
        provider: col(&row, "provider")?,
        provider_case_id: col(&row, "provider_case_id")?,
        kind: CaseKind::parse(&col::<String>(&row, "kind")?).ok_or_else(|| Error::internal("unknown case kind"))?,
        state: CaseState::parse(&col::<String>(&row, "state")?).ok_or_else(|| Error::internal("unknown case state"))?,
        order_no: col(&row, "order_no")?,
    })
}

/// What kassa knows of `order_no` for a dispute's evidence: the buyer's contact, the goods, the
/// payment, the keys handed out and each time they were shown, the refunds.
pub async fn evidence_facts(db: &Db, order_no: &str) -> Result<case::EvidenceFacts> {
    let order = sql::query("SELECT order_no, contact_email, total_minor, currency FROM orders WHERE order_no = $1")
        .bind(order_no)
        .fetch_optional(db.read_pool())
        .await?
        .ok_or_else(|| Error::not_found("order"))?;
    let currency: String = col(&order, "currency")?;
    let money = |minor: i64| crate::domain::money::format_minor(minor, &currency);
    let lines = sql::query("SELECT name, quantity FROM order_lines WHERE order_no = $1 ORDER BY line_no")
        .bind(order_no)
        .fetch_all(db.read_pool())
        .await?
        .iter()
        .map(|l| Ok((col(l, "name")?, col(l, "quantity")?)))
        .collect::<Result<Vec<_>>>()?;
    let paid_at: Option<i64> = sql::query_scalar(
        "SELECT MIN(at) FROM status_events WHERE order_no = $1 AND entity = 'order' \
         AND (to_status = 'paid' OR to_status = 'paid_after_expiry')",
    )
    .bind(order_no)
    .fetch_one(db.read_pool())
    .await?;
    let keys_delivered: i64 = sql::query_scalar(
        "SELECT CAST(COUNT(*) AS BIGINT) FROM card_keys WHERE order_no = $1 AND status = 'delivered'",
    )
    .bind(order_no)
    .fetch_one(db.read_pool())
    .await?;
    let reveals = sql::query(
        "SELECT revealed_at, channel, client_addr FROM key_reveals WHERE order_no = $1 ORDER BY revealed_at LIMIT $2",
    )
    .bind(order_no)
    .bind(i64::try_from(case::REVEALS_SHOWN_MAX).unwrap_or(50))
    .fetch_all(db.read_pool())
    .await?
    .iter()
    .map(|r| Ok((rfc3339(col(r, "revealed_at")?), col(r, "channel")?, col(r, "client_addr")?)))
    .collect::<Result<Vec<_>>>()?;
    let refunded: Option<i64> = sql::query_scalar(
        "SELECT CAST(SUM(amount_minor) AS BIGINT) FROM refunds WHERE order_no = $1 AND status = 'succeeded'",
    )
    .bind(order_no)
    .fetch_one(db.read_pool())
    .await?;
    Ok(case::EvidenceFacts {
        order_no: col(&order, "order_no")?,
        contact_email: col(&order, "contact_email")?,
        lines,
        total: money(col(&order, "total_minor")?),
        paid_at: paid_at.map(rfc3339),
        keys_delivered,
        reveals,
        refunded: refunded.filter(|r| *r > 0).map(money),
    })
}

/// The backstop poll of a provider failed: the operator is told (once a day at most per reason).
pub async fn alert_poll_failed(db: &Db, why: &str, now: Millis) -> Result<()> {
    let day = now.div_euclid(86_400_000);
    let details = format!("the daily poll of complaints and disputes failed: {why}");
    crate::write_tx!(db, |tx| {
        events::raise_alert(tx, "case_poll_failed", Severity::Warning, &day.to_string(), None, &details, now).await
    })
}

/// Whether `order_no`'s card keys are held back from the buyer: an open case holds them.
pub async fn keys_held(db: &Db, order_no: &str) -> Result<bool> {
    let held: Option<i64> =
        sql::query_scalar("SELECT 1 FROM cases WHERE order_no = $1 AND keys_held = 1 AND state <> 'closed' LIMIT 1")
            .bind(order_no)
            .fetch_optional(db.read_pool())
            .await?;
    Ok(held.is_some())
}

/// The operator releases the keys a case holds back; answers whether it held any.
pub async fn release_keys(db: &Db, id: &str, now: Millis) -> Result<bool> {
    let message_id = format!("operator:{}", new_id());
    crate::write_tx!(db, |tx| {
        let released = sql::query("UPDATE cases SET keys_held = 0, updated_at = $1 WHERE id = $2 AND keys_held = 1")
            .bind(now)
            .bind(id)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        if released == 1 {
            sql::query(MESSAGE_INSERT)
                .bind_all(args![id, FROM_OPERATOR, &message_id, "keys_released", "{}", now])
                .execute(&mut **tx)
                .await?;
        }
        Ok(released == 1)
    })
}

//! Statement reconciliation in the store (`domain::statement`): kassa's side of a gateway's day,
//! and the day's outcome kept idempotently: one row per gateway and day with both sides' totals,
//! one finding per (gateway, day, kind, subject) — re-running a day updates its findings, reopens
//! one that holds again and closes those that no longer hold — and the statement's fees on the
//! payments and refunds they were charged on. New findings raise their alerts in the same
//! transaction.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::args;
use crate::clock::{Millis, rfc3339};
use crate::domain::statement::{
    Finding, FindingKind, LineKind, OurPayment, OurRefund, Ours, Outcome, Statement, Totals, next_fetch_at,
};
use crate::error::Result;
use crate::store::batch::Batch;
use crate::store::events::{self, Severity};
use crate::store::statement_rows::{dispute_cases, payment, rows_for, rows_in, upsert_day};
use crate::store::{Conn, Db, col, sql};

/// Days listed on one page of the console.
pub const DAYS_PAGE_MAX: i64 = crate::store::listing::PAGE_MAX;

const PAYMENT_COLUMNS: &str = "a.attempt_ref, a.order_no, a.gateway_txn_id, \
     COALESCE(a.captured_minor, a.amount_minor) AS amount, a.currency, a.status, a.statement_day, \
     (SELECT o.discount_minor FROM orders o WHERE o.order_no = a.order_no) AS discount";
const REFUND_COLUMNS: &str = "r.refund_no, r.order_no, r.amount_minor, r.currency, r.status, r.statement_day";

/// The gateway (`$1`) tested on payments found by the keys a statement's lines name. Written so
/// that no index can serve it: SQLite, which keeps no statistics here, takes an equality on an
/// indexed column for the most selective term and would read every payment the gateway ever took
/// by `payment_attempts_by_gateway` instead of looking up the few hundred keys (0.4 s for each
/// 500 keys at a million orders).
const OF_GATEWAY: &str = "a.gateway || '' = $1";

/// What a statement's lines are looked up by, each statement ending in `IN` (the keys follow, a
/// chunk at a time): a payment by its gateway transaction, a payment by kassa's reference, a
/// refund by its number.
pub fn key_lookups() -> [String; 3] {
    [
        format!(
            "SELECT a.attempt_ref, a.gateway_txn_id FROM payment_attempts a \
             WHERE {OF_GATEWAY} AND a.gateway_txn_id IS NOT NULL AND a.gateway_txn_id IN"
        ),
        format!("SELECT {PAYMENT_COLUMNS} FROM payment_attempts a WHERE {OF_GATEWAY} AND a.attempt_ref IN"),
        format!(
            "SELECT {REFUND_COLUMNS} FROM refunds r JOIN payment_attempts a ON a.attempt_ref = r.attempt_ref \
             WHERE {OF_GATEWAY} AND r.refund_no IN"
        ),
    ]
}

/// The payments that succeeded in a day's window (`$1`, `$2`) at a gateway (`$3`): the day's
/// succeeded changes read first (by their time), each payment then by its key. The `CROSS JOIN`
/// keeps SQLite to that order, which would otherwise read every payment the gateway ever took
/// (by the gateway's index) and look up each one's changes (1.6 s a day at a million orders);
/// PostgreSQL orders such a join as it would any other.
pub fn day_payments_sql() -> String {
    format!(
        "SELECT {PAYMENT_COLUMNS} FROM status_events e CROSS JOIN payment_attempts a \
         WHERE a.attempt_ref = e.entity_id AND e.to_status = 'succeeded' AND e.at >= $1 AND e.at < $2 \
         AND e.entity = 'attempt' AND a.gateway = $3 AND a.status = 'succeeded'"
    )
}

/// A refund's fee and statement day, from a statement line of its gateway (`$3`): the refund by
/// its key, its payment's gateway tested on that payment's row (a list of every payment the
/// gateway took, built for each refund, cost SQLite seconds a day on a long history).
pub const REFUND_FEE_SQL: &str = "UPDATE refunds SET fee_minor = $1, statement_day = $4 WHERE refund_no = $2 \
     AND EXISTS (SELECT 1 FROM payment_attempts a WHERE a.attempt_ref = refunds.attempt_ref AND a.gateway = $3)";

/// kassa's side of `gateway`'s `day` (its instants `window`): the payments and refunds that
/// succeeded then, those of any day the statement shows, and the order of every reference the
/// statement names. A payment or refund of the day that another day's statement already showed is
/// settled there.
pub async fn ours(
    db: &Db,
    gateway: &str,
    (day, window): (&str, (Millis, Millis)),
    statement: &Statement,
) -> Result<Ours> {
    let mut out = Ours::default();
    // Payment lines that name only the gateway's id (Stripe's PaymentIntent): kassa's reference.
    let txns: BTreeSet<&str> = statement
        .lines
        .iter()
        .filter(|l| l.kind == LineKind::Payment && l.merchant_ref.is_empty() && !l.gateway_txn_id.is_empty())
        .map(|l| l.gateway_txn_id.as_str())
        .collect();
    let [by_txn, by_ref, by_refund_no] = key_lookups();
    for r in &rows_for(db, &by_txn, gateway, &txns.into_iter().collect::<Vec<_>>()).await? {
        out.ref_of_txn.insert(col(r, "gateway_txn_id")?, col(r, "attempt_ref")?);
    }
    let mut refs: BTreeSet<&str> = statement
        .lines
        .iter()
        .filter(|l| l.kind == LineKind::Payment && !l.merchant_ref.is_empty())
        .map(|l| l.merchant_ref.as_str())
        .collect();
    refs.extend(out.ref_of_txn.values().map(String::as_str));
    let refund_nos: BTreeSet<&str> =
        statement.lines.iter().filter(|l| l.kind == LineKind::Refund).filter_map(|l| l.refund_no.as_deref()).collect();

    // (record, shown on another day's statement), by key.
    let mut payments: BTreeMap<String, (OurPayment, bool)> = BTreeMap::new();
    let mut refunds: BTreeMap<String, (OurRefund, bool)> = BTreeMap::new();
    let elsewhere =
        |r: &sql::Row| -> Result<bool> { Ok(col::<Option<String>>(r, "statement_day")?.is_some_and(|d| d != day)) };
    for r in &rows_in(db, &day_payments_sql(), gateway, window).await? {
        let p = payment(r)?;
        payments.insert(p.attempt_ref.clone(), (p, elsewhere(r)?));
    }
    for r in &rows_for(db, &by_ref, gateway, &refs.iter().copied().collect::<Vec<_>>()).await? {
        let p = payment(r)?;
        out.known_refs.insert(p.attempt_ref.clone(), p.order_no.clone());
        if col::<String>(r, "status")? == "succeeded" {
            payments.insert(p.attempt_ref.clone(), (p, false));
        }
    }
    let select = format!(
        "SELECT {REFUND_COLUMNS} FROM status_events e JOIN refunds r ON r.refund_no = e.entity_id \
         JOIN payment_attempts a ON a.attempt_ref = r.attempt_ref \
         WHERE e.to_status = 'succeeded' AND e.at >= $1 AND e.at < $2 AND e.entity = 'refund' AND a.gateway = $3 \
         AND r.status = 'succeeded'"
    );
    for r in &rows_in(db, &select, gateway, window).await? {
        let rf = refund(r)?;
        refunds.insert(rf.refund_no.clone(), (rf, elsewhere(r)?));
    }
    for r in &rows_for(db, &by_refund_no, gateway, &refund_nos.into_iter().collect::<Vec<_>>()).await? {
        let rf = refund(r)?;
        out.known_refunds.insert(rf.refund_no.clone(), rf.order_no.clone());
        if col::<String>(r, "status")? == "succeeded" {
            refunds.insert(rf.refund_no.clone(), (rf, false));
        }
    }
    out.cases = dispute_cases(db, gateway, statement).await?;
    let (second_captures, of_day) = super::second_captures::of_day(db, gateway, window, statement).await?;
    (out.second_captures, out.second_captures_of_day) = (second_captures, of_day);
    for (key, (p, shown_elsewhere)) in payments {
        if shown_elsewhere {
            out.settled_elsewhere.insert((LineKind::Payment, key));
        }
        out.payments.push(p);
    }
    for (key, (r, shown_elsewhere)) in refunds {
        if shown_elsewhere {
            out.settled_elsewhere.insert((LineKind::Refund, key));
        }
        out.refunds.push(r);
    }
    Ok(out)
}

fn refund(r: &sql::Row) -> Result<OurRefund> {
    Ok(OurRefund {
        order_no: col(r, "order_no")?,
        refund_no: col(r, "refund_no")?,
        amount_minor: col(r, "amount_minor")?,
        currency: col(r, "currency")?,
    })
}

/// What recording a day changed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Changes {
    /// Findings new this run, or holding again after they had been closed.
    pub opened: i64,
    /// Findings of this day, or settled by it on another day, that no longer hold.
    pub closed: i64,
}

/// Records a reconciled day: its totals, its findings (idempotently), the statement's fees on
/// kassa's payments and refunds; alerts the findings it opens. One transaction.
pub async fn record(
    db: &Db,
    gateway: &str,
    day: &str,
    currency: &str,
    lines: i64,
    outcome: &Outcome,
    now: Millis,
) -> Result<Changes> {
    crate::write_tx!(db, |tx| {
        let totals = (&outcome.gateway, &outcome.kassa);
        upsert_day(tx, gateway, day, "reconciled", None, currency, lines, totals, (0, now)).await?;
        let mut changes = apply_findings(tx, gateway, day, &outcome.findings, now).await?;
        let mut fees = Batch::new();
        for (attempt_ref, fee) in &outcome.payment_fees {
            fees.add(
                "UPDATE payment_attempts SET fee_minor = $1, statement_day = $4 WHERE attempt_ref = $2 AND gateway = $3",
                args![*fee, attempt_ref.as_str(), gateway, day],
            );
        }
        for (refund_no, fee) in &outcome.refund_fees {
            fees.add(REFUND_FEE_SQL, args![*fee, refund_no.as_str(), gateway, day]);
        }
        fees.run(tx).await?;
        // A payment (refund) another day's run found missing is settled: this day shows it.
        let mut settle = Batch::new();
        let settled = [
            (FindingKind::PaidInKassaOnly, outcome.payment_fees.keys().collect::<Vec<_>>()),
            (FindingKind::RefundInKassaOnly, outcome.refund_fees.keys().collect::<Vec<_>>()),
        ];
        for (kind, keys) in settled {
            for key in keys {
                settle.add(
                    "UPDATE statement_findings SET state = 'closed', updated_at = $1 \
                     WHERE subject = $2 AND kind = $3 AND gateway = $4 AND state = 'open' AND day <> $5",
                    args![now, key.as_str(), kind.code(), gateway, day],
                );
            }
        }
        changes.closed += i64::try_from(settle.run(tx).await?).unwrap_or(0);
        Ok(changes)
    })
}

/// Records that a day's file came but fails its hash or cannot be read (the `tries`th fetch): the
/// day stays unreconciled, fetched again later, with a finding (and a critical alert) saying why.
pub async fn record_unreadable(
    db: &Db,
    gateway: &str,
    day: &str,
    currency: &str,
    detail: &str,
    tries: i64,
    now: Millis,
) -> Result<Changes> {
    let finding = Finding::unreadable(detail);
    let next_at = next_fetch_at(tries, now).unwrap_or(i64::MAX);
    crate::write_tx!(db, |tx| {
        let none = Totals::default();
        upsert_day(tx, gateway, day, "unreadable", Some(detail), currency, 0, (&none, &none), (tries, now)).await?;
        sql::query("UPDATE statement_days SET next_at = $1 WHERE gateway = $2 AND day = $3")
            .bind(next_at)
            .bind(gateway)
            .bind(day)
            .execute(&mut **tx)
            .await?;
        // Findings of an earlier reading stand until a readable file says otherwise.
        let opened = upsert_findings(tx, gateway, day, std::slice::from_ref(&finding), now).await?;
        Ok(Changes { opened, closed: 0 })
    })
}

/// A day whose file is not there yet (or the gateway not reached): counted, retried later; the
/// last try alerts. Whether the day was given up.
pub async fn record_waiting(
    db: &Db,
    gateway: &str,
    day: &str,
    currency: &str,
    detail: &str,
    tries: i64,
    now: Millis,
) -> Result<bool> {
    let next_at = next_fetch_at(tries, now);
    let given_up = next_at.is_none();
    crate::write_tx!(db, |tx| {
        sql::query(
            "INSERT INTO statement_days (gateway, day, status, detail, currency, tries, next_at, created_at, updated_at) \
             VALUES ($1, $2, 'waiting', $3, $4, $5, $6, $7, $7) \
             ON CONFLICT (gateway, day) DO UPDATE SET detail = excluded.detail, tries = excluded.tries, \
             next_at = excluded.next_at, updated_at = excluded.updated_at",
        )
        .bind(gateway)
        .bind(day)
        .bind(detail)
        .bind(currency)
        .bind(tries)
        .bind(next_at.unwrap_or(i64::MAX))
        .bind(now)
        .execute(&mut **tx)
        .await?;
        if given_up {
            let details = format!("{gateway}'s statement of {day} was not had after {tries} tries: {detail}");
            events::raise_alert(
                tx,
                "statement_missing",
                Severity::Warning,
                &format!("{gateway}:{day}"),
                None,
                &details,
                now,
            )
            .await?;
        }
        Ok(given_up)
    })
}

/// Claims `gateway`'s `day` (ending at `day_end`) for one run of the daily job (several instances
/// never fetch the same day at once; a crashed run's claim runs out): the tries so far, or `None`
/// when the day is reconciled, given up, or another run holds it. A day reconciled before it was
/// over (the sandbox's day so far) is run again.
pub async fn claim_day(
    db: &Db,
    gateway: &str,
    (day, day_end): (&str, Millis),
    currency: &str,
    now: Millis,
    lease_ms: i64,
) -> Result<Option<i64>> {
    crate::write_tx!(db, |tx| {
        sql::query(
            "INSERT INTO statement_days (gateway, day, status, currency, created_at, updated_at) \
             VALUES ($1, $2, 'waiting', $3, $4, $4) ON CONFLICT (gateway, day) DO NOTHING",
        )
        .bind(gateway)
        .bind(day)
        .bind(currency)
        .bind(now)
        .execute(&mut **tx)
        .await?;
        let claimed = sql::query(
            "UPDATE statement_days SET next_at = $1 WHERE gateway = $2 AND day = $3 \
             AND (status <> 'reconciled' OR updated_at < $5) AND next_at <= $4 RETURNING tries",
        )
        .bind(now.saturating_add(lease_ms))
        .bind(gateway)
        .bind(day)
        .bind(now)
        .bind(day_end)
        .fetch_optional(&mut **tx)
        .await?;
        claimed.map(|r| col::<i64>(&r, "tries")).transpose()
    })
}

/// The day's findings as `findings` says: each kept (reopened when it had been closed; one an
/// operator resolved stays resolved), new ones opened and alerted, the rest closed.
async fn apply_findings(tx: &mut Conn, gateway: &str, day: &str, findings: &[Finding], now: Millis) -> Result<Changes> {
    let opened = upsert_findings(tx, gateway, day, findings, now).await?;
    let held: BTreeSet<(&str, &str)> = findings.iter().map(|f| (f.kind.code(), f.subject.as_str())).collect();
    let open = sql::query(
        "SELECT id, kind, subject FROM statement_findings WHERE gateway = $1 AND day = $2 AND state = 'open'",
    )
    .bind(gateway)
    .bind(day)
    .fetch_all(&mut *tx)
    .await?;
    let mut closing = Batch::new();
    for r in &open {
        let (kind, subject): (String, String) = (col(r, "kind")?, col(r, "subject")?);
        if !held.contains(&(kind.as_str(), subject.as_str())) {
            closing.add(
                "UPDATE statement_findings SET state = 'closed', updated_at = $1 WHERE id = $2",
                args![now, col::<i64>(r, "id")?],
            );
        }
    }
    let closed = i64::try_from(closing.run(tx).await?).unwrap_or(0);
    Ok(Changes { opened, closed })
}

/// Inserts or refreshes each finding; alerts those that open (new, or closed before). How many
/// opened.
async fn upsert_findings(tx: &mut Conn, gateway: &str, day: &str, findings: &[Finding], now: Millis) -> Result<i64> {
    let mut opened = 0;
    for f in findings {
        let before: Option<String> = sql::query_scalar(
            "SELECT state FROM statement_findings WHERE gateway = $1 AND day = $2 AND kind = $3 AND subject = $4",
        )
        .bind(gateway)
        .bind(day)
        .bind(f.kind.code())
        .bind(&f.subject)
        .fetch_optional(&mut *tx)
        .await?;
        // Only an order kassa has is linked (a reference kassa never made names none).
        let order_no: Option<String> = match &f.order_no {
            Some(o) => {
                sql::query_scalar("SELECT order_no FROM orders WHERE order_no = $1")
                    .bind(o)
                    .fetch_optional(&mut *tx)
                    .await?
            }
            None => None,
        };
        match before.as_deref() {
            None => {
                sql::query(
                    "INSERT INTO statement_findings (gateway, day, kind, subject, order_no, ours, theirs, state, found_at, updated_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, 'open', $8, $8)",
                )
                .bind(gateway)
                .bind(day)
                .bind(f.kind.code())
                .bind(&f.subject)
                .bind(&order_no)
                .bind(&f.ours)
                .bind(&f.theirs)
                .bind(now)
                .execute(&mut *tx)
                .await?;
            }
            Some(state) => {
                sql::query(
                    "UPDATE statement_findings SET order_no = $1, ours = $2, theirs = $3, updated_at = $4, \
                     state = CASE WHEN state = 'closed' THEN 'open' ELSE state END \
                     WHERE gateway = $5 AND day = $6 AND kind = $7 AND subject = $8",
                )
                .bind(&order_no)
                .bind(&f.ours)
                .bind(&f.theirs)
                .bind(now)
                .bind(gateway)
                .bind(day)
                .bind(f.kind.code())
                .bind(&f.subject)
                .execute(&mut *tx)
                .await?;
                if state != "closed" {
                    continue;
                }
            }
        }
        opened += 1;
        let severity = if f.kind.is_critical() || f.kind == FindingKind::StatementUnreadable {
            Severity::Critical
        } else {
            Severity::Warning
        };
        let details = format!(
            "{gateway}'s statement of {day}: {} {}: kassa has {}, the statement {}",
            f.kind.code(),
            f.subject,
            f.ours,
            f.theirs
        );
        let key = format!("{gateway}:{day}:{}:{}", f.kind.code(), f.subject);
        events::raise_alert(tx, "statement_discrepancy", severity, &key, order_no.as_deref(), &details, now).await?;
    }
    Ok(opened)
}

/// An operator marks a finding resolved, with a note saying what was done. `None` when there is
/// no such finding.
pub async fn resolve(db: &Db, id: i64, note: &str, now: Millis) -> Result<Option<StatementFindingView>> {
    let changed = crate::write_tx!(db, |tx| {
        let n =
            sql::query("UPDATE statement_findings SET state = 'resolved', note = $1, updated_at = $2 WHERE id = $3")
                .bind(note)
                .bind(now)
                .bind(id)
                .execute(&mut **tx)
                .await?;
        Ok(n.rows_affected())
    })?;
    if changed == 0 {
        return Ok(None);
    }
    let row = sql::query(&format!("{FINDING_COLUMNS} WHERE id = $1")).bind(id).fetch_one(db.read_pool()).await?;
    finding_view(&row).map(Some)
}

/// A day's totals, one side's, for people and programs.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct TotalsView {
    pub count: i64,
    pub gross_minor: i64,
    pub refunds_minor: i64,
    pub fees_minor: i64,
    pub net_minor: i64,
    /// Promotion discounts behind kassa's payments (0 on the gateway's side, which sees only
    /// what it charged).
    pub discounts_minor: i64,
    /// What disputes took from the balance (withdrawals) and gave back (reinstatements), and
    /// their fees, apart from payments and refunds. kassa's side counts the disputes it has a case
    /// of, at the case's amount.
    pub disputes_minor: i64,
    pub reinstated_minor: i64,
    pub dispute_fees_minor: i64,
}

/// A stored finding of a statement day.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct StatementFindingView {
    pub id: i64,
    pub gateway: String,
    pub day: String,
    /// `paid_at_gateway_only`, `paid_in_kassa_only`, `amount_differs`, `currency_differs`,
    /// `refund_at_gateway_only`, `refund_in_kassa_only`, `duplicate`, `summary_differs`,
    /// `statement_unreadable`, `dispute_case_missing`, `dispute_reinstated_not_won`.
    pub kind: String,
    /// The merchant reference, refund number, dispute id (`<id>:reinstatement` for a dispute's
    /// reinstatement) or summary field it is about.
    pub subject: String,
    pub order_no: Option<String>,
    pub ours: String,
    pub theirs: String,
    /// `open`, `closed` (no longer holds) or `resolved` (by an operator, with a note).
    pub state: String,
    pub note: Option<String>,
    pub found_at: String,
    pub updated_at: String,
}

/// A statement day: its state, both sides' totals and its findings.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct StatementDayView {
    pub gateway: String,
    pub day: String,
    /// `reconciled`, `waiting` (the file is not there yet) or `unreadable`.
    pub status: String,
    pub detail: Option<String>,
    pub currency: String,
    /// Lines the statement had.
    pub lines: i64,
    pub gateway_totals: TotalsView,
    pub kassa_totals: TotalsView,
    /// Fetches so far of a day still waiting.
    pub tries: i64,
    pub updated_at: String,
    pub findings: Vec<StatementFindingView>,
}

impl StatementDayView {
    /// One side's net as money: the gateway's, or kassa's.
    pub fn net_display(&self, gateway_side: bool) -> String {
        let t = if gateway_side { &self.gateway_totals } else { &self.kassa_totals };
        crate::domain::money::format_minor(t.net_minor, &self.currency)
    }
}

const FINDING_COLUMNS: &str = "SELECT id, gateway, day, kind, subject, order_no, ours, theirs, state, note, found_at, updated_at FROM statement_findings";

fn finding_view(r: &sql::Row) -> Result<StatementFindingView> {
    Ok(StatementFindingView {
        id: col(r, "id")?,
        gateway: col(r, "gateway")?,
        day: col(r, "day")?,
        kind: col(r, "kind")?,
        subject: col(r, "subject")?,
        order_no: col(r, "order_no")?,
        ours: col(r, "ours")?,
        theirs: col(r, "theirs")?,
        state: col(r, "state")?,
        note: col(r, "note")?,
        found_at: rfc3339(col(r, "found_at")?),
        updated_at: rfc3339(col(r, "updated_at")?),
    })
}

fn totals(r: &sql::Row, side: &str) -> Result<TotalsView> {
    Ok(TotalsView {
        count: col(r, &format!("{side}_count"))?,
        gross_minor: col(r, &format!("{side}_gross_minor"))?,
        refunds_minor: col(r, &format!("{side}_refunds_minor"))?,
        fees_minor: col(r, &format!("{side}_fees_minor"))?,
        net_minor: col(r, &format!("{side}_net_minor"))?,
        discounts_minor: match side {
            "kassa" => col(r, "kassa_discounts_minor")?,
            _ => 0,
        },
        disputes_minor: col(r, &format!("{side}_disputes_minor"))?,
        reinstated_minor: col(r, &format!("{side}_reinstated_minor"))?,
        dispute_fees_minor: col(r, &format!("{side}_dispute_fees_minor"))?,
    })
}

fn day_view(r: &sql::Row, findings: Vec<StatementFindingView>) -> Result<StatementDayView> {
    Ok(StatementDayView {
        gateway: col(r, "gateway")?,
        day: col(r, "day")?,
        status: col(r, "status")?,
        detail: col(r, "detail")?,
        currency: col(r, "currency")?,
        lines: col(r, "lines")?,
        gateway_totals: totals(r, "gateway")?,
        kassa_totals: totals(r, "kassa")?,
        tries: col(r, "tries")?,
        updated_at: rfc3339(col(r, "updated_at")?),
        findings,
    })
}

/// One day of one gateway with its findings (every state), `None` when never run.
pub async fn day(db: &Db, gateway: &str, day: &str) -> Result<Option<StatementDayView>> {
    let Some(row) = sql::query("SELECT * FROM statement_days WHERE gateway = $1 AND day = $2")
        .bind(gateway)
        .bind(day)
        .fetch_optional(db.read_pool())
        .await?
    else {
        return Ok(None);
    };
    let findings = sql::query(&format!("{FINDING_COLUMNS} WHERE gateway = $1 AND day = $2 ORDER BY kind, subject"))
        .bind(gateway)
        .bind(day)
        .fetch_all(db.read_pool())
        .await?
        .iter()
        .map(finding_view)
        .collect::<Result<Vec<_>>>()?;
    day_view(&row, findings).map(Some)
}

/// A day in the list of days: its totals and how many of its findings are open.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct StatementDaySummary {
    #[serde(flatten)]
    pub day: StatementDayView,
    pub open_findings: i64,
}

/// The latest days, newest first, of every gateway (or one).
pub async fn days(db: &Db, gateway: Option<&str>, limit: i64) -> Result<Vec<StatementDaySummary>> {
    let filter = if gateway.is_some() { "WHERE d.gateway = $2" } else { "" };
    let sql = format!(
        "SELECT d.*, (SELECT COUNT(*) FROM statement_findings f WHERE f.gateway = d.gateway AND f.day = d.day \
         AND f.state = 'open') AS open_findings FROM statement_days d {filter} ORDER BY d.day DESC, d.gateway LIMIT $1"
    );
    let mut q = sql::query(&sql).bind(limit.clamp(1, DAYS_PAGE_MAX));
    if let Some(g) = gateway {
        q = q.bind(g);
    }
    q.fetch_all(db.read_pool())
        .await?
        .iter()
        .map(|r| Ok(StatementDaySummary { day: day_view(r, Vec::new())?, open_findings: col(r, "open_findings")? }))
        .collect()
}

/// The statement findings about one order, every state.
pub async fn findings_of_order(db: &Db, order_no: &crate::domain::ids::OrderNo) -> Result<Vec<StatementFindingView>> {
    sql::query(&format!("{FINDING_COLUMNS} WHERE order_no = $1 ORDER BY day, kind, subject"))
        .bind(order_no)
        .fetch_all(db.read_pool())
        .await?
        .iter()
        .map(finding_view)
        .collect()
}

/// Open statement findings, for the gauge.
pub async fn open_findings(db: &Db) -> Result<i64> {
    let n: i64 = sql::query_scalar("SELECT COUNT(*) FROM statement_findings WHERE state = 'open'")
        .fetch_one(db.read_pool())
        .await?;
    Ok(n)
}

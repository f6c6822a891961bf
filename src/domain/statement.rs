//! Statement reconciliation (对账): a gateway's statement of one day against kassa's own records
//! of the same day, line by line and in totals. Pure: the parsers (`gateway::bills`) turn a file
//! into a [`Statement`], the store reads kassa's side into [`Ours`], and [`reconcile`] decides
//! what does not agree.
//!
//! Lines are matched by keys, never by position: a payment by kassa's merchant reference (the
//! attempt reference the gateway was given) and the gateway's transaction id; a refund by kassa's
//! refund number; a dispute's withdrawal or reinstatement by the dispute's id, against kassa's case
//! of it (`statement_disputes.rs`).

use std::collections::{BTreeMap, BTreeSet};

/// The format of a statement day: `2026-03-01`.
const DAY_FORMAT: &[time::format_description::BorrowedFormatItem<'_>] =
    time::macros::format_description!("[year]-[month]-[day]");

/// Reads `YYYY-MM-DD`.
pub fn parse_day(text: &str) -> Option<time::Date> {
    time::Date::parse(text.trim(), DAY_FORMAT).ok()
}

/// Writes `YYYY-MM-DD`.
pub fn format_day(day: time::Date) -> String {
    day.format(DAY_FORMAT).unwrap_or_default()
}

/// Most lines one statement may hold; a bigger file is refused whole.
pub const STATEMENT_LINES_MAX: usize = 1_000_000;

/// What a statement line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LineKind {
    Payment,
    Refund,
    /// What a dispute took from the balance (the disputed amount; its fee apart).
    DisputeWithdrawal,
    /// What a dispute gave back to the balance (a dispute won).
    DisputeReinstatement,
}

impl LineKind {
    /// Whether the line is a dispute's movement rather than a trade.
    pub fn is_dispute(self) -> bool {
        matches!(self, LineKind::DisputeWithdrawal | LineKind::DisputeReinstatement)
    }
}

/// One line of a gateway's statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatementLine {
    pub kind: LineKind,
    /// kassa's merchant reference (`out_trade_no`: the attempt reference).
    pub merchant_ref: String,
    /// The gateway's transaction id; on a dispute line, the dispute's id (kassa's case of it has
    /// it as its provider case id).
    pub gateway_txn_id: String,
    /// kassa's refund number (`out_refund_no`), on a refund line.
    pub refund_no: Option<String>,
    /// The amount moved, in minor units, always positive (the kind says which way).
    pub amount_minor: i64,
    /// The gateway's fee, in minor units: positive when charged, negative when returned (on a
    /// dispute line, the dispute fee).
    pub fee_minor: i64,
    /// ISO-4217, upper case.
    pub currency: String,
}

/// What the statement itself says it adds up to (its summary), where it has one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Declared {
    pub count: i64,
    pub gross_minor: i64,
    pub refunds_minor: i64,
    pub fees_minor: i64,
}

/// A day's statement of one gateway.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Statement {
    pub lines: Vec<StatementLine>,
    pub declared: Option<Declared>,
    /// Further totals a companion file declares and its own rows add up to (WeChat's fund-flow
    /// bill), each `(subject, declared, summed)`: one that differs is a `summary_differs` finding.
    pub checks: Vec<(String, i64, i64)>,
}

/// A payment kassa recorded as captured that day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurPayment {
    pub order_no: String,
    pub attempt_ref: String,
    pub gateway_txn_id: Option<String>,
    pub amount_minor: i64,
    pub currency: String,
    /// What the order was given off by a promotion (0 on a second capture: its order's first
    /// payment carries it).
    pub discount_minor: i64,
}

/// A refund kassa recorded as succeeded that day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurRefund {
    pub order_no: String,
    pub refund_no: String,
    pub amount_minor: i64,
    pub currency: String,
}

/// A dispute kassa keeps as a case (`cases`), as a dispute line is compared with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OurCase {
    /// kassa's id of the case.
    pub case_id: String,
    pub order_no: Option<String>,
    /// The disputed amount and its currency, as the provider gave them.
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    /// Still open (needs a response, or under review).
    pub open: bool,
    /// How a closed case ended (`won`, `lost`, …).
    pub outcome: Option<String>,
}

/// kassa's side of the day: its payments and refunds at the gateway, and every merchant reference
/// and refund number it ever made there (a line of another day's order is known, not foreign).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ours {
    pub payments: Vec<OurPayment>,
    pub refunds: Vec<OurRefund>,
    /// Merchant references kassa made at this gateway, with their order.
    pub known_refs: BTreeMap<String, String>,
    /// Refund numbers kassa made at this gateway, with their order.
    pub known_refunds: BTreeMap<String, String>,
    /// Payments and refunds of the day that another day's statement already showed (paid just
    /// before midnight, heard of just after): not missing from this one.
    pub settled_elsewhere: BTreeSet<(LineKind, String)>,
    /// The merchant reference of each gateway transaction id kassa recorded, for statements whose
    /// payment lines name only the gateway's id (Stripe's PaymentIntent).
    pub ref_of_txn: BTreeMap<String, String>,
    /// Second captures on paid attempts (each with its own transaction id): those kassa recorded
    /// that day and those the statement shows. A statement line of one is matched by its
    /// transaction, not taken for a second line of the attempt's first payment.
    pub second_captures: Vec<OurPayment>,
    /// Which of `second_captures` kassa recorded that day.
    pub second_captures_of_day: BTreeSet<String>,
    /// kassa's cases of the disputes the statement's dispute lines name, by dispute id.
    pub cases: BTreeMap<String, OurCase>,
}

/// The kinds of disagreement, each with a stable code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FindingKind {
    /// The gateway took a payment kassa has no record of as paid that day.
    PaidAtGatewayOnly,
    /// kassa recorded a payment the statement does not show.
    PaidInKassaOnly,
    /// Both have it, for different amounts.
    AmountDiffers,
    /// Both have it, in different currencies.
    CurrencyDiffers,
    /// The gateway refunded something kassa did not (a refund made in the merchant console).
    RefundAtGatewayOnly,
    /// kassa recorded a refund the statement does not show.
    RefundInKassaOnly,
    /// The statement shows the same payment or refund twice.
    Duplicate,
    /// The statement's own summary disagrees with its lines.
    SummaryDiffers,
    /// The file came but fails its hash or cannot be read: the day is not reconciled.
    StatementUnreadable,
    /// The gateway moved money for a dispute kassa has no case of (yet: the statement can come
    /// before the dispute's notification; the day's next run finds the case).
    DisputeCaseMissing,
    /// The gateway gave back a dispute's money while kassa's case of it is closed and not won.
    DisputeReinstatedNotWon,
}

impl FindingKind {
    pub const ALL: [FindingKind; 11] = [
        FindingKind::PaidAtGatewayOnly,
        FindingKind::PaidInKassaOnly,
        FindingKind::AmountDiffers,
        FindingKind::CurrencyDiffers,
        FindingKind::RefundAtGatewayOnly,
        FindingKind::RefundInKassaOnly,
        FindingKind::Duplicate,
        FindingKind::SummaryDiffers,
        FindingKind::StatementUnreadable,
        FindingKind::DisputeCaseMissing,
        FindingKind::DisputeReinstatedNotWon,
    ];

    pub fn code(self) -> &'static str {
        match self {
            FindingKind::PaidAtGatewayOnly => "paid_at_gateway_only",
            FindingKind::PaidInKassaOnly => "paid_in_kassa_only",
            FindingKind::AmountDiffers => "amount_differs",
            FindingKind::CurrencyDiffers => "currency_differs",
            FindingKind::RefundAtGatewayOnly => "refund_at_gateway_only",
            FindingKind::RefundInKassaOnly => "refund_in_kassa_only",
            FindingKind::Duplicate => "duplicate",
            FindingKind::SummaryDiffers => "summary_differs",
            FindingKind::StatementUnreadable => "statement_unreadable",
            FindingKind::DisputeCaseMissing => "dispute_case_missing",
            FindingKind::DisputeReinstatedNotWon => "dispute_reinstated_not_won",
        }
    }

    pub fn parse(code: &str) -> Option<FindingKind> {
        FindingKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// Whether money is at stake (a payment, refund or dispute movement one side has and the other
    /// has not, or a different amount): raised as a critical alert, the rest as warnings.
    pub fn is_critical(self) -> bool {
        matches!(
            self,
            FindingKind::PaidAtGatewayOnly
                | FindingKind::PaidInKassaOnly
                | FindingKind::AmountDiffers
                | FindingKind::CurrencyDiffers
                | FindingKind::RefundAtGatewayOnly
                | FindingKind::RefundInKassaOnly
                | FindingKind::DisputeCaseMissing
                | FindingKind::DisputeReinstatedNotWon
        )
    }

    /// The kind a record of another day's statement settles: a payment (refund) kassa has that
    /// this day's statement lacks is not a finding once another day's statement shows it (paid
    /// just before midnight, heard of just after).
    pub fn settled_by_another_day(self) -> Option<LineKind> {
        match self {
            FindingKind::PaidInKassaOnly => Some(LineKind::Payment),
            FindingKind::RefundInKassaOnly => Some(LineKind::Refund),
            _ => None,
        }
    }
}

/// One disagreement. `subject` (with the kind) names it across runs: re-running a day finds the
/// same subject, so a finding is kept once and closed when it no longer holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    pub kind: FindingKind,
    /// The merchant reference, refund number, dispute id (`<id>:reinstatement` for a dispute's
    /// reinstatement) or summary field the finding is about.
    pub subject: String,
    pub order_no: Option<String>,
    /// What kassa has, and what the statement says, for people.
    pub ours: String,
    pub theirs: String,
}

impl Finding {
    /// The finding of a day whose file came but fails its hash or cannot be read.
    pub fn unreadable(detail: &str) -> Finding {
        Finding {
            kind: FindingKind::StatementUnreadable,
            subject: "file".to_string(),
            order_no: None,
            ours: "a statement that passes its hash and can be read".to_string(),
            theirs: detail.to_string(),
        }
    }
}

/// A day's totals, one side's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    /// Payment lines.
    pub count: i64,
    pub gross_minor: i64,
    pub refunds_minor: i64,
    /// The fees on payments and refunds.
    pub fees_minor: i64,
    /// `gross − refunds − fees − disputes + reinstated − dispute fees`: what the day's trades and
    /// disputes moved.
    pub net_minor: i64,
    /// Promotion discounts behind the payments (kassa's side; a gateway sees only what it
    /// charged): not money moved, so not in the net.
    pub discounts_minor: i64,
    /// What disputes took (their withdrawals), and gave back (their reinstatements).
    pub disputes_minor: i64,
    pub reinstated_minor: i64,
    /// The disputes' fees, apart from the disputed amounts: positive when charged, negative when
    /// returned.
    pub dispute_fees_minor: i64,
}

impl Totals {
    fn add(&mut self, kind: LineKind, amount: i64, fee: i64) {
        match kind {
            LineKind::Payment => {
                self.count += 1;
                self.gross_minor = self.gross_minor.saturating_add(amount);
            }
            LineKind::Refund => self.refunds_minor = self.refunds_minor.saturating_add(amount),
            LineKind::DisputeWithdrawal => self.disputes_minor = self.disputes_minor.saturating_add(amount),
            LineKind::DisputeReinstatement => self.reinstated_minor = self.reinstated_minor.saturating_add(amount),
        }
        if kind.is_dispute() {
            self.dispute_fees_minor = self.dispute_fees_minor.saturating_add(fee);
        } else {
            self.fees_minor = self.fees_minor.saturating_add(fee);
        }
        self.net_minor = self
            .gross_minor
            .saturating_sub(self.refunds_minor)
            .saturating_sub(self.fees_minor)
            .saturating_sub(self.disputes_minor)
            .saturating_add(self.reinstated_minor)
            .saturating_sub(self.dispute_fees_minor);
    }
}

/// What a day's reconciliation found, with both sides' totals.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    pub findings: Vec<Finding>,
    pub gateway: Totals,
    pub kassa: Totals,
    /// The fee of each payment the statement shows, by merchant reference, and of each refund, by
    /// refund number: recorded on kassa's payments and refunds.
    pub payment_fees: BTreeMap<String, i64>,
    pub refund_fees: BTreeMap<String, i64>,
}

fn money(amount: i64, currency: &str) -> String {
    super::money::format_minor(amount, currency)
}

/// Where a line both sides have disagrees: its currency, else its amount.
fn differs(key: &str, order_no: &str, amount: i64, currency: &str, line: &StatementLine) -> Option<Finding> {
    let kind = if currency != line.currency {
        FindingKind::CurrencyDiffers
    } else if amount != line.amount_minor {
        FindingKind::AmountDiffers
    } else {
        return None;
    };
    Some(Finding {
        kind,
        subject: key.to_string(),
        order_no: Some(order_no.to_string()),
        ours: money(amount, currency),
        theirs: money(line.amount_minor, &line.currency),
    })
}

/// Reconciles a day's statement against kassa's records of the same day.
pub fn reconcile(statement: &Statement, ours: &Ours) -> Outcome {
    let mut out = Outcome::default();
    // The order behind a merchant reference or a refund number, from the day's records or any day's.
    let mut order_of_ref: BTreeMap<&str, &str> =
        ours.known_refs.iter().map(|(r, o)| (r.as_str(), o.as_str())).collect();
    order_of_ref.extend(ours.payments.iter().map(|p| (p.attempt_ref.as_str(), p.order_no.as_str())));
    let mut order_of_refund: BTreeMap<&str, &str> =
        ours.known_refunds.iter().map(|(r, o)| (r.as_str(), o.as_str())).collect();
    order_of_refund.extend(ours.refunds.iter().map(|r| (r.refund_no.as_str(), r.order_no.as_str())));
    let mut seen_payments: BTreeMap<&str, &StatementLine> = BTreeMap::new();
    let mut seen_refunds: BTreeMap<&str, &StatementLine> = BTreeMap::new();
    let mut duplicates: BTreeSet<(LineKind, &str)> = BTreeSet::new();
    let second_captures: BTreeMap<&str, &OurPayment> =
        ours.second_captures.iter().filter_map(|p| Some((p.gateway_txn_id.as_deref()?, p))).collect();
    let mut seen_second: BTreeSet<&str> = BTreeSet::new();
    for line in &statement.lines {
        out.gateway.add(line.kind, line.amount_minor, line.fee_minor);
        if line.kind.is_dispute() {
            continue;
        }
        let txn = line.gateway_txn_id.as_str();
        if let (LineKind::Payment, Some(p)) = (line.kind, second_captures.get(txn)) {
            if !seen_second.insert(txn) {
                duplicates.insert((LineKind::Payment, txn));
            }
            out.kassa.add(LineKind::Payment, p.amount_minor, line.fee_minor);
            out.findings.extend(differs(txn, &p.order_no, p.amount_minor, &p.currency, line));
            continue;
        }
        let key = match line.kind {
            LineKind::Payment if line.merchant_ref.is_empty() => {
                ours.ref_of_txn.get(&line.gateway_txn_id).map_or(line.gateway_txn_id.as_str(), String::as_str)
            }
            LineKind::Payment => line.merchant_ref.as_str(),
            // A refund line without kassa's number is keyed by the gateway's own refund id.
            _ => line.refund_no.as_deref().unwrap_or(line.gateway_txn_id.as_str()),
        };
        let seen = if line.kind == LineKind::Payment { &mut seen_payments } else { &mut seen_refunds };
        if seen.insert(key, line).is_some() {
            duplicates.insert((line.kind, key));
        }
    }
    for (kind, key) in duplicates {
        let (what, order) = if kind == LineKind::Payment {
            ("payment", order_of_ref.get(key))
        } else {
            ("refund", order_of_refund.get(key))
        };
        out.findings.push(Finding {
            kind: FindingKind::Duplicate,
            subject: key.to_string(),
            order_no: order
                .copied()
                .or_else(|| second_captures.get(key).map(|p| p.order_no.as_str()))
                .map(str::to_string),
            ours: "once".to_string(),
            theirs: format!("the {what} appears more than once"),
        });
    }

    let our_payments: BTreeMap<&str, &OurPayment> = ours.payments.iter().map(|p| (p.attempt_ref.as_str(), p)).collect();
    // A payment or refund another day's statement showed belongs to that day, unless this one
    // shows it too.
    let elsewhere = |kind: LineKind, key: &str, seen: &BTreeMap<&str, &StatementLine>| {
        !seen.contains_key(key) && ours.settled_elsewhere.contains(&(kind, key.to_string()))
    };
    let day_payments: Vec<&OurPayment> =
        ours.payments.iter().filter(|p| !elsewhere(LineKind::Payment, &p.attempt_ref, &seen_payments)).collect();
    let day_refunds: Vec<&OurRefund> =
        ours.refunds.iter().filter(|r| !elsewhere(LineKind::Refund, &r.refund_no, &seen_refunds)).collect();
    // kassa's fees are those the statement charged on kassa's own payments and refunds.
    for p in &day_payments {
        let fee = seen_payments.get(p.attempt_ref.as_str()).map_or(0, |l| l.fee_minor);
        out.kassa.add(LineKind::Payment, p.amount_minor, fee);
        out.kassa.discounts_minor = out.kassa.discounts_minor.saturating_add(p.discount_minor);
    }
    for r in &day_refunds {
        let fee = seen_refunds.get(r.refund_no.as_str()).map_or(0, |l| l.fee_minor);
        out.kassa.add(LineKind::Refund, r.amount_minor, fee);
    }
    for (key, line) in &seen_payments {
        out.payment_fees.insert((*key).to_string(), line.fee_minor);
        match our_payments.get(key) {
            None => out.findings.push(Finding {
                kind: FindingKind::PaidAtGatewayOnly,
                subject: (*key).to_string(),
                order_no: order_of_ref.get(key).map(|o| (*o).to_string()),
                ours: "no payment recorded that day".to_string(),
                theirs: format!("paid {} ({})", money(line.amount_minor, &line.currency), line.gateway_txn_id),
            }),
            Some(p) => out.findings.extend(differs(key, &p.order_no, p.amount_minor, &p.currency, line)),
        }
    }
    for p in &day_payments {
        if !seen_payments.contains_key(p.attempt_ref.as_str()) {
            out.findings.push(Finding {
                kind: FindingKind::PaidInKassaOnly,
                subject: p.attempt_ref.clone(),
                order_no: Some(p.order_no.clone()),
                ours: format!("paid {}", money(p.amount_minor, &p.currency)),
                theirs: "not in the statement".to_string(),
            });
        }
    }

    // A second capture kassa recorded that day that the statement does not show.
    for (txn, p) in &second_captures {
        if ours.second_captures_of_day.contains(*txn) && !seen_second.contains(txn) {
            out.kassa.add(LineKind::Payment, p.amount_minor, 0);
            out.findings.push(Finding {
                kind: FindingKind::PaidInKassaOnly,
                subject: (*txn).to_string(),
                order_no: Some(p.order_no.clone()),
                ours: format!("paid again {} on {}", money(p.amount_minor, &p.currency), p.attempt_ref),
                theirs: "not in the statement".to_string(),
            });
        }
    }

    let our_refunds: BTreeMap<&str, &OurRefund> = ours.refunds.iter().map(|r| (r.refund_no.as_str(), r)).collect();
    for (key, line) in &seen_refunds {
        out.refund_fees.insert((*key).to_string(), line.fee_minor);
        match our_refunds.get(key) {
            None => out.findings.push(Finding {
                kind: FindingKind::RefundAtGatewayOnly,
                subject: (*key).to_string(),
                order_no: order_of_refund
                    .get(key)
                    .or_else(|| order_of_ref.get(line.merchant_ref.as_str()))
                    .map(|o| (*o).to_string()),
                ours: "no refund recorded that day".to_string(),
                theirs: format!("refunded {} of {}", money(line.amount_minor, &line.currency), line.merchant_ref),
            }),
            Some(r) => out.findings.extend(differs(key, &r.order_no, r.amount_minor, &r.currency, line)),
        }
    }
    for r in &day_refunds {
        if !seen_refunds.contains_key(r.refund_no.as_str()) {
            out.findings.push(Finding {
                kind: FindingKind::RefundInKassaOnly,
                subject: r.refund_no.clone(),
                order_no: Some(r.order_no.clone()),
                ours: format!("refunded {}", money(r.amount_minor, &r.currency)),
                theirs: "not in the statement".to_string(),
            });
        }
    }

    if let Some(declared) = statement.declared {
        let lines = i64::try_from(statement.lines.len()).unwrap_or(i64::MAX);
        let sides = [
            ("count", declared.count, lines),
            ("gross", declared.gross_minor, out.gateway.gross_minor),
            ("refunds", declared.refunds_minor, out.gateway.refunds_minor),
            ("fees", declared.fees_minor, out.gateway.fees_minor),
        ];
        for (field, said, summed) in sides {
            if said != summed {
                out.findings.push(Finding {
                    kind: FindingKind::SummaryDiffers,
                    subject: field.to_string(),
                    order_no: None,
                    ours: format!("the lines add up to {summed}"),
                    theirs: format!("the summary says {said}"),
                });
            }
        }
    }
    disputes::reconcile(&statement.lines, ours, &mut out);
    for (subject, said, summed) in &statement.checks {
        if said != summed {
            out.findings.push(Finding {
                kind: FindingKind::SummaryDiffers,
                subject: subject.clone(),
                order_no: None,
                ours: format!("the rows add up to {summed}"),
                theirs: format!("the summary says {said}"),
            });
        }
    }
    out.findings.sort();
    out
}

/// The instants a statement day covers, `[from, to)` in milliseconds: midnight to midnight at the
/// gateway's offset (Beijing time for WeChat Pay and Alipay, UTC for Stripe).
pub fn day_window(day: time::Date, offset: time::UtcOffset) -> (i64, i64) {
    let start = day.midnight().assume_offset(offset);
    let from = start.unix_timestamp().saturating_mul(1000);
    (from, from.saturating_add(DAY_MS))
}

const DAY_MS: i64 = 86_400_000;

/// The day a statement is due for at `now`: the gateway's previous day (at its offset), once the
/// job's local time (at `job_offset`) has passed `job_at` (minutes after midnight); `None` before.
pub fn due_day(
    now_ms: i64,
    job_at_minutes: u16,
    job_offset: time::UtcOffset,
    gateway_offset: time::UtcOffset,
) -> Option<time::Date> {
    let now = time::OffsetDateTime::from_unix_timestamp(now_ms.div_euclid(1000)).ok()?;
    let local = now.to_offset(job_offset);
    let minutes = u16::from(local.hour()) * 60 + u16::from(local.minute());
    if minutes < job_at_minutes {
        return None;
    }
    now.to_offset(gateway_offset).date().previous_day()
}

/// Most fetches of one day's statement before it is given up and alerted (every
/// [`STATEMENT_RETRY_MS`]: twelve hours of tries).
pub const STATEMENT_TRIES_MAX: i64 = 48;
/// Time between fetches of a statement not published yet or not reachable.
pub const STATEMENT_RETRY_MS: i64 = 15 * 60 * 1000;

/// When a day's statement is fetched again after its `tries`th fetch failed (not published, not
/// reached, not readable); `None` once it has had its last try (given up and alerted).
pub fn next_fetch_at(tries: i64, now_ms: i64) -> Option<i64> {
    (tries < STATEMENT_TRIES_MAX).then(|| now_ms.saturating_add(STATEMENT_RETRY_MS))
}

/// Yuan (or any two-decimal major unit) as written in a statement (`60.00`, `-0.27000`, `5`) in
/// minor units, exactly: more decimals are allowed only as zeros (a fee printed with five).
pub fn parse_decimal(text: &str) -> Option<i64> {
    let t = text.trim();
    let (negative, digits) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() || whole.len() > 15 || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !fraction.bytes().all(|b| b.is_ascii_digit()) || (digits.contains('.') && fraction.is_empty()) {
        return None;
    }
    let (cents, rest) = fraction.split_at(fraction.len().min(2));
    if rest.bytes().any(|b| b != b'0') {
        return None;
    }
    let cents: i64 = format!("{cents:0<2}").parse().ok()?;
    let minor = whole.parse::<i64>().ok()?.checked_mul(100)?.checked_add(cents)?;
    Some(if negative { -minor } else { minor })
}

#[path = "statement_disputes.rs"]
mod disputes;

#[cfg(test)]
#[path = "statement_tests.rs"]
mod tests;

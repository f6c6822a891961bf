//! A statement's dispute lines (a dispute's withdrawal and reinstatement, as Stripe's balance
//! shows them) against kassa's cases of those disputes: a part of [`super::reconcile`], in a file
//! of its own.
//!
//! A dispute's lines of one kind and currency are added up (a fee charged on a line of its own adds
//! to the fee), then compared with the case whose provider case id is the dispute's id: a
//! withdrawal agrees with a case of the same amount and currency; a reinstatement with a case
//! won or still open. A line of a dispute kassa has no case of, a different amount or currency, and
//! a reinstatement of a case lost are findings. kassa's side of the day counts the disputes it has
//! a case of, at the case's amount, with the fee the statement charged.

use std::collections::BTreeMap;

use super::{Finding, FindingKind, LineKind, Ours, Outcome, StatementLine, differs, money};

/// The outcome of a closed case whose money may come back.
const WON: &str = "won";

/// What a finding about a dispute's line is keyed by: the dispute's id, the reinstatement's marked
/// (a day may show both movements of one dispute).
fn subject(kind: LineKind, dispute_id: &str) -> String {
    match kind {
        LineKind::DisputeReinstatement => format!("{dispute_id}:reinstatement"),
        _ => dispute_id.to_string(),
    }
}

/// What the statement shows, for people.
fn shown(line: &StatementLine) -> String {
    let verb = if line.kind == LineKind::DisputeReinstatement { "gave back" } else { "took" };
    let fee = match line.fee_minor {
        0 => String::new(),
        f if f < 0 => format!(", returned a dispute fee of {}", money(-f, &line.currency)),
        f => format!(", charged a dispute fee of {}", money(f, &line.currency)),
    };
    format!("{verb} {}{fee} for dispute {}", money(line.amount_minor, &line.currency), line.gateway_txn_id)
}

/// Reconciles the dispute lines of `lines` against `ours.cases`: findings and kassa's totals into
/// `out` (the gateway's totals are added line by line by the caller).
pub(super) fn reconcile(lines: &[StatementLine], ours: &Ours, out: &mut Outcome) {
    let mut sums: BTreeMap<(LineKind, &str, &str), StatementLine> = BTreeMap::new();
    for line in lines.iter().filter(|l| l.kind.is_dispute()) {
        let key = (line.kind, line.gateway_txn_id.as_str(), line.currency.as_str());
        sums.entry(key)
            .and_modify(|sum| {
                sum.amount_minor = sum.amount_minor.saturating_add(line.amount_minor);
                sum.fee_minor = sum.fee_minor.saturating_add(line.fee_minor);
            })
            .or_insert_with(|| line.clone());
    }
    for ((kind, dispute_id, _), line) in &sums {
        let subject = subject(*kind, dispute_id);
        let Some(case) = ours.cases.get(*dispute_id) else {
            out.findings.push(Finding {
                kind: FindingKind::DisputeCaseMissing,
                subject,
                order_no: None,
                ours: "no case of this dispute yet (run the day again once it has come)".to_string(),
                theirs: shown(line),
            });
            continue;
        };
        let order_no = case.order_no.clone();
        if *kind == LineKind::DisputeReinstatement && !case.open && case.outcome.as_deref() != Some(WON) {
            let outcome = case.outcome.as_deref().unwrap_or("closed");
            out.findings.push(Finding {
                kind: FindingKind::DisputeReinstatedNotWon,
                subject,
                order_no,
                ours: format!("case {} closed: {outcome}", case.case_id),
                theirs: shown(line),
            });
            continue;
        }
        let (Some(amount), Some(currency)) = (case.amount_minor, case.currency.as_deref()) else {
            out.kassa.add(*kind, 0, line.fee_minor);
            out.findings.push(Finding {
                kind: FindingKind::AmountDiffers,
                subject,
                order_no,
                ours: format!("case {} with no amount", case.case_id),
                theirs: shown(line),
            });
            continue;
        };
        out.kassa.add(*kind, amount, line.fee_minor);
        let found = differs(&subject, order_no.as_deref().unwrap_or_default(), amount, currency, line);
        out.findings.extend(found.map(|f| Finding { order_no: order_no.clone(), ..f }));
    }
}

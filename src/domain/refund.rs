//! Refunds as facts of their own. An order keeps its status through a partial refund (the capture
//! stays; what was refunded grows beside it); it moves to `refunding` only when refunds in flight
//! cover everything captured, and to `refunded` only when they all went through. Which messages
//! a status change sends to the shop is decided here too, so a refund never re-sends a payment or
//! a fulfilment request.

use super::refusal::Refusal;
use super::status::OrderStatus;

/// What the order's refunds add up to, read under the order's lock. Refunds of a second capture
/// (a duplicate payment) are not the order's and are left out by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefundTotals {
    /// What the order's payment captured.
    pub captured: i64,
    /// Refunds not failed: requested, processing or succeeded.
    pub committed: i64,
    /// Refunds that went through.
    pub succeeded: i64,
    /// Refunds still requested or processing.
    pub open: i64,
}

/// Longest refund reason kept (characters; control characters are dropped).
pub const REASON_LEN_MAX: usize = 256;
/// Longest refund window that can be configured: ten years.
pub const WINDOW_DAYS_MAX: u32 = 3650;
const DAY_MS: i64 = 24 * 3600 * 1000;

/// The shop's refund rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RefundPolicy {
    /// Merchant refunds only within this many days of the payment; `None`: any time.
    /// Automatic refunds (a late or duplicate payment) are never held to it.
    pub window_days: Option<u32>,
}

/// A merchant's refund request, with what was read about the order under its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefundRequest {
    pub status: OrderStatus,
    pub totals: RefundTotals,
    pub amount: i64,
    /// When the order's payment was captured (ms since the Unix epoch); `None` if never.
    pub paid_at: Option<i64>,
    pub now: i64,
}

/// A refund amount: positive minor units.
pub fn check_amount(amount: i64) -> Result<(), Refusal> {
    if amount > 0 { Ok(()) } else { Err(Refusal::unprocessable("invalid_amount", "amount_minor must be positive")) }
}

/// A refund's reason as stored: no control characters, at most [`REASON_LEN_MAX`] characters.
pub fn clean_reason(reason: &str) -> String {
    reason.chars().filter(|c| !c.is_control()).take(REASON_LEN_MAX).collect()
}

/// Whether an order in `status` holds a capture a merchant may refund.
pub fn refundable(status: OrderStatus) -> bool {
    use OrderStatus::*;
    matches!(status, Paid | Delivered | Refunding | PaidAfterExpiry)
}

/// Refunds of one capture (`committed` not failed so far) plus `amount` stay within `captured`.
pub fn check_within_capture(captured: i64, committed: i64, amount: i64) -> Result<i64, Refusal> {
    let total = committed.checked_add(amount).ok_or_else(|| Refusal::amount_overflow("amount overflows"))?;
    if total > captured {
        return Err(Refusal::conflict(
            "refund_exceeds_captured",
            format!(
                "refunds would total {total}, but {captured} was captured ({committed} already refunded or in flight)"
            ),
        ));
    }
    Ok(total)
}

/// A merchant's refund request: refused, or accepted with the order's new status (`refunding`
/// when the refunds in flight now cover the whole capture).
pub fn decide_request(policy: RefundPolicy, req: RefundRequest) -> Result<Option<OrderStatus>, Refusal> {
    if !refundable(req.status) {
        return Err(Refusal::conflict("not_refundable", format!("the order is {}", req.status)));
    }
    check_amount(req.amount)?;
    check_window(policy, req.paid_at, req.now)?;
    let total = check_within_capture(req.totals.captured, req.totals.committed, req.amount)?;
    Ok((total == req.totals.captured && req.status != OrderStatus::Refunding).then_some(OrderStatus::Refunding))
}

/// The refund window: a payment older than the policy's window may no longer be refunded.
pub fn check_window(policy: RefundPolicy, paid_at: Option<i64>, now: i64) -> Result<(), Refusal> {
    let (Some(days), Some(paid_at)) = (policy.window_days, paid_at) else { return Ok(()) };
    let closes_at = paid_at.saturating_add(i64::from(days).saturating_mul(DAY_MS));
    if now > closes_at {
        return Err(Refusal::conflict(
            "refund_window_closed",
            format!("refunds are accepted within {days} days of payment"),
        )
        .with_details(serde_json::json!({"window_days": days, "paid_at_ms": paid_at, "closed_at_ms": closes_at})));
    }
    Ok(())
}

/// A refund number sent again: it answers the refund it named the first time when it asks the
/// same (`same`: the same order, amount, reason and kind), and is refused otherwise (a refund
/// number is the shop's key for one refund, never a second one).
pub fn may_repeat_refund_no(same: bool) -> Result<(), Refusal> {
    if same {
        return Ok(());
    }
    Err(Refusal::conflict(
        "refund_no_reused",
        "this refund number was used for another refund (other order, amount or reason)",
    ))
}

/// A refund of an order whose payment was never captured.
pub fn nothing_captured() -> Refusal {
    Refusal::conflict("not_refundable", "the order has no captured payment")
}

/// Most lines one refund names.
pub const REFUND_LINES_MAX: usize = 100;

/// An order line as a refund by line reads it: its units, what was paid for them (the line less
/// its share of the discount), and how many were refunded by line already (refunds not failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaidLine {
    pub line_no: i64,
    pub quantity: i64,
    pub paid_minor: i64,
    pub refunded_units: i64,
}

/// What `k` of a line's units were paid for: the line's payment shared by unit, rounded down, so
/// that refunds of its units one by one or all at once add up to exactly what was paid for it.
fn paid_for(line: &PaidLine, k: i64) -> i64 {
    let share = i128::from(line.paid_minor) * i128::from(k) / i128::from(line.quantity.max(1));
    i64::try_from(share).unwrap_or(line.paid_minor)
}

/// A refund of units of named lines (`asked`: line number and units): each line's part, what was
/// paid for those units. Refused for a line the order does not have (`unknown_line`), a line
/// named twice or no units (`invalid_quantity`), units beyond those not yet refunded
/// (`refund_exceeds_line`), or nothing to pay back (`invalid_amount`).
pub fn line_refund(lines: &[PaidLine], asked: &[(i64, i64)]) -> Result<Vec<(i64, i64, i64)>, Refusal> {
    if asked.is_empty() || asked.len() > REFUND_LINES_MAX {
        return Err(Refusal::unprocessable(
            "invalid_quantity",
            format!("a refund names 1 to {REFUND_LINES_MAX} lines"),
        ));
    }
    let mut parts = Vec::with_capacity(asked.len());
    for (i, (line_no, units)) in asked.iter().enumerate() {
        if asked.iter().take(i).any(|(other, _)| other == line_no) || *units <= 0 {
            return Err(Refusal::unprocessable(
                "invalid_quantity",
                format!("line {line_no}: each line once, with a positive quantity"),
            ));
        }
        let line = lines
            .iter()
            .find(|l| l.line_no == *line_no)
            .ok_or_else(|| Refusal::unprocessable("unknown_line", format!("the order has no line {line_no}")))?;
        let left = line.quantity - line.refunded_units;
        if *units > left {
            return Err(Refusal::conflict(
                "refund_exceeds_line",
                format!("line {line_no} has {left} units not refunded yet"),
            )
            .with_details(serde_json::json!({"line_no": line_no, "units_left": left})));
        }
        let amount = paid_for(line, line.refunded_units + units) - paid_for(line, line.refunded_units);
        parts.push((*line_no, *units, amount));
    }
    if parts.iter().map(|p| p.2).sum::<i64>() <= 0 {
        return Err(Refusal::unprocessable("invalid_amount", "nothing was paid for those units"));
    }
    Ok(parts)
}

/// Who asked for a refund.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefundKind {
    /// Asked for by the merchant (admin API or console).
    Merchant,
    /// Automatic: a payment that arrived after the order expired and could not be re-allocated.
    LatePayment,
    /// Automatic: a second capture on an order that was already paid.
    DuplicatePayment,
}

impl RefundKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RefundKind::Merchant => "merchant",
            RefundKind::LatePayment => "late_payment",
            RefundKind::DuplicatePayment => "duplicate_payment",
        }
    }
}

/// Why kassa refunds a payment by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutomaticRefund {
    /// Paid after the order expired or was cancelled, and its stock could not be taken again.
    LatePayment,
    /// A second capture on an order another attempt had already paid.
    DuplicatePayment,
}

impl From<AutomaticRefund> for RefundKind {
    fn from(a: AutomaticRefund) -> Self {
        match a {
            AutomaticRefund::LatePayment => RefundKind::LatePayment,
            AutomaticRefund::DuplicatePayment => RefundKind::DuplicatePayment,
        }
    }
}

/// The number of the refund that returns a second capture: one per gateway transaction, so the
/// same capture reported again cannot be refunded twice. A transaction id that is not a plain
/// identifier has its other characters replaced.
pub fn second_capture_refund_no(gateway_txn_id: &str) -> String {
    let plain: String = gateway_txn_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') { c } else { '-' })
        .take(super::ids::REFUND_NO_LEN_MAX - 4)
        .collect();
    format!("DUP-{plain}")
}

impl AutomaticRefund {
    /// The refund's number (one per attempt, so applying the payment twice cannot refund twice)
    /// and its reason.
    pub fn terms(self, attempt_ref: &str) -> (String, &'static str) {
        match self {
            AutomaticRefund::LatePayment => {
                (format!("LATE-{attempt_ref}"), "paid after the order expired; stock could not be re-allocated")
            }
            AutomaticRefund::DuplicatePayment => (format!("DUP-{attempt_ref}"), "duplicate payment"),
        }
    }
}

/// After a refund settled (the totals include it): the order's new status, if it changes. A
/// `refunding` order becomes `refunded` once every refund went through and they cover the
/// capture; when a failure leaves part of the capture unrefunded it goes back to where it was
/// (`back`). An order not in `refunding` keeps its status.
pub fn decide_settled(status: OrderStatus, back: OrderStatus, totals: RefundTotals) -> Option<OrderStatus> {
    if status != OrderStatus::Refunding {
        return None;
    }
    if totals.committed < totals.captured {
        return Some(back);
    }
    (totals.open == 0 && totals.succeeded >= totals.captured).then_some(OrderStatus::Refunded)
}

/// The messages a status change sends to the shop's systems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusMessages {
    /// `order.<to>`.
    pub status: bool,
    /// `fulfilment.requested` (physical goods to ship).
    pub fulfilment: bool,
}

/// An order is paid once: `order.paid` and `fulfilment.requested` go out when it first becomes
/// paid, never when it returns to `paid` or `delivered` after a refund that did not cover it all.
pub fn status_messages(from: OrderStatus, to: OrderStatus) -> StatusMessages {
    use OrderStatus::*;
    let returning = from == Refunding && matches!(to, Paid | Delivered | PaidAfterExpiry);
    StatusMessages { status: !returning, fulfilment: to == Paid && matches!(from, PendingPayment | PaidAfterExpiry) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use OrderStatus::*;

    fn totals(captured: i64, committed: i64, succeeded: i64, open: i64) -> RefundTotals {
        RefundTotals { captured, committed, succeeded, open }
    }

    const DAY: i64 = 24 * 3600 * 1000;

    fn ask(status: OrderStatus, totals: RefundTotals, amount: i64) -> Result<Option<OrderStatus>, &'static str> {
        let req = RefundRequest { status, totals, amount, paid_at: Some(0), now: DAY };
        decide_request(RefundPolicy::default(), req).map_err(|r| r.code)
    }

    #[test]
    fn a_partial_refund_keeps_the_status_and_a_full_one_starts_refunding() {
        assert_eq!(ask(Paid, totals(1000, 0, 0, 0), 300), Ok(None));
        assert_eq!(ask(Delivered, totals(1000, 300, 300, 0), 700), Ok(Some(Refunding)));
        assert_eq!(ask(PaidAfterExpiry, totals(500, 0, 0, 0), 500), Ok(Some(Refunding)));
        assert_eq!(ask(Paid, totals(1000, 300, 0, 1), 701), Err("refund_exceeds_captured"));
        assert_eq!(ask(Refunding, totals(1000, 1000, 0, 1), 1), Err("refund_exceeds_captured"));
        assert_eq!(ask(Paid, totals(1000, 0, 0, 0), 0), Err("invalid_amount"));
        assert_eq!(ask(Paid, totals(1000, i64::MAX, 0, 0), 1), Err("amount_overflow"));
        for status in [PendingPayment, Expired, Cancelled, Refunded] {
            assert_eq!(ask(status, totals(1000, 0, 0, 0), 1), Err("not_refundable"));
        }
    }

    #[test]
    fn every_accepted_request_is_a_legal_transition() {
        for status in OrderStatus::ALL {
            for (committed, amount) in [(0, 1), (0, 1000), (999, 1), (500, 200)] {
                if let Ok(Some(to)) = ask(*status, totals(1000, committed, 0, 0), amount) {
                    assert!(status.transition(to).is_ok(), "{status} -> {to}");
                }
            }
        }
    }

    /// "Refunds only within 90 days of payment": off by default; on, the 90th day is the last.
    #[test]
    fn a_refund_by_line_pays_back_what_was_paid_for_its_units() {
        // 3 units at 1000 with 100 off the line: 2900 paid, 966 + 967 + 967 by unit.
        let lines = [
            PaidLine { line_no: 1, quantity: 3, paid_minor: 2_900, refunded_units: 0 },
            PaidLine { line_no: 2, quantity: 1, paid_minor: 500, refunded_units: 0 },
        ];
        assert_eq!(line_refund(&lines, &[(1, 1)]).unwrap(), vec![(1, 1, 966)]);
        assert_eq!(line_refund(&lines, &[(1, 3), (2, 1)]).unwrap(), vec![(1, 3, 2_900), (2, 1, 500)]);
        // Unit by unit adds up to the line exactly.
        let mut line = lines[0];
        let mut paid_back = 0;
        for _ in 0..3 {
            paid_back += line_refund(&[line], &[(1, 1)]).unwrap()[0].2;
            line.refunded_units += 1;
        }
        assert_eq!(paid_back, 2_900);
        assert_eq!(line_refund(&[line], &[(1, 1)]).unwrap_err().code, "refund_exceeds_line");
        assert_eq!(line_refund(&lines, &[(9, 1)]).unwrap_err().code, "unknown_line");
        assert_eq!(line_refund(&lines, &[(1, 1), (1, 1)]).unwrap_err().code, "invalid_quantity");
        assert_eq!(line_refund(&lines, &[(1, 0)]).unwrap_err().code, "invalid_quantity");
        assert_eq!(line_refund(&lines, &[]).unwrap_err().code, "invalid_quantity");
        let free = [PaidLine { line_no: 1, quantity: 1, paid_minor: 0, refunded_units: 0 }];
        assert_eq!(line_refund(&free, &[(1, 1)]).unwrap_err().code, "invalid_amount");
    }

    #[test]
    fn the_refund_window_closes_after_its_days() {
        let policy = RefundPolicy { window_days: Some(90) };
        let at = |now: i64| RefundRequest {
            status: Paid,
            totals: totals(1000, 0, 0, 0),
            amount: 100,
            paid_at: Some(DAY),
            now,
        };
        assert_eq!(decide_request(policy, at(DAY + 90 * DAY)), Ok(None));
        let closed = decide_request(policy, at(DAY + 90 * DAY + 1)).unwrap_err();
        assert_eq!(closed.code, "refund_window_closed");
        assert_eq!(closed.details.unwrap()["window_days"], 90);
        assert_eq!(decide_request(RefundPolicy::default(), at(DAY + 10_000 * DAY)), Ok(None));
        // The status is refused first: an order that was never paid has no window to speak of.
        let never = RefundRequest { status: PendingPayment, paid_at: None, ..at(DAY) };
        assert_eq!(decide_request(policy, never).unwrap_err().code, "not_refundable");
    }

    #[test]
    fn refund_terms_are_checked_and_cleaned() {
        use super::super::ids::{REFUND_NO_LEN_MAX, RefundNo};
        assert!(RefundNo::parse("R-1.a_b").is_ok());
        for bad in ["", "a b", "x/y", &"r".repeat(REFUND_NO_LEN_MAX + 1)] {
            assert_eq!(RefundNo::parse(bad).unwrap_err().code, "invalid_refund_no", "{bad:?}");
        }
        assert_eq!(clean_reason("a\nb\u{7}c"), "abc");
        assert_eq!(clean_reason(&"x".repeat(300)).chars().count(), REASON_LEN_MAX);
        assert_eq!(check_within_capture(1000, 400, 600), Ok(1000));
        assert_eq!(check_within_capture(1000, 400, 601).unwrap_err().code, "refund_exceeds_captured");
        assert_eq!(AutomaticRefund::LatePayment.terms("KS1_2").0, "LATE-KS1_2");
        assert_eq!(AutomaticRefund::DuplicatePayment.terms("KS1_2").0, "DUP-KS1_2");
        assert_eq!(second_capture_refund_no("4200001234"), "DUP-4200001234");
        assert_eq!(second_capture_refund_no("a/b c"), "DUP-a-b-c");
        assert_eq!(second_capture_refund_no(&"9".repeat(100)).len(), 64);
    }

    #[test]
    fn settling_moves_only_a_refunding_order() {
        assert_eq!(decide_settled(Paid, Paid, totals(1000, 300, 300, 0)), None);
        assert_eq!(decide_settled(Refunding, Paid, totals(1000, 1000, 600, 1)), None, "one still in flight");
        assert_eq!(decide_settled(Refunding, Paid, totals(1000, 1000, 1000, 0)), Some(Refunded));
        assert_eq!(decide_settled(Refunding, Delivered, totals(1000, 700, 700, 0)), Some(Delivered));
        assert_eq!(decide_settled(Refunding, Paid, totals(1000, 700, 0, 1)), Some(Paid), "a failure reopens it");
        assert_eq!(decide_settled(Refunding, PaidAfterExpiry, totals(500, 0, 0, 0)), Some(PaidAfterExpiry));
        for back in [Paid, Delivered, PaidAfterExpiry] {
            for t in [totals(1000, 1000, 1000, 0), totals(1000, 10, 10, 0)] {
                if let Some(to) = decide_settled(Refunding, back, t) {
                    assert!(Refunding.transition(to).is_ok(), "refunding -> {to}");
                }
            }
        }
    }

    #[test]
    fn payment_and_fulfilment_messages_go_out_once() {
        let first = status_messages(PendingPayment, Paid);
        assert_eq!(first, StatusMessages { status: true, fulfilment: true });
        assert_eq!(status_messages(PaidAfterExpiry, Paid), StatusMessages { status: true, fulfilment: true });
        for to in [Paid, Delivered, PaidAfterExpiry] {
            assert_eq!(status_messages(Refunding, to), StatusMessages { status: false, fulfilment: false });
        }
        assert_eq!(status_messages(Paid, Refunding), StatusMessages { status: true, fulfilment: false });
        assert_eq!(status_messages(Refunding, Refunded), StatusMessages { status: true, fulfilment: false });
        assert_eq!(status_messages(Paid, Delivered), StatusMessages { status: true, fulfilment: false });
    }
}

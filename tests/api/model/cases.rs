//! The complaints and disputes desk in the model: a Stripe dispute opened on a paid order, moved
//! on by the provider's reports, some arriving late (older than what the case keeps: nothing
//! changes), and refunds the operator makes through the case, numbered after the case and the
//! amount (asking again answers the same refund, never a second one).

use kassa::clock::Clock as _;
use kassa::domain::case::{CaseKind, CaseReport};
use kassa::domain::ids::RefundNo;
use kassa::domain::{Currency, Money};
use kassa::store::{cases, sql};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use super::{Model, Real, fail};

/// What Stripe says of a dispute.
#[derive(Debug, Clone, Copy)]
pub(super) enum Word {
    NeedsResponse,
    UnderReview,
    Won,
    Lost,
}

impl Word {
    fn status(self) -> &'static str {
        match self {
            Word::NeedsResponse => "needs_response",
            Word::UnderReview => "under_review",
            Word::Won => "won",
            Word::Lost => "lost",
        }
    }

    /// kassa's state for it, ranked as the domain ranks them (a report of the same instant wins
    /// only by moving the case on).
    fn state(self) -> (&'static str, u8, Option<&'static str>) {
        match self {
            Word::NeedsResponse => ("needs_response", 0, None),
            Word::UnderReview => ("under_review", 1, None),
            Word::Won => ("closed", 2, Some("won")),
            Word::Lost => ("closed", 2, Some("lost")),
        }
    }
}

pub(super) fn word() -> impl Strategy<Value = Word> {
    prop_oneof![Just(Word::NeedsResponse), Just(Word::UnderReview), Just(Word::Won), Just(Word::Lost)]
}

/// A dispute as the model keeps it.
#[derive(Debug, Clone)]
pub(super) struct MCase {
    /// kassa's id of the case.
    id: String,
    status: &'static str,
    rank: u8,
    outcome: Option<&'static str>,
    as_of: i64,
    /// Changes of state or status logged, the opening included.
    logged: usize,
    /// Messages to the shop: (updated, closed).
    topics: (usize, usize),
    /// Refund numbers made through the case.
    refunds: Vec<String>,
}

/// Stripe reports the order's dispute: `late_ms` before now (behind what the case may keep).
pub(super) async fn report(
    real: &Real,
    model: &mut Model,
    i: usize,
    word: Word,
    late_ms: i64,
) -> Result<(), TestCaseError> {
    let now = real.clock.now_ms();
    let o = &model.orders[i];
    // Stripe disputes money it captured: the order's first successful attempt (a zero total has none).
    let Some((attempt_ref, _)) = o.attempts.iter().find(|(_, s)| *s == "succeeded").filter(|_| o.total > 0) else {
        return Ok(());
    };
    model.case_messages += 1;
    let as_of = now - late_ms;
    let r = CaseReport {
        provider: "stripe",
        case_id: format!("du_{}", o.order_no),
        kind: CaseKind::Dispute,
        status: word.status().to_string(),
        reason: Some("fraudulent".into()),
        amount: Some(Money::new(o.total, Currency::parse("CNY").unwrap()).unwrap()),
        attempt_ref: None,
        gateway_txn_id: Some(format!("txn-{attempt_ref}")),
        opened_at: as_of,
        due_by: Some(now + 7 * 86_400_000),
        as_of,
        message_id: Some(format!("evt_case_{}", model.case_messages)),
        message_kind: "charge.dispute.updated".into(),
        body: "{}".into(),
    };
    let recorded = cases::record(&real.db, &r, "notification", now).await.map_err(|e| fail(e.to_string()))?;
    let (_, rank, outcome) = word.state();
    let o = &mut model.orders[i];
    let Some(case) = &mut o.case else {
        let cases::Recorded::Opened { case_id } = recorded else {
            return Err(fail(format!("a first report of a dispute: {recorded:?}")));
        };
        let (status, refunds) = (word.status(), Vec::new());
        o.case = Some(MCase { id: case_id, status, rank, outcome, as_of, logged: 1, topics: (0, 0), refunds });
        return Ok(());
    };
    let newer = as_of > case.as_of || (as_of == case.as_of && rank > case.rank);
    let moved = newer && case.status != word.status();
    if newer {
        case.as_of = as_of;
        if moved {
            case.logged += 1;
            let closed_now = rank == 2 && case.rank != 2;
            if closed_now {
                case.topics.1 += 1
            } else {
                case.topics.0 += 1
            }
            (case.status, case.rank, case.outcome) = (word.status(), rank, outcome);
        }
    }
    match (moved, &recorded) {
        (true, cases::Recorded::Updated { .. }) | (false, cases::Recorded::Unchanged { .. }) => Ok(()),
        _ => Err(fail(format!("{word:?} {late_ms} ms late on {case:?}: {recorded:?}"))),
    }
}

/// The operator refunds a quarter's multiple of the order through its case: the refund number
/// names the case and the amount, so asking again answers the refund made.
pub(super) async fn refund(real: &Real, model: &mut Model, i: usize, quarters: i64) -> Result<(), TestCaseError> {
    let o = &model.orders[i];
    let Some(case) = &o.case else { return Ok(()) };
    let amount = o.total * quarters / 4;
    let refund_no = format!("case-{}-{amount}", case.id);
    if case.refunds.contains(&refund_no) {
        let again = kassa::store::refunds::request(
            &real.db,
            Default::default(),
            &o.order_no,
            &RefundNo::parse(&refund_no).unwrap(),
            amount,
            "model",
            real.clock.now_ms(),
        )
        .await;
        return match again {
            Ok((_, false)) => Ok(()),
            other => Err(fail(format!("case refund {refund_no} asked again: {other:?}"))),
        };
    }
    let made = super::refunds::refund(real, model, i, RefundNo::parse(&refund_no).unwrap(), amount, true).await?;
    if made && let Some(case) = &mut model.orders[i].case {
        case.refunds.push(refund_no);
    }
    Ok(())
}

/// Every case as the model has it: its state, outcome and status, its logged changes and its
/// messages to the shop.
pub(super) async fn compare(real: &Real, model: &Model) -> Result<(), String> {
    for o in &model.orders {
        let Some(case) = &o.case else { continue };
        let detail = cases::get(&real.db, &case.id).await.map_err(|e| e.to_string())?;
        let c = &detail.case;
        let (state, _, _) = match case.rank {
            0 => Word::NeedsResponse.state(),
            1 => Word::UnderReview.state(),
            _ => Word::Won.state(),
        };
        if (c.state.as_str(), c.outcome.as_deref(), c.provider_status.as_str()) != (state, case.outcome, case.status) {
            return Err(format!("case {} is {c:?}, the model says {case:?}", case.id));
        }
        if c.order_no.as_deref() != Some(o.order_no.as_str()) {
            return Err(format!("case {} is not linked to order {}", case.id, o.order_no));
        }
        let logged = detail.events.len();
        let mut sent = [0_i64; 3];
        for (n, topic) in sent.iter_mut().zip(["dispute.opened", "dispute.updated", "dispute.closed"]) {
            *n = sql::query_scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM outbox WHERE order_no = $1 AND topic = $2")
                .bind(o.order_no.as_str())
                .bind(topic)
                .fetch_one(real.db.read_pool())
                .await
                .map_err(|e| e.to_string())?;
        }
        let expected = [1, case.topics.0 as i64, case.topics.1 as i64];
        if (logged, sent) != (case.logged, expected) {
            return Err(format!(
                "case {}: {logged} changes logged and messages {sent:?}, the model says {case:?}",
                case.id
            ));
        }
    }
    Ok(())
}

//! Unit tests of statement reconciliation (`statement.rs`).

use super::*;

fn pay(r: &str, txn: &str, amount: i64, fee: i64) -> StatementLine {
    StatementLine {
        kind: LineKind::Payment,
        merchant_ref: r.into(),
        gateway_txn_id: txn.into(),
        refund_no: None,
        amount_minor: amount,
        fee_minor: fee,
        currency: "CNY".into(),
    }
}

fn refund(r: &str, no: &str, amount: i64, fee: i64) -> StatementLine {
    StatementLine {
        kind: LineKind::Refund,
        merchant_ref: r.into(),
        gateway_txn_id: format!("503{no}"),
        refund_no: Some(no.into()),
        amount_minor: amount,
        fee_minor: fee,
        currency: "CNY".into(),
    }
}

fn ours_pay(order: &str, r: &str, amount: i64) -> OurPayment {
    OurPayment {
        order_no: order.into(),
        attempt_ref: r.into(),
        gateway_txn_id: None,
        amount_minor: amount,
        currency: "CNY".into(),
        discount_minor: 0,
    }
}

#[test]
fn a_second_capture_is_matched_by_its_transaction() {
    // The attempt A_1 was paid twice (42001, then 42009); kassa recorded both.
    let statement = Statement {
        lines: vec![pay("A_1", "42001", 6000, 32), pay("A_1", "42009", 6000, 32)],
        declared: None,
        checks: Vec::new(),
    };
    let second = OurPayment { gateway_txn_id: Some("42009".into()), ..ours_pay("A", "A_1", 6000) };
    let ours = Ours {
        payments: vec![ours_pay("A", "A_1", 6000)],
        second_captures: vec![second.clone()],
        second_captures_of_day: ["42009".to_string()].into(),
        ..Default::default()
    };
    let out = reconcile(&statement, &ours);
    assert_eq!(out.findings, vec![], "neither a duplicate line nor a payment kassa does not know");
    assert_eq!((out.kassa.count, out.kassa.gross_minor), (2, 12000));
    assert_eq!(out.kassa, out.gateway);
    // Not in the statement: kassa's second capture is missing from it.
    let statement = Statement { lines: vec![pay("A_1", "42001", 6000, 32)], ..statement };
    let out = reconcile(&statement, &ours);
    let kinds: Vec<_> = out.findings.iter().map(|f| (f.kind, f.subject.as_str())).collect();
    assert_eq!(kinds, vec![(FindingKind::PaidInKassaOnly, "42009")]);
    // Without kassa's record, the second line is the duplicate it is.
    let statement =
        Statement { lines: vec![pay("A_1", "42001", 6000, 32), pay("A_1", "42009", 6000, 32)], ..statement };
    let out = reconcile(&statement, &Ours { second_captures: Vec::new(), ..ours });
    assert_eq!(out.findings.iter().map(|f| f.kind).collect::<Vec<_>>(), vec![FindingKind::Duplicate]);
}

fn dispute(kind: LineKind, id: &str, amount: i64, fee: i64) -> StatementLine {
    StatementLine {
        kind,
        merchant_ref: String::new(),
        gateway_txn_id: id.into(),
        refund_no: None,
        amount_minor: amount,
        fee_minor: fee,
        currency: "USD".into(),
    }
}

fn case(order: &str, amount: i64, open: bool, outcome: Option<&str>) -> OurCase {
    OurCase {
        case_id: format!("case-{order}"),
        order_no: Some(order.into()),
        amount_minor: Some(amount),
        currency: Some("USD".into()),
        open,
        outcome: outcome.map(str::to_string),
    }
}

#[test]
fn a_disputes_withdrawal_and_reinstatement_match_its_case_and_total_apart() {
    use LineKind::{DisputeReinstatement as Back, DisputeWithdrawal as Took};
    let statement = Statement {
        lines: vec![
            StatementLine { currency: "USD".into(), ..pay("A_1", "pi_1", 5000, 175) },
            dispute(Took, "dp_1", 5000, 1500),
            dispute(Back, "dp_1", 5000, -1500),
            // A dispute still open: its withdrawal; a fee charged on a line of its own adds up.
            dispute(Took, "dp_2", 2000, 1500),
            dispute(Took, "dp_2", 0, 1500),
        ],
        declared: None,
        checks: Vec::new(),
    };
    let ours = Ours {
        payments: vec![OurPayment { currency: "USD".into(), ..ours_pay("A", "A_1", 5000) }],
        cases: [
            ("dp_1".to_string(), case("A", 5000, false, Some("won"))),
            ("dp_2".to_string(), case("B", 2000, true, None)),
        ]
        .into(),
        ..Default::default()
    };
    let out = reconcile(&statement, &ours);
    assert_eq!(out.findings, vec![]);
    let totals = Totals {
        count: 1,
        gross_minor: 5000,
        fees_minor: 175,
        disputes_minor: 7000,
        reinstated_minor: 5000,
        dispute_fees_minor: 3000,
        net_minor: 5000 - 175 - 7000 + 5000 - 3000,
        ..Totals::default()
    };
    assert_eq!(out.gateway, totals);
    assert_eq!(out.kassa, totals);
    assert!(out.payment_fees.len() == 1 && out.refund_fees.is_empty(), "a dispute is neither: {out:?}");
    // The case open still: its money may come back before kassa hears it was won.
    let mut open = ours.clone();
    open.cases.insert("dp_1".to_string(), case("A", 5000, true, None));
    assert_eq!(reconcile(&statement, &open).findings, vec![]);
}

#[test]
fn a_dispute_line_without_its_case_or_for_another_amount_is_a_finding() {
    use LineKind::{DisputeReinstatement as Back, DisputeWithdrawal as Took};
    let statement = Statement {
        lines: vec![
            dispute(Took, "dp_new", 900, 1500),
            dispute(Took, "dp_less", 800, 1500),
            StatementLine { currency: "EUR".into(), ..dispute(Took, "dp_eur", 700, 0) },
            dispute(Back, "dp_lost", 600, 0),
            dispute(Back, "dp_new", 900, 0),
        ],
        declared: None,
        checks: Vec::new(),
    };
    let ours = Ours {
        cases: [
            ("dp_less".to_string(), case("L", 1000, true, None)),
            ("dp_eur".to_string(), case("E", 700, true, None)),
            ("dp_lost".to_string(), case("X", 600, false, Some("lost"))),
        ]
        .into(),
        ..Default::default()
    };
    let out = reconcile(&statement, &ours);
    let found: Vec<(&str, &str, Option<&str>)> =
        out.findings.iter().map(|f| (f.kind.code(), f.subject.as_str(), f.order_no.as_deref())).collect();
    assert_eq!(
        found,
        vec![
            ("amount_differs", "dp_less", Some("L")),
            ("currency_differs", "dp_eur", Some("E")),
            ("dispute_case_missing", "dp_new", None),
            ("dispute_case_missing", "dp_new:reinstatement", None),
            ("dispute_reinstated_not_won", "dp_lost:reinstatement", Some("X")),
        ]
    );
    let missing = &out.findings[2];
    assert!(missing.kind.is_critical() && missing.ours.contains("run the day again"), "{missing:?}");
    assert!(missing.theirs.contains("took 9.00 USD") && missing.theirs.contains("fee of 15.00 USD"), "{missing:?}");
    // kassa counts the disputes it has a case of, at the case's amount; the gateway every line.
    assert_eq!((out.kassa.disputes_minor, out.kassa.reinstated_minor), (1000 + 700, 0));
    assert_eq!((out.gateway.disputes_minor, out.gateway.reinstated_minor), (900 + 800 + 700, 1500));
    assert_eq!((out.kassa.dispute_fees_minor, out.gateway.dispute_fees_minor), (1500, 3000));
    // The case arrives: the day's next run finds nothing missing.
    let arrived = Ours {
        cases: ours.cases.into_iter().chain([("dp_new".to_string(), case("N", 900, true, None))]).collect(),
        ..Default::default()
    };
    let codes: Vec<&str> = reconcile(&statement, &arrived).findings.iter().map(|f| f.kind.code()).collect();
    assert!(!codes.contains(&"dispute_case_missing"), "{codes:?}");
}

#[test]
fn amounts_are_read_exactly() {
    assert_eq!(parse_decimal("60.00"), Some(6000));
    assert_eq!(parse_decimal("0.32000"), Some(32));
    assert_eq!(parse_decimal("-0.27000"), Some(-27));
    assert_eq!(parse_decimal("5"), Some(500));
    assert_eq!(parse_decimal("5.1"), Some(510));
    assert_eq!(parse_decimal(" 12.34 "), Some(1234));
    for bad in ["", "-", ".5", "5.", "1.001", "1.2.3", "abc", "1e3", "--1", "99999999999999999.00"] {
        assert_eq!(parse_decimal(bad), None, "{bad}");
    }
}

#[test]
fn an_agreeing_day_finds_nothing_and_totals_both_sides() {
    let statement = Statement {
        lines: vec![pay("A_1", "42001", 6000, 32), pay("B_1", "42002", 2000, 12), refund("A_1", "RF1", 1000, -5)],
        declared: Some(Declared { count: 3, gross_minor: 8000, refunds_minor: 1000, fees_minor: 39 }),
        checks: Vec::new(),
    };
    let ours = Ours {
        // A was given 600 off by a promotion: kassa's side shows it, the gateway's cannot.
        payments: vec![OurPayment { discount_minor: 600, ..ours_pay("A", "A_1", 6000) }, ours_pay("B", "B_1", 2000)],
        refunds: vec![OurRefund {
            order_no: "A".into(),
            refund_no: "RF1".into(),
            amount_minor: 1000,
            currency: "CNY".into(),
        }],
        ..Default::default()
    };
    let out = reconcile(&statement, &ours);
    assert_eq!(out.findings, vec![]);
    let totals = Totals {
        count: 2,
        gross_minor: 8000,
        refunds_minor: 1000,
        fees_minor: 39,
        net_minor: 6961,
        ..Totals::default()
    };
    assert_eq!(out.gateway, totals);
    assert_eq!(out.kassa, Totals { discounts_minor: 600, ..totals });
    assert_eq!(out.payment_fees["A_1"], 32);
    assert_eq!(out.refund_fees["RF1"], -5);
}

#[test]
fn every_kind_of_disagreement_is_found() {
    let statement = Statement {
        lines: vec![
            pay("A_1", "t1", 6000, 0),
            pay("B_1", "t2", 2100, 0),
            pay("X_1", "t3", 500, 0),
            pay("D_1", "t4", 700, 0),
            pay("D_1", "t4", 700, 0),
            StatementLine { currency: "USD".into(), ..pay("E_1", "t5", 900, 0) },
            refund("A_1", "RF-CONSOLE", 300, 0),
        ],
        declared: Some(Declared { count: 7, gross_minor: 1, refunds_minor: 300, fees_minor: 0 }),
        checks: Vec::new(),
    };
    let ours = Ours {
        payments: vec![
            ours_pay("A", "A_1", 6000),
            ours_pay("B", "B_1", 2000),
            ours_pay("C", "C_1", 400),
            ours_pay("D", "D_1", 700),
            ours_pay("E", "E_1", 900),
        ],
        refunds: vec![OurRefund {
            order_no: "A".into(),
            refund_no: "RF2".into(),
            amount_minor: 100,
            currency: "CNY".into(),
        }],
        known_refs: [("X_1".to_string(), "X".to_string())].into(),
        ..Default::default()
    };
    let out = reconcile(&statement, &ours);
    let found: Vec<(&str, &str, Option<&str>)> =
        out.findings.iter().map(|f| (f.kind.code(), f.subject.as_str(), f.order_no.as_deref())).collect();
    assert_eq!(
        found,
        vec![
            ("paid_at_gateway_only", "X_1", Some("X")),
            ("paid_in_kassa_only", "C_1", Some("C")),
            ("amount_differs", "B_1", Some("B")),
            ("currency_differs", "E_1", Some("E")),
            ("refund_at_gateway_only", "RF-CONSOLE", Some("A")),
            ("refund_in_kassa_only", "RF2", Some("A")),
            ("duplicate", "D_1", Some("D")),
            ("summary_differs", "gross", None),
        ]
    );
    let amount = out.findings.iter().find(|f| f.kind == FindingKind::AmountDiffers).unwrap();
    assert_eq!((amount.ours.as_str(), amount.theirs.as_str()), ("20.00 CNY", "21.00 CNY"));
    for kind in FindingKind::ALL {
        assert_eq!(FindingKind::parse(kind.code()), Some(kind));
    }
}

#[test]
fn a_payment_another_days_statement_showed_is_not_missing_from_this_one() {
    let statement = Statement { lines: vec![pay("A_1", "t1", 600, 4)], declared: None, checks: Vec::new() };
    let mut ours = Ours {
        payments: vec![ours_pay("A", "A_1", 600), ours_pay("B", "B_1", 900)],
        settled_elsewhere: [(LineKind::Payment, "B_1".to_string()), (LineKind::Payment, "A_1".to_string())].into(),
        ..Default::default()
    };
    let out = reconcile(&statement, &ours);
    assert_eq!(out.findings, vec![]);
    assert_eq!(out.kassa.count, 1);
    assert_eq!(out.kassa.gross_minor, 600);
    ours.settled_elsewhere.clear();
    let out = reconcile(&statement, &ours);
    assert_eq!(out.findings.len(), 1);
    assert_eq!(out.findings[0].kind, FindingKind::PaidInKassaOnly);
    assert_eq!(out.findings[0].subject, "B_1");
}

#[test]
fn a_line_naming_only_the_gateways_id_is_matched_through_kassas_record_of_it() {
    let line = StatementLine { merchant_ref: String::new(), ..pay("", "pi_1", 600, 20) };
    let statement = Statement {
        lines: vec![line, StatementLine { merchant_ref: String::new(), ..pay("", "pi_9", 5, 0) }],
        declared: None,
        checks: Vec::new(),
    };
    let ours = Ours {
        payments: vec![ours_pay("A", "A_1", 600)],
        ref_of_txn: [("pi_1".to_string(), "A_1".to_string())].into(),
        ..Default::default()
    };
    let out = reconcile(&statement, &ours);
    assert_eq!(out.payment_fees.get("A_1"), Some(&20));
    let found: Vec<(&str, &str)> = out.findings.iter().map(|f| (f.kind.code(), f.subject.as_str())).collect();
    assert_eq!(found, vec![("paid_at_gateway_only", "pi_9")]);
}

#[test]
fn a_statement_is_fetched_again_until_its_last_try() {
    assert_eq!(next_fetch_at(1, 1_000), Some(1_000 + STATEMENT_RETRY_MS));
    assert_eq!(next_fetch_at(STATEMENT_TRIES_MAX - 1, 0), Some(STATEMENT_RETRY_MS));
    assert_eq!(next_fetch_at(STATEMENT_TRIES_MAX, 0), None);
}

#[test]
fn a_beijing_day_starts_at_sixteen_utc_the_day_before() {
    let day = time::macros::date!(2026 - 03 - 01);
    let (from, to) = day_window(day, time::macros::offset!(+8));
    assert_eq!(from, 1_772_294_400_000);
    assert_eq!(to - from, DAY_MS);
    let (utc_from, _) = day_window(day, time::UtcOffset::UTC);
    assert_eq!(utc_from - from, 8 * 3_600_000);
}

#[test]
fn a_day_is_due_after_the_job_time_and_names_the_gateways_yesterday() {
    let beijing = time::macros::offset!(+8);
    // 2026-03-02 01:30 UTC = 09:30 in Beijing.
    let now = time::macros::datetime!(2026 - 03 - 02 01:30 UTC).unix_timestamp() * 1000;
    assert_eq!(due_day(now, 10 * 60, beijing, beijing), None);
    assert_eq!(due_day(now, 9 * 60, beijing, beijing), Some(time::macros::date!(2026 - 03 - 01)));
    // 2026-03-01 20:30 UTC is 04:30 on the 2nd in Beijing: a Beijing gateway's yesterday is the
    // 1st, a UTC gateway's the 28th of February.
    let evening = time::macros::datetime!(2026 - 03 - 01 20:30 UTC).unix_timestamp() * 1000;
    assert_eq!(due_day(evening, 4 * 60, beijing, beijing), Some(time::macros::date!(2026 - 03 - 01)));
    assert_eq!(due_day(evening, 4 * 60, beijing, time::UtcOffset::UTC), Some(time::macros::date!(2026 - 02 - 28)));
}

proptest::proptest! {
    /// Whatever the lines, every payment is found once on one side or matched, and totals
    /// add up line by line.
    #[test]
    fn reconciling_never_panics_and_totals_add_up(
        amounts in proptest::collection::vec((0i64..5, 0i64..1_000_000, -100i64..100, proptest::bool::ANY), 0..40),
        ours_amounts in proptest::collection::vec((0i64..5, 0i64..1_000_000), 0..40),
    ) {
        let lines: Vec<StatementLine> = amounts
            .iter()
            .map(|(r, a, f, is_refund)| if *is_refund { refund(&format!("R_{r}"), &format!("RF{r}"), *a, *f) } else { pay(&format!("R_{r}"), "t", *a, *f) })
            .collect();
        let ours = Ours {
            payments: ours_amounts.iter().map(|(r, a)| ours_pay("O", &format!("R_{r}"), *a)).collect(),
            ..Default::default()
        };
        let out = reconcile(&Statement { lines: lines.clone(), declared: None, checks: Vec::new() }, &ours);
        let gross: i64 = lines.iter().filter(|l| l.kind == LineKind::Payment).map(|l| l.amount_minor).sum();
        proptest::prop_assert_eq!(out.gateway.gross_minor, gross);
        proptest::prop_assert_eq!(out.gateway.net_minor, out.gateway.gross_minor - out.gateway.refunds_minor - out.gateway.fees_minor);
        // Dispute lines never count as payments or refunds, whatever kassa knows of them.
        let mut with_disputes = lines;
        with_disputes.push(dispute(LineKind::DisputeWithdrawal, "dp_1", 700, 1500));
        let out = reconcile(&Statement { lines: with_disputes, declared: None, checks: Vec::new() }, &ours);
        proptest::prop_assert_eq!(out.gateway.gross_minor, gross);
        proptest::prop_assert_eq!((out.gateway.disputes_minor, out.gateway.dispute_fees_minor), (700, 1500));
    }
}

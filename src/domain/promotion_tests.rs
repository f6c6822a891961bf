use std::collections::BTreeMap;

use super::*;
use crate::domain::{Currency, Money};

fn line(sku: &str, unit: i64, quantity: i64) -> PricedLine {
    let cny = Currency::parse("CNY").unwrap();
    let unit = Money::new(unit, cny).unwrap();
    PricedLine {
        sku: sku.into(),
        name: sku.into(),
        kind: "physical".into(),
        quantity,
        unit,
        line_total: unit.checked_mul(quantity).unwrap(),
        discount_minor: 0,
    }
}

fn offer(benefit: Benefit) -> Offer {
    Offer {
        promotion_id: "pr1".into(),
        code: "SPRING".into(),
        status: PromotionStatus::Active,
        rules: Rules {
            benefit,
            skus: Vec::new(),
            min_spend: BTreeMap::new(),
            starts_at: None,
            ends_at: None,
            max_uses: None,
            per_buyer: None,
            first_order_only: false,
        },
        single_use: false,
        uses: 0,
        code_uses: 0,
    }
}

fn amounts(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs.iter().map(|(c, a)| ((*c).to_string(), *a)).collect()
}

#[test]
fn a_percentage_is_rounded_down_and_shared_by_line() {
    let lines = [line("A", 333, 1), line("B", 333, 1), line("C", 334, 1)];
    let d = apply(&offer(Benefit::PercentOff(10)), &lines, "CNY", 0, false).unwrap();
    assert_eq!(d.total_minor, 100);
    assert_eq!(d.per_line.iter().sum::<i64>(), 100);
    assert_eq!(d.per_line, vec![33, 33, 34]);
}

#[test]
fn remainders_go_to_the_largest_fractions_then_the_earlier_line() {
    assert_eq!(allocate(10, &[1, 1, 1]), vec![4, 3, 3]);
    assert_eq!(allocate(2, &[100, 200, 100]), vec![1, 1, 0]);
    assert_eq!(allocate(5, &[0, 5, 0]), vec![0, 5, 0]);
    assert_eq!(allocate(5, &[0, 0]), vec![0, 0]);
    // Every share within its line, the sum exact, for many shapes.
    for amount in 0..=60 {
        let weights = [7, 0, 13, 40];
        let shares = allocate(amount, &weights);
        assert_eq!(shares.iter().sum::<i64>(), amount, "{amount}");
        assert!(shares.iter().zip(weights).all(|(s, w)| *s <= w && *s >= 0), "{amount}: {shares:?}");
    }
}

#[test]
fn a_fixed_amount_never_takes_more_than_the_lines_it_applies_to() {
    let mut o = offer(Benefit::AmountOff(amounts(&[("CNY", 5_000)])));
    o.rules.skus = vec!["TEA".into()];
    let lines = [line("CUP", 900, 1), line("TEA", 1_200, 2)];
    let d = apply(&o, &lines, "CNY", 0, false).unwrap();
    assert_eq!((d.total_minor, d.per_line.clone()), (2_400, vec![0, 2_400]));
    assert_eq!(apply(&o, &lines, "EUR", 0, false).unwrap_err().code, "promotion_not_applicable");
    let only_cups = [line("CUP", 900, 1)];
    let r = apply(&o, &only_cups, "CNY", 0, false).unwrap_err();
    assert_eq!((r.code, r.details.unwrap()["reason"].clone()), ("promotion_not_applicable", json!("skus")));
}

#[test]
fn a_hundred_percent_makes_a_zero_total() {
    let lines = [line("A", 990, 3)];
    let d = apply(&offer(Benefit::PercentOff(100)), &lines, "CNY", 0, false).unwrap();
    assert_eq!(d.total_minor, 2_970);
}

#[test]
fn each_refusal_has_its_code() {
    let lines = [line("A", 1_000, 1)];
    let mut o = offer(Benefit::PercentOff(10));
    o.rules.ends_at = Some(100);
    assert_eq!(apply(&o, &lines, "CNY", 100, false).unwrap_err().code, "promotion_expired");
    assert!(apply(&o, &lines, "CNY", 99, false).is_ok());
    o.rules.ends_at = None;
    o.status = PromotionStatus::Ended;
    assert_eq!(apply(&o, &lines, "CNY", 0, false).unwrap_err().code, "promotion_expired");
    o.status = PromotionStatus::Paused;
    assert_eq!(apply(&o, &lines, "CNY", 0, false).unwrap_err().code, "promotion_not_applicable");
    o.status = PromotionStatus::Active;
    o.rules.starts_at = Some(50);
    assert_eq!(apply(&o, &lines, "CNY", 49, false).unwrap_err().code, "promotion_not_applicable");
    assert!(apply(&o, &lines, "CNY", 50, false).is_ok());
    o.rules.max_uses = Some(3);
    o.uses = 3;
    assert_eq!(apply(&o, &lines, "CNY", 60, false).unwrap_err().code, "promotion_used_up");
    o.uses = 2;
    o.single_use = true;
    o.code_uses = 1;
    assert_eq!(apply(&o, &lines, "CNY", 60, false).unwrap_err().code, "promotion_used_up");
    o.code_uses = 0;
    o.rules.first_order_only = true;
    assert_eq!(apply(&o, &lines, "CNY", 60, true).unwrap_err().code, "promotion_not_applicable");
    assert!(apply(&o, &lines, "CNY", 60, false).is_ok());
    o.rules.min_spend = amounts(&[("CNY", 1_001)]);
    let r = apply(&o, &lines, "CNY", 60, false).unwrap_err();
    assert_eq!((r.code, r.details.unwrap()["min_spend_minor"].clone()), ("promotion_minimum_not_met", json!(1_001)));
    o.rules.min_spend = amounts(&[("CNY", 1_000)]);
    assert!(apply(&o, &lines, "CNY", 60, false).is_ok());
    assert_eq!(apply(&o, &[line("A", 5, 1)], "CNY", 60, false).unwrap_err().code, "promotion_minimum_not_met");
    o.rules.min_spend = BTreeMap::new();
    assert_eq!(apply(&o, &[line("A", 5, 1)], "CNY", 60, false).unwrap_err().code, "promotion_not_applicable");
    assert_eq!(unknown("X").code, "promotion_unknown");
    assert_eq!(limit_per_buyer("X", 1).code, "promotion_limit_per_buyer");
}

#[test]
fn rules_are_checked() {
    let mut rules = offer(Benefit::PercentOff(10)).rules;
    assert!(rules.check().is_ok());
    rules.benefit = Benefit::PercentOff(101);
    assert_eq!(rules.check().unwrap_err().code, "invalid_promotion");
    rules.benefit = Benefit::AmountOff(BTreeMap::new());
    assert!(rules.check().is_err());
    rules.benefit = Benefit::AmountOff(amounts(&[("XXX", 5)]));
    assert!(rules.check().is_err());
    rules.benefit = Benefit::AmountOff(amounts(&[("CNY", 0)]));
    assert!(rules.check().is_err());
    rules.benefit = Benefit::AmountOff(amounts(&[("CNY", 500)]));
    assert!(rules.check().is_ok());
    rules.starts_at = Some(10);
    rules.ends_at = Some(10);
    assert!(rules.check().is_err());
    rules.ends_at = Some(11);
    rules.per_buyer = Some(0);
    assert!(rules.check().is_err());
    rules.per_buyer = Some(1);
    assert!(rules.check().is_ok());
}

#[test]
fn codes_are_kept_in_upper_case() {
    assert_eq!(normalize_code(" spring-25 "), Some("SPRING-25".into()));
    assert_eq!(normalize_code("ab"), None);
    assert_eq!(normalize_code("bad code"), None);
    assert_eq!(normalize_code(&"A".repeat(33)), None);
    assert_eq!(shop_code("x").unwrap_err().code, "invalid_code");
    assert_eq!(batch_prefix(Some("vip-")).unwrap(), "VIP-");
    assert!(batch_prefix(Some("way too long prefix")).is_err());
    assert!(batch_count(0).is_err() && batch_count(BATCH_CODES_MAX + 1).is_err() && batch_count(1).is_ok());
    let code = generated_code("VIP-", &[0, 31, 32, 255, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(code, "VIP-A9A9BCDEFGHJ");
    assert!(normalize_code(&code).is_some());
    assert!(!GENERATED_ALPHABET.iter().any(|c| b"O0I1".contains(c)));
    let mut seen = GENERATED_ALPHABET.to_vec();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 32);
}

#[test]
fn a_buyer_is_the_contact_else_the_session() {
    assert_eq!(buyer_key(Some("a@b.cn"), Some("+86"), "s1"), "email:a@b.cn");
    assert_eq!(buyer_key(None, Some("+8613"), "s1"), "phone:+8613");
    assert_eq!(buyer_key(None, None, "s1"), "session:s1");
}

#[test]
fn operators_pause_resume_and_end() {
    use PromotionStatus::*;
    assert!(may_move(Active, Paused).is_ok() && may_move(Paused, Active).is_ok());
    assert!(may_move(Paused, Ended).is_ok() && may_move(Active, Ended).is_ok());
    assert_eq!(may_move(Ended, Active).unwrap_err().code, "invalid_transition");
    assert!(may_move(Active, Active).is_err());
    assert_eq!(PromotionStatus::parse("paused"), Some(Paused));
}

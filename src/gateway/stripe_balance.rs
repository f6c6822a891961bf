//! Stripe's balance transactions as a day's statement (`Gateway::statement` of `stripe.rs`): the
//! trades (charges and refunds) and the disputes' movements (withdrawals and reinstatements), each
//! a statement line; the rest (payouts, fees billed apart, other adjustments) left out.

use serde_json::Value;

use crate::domain::statement::{LineKind, StatementLine};

/// The reporting categories of a dispute's movements (both `type=adjustment`): the disputed
/// amount (and the dispute fee) taken, and given back when the dispute is won.
const DISPUTE: &str = "dispute";
const DISPUTE_REVERSAL: &str = "dispute_reversal";

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str).unwrap_or_default()
}

fn upper_currency(id: &str, text: &str) -> Result<String, String> {
    let currency = text.to_ascii_uppercase();
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(format!("{id}: currency {currency:?}"));
    }
    Ok(currency)
}

/// A balance transaction as a statement line: a payment (`charge`, `payment`) keyed by the
/// attempt reference in its charge's metadata, else its PaymentIntent; a refund (`refund`,
/// `payment_refund`) by the refund number in its metadata, else its id; a dispute's withdrawal or
/// reinstatement (an `adjustment` reported as `dispute` or `dispute_reversal`) by the dispute's id.
/// `None` for the movements that are neither (payouts, fees billed apart, other adjustments).
pub fn balance_line(bt: &Value) -> Result<Option<StatementLine>, String> {
    let kind = match (text(bt, &["type"]), text(bt, &["reporting_category"])) {
        ("charge" | "payment", _) => LineKind::Payment,
        ("refund" | "payment_refund", _) => LineKind::Refund,
        ("adjustment", DISPUTE) => LineKind::DisputeWithdrawal,
        ("adjustment", DISPUTE_REVERSAL) => LineKind::DisputeReinstatement,
        _ => return Ok(None),
    };
    if kind.is_dispute() {
        return dispute_line(bt, kind).map(Some);
    }
    let id = text(bt, &["id"]);
    let number = |v: &Value, name: &str| v.get(name).and_then(Value::as_i64);
    let source = bt.get("source").filter(|s| s.is_object()).ok_or_else(|| format!("{id}: source not expanded"))?;
    // The charge's (refund's) own amount and currency: the balance's differ when converted.
    let amount = number(source, "amount").or_else(|| number(bt, "amount")).ok_or_else(|| format!("{id}: no amount"))?;
    let currency = upper_currency(
        id,
        match text(source, &["currency"]) {
            "" => text(bt, &["currency"]),
            c => c,
        },
    )?;
    let fee = number(bt, "fee").ok_or_else(|| format!("{id}: no fee"))?;
    let line = match kind {
        LineKind::Payment => StatementLine {
            kind,
            merchant_ref: text(source, &["metadata", "attempt_ref"]).to_string(),
            gateway_txn_id: text(source, &["payment_intent"]).to_string(),
            refund_no: None,
            amount_minor: amount.checked_abs().ok_or_else(|| format!("{id}: amount"))?,
            fee_minor: fee,
            currency,
        },
        _ => StatementLine {
            kind,
            merchant_ref: text(source, &["metadata", "attempt_ref"]).to_string(),
            gateway_txn_id: text(source, &["id"]).to_string(),
            refund_no: Some(text(source, &["metadata", "refund_no"]).to_string()).filter(|r| !r.is_empty()),
            amount_minor: amount.checked_abs().ok_or_else(|| format!("{id}: amount"))?,
            fee_minor: fee,
            currency,
        },
    };
    if line.gateway_txn_id.is_empty() && line.merchant_ref.is_empty() {
        return Err(format!("{id}: names neither an attempt nor a payment intent"));
    }
    Ok(Some(line))
}

/// A dispute's movement: keyed by the dispute's id (its `source`, expanded or not); the amount moved
/// (its sign says which way: taken when negative, given back when positive, the reporting category
/// deciding a fee-only line) and, apart, the dispute fee (negative when returned). When the balance
/// was in another currency than the dispute, the dispute's own amount and currency are kept, as a
/// charge's are.
fn dispute_line(bt: &Value, category: LineKind) -> Result<StatementLine, String> {
    let id = text(bt, &["id"]);
    let source = bt.get("source").unwrap_or(&Value::Null);
    let dispute_id = source.as_str().unwrap_or_else(|| text(source, &["id"]));
    if dispute_id.is_empty() {
        return Err(format!("{id}: names no dispute"));
    }
    let amount = bt.get("amount").and_then(Value::as_i64).ok_or_else(|| format!("{id}: no amount"))?;
    let fee = bt.get("fee").and_then(Value::as_i64).ok_or_else(|| format!("{id}: no fee"))?;
    let currency = upper_currency(id, text(bt, &["currency"]))?;
    let own = (source.get("amount").and_then(Value::as_i64), text(source, &["currency"]));
    let (amount_minor, currency) = match own {
        (Some(own_amount), own_currency)
            if !own_currency.is_empty() && !own_currency.eq_ignore_ascii_case(&currency) =>
        {
            (own_amount, upper_currency(id, own_currency)?)
        }
        _ => (amount, currency),
    };
    let kind = match amount.signum() {
        -1 => LineKind::DisputeWithdrawal,
        1 => LineKind::DisputeReinstatement,
        _ => category,
    };
    Ok(StatementLine {
        kind,
        merchant_ref: String::new(),
        gateway_txn_id: dispute_id.to_string(),
        refund_no: None,
        amount_minor: amount_minor.checked_abs().ok_or_else(|| format!("{id}: amount"))?,
        fee_minor: fee,
        currency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BALANCE_CHARGE: &str = r#"{"id":"txn_1","object":"balance_transaction","type":"charge","amount":8888,"fee":288,"net":8600,"currency":"cny","created":1764547200,"source":{"id":"ch_1","object":"charge","amount":8888,"currency":"cny","payment_intent":"pi_1","metadata":{}}}"#;
    const BALANCE_REFUND: &str = r#"{"id":"txn_2","object":"balance_transaction","type":"refund","amount":-1000,"fee":0,"net":-1000,"currency":"cny","created":1764547300,"source":{"id":"re_1","object":"refund","amount":1000,"currency":"cny","payment_intent":"pi_1","metadata":{"refund_no":"R1","attempt_ref":"KS1_1"}}}"#;

    #[test]
    fn balance_transactions_become_statement_lines() {
        let charge = balance_line(&serde_json::from_str(BALANCE_CHARGE).unwrap()).unwrap().unwrap();
        assert_eq!(
            (
                charge.kind,
                charge.merchant_ref.as_str(),
                charge.gateway_txn_id.as_str(),
                charge.amount_minor,
                charge.fee_minor
            ),
            (LineKind::Payment, "", "pi_1", 8888, 288)
        );
        assert_eq!(charge.currency, "CNY");
        let refund = balance_line(&serde_json::from_str(BALANCE_REFUND).unwrap()).unwrap().unwrap();
        assert_eq!(
            (refund.kind, refund.refund_no.as_deref(), refund.merchant_ref.as_str(), refund.amount_minor),
            (LineKind::Refund, Some("R1"), "KS1_1", 1000)
        );
        let payout = serde_json::json!({"id": "txn_3", "type": "payout", "amount": -5000, "fee": 0, "source": "po_1"});
        assert_eq!(balance_line(&payout), Ok(None));
        let unexpanded = BALANCE_CHARGE.replace(r#""source":{"id":"ch_1","object":"charge","amount":8888,"currency":"cny","payment_intent":"pi_1","metadata":{}}"#, r#""source":"ch_1""#);
        assert!(balance_line(&serde_json::from_str(&unexpanded).unwrap()).unwrap_err().contains("not expanded"));
    }

    proptest::proptest! {
        /// Any JSON, or a real balance transaction with a byte changed: a line, nothing or a
        /// refusal, never a panic.
        #[test]
        fn no_balance_transaction_makes_the_reader_panic(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512),
            at in 0usize..600,
            byte in proptest::num::u8::ANY,
        ) {
            if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                let _ = balance_line(&v);
            }
            for real in [BALANCE_CHARGE, BALANCE_REFUND, BALANCE_DISPUTE] {
                let mut damaged = real.as_bytes().to_vec();
                let i = at % damaged.len();
                damaged[i] = byte;
                if let Ok(v) = serde_json::from_slice::<Value>(&damaged) {
                    let _ = balance_line(&v);
                }
            }
        }
    }

    const BALANCE_DISPUTE: &str = r#"{"id":"txn_4","object":"balance_transaction","type":"adjustment","reporting_category":"dispute","amount":-8888,"fee":1500,"fee_details":[{"amount":1500,"currency":"cny","description":"Dispute fee","type":"stripe_fee"}],"net":-10388,"currency":"cny","created":1764547400,"source":{"id":"dp_1","object":"dispute","amount":8888,"currency":"cny","payment_intent":"pi_1","status":"needs_response"}}"#;

    #[test]
    fn a_disputes_withdrawal_and_reinstatement_become_lines_of_their_own() {
        let took = balance_line(&serde_json::from_str(BALANCE_DISPUTE).unwrap()).unwrap().unwrap();
        assert_eq!(
            (took.kind, took.gateway_txn_id.as_str(), took.amount_minor, took.fee_minor, took.currency.as_str()),
            (LineKind::DisputeWithdrawal, "dp_1", 8888, 1500, "CNY")
        );
        assert!(took.merchant_ref.is_empty() && took.refund_no.is_none());
        // Given back, the fee returned; the dispute not expanded.
        let back = serde_json::json!({"id": "txn_5", "type": "adjustment", "reporting_category": "dispute_reversal",
            "amount": 8888, "fee": -1500, "currency": "cny", "source": "dp_1"});
        let back = balance_line(&back).unwrap().unwrap();
        assert_eq!(
            (back.kind, back.gateway_txn_id.as_str(), back.amount_minor, back.fee_minor),
            (LineKind::DisputeReinstatement, "dp_1", 8888, -1500)
        );
        // A fee on its own line: the category says which movement it belongs to.
        let fee = serde_json::json!({"id": "txn_6", "type": "adjustment", "reporting_category": "dispute",
            "amount": 0, "fee": 1500, "currency": "usd", "source": "dp_2"});
        assert_eq!(balance_line(&fee).unwrap().unwrap().kind, LineKind::DisputeWithdrawal);
        // Converted: the dispute's own amount and currency.
        let converted = serde_json::json!({"id": "txn_7", "type": "adjustment", "reporting_category": "dispute",
            "amount": -1234, "fee": 1500, "currency": "usd", "source": {"id": "dp_3", "amount": 8888, "currency": "cny"}});
        let converted = balance_line(&converted).unwrap().unwrap();
        assert_eq!((converted.amount_minor, converted.currency.as_str()), (8888, "CNY"));
        // Other adjustments are not read; a dispute movement naming no dispute is refused.
        let other = serde_json::json!({"id": "txn_8", "type": "adjustment", "reporting_category": "refund_failure",
            "amount": 500, "fee": 0, "currency": "usd", "source": "re_1"});
        assert_eq!(balance_line(&other), Ok(None));
        let nameless = serde_json::json!({"id": "txn_9", "type": "adjustment", "reporting_category": "dispute",
            "amount": -500, "fee": 0, "currency": "usd"});
        assert!(balance_line(&nameless).unwrap_err().contains("names no dispute"));
    }
}

//! Stripe's disputes and early fraud warnings as kassa's cases (docs/gateways/stripe.md): read
//! from `charge.dispute.*` and `radar.early_fraud_warning.*` events, from the lists of the
//! backstop poll, and from what an evidence submission or an acceptance answers. A dispute's
//! state is its `status`, never the event's type, so events out of order do no harm.

use serde_json::Value;

use crate::clock::Millis;
use crate::domain::case::{CaseKind, CaseReport, WARNING_ACTIONABLE, WARNING_NOT_ACTIONABLE};
use crate::domain::ids::is_plain_id;
use crate::domain::{Currency, Money};

/// The gateway's name, as the cases name their provider.
pub const PROVIDER: &str = "stripe";

/// Cases asked for per page of a list (Stripe's most).
pub const CASE_PAGE: usize = 100;
/// Pages of one list read at most in one poll.
pub const CASE_PAGES_MAX: usize = 20;
/// Evidence fields sent at most in one submission, and the longest text of one.
pub const EVIDENCE_FIELDS_MAX: usize = 32;
pub const EVIDENCE_TEXT_MAX: usize = 20_000;

/// The evidence fields kassa may fill in and the operator may edit (Stripe's text fields; the
/// file fields are uploaded at Stripe).
pub const EVIDENCE_FIELDS: &[&str] = &[
    "access_activity_log",
    "billing_address",
    "cancellation_policy_disclosure",
    "cancellation_rebuttal",
    "customer_email_address",
    "customer_name",
    "customer_purchase_ip",
    "duplicate_charge_explanation",
    "duplicate_charge_id",
    "product_description",
    "refund_policy_disclosure",
    "refund_refusal_explanation",
    "service_date",
    "shipping_address",
    "shipping_carrier",
    "shipping_date",
    "shipping_tracking_number",
    "uncategorized_text",
];

fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str).unwrap_or_default()
}

fn seconds(v: &Value, path: &[&str]) -> Option<Millis> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_i64).map(|s| s.saturating_mul(1000))
}

/// A field that may come as an id or as the expanded object.
fn id_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    let field = v.get(key)?;
    field.as_str().or_else(|| field.get("id").and_then(Value::as_str)).filter(|id| is_plain_id(id))
}

/// Whether an event type is about a case.
pub fn is_case_event(kind: &str) -> bool {
    kind.starts_with("charge.dispute.") || kind.starts_with("radar.early_fraud_warning.")
}

/// Where a report comes from: its provider time, message id and kind, and the message.
pub struct Origin {
    pub as_of: Millis,
    pub message_id: Option<String>,
    pub message_kind: String,
    pub body: String,
}

/// A Dispute object as a case report.
pub fn dispute_report(object: &Value, origin: Origin) -> Result<CaseReport, String> {
    let id = text(object, &["id"]);
    if !is_plain_id(id) {
        return Err("dispute without an id".into());
    }
    let status = text(object, &["status"]);
    if status.is_empty() {
        return Err(format!("dispute {id} without a status"));
    }
    let currency = Currency::parse(&text(object, &["currency"]).to_ascii_uppercase()).ok();
    let amount = object.get("amount").and_then(Value::as_i64).zip(currency).and_then(|(a, c)| Money::new(a, c).ok());
    Ok(CaseReport {
        provider: PROVIDER,
        case_id: id.to_string(),
        kind: CaseKind::Dispute,
        status: status.to_string(),
        reason: Some(text(object, &["reason"]).to_string()).filter(|r| !r.is_empty()),
        amount,
        attempt_ref: None,
        gateway_txn_id: id_of(object, "payment_intent").map(str::to_string),
        opened_at: seconds(object, &["created"]).unwrap_or(origin.as_of),
        due_by: seconds(object, &["evidence_details", "due_by"]),
        as_of: origin.as_of,
        message_id: origin.message_id,
        message_kind: origin.message_kind,
        body: origin.body,
    })
}

/// An EarlyFraudWarning object as a case report: `actionable` or `not_actionable`.
pub fn warning_report(object: &Value, origin: Origin) -> Result<CaseReport, String> {
    let id = text(object, &["id"]);
    if !is_plain_id(id) {
        return Err("early fraud warning without an id".into());
    }
    let actionable = object.get("actionable").and_then(Value::as_bool).unwrap_or(false);
    Ok(CaseReport {
        provider: PROVIDER,
        case_id: id.to_string(),
        kind: CaseKind::FraudWarning,
        status: if actionable { WARNING_ACTIONABLE } else { WARNING_NOT_ACTIONABLE }.to_string(),
        reason: Some(text(object, &["fraud_type"]).to_string()).filter(|r| !r.is_empty()),
        amount: None,
        attempt_ref: None,
        gateway_txn_id: id_of(object, "payment_intent").map(str::to_string),
        opened_at: seconds(object, &["created"]).unwrap_or(origin.as_of),
        due_by: None,
        as_of: origin.as_of,
        message_id: origin.message_id,
        message_kind: origin.message_kind,
        body: origin.body,
    })
}

/// A verified event about a case (its signature checked by the caller): `None` for any other
/// event type.
pub fn event_report(event: &Value, body: &[u8]) -> Option<Result<CaseReport, String>> {
    let kind = text(event, &["type"]);
    if !is_case_event(kind) {
        return None;
    }
    let object = event.get("data").and_then(|d| d.get("object")).cloned().unwrap_or(Value::Null);
    let Some(as_of) = seconds(event, &["created"]) else {
        return Some(Err("event without its creation time".into()));
    };
    let origin = Origin {
        as_of,
        message_id: Some(text(event, &["id"]).to_string()).filter(|id| is_plain_id(id)),
        message_kind: kind.to_string(),
        body: String::from_utf8_lossy(body).into_owned(),
    };
    Some(match kind.starts_with("charge.dispute.") {
        true => dispute_report(&object, origin),
        false => warning_report(&object, origin),
    })
}

/// An object of a list, or an API answer, as a case report of `now`.
pub fn fetched_report(object: &Value, kind: CaseKind, message_kind: &str, now: Millis) -> Result<CaseReport, String> {
    let origin =
        Origin { as_of: now, message_id: None, message_kind: message_kind.to_string(), body: object.to_string() };
    match kind {
        CaseKind::FraudWarning => warning_report(object, origin),
        _ => dispute_report(object, origin),
    }
}

/// The evidence form of a submission: each named field (one kassa knows), bounded.
pub fn evidence_form(evidence: &[(String, String)], submit: bool) -> Result<Vec<(String, String)>, String> {
    if evidence.len() > EVIDENCE_FIELDS_MAX {
        return Err(format!("at most {EVIDENCE_FIELDS_MAX} evidence fields"));
    }
    let mut form = Vec::with_capacity(evidence.len() + 1);
    for (field, value) in evidence {
        if !EVIDENCE_FIELDS.contains(&field.as_str()) {
            return Err(format!("unknown evidence field {field}"));
        }
        if value.chars().count() > EVIDENCE_TEXT_MAX {
            return Err(format!("evidence field {field} is longer than {EVIDENCE_TEXT_MAX} characters"));
        }
        form.push((format!("evidence[{field}]"), value.clone()));
    }
    form.push(("submit".to_string(), submit.to_string()));
    Ok(form)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_dispute_event_reads_as_a_case() {
        let event = json!({"id": "evt_1", "type": "charge.dispute.created", "created": 1_700_000_100, "data": {"object": {
            "id": "du_1", "status": "needs_response", "amount": 8888, "currency": "usd", "reason": "fraudulent",
            "payment_intent": "pi_1", "created": 1_700_000_000, "evidence_details": {"due_by": 1_700_900_000}
        }}});
        let r = event_report(&event, b"{}").unwrap().unwrap();
        assert_eq!((r.case_id.as_str(), r.status.as_str(), r.kind), ("du_1", "needs_response", CaseKind::Dispute));
        assert_eq!(r.amount.map(|m| (m.amount_minor(), m.currency().code().to_string())), Some((8888, "USD".into())));
        assert_eq!(
            (r.gateway_txn_id.as_deref(), r.due_by, r.as_of),
            (Some("pi_1"), Some(1_700_900_000_000), 1_700_000_100_000)
        );
        assert_eq!((r.message_id.as_deref(), r.message_kind.as_str()), (Some("evt_1"), "charge.dispute.created"));
        let warning = json!({"id": "evt_2", "type": "radar.early_fraud_warning.created", "created": 1, "data": {"object": {
            "id": "issfr_1", "actionable": true, "fraud_type": "made_with_stolen_card", "payment_intent": "pi_1", "created": 1
        }}});
        let r = event_report(&warning, b"{}").unwrap().unwrap();
        assert_eq!((r.kind, r.status.as_str()), (CaseKind::FraudWarning, WARNING_ACTIONABLE));
        assert!(event_report(&json!({"type": "checkout.session.completed"}), b"{}").is_none());
        let no_time = json!({"id": "evt_3", "type": "charge.dispute.updated", "data": {"object": {"id": "du_1", "status": "won"}}});
        assert!(event_report(&no_time, b"{}").unwrap().is_err());
    }

    #[test]
    fn evidence_is_bounded_to_known_fields() {
        let form = evidence_form(&[("product_description".into(), "A key".into())], true).unwrap();
        assert_eq!(
            form,
            vec![("evidence[product_description]".into(), "A key".into()), ("submit".into(), "true".into())]
        );
        assert!(evidence_form(&[("receipt".into(), "file_1".into())], true).is_err());
        assert!(evidence_form(&[("uncategorized_text".into(), "x".repeat(EVIDENCE_TEXT_MAX + 1))], false).is_err());
    }
}

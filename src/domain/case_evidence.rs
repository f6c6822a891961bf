//! The evidence kassa suggests for a Stripe dispute from what it knows of the order, and the
//! operator's edits over it.

/// What kassa knows of a case's order, for the evidence it suggests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvidenceFacts {
    pub order_no: String,
    pub contact_email: Option<String>,
    /// Each line's name and units.
    pub lines: Vec<(String, i64)>,
    /// The order's total as money, and when it was paid (RFC 3339 date and time).
    pub total: String,
    pub paid_at: Option<String>,
    /// Card keys handed out with the order, and each time the buyer was shown them: when (RFC
    /// 3339), where (`order_page`, `api`, `lookup_link`, `email`, `admin`) and from which address.
    pub keys_delivered: i64,
    pub reveals: Vec<(String, String, Option<String>)>,
    /// Refunds that went through, as money.
    pub refunded: Option<String>,
}

/// Reveals listed at most in the suggested access log.
pub const REVEALS_SHOWN_MAX: usize = 50;

/// The evidence kassa suggests for a dispute from what it knows (Stripe's field names); the
/// operator edits it before it is submitted.
pub fn suggest_evidence(f: &EvidenceFacts) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(email) = &f.contact_email {
        out.push(("customer_email_address".to_string(), email.clone()));
    }
    let goods: Vec<String> = f.lines.iter().map(|(name, units)| format!("{units} × {name}")).collect();
    if !goods.is_empty() {
        out.push(("product_description".to_string(), goods.join("; ")));
    }
    if let Some(paid_at) = &f.paid_at {
        out.push(("service_date".to_string(), paid_at.chars().take(10).collect()));
    }
    if !f.reveals.is_empty() {
        let log: Vec<String> = f
            .reveals
            .iter()
            .take(REVEALS_SHOWN_MAX)
            .map(|(at, channel, addr)| match addr {
                Some(addr) => format!("{at} keys shown to the buyer ({channel}) from {addr}"),
                None => format!("{at} keys shown to the buyer ({channel})"),
            })
            .collect();
        out.push(("access_activity_log".to_string(), log.join("\n")));
    }
    let mut summary = format!("Order {} for {}", f.order_no, f.total);
    if let Some(paid_at) = &f.paid_at {
        summary.push_str(&format!(", paid {paid_at}"));
    }
    if f.keys_delivered > 0 {
        summary.push_str(&format!(
            "; {} digital key(s) delivered, shown to the buyer {} time(s)",
            f.keys_delivered,
            f.reveals.len()
        ));
    }
    if let Some(refunded) = &f.refunded {
        summary.push_str(&format!("; refunded {refunded}"));
    }
    summary.push('.');
    out.push(("uncategorized_text".to_string(), summary));
    out
}

/// The evidence to submit: the suggestion with the operator's fields over it (an empty value
/// leaves a field out).
pub fn merge_evidence(suggested: Vec<(String, String)>, edits: &[(String, String)]) -> Vec<(String, String)> {
    let mut merged: std::collections::BTreeMap<String, String> = suggested.into_iter().collect();
    for (field, value) in edits {
        match value.trim().is_empty() {
            true => merged.remove(field),
            false => merged.insert(field.clone(), value.clone()),
        };
    }
    merged.into_iter().collect()
}

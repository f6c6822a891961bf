//! Complaints and disputes: a case a payment provider opened about a payment. Its state is the
//! provider's word (a Stripe dispute's `status`, a complaint's state), mapped here to the three
//! states an operator works by; the newest word wins whatever order messages arrive in; the
//! deadline that matters next is decided here, and what the shop and the operator are told.

use crate::domain::Money;

/// Milliseconds since the Unix epoch (the domain reads no clock: times come in).
type Millis = i64;

/// Who opened the case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseKind {
    /// A Stripe dispute (an inquiry, `warning_*`, included).
    Dispute,
    /// A Stripe early fraud warning: best answered by a refund before a dispute opens.
    FraudWarning,
    /// A WeChat Pay or Alipay complaint.
    Complaint,
}

impl CaseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CaseKind::Dispute => "dispute",
            CaseKind::FraudWarning => "fraud_warning",
            CaseKind::Complaint => "complaint",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [CaseKind::Dispute, CaseKind::FraudWarning, CaseKind::Complaint].into_iter().find(|k| k.as_str() == text)
    }

    /// The outbox topics' prefix: `dispute.*` for Stripe's cases, `complaint.*` for complaints.
    pub fn topic_prefix(self) -> &'static str {
        match self {
            CaseKind::Dispute | CaseKind::FraudWarning => "dispute",
            CaseKind::Complaint => "complaint",
        }
    }
}

/// Where a case stands, as an operator works it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CaseState {
    /// The merchant is to act: answer, submit evidence, refund.
    NeedsResponse,
    /// With the provider or the buyer; nothing due from the merchant.
    UnderReview,
    /// Settled, one way or the other (`outcome`).
    Closed,
}

impl CaseState {
    pub fn as_str(self) -> &'static str {
        match self {
            CaseState::NeedsResponse => "needs_response",
            CaseState::UnderReview => "under_review",
            CaseState::Closed => "closed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [CaseState::NeedsResponse, CaseState::UnderReview, CaseState::Closed].into_iter().find(|s| s.as_str() == text)
    }
}

/// Which deadline `due_at` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DueKind {
    /// Stripe: evidence must be submitted by then, or the dispute is lost.
    Evidence,
    /// WeChat Pay: a first reply within 24 hours of the complaint.
    FirstReply,
    /// WeChat Pay: the complaint resolved within 72 hours.
    Resolution,
}

impl DueKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DueKind::Evidence => "evidence",
            DueKind::FirstReply => "first_reply",
            DueKind::Resolution => "resolution",
        }
    }
}

/// A case as the provider reports it, in one message (a notification, a poll's copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseReport {
    pub provider: &'static str,
    /// The provider's id of the case.
    pub case_id: String,
    pub kind: CaseKind,
    /// The provider's own status, kept as it said it.
    pub status: String,
    pub reason: Option<String>,
    pub amount: Option<Money>,
    /// kassa's attempt reference, where the provider names it (`out_trade_no`).
    pub attempt_ref: Option<String>,
    /// The provider's payment id (a PaymentIntent, a transaction id).
    pub gateway_txn_id: Option<String>,
    /// When the provider opened the case.
    pub opened_at: Millis,
    /// The provider's own deadline (Stripe's `evidence_details.due_by`), if any.
    pub due_by: Option<Millis>,
    /// The provider's time of this word: an event's creation, or the poll's fetch.
    pub as_of: Millis,
    /// The message's id at the provider (an event id), if it has one.
    pub message_id: Option<String>,
    /// The message's kind (an event type, `poll`).
    pub message_kind: String,
    /// The message as it arrived.
    pub body: String,
}

/// What a report makes of the case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    pub state: CaseState,
    pub outcome: Option<&'static str>,
    pub due: Option<(DueKind, Millis)>,
}

/// A Stripe early fraud warning's status as kassa keeps it: whether it can still be acted on.
pub const WARNING_ACTIONABLE: &str = "actionable";
pub const WARNING_NOT_ACTIONABLE: &str = "not_actionable";

/// The state a report puts its case in, and the deadline that matters next.
pub fn decide(report: &CaseReport) -> Decided {
    let closed = |outcome| Decided { state: CaseState::Closed, outcome: Some(outcome), due: None };
    let open = |state| Decided { state, outcome: None, due: None };
    match (report.provider, report.kind) {
        ("stripe", CaseKind::FraudWarning) => match report.status.as_str() {
            WARNING_ACTIONABLE => open(CaseState::NeedsResponse),
            _ => closed(WARNING_NOT_ACTIONABLE),
        },
        ("stripe", _) => match report.status.as_str() {
            "needs_response" | "warning_needs_response" => Decided {
                state: CaseState::NeedsResponse,
                outcome: None,
                // `due_by` 0: no response is allowed.
                due: report.due_by.filter(|d| *d > 0).map(|d| (DueKind::Evidence, d)),
            },
            "under_review" | "warning_under_review" => open(CaseState::UnderReview),
            "won" => closed("won"),
            "lost" => closed("lost"),
            "prevented" => closed("prevented"),
            "warning_closed" => closed("warning_closed"),
            // A status Stripe adds later: the operator looks.
            _ => open(CaseState::NeedsResponse),
        },
        ("wechatpay", CaseKind::Complaint) => match report.status.as_str() {
            "PENDING" => Decided {
                state: CaseState::NeedsResponse,
                outcome: None,
                due: Some((DueKind::FirstReply, report.opened_at.saturating_add(FIRST_REPLY_MS))),
            },
            "PROCESSING" => Decided {
                state: CaseState::NeedsResponse,
                outcome: None,
                due: Some((DueKind::Resolution, report.opened_at.saturating_add(RESOLUTION_MS))),
            },
            "PROCESSED" => closed(OUTCOME_RESOLVED),
            // A state WeChat adds later: the operator looks.
            _ => open(CaseState::NeedsResponse),
        },
        // Alipay names no deadline in its answers, and kassa sets none of its own: a deadline
        // kassa invented would raise alarms Alipay does not hold the merchant to.
        ("alipay", CaseKind::Complaint) => match report.status.as_str() {
            "MERCHANT_PROCESSING" => open(CaseState::NeedsResponse),
            "MERCHANT_FEEDBACKED" | "PLATFORM_PROCESSING" => open(CaseState::UnderReview),
            "FINISHED" => closed(OUTCOME_RESOLVED),
            "CANCELLED" => closed(OUTCOME_WITHDRAWN),
            "PLATFORM_FINISH" => closed(OUTCOME_PLATFORM_DECIDED),
            "CLOSED" => closed(OUTCOME_SYSTEM_CLOSED),
            // A status Alipay adds later: the operator looks.
            _ => open(CaseState::NeedsResponse),
        },
        _ => open(CaseState::NeedsResponse),
    }
}

/// How far the provider's clock (an event's `created`) may run ahead of kassa's: a copy kassa
/// fetched at its `now` still counts as newer than an event stamped up to this much later.
pub const FETCH_SKEW_MS: Millis = 300_000;

impl CaseReport {
    /// A copy kassa fetched (a list, an action's answer) rather than a message the provider
    /// sent: it has no message id, and it is the provider's word as of the fetch.
    pub fn is_fetched(&self) -> bool {
        self.message_id.is_none()
    }

    /// A notice ([`is_notice`]): the provider's message `message_id` names its complaint `case_id`,
    /// not the complaint's state; the complaint is to be fetched.
    pub fn notice(
        provider: &'static str,
        case_id: &str,
        message_id: &str,
        message_kind: String,
        body: String,
        now: Millis,
    ) -> Self {
        CaseReport {
            provider,
            case_id: case_id.to_string(),
            kind: CaseKind::Complaint,
            status: String::new(),
            reason: None,
            amount: None,
            attempt_ref: None,
            gateway_txn_id: None,
            opened_at: now,
            due_by: None,
            as_of: now,
            message_id: Some(message_id.to_string()),
            message_kind,
            body,
        }
    }
}

/// WeChat Pay: a complaint is first answered within 24 hours of being made …
pub const FIRST_REPLY_MS: Millis = 24 * 3_600_000;
/// … and resolved within 72.
pub const RESOLUTION_MS: Millis = 72 * 3_600_000;
/// How a complaint the provider marks processed ends.
pub const OUTCOME_RESOLVED: &str = "resolved";
/// How an Alipay complaint ends when the buyer withdraws it (`CANCELLED`) …
pub const OUTCOME_WITHDRAWN: &str = "withdrawn";
/// … when Alipay's own service settles it (`PLATFORM_FINISH`) …
pub const OUTCOME_PLATFORM_DECIDED: &str = "platform_decided";
/// … and when Alipay's system closes it (`CLOSED`).
pub const OUTCOME_SYSTEM_CLOSED: &str = "system_closed";
/// The longest reply WeChat Pay and Alipay take to a complaint, in characters (Alipay's feedback
/// text has the same limit).
pub const REPLY_CHARS_MAX: usize = 200;

/// What kassa knows when the operator completes a complaint: whether the order was refunded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub refunded: bool,
}

/// Alipay's processing result for a completed complaint (`feedback.submit`): its feedback code
/// and the text the buyer is shown. A refund kassa sent is a refund "by other means" (`02`, as
/// opposed to Alipay's guarantee fund, `00`); otherwise the after-sales service is done (`05`).
pub fn alipay_feedback(c: Completion) -> (&'static str, &'static str) {
    match c.refunded {
        true => ("02", "已为您办理退款，请留意支付宝到账通知。"),
        false => ("05", "已为您完成售后处理，如仍有疑问请随时联系我们。"),
    }
}

/// Whether an operator's reply to a complaint can be sent: 1-200 characters, not blank.
pub fn reply_fits(text: &str) -> bool {
    !text.trim().is_empty() && text.chars().count() <= REPLY_CHARS_MAX
}

/// Whether a report only announces that a case changed (a WeChat complaint notification names the
/// complaint, not its state): the case is to be fetched.
pub fn is_notice(report: &CaseReport) -> bool {
    report.status.is_empty()
}

/// Whether a report is newer than the word the case keeps (`as_of`, and the state it gave):
/// a message newer than it wins; one of the same instant wins only by moving the case on (closed
/// over under review over needs response), so that two events of one second settle alike in any
/// order. A fetched copy is the provider's present word: it wins over any message stamped before
/// the fetch, allowing for the two clocks' skew ([`FETCH_SKEW_MS`]).
pub fn is_newer(kept_as_of: Millis, kept: CaseState, report: &CaseReport, reported: CaseState) -> bool {
    match report.is_fetched() {
        true => report.as_of.saturating_add(FETCH_SKEW_MS) >= kept_as_of,
        false => report.as_of > kept_as_of || (report.as_of == kept_as_of && reported > kept),
    }
}

/// The outbox topic of a case's change: `…opened` for a new case, `…closed` when it closes,
/// `…updated` for any other change of state or status.
pub fn topic(kind: CaseKind, new: bool, closed_now: bool) -> String {
    let event = match (new, closed_now) {
        (true, _) => "opened",
        (false, true) => "closed",
        (false, false) => "updated",
    };
    format!("{}.{event}", kind.topic_prefix())
}

/// How long before a deadline the operator is warned, by default.
pub const DUE_MARGIN_MS_DEFAULT: Millis = 6 * 3_600_000;

/// The longest warning an operator may ask for (`--case-due-margin-hours`): WeChat Pay's
/// resolution deadline is 72 hours, so a longer margin would warn of every case at once.
pub const DUE_MARGIN_HOURS_MAX: u64 = 72;

/// What a deadline calls for at `now`: nothing yet, a warning, or an alarm (missed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    Later,
    DueSoon,
    Overdue,
}

pub fn urgency(due_at: Millis, now: Millis, margin_ms: Millis) -> Urgency {
    if now >= due_at {
        Urgency::Overdue
    } else if now >= due_at.saturating_sub(margin_ms) {
        Urgency::DueSoon
    } else {
        Urgency::Later
    }
}

pub use super::case_evidence::{EvidenceFacts, REVEALS_SHOWN_MAX, merge_evidence, suggest_evidence};
pub use super::case_images::{
    ALIPAY_IMAGE_BYTES_MAX, ALIPAY_IMAGES, ALIPAY_IMAGES_MAX, CASE_IMAGE_BYTES_MAX, CASE_IMAGES_MAX, CaseImage,
    ImageKind, ImageLimits, ImageRefusal, check_images,
};

/// The provider's reason of a complaint that asks for a refund (WeChat Pay's `problem_type`).
pub const REFUND_REQUEST_REASON: &str = "REFUND";
/// The longest reason for refusing a refund request, and the longest remark to the provider's
/// staff, in characters (WeChat Pay's).
pub const REJECT_REASON_CHARS_MAX: usize = 200;
pub const REMARK_CHARS_MAX: usize = 200;
/// The most working days the merchant may say it will take to start an approved refund: kassa's
/// bound, well inside the 72 hours a complaint has to be resolved in plus weekends.
pub const LAUNCH_REFUND_DAYS_MAX: u32 = 7;

/// The merchant's answer to a buyer's refund request. Approving says the merchant will refund
/// within `launch_refund_days` working days (0: today); the money moves only through a refund.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundVerdict {
    Approve { launch_refund_days: u32 },
    Reject { reason: String, remark: Option<String> },
}

impl RefundVerdict {
    /// The verdict's name as the API and the case's log say it.
    pub fn as_str(&self) -> &'static str {
        match self {
            RefundVerdict::Approve { .. } => "approve",
            RefundVerdict::Reject { .. } => "reject",
        }
    }

    /// Whether images go with the verdict: a refusal's evidence; an approval takes none.
    pub fn takes_images(&self) -> bool {
        matches!(self, RefundVerdict::Reject { .. })
    }

    /// A verdict from what the operator sent: `approve` with the days (0 when none), or `reject`
    /// with a reason (1-200 characters, not blank) and an optional remark (at most 200).
    pub fn parse(
        action: &str,
        launch_refund_days: Option<u32>,
        reason: Option<&str>,
        remark: Option<&str>,
    ) -> Result<RefundVerdict, ImageRefusal> {
        let remark = remark.map(str::trim).filter(|r| !r.is_empty());
        match action {
            "approve" => {
                let days = launch_refund_days.unwrap_or(0);
                if days > LAUNCH_REFUND_DAYS_MAX {
                    return Err((
                        "invalid_launch_refund_days",
                        format!("the refund starts within 0-{LAUNCH_REFUND_DAYS_MAX} working days"),
                    ));
                }
                Ok(RefundVerdict::Approve { launch_refund_days: days })
            }
            "reject" => {
                let reason = reason.map(str::trim).unwrap_or_default();
                if reason.is_empty() || reason.chars().count() > REJECT_REASON_CHARS_MAX {
                    return Err((
                        "invalid_reject_reason",
                        format!("a refusal gives its reason in 1-{REJECT_REASON_CHARS_MAX} characters"),
                    ));
                }
                if remark.is_some_and(|r| r.chars().count() > REMARK_CHARS_MAX) {
                    return Err(("invalid_remark", format!("a remark is at most {REMARK_CHARS_MAX} characters")));
                }
                Ok(RefundVerdict::Reject { reason: reason.to_string(), remark: remark.map(str::to_string) })
            }
            _ => Err(("invalid_action", "the action is approve or reject".to_string())),
        }
    }
}

/// Whether a case's refund request may be answered now: an open complaint whose reason is a
/// refund request. The refusal's code and message otherwise.
pub fn refund_request_answerable(
    kind: CaseKind,
    state: CaseState,
    reason: Option<&str>,
) -> Result<(), (&'static str, &'static str)> {
    if kind != CaseKind::Complaint {
        return Err(("case_not_a_complaint", "only a complaint asks for a refund"));
    }
    if state == CaseState::Closed {
        return Err(("case_closed", "the case is closed"));
    }
    if reason != Some(REFUND_REQUEST_REASON) {
        return Err(("not_a_refund_request", "the buyer did not ask for a refund in this complaint"));
    }
    Ok(())
}

/// The longest notification URL kassa registers with a provider.
pub const NOTIFY_URL_CHARS_MAX: usize = 256;

/// Whether `url` may be registered as where a provider sends its case notifications: HTTPS, with
/// a host, no query or fragment, at most [`NOTIFY_URL_CHARS_MAX`] characters.
pub fn notify_url_fits(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("https://") else { return false };
    let host = rest.split('/').next().unwrap_or_default();
    url.chars().count() <= NOTIFY_URL_CHARS_MAX
        && !host.is_empty()
        && !url.contains(['?', '#'])
        && !url.chars().any(|c| c.is_whitespace() || c.is_control())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stripe(kind: CaseKind, status: &str, due_by: Option<Millis>) -> CaseReport {
        CaseReport {
            provider: "stripe",
            case_id: "du_1".into(),
            kind,
            status: status.into(),
            reason: None,
            amount: None,
            attempt_ref: None,
            gateway_txn_id: None,
            opened_at: 0,
            due_by,
            as_of: 0,
            message_id: None,
            message_kind: "poll".into(),
            body: String::new(),
        }
    }

    #[test]
    fn a_disputes_state_is_its_status() {
        let d = decide(&stripe(CaseKind::Dispute, "needs_response", Some(5_000)));
        assert_eq!(
            d,
            Decided { state: CaseState::NeedsResponse, outcome: None, due: Some((DueKind::Evidence, 5_000)) }
        );
        assert_eq!(decide(&stripe(CaseKind::Dispute, "needs_response", Some(0))).due, None);
        assert_eq!(decide(&stripe(CaseKind::Dispute, "warning_under_review", None)).state, CaseState::UnderReview);
        for (status, outcome) in
            [("won", "won"), ("lost", "lost"), ("prevented", "prevented"), ("warning_closed", "warning_closed")]
        {
            let d = decide(&stripe(CaseKind::Dispute, status, Some(5_000)));
            assert_eq!((d.state, d.outcome, d.due), (CaseState::Closed, Some(outcome), None), "{status}");
        }
        assert_eq!(decide(&stripe(CaseKind::Dispute, "something_new", None)).state, CaseState::NeedsResponse);
        assert_eq!(decide(&stripe(CaseKind::FraudWarning, WARNING_ACTIONABLE, None)).state, CaseState::NeedsResponse);
        assert_eq!(
            decide(&stripe(CaseKind::FraudWarning, WARNING_NOT_ACTIONABLE, None)).outcome,
            Some(WARNING_NOT_ACTIONABLE)
        );
    }

    #[test]
    fn a_complaints_state_and_deadline_follow_wechat() {
        let mut r = stripe(CaseKind::Complaint, "PENDING", None);
        r.provider = "wechatpay";
        r.opened_at = 1_000;
        assert_eq!(
            decide(&r),
            Decided {
                state: CaseState::NeedsResponse,
                outcome: None,
                due: Some((DueKind::FirstReply, 1_000 + 86_400_000))
            }
        );
        r.status = "PROCESSING".into();
        assert_eq!(decide(&r).due, Some((DueKind::Resolution, 1_000 + 3 * 86_400_000)));
        assert_eq!(decide(&r).state, CaseState::NeedsResponse);
        r.status = "PROCESSED".into();
        assert_eq!(decide(&r), Decided { state: CaseState::Closed, outcome: Some("resolved"), due: None });
        r.status = "SOMETHING_NEW".into();
        assert_eq!(decide(&r), Decided { state: CaseState::NeedsResponse, outcome: None, due: None });
        r.status = String::new();
        assert!(is_notice(&r));
        assert!(reply_fits("已为您退款") && reply_fits(&"字".repeat(200)));
        assert!(!reply_fits("  ") && !reply_fits(&"字".repeat(201)));
    }

    #[test]
    fn an_alipay_complaints_state_is_its_status_and_has_no_deadline() {
        let mut r = stripe(CaseKind::Complaint, "MERCHANT_PROCESSING", None);
        r.provider = "alipay";
        let open = |state| Decided { state, outcome: None, due: None };
        let closed = |outcome| Decided { state: CaseState::Closed, outcome: Some(outcome), due: None };
        for (status, decided) in [
            ("MERCHANT_PROCESSING", open(CaseState::NeedsResponse)),
            ("MERCHANT_FEEDBACKED", open(CaseState::UnderReview)),
            ("PLATFORM_PROCESSING", open(CaseState::UnderReview)),
            ("FINISHED", closed("resolved")),
            ("CANCELLED", closed("withdrawn")),
            ("PLATFORM_FINISH", closed("platform_decided")),
            ("CLOSED", closed("system_closed")),
            ("SOMETHING_NEW", open(CaseState::NeedsResponse)),
        ] {
            r.status = status.into();
            assert_eq!(decide(&r), decided, "{status}");
        }
        // The same statuses from another provider are not Alipay's.
        r.provider = "wechatpay";
        r.status = "FINISHED".into();
        assert_eq!(decide(&r).state, CaseState::NeedsResponse);
        let (code, text) = alipay_feedback(Completion { refunded: true });
        assert_eq!(code, "02");
        assert!(reply_fits(text));
        let (code, text) = alipay_feedback(Completion { refunded: false });
        assert_eq!(code, "05");
        assert!(reply_fits(text));
    }

    #[test]
    fn the_newest_word_wins_in_any_order() {
        let sent =
            |as_of| CaseReport { as_of, message_id: Some("evt_1".into()), ..stripe(CaseKind::Dispute, "won", None) };
        assert!(is_newer(10, CaseState::Closed, &sent(11), CaseState::NeedsResponse));
        assert!(!is_newer(11, CaseState::NeedsResponse, &sent(10), CaseState::Closed));
        // One instant: the report that moves the case on wins, whichever came first.
        assert!(is_newer(10, CaseState::UnderReview, &sent(10), CaseState::Closed));
        assert!(!is_newer(10, CaseState::Closed, &sent(10), CaseState::UnderReview));
        assert!(!is_newer(10, CaseState::Closed, &sent(10), CaseState::Closed));
        // A fetched copy wins over events stamped before it, the provider's clock a little ahead.
        let fetched = |as_of| CaseReport { as_of, ..stripe(CaseKind::Dispute, "under_review", None) };
        assert!(is_newer(1_000_000, CaseState::Closed, &fetched(1_000_000 - FETCH_SKEW_MS), CaseState::UnderReview));
        assert!(!is_newer(1_000_001, CaseState::Closed, &fetched(1_000_000 - FETCH_SKEW_MS), CaseState::UnderReview));
    }

    #[test]
    fn evidence_is_suggested_from_the_order_and_edited() {
        let facts = EvidenceFacts {
            order_no: "O1".into(),
            contact_email: Some("a@example.com".into()),
            lines: vec![("Game key".into(), 2)],
            total: "88.88 USD".into(),
            paid_at: Some("2026-01-02T03:04:05Z".into()),
            keys_delivered: 2,
            reveals: vec![("2026-01-02T03:05:00Z".into(), "order_page".into(), Some("203.0.113.9".into()))],
            refunded: None,
        };
        let suggested = suggest_evidence(&facts);
        let get = |name: &str| suggested.iter().find(|(f, _)| f == name).map(|(_, v)| v.clone());
        assert_eq!(get("customer_email_address").as_deref(), Some("a@example.com"));
        assert_eq!(get("product_description").as_deref(), Some("2 × Game key"));
        assert_eq!(get("service_date").as_deref(), Some("2026-01-02"));
        assert!(get("access_activity_log").unwrap().contains("from 203.0.113.9"));
        assert!(
            get("uncategorized_text").unwrap().contains("2 digital key(s) delivered, shown to the buyer 1 time(s)")
        );
        let merged = merge_evidence(
            suggested,
            &[("customer_email_address".into(), " ".into()), ("customer_name".into(), "A. Buyer".into())],
        );
        assert!(!merged.iter().any(|(f, _)| f == "customer_email_address"));
        assert!(merged.contains(&("customer_name".into(), "A. Buyer".into())));
    }

    #[test]
    fn topics_and_urgency() {
        assert_eq!(topic(CaseKind::Dispute, true, false), "dispute.opened");
        assert_eq!(topic(CaseKind::FraudWarning, false, true), "dispute.closed");
        assert_eq!(topic(CaseKind::Complaint, false, false), "complaint.updated");
        assert_eq!(urgency(100, 10, 50), Urgency::Later);
        assert_eq!(urgency(100, 50, 50), Urgency::DueSoon);
        assert_eq!(urgency(100, 100, 50), Urgency::Overdue);
    }

    #[test]
    fn a_refund_request_is_approved_or_refused_with_a_reason() {
        assert_eq!(
            RefundVerdict::parse("approve", None, None, None),
            Ok(RefundVerdict::Approve { launch_refund_days: 0 })
        );
        assert_eq!(
            RefundVerdict::parse("approve", Some(LAUNCH_REFUND_DAYS_MAX + 1), None, None).unwrap_err().0,
            "invalid_launch_refund_days"
        );
        assert_eq!(
            RefundVerdict::parse("reject", None, Some(" 已发货 "), Some("  ")),
            Ok(RefundVerdict::Reject { reason: "已发货".into(), remark: None })
        );
        for reason in [None, Some("  "), Some("字".repeat(201)).as_deref()] {
            assert_eq!(RefundVerdict::parse("reject", None, reason, None).unwrap_err().0, "invalid_reject_reason");
        }
        assert_eq!(
            RefundVerdict::parse("reject", None, Some("x"), Some(&"字".repeat(201))).unwrap_err().0,
            "invalid_remark"
        );
        assert_eq!(RefundVerdict::parse("maybe", None, None, None).unwrap_err().0, "invalid_action");
        assert!(!RefundVerdict::Approve { launch_refund_days: 0 }.takes_images());
        assert!(RefundVerdict::Reject { reason: "x".into(), remark: None }.takes_images());
        let refund = Some(REFUND_REQUEST_REASON);
        assert!(refund_request_answerable(CaseKind::Complaint, CaseState::NeedsResponse, refund).is_ok());
        assert_eq!(
            refund_request_answerable(CaseKind::Complaint, CaseState::Closed, refund).unwrap_err().0,
            "case_closed"
        );
        assert_eq!(
            refund_request_answerable(CaseKind::Complaint, CaseState::UnderReview, Some("OTHERS")).unwrap_err().0,
            "not_a_refund_request"
        );
        assert_eq!(
            refund_request_answerable(CaseKind::Dispute, CaseState::NeedsResponse, refund).unwrap_err().0,
            "case_not_a_complaint"
        );
    }

    #[test]
    fn a_notify_url_is_https_and_bounded() {
        assert!(notify_url_fits("https://shop.example/notify/wechatpay"));
        for bad in ["http://shop.example/notify", "https:///x", "https://a.example/n?x=1", "https://a.example/a b"] {
            assert!(!notify_url_fits(bad), "{bad}");
        }
        let long = format!("https://a.example/{}", "x".repeat(NOTIFY_URL_CHARS_MAX));
        assert!(!notify_url_fits(&long));
    }
}

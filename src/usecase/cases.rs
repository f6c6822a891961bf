//! The complaints and disputes desk: cases taken in from the providers' notifications and from a
//! daily backstop poll, and the operator's actions on them (evidence, accepting the loss, a reply,
//! completing a complaint, answering its refund request, with images uploaded first), each sent to
//! the provider outside any transaction and its answer recorded as the provider's word; refunds
//! through the refund engine; held-back keys released; the provider's notification URL registered.

use super::Context;
use crate::domain::case::{self, CaseKind, CaseReport, CaseState};
use crate::domain::ids::{OrderNo, RefundNo};
use crate::error::{Error, Result};
use crate::gateway::{Gateway, GatewayError};
use crate::store::cases::{self, CaseDetail, CaseKey, Recorded};
use crate::store::refunds::RefundView;

/// How far back the backstop poll lists cases: a Stripe dispute may open up to 120 days after
/// its payment, and its own course runs for weeks after.
pub const POLL_WINDOW_MS: i64 = 180 * 86_400_000;

/// A case reported by a provider's notification (verified by its gateway): recorded. A notice
/// (a WeChat complaint notification, which names the complaint only) is kept with its case and
/// the case fetched, outside any transaction, and recorded as fetched; a fetch that fails is an
/// error, so that the provider sends the notification again.
pub async fn on_notification(cx: &Context, report: &CaseReport) -> Result<Recorded> {
    let recorded = if case::is_notice(report) {
        let gateway = gateway_of(cx, report.provider)?;
        let kept = cases::keep_message(&cx.db, report, cases::FROM_NOTIFICATION, cx.now_ms()).await?;
        let fetched = gateway.fetch_case(&report.case_id, cx.now_ms()).await.map_err(action_error)?;
        let recorded = cases::record(&cx.db, &fetched, cases::FROM_NOTIFICATION, cx.now_ms()).await?;
        if kept.is_none() {
            cases::keep_message(&cx.db, report, cases::FROM_NOTIFICATION, cx.now_ms()).await?;
        }
        recorded
    } else {
        cases::record(&cx.db, report, cases::FROM_NOTIFICATION, cx.now_ms()).await?
    };
    metrics::counter!("kassa_case_messages_total", "provider" => report.provider, "source" => "notification")
        .increment(1);
    Ok(recorded)
}

/// What one backstop poll of a provider found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct Polled {
    pub provider: String,
    /// Cases the provider listed.
    pub listed: usize,
    /// Of those, the ones kassa did not know (a lost notification) and the ones that moved on.
    pub opened: usize,
    pub updated: usize,
}

/// Lists the provider's cases of the poll window and records each: what a lost notification
/// missed is found here.
pub async fn poll(cx: &Context, provider: &str) -> Result<Polled> {
    let gateway = gateway_of(cx, provider)?;
    let now = cx.now_ms();
    let reports = gateway.list_cases(now.saturating_sub(POLL_WINDOW_MS), now).await.map_err(action_error)?;
    let mut polled = Polled { provider: provider.to_string(), listed: reports.len(), ..Polled::default() };
    for report in &reports {
        match cases::record(&cx.db, report, cases::FROM_POLL, now).await? {
            Recorded::Opened { .. } => polled.opened += 1,
            Recorded::Updated { .. } => polled.updated += 1,
            Recorded::Unchanged { .. } => {}
        }
    }
    metrics::counter!("kassa_case_messages_total", "provider" => provider.to_string(), "source" => "poll")
        .increment(reports.len() as u64);
    Ok(polled)
}

/// Polls every configured provider whose adapter lists cases; a provider that cannot be reached
/// is reported and the others are polled.
pub async fn poll_all(cx: &Context) -> Vec<Result<Polled>> {
    let mut out = Vec::new();
    for name in cx.gateways.names() {
        match poll(cx, name).await {
            Err(e) if e.code() == "cases_unsupported" => {}
            polled => out.push(polled),
        }
    }
    out
}

fn gateway_of<'a>(cx: &'a Context, provider: &str) -> Result<&'a std::sync::Arc<dyn Gateway>> {
    cx.gateways
        .get(provider)
        .ok_or_else(|| Error::conflict("gateway_not_configured", format!("{provider} is not configured")))
}

fn action_error(e: GatewayError) -> Error {
    match e {
        GatewayError::Invalid { code, message } => Error::unprocessable(code, message),
        GatewayError::Unavailable(why) => {
            Error::upstream("gateway_unavailable", format!("the provider could not be reached: {why}"))
        }
    }
}

/// The evidence kassa suggests for a dispute, from its order.
pub async fn suggested_evidence(cx: &Context, id: &str) -> Result<Vec<(String, String)>> {
    let key = cases::key_of(&cx.db, id).await?;
    Ok(match &key.order_no {
        Some(order_no) => case::suggest_evidence(&cases::evidence_facts(&cx.db, order_no).await?),
        None => Vec::new(),
    })
}

/// A dispute that still takes an answer: open, and a dispute (not a warning, not a complaint).
fn answerable(key: &CaseKey) -> Result<()> {
    if key.kind != CaseKind::Dispute {
        return Err(Error::conflict("case_not_a_dispute", "only a dispute takes evidence or is accepted"));
    }
    if key.state == CaseState::Closed {
        return Err(Error::conflict("case_closed", "the case is closed"));
    }
    Ok(())
}

/// Sends the dispute's evidence — kassa's suggestion with the operator's `edits` over it — and
/// submits it (or stages it when `submit` is false); records what was sent and the provider's
/// answer.
pub async fn submit_evidence(cx: &Context, id: &str, edits: &[(String, String)], submit: bool) -> Result<CaseDetail> {
    let key = cases::key_of(&cx.db, id).await?;
    answerable(&key)?;
    let evidence = case::merge_evidence(suggested_evidence(cx, id).await?, edits);
    let gateway = gateway_of(cx, &key.provider)?;
    let answer =
        gateway.submit_evidence(&key.provider_case_id, &evidence, submit, cx.now_ms()).await.map_err(action_error)?;
    let sent = serde_json::to_string(&serde_json::json!({
        "submit": submit,
        "evidence": evidence.iter().cloned().collect::<std::collections::BTreeMap<_, _>>(),
    }))
    .unwrap_or_default();
    let kind = if submit { "evidence_submitted" } else { "evidence_staged" };
    cases::record_operator(&cx.db, id, kind, &sent, cx.now_ms()).await?;
    cases::record(&cx.db, &answer, cases::FROM_POLL, cx.now_ms()).await?;
    cases::get(&cx.db, id).await
}

/// Accepts the loss of a dispute at the provider; records it and the provider's answer.
pub async fn accept(cx: &Context, id: &str) -> Result<CaseDetail> {
    let key = cases::key_of(&cx.db, id).await?;
    answerable(&key)?;
    let gateway = gateway_of(cx, &key.provider)?;
    let answer = gateway.accept_case(&key.provider_case_id, cx.now_ms()).await.map_err(action_error)?;
    cases::record_operator(&cx.db, id, "accepted", "{}", cx.now_ms()).await?;
    cases::record(&cx.db, &answer, cases::FROM_POLL, cx.now_ms()).await?;
    cases::get(&cx.db, id).await
}

/// The operator releases the card keys a case holds back: the buyer sees them again. Answers the
/// case; 409 `keys_not_held` when it holds none.
pub async fn release_keys(cx: &Context, id: &str) -> Result<CaseDetail> {
    cases::key_of(&cx.db, id).await?;
    if !cases::release_keys(&cx.db, id, cx.now_ms()).await? {
        return Err(Error::conflict("keys_not_held", "the case holds no keys back"));
    }
    cases::get(&cx.db, id).await
}

/// The refund number of a case's refund of `amount_minor`: one per case and amount, so that asking
/// again (a double click, a retry) answers the same refund.
pub fn case_refund_no(case_id: &str, amount_minor: i64) -> String {
    format!("case-{case_id}-{amount_minor}")
}

/// Refunds `amount_minor` of the case's order through kassa's refund engine (never more than was
/// captured; the refund worker sends what could not go at once), and keeps the operator's action
/// with the case. Answers the refund and whether this call made it.
pub async fn refund(cx: &Context, id: &str, amount_minor: i64) -> Result<(RefundView, bool)> {
    let key = cases::key_of(&cx.db, id).await?;
    let Some(order_no) = &key.order_no else {
        return Err(Error::conflict("case_unlinked", "the case names no payment kassa knows"));
    };
    let refund_no = RefundNo::parse(&case_refund_no(&key.id, amount_minor))?;
    let reason = format!("{} {} {}", key.provider, key.kind.as_str(), key.provider_case_id);
    let (refund, created) =
        super::refund::request(cx, &OrderNo::stored(order_no.clone()), &refund_no, amount_minor, &reason).await?;
    if created {
        let body = serde_json::json!({"refund_no": refund.refund_no, "amount_minor": amount_minor}).to_string();
        cases::record_operator(&cx.db, id, "refund_requested", &body, cx.now_ms()).await?;
    }
    Ok((refund, created))
}

/// A complaint that still takes the operator's word: open, and a complaint.
fn open_complaint(key: &CaseKey) -> Result<()> {
    if key.kind != CaseKind::Complaint {
        return Err(Error::conflict("case_not_a_complaint", "only a complaint takes a reply or is completed"));
    }
    if key.state == CaseState::Closed {
        return Err(Error::conflict("case_closed", "the case is closed"));
    }
    Ok(())
}

/// Checks the operator's images (kassa's rules, then the provider's where it takes less) and
/// uploads each to the provider, one after the other and outside any transaction: their media ids,
/// in order.
async fn upload_images(gateway: &dyn Gateway, images: Vec<Vec<u8>>) -> Result<Vec<String>> {
    let images = case::check_images(images).map_err(|(code, why)| Error::unprocessable(code, why))?;
    if let Some(limits) = gateway.case_image_limits() {
        limits.admit(&images).map_err(|(code, why)| Error::unprocessable(code, why))?;
    }
    let mut media_ids = Vec::with_capacity(images.len());
    for image in &images {
        media_ids.push(gateway.upload_case_image(image).await.map_err(action_error)?);
    }
    Ok(media_ids)
}

/// Sends the operator's reply to a complaint (1-200 characters) with up to four images (each
/// uploaded first); records it and the complaint as the provider then has it.
pub async fn reply(cx: &Context, id: &str, text: &str, images: Vec<Vec<u8>>) -> Result<CaseDetail> {
    let key = cases::key_of(&cx.db, id).await?;
    open_complaint(&key)?;
    if !case::reply_fits(text) {
        let why = format!("a reply is 1-{} characters, not blank", case::REPLY_CHARS_MAX);
        return Err(Error::unprocessable("invalid_reply", why));
    }
    let gateway = gateway_of(cx, &key.provider)?;
    let media_ids = upload_images(gateway.as_ref(), images).await?;
    let answer =
        gateway.reply_case(&key.provider_case_id, text, &media_ids, cx.now_ms()).await.map_err(action_error)?;
    let mut sent = serde_json::json!({ "text": text });
    if !media_ids.is_empty() {
        sent["media_ids"] = serde_json::json!(media_ids);
    }
    cases::record_operator(&cx.db, id, "replied", &sent.to_string(), cx.now_ms()).await?;
    cases::record(&cx.db, &answer, cases::FROM_POLL, cx.now_ms()).await?;
    cases::get(&cx.db, id).await
}

/// Answers the buyer's refund request of a complaint: approving says the merchant will refund
/// (the money moves only through [`refund`]); refusing gives the reason, with up to four images.
/// Records the answer and the complaint as the provider then has it.
pub async fn answer_refund_request(
    cx: &Context,
    id: &str,
    verdict: &case::RefundVerdict,
    images: Vec<Vec<u8>>,
) -> Result<CaseDetail> {
    let key = cases::key_of(&cx.db, id).await?;
    let detail = cases::get(&cx.db, id).await?;
    case::refund_request_answerable(key.kind, key.state, detail.case.reason.as_deref())
        .map_err(|(code, why)| Error::conflict(code, why))?;
    if !verdict.takes_images() && !images.is_empty() {
        return Err(Error::unprocessable("images_not_taken", "images go with a refusal only"));
    }
    let gateway = gateway_of(cx, &key.provider)?;
    let media_ids = upload_images(gateway.as_ref(), images).await?;
    let answer = gateway
        .answer_refund_request(&key.provider_case_id, verdict, &media_ids, cx.now_ms())
        .await
        .map_err(action_error)?;
    let sent = match verdict {
        case::RefundVerdict::Approve { launch_refund_days } => {
            serde_json::json!({"launch_refund_days": launch_refund_days})
        }
        case::RefundVerdict::Reject { reason, remark } => {
            serde_json::json!({"reason": reason, "remark": remark, "media_ids": media_ids})
        }
    };
    let kind = match verdict {
        case::RefundVerdict::Approve { .. } => "refund_approved",
        case::RefundVerdict::Reject { .. } => "refund_rejected",
    };
    cases::record_operator(&cx.db, id, kind, &sent.to_string(), cx.now_ms()).await?;
    cases::record(&cx.db, &answer, cases::FROM_POLL, cx.now_ms()).await?;
    cases::get(&cx.db, id).await
}

/// Where a provider sends its case notifications: the URL registered with it, and kassa's own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct NotifyUrl {
    pub provider: String,
    /// The URL the provider has; none when none is registered.
    pub registered: Option<String>,
    /// kassa's own notification URL for the provider (from the public base URL).
    pub kassa_url: String,
}

fn kassa_notify_url(cx: &Context, provider: &str) -> String {
    format!("{}/notify/{provider}", cx.public_url.trim_end_matches('/'))
}

/// The URL the provider sends its case notifications to, asked of the provider now.
pub async fn notify_url(cx: &Context, provider: &str) -> Result<NotifyUrl> {
    let gateway = gateway_of(cx, provider)?;
    let registered = gateway.case_notify_url().await.map_err(action_error)?;
    Ok(NotifyUrl { provider: provider.to_string(), registered, kassa_url: kassa_notify_url(cx, provider) })
}

/// Registers `url` (kassa's own when none is given) as where the provider sends its case
/// notifications, replacing any other.
pub async fn register_notify_url(cx: &Context, provider: &str, url: Option<&str>) -> Result<NotifyUrl> {
    let gateway = gateway_of(cx, provider)?;
    let url = url.map_or_else(|| kassa_notify_url(cx, provider), str::to_string);
    if !case::notify_url_fits(&url) {
        let why = format!("the URL is https://, without a query, at most {} characters", case::NOTIFY_URL_CHARS_MAX);
        return Err(Error::unprocessable("invalid_notify_url", why));
    }
    let registered = gateway.register_case_notify_url(&url).await.map_err(action_error)?;
    tracing::info!(provider, url = %registered, "case notification URL registered");
    Ok(NotifyUrl {
        provider: provider.to_string(),
        registered: Some(registered),
        kassa_url: kassa_notify_url(cx, provider),
    })
}

/// Removes the provider's case notification URL; whether one was registered.
pub async fn delete_notify_url(cx: &Context, provider: &str) -> Result<bool> {
    let gateway = gateway_of(cx, provider)?;
    let removed = gateway.delete_case_notify_url().await.map_err(action_error)?;
    tracing::info!(provider, removed, "case notification URL removed");
    Ok(removed)
}

/// Tells the provider a complaint is dealt with (and, where the provider asks, whether its order
/// was refunded); records it and the complaint as it then stands.
pub async fn complete(cx: &Context, id: &str) -> Result<CaseDetail> {
    let key = cases::key_of(&cx.db, id).await?;
    open_complaint(&key)?;
    let refunded = match &key.order_no {
        Some(order_no) => cases::evidence_facts(&cx.db, order_no).await?.refunded.is_some(),
        None => false,
    };
    let gateway = gateway_of(cx, &key.provider)?;
    let answer = gateway
        .complete_case(&key.provider_case_id, case::Completion { refunded }, cx.now_ms())
        .await
        .map_err(action_error)?;
    cases::record_operator(&cx.db, id, "completed", "{}", cx.now_ms()).await?;
    cases::record(&cx.db, &answer, cases::FROM_POLL, cx.now_ms()).await?;
    cases::get(&cx.db, id).await
}

//! The console's complaints and disputes desk: the cases, open first by the deadline that matters
//! next, with *Poll the providers now*; a page per case with its facts, the provider's messages and
//! the changes of its state, and for an open Stripe dispute the evidence form (kassa's suggestion
//! to edit, submitted or saved) and *Accept the loss*; for an open WeChat Pay complaint the reply
//! (with images), *Complete*, and the buyer's refund request approved or rejected; WeChat Pay's
//! complaint notification URL shown, registered or removed — all through the same use cases as the
//! admin API ([`super::cases`]).

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{DefaultBodyLimit, Multipart, Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get, post};

use super::cases::IMAGES_BODY_LIMIT_BYTES;
use super::console::Operator;
use super::i18n::{Lang, Texts};
use super::{AppState, Content, FormBody, RouteDoc, render};
use crate::domain::case::{self as rules, CASE_IMAGES_MAX, REFUND_REQUEST_REASON, RefundVerdict};
use crate::domain::ids;
use crate::domain::money::format_minor;
use crate::error::{Error, Result};
use crate::gateway::stripe_cases::{self, EVIDENCE_FIELDS};
use crate::gateway::wechat_complaints;
use crate::store::cases::{self, CASES_PAGE_MAX, CaseEventView, CaseMessageView, CaseView};
use crate::usecase::cases as uc;

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let page = |path, summary| {
        RouteDoc::page("get", path, summary, "admin console").answer(200, "HTML page", Content::Other("text/html"))
    };
    let form =
        |path, summary, to| RouteDoc::page("post", path, summary, "admin console").answer(303, to, Content::Empty);
    vec![
        (
            page(
                "/admin/cases",
                "Admin console: complaints and disputes, open first by the nearest deadline (closed too with ?all=1)",
            ),
            get(list_page),
        ),
        (
            form("/admin/cases/poll", "Admin console: poll the providers' cases now", "back to the cases"),
            post(poll_form),
        ),
        (
            page(
                "/admin/cases/{id}",
                "Admin console: a case with its facts, the provider's messages, its state changes and the evidence form",
            ),
            get(case_page),
        ),
        (
            form(
                "/admin/cases/{id}/evidence",
                "Admin console: submit a dispute's evidence, or save it without submitting",
                "to the case's page",
            ),
            post(evidence_form),
        ),
        (
            form("/admin/cases/{id}/accept", "Admin console: accept the loss of a dispute", "to the case's page"),
            post(accept_form),
        ),
        (
            form(
                "/admin/cases/{id}/refund",
                "Admin console: refund the case's order (major units of its currency), one refund per amount",
                "to the case's page",
            ),
            post(refund_form),
        ),
        (
            form(
                "/admin/cases/{id}/reply",
                "Admin console: reply to a complaint (WeChat Pay or Alipay) with up to four images (multipart/form-data)",
                "to the case's page",
            ),
            post(reply_form).layer(DefaultBodyLimit::max(IMAGES_BODY_LIMIT_BYTES)),
        ),
        (
            form(
                "/admin/cases/{id}/complete",
                "Admin console: tell WeChat Pay a complaint is dealt with",
                "to the case's page",
            ),
            post(complete_form),
        ),
        (
            form(
                "/admin/cases/{id}/refund-request",
                "Admin console: approve or reject the buyer's refund request of a WeChat Pay complaint (multipart/form-data)",
                "to the case's page (its refund form, after approving)",
            ),
            post(refund_request_form).layer(DefaultBodyLimit::max(IMAGES_BODY_LIMIT_BYTES)),
        ),
        (
            page(
                "/admin/cases/notify-url",
                "Admin console: the URL WeChat Pay sends complaint notifications to, and kassa's own",
            ),
            get(notify_url_page),
        ),
        (
            form(
                "/admin/cases/notify-url",
                "Admin console: register kassa's own URL for WeChat Pay's complaint notifications",
                "back to the URL's page",
            ),
            post(notify_url_form),
        ),
        (
            form(
                "/admin/cases/notify-url/delete",
                "Admin console: remove WeChat Pay's complaint notification URL",
                "back to the URL's page",
            ),
            post(notify_url_delete_form),
        ),
        (
            form(
                "/admin/cases/{id}/release-keys",
                "Admin console: show the buyer the card keys the case holds back",
                "to the case's page",
            ),
            post(release_form),
        ),
    ]
}

/// A case as the console shows it: its amount as money and whether its deadline has passed.
struct Shown {
    c: CaseView,
    /// The amount as money; empty when the provider named none.
    amount: String,
    overdue: bool,
}

impl Shown {
    fn new(c: CaseView, now: i64) -> Shown {
        let amount = match (c.amount_minor, &c.currency) {
            (Some(minor), Some(currency)) => format_minor(minor, currency),
            _ => String::new(),
        };
        let overdue = c.state != "closed" && c.due_at.as_deref().and_then(millis_of).is_some_and(|due| due < now);
        Shown { c, amount, overdue }
    }
}

/// An RFC 3339 time as milliseconds.
fn millis_of(text: &str) -> Option<i64> {
    let at = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    i64::try_from(at.unix_timestamp_nanos() / 1_000_000).ok()
}

#[derive(Template)]
#[template(path = "admin/cases.html")]
struct ListPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    rows: Vec<Shown>,
    all: bool,
    /// Whether WeChat Pay is configured (its notification URL page is linked).
    wechat: bool,
    message: String,
    error: String,
}

/// What one provider's poll found, as the list page's `polled` carries it: `provider:listed:opened:updated`.
fn polled_text(polled: &[uc::Polled]) -> String {
    polled
        .iter()
        .map(|p| format!("{}:{}:{}:{}", p.provider, p.listed, p.opened, p.updated))
        .collect::<Vec<_>>()
        .join(",")
}

/// The list page's message after a poll, in the operator's language.
fn polled_message(t: &Texts, text: &str) -> String {
    let found: Vec<String> = text
        .split(',')
        .filter_map(|one| {
            let parts: Vec<&str> = one.split(':').collect();
            let [provider, listed, opened, updated] = parts[..] else { return None };
            let n = |v: &str| v.parse::<usize>().ok();
            let (listed, opened, updated) = (n(listed)?, n(opened)?, n(updated)?);
            let provider: String = provider.chars().filter(char::is_ascii_alphanumeric).collect();
            Some(
                t.f2("admin.cases.polled_one", "provider", provider, "listed", listed)
                    .replace("{opened}", &opened.to_string())
                    .replace("{updated}", &updated.to_string()),
            )
        })
        .collect();
    if found.is_empty() { t.t("admin.cases.polled_none").to_string() } else { found.join(" ") }
}

async fn list_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let all = query.get("all").is_some_and(|v| v == "1" || v == "true");
    let now = state.now_ms();
    let rows = cases::list(&state.db, !all, CASES_PAGE_MAX).await?.into_iter().map(|c| Shown::new(c, now)).collect();
    let t = lang.texts();
    let message = query.get("polled").map(|p| polled_message(t, p)).unwrap_or_default();
    let error = query.get("error").cloned().unwrap_or_default();
    let wechat = state.cx.gateways.get(wechat_complaints::PROVIDER).is_some();
    Ok(render(&ListPage { t, csrf: &op.csrf, rows, all, wechat, message, error }))
}

/// What a refusal says on the page; anything else is logged and named only as a failure.
fn refusal_text(t: &Texts, e: &Error) -> String {
    match e {
        Error::Refused(r) => r.message.clone(),
        _ => {
            tracing::error!(error = %e, "console action on a case failed");
            t.t("error.internal").to_string()
        }
    }
}

async fn poll_form(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    let t = lang.texts();
    let (mut found, mut failed) = (Vec::new(), Vec::new());
    for outcome in uc::poll_all(&state.cx).await {
        match outcome {
            Ok(polled) => found.push(polled),
            Err(e) => failed.push(refusal_text(t, &e)),
        }
    }
    let mut query = vec![("polled", polled_text(&found))];
    if !failed.is_empty() {
        query.push(("error", failed.join("; ")));
    }
    let query = serde_urlencoded::to_string(&query).unwrap_or_default();
    Ok(Redirect::to(&format!("/admin/cases?{query}")).into_response())
}

/// One evidence field on the form: Stripe's name and the text kassa suggests (or none).
struct Field {
    name: &'static str,
    value: String,
}

#[derive(Template)]
#[template(path = "admin/case.html")]
struct CasePage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    s: Shown,
    messages: Vec<CaseMessageView>,
    events: Vec<CaseEventView>,
    /// The evidence form's fields; empty when the case takes no evidence here.
    fields: Vec<Field>,
    /// An open WeChat Pay complaint: the reply and complete forms; and whether the buyer asked
    /// for a refund in it (the approve and reject forms).
    complaint: bool,
    refund_request: bool,
    /// The limits the forms state.
    reply_max: usize,
    reason_max: usize,
    images_max: usize,
    days_max: u32,
    message: String,
    error: String,
}

/// Whether the console answers this case: an open Stripe dispute.
fn answerable(c: &CaseView) -> bool {
    c.provider == stripe_cases::PROVIDER && c.kind == "dispute" && c.state != "closed"
}

async fn case_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let detail = cases::get(&state.db, &id).await?;
    let fields = if answerable(&detail.case) {
        let suggested = uc::suggested_evidence(&state.cx, &id).await?;
        let mut fields: Vec<Field> = suggested
            .iter()
            .filter_map(|(name, value)| {
                EVIDENCE_FIELDS.iter().find(|f| **f == name).map(|name| Field { name, value: value.clone() })
            })
            .collect();
        for name in EVIDENCE_FIELDS {
            if !suggested.iter().any(|(s, _)| s == name) {
                fields.push(Field { name, value: String::new() });
            }
        }
        fields
    } else {
        Vec::new()
    };
    let t = lang.texts();
    let message = match query.get("done").map(String::as_str) {
        Some("submitted") => t.t("admin.cases.done_submitted").to_string(),
        Some("saved") => t.t("admin.cases.done_saved").to_string(),
        Some("accepted") => t.t("admin.cases.done_accepted").to_string(),
        Some("refunded") => t.t("admin.cases.done_refunded").to_string(),
        Some("released") => t.t("admin.cases.done_released").to_string(),
        Some("replied") => t.t("admin.cases.done_replied").to_string(),
        Some("completed") => t.t("admin.cases.done_completed").to_string(),
        Some("refund_approved") => t.t("admin.cases.done_refund_approved").to_string(),
        Some("refund_rejected") => t.t("admin.cases.done_refund_rejected").to_string(),
        _ => String::new(),
    };
    let error = query.get("error").cloned().unwrap_or_default();
    let complaint = detail.case.provider == wechat_complaints::PROVIDER
        && detail.case.kind == "complaint"
        && detail.case.state != "closed";
    let refund_request = complaint && detail.case.reason.as_deref() == Some(REFUND_REQUEST_REASON);
    let s = Shown::new(detail.case, state.now_ms());
    Ok(render(&CasePage {
        t,
        csrf: &op.csrf,
        s,
        messages: detail.messages,
        events: detail.events,
        fields,
        complaint,
        refund_request,
        reply_max: rules::REPLY_CHARS_MAX,
        reason_max: rules::REJECT_REASON_CHARS_MAX,
        images_max: CASE_IMAGES_MAX,
        days_max: rules::LAUNCH_REFUND_DAYS_MAX,
        message,
        error,
    }))
}

/// The case's page, or the list for an id that cannot be one.
fn case_path(id: &str) -> String {
    if ids::is_plain_id(id) { format!("/admin/cases/{id}") } else { "/admin/cases".to_string() }
}

/// Back to the case's page: `done` saying what was done, or a refusal's message as `error`.
/// Anything but a refusal is answered as the error it is.
fn back(id: &str, outcome: Result<&str>) -> Result<Response> {
    let (key, value) = match outcome {
        Ok(done) => ("done", done.to_string()),
        Err(Error::Refused(r)) => ("error", r.message),
        Err(e) => return Err(e),
    };
    let query = serde_urlencoded::to_string([(key, value)]).unwrap_or_default();
    Ok(Redirect::to(&format!("{}?{query}", case_path(id))).into_response())
}

/// The evidence fields of the form (`evidence[customer_name]`), in Stripe's names.
fn evidence_of(form: &BTreeMap<String, String>) -> Vec<(String, String)> {
    form.iter()
        .filter_map(|(key, value)| {
            let name = key.strip_prefix("evidence[")?.strip_suffix(']')?;
            Some((name.to_string(), value.replace("\r\n", "\n")))
        })
        .collect()
}

async fn evidence_form(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    let submit = form.get("submit").is_none_or(|v| v != "false");
    let outcome = uc::submit_evidence(&state.cx, &id, &evidence_of(&form), submit).await;
    back(&id, outcome.map(|_| if submit { "submitted" } else { "saved" }))
}

async fn accept_form(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    let outcome = match form.get("confirm").map(String::as_str) {
        Some("yes") => uc::accept(&state.cx, &id).await,
        _ => Err(Error::invalid("unconfirmed", "tick the box to confirm accepting the loss")),
    };
    back(&id, outcome.map(|_| "accepted"))
}

async fn refund_form(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    let outcome = async {
        // Money as the order is kept: its own currency (a fraud warning names no amount).
        let detail = cases::get(&state.db, &id).await?;
        let order_no = detail
            .case
            .order_no
            .ok_or_else(|| Error::conflict("case_unlinked", "the case names no payment kassa knows"))?;
        let order =
            crate::store::views::get_order(&state.db, &crate::domain::ids::OrderNo::stored(order_no), false).await?;
        let currency = crate::domain::Currency::parse(&order.currency)?;
        let text = form.get("amount").map(|a| a.trim()).unwrap_or_default();
        let amount = crate::domain::Money::parse_decimal(text, currency).ok_or_else(|| {
            Error::unprocessable("invalid_amount", format!("the amount is in {currency}, such as 12.34"))
        })?;
        uc::refund(&state.cx, &id, amount.amount_minor()).await
    }
    .await;
    back(&id, outcome.map(|_| "refunded"))
}

async fn release_form(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    back(&id, uc::release_keys(&state.cx, &id).await.map(|_| "released"))
}

/// A multipart form's text fields and its image files (a file input left empty sends an empty
/// part, which is skipped). More than [`CASE_IMAGES_MAX`] files are refused before the rest is
/// read.
async fn read_multipart(mut multipart: Multipart) -> Result<(BTreeMap<String, String>, Vec<Vec<u8>>)> {
    let unreadable = |_| Error::invalid("invalid_form", "the form could not be read");
    let (mut fields, mut images) = (BTreeMap::new(), Vec::new());
    while let Some(field) = multipart.next_field().await.map_err(unreadable)? {
        let name = field.name().unwrap_or_default().to_string();
        if name == "images" {
            let bytes = field.bytes().await.map_err(unreadable)?;
            if bytes.is_empty() {
                continue;
            }
            if images.len() == CASE_IMAGES_MAX {
                return Err(Error::unprocessable("too_many_images", format!("at most {CASE_IMAGES_MAX} images")));
            }
            images.push(bytes.to_vec());
        } else {
            fields.insert(name, field.text().await.map_err(unreadable)?.replace("\r\n", "\n"));
        }
    }
    Ok((fields, images))
}

/// The CSRF check of a multipart form: a refusal of the form itself is answered as it is (403),
/// anything else goes back to the case's page.
async fn multipart_form(
    op: &Operator,
    multipart: Multipart,
) -> Result<Result<(BTreeMap<String, String>, Vec<Vec<u8>>)>> {
    match read_multipart(multipart).await {
        Ok((fields, images)) => {
            op.check(&fields)?;
            Ok(Ok((fields, images)))
        }
        Err(e) => Ok(Err(e)),
    }
}

async fn reply_form(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    multipart: Multipart,
) -> Result<Response> {
    let outcome = match multipart_form(&op, multipart).await? {
        Ok((fields, images)) => {
            let text = fields.get("text").map(String::as_str).unwrap_or_default();
            uc::reply(&state.cx, &id, text, images).await.map(|_| "replied")
        }
        Err(e) => Err(e),
    };
    back(&id, outcome)
}

async fn complete_form(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    back(&id, uc::complete(&state.cx, &id).await.map(|_| "completed"))
}

async fn refund_request_form(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    multipart: Multipart,
) -> Result<Response> {
    let outcome = match multipart_form(&op, multipart).await? {
        Ok((fields, images)) => answer_refund_request(&state, &id, &fields, images).await,
        Err(e) => Err(e),
    };
    match outcome {
        // After approving, straight to the refund form: approving moved no money.
        Ok("refund_approved") => {
            Ok(Redirect::to(&format!("{}?done=refund_approved#refund-form", case_path(&id))).into_response())
        }
        outcome => back(&id, outcome),
    }
}

/// The refund request's answer the form gives, sent; what was done.
async fn answer_refund_request(
    state: &AppState,
    id: &str,
    fields: &BTreeMap<String, String>,
    images: Vec<Vec<u8>>,
) -> Result<&'static str> {
    let get = |k: &str| fields.get(k).map(String::as_str);
    let days =
        match get("launch_refund_days").map(str::trim).filter(|d| !d.is_empty()) {
            None => None,
            Some(d) => Some(d.parse::<u32>().map_err(|_| {
                Error::unprocessable("invalid_launch_refund_days", "the working days are a whole number")
            })?),
        };
    let verdict = RefundVerdict::parse(get("action").unwrap_or_default(), days, get("reason"), get("remark"))
        .map_err(|(code, why)| Error::unprocessable(code, why))?;
    uc::answer_refund_request(&state.cx, id, &verdict, images).await?;
    Ok(match verdict {
        RefundVerdict::Approve { .. } => "refund_approved",
        RefundVerdict::Reject { .. } => "refund_rejected",
    })
}

#[derive(Template)]
#[template(path = "admin/notify_url.html")]
struct NotifyUrlPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    /// The URL WeChat Pay has, when it could be asked; why not otherwise.
    url: Option<uc::NotifyUrl>,
    message: String,
    error: String,
}

async fn notify_url_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let t = lang.texts();
    let (url, mut error) = match uc::notify_url(&state.cx, wechat_complaints::PROVIDER).await {
        Ok(url) => (Some(url), String::new()),
        Err(e) => (None, refusal_text(t, &e)),
    };
    if let Some(e) = query.get("error") {
        error = e.clone();
    }
    let message = match query.get("done").map(String::as_str) {
        Some("registered") => t.t("admin.cases.done_notify_registered").to_string(),
        Some("removed") => t.t("admin.cases.done_notify_removed").to_string(),
        Some("none") => t.t("admin.cases.done_notify_none").to_string(),
        _ => String::new(),
    };
    Ok(render(&NotifyUrlPage { t, csrf: &op.csrf, url, message, error }))
}

/// Back to the notification URL's page, saying what was done or why not.
fn back_to_notify_url(outcome: Result<&str>) -> Result<Response> {
    let (key, value) = match outcome {
        Ok(done) => ("done", done.to_string()),
        Err(Error::Refused(r)) => ("error", r.message),
        Err(e) => return Err(e),
    };
    let query = serde_urlencoded::to_string([(key, value)]).unwrap_or_default();
    Ok(Redirect::to(&format!("/admin/cases/notify-url?{query}")).into_response())
}

async fn notify_url_form(
    State(state): State<AppState>,
    op: Operator,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    let outcome = uc::register_notify_url(&state.cx, wechat_complaints::PROVIDER, None).await;
    back_to_notify_url(outcome.map(|_| "registered"))
}

async fn notify_url_delete_form(
    State(state): State<AppState>,
    op: Operator,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    let outcome = match form.get("confirm").map(String::as_str) {
        Some("yes") => uc::delete_notify_url(&state.cx, wechat_complaints::PROVIDER).await,
        _ => Err(Error::invalid("unconfirmed", "tick the box to confirm removing the URL")),
    };
    back_to_notify_url(outcome.map(|removed| if removed { "removed" } else { "none" }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_is_said_in_words_and_a_forged_one_is_not() {
        let t = Lang::En.texts();
        let polled = [uc::Polled { provider: "stripe".into(), listed: 3, opened: 1, updated: 0 }];
        let said = polled_message(t, &polled_text(&polled));
        assert!(said.contains("stripe") && said.contains('3') && said.contains('1'), "{said}");
        assert_eq!(polled_message(t, "<b>:x:1:2"), t.t("admin.cases.polled_none"));
        assert_eq!(polled_message(t, ""), t.t("admin.cases.polled_none"));
    }

    #[test]
    fn the_form_gives_the_evidence_fields_only() {
        let form: BTreeMap<String, String> = [("csrf", "x"), ("submit", "true"), ("evidence[customer_name]", "A\r\nB")]
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        assert_eq!(evidence_of(&form), vec![("customer_name".to_string(), "A\nB".to_string())]);
    }
}

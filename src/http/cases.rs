//! The complaints and disputes desk over JSON (admin API): cases, open first by the deadline that
//! matters next; one case with its messages and state changes; the evidence kassa suggests; the
//! operator's actions (a reply with images, a refund request answered); the backstop poll on
//! demand; the provider's complaint notification URL.

use std::collections::BTreeMap;

use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post, put};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::{Admin, ApiJson, AppState, Auth, RouteDoc};
use crate::domain::case::RefundVerdict;
use crate::error::{Error, Result};
use crate::store::cases::{self, CASES_PAGE_MAX, CaseDetail, CaseView};
use crate::store::refunds::RefundView;
use crate::usecase::cases as uc;

/// Which cases: open ones only (the default), or closed ones too.
#[derive(Deserialize, Default, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct CasesQuery {
    /// `false`: closed cases too, after the open ones.
    #[serde(default)]
    open: Option<bool>,
    /// Cases per page (1-200, default 50).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    limit: Option<i64>,
}

/// The desk's cases.
#[derive(Serialize, ToSchema)]
pub struct CaseList {
    pub items: Vec<CaseView>,
}

/// Evidence fields (Stripe's names) and their text.
#[derive(Serialize, ToSchema)]
pub struct Evidence {
    pub evidence: BTreeMap<String, String>,
}

/// What the operator sends: fields over kassa's suggestion (an empty text leaves one out), and
/// whether to submit it now (the default) or only stage it.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceBody {
    #[serde(default)]
    pub evidence: BTreeMap<String, String>,
    #[serde(default)]
    pub submit: Option<bool>,
}

/// The largest body of a request that carries images (four of 2 MB, base64-encoded, with room for
/// the text); every other request keeps [`super::BODY_LIMIT_BYTES`].
pub const IMAGES_BODY_LIMIT_BYTES: usize = 12 * 1024 * 1024;

/// The operator's reply to a complaint (1-200 characters), with up to four images: JPEG, PNG or
/// BMP (an Alipay complaint: JPEG or PNG), each at most 2 MB, base64-encoded.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyBody {
    #[schema(min_length = 1, max_length = 200)]
    pub text: String,
    #[serde(default)]
    #[schema(max_items = 4)]
    pub images: Vec<String>,
}

/// The answer to the buyer's refund request of a WeChat Pay complaint: `approve` (with the working
/// days until the refund starts, 0-7, 0 by default), or `reject` with a reason (1-200 characters),
/// an optional remark to WeChat's staff (at most 200) and up to four images.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RefundRequestBody {
    #[schema(pattern = "^(approve|reject)$")]
    pub action: String,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 7)]
    pub launch_refund_days: Option<u32>,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub reason: Option<String>,
    #[serde(default)]
    #[schema(max_length = 200)]
    pub remark: Option<String>,
    #[serde(default)]
    #[schema(max_items = 4)]
    pub images: Vec<String>,
}

/// The URL to register: kassa's own notification URL when none is given.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NotifyUrlBody {
    #[serde(default)]
    #[schema(max_length = 256)]
    pub url: Option<String>,
}

/// Whether a notification URL was registered before it was removed.
#[derive(Serialize, ToSchema)]
pub struct NotifyUrlRemoved {
    pub provider: String,
    pub removed: bool,
}

/// The images of a body, decoded; 422 `invalid_image` for one that is not base64.
pub fn decode_images(images: &[String]) -> Result<Vec<Vec<u8>>> {
    use base64::Engine as _;
    if images.len() > crate::domain::case::CASE_IMAGES_MAX {
        let why = format!("at most {} images", crate::domain::case::CASE_IMAGES_MAX);
        return Err(Error::unprocessable("too_many_images", why));
    }
    images
        .iter()
        .enumerate()
        .map(|(n, text)| {
            base64::engine::general_purpose::STANDARD
                .decode(text.trim())
                .map_err(|_| Error::unprocessable("invalid_image", format!("image {}: not base64", n + 1)))
        })
        .collect()
}

/// Which provider to poll; every configured one with cases when none is named.
#[derive(Deserialize, Default, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PollBody {
    #[serde(default)]
    #[schema(max_length = 16)]
    pub provider: Option<String>,
}

/// A case's refund: how much of the order's captured amount, in minor units.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CaseRefundBody {
    #[schema(minimum = 1)]
    pub amount_minor: i64,
}

/// What each provider's poll found.
#[derive(Serialize, ToSchema)]
pub struct PollAnswer {
    pub polled: Vec<uc::Polled>,
}

const ACTION_409: &[&str] = &["case_not_a_dispute", "case_closed", "gateway_not_configured"];
const COMPLAINT_409: &[&str] = &["case_not_a_complaint", "case_closed", "gateway_not_configured"];
const IMAGE_422: &[&str] = &["too_many_images", "image_too_large", "image_type_refused", "invalid_image"];
const NOTIFY_URL_PATH: &str = "/api/v1/admin/cases/notify-url/{provider}";

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let op = RouteDoc::new;
    vec![
        (
            op(
                "get",
                "/api/v1/admin/cases",
                "Complaints and disputes: open cases first, the nearest deadline first",
                "admin",
                Auth::Admin,
            )
            .query::<CasesQuery>()
            .ok::<CaseList>(200, "the cases")
            .errors(422, &["invalid_query"]),
            get(list),
        ),
        (
            op(
                "get",
                "/api/v1/admin/cases/{id}",
                "A case with every message the provider sent and each change of its state",
                "admin",
                Auth::Admin,
            )
            .ok::<CaseDetail>(200, "the case")
            .errors(404, &["not_found"]),
            get(show),
        ),
        (
            op(
                "get",
                "/api/v1/admin/cases/{id}/evidence",
                "The evidence kassa suggests for a dispute, from its order (contact, goods, keys and their reveals, refunds)",
                "admin",
                Auth::Admin,
            )
            .ok::<Evidence>(200, "the suggested fields")
            .errors(404, &["not_found"]),
            get(suggested),
        ),
        (
            op(
                "post",
                "/api/v1/admin/cases/{id}/evidence",
                "Submit a dispute's evidence (kassa's suggestion with the operator's fields over it)",
                "admin",
                Auth::Admin,
            )
            .body::<EvidenceBody>("the fields to change, and whether to submit")
            .ok::<CaseDetail>(200, "the case as the provider answered")
            .errors(404, &["not_found"])
            .errors(409, ACTION_409)
            .errors(422, &["invalid_evidence", "case_refused"])
            .errors(502, &["gateway_unavailable"]),
            post(submit_evidence),
        ),
        (
            op("post", "/api/v1/admin/cases/{id}/accept", "Accept the loss of a dispute", "admin", Auth::Admin)
                .ok::<CaseDetail>(200, "the case as the provider answered")
                .errors(404, &["not_found"])
                .errors(409, ACTION_409)
                .errors(422, &["case_refused"])
                .errors(502, &["gateway_unavailable"]),
            post(accept),
        ),
        (
            op(
                "post",
                "/api/v1/admin/cases/{id}/reply",
                "Reply to a complaint (WeChat Pay or Alipay), with up to four images uploaded first",
                "admin",
                Auth::Admin,
            )
            .body::<ReplyBody>("the reply's text and images")
            .ok::<CaseDetail>(200, "the case as the provider answered")
            .errors(404, &["not_found"])
            .errors(409, COMPLAINT_409)
            .errors(422, &["invalid_reply", "gateway_refused", "case_refused"])
            .errors(422, IMAGE_422)
            .errors(502, &["gateway_unavailable"]),
            post(reply).layer(DefaultBodyLimit::max(IMAGES_BODY_LIMIT_BYTES)),
        ),
        (
            op(
                "post",
                "/api/v1/admin/cases/{id}/refund-request",
                "Approve or reject the buyer's refund request of a complaint (WeChat Pay); approving moves no money: refund through POST /api/v1/admin/cases/{id}/refund",
                "admin",
                Auth::Admin,
            )
            .body::<RefundRequestBody>("the answer")
            .ok::<CaseDetail>(200, "the case as the provider answered")
            .errors(404, &["not_found"])
            .errors(409, COMPLAINT_409)
            .errors(409, &["not_a_refund_request"])
            .errors(
                422,
                &[
                    "invalid_action",
                    "invalid_launch_refund_days",
                    "invalid_reject_reason",
                    "invalid_remark",
                    "images_not_taken",
                ],
            )
            .errors(422, IMAGE_422)
            .errors(422, &["gateway_refused", "case_refused"])
            .errors(502, &["gateway_unavailable"]),
            post(refund_request).layer(DefaultBodyLimit::max(IMAGES_BODY_LIMIT_BYTES)),
        ),
        (
            op(
                "get",
                NOTIFY_URL_PATH,
                "The URL the provider sends its complaint notifications to (WeChat Pay), and kassa's own",
                "admin",
                Auth::Admin,
            )
            .ok::<uc::NotifyUrl>(200, "the registered URL, if any")
            .errors(409, &["gateway_not_configured"])
            .errors(422, &["action_unsupported", "gateway_refused"])
            .errors(502, &["gateway_unavailable"]),
            get(notify_url),
        ),
        (
            op(
                "put",
                NOTIFY_URL_PATH,
                "Register where the provider sends its complaint notifications (WeChat Pay): kassa's own URL unless one is given",
                "admin",
                Auth::Admin,
            )
            .body::<NotifyUrlBody>("the URL, or none for kassa's own")
            .ok::<uc::NotifyUrl>(200, "the URL as registered")
            .errors(409, &["gateway_not_configured"])
            .errors(422, &["invalid_notify_url", "action_unsupported", "gateway_refused"])
            .errors(502, &["gateway_unavailable"]),
            put(register_notify_url),
        ),
        (
            op("delete", NOTIFY_URL_PATH, "Remove the provider's complaint notification URL (WeChat Pay)", "admin", Auth::Admin)
                .ok::<NotifyUrlRemoved>(200, "whether one was registered")
                .errors(409, &["gateway_not_configured"])
                .errors(422, &["action_unsupported", "gateway_refused"])
                .errors(502, &["gateway_unavailable"]),
            delete(delete_notify_url),
        ),
        (
            op(
                "post",
                "/api/v1/admin/cases/{id}/complete",
                "Tell the provider a complaint is dealt with (WeChat Pay)",
                "admin",
                Auth::Admin,
            )
            .ok::<CaseDetail>(200, "the case as the provider answered")
            .errors(404, &["not_found"])
            .errors(409, COMPLAINT_409)
            .errors(422, &["gateway_refused", "case_refused"])
            .errors(502, &["gateway_unavailable"]),
            post(complete),
        ),
        (
            op(
                "post",
                "/api/v1/admin/cases/{id}/refund",
                "Refund the case's order through kassa's refund engine (one refund per case and amount)",
                "admin",
                Auth::Admin,
            )
            .body::<CaseRefundBody>("the amount")
            .ok::<RefundView>(201, "the refund, made now")
            .ok::<RefundView>(200, "the same refund, asked for again")
            .errors(404, &["not_found"])
            .errors(409, &["case_unlinked", "refund_exceeds_captured", "not_refundable", "refund_window_closed"])
            .errors(422, &["invalid_amount", "invalid_refund_no", "invalid_reason"]),
            post(refund),
        ),
        (
            op(
                "post",
                "/api/v1/admin/cases/{id}/release-keys",
                "Show the buyer the order's card keys a case holds back",
                "admin",
                Auth::Admin,
            )
            .ok::<CaseDetail>(200, "the case")
            .errors(404, &["not_found"])
            .errors(409, &["keys_not_held"]),
            post(release_keys),
        ),
        (
            op(
                "post",
                "/api/v1/admin/cases/poll",
                "List the providers' cases now (the daily backstop for lost notifications)",
                "admin",
                Auth::Admin,
            )
            .body::<PollBody>("the provider, or none for all")
            .ok::<PollAnswer>(200, "what each poll found")
            .errors(409, &["gateway_not_configured"])
            .errors(422, &["cases_unsupported"])
            .errors(502, &["gateway_unavailable"]),
            post(poll),
        ),
    ]
}

async fn list(
    State(state): State<AppState>,
    _admin: Admin,
    query: std::result::Result<Query<CasesQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(q) = query.map_err(|e| Error::unprocessable("invalid_query", e.body_text()))?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=CASES_PAGE_MAX).contains(&limit) {
        return Err(Error::unprocessable("invalid_query", format!("limit is 1-{CASES_PAGE_MAX}")));
    }
    let items = cases::list(&state.db, q.open.unwrap_or(true), limit).await?;
    Ok(axum::Json(CaseList { items }).into_response())
}

async fn show(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    Ok(axum::Json(cases::get(&state.db, &id).await?).into_response())
}

async fn suggested(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    let evidence = uc::suggested_evidence(&state.cx, &id).await?.into_iter().collect();
    Ok(axum::Json(Evidence { evidence }).into_response())
}

async fn submit_evidence(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<EvidenceBody>,
) -> Result<Response> {
    let edits: Vec<(String, String)> = body.evidence.into_iter().collect();
    Ok(axum::Json(uc::submit_evidence(&state.cx, &id, &edits, body.submit.unwrap_or(true)).await?).into_response())
}

async fn accept(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    Ok(axum::Json(uc::accept(&state.cx, &id).await?).into_response())
}

async fn refund(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<CaseRefundBody>,
) -> Result<Response> {
    let (refund, created) = uc::refund(&state.cx, &id, body.amount_minor).await?;
    let status = if created { axum::http::StatusCode::CREATED } else { axum::http::StatusCode::OK };
    Ok((status, axum::Json(refund)).into_response())
}

async fn release_keys(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    Ok(axum::Json(uc::release_keys(&state.cx, &id).await?).into_response())
}

async fn reply(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ReplyBody>,
) -> Result<Response> {
    let images = decode_images(&body.images)?;
    Ok(axum::Json(uc::reply(&state.cx, &id, &body.text, images).await?).into_response())
}

async fn refund_request(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<RefundRequestBody>,
) -> Result<Response> {
    let verdict =
        RefundVerdict::parse(&body.action, body.launch_refund_days, body.reason.as_deref(), body.remark.as_deref())
            .map_err(|(code, why)| Error::unprocessable(code, why))?;
    let images = decode_images(&body.images)?;
    Ok(axum::Json(uc::answer_refund_request(&state.cx, &id, &verdict, images).await?).into_response())
}

async fn notify_url(State(state): State<AppState>, _admin: Admin, Path(provider): Path<String>) -> Result<Response> {
    Ok(axum::Json(uc::notify_url(&state.cx, &provider).await?).into_response())
}

async fn register_notify_url(
    State(state): State<AppState>,
    _admin: Admin,
    Path(provider): Path<String>,
    ApiJson(body): ApiJson<NotifyUrlBody>,
) -> Result<Response> {
    Ok(axum::Json(uc::register_notify_url(&state.cx, &provider, body.url.as_deref()).await?).into_response())
}

async fn delete_notify_url(
    State(state): State<AppState>,
    _admin: Admin,
    Path(provider): Path<String>,
) -> Result<Response> {
    let removed = uc::delete_notify_url(&state.cx, &provider).await?;
    Ok(axum::Json(NotifyUrlRemoved { provider, removed }).into_response())
}

async fn complete(State(state): State<AppState>, _admin: Admin, Path(id): Path<String>) -> Result<Response> {
    Ok(axum::Json(uc::complete(&state.cx, &id).await?).into_response())
}

async fn poll(State(state): State<AppState>, _admin: Admin, ApiJson(body): ApiJson<PollBody>) -> Result<Response> {
    let polled = match body.provider {
        Some(provider) => vec![uc::poll(&state.cx, &provider).await?],
        None => uc::poll_all(&state.cx).await.into_iter().collect::<Result<Vec<_>>>()?,
    };
    Ok(axum::Json(PollAnswer { polled }).into_response())
}

//! The sandbox's own pages and API (docs/CONTRACT.md, "pages").

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, post};
use serde::Deserialize;
use serde_json::json;

use super::i18n::Lang;
use super::schema::schema_of;
use super::{ApiJson, AppState, Auth, Content, FormBody, RouteDoc, render};
use crate::domain::ids;
use crate::error::{Error, Result};
use crate::sandbox::{self as sb, Sandbox, SandboxOutcome};

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let page = |method, path, summary| RouteDoc::page(method, path, summary, "sandbox");
    vec![
        (
            page("post", "/sandbox/pay", "Sandbox pay page: target of the auto-submitting form (signed fields)")
                .answer(200, "HTML pay page", Content::Other("text/html"))
                .answer(400, "invalid_signature", Content::Other("text/html")),
            post(pay_page),
        ),
        (
            page(
                "post",
                "/sandbox/pay/{attempt_ref}",
                "Sandbox pay page action: outcome=succeeded|failed|cancelled, then back to the return URL",
            )
            .answer(303, "to the merchant's return URL", Content::Empty)
            .answer(409, "payment_closed", Content::Other("text/html")),
            post(pay_decide),
        ),
        (
            RouteDoc::new(
                "post",
                "/sandbox/api/payments/{attempt_ref}/complete",
                "Act as the buyer finishing at the gateway; the sandbox then sends `copies` signed notifications after `delay_ms`",
                "sandbox",
                Auth::None,
            )
            .body::<CompleteBody>("the outcome")
            .ok::<sb::Completed>(200, "the payment's outcome and the notification's event id")
            .errors(404, &["not_found"])
            .errors(409, &["payment_closed", "payment_final"])
            .errors(422, &["invalid_request"]),
            post(complete),
        ),
    ]
}

fn sandbox(state: &AppState) -> Result<&std::sync::Arc<Sandbox>> {
    state.sandbox.as_ref().ok_or_else(|| Error::not_found("route"))
}

#[derive(Template)]
#[template(path = "sandbox_pay.html")]
struct PayPage<'a> {
    t: &'static super::i18n::Texts,
    attempt_ref: &'a str,
    subject: &'a str,
    amount: String,
    state: &'a str,
}

/// The sandbox's pay page. A refusal (a form that does not verify) is a page too, never JSON: a
/// buyer reads it.
async fn pay_page(
    State(state): State<AppState>,
    lang: Lang,
    FormBody(fields): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        let sandbox = sandbox(&state)?;
        let attempt_ref = sandbox.register(&fields).await?;
        let p = sandbox.payment(&attempt_ref).await?;
        let status = if p.closed && p.status == "open" { "closed" } else { p.status.as_str() };
        Ok::<_, Error>(render(&PayPage {
            t: lang.texts(),
            attempt_ref: &p.attempt_ref,
            subject: &p.subject,
            amount: p.amount.display_major(),
            state: status,
        }))
    }
    .await;
    result.unwrap_or_else(|e| super::pages::error_page(lang, &e, "/"))
}

#[derive(Deserialize)]
struct Decision {
    outcome: String,
}

/// The buyer's decision on the pay page. A payment that can no longer be paid (the shop closed it
/// when the order expired, or it is final) answers a page that leads back to the shop's return
/// page, where the order says what happened and what to do next.
async fn pay_decide(
    State(state): State<AppState>,
    lang: Lang,
    Path(attempt_ref): Path<String>,
    FormBody(form): FormBody<Decision>,
) -> Response {
    let Ok(sandbox) = sandbox(&state) else {
        return super::pages::error_page(lang, &Error::not_found("route"), "/");
    };
    let decided = async {
        if !ids::is_plain_id(&attempt_ref) {
            return Err(Error::not_found("sandbox payment"));
        }
        let outcome =
            SandboxOutcome::parse(&form.outcome).ok_or_else(|| Error::invalid("invalid_request", "unknown outcome"))?;
        sandbox.complete(&attempt_ref, outcome, 1, 0).await
    }
    .await;
    // The return URL was stored from a signed form: safe to send the buyer to.
    let back = match sandbox.payment(&attempt_ref).await {
        Ok(p) => p.return_url,
        Err(_) => "/".to_string(),
    };
    match decided {
        Ok(_) => Redirect::to(&back).into_response(),
        Err(e) => super::pages::error_page(lang, &e, &back),
    }
}

/// How the buyer finishes at the sandbox, and how its notifications arrive.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompleteBody {
    #[schema(schema_with = outcome_schema)]
    outcome: String,
    /// Copies of the notification to send (duplicates test de-duplication).
    #[serde(default = "one")]
    #[schema(schema_with = copies_schema)]
    copies: u32,
    /// Wait before sending, in milliseconds.
    #[serde(default)]
    #[schema(schema_with = delay_schema)]
    delay_ms: u64,
}

fn outcome_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    schema_of(json!({"type": "string", "enum": ["succeeded", "failed", "cancelled"]}))
}

fn copies_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    schema_of(json!({"type": "integer", "minimum": 1, "maximum": sb::COPIES_MAX, "default": 1}))
}

fn delay_schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
    schema_of(json!({"type": "integer", "minimum": 0, "maximum": sb::DELAY_MS_MAX, "default": 0}))
}

fn one() -> u32 {
    1
}

async fn complete(
    State(state): State<AppState>,
    Path(attempt_ref): Path<String>,
    ApiJson(body): ApiJson<CompleteBody>,
) -> Result<Response> {
    let sandbox = sandbox(&state)?;
    if !ids::is_plain_id(&attempt_ref) {
        return Err(Error::not_found("sandbox payment"));
    }
    let outcome = SandboxOutcome::parse(&body.outcome)
        .ok_or_else(|| Error::unprocessable("invalid_request", "outcome must be succeeded, failed or cancelled"))?;
    let done = sandbox.complete(&attempt_ref, outcome, body.copies, body.delay_ms).await?;
    Ok((StatusCode::OK, axum::Json(done)).into_response())
}

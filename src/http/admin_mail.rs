//! E-mail to the buyers, for the operator: every message with its status, tries and last error
//! (admin API and console), and *Send test message*.

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get, post};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::console::Operator;
use super::i18n::{Lang, Texts};
use super::{Admin, ApiJson, AppState, Auth, Content, FormBody, RouteDoc, render};
use crate::domain::mail::MailStatus;
use crate::error::{Error, Result};
use crate::store::mail::{self, MAIL_PAGE_MAX, Mail};

/// Which messages: a status, and a page older than a message.
#[derive(Deserialize, Default, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct MailQuery {
    #[serde(default)]
    #[param(inline)]
    status: Option<MailStatusParam>,
    /// The id of the last message of the previous page.
    #[serde(default)]
    #[param(max_length = 64)]
    before: Option<String>,
    /// Messages per page (1-200, default 50).
    #[serde(default)]
    #[param(minimum = 1, maximum = 200)]
    limit: Option<i64>,
}

/// A message's status, as a list filters by it.
#[derive(Deserialize, Clone, Copy, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MailStatusParam {
    Pending,
    Sent,
    Failed,
    Superseded,
}

impl MailStatusParam {
    fn status(self) -> MailStatus {
        match self {
            MailStatusParam::Pending => MailStatus::Pending,
            MailStatusParam::Sent => MailStatus::Sent,
            MailStatusParam::Failed => MailStatus::Failed,
            MailStatusParam::Superseded => MailStatus::Superseded,
        }
    }
}

/// Longest `before` read (a message id is 36 characters).
const BEFORE_LEN_MAX: usize = 64;

/// A page of messages, newest first.
#[derive(Serialize, ToSchema)]
pub struct MailPage {
    pub items: Vec<Mail>,
    /// Whether e-mail is configured (`[email]`): without it nothing is sent.
    pub configured: bool,
}

/// A test message's recipient.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TestMailBody {
    #[schema(max_length = 254)]
    pub to: String,
}

/// The test message, kept to be sent.
#[derive(Serialize, ToSchema)]
pub struct TestMailQueued {
    pub id: String,
}

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    vec![
        (
            RouteDoc::new(
                "get",
                "/api/v1/admin/mail",
                "E-mail to buyers, newest first: status, tries, last error",
                "admin",
                Auth::Admin,
            )
            .query::<MailQuery>()
            .ok::<MailPage>(200, "the messages")
            .errors(422, &["invalid_status", "invalid_query"]),
            get(list_json),
        ),
        (
            RouteDoc::new(
                "post",
                "/api/v1/admin/mail/test",
                "Send a test message through the configured SMTP server",
                "admin",
                Auth::Admin,
            )
            .body::<TestMailBody>("the recipient")
            .ok::<TestMailQueued>(202, "kept; the mail worker sends it within a few seconds")
            .errors(409, &["mail_off"])
            .errors(422, &["invalid_recipient"]),
            post(test_json),
        ),
        (
            RouteDoc::page(
                "get",
                "/admin/mail",
                "Admin console: e-mail to buyers, and Send test message",
                "admin console",
            )
            .answer(200, "HTML page", Content::Other("text/html")),
            get(mail_page),
        ),
        (
            RouteDoc::page("post", "/admin/mail/test", "Admin console: send a test message", "admin console").answer(
                303,
                "back to the e-mail page",
                Content::Empty,
            ),
            post(test_form),
        ),
    ]
}

fn status_of(text: Option<&str>) -> Result<Option<MailStatus>> {
    Ok(text.filter(|s| !s.is_empty()).map(MailStatus::parse).transpose()?)
}

async fn list_json(
    State(state): State<AppState>,
    _admin: Admin,
    query: std::result::Result<Query<MailQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Response> {
    let Query(q) = query.map_err(|e| Error::unprocessable("invalid_query", e.body_text()))?;
    let limit = q.limit.unwrap_or(50);
    if !(1..=MAIL_PAGE_MAX).contains(&limit) || q.before.as_ref().is_some_and(|b| b.chars().count() > BEFORE_LEN_MAX) {
        return Err(Error::unprocessable("invalid_query", format!("limit is 1-{MAIL_PAGE_MAX}, before a message id")));
    }
    let items = mail::list(&state.db, q.status.map(MailStatusParam::status), q.before.as_deref(), limit).await?;
    Ok(axum::Json(MailPage { items, configured: state.mail.is_some() }).into_response())
}

async fn test_json(
    State(state): State<AppState>,
    _admin: Admin,
    ApiJson(body): ApiJson<TestMailBody>,
) -> Result<Response> {
    let id = crate::usecase::mail::send_test(&state.cx, &body.to, "en").await?;
    Ok((StatusCode::ACCEPTED, axum::Json(TestMailQueued { id })).into_response())
}

#[derive(Template)]
#[template(path = "admin/mail.html")]
struct MailConsole<'a> {
    t: &'static Texts,
    csrf: &'a str,
    rows: Vec<Mail>,
    configured: bool,
    message: String,
}

async fn mail_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let status = query.get("status").cloned().unwrap_or_default();
    let rows = mail::list(&state.db, status_of(Some(&status))?, None, MAIL_PAGE_MAX).await?;
    let t = lang.texts();
    let message = match query.get("done").map(String::as_str) {
        Some("test") => t.t("admin.mail.done_test").to_string(),
        _ => String::new(),
    };
    Ok(render(&MailConsole { t, csrf: &op.csrf, rows, configured: state.mail.is_some(), message }))
}

async fn test_form(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Response {
    let result = async {
        op.check(&form)?;
        let to = form.get("to").map(String::as_str).unwrap_or_default();
        crate::usecase::mail::send_test(&state.cx, to, "en").await?;
        Ok(Redirect::to("/admin/mail?done=test").into_response())
    }
    .await;
    result.unwrap_or_else(|e| super::pages::console_error_page(lang, &e, "/admin/mail"))
}

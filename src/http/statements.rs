//! Statement reconciliation for people and programs: the admin API's days, findings, a day run on
//! demand and a day's report as CSV; the console's pages of the same (`usecase::statements` does
//! the work, `store::statements` keeps it).

use std::collections::BTreeMap;

use askama::Template;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{MethodRouter, get, post};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::api_lists::{ExportQuery, UTF8_BOM, read_query};
use super::console::Operator;
use super::i18n::{Lang, Texts};
use super::schema::NOTE_LEN_MAX;
use super::{Admin, ApiJson, AppState, Auth, Content, FormBody, RouteDoc, render, schema};
use crate::domain::money::{decimal_minor, format_minor};
use crate::domain::statement::{format_day, parse_day};
use crate::error::{Error, Result};
use crate::store::statements::{self as days, StatementDaySummary, StatementDayView, StatementFindingView};
use crate::usecase::statements::{DayRun, run_day};

/// Longest gateway name in a path.
const GATEWAY_LEN_MAX: usize = 32;

pub fn routes() -> Vec<(RouteDoc, MethodRouter<AppState>)> {
    let op = RouteDoc::new;
    let page = |method, path, summary| {
        RouteDoc::page(method, path, summary, "admin console").answer(200, "HTML page", Content::Other("text/html"))
    };
    let form = |method, path, summary| {
        RouteDoc::page(method, path, summary, "admin console").answer(303, "back to the day's page", Content::Empty)
    };
    vec![
        (
            op("get", "/api/v1/admin/statements", "Statement days, newest first, with both sides' totals", "admin", Auth::Admin)
                .query::<DaysQuery>()
                .ok::<StatementDayList>(200, "the days")
                .errors(400, &["invalid_filter"]),
            get(list_days),
        ),
        (
            op(
                "get",
                "/api/v1/admin/statements/{gateway}/{day}",
                "One gateway's statement day: its state, both sides' totals and its findings",
                "admin",
                Auth::Admin,
            )
            .ok::<StatementDayView>(200, "the day")
            .errors(404, &["not_found"]),
            get(get_day),
        ),
        (
            op(
                "post",
                "/api/v1/admin/statements/{gateway}/{day}/run",
                "Fetch the gateway's statement of the day and reconcile it now (idempotent: findings are kept once and closed when they no longer hold)",
                "admin",
                Auth::Admin,
            )
            .ok::<DayRun>(200, "what the run did; result waiting or unreadable when the file was not had or not read")
            .errors(404, &["not_found"])
            .errors(409, &["day_not_over"])
            .errors(422, &["no_statements"]),
            post(run),
        ),
        (
            op(
                "get",
                "/api/v1/admin/statements/{gateway}/{day}/report.csv",
                "A statement day as CSV: both sides' totals, then every finding",
                "admin",
                Auth::Admin,
            )
            .query::<ExportQuery>()
            .answer(200, "the day's report", Content::Other("text/csv"))
            .errors(400, &["invalid_filter"])
            .errors(404, &["not_found"]),
            get(report_csv),
        ),
        (
            op(
                "post",
                "/api/v1/admin/statement-findings/{id}/resolve",
                "Mark a statement finding resolved, with a note saying what was done",
                "admin",
                Auth::Admin,
            )
            .body::<ResolveBody>("the note")
            .ok::<StatementFindingView>(200, "the finding, resolved")
            .errors(404, &["not_found"])
            .errors(422, &["invalid_note"]),
            post(resolve),
        ),
        (page("get", "/admin/statements", "Admin console: statement days of every gateway"), get(days_page)),
        (
            page(
                "get",
                "/admin/statements/{gateway}/{day}",
                "Admin console: a statement day with the totals side by side and its findings",
            ),
            get(day_page),
        ),
        (
            RouteDoc::page(
                "get",
                "/admin/statements/{gateway}/{day}/report.csv",
                "Admin console: a statement day's report as CSV (bom=true for Excel)",
                "admin console",
            )
            .answer(200, "the day's report", Content::Other("text/csv")),
            get(report_csv_page),
        ),
        (
            form("post", "/admin/statements/{gateway}/{day}/run", "Admin console: reconcile a statement day now"),
            post(run_form),
        ),
        (form("post", "/admin/statements/run", "Admin console: reconcile a chosen day now"), post(run_chosen)),
        (
            form("post", "/admin/statement-findings/{id}/resolve", "Admin console: resolve a finding with a note"),
            post(resolve_form),
        ),
    ]
}

/// The filters of the list of days.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DaysQuery {
    /// Days of this gateway only.
    #[param(schema_with = schema::filter_text)]
    gateway: Option<String>,
    /// Days to list, newest first.
    #[param(schema_with = schema::page_limit)]
    limit: Option<String>,
}

/// Statement days, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatementDayList {
    pub days: Vec<StatementDaySummary>,
}

/// How a finding was resolved.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveBody {
    #[schema(schema_with = schema::statement_note)]
    note: String,
}

async fn list_days(
    State(state): State<AppState>,
    _admin: Admin,
    query: std::result::Result<Query<DaysQuery>, QueryRejection>,
) -> Result<Response> {
    let query = super::api_lists::read_query(query)?;
    let limit = super::api_lists::page_limit(query.limit.as_ref())?;
    let gateway = super::api_lists::text(query.gateway.as_ref(), "gateway")?;
    let days = days::days(&state.db, gateway.as_deref(), limit).await?;
    Ok(axum::Json(StatementDayList { days }).into_response())
}

/// A path's gateway and day, read: `None` when either cannot name a statement day.
fn read_day(gateway: &str, day: &str) -> Option<(String, time::Date)> {
    let ok = !gateway.is_empty() && gateway.len() <= GATEWAY_LEN_MAX && gateway.bytes().all(|b| b.is_ascii_lowercase());
    let day = parse_day(day)?;
    ok.then(|| (gateway.to_string(), day))
}

async fn stored_day(state: &AppState, gateway: &str, day: &str) -> Result<StatementDayView> {
    let (gateway, day) = read_day(gateway, day).ok_or_else(|| Error::not_found("statement day"))?;
    days::day(&state.db, &gateway, &format_day(day)).await?.ok_or_else(|| Error::not_found("statement day"))
}

async fn get_day(
    State(state): State<AppState>,
    _admin: Admin,
    Path((gateway, day)): Path<(String, String)>,
) -> Result<Response> {
    Ok(axum::Json(stored_day(&state, &gateway, &day).await?).into_response())
}

/// Runs a day now: the gateway must be configured here and publish statements, and the day over
/// in the gateway's own time.
async fn run_flow(state: &AppState, gateway: &str, day: &str) -> Result<DayRun> {
    let (gateway, day) = read_day(gateway, day).ok_or_else(|| Error::not_found("statement day"))?;
    let g = state.gateways.get(&gateway).ok_or_else(|| Error::not_found("gateway"))?;
    let Some(offset) = g.statement_offset() else {
        return Err(Error::unprocessable(
            "no_statements",
            format!("the {gateway} gateway publishes no statements kassa reads"),
        ));
    };
    let (start, end) = crate::domain::statement::day_window(day, offset);
    let now = state.now_ms();
    if start > now || (end > now && !g.statement_so_far()) {
        return Err(Error::conflict(
            "day_not_over",
            format!("{} is not over yet in {gateway}'s time; its statement comes the day after", format_day(day)),
        ));
    }
    run_day(&state.db, g.as_ref(), day, 1, &state.clock).await
}

async fn run(
    State(state): State<AppState>,
    _admin: Admin,
    Path((gateway, day)): Path<(String, String)>,
) -> Result<Response> {
    Ok(axum::Json(run_flow(&state, &gateway, &day).await?).into_response())
}

/// Reads and checks a note.
fn read_note(note: &str) -> Result<String> {
    let note = note.trim();
    if note.is_empty() || note.chars().count() > NOTE_LEN_MAX || note.chars().any(char::is_control) {
        return Err(Error::unprocessable(
            "invalid_note",
            format!("a note is 1-{NOTE_LEN_MAX} printable characters saying what was done"),
        ));
    }
    Ok(note.to_string())
}

async fn resolve(
    State(state): State<AppState>,
    _admin: Admin,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<ResolveBody>,
) -> Result<Response> {
    let id: i64 = id.parse().map_err(|_| Error::not_found("finding"))?;
    let note = read_note(&body.note)?;
    let found = crate::usecase::statements::resolve_finding(&state.cx, id, &note)
        .await?
        .ok_or_else(|| Error::not_found("finding"))?;
    Ok(axum::Json(found).into_response())
}

const REPORT_HEADER: &[&str] = &[
    "section",
    "gateway",
    "day",
    "side_or_kind",
    "subject",
    "order_no",
    "count",
    "gross",
    "refunds",
    "fees",
    "net",
    "kassa",
    "statement",
    "state",
    "note",
    "discounts",
    "disputes",
    "reinstated",
    "dispute_fees",
];

/// A text cell a spreadsheet will not run as a formula.
fn cell(text: &str) -> String {
    if text.starts_with(['=', '+', '-', '@', '\t', '\r']) { format!("'{text}") } else { text.to_string() }
}

/// The day's report: a row per side's totals, then a row per finding.
fn report(day: &StatementDayView) -> Result<Vec<u8>> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let failed = |e: csv::Error| Error::internal(format!("writing the report: {e}"));
    w.write_record(REPORT_HEADER).map_err(failed)?;
    let money = |minor: i64| decimal_minor(minor, &day.currency);
    for (side, t) in [("gateway", &day.gateway_totals), ("kassa", &day.kassa_totals)] {
        w.write_record([
            "totals",
            &day.gateway,
            &day.day,
            side,
            &day.currency,
            "",
            &t.count.to_string(),
            &money(t.gross_minor),
            &money(t.refunds_minor),
            &money(t.fees_minor),
            &money(t.net_minor),
            "",
            "",
            &day.status,
            "",
            &money(t.discounts_minor),
            &money(t.disputes_minor),
            &money(t.reinstated_minor),
            &money(t.dispute_fees_minor),
        ])
        .map_err(failed)?;
    }
    for f in &day.findings {
        w.write_record([
            "finding",
            &day.gateway,
            &day.day,
            &f.kind,
            &cell(&f.subject),
            f.order_no.as_deref().unwrap_or(""),
            "",
            "",
            "",
            "",
            "",
            &cell(&f.ours),
            &cell(&f.theirs),
            &f.state,
            &cell(f.note.as_deref().unwrap_or("")),
            "",
            "",
            "",
            "",
        ])
        .map_err(failed)?;
    }
    w.into_inner().map_err(|e| Error::internal(format!("writing the report: {}", e.error())))
}

async fn report_csv(
    State(state): State<AppState>,
    _admin: Admin,
    Path((gateway, day)): Path<(String, String)>,
    export: std::result::Result<Query<ExportQuery>, QueryRejection>,
) -> Result<Response> {
    report_download(&state, &gateway, &day, &read_query(export)?).await
}

async fn report_csv_page(
    State(state): State<AppState>,
    _op: Operator,
    Path((gateway, day)): Path<(String, String)>,
    export: std::result::Result<Query<ExportQuery>, QueryRejection>,
) -> Result<Response> {
    report_download(&state, &gateway, &day, &read_query(export)?).await
}

/// A statement day's report as a file, for the admin API and the console alike.
async fn report_download(state: &AppState, gateway: &str, day: &str, export: &ExportQuery) -> Result<Response> {
    let view = stored_day(state, gateway, day).await?;
    let body = report(&view)?;
    let body = if export.bom() { [UTF8_BOM.as_bytes(), &body].concat() } else { body };
    let disposition = format!("attachment; filename=\"statement-{}-{}.csv\"", view.gateway, view.day);
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/csv; charset=utf-8".to_string()), (header::CONTENT_DISPOSITION, disposition)],
        body,
    )
        .into_response())
}

/// A side's totals as the console shows them.
pub struct TotalsRow {
    pub side: &'static str,
    pub count: i64,
    pub gross: String,
    pub refunds: String,
    pub fees: String,
    pub net: String,
    /// What disputes took and gave back, and their fees.
    pub disputes: String,
    pub reinstated: String,
    pub dispute_fees: String,
    /// Promotion discounts behind the payments: kassa's side only.
    pub discounts: Option<String>,
}

fn totals_rows(t: &'static Texts, day: &StatementDayView) -> Vec<TotalsRow> {
    let m = |minor: i64| format_minor(minor, &day.currency);
    [
        (t.t("admin.statements.side_gateway"), &day.gateway_totals, false),
        (t.t("admin.statements.side_kassa"), &day.kassa_totals, true),
    ]
    .into_iter()
    .map(|(side, totals, ours)| TotalsRow {
        side,
        count: totals.count,
        gross: m(totals.gross_minor),
        refunds: m(totals.refunds_minor),
        fees: m(totals.fees_minor),
        net: m(totals.net_minor),
        disputes: m(totals.disputes_minor),
        reinstated: m(totals.reinstated_minor),
        dispute_fees: m(totals.dispute_fees_minor),
        discounts: ours.then(|| m(totals.discounts_minor)),
    })
    .collect()
}

#[derive(Template)]
#[template(path = "admin/statements.html")]
struct DaysPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    rows: Vec<StatementDaySummary>,
    gateways: Vec<&'static str>,
    suggested_day: String,
    message: String,
}

async fn days_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let rows = days::days(&state.db, None, days::DAYS_PAGE_MAX).await?;
    let gateways: Vec<&'static str> = state
        .gateways
        .names()
        .into_iter()
        .filter(|n| state.gateways.get(n).is_some_and(|g| g.statement_offset().is_some()))
        .collect();
    let today = time::OffsetDateTime::from_unix_timestamp(state.now_ms().div_euclid(1000))
        .map(|t| t.date())
        .unwrap_or(time::Date::MIN);
    // The sandbox's day so far can be run at once (the demo's); a real gateway's day the day after.
    let so_far = gateways.iter().any(|n| state.gateways.get(n).is_some_and(|g| g.statement_so_far()));
    let suggested_day = if so_far { Some(today) } else { today.previous_day() }.map(format_day).unwrap_or_default();
    let message = query.get("error").cloned().unwrap_or_default();
    Ok(render(&DaysPage { t: lang.texts(), csrf: &op.csrf, rows, gateways, suggested_day, message }))
}

#[derive(Template)]
#[template(path = "admin/statement_day.html")]
struct DayPage<'a> {
    t: &'static Texts,
    csrf: &'a str,
    d: StatementDayView,
    totals: Vec<TotalsRow>,
    open: usize,
    message: String,
}

async fn day_page(
    State(state): State<AppState>,
    op: Operator,
    lang: Lang,
    Path((gateway, day)): Path<(String, String)>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Result<Response> {
    let t = lang.texts();
    let d = stored_day(&state, &gateway, &day).await?;
    let message = match query.get("done").map(String::as_str) {
        Some("run") => t.t("admin.statements.done_run").to_string(),
        Some("resolved") => t.t("admin.statements.done_resolved").to_string(),
        _ => query.get("error").cloned().unwrap_or_default(),
    };
    let open = d.findings.iter().filter(|f| f.state == "open").count();
    Ok(render(&DayPage { t, csrf: &op.csrf, totals: totals_rows(t, &d), open, d, message }))
}

/// A day's console page; the list of days when `gateway` and `day` name none.
fn day_path(gateway: &str, day: &str) -> String {
    match read_day(gateway, day) {
        Some((g, d)) => format!("/admin/statements/{g}/{}", format_day(d)),
        None => "/admin/statements".to_string(),
    }
}

/// Where a console form goes back to: `done` to its page saying what was done, a refusal to
/// `refused` saying why. Anything but a refusal is answered as the error it is (logged, never
/// shown).
fn back(outcome: std::result::Result<(String, &str), Error>, refused: String) -> Result<Response> {
    let (path, key, value) = match outcome {
        Ok((path, done)) => (path, "done", done.to_string()),
        Err(Error::Refused(r)) => (refused, "error", r.message),
        Err(e) => return Err(e),
    };
    let query = serde_urlencoded::to_string([(key, value)]).unwrap_or_default();
    Ok(Redirect::to(&format!("{path}?{query}")).into_response())
}

async fn run_form(
    State(state): State<AppState>,
    op: Operator,
    Path((gateway, day)): Path<(String, String)>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    let outcome = run_flow(&state, &gateway, &day).await.map(|_| (day_path(&gateway, &day), "run"));
    back(outcome, "/admin/statements".to_string())
}

async fn run_chosen(
    State(state): State<AppState>,
    op: Operator,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    let gateway = form.get("gateway").map_or("", String::as_str);
    let day = form.get("day").map_or("", String::as_str);
    let outcome = run_flow(&state, gateway, day).await.map(|_| (day_path(gateway, day), "run"));
    back(outcome, "/admin/statements".to_string())
}

async fn resolve_form(
    State(state): State<AppState>,
    op: Operator,
    Path(id): Path<String>,
    FormBody(form): FormBody<BTreeMap<String, String>>,
) -> Result<Response> {
    op.check(&form)?;
    // The day's page the form is on.
    let page = day_path(form.get("gateway").map_or("", String::as_str), form.get("day").map_or("", String::as_str));
    let note = read_note(form.get("note").map_or("", String::as_str));
    let outcome = match (id.parse::<i64>(), note) {
        (Ok(id), Ok(note)) => crate::usecase::statements::resolve_finding(&state.cx, id, &note)
            .await?
            .map(|f| (day_path(&f.gateway, &f.day), "resolved"))
            .ok_or_else(|| Error::not_found("finding")),
        (Err(_), _) => Err(Error::not_found("finding")),
        (_, Err(e)) => Err(e),
    };
    back(outcome, page)
}

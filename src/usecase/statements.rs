//! One statement day (对账, [`crate::domain::statement`]): the gateway's statement fetched
//! (outside any transaction), kassa's side of the same day read, and what does not agree recorded.
//! Run by the daily job and on demand (the API, the console, `kassa reconcile --statement`).

use serde::Serialize;

use crate::clock::Millis;
use crate::clock::SharedClock;
use crate::domain::money::Currency;
use crate::domain::statement::{self, Statement, format_day};
use crate::error::{Error, Result};
use crate::gateway::{Gateway, StatementError};
use crate::store::Db;
use crate::store::statements::{self as days, Changes, StatementDayView};

/// What one run of a day did.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct DayRun {
    pub gateway: String,
    pub day: String,
    /// `reconciled`, `waiting` (the file is not there yet; fetched again later), `unreadable`
    /// or `given_up` (not had after the last try).
    pub result: String,
    pub detail: Option<String>,
    pub changes: Changes,
    /// The day as stored after the run.
    pub view: Option<StatementDayView>,
}

/// The currency a day's totals are in: the most common of `currencies` (the statement's lines,
/// else kassa's payments of the day), else the gateway's first, else `XXX` (no currency).
pub(crate) fn day_currency<'a>(gateway: Option<&[Currency]>, currencies: impl Iterator<Item = &'a str>) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for currency in currencies {
        *counts.entry(currency).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(c, _)| c.to_string())
        .or_else(|| gateway.and_then(|c| c.first()).map(|c| c.code().to_string()))
        .unwrap_or_else(|| "XXX".to_string())
}

/// Fetches `gateway`'s statement of `day` and records the day (the `tries`th fetch of it).
pub async fn run_day(
    db: &Db,
    gateway: &dyn Gateway,
    day: time::Date,
    tries: i64,
    clock: &SharedClock,
) -> Result<DayRun> {
    let name = gateway.name();
    let Some(offset) = gateway.statement_offset() else {
        return Err(Error::unprocessable(
            "no_statements",
            format!("the {name} gateway publishes no statements kassa reads"),
        ));
    };
    let day_text = format_day(day);
    let fetched = gateway.statement(day).await;
    let now = clock.now_ms();
    let (result, detail, changes) = match fetched {
        Ok(statement) => {
            let changes = reconcile_had(db, (name, gateway.currencies()), (day, offset), &statement, now).await?;
            metrics::counter!("kassa_statement_days_total", "gateway" => name, "result" => "reconciled").increment(1);
            ("reconciled", None, changes)
        }
        Err(StatementError::Unreadable(detail)) => {
            let currency = day_currency(gateway.currencies(), std::iter::empty());
            let changes = days::record_unreadable(db, name, &day_text, &currency, &detail, tries, now).await?;
            metrics::counter!("kassa_statement_days_total", "gateway" => name, "result" => "unreadable").increment(1);
            ("unreadable", Some(detail), changes)
        }
        Err(StatementError::NotYet(detail) | StatementError::Unavailable(detail)) => {
            let currency = day_currency(gateway.currencies(), std::iter::empty());
            let given_up = days::record_waiting(db, name, &day_text, &currency, &detail, tries, now).await?;
            let result = if given_up { "given_up" } else { "waiting" };
            metrics::counter!("kassa_statement_days_total", "gateway" => name, "result" => result).increment(1);
            (result, Some(detail), Changes::default())
        }
        Err(StatementError::Unsupported) => {
            return Err(Error::unprocessable(
                "no_statements",
                format!("the {name} gateway publishes no statements kassa reads"),
            ));
        }
    };
    if let Some(d) = &detail {
        tracing::warn!(gateway = name, day = %day_text, result, detail = %d, "statement day not reconciled");
    } else {
        tracing::info!(gateway = name, day = %day_text, opened = changes.opened, closed = changes.closed, "statement day reconciled");
    }
    Ok(DayRun {
        gateway: name.to_string(),
        day: day_text.clone(),
        result: result.to_string(),
        detail,
        changes,
        view: days::day(db, name, &day_text).await?,
    })
}

/// What a run does once it has `gateway`'s statement of `day` (the gateway's name and currencies,
/// the day and the gateway's offset from UTC): kassa's side of the day read against it and what
/// does not agree recorded.
pub async fn reconcile_had(
    db: &Db,
    (name, currencies): (&str, Option<&[Currency]>),
    (day, offset): (time::Date, time::UtcOffset),
    statement: &Statement,
    now: Millis,
) -> Result<Changes> {
    let day_text = format_day(day);
    let window = statement::day_window(day, offset);
    let ours = days::ours(db, name, (&day_text, window), statement).await?;
    let outcome = statement::reconcile(statement, &ours);
    let currency = if statement.lines.is_empty() {
        day_currency(currencies, ours.payments.iter().map(|p| p.currency.as_str()))
    } else {
        day_currency(currencies, statement.lines.iter().map(|l| l.currency.as_str()))
    };
    let lines = i64::try_from(statement.lines.len()).unwrap_or(i64::MAX);
    days::record(db, name, &day_text, &currency, lines, &outcome, now).await
}

/// Marks statement finding `id` resolved by the operator, with their note; `None` when there is
/// no such finding.
pub async fn resolve_finding(cx: &super::Context, id: i64, note: &str) -> Result<Option<days::StatementFindingView>> {
    days::resolve(&cx.db, id, note, cx.now_ms()).await
}

//! Statement reconciliation (对账, `domain::statement`): fetches a gateway's statement of a day
//! (outside any transaction), reads kassa's side of the same day, and records what does not agree.
//! The daily job runs each gateway's previous day once the configured local time has passed, and
//! fetches again every [`statement::STATEMENT_RETRY_MS`] until the file is there (or
//! [`statement::STATEMENT_TRIES_MAX`] tries); `kassa reconcile --statement` runs one day on demand.

use serde::Serialize;

use crate::clock::SharedClock;
use crate::domain::statement;
use crate::error::{Error, Result};
use crate::gateway::{Gateway, Gateways, StatementError};
use crate::store::Db;
use crate::store::statements::{self as days, Changes, StatementDayView};

/// How long a claimed day is this instance's to fetch and record.
const STATEMENT_LEASE_MS: i64 = 10 * 60_000;

/// The format of a statement day: `2026-03-01`.
const DAY_FORMAT: &[time::format_description::BorrowedFormatItem<'_>] =
    time::macros::format_description!("[year]-[month]-[day]");

/// Reads `YYYY-MM-DD`.
pub fn parse_day(text: &str) -> Option<time::Date> {
    time::Date::parse(text.trim(), DAY_FORMAT).ok()
}

/// Writes `YYYY-MM-DD`.
pub fn format_day(day: time::Date) -> String {
    day.format(DAY_FORMAT).unwrap_or_default()
}

/// When the daily job runs: local time of day and the zone it is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Minutes after midnight.
    pub at_minutes: u16,
    pub offset: time::UtcOffset,
}

impl Default for Schedule {
    /// 10:00 Beijing time: the gateways publish the previous day's file from the morning on.
    fn default() -> Self {
        Schedule { at_minutes: 10 * 60, offset: time::UtcOffset::from_hms(8, 0, 0).unwrap_or(time::UtcOffset::UTC) }
    }
}

/// Reads `HH:MM`.
pub fn parse_time_of_day(text: &str) -> Option<u16> {
    let (h, m) = text.trim().split_once(':')?;
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60 && text.trim().len() == 5).then_some(h * 60 + m)
}

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
fn day_currency<'a>(gateway: &dyn Gateway, currencies: impl Iterator<Item = &'a str>) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for currency in currencies {
        *counts.entry(currency).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(a.0)))
        .map(|(c, _)| c.to_string())
        .or_else(|| gateway.currencies().and_then(|c| c.first()).map(|c| c.code().to_string()))
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
            let window = statement::day_window(day, offset);
            let ours = days::ours(db, name, (&day_text, window), &statement).await?;
            let outcome = statement::reconcile(&statement, &ours);
            let currency = if statement.lines.is_empty() {
                day_currency(gateway, ours.payments.iter().map(|p| p.currency.as_str()))
            } else {
                day_currency(gateway, statement.lines.iter().map(|l| l.currency.as_str()))
            };
            let lines = i64::try_from(statement.lines.len()).unwrap_or(i64::MAX);
            let changes = days::record(db, name, &day_text, &currency, lines, &outcome, now).await?;
            metrics::counter!("kassa_statement_days_total", "gateway" => name, "result" => "reconciled").increment(1);
            ("reconciled", None, changes)
        }
        Err(StatementError::Unreadable(detail)) => {
            let currency = day_currency(gateway, std::iter::empty());
            let changes = days::record_unreadable(db, name, &day_text, &currency, &detail, tries, now).await?;
            metrics::counter!("kassa_statement_days_total", "gateway" => name, "result" => "unreadable").increment(1);
            ("unreadable", Some(detail), changes)
        }
        Err(StatementError::NotYet(detail) | StatementError::Unavailable(detail)) => {
            let currency = day_currency(gateway, std::iter::empty());
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

/// The daily job.
pub struct StatementJob {
    pub db: Db,
    pub gateways: Gateways,
    pub clock: SharedClock,
    pub schedule: Schedule,
}

impl StatementJob {
    /// Runs each gateway's due day when it is not reconciled yet and its next fetch is due;
    /// returns the runs made (a run that failed is logged and left to its claim running out).
    pub async fn step(&self) -> Result<Vec<DayRun>> {
        let mut runs = Vec::new();
        for name in self.gateways.names() {
            let Some(gateway) = self.gateways.get(name) else { continue };
            let Some(offset) = gateway.statement_offset() else { continue };
            let now = self.clock.now_ms();
            let Some(day) = statement::due_day(now, self.schedule.at_minutes, self.schedule.offset, offset) else {
                continue;
            };
            let day_text = format_day(day);
            let currency = day_currency(gateway.as_ref(), std::iter::empty());
            let (_, day_end) = statement::day_window(day, offset);
            let claim = days::claim_day(&self.db, name, (&day_text, day_end), &currency, now, STATEMENT_LEASE_MS);
            let Some(tries) = claim.await? else {
                continue;
            };
            // One gateway's failure (its claim runs out, so it is tried again) does not hold up
            // the others'.
            match run_day(&self.db, gateway.as_ref(), day, tries + 1, &self.clock).await {
                Ok(run) => runs.push(run),
                Err(e) => tracing::error!(gateway = name, day = %day_text, error = %e, "statement day failed"),
            }
        }
        Ok(runs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::statement::{STATEMENT_RETRY_MS, STATEMENT_TRIES_MAX};

    #[test]
    fn days_and_times_of_day_are_read_strictly() {
        assert_eq!(parse_day("2026-03-01"), Some(time::macros::date!(2026 - 03 - 01)));
        for bad in ["2026-3-1", "2026-02-30", "yesterday", "", "2026-03-01T00:00"] {
            assert_eq!(parse_day(bad), None, "{bad}");
        }
        assert_eq!(format_day(time::macros::date!(2026 - 03 - 01)), "2026-03-01");
        assert_eq!(parse_time_of_day("10:00"), Some(600));
        assert_eq!(parse_time_of_day("00:05"), Some(5));
        for bad in ["24:00", "9:00", "10:60", "10", "ab:cd"] {
            assert_eq!(parse_time_of_day(bad), None, "{bad}");
        }
        assert_eq!(STATEMENT_TRIES_MAX * STATEMENT_RETRY_MS, 12 * 3_600_000);
    }
}

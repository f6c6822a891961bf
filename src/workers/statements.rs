//! The daily statement job: runs each gateway's previous day ([`crate::usecase::statements`]) once
//! the configured local time has passed, and fetches again every [`statement::STATEMENT_RETRY_MS`]
//! until the file is there (or [`statement::STATEMENT_TRIES_MAX`] tries).

use crate::clock::SharedClock;
use crate::clock::Zone;
use crate::domain::statement;
use crate::error::Result;
use crate::gateway::Gateways;
use crate::store::Db;
use crate::store::statements as days;

/// How long a claimed day is this instance's to fetch and record.
const STATEMENT_LEASE_MS: i64 = 10 * 60_000;

pub use crate::domain::statement::{format_day, parse_day};
use crate::usecase::statements::day_currency;
pub use crate::usecase::statements::{DayRun, run_day};

/// When the daily job runs: local time of day and the zone it is read in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Minutes after midnight.
    pub at_minutes: u16,
    pub zone: Zone,
}

impl Default for Schedule {
    /// 10:00 Beijing time: the gateways publish the previous day's file from the morning on.
    fn default() -> Self {
        let beijing = time::UtcOffset::from_hms(8, 0, 0).unwrap_or(time::UtcOffset::UTC);
        Schedule { at_minutes: 10 * 60, zone: Zone::from(beijing) }
    }
}

/// Reads `HH:MM`.
pub fn parse_time_of_day(text: &str) -> Option<u16> {
    let (h, m) = text.trim().split_once(':')?;
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    (h < 24 && m < 60 && text.trim().len() == 5).then_some(h * 60 + m)
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
            let Some(day) =
                statement::due_day(now, self.schedule.at_minutes, self.schedule.zone.offset_at(now), offset)
            else {
                continue;
            };
            let day_text = format_day(day);
            let currency = day_currency(gateway.currencies(), std::iter::empty());
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

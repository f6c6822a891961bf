//! The daily backstop poll of complaints and disputes ([`crate::usecase::cases::poll_all`]): what
//! a lost notification missed is found within a day. Instances share when the next poll is due
//! (a setting), so a fleet polls about once a day; two that poll at once record nothing twice.

use crate::error::Result;
use crate::store::{cases, settings};
use crate::usecase::{Context, cases as uc};

/// How often the providers' cases are listed.
pub const CASE_POLL_EVERY_MS: i64 = 86_400_000;
/// The setting that holds when the next poll is due (milliseconds since the epoch).
const NEXT_POLL_SETTING: &str = "cases_next_poll_at";

pub struct CasePoller {
    pub cx: Context,
}

impl CasePoller {
    /// Polls every provider with cases when the poll is due; answers what each found (empty when
    /// it was not due). A provider that cannot be polled is alerted and the others are polled.
    pub async fn step(&self) -> Result<Vec<uc::Polled>> {
        let now = self.cx.now_ms();
        let due: i64 =
            settings::get_or_init(&self.cx.db, NEXT_POLL_SETTING, || now.to_string()).await?.parse().unwrap_or(0);
        if now < due {
            return Ok(Vec::new());
        }
        settings::set(&self.cx.db, NEXT_POLL_SETTING, Some(&now.saturating_add(CASE_POLL_EVERY_MS).to_string()))
            .await?;
        let mut found = Vec::new();
        for polled in uc::poll_all(&self.cx).await {
            match polled {
                Ok(p) => found.push(p),
                Err(e) => cases::alert_poll_failed(&self.cx.db, &e.to_string(), now).await?,
            }
        }
        Ok(found)
    }
}

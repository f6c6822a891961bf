//! The expiry sweeper: runs [`crate::usecase::expiry::sweep`] — the stock of unpaid orders whose
//! hold has elapsed goes back on sale, each attempt closed at its gateway first.

use crate::error::Result;
use crate::usecase::Context;

pub use crate::usecase::expiry::{SWEEP_BATCH_MAX, SWEEP_LEASE_MS, SweepReport};

pub struct Sweeper {
    pub cx: Context,
}

impl Sweeper {
    pub async fn step(&self) -> Result<SweepReport> {
        crate::usecase::expiry::sweep(&self.cx).await
    }
}

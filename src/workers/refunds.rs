//! The refund worker: sends the refunds that are due ([`crate::usecase::refund`]) — requested and
//! not yet sent, or sent and waiting for their next try.

use crate::error::Result;
use crate::usecase::{Context, refund};

pub struct Refunder {
    pub cx: Context,
}

impl Refunder {
    /// Sends every due refund; returns how many were sent.
    pub async fn step(&self) -> Result<usize> {
        refund::send_due(&self.cx).await
    }
}

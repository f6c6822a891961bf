//! The gateways' keys kept current: each gateway's scheduled upkeep ([`Gateway::maintain_keys`]:
//! WeChat Pay downloads its rotating platform certificates), with an alert naming what failed.

use crate::clock::SharedClock;
use crate::error::Result;
use crate::gateway::Gateways;
use crate::store::Db;
use crate::store::events::{self, Severity};

pub struct KeyKeeper {
    db: Db,
    clock: SharedClock,
    gateways: Gateways,
}

impl KeyKeeper {
    pub fn new(db: Db, clock: SharedClock, gateways: Gateways) -> KeyKeeper {
        KeyKeeper { db, clock, gateways }
    }

    /// One round over every gateway; returns how many need an operator.
    pub async fn step(&self) -> Result<usize> {
        let mut failing = 0;
        for name in self.gateways.names() {
            let Some(gateway) = self.gateways.get(name) else { continue };
            let now = self.clock.now_ms();
            if let Err(details) = gateway.maintain_keys(now).await {
                failing += 1;
                crate::write_tx!(self.db, |tx| {
                    events::raise_alert(tx, "gateway_keys", Severity::Warning, name, None, &details, now).await
                })?;
            }
        }
        Ok(failing)
    }
}

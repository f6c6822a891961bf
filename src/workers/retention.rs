//! The retention worker: prunes what the shop no longer needs (`store::retention`) and forgets the
//! rate-limit buckets of idle addresses.

use std::sync::Arc;

use crate::clock::SharedClock;
use crate::error::Result;
use crate::store::Db;
use crate::store::retention::{self, Pruned, Retention};

/// In-memory state that grows with the addresses seen (the HTTP guard's rate-limit buckets) and
/// forgets the idle ones when asked.
pub trait ForgetIdle: Send + Sync {
    fn forget_idle(&self);
}

pub struct Retainer {
    pub db: Db,
    pub clock: SharedClock,
    pub retention: Retention,
    pub memory: Arc<dyn ForgetIdle>,
}

impl Retainer {
    /// One pass.
    pub async fn step(&self) -> Result<Pruned> {
        self.memory.forget_idle();
        let pruned = retention::prune(&self.db, self.retention, self.clock.now_ms()).await?;
        if pruned.any() {
            tracing::info!(?pruned, "retention pass");
        }
        for (kind, n) in [
            ("baskets", pruned.baskets),
            ("sessions", pruned.sessions),
            ("notification_bodies", pruned.notification_bodies),
            ("rejected_notifications", pruned.rejected_notifications),
            ("signin_failures", pruned.signin_failures),
            ("delivered_messages", pruned.delivered_messages),
            ("idempotency_keys", pruned.idempotency_keys),
        ] {
            metrics::counter!("kassa_pruned_total", "kind" => kind).increment(n);
        }
        Ok(pruned)
    }
}

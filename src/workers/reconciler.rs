//! The reconciler worker: runs [`crate::usecase::reconcile`] — kassa asks the gateways about what
//! their notifications left open — on its interval.

pub use crate::usecase::reconcile::{FORCED_PASS_MAX, RECONCILE_BATCH_MAX, ReconcileReport, Reconciler};

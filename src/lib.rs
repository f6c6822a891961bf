//! kassa — a self-hosted payment order engine.
//!
//! A tour of the code, from the inside out:
//!
//! - [`domain`]: the pure core. Money (`i64` minor units + ISO-4217 currency), identifiers, the
//!   order/attempt/reservation statuses with the one transition table, and the decisions
//!   (`decide_success`, `decide_failure`, `may_expire`). No I/O, no clock; unit-tested exhaustively.
//! - [`store`]: the only code that touches the database (SQLite by default, PostgreSQL for fleets).
//!   Each command runs in one transaction; every status change goes through
//!   [`store::events`], which checks the transition table and appends to the event log.
//!   [`store::check`] is `kassa check`, the invariant checker.
//! - [`gateway`]: adapters behind the [`gateway::Gateway`] trait (hand-off, notification
//!   verification, acknowledgement, close). [`sandbox`] is the built-in gateway simulator the
//!   sandbox adapter talks to.
//! - [`usecase`]: one function per command (place, retry, cancel, refund, expire, reconcile, a
//!   statement day), over a narrow [`usecase::Context`]; the HTTP layer and the workers call them.
//! - [`http`]: the axum layer — JSON API, pages (askama templates in `templates/`), notifications,
//!   `/healthz`, `/metrics`, and `/openapi.json` generated from the same route table as the router.
//! - [`workers`]: background work as `step()` + loop; the expiry [`workers::sweeper`].
//! - [`app`]: wiring of all of the above; [`config`]: command line, environment and TOML file.
//!
//! [`layers`] declares this order once; its test fails on any import against it.

pub mod app;
pub mod backup;
pub mod clock;
pub mod config;
pub mod domain;
pub mod error;
pub mod gateway;
pub mod http;
pub mod layers;
pub mod sandbox;
pub mod store;
pub mod usecase;
pub mod vault;
pub mod workers;

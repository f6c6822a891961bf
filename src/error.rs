//! The one error type of the engine. Every error has a stable machine-readable code; a refusal
//! carries its kind ([`RefusalKind`]) and the HTTP layer maps that to a status in one place
//! (`http::status_of`). Internal errors are logged and never shown to the caller.

use serde_json::Value;

pub use crate::domain::refusal::{Refusal, RefusalKind};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A refusal the caller can act on: bad input, missing thing, business rule.
    #[error("{0}")]
    Refused(Refusal),
    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn refused(kind: RefusalKind, code: &'static str, message: impl Into<String>) -> Self {
        Error::Refused(Refusal::new(kind, code, message))
    }

    pub fn with_details(self, value: Value) -> Self {
        match self {
            Error::Refused(r) => Error::Refused(r.with_details(value)),
            other => other,
        }
    }

    pub fn not_found(what: &str) -> Self {
        Error::Refused(Refusal::not_found(what))
    }

    /// A malformed request (unreadable body, bad header or identifier).
    pub fn invalid(code: &'static str, message: impl Into<String>) -> Self {
        Error::refused(RefusalKind::Malformed, code, message)
    }

    /// Well-formed, and against a business rule or a field's limits.
    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Error::Refused(Refusal::unprocessable(code, message))
    }

    pub fn unauthorized() -> Self {
        Error::refused(RefusalKind::Unauthenticated, "unauthorized", "missing or unknown credentials")
    }

    pub fn forbidden() -> Self {
        Error::refused(RefusalKind::Forbidden, "forbidden", "not allowed")
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Error::Refused(Refusal::conflict(code, message))
    }

    /// A gateway could not be reached or did not answer usefully; the caller may retry.
    pub fn upstream(code: &'static str, message: impl Into<String>) -> Self {
        Error::refused(RefusalKind::Upstream, code, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(anyhow::anyhow!(message.into()))
    }

    /// The stable code of this error (`internal` for anything unexpected).
    pub fn code(&self) -> &'static str {
        match self {
            Error::Refused(r) => r.code,
            _ if self.is_unavailable() => "database_unavailable",
            Error::Db(_) | Error::Internal(_) => "internal",
        }
    }

    /// The database cannot be reached (down, restarting, refusing connections): the request may
    /// succeed later, and is answered 503 `database_unavailable` with `Retry-After`.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Db(e) => is_unavailable_db(e),
            Error::Internal(e) => e.chain().any(|c| c.downcast_ref::<sqlx::Error>().is_some_and(is_unavailable_db)),
            Error::Refused(_) => false,
        }
    }

    /// Serialization failures and deadlocks (PostgreSQL) or a busy database (SQLite) are worth
    /// retrying the whole transaction for; nothing else is.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Db(e) => is_retryable_db(e),
            _ => false,
        }
    }

    /// PostgreSQL refused an `EXECUTE` of a batch statement the connection had not prepared
    /// (`store::prepared`); nothing of it ran, and the connection has been given the statement.
    pub fn is_unprepared(&self) -> bool {
        matches!(self, Error::Db(e) if is_unprepared_db(e))
    }
}

/// Seconds a client is asked to wait (`Retry-After`) when the database is unavailable.
pub const DB_UNAVAILABLE_RETRY_AFTER_S: u64 = 5;

/// Whether `e` says the database could not be reached, rather than that a statement failed.
pub fn is_unavailable_db(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => matches!(
            db.code().as_deref(),
            // PostgreSQL: connection_exception (08…), operator_intervention shutting down or not yet
            // accepting connections (57P01-57P03), too_many_connections (53300).
            Some(c) if c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "53300")
        ),
        _ => false,
    }
}

/// PostgreSQL's `invalid_sql_statement_name`: an `EXECUTE` of a statement the connection has not
/// prepared.
pub const UNPREPARED_SQLSTATE: &str = "26000";

/// Whether `e` is [`UNPREPARED_SQLSTATE`].
pub fn is_unprepared_db(e: &sqlx::Error) -> bool {
    e.as_database_error().and_then(|d| d.code()).is_some_and(|c| c == UNPREPARED_SQLSTATE)
}

pub fn is_retryable_db(e: &sqlx::Error) -> bool {
    let Some(db) = e.as_database_error() else {
        return matches!(e, sqlx::Error::PoolTimedOut);
    };
    matches!(
        db.code().as_deref(),
        // PostgreSQL: serialization_failure, deadlock_detected.
        Some("40001") | Some("40P01")
        // SQLite: SQLITE_BUSY, SQLITE_BUSY_SNAPSHOT, SQLITE_LOCKED.
        | Some("5") | Some("517") | Some("6")
    )
}

impl From<crate::domain::MoneyError> for Error {
    fn from(e: crate::domain::MoneyError) -> Self {
        Error::Refused(e.into())
    }
}

impl From<crate::domain::status::IllegalTransition> for Error {
    fn from(e: crate::domain::status::IllegalTransition) -> Self {
        // An illegal transition reaching the store is a refused command, not a crash.
        Error::conflict("illegal_transition", e.to_string())
    }
}

impl From<Refusal> for Error {
    fn from(r: Refusal) -> Self {
        Error::Refused(r)
    }
}

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
    Db(#[from] DbError),
    #[error("internal error: {0:#}")]
    Internal(#[from] anyhow::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a database said went wrong, whichever driver said it: the code it gave (PostgreSQL's
/// SQLSTATE, SQLite's extended result code) and its message, or that it could not be reached.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DbError {
    code: Option<String>,
    message: String,
    /// Not reached at all: no connection, or it broke.
    unreachable: bool,
}

impl DbError {
    pub fn new(code: Option<String>, message: impl Into<String>) -> DbError {
        DbError { code, message: message.into(), unreachable: false }
    }

    /// The database could not be reached (a connection refused, broken, or not handed out in time).
    pub fn unreachable(message: impl Into<String>) -> DbError {
        DbError { code: None, message: message.into(), unreachable: true }
    }

    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The database cannot be reached (down, restarting, refusing connections).
    pub fn is_unavailable(&self) -> bool {
        self.unreachable
            || self.code().is_some_and(|c| {
                // PostgreSQL: connection_exception (08…), a connection not let in
                // (invalid_authorization_specification 28…, the database missing 3D000),
                // operator_intervention shutting down, not yet accepting connections or the
                // database dropped (57P01-57P04), too_many_connections (53300), the server's own
                // I/O failing (58030).
                // (PostgreSQL's codes are five characters; SQLite's, numbers, never start with 0
                // but may with 28.)
                c.starts_with("08")
                    || (c.len() == 5 && c.starts_with("28"))
                    || matches!(c, "3D000" | "57P01" | "57P02" | "57P03" | "57P04" | "53300" | "58030")
            })
    }

    /// Worth running the whole transaction again for.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.code(),
            // PostgreSQL: serialization_failure, deadlock_detected.
            Some("40001") | Some("40P01")
            // SQLite: SQLITE_BUSY, SQLITE_BUSY_SNAPSHOT, SQLITE_LOCKED.
            | Some("5") | Some("517") | Some("6")
        )
    }
}

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
            Error::Db(e) => e.is_unavailable(),
            Error::Internal(e) => e.chain().any(|c| {
                c.downcast_ref::<DbError>().is_some_and(DbError::is_unavailable)
                    || c.downcast_ref::<Error>().is_some_and(Error::is_unavailable)
            }),
            Error::Refused(_) => false,
        }
    }

    /// Serialization failures and deadlocks (PostgreSQL) or a busy database (SQLite) are worth
    /// retrying the whole transaction for; nothing else is.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Db(e) if e.is_retryable())
    }
}

/// Seconds a client is asked to wait (`Retry-After`) when the database is unavailable.
pub const DB_UNAVAILABLE_RETRY_AFTER_S: u64 = 5;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_that_does_not_let_kassa_in_is_unavailable_and_a_refused_statement_is_not() {
        for code in ["08006", "28P01", "28000", "3D000", "57P01", "57P04", "53300", "58030"] {
            assert!(DbError::new(Some(code.into()), "x").is_unavailable(), "{code}");
        }
        // SQLite's codes are numbers: a constraint (2067, 2835) or busy (5) is not the database away.
        for code in ["23505", "40001", "2067", "2835", "5", "42P01"] {
            assert!(!DbError::new(Some(code.into()), "x").is_unavailable(), "{code}");
        }
        assert!(DbError::unreachable("gone").is_unavailable());
    }
}

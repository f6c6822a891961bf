//! Refusals: what the core says when a command may not go ahead. Each has a stable machine-readable
//! code and a kind; only the HTTP layer turns the kind into a status (`http::status_of`).

use serde_json::Value;

/// The kind of a refusal: what the caller has to do differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// The request itself is malformed (unreadable body, bad header).
    Malformed,
    /// No credentials, or unknown ones.
    Unauthenticated,
    /// Known caller, not allowed (or a form that expired).
    Forbidden,
    /// The thing named does not exist (or is not the caller's).
    NotFound,
    /// The thing is in a state that does not allow this command.
    Conflict,
    /// The request body is over its limit.
    TooLarge,
    /// Well-formed, and against a business rule or a field's limits.
    Unprocessable,
    /// Too many requests, or too many open things, for now; the caller may try again later
    /// (`details.retry_after_s` says when, where it is known).
    TooMany,
    /// A remote party (a gateway) could not be reached or refused to answer; the caller may retry.
    Upstream,
}

/// A command refused by a rule, with what the caller needs to act on it.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub kind: RefusalKind,
    pub code: &'static str,
    pub message: String,
    /// Machine-readable facts about the refusal (`{"sku": …, "available": …}`).
    pub details: Option<Value>,
}

impl Refusal {
    pub fn new(kind: RefusalKind, code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal { kind, code, message: message.into(), details: None }
    }

    pub fn with_details(mut self, details: Value) -> Refusal {
        self.details = Some(details);
        self
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::Unprocessable, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Refusal {
        Refusal::new(RefusalKind::Conflict, code, message)
    }

    pub fn not_found(what: &str) -> Refusal {
        Refusal::new(RefusalKind::NotFound, "not_found", format!("{what} not found"))
    }

    pub fn amount_overflow(message: impl Into<String>) -> Refusal {
        Refusal::unprocessable("amount_overflow", message)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

impl From<super::MoneyError> for Refusal {
    fn from(e: super::MoneyError) -> Self {
        use super::MoneyError::*;
        let code = match e {
            UnknownCurrency(_) => "unknown_currency",
            Negative => "invalid_amount",
            Overflow => "amount_overflow",
            CurrencyMismatch(_, _) => "currency_mismatch",
        };
        Refusal::unprocessable(code, e.to_string())
    }
}

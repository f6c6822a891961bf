//! What a run of `kassa check` reads and what it reports, shared by its parts.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.invariant, self.detail)
    }
}

/// What a run of `kassa check` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every row.
    Full,
    /// What changed after the status-log row with this id (the last a clean run had read).
    Since(i64),
}

impl Scope {
    /// The value of the scope's parameter: the log id changes are read after, or NULL (all).
    pub(super) fn arg(self) -> Option<i64> {
        match self {
            Scope::Full => None,
            Scope::Since(id) => Some(id),
        }
    }
}

/// `col` names an order in scope: on a full run (parameter `$n` NULL) every order; otherwise one
/// with a change logged after status-log id `$n`. A condition of its own rather than an `OR` of
/// the two, so that the database joins the few changed orders to their rows by index (an `IN`
/// under an `OR` is tested on every row of the table).
pub(super) fn in_scope(scope: Scope, col: &str, n: usize) -> String {
    match scope {
        Scope::Full => format!("CAST(${n} AS BIGINT) IS NULL"),
        Scope::Since(_) => {
            format!("{col} IN (SELECT sc.order_no FROM status_events sc WHERE sc.id > CAST(${n} AS BIGINT))")
        }
    }
}

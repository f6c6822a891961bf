//! What differs between SQLite and PostgreSQL in the SQL the store writes, in one place: row
//! locks. SQLite's write transaction (`BEGIN IMMEDIATE`) already excludes every other writer, so
//! it needs none; PostgreSQL locks the rows a transaction will change, and a queue claim skips the
//! rows another instance holds.

/// Which database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    Sqlite,
    Postgres,
}

impl DbKind {
    /// Row-lock suffix for reading a row the transaction will change.
    pub fn for_update(self) -> &'static str {
        match self {
            DbKind::Sqlite => "",
            DbKind::Postgres => " FOR UPDATE",
        }
    }

    /// [`DbKind::for_update`] for a join: locks the rows of `alias` only.
    pub fn for_update_of(self, alias: &str) -> String {
        match self {
            DbKind::Sqlite => String::new(),
            DbKind::Postgres => format!(" FOR UPDATE OF {alias}"),
        }
    }

    /// The condition on `column` that holds for the rows `select` (a sub-select of that column,
    /// with its `LIMIT`) claims, the sub-select run once per statement. PostgreSQL locks them,
    /// skipping rows another transaction has locked, and reads them into an array first: an `IN`
    /// over such a sub-select may be run again for each row the outer statement reads, and so
    /// claim more rows than its limit. SQLite has one writer and reads an `IN` sub-select once.
    pub fn claimed(self, column: &str, select: &str) -> String {
        match self {
            DbKind::Sqlite => format!("{column} IN ({select})"),
            DbKind::Postgres => format!("{column} = ANY (ARRAY({select} FOR UPDATE SKIP LOCKED))"),
        }
    }

    /// Suffix of a sub-select that claims queue rows: PostgreSQL skips rows another instance has
    /// locked; SQLite has one writer, so there is nothing to skip.
    pub fn skip_locked(self) -> &'static str {
        match self {
            DbKind::Sqlite => "",
            DbKind::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }
}

//! PostgreSQL: consecutive `INSERT … VALUES …` statements of one flight sent as one statement of
//! data-modifying `WITH` queries, which gives back each insert's row count in its one row.
//!
//! Each statement PostgreSQL runs costs it more than its rows: a bound portal, an executor started
//! and ended, a snapshot, and an answer flushed to the socket. A confirm inserts its order, lines,
//! reservations, first attempt and log rows; a payment its notification, log rows and messages:
//! one statement instead of several.
//!
//! What is folded reads nothing: an insert of literal values and parameters, with no subquery
//! (`SELECT`), no `RETURNING` of its own and no `DO UPDATE` (which may not touch a row twice in one
//! statement). Such inserts give the same rows, row counts and errors as one after another: the
//! values depend on no row, each unique index is checked as each row goes in, and the checks run
//! after the statement — foreign keys, whose parents may go in earlier in the same statement,
//! and the row triggers — see every row it inserted. The first error fails the statement, as it
//! would have failed the flight's transaction.

use crate::store::sql::{Arg, Output};

/// A statement as written, with its values.
pub type Statement = (String, Vec<Arg>);

/// Most inserts folded into one statement.
pub const FOLD_MAX: usize = 16;

/// Where a statement of the flight as written went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Sent as it was: the `.0`-th statement sent.
    Alone(usize),
    /// Folded: column `column` of the `statement`-th statement sent.
    Folded { statement: usize, column: usize },
}

/// A flight with its consecutive inserts folded, and how to read the answers back.
#[derive(Debug)]
pub struct Folded {
    pub statements: Vec<Statement>,
    parts: Vec<Part>,
}

/// Whether `sql` is an insert that reads nothing and returns nothing (see the module's comment).
fn foldable(sql: &str) -> bool {
    let upper = sql.to_ascii_uppercase();
    upper.trim_start().starts_with("INSERT INTO ")
        && upper.contains(" VALUES ")
        && !upper.contains("SELECT")
        && !upper.contains("RETURNING")
        && !upper.contains("DO UPDATE")
        && !upper.contains(';')
}

/// `statements` with every run of two or more consecutive foldable inserts (at most
/// [`FOLD_MAX`] each) as one statement; `None` when there is none.
pub fn fold(statements: &[Statement]) -> Option<Folded> {
    let mut sent: Vec<Statement> = Vec::with_capacity(statements.len());
    let mut parts = Vec::with_capacity(statements.len());
    let mut folded_any = false;
    let mut at = 0;
    while at < statements.len() {
        let run = statements[at..].iter().take(FOLD_MAX).take_while(|(sql, _)| foldable(sql)).count();
        if run < 2 {
            parts.push(Part::Alone(sent.len()));
            sent.push(statements[at].clone());
            at += 1;
            continue;
        }
        folded_any = true;
        let mut with = Vec::with_capacity(run);
        let mut counts = Vec::with_capacity(run);
        let mut args = Vec::new();
        for (column, (sql, values)) in statements[at..at + run].iter().enumerate() {
            with.push(format!("i{column} AS ({} RETURNING 1)", crate::store::batch::renumber(sql.trim(), args.len())));
            counts.push(format!("(SELECT count(*) FROM i{column})"));
            args.extend(values.iter().cloned());
            parts.push(Part::Folded { statement: sent.len(), column });
        }
        sent.push((format!("WITH {} SELECT {}", with.join(", "), counts.join(", ")), args));
        at += run;
    }
    folded_any.then_some(Folded { statements: sent, parts })
}

impl Folded {
    /// The answers as if each statement had been sent as written: a folded insert's output holds
    /// its row count and no rows.
    pub fn unfold(&self, outputs: Vec<Output>) -> Vec<Output> {
        let mut outputs: Vec<Option<Output>> = outputs.into_iter().map(Some).collect();
        let counts: Vec<Option<crate::store::sql::Row>> =
            outputs.iter().map(|o| o.as_ref().and_then(|o| o.rows.first().cloned())).collect();
        self.parts
            .iter()
            .map(|part| match *part {
                Part::Alone(i) => outputs.get_mut(i).and_then(Option::take).unwrap_or_default(),
                Part::Folded { statement, column } => {
                    let changed = counts
                        .get(statement)
                        .and_then(Option::as_ref)
                        .and_then(|row| row.try_get::<i64>(column).ok())
                        .and_then(|n| u64::try_from(n).ok())
                        .unwrap_or(0);
                    Output { rows: Vec::new(), changed }
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(sql: &str, n: i64) -> Statement {
        (sql.to_string(), (1..=n).map(|i| Arg::Int(Some(i))).collect())
    }

    #[test]
    fn consecutive_inserts_go_as_one_statement_and_come_back_one_count_each() {
        let flight = vec![
            st("UPDATE skus SET reserved = reserved + $1 WHERE sku = $2", 2),
            st("INSERT INTO orders (a, b) VALUES ($1, $2)", 2),
            st("INSERT INTO lines (a) VALUES ($1)", 1),
            st("INSERT INTO log (a, b) VALUES ($1, 'x'), ($2, 'y')", 2),
            st("UPDATE baskets SET status = $1 WHERE id = $2", 2),
            st("INSERT INTO keys (a) VALUES ($1) ON CONFLICT DO NOTHING", 1),
        ];
        let f = fold(&flight).expect("a run of three inserts");
        let sql: Vec<&str> = f.statements.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            sql,
            [
                "UPDATE skus SET reserved = reserved + $1 WHERE sku = $2",
                "WITH i0 AS (INSERT INTO orders (a, b) VALUES ($1, $2) RETURNING 1), \
                 i1 AS (INSERT INTO lines (a) VALUES ($3) RETURNING 1), \
                 i2 AS (INSERT INTO log (a, b) VALUES ($4, 'x'), ($5, 'y') RETURNING 1) \
                 SELECT (SELECT count(*) FROM i0), (SELECT count(*) FROM i1), (SELECT count(*) FROM i2)",
                "UPDATE baskets SET status = $1 WHERE id = $2",
                "INSERT INTO keys (a) VALUES ($1) ON CONFLICT DO NOTHING",
            ]
        );
        assert_eq!(f.statements[1].1.len(), 5);
        let names: std::sync::Arc<[String]> = ["a", "b", "c"].map(String::from).into();
        let counts = crate::store::sql::Row::new(
            names,
            vec![crate::store::sql::Value::Int(1), crate::store::sql::Value::Int(1), crate::store::sql::Value::Int(2)],
        );
        let outputs = vec![
            Output { rows: Vec::new(), changed: 1 },
            Output { rows: vec![counts], changed: 1 },
            Output { rows: Vec::new(), changed: 0 },
            Output { rows: Vec::new(), changed: 1 },
        ];
        let changed: Vec<u64> = f.unfold(outputs).iter().map(|o| o.changed).collect();
        assert_eq!(changed, [1, 1, 1, 2, 0, 1]);
    }

    #[test]
    fn inserts_that_read_or_return_are_sent_alone() {
        for sql in [
            "INSERT INTO a (x) SELECT x FROM b",
            "INSERT INTO a (x) VALUES ((SELECT max(x) FROM b))",
            "INSERT INTO a (x) VALUES ($1) RETURNING x",
            "INSERT INTO a (x) VALUES ($1) ON CONFLICT (x) DO UPDATE SET x = 1",
        ] {
            assert!(!foldable(sql), "{sql}");
        }
        assert!(foldable("INSERT INTO a (x) VALUES ($1)"));
        // One insert alone is not worth a WITH.
        assert!(fold(&[st("INSERT INTO a (x) VALUES ($1)", 1), st("UPDATE a SET x = $1", 1)]).is_none());
        // At most FOLD_MAX in one statement.
        let many: Vec<Statement> = (0..FOLD_MAX + 3).map(|_| st("INSERT INTO a (x) VALUES ($1)", 1)).collect();
        let f = fold(&many).unwrap();
        assert_eq!(f.statements.len(), 2);
        assert_eq!(f.statements[0].1.len(), FOLD_MAX);
    }
}

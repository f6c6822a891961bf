//! PostgreSQL: how a flight's statements are sent. Consecutive `INSERT … VALUES …` statements go
//! as one statement of data-modifying `WITH` queries, which gives back each insert's row count in
//! its one row; and a statement whose row count is checked by the database (a flight that ends in
//! its transaction's `COMMIT`) is sent inside a `WITH` that fails when the count is not the one
//! expected, so that the `COMMIT` after it rolls back.
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
//!
//! A count checked by the database that is not the one expected calls `kassa_rows_short`
//! (migration 27), which fails the statement with [`SHORT_SQLSTATE`] and a message that says so
//! (the server's log shows it); [`Planned::checked_in`] names the statements it checked (in a
//! folded statement, every checked insert in it: the first of them names the failure).

use crate::store::sql::{Arg, Output};

/// A statement as written, with its values.
pub type Statement = (String, Vec<Arg>);

/// The rows a statement must change, checked by the database; `None`: not checked.
pub type Check = Option<u64>;

/// Most inserts folded into one statement.
pub const FOLD_MAX: usize = 16;

/// SQLSTATE of a count that was not the one expected (raised by `kassa_rows_short` alone).
pub const SHORT_SQLSTATE: &str = "KA001";

/// Where a statement of the flight as written went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// Sent as it was: the `.0`-th statement sent.
    Alone(usize),
    /// Sent with its row count checked: the `.0`-th statement sent, whose one value is the count.
    Counted(usize),
    /// Folded: column `column` of the `statement`-th statement sent.
    Folded { statement: usize, column: usize },
}

/// A flight as sent, and how to read the answers back.
#[derive(Debug)]
pub struct Planned {
    pub statements: Vec<Statement>,
    /// The flight's shape, planned ([`plan`] gives a `Planned` only for one that is).
    kept: Kept,
}

/// Where `word` (upper case) first stands in `sql`, whatever its case; no copy of `sql` made
/// (this runs on every statement of every flight).
fn find_word(sql: &str, word: &str) -> Option<usize> {
    sql.as_bytes().windows(word.len()).position(|w| w.eq_ignore_ascii_case(word.as_bytes()))
}

fn has(sql: &str, word: &str) -> bool {
    find_word(sql, word).is_some()
}

/// Whether `sql` begins with `word` (upper case), whatever its case.
fn begins(sql: &str, word: &str) -> bool {
    sql.trim_start().as_bytes().get(..word.len()).is_some_and(|b| b.eq_ignore_ascii_case(word.as_bytes()))
}

/// Whether `sql` is an insert that reads nothing and returns nothing (see the module's comment).
fn foldable(sql: &str) -> bool {
    begins(sql, "INSERT INTO ")
        && has(sql, " VALUES ")
        && !has(sql, "SELECT")
        && !has(sql, "RETURNING")
        && !has(sql, "DO UPDATE")
        && !sql.contains(';')
}

/// Whether the database can check `sql`'s row count: one `INSERT`, `UPDATE` or `DELETE` (a
/// data-modifying `WITH` query may hold it; a `WITH` of its own may not be nested).
pub fn checkable(sql: &str) -> bool {
    ["INSERT ", "UPDATE ", "DELETE "].iter().any(|verb| begins(sql, verb)) && !sql.contains(';')
}

/// Whether `sql` changes exactly `rows` rows or fails, whatever the rows in the database: an
/// `INSERT … VALUES` of `rows` tuples that reads nothing and has no `ON CONFLICT`. (No table of
/// kassa's has a `BEFORE INSERT` trigger or a rule that could skip a row; `tests/api/commit_flight.rs`
/// keeps it so.) Its count needs no check.
fn always_changes(sql: &str, rows: u64) -> bool {
    if !foldable(sql) || has(sql, "ON CONFLICT") {
        return false;
    }
    let Some(values) = find_word(sql, " VALUES ") else { return false };
    // Top-level tuples after VALUES, literals skipped.
    let (mut tuples, mut depth, mut quoted) = (0_u64, 0_u32, false);
    for b in sql.as_bytes().iter().skip(values) {
        match b {
            b'\'' => quoted = !quoted,
            b'(' if !quoted => {
                if depth == 0 {
                    tuples += 1;
                }
                depth += 1;
            }
            b')' if !quoted => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    tuples == rows
}

/// `sql` returning a row for each row it changed (`RETURNING 1` unless it returns already).
fn returning(sql: &str) -> String {
    if has(sql, "RETURNING") { sql.to_string() } else { format!("{sql} RETURNING 1") }
}

/// `count`, failing with [`SHORT_SQLSTATE`] unless it is `rows` (the function is called only then).
fn checked_count(count: &str, rows: u64) -> String {
    format!("CASE WHEN {count} = {rows} THEN {count} ELSE kassa_rows_short({count}, {rows}) END")
}

/// Most flight shapes [`plan`] keeps planned; past it the kept ones are forgotten and planned
/// again as they come. A shop's flights take a few dozen shapes (a confirm's by its lines, a
/// payment's by its messages), each a few kilobytes of SQL.
pub const PLAN_CACHE_MAX: usize = 512;

/// How a flight of one shape is sent: for each statement sent, its SQL and the statements as
/// written whose values it takes, in order; how to read the answers back.
#[derive(Debug)]
struct Shape {
    sent: Vec<(String, Vec<usize>)>,
    parts: Vec<Part>,
    checks: Vec<Vec<usize>>,
}

/// A flight's shape: each statement's SQL, its number of values and its check, and whether
/// inserts are folded; what a [`Shape`] depends on and nothing else.
#[derive(Debug)]
struct Key {
    statements: Vec<(String, usize, Check)>,
    fold: bool,
}

impl Key {
    fn new(statements: &[Statement], checks: &[Check], fold: bool) -> Key {
        let statements = shape_of(statements, checks).map(|(sql, values, check)| (sql.to_string(), values, check));
        Key { statements: statements.collect(), fold }
    }

    /// Whether this is the shape of `statements`, `checks` and `fold`.
    fn is(&self, statements: &[Statement], checks: &[Check], fold: bool) -> bool {
        self.fold == fold
            && self.statements.len() == statements.len()
            && self
                .statements
                .iter()
                .zip(shape_of(statements, checks))
                .all(|((sql, values, check), (s, v, c))| *values == v && *check == c && sql == s)
    }
}

/// Each statement's part of the flight's shape: its SQL, its number of values and its check.
fn shape_of<'a>(statements: &'a [Statement], checks: &'a [Check]) -> impl Iterator<Item = (&'a str, usize, Check)> {
    statements.iter().enumerate().map(|(i, (sql, args))| (sql.as_str(), args.len(), checks.get(i).copied().flatten()))
}

/// The hash a shape is kept under, read from the flight as it is (no copy made).
fn hash_of(statements: &[Statement], checks: &[Check], fold: bool) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    fold.hash(&mut h);
    for part in shape_of(statements, checks) {
        part.hash(&mut h);
    }
    h.finish()
}

/// A shape planned, with the key it was planned for (`None`: sent as written).
type Kept = std::sync::Arc<(Key, Option<Shape>)>;

/// The shapes planned so far, by their hash: writing a flight's SQL text anew (formatting,
/// renumbering its parameters, looking for the words that make an insert foldable) took 7 % of
/// the server's CPU in a PostgreSQL checkout.
static SHAPES: std::sync::LazyLock<std::sync::Mutex<std::collections::HashMap<u64, Kept>>> =
    std::sync::LazyLock::new(Default::default);

/// `statements` as sent: with `fold`, every run of two or more consecutive foldable inserts (at
/// most [`FOLD_MAX`] each) as one statement; each statement with a check ([`checkable`] only)
/// made to fail unless it changes the rows expected (but for one that always does:
/// [`always_changes`]). `None` when nothing changes. A shape is planned once and kept
/// ([`PLAN_CACHE_MAX`]); each flight of it takes its own values.
pub fn plan(statements: &[Statement], checks: &[Check], fold: bool) -> Option<Planned> {
    let hash = hash_of(statements, checks, fold);
    let cached = SHAPES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&hash).cloned();
    let kept = match cached {
        Some(kept) if kept.0.is(statements, checks, fold) => kept,
        _ => {
            let kept = std::sync::Arc::new((Key::new(statements, checks, fold), shape(statements, checks, fold)));
            let mut shapes = SHAPES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if shapes.len() >= PLAN_CACHE_MAX {
                shapes.clear();
            }
            shapes.insert(hash, kept.clone());
            kept
        }
    };
    let shape = kept.1.as_ref()?;
    let sent = shape
        .sent
        .iter()
        .map(|(sql, from)| {
            let args = from.iter().flat_map(|&i| statements[i].1.iter().cloned()).collect();
            (sql.clone(), args)
        })
        .collect();
    Some(Planned { statements: sent, kept })
}

/// [`plan`]'s work, the values left out: the SQL sent and where each statement as written went.
fn shape(statements: &[Statement], checks: &[Check], fold: bool) -> Option<Shape> {
    let check = |i: usize| {
        let rows = checks.get(i).copied().flatten()?;
        let sql = statements.get(i).map_or("", |(sql, _)| sql.as_str());
        (!always_changes(sql, rows)).then_some(rows)
    };
    let mut sent: Vec<(String, Vec<usize>)> = Vec::with_capacity(statements.len());
    let mut parts = Vec::with_capacity(statements.len());
    let mut checked: Vec<Vec<usize>> = Vec::with_capacity(statements.len());
    let mut changed = false;
    let mut at = 0;
    while at < statements.len() {
        let run =
            if fold { statements[at..].iter().take(FOLD_MAX).take_while(|(sql, _)| foldable(sql)).count() } else { 0 };
        if run < 2 {
            let (sql, _) = &statements[at];
            match check(at) {
                Some(rows) => {
                    parts.push(Part::Counted(sent.len()));
                    let count = checked_count("count(*)", rows);
                    sent.push((format!("WITH c AS ({}) SELECT {count} FROM c", returning(sql.trim())), vec![at]));
                    checked.push(vec![at]);
                    changed = true;
                }
                None => {
                    parts.push(Part::Alone(sent.len()));
                    sent.push((sql.clone(), vec![at]));
                    checked.push(Vec::new());
                }
            }
            at += 1;
            continue;
        }
        changed = true;
        let mut with = Vec::with_capacity(run);
        let mut counts = Vec::with_capacity(run);
        let mut values = 0;
        let mut checks_here = Vec::new();
        for (column, (sql, args)) in statements[at..at + run].iter().enumerate() {
            with.push(format!("i{column} AS ({} RETURNING 1)", crate::store::sql::renumber(sql.trim(), values)));
            let count = format!("(SELECT count(*) FROM i{column})");
            counts.push(match check(at + column) {
                Some(rows) => {
                    checks_here.push(at + column);
                    checked_count(&count, rows)
                }
                None => count,
            });
            values += args.len();
            parts.push(Part::Folded { statement: sent.len(), column });
        }
        sent.push((format!("WITH {} SELECT {}", with.join(", "), counts.join(", ")), (at..at + run).collect()));
        checked.push(checks_here);
        at += run;
    }
    changed.then_some(Shape { sent, parts, checks: checked })
}

impl Planned {
    /// The statements as written whose counts the `sent`-th statement sent checks.
    pub fn checked_in(&self, sent: usize) -> &[usize] {
        self.kept.1.as_ref().and_then(|shape| shape.checks.get(sent)).map_or(&[], Vec::as_slice)
    }

    /// The answers as if each statement had been sent as written: a folded or counted
    /// statement's output holds its row count and no rows.
    pub fn unfold(&self, outputs: Vec<Output>) -> Vec<Output> {
        let mut outputs: Vec<Option<Output>> = outputs.into_iter().map(Some).collect();
        let counts: Vec<Option<crate::store::sql::Row>> =
            outputs.iter().map(|o| o.as_ref().and_then(|o| o.rows.first().cloned())).collect();
        let count = |statement: usize, column: usize| {
            counts
                .get(statement)
                .and_then(Option::as_ref)
                .and_then(|row| row.try_get::<i64>(column).ok())
                .and_then(|n| u64::try_from(n).ok())
                .unwrap_or(0)
        };
        let parts = self.kept.1.as_ref().map_or(&[][..], |shape| shape.parts.as_slice());
        parts
            .iter()
            .map(|part| match *part {
                Part::Alone(i) => outputs.get_mut(i).and_then(Option::take).unwrap_or_default(),
                Part::Counted(statement) => Output { rows: Vec::new(), changed: count(statement, 0) },
                Part::Folded { statement, column } => Output { rows: Vec::new(), changed: count(statement, column) },
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
        let f = plan(&flight, &[], true).expect("a run of three inserts");
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

    /// A checked count fails the statement (by `kassa_rows_short`) unless it is the one expected:
    /// a statement alone inside a `WITH` of its own, a folded insert in its column; a failure names
    /// the statements the failing one checked.
    #[test]
    fn checked_counts_are_made_to_fail_in_the_database() {
        let flight = vec![
            st("UPDATE skus SET reserved = reserved + $1 WHERE sku = $2", 2),
            st("INSERT INTO orders (a) VALUES ($1)", 1),
            st("INSERT INTO keys (a) VALUES ($1) ON CONFLICT DO NOTHING", 1),
            st("UPDATE s SET n = n + 1 WHERE id = $1 RETURNING n", 1),
            st("DELETE FROM baskets WHERE id = $1", 1),
        ];
        // The order's insert always changes its one row: checked for nothing.
        let checks = [Some(1), Some(1), Some(1), Some(1), None];
        let p = plan(&flight, &checks, true).expect("checks change the flight");
        let sql: Vec<&str> = p.statements.iter().map(|(s, _)| s.as_str()).collect();
        assert_eq!(
            sql,
            [
                "WITH c AS (UPDATE skus SET reserved = reserved + $1 WHERE sku = $2 RETURNING 1) \
                 SELECT CASE WHEN count(*) = 1 THEN count(*) ELSE kassa_rows_short(count(*), 1) END FROM c",
                "WITH i0 AS (INSERT INTO orders (a) VALUES ($1) RETURNING 1), \
                 i1 AS (INSERT INTO keys (a) VALUES ($2) ON CONFLICT DO NOTHING RETURNING 1) \
                 SELECT (SELECT count(*) FROM i0), \
                 CASE WHEN (SELECT count(*) FROM i1) = 1 THEN (SELECT count(*) FROM i1) \
                 ELSE kassa_rows_short((SELECT count(*) FROM i1), 1) END",
                "WITH c AS (UPDATE s SET n = n + 1 WHERE id = $1 RETURNING n) \
                 SELECT CASE WHEN count(*) = 1 THEN count(*) ELSE kassa_rows_short(count(*), 1) END FROM c",
                "DELETE FROM baskets WHERE id = $1",
            ]
        );
        assert_eq!(p.checked_in(0), [0]);
        assert_eq!(p.checked_in(1), [2]);
        assert_eq!(p.checked_in(2), [3]);
        assert!(p.checked_in(3).is_empty());
        assert!(p.checked_in(9).is_empty());
        let one = |values: Vec<i64>| {
            let names: std::sync::Arc<[String]> = (0..values.len()).map(|i| format!("c{i}")).collect();
            let row =
                crate::store::sql::Row::new(names, values.into_iter().map(crate::store::sql::Value::Int).collect());
            Output { rows: vec![row], changed: 1 }
        };
        let outputs = vec![one(vec![1]), one(vec![1, 1]), one(vec![1]), Output { rows: Vec::new(), changed: 3 }];
        let changed: Vec<u64> = p.unfold(outputs).iter().map(|o| o.changed).collect();
        assert_eq!(changed, [1, 1, 1, 1, 3]);
        // Without folding, each checked statement alone; unchecked ones as written.
        let p = plan(&flight, &checks, false).unwrap();
        assert_eq!(p.statements.len(), 5);
        assert_eq!(p.statements[1].0, "INSERT INTO orders (a) VALUES ($1)");
        assert!(
            p.statements[2]
                .0
                .starts_with("WITH c AS (INSERT INTO keys (a) VALUES ($1) ON CONFLICT DO NOTHING RETURNING 1)")
        );
        // Nothing checked and nothing folded: sent as written.
        assert!(plan(&flight, &[], false).is_none());
        for (sql, rows, always) in [
            ("INSERT INTO log (a, b) VALUES ($1, 'x(y'), ($2, 'z')", 2, true),
            ("INSERT INTO log (a, b) VALUES ($1, 'x(y'), ($2, 'z')", 1, false),
            ("INSERT INTO log (a, b) VALUES ($1, lower($2))", 1, true),
            ("INSERT INTO keys (a) VALUES ($1) ON CONFLICT DO NOTHING", 1, false),
            ("INSERT INTO a (x) SELECT x FROM b", 1, false),
            ("UPDATE a SET x = 1", 1, false),
        ] {
            assert_eq!(always_changes(sql, rows), always, "{sql} ({rows})");
        }
        for (sql, ok) in [
            ("UPDATE a SET x = 1", true),
            ("  insert into a (x) values (1)", true),
            ("DELETE FROM a", true),
            ("WITH x AS (SELECT 1) UPDATE a SET x = 1", false),
            ("SELECT 1", false),
            ("UPDATE a SET x = 1; DELETE FROM a", false),
        ] {
            assert_eq!(checkable(sql), ok, "{sql}");
        }
    }

    /// A shape is planned once: a later flight of it is sent with its own values, and a flight
    /// that differs in a statement, a statement's number of values or a check is planned anew.
    #[test]
    fn each_flight_of_a_kept_shape_is_sent_with_its_own_values() {
        let flight = |a: i64, b: i64| {
            vec![
                ("INSERT INTO kept_o (a) VALUES ($1)".to_string(), vec![Arg::Int(Some(a))]),
                ("INSERT INTO kept_l (a, b) VALUES ($1, $2)".to_string(), vec![Arg::Int(Some(b)), Arg::Int(Some(a))]),
            ]
        };
        let values = |p: &Planned| -> Vec<Vec<Option<i64>>> {
            p.statements
                .iter()
                .map(|(_, args)| args.iter().map(|a| if let Arg::Int(v) = a { *v } else { None }).collect())
                .collect()
        };
        let first = plan(&flight(1, 2), &[], true).unwrap();
        let second = plan(&flight(3, 4), &[], true).unwrap();
        assert_eq!(first.statements[0].0, second.statements[0].0);
        assert_eq!(values(&first), [[Some(1), Some(2), Some(1)]]);
        assert_eq!(values(&second), [[Some(3), Some(4), Some(3)]]);
        // The second insert checked for two rows, which its one tuple never changes.
        let checked = plan(&flight(5, 6), &[None, Some(2)], true).unwrap();
        assert!(checked.statements[0].0.contains("kassa_rows_short((SELECT count(*) FROM i1), 2)"));
        assert_eq!(checked.checked_in(0), [1]);
        assert!(first.checked_in(0).is_empty());
        // One value fewer: the parameters are numbered again.
        let mut short = flight(7, 8);
        short[0] = ("INSERT INTO kept_o (a) VALUES (0)".to_string(), Vec::new());
        let short = plan(&short, &[], true).unwrap();
        assert!(short.statements[0].0.contains("INSERT INTO kept_l (a, b) VALUES ($1, $2)"));
        assert_eq!(values(&short), [[Some(8), Some(7)]]);
        // Not folded: nothing changes, as before.
        assert!(plan(&flight(1, 2), &[], false).is_none());
        assert_eq!(values(&plan(&flight(9, 10), &[], true).unwrap()), [[Some(9), Some(10), Some(9)]]);
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
        assert!(plan(&[st("INSERT INTO a (x) VALUES ($1)", 1), st("UPDATE a SET x = $1", 1)], &[], true).is_none());
        // At most FOLD_MAX in one statement.
        let many: Vec<Statement> = (0..FOLD_MAX + 3).map(|_| st("INSERT INTO a (x) VALUES ($1)", 1)).collect();
        let f = plan(&many, &[], true).unwrap();
        assert_eq!(f.statements.len(), 2);
        assert_eq!(f.statements[0].1.len(), FOLD_MAX);
    }
}

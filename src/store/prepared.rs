//! PostgreSQL: the statements of a one-trip batch script ([`super::batch`]) run as prepared
//! statements, so PostgreSQL parses and plans each distinct statement once per connection instead
//! of on every batch.
//!
//! A batch goes to PostgreSQL as one simple-query message (one round trip), which takes no bound
//! values; written with its values as literals, every statement of it was parsed, analysed and
//! planned afresh each time (about a fifth of PostgreSQL's work in the benchmarks). Here each
//! distinct statement text gets a name (`kassa_` and a hash of the text), is `PREPARE`d on a
//! connection once, and the script says `EXECUTE kassa_…(literal, …)` instead: still one message,
//! still every value written by [`super::batch`]'s literal escaping, but the plan is PostgreSQL's
//! cached one.
//!
//! Which connection holds which prepared statements is not visible through sqlx's pool, so kassa
//! does not track it. A new connection prepares every statement known so far (`after_connect`);
//! a script that meets a connection lacking one fails with `26000` (invalid statement name)
//! before changing anything — the whole message is one transaction, or runs inside the caller's,
//! which PostgreSQL then aborts — and kassa prepares what that connection lacks, after which the
//! script or its transaction runs again on the same connection ([`prepare_missing`],
//! [`recover_in_transaction`]; `write_tx!` reruns the transaction's body). Prepared statements
//! are not transactional in PostgreSQL: a `PREPARE` stays when its transaction rolls back.
//!
//! Should the statements keep vanishing between a `PREPARE` and the script that uses them — a
//! pooler between kassa and PostgreSQL that hands each statement another server connection —
//! kassa stops preparing ([`give_up`]) and writes every statement out, as before.
//!
//! A text PostgreSQL will not prepare (it cannot infer a parameter's type, say) is written with
//! literals from then on, as before. At most [`TEXTS_MAX`] texts are remembered; any beyond that
//! are written with literals too, so the registry and the statements a connection holds stay
//! bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sqlx::Executor as _;

use crate::error::Result;

/// The most statement texts remembered (named, or refused by PostgreSQL); later ones are written
/// with literals.
pub const TEXTS_MAX: usize = 256;

/// How many times one transaction may run again, on its own connection, because the connection
/// lacked a prepared statement. Once is the rule (the connection is then given every named text);
/// more means the statements vanish between the `PREPARE` and the script — a pooler between kassa
/// and PostgreSQL that hands each statement another server connection (PgBouncer in transaction
/// mode does not carry SQL-level prepared statements across). Then kassa stops preparing
/// ([`give_up`]) and the transaction runs with its statements written out.
pub const RECOVERIES_MAX: u32 = 8;

/// Set once prepared statements have been found not to stay on a connection.
static GAVE_UP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether batch statements go by prepared name (not after [`give_up`]).
pub fn in_use() -> bool {
    !GAVE_UP.load(std::sync::atomic::Ordering::Relaxed)
}

/// Stops preparing batch statements in this process: they are written out with literals from
/// now on, as with `KASSA_PG_PREPARED=0`.
pub fn give_up() {
    if !GAVE_UP.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "prepared statements do not stay on PostgreSQL's connections (a transaction-pooling \
             connection pooler in between?); batch statements are sent written out from now on"
        );
    }
}

/// SQLSTATE `invalid_sql_statement_name`: `EXECUTE` of a name this connection has not prepared.
pub const UNPREPARED: &str = crate::error::UNPREPARED_SQLSTATE;

/// What a statement text is written as.
#[derive(Debug, Clone)]
pub enum Form {
    /// `EXECUTE name(…)` with this many parameters.
    Named { name: Arc<str>, params: usize },
    /// Its own text with the values as literals.
    Literal,
}

#[derive(Default)]
struct Registry {
    by_text: HashMap<String, Form>,
    /// Every named text, in the order it was named: what a connection prepares.
    named: Vec<(Arc<str>, String)>,
}

fn registry() -> &'static Mutex<Registry> {
    static REGISTRY: std::sync::OnceLock<Mutex<Registry>> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(Mutex::default)
}

fn lock() -> std::sync::MutexGuard<'static, Registry> {
    // The registry holds no invariant a panicking holder could break halfway.
    registry().lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The highest `$N` in `sql`: its parameter count.
pub fn param_count(sql: &str) -> usize {
    super::batch::placeholders(sql).map(|(_, n)| n).max().unwrap_or(0)
}

/// The name a text is prepared under: `kassa_` and 64 bits of a hash of it.
fn name_of(sql: &str) -> String {
    use std::hash::{Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    sql.hash(&mut h);
    format!("kassa_{:016x}", h.finish())
}

/// How `sql` is written in a script; names it on first sight while there is room.
pub fn form(sql: &str) -> Form {
    lock().form(sql, TEXTS_MAX)
}

impl Registry {
    /// [`form`], remembering at most `room` texts.
    fn form(&mut self, sql: &str, room: usize) -> Form {
        if let Some(f) = self.by_text.get(sql) {
            return f.clone();
        }
        if self.by_text.len() >= room {
            // No room: written out, and not remembered either, so the registry stays bounded.
            return Form::Literal;
        }
        let name = name_of(sql);
        let form = if self.named.iter().any(|(n, _)| **n == *name) {
            // (64-bit hash) another text has the name already.
            Form::Literal
        } else {
            let name: Arc<str> = name.into();
            self.named.push((Arc::clone(&name), sql.to_string()));
            Form::Named { name, params: param_count(sql) }
        };
        self.by_text.insert(sql.to_string(), form.clone());
        form
    }
}

/// From now on `sql` is written with literals (PostgreSQL would not prepare it).
fn demote(sql: &str) {
    let mut r = lock();
    if let Some(f) = r.by_text.get_mut(sql) {
        *f = Form::Literal;
    }
    r.named.retain(|(_, text)| text != sql);
}

/// Whether `e` is PostgreSQL saying a prepared statement is missing on the connection.
pub fn is_unprepared(e: &sqlx::Error) -> bool {
    crate::error::is_unprepared_db(e)
}

/// Prepares on `conn` (outside any transaction) every named text it lacks. A text PostgreSQL
/// refuses to prepare is written with literals from then on if it is one of `own` (the texts
/// of the script that found them missing, which is about to run again); others are left for
/// their own scripts to find, since a table may not exist yet where a connection opens.
pub async fn prepare_missing<C>(conn: &mut C, own: &[&str]) -> Result<()>
where
    for<'e> &'e mut C: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let held: Vec<String> = sqlx::query_scalar("SELECT name FROM pg_prepared_statements WHERE name LIKE 'kassa\\_%'")
        .fetch_all(&mut *conn)
        .await?;
    let wanted: Vec<(Arc<str>, String)> =
        lock().named.iter().filter(|(name, _)| !held.iter().any(|h| **h == **name)).cloned().collect();
    for (name, sql) in wanted {
        if let Err(e) = (&mut *conn).execute(sqlx::raw_sql(&format!("PREPARE {name} AS {sql}"))).await {
            if e.as_database_error().is_none() {
                return Err(e.into());
            }
            if own.contains(&sql.as_str()) {
                tracing::warn!(statement = %name, error = %e, "PostgreSQL would not prepare a batch statement; it is sent with literals");
                demote(&sql);
            }
        }
    }
    Ok(())
}

/// Prepares every named text on a connection PostgreSQL has just opened. Best effort: a text
/// left out is prepared when a script first needs it.
pub async fn on_connect(conn: &mut sqlx::AnyConnection) -> std::result::Result<(), sqlx::Error> {
    if lock().named.is_empty() {
        return Ok(());
    }
    if let Err(e) = prepare_missing(conn, &[]).await {
        tracing::debug!(error = %e, "preparing batch statements on a new connection");
    }
    Ok(())
}

/// Inside an open transaction that an `EXECUTE` of a missing name has aborted: ends it,
/// prepares what the connection lacks, and opens a new one on the same connection, where the
/// caller's transaction then runs again from its start (`write_tx!` does so when it sees the
/// [`UNPREPARED`] error this leaves the caller with).
pub async fn recover_in_transaction(conn: &mut super::Conn, own: &[&str]) -> Result<()> {
    (&mut *conn).execute(sqlx::raw_sql("ROLLBACK")).await?;
    let prepared = prepare_missing(conn, own).await;
    (&mut *conn).execute(sqlx::raw_sql("BEGIN")).await?;
    prepared
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parameters() {
        assert_eq!(param_count("UPDATE t SET a = $1, b = $12 WHERE c = $3"), 12);
        assert_eq!(param_count("SELECT 1"), 0);
        assert_eq!(param_count("SELECT $"), 0);
    }

    #[test]
    fn names_a_text_once_and_demotes_it() {
        let sql = "UPDATE prepared_unit_test SET a = $1 WHERE b = $2";
        let Form::Named { name, params } = form(sql) else { panic!("a new text gets a name") };
        assert!(name.starts_with("kassa_") && name.len() == 22, "{name}");
        assert_eq!(params, 2);
        assert!(matches!(form(sql), Form::Named { name: again, .. } if again == name));
        demote(sql);
        assert!(matches!(form(sql), Form::Literal));
        assert!(!lock().named.iter().any(|(_, t)| t == sql));
    }

    #[test]
    fn remembers_a_bounded_number_of_texts() {
        let mut r = Registry::default();
        assert!(matches!(r.form("UPDATE a SET x = $1", 2), Form::Named { params: 1, .. }));
        assert!(matches!(r.form("UPDATE b SET x = $1", 2), Form::Named { .. }));
        assert!(matches!(r.form("UPDATE c SET x = $1", 2), Form::Literal), "no room for a third");
        assert_eq!((r.by_text.len(), r.named.len()), (2, 2));
        assert!(matches!(r.form("UPDATE a SET x = $1", 2), Form::Named { .. }), "the first keeps its name");
    }
}

//! The rows `kassa bench seed` writes and where they go: each value as both databases take it, the
//! tables in an order their foreign keys allow, and the sink that writes a batch in one
//! transaction (`COPY … (FORMAT binary)` on PostgreSQL, prepared inserts on SQLite).

use std::pin::pin;

use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use kassa::store::DbKind;

/// One value of a generated row, as both databases take it.
#[derive(Debug, Clone)]
pub(super) enum V {
    Int(Option<i64>),
    Text(Option<String>),
    Bytes(Vec<u8>),
}

pub(super) fn t(s: impl Into<String>) -> V {
    V::Text(Some(s.into()))
}
pub(super) fn i(n: i64) -> V {
    V::Int(Some(n))
}
pub(super) const NULL_TEXT: V = V::Text(None);
pub(super) const NULL_INT: V = V::Int(None);

impl V {
    /// The value as PostgreSQL's binary COPY takes it.
    fn pg(&self) -> &(dyn ToSql + Sync) {
        match self {
            V::Int(n) => n,
            V::Text(s) => s,
            V::Bytes(b) => b,
        }
    }
}

impl rusqlite::ToSql for V {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(match self {
            V::Int(Some(n)) => ToSqlOutput::Borrowed(ValueRef::Integer(*n)),
            V::Text(Some(s)) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            V::Int(None) | V::Text(None) => ToSqlOutput::Borrowed(ValueRef::Null),
            V::Bytes(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        })
    }
}

/// A table the seeder writes: its columns and their types, in the order of every row.
pub(super) struct Table {
    name: &'static str,
    columns: &'static [(&'static str, Type)],
}

macro_rules! table {
    ($name:literal: $($col:ident $ty:ident),+) => {
        Table { name: $name, columns: &[$((stringify!($col), Type::$ty)),+] }
    };
}

/// The tables in an order that satisfies their foreign keys.
pub(super) const TABLES: [Table; 13] = [
    table!("sessions": id TEXT, token_hash TEXT, csrf_token TEXT, created_at INT8),
    table!("baskets": id TEXT, session_id TEXT, status TEXT, order_no TEXT, created_at INT8, updated_at INT8),
    table!("basket_lines": basket_id TEXT, sku TEXT, quantity INT8, quoted_unit_minor INT8, currency TEXT),
    table!("orders": order_no TEXT, session_id TEXT, basket_id TEXT, status TEXT, total_minor INT8, currency TEXT,
        captured_minor INT8, captured_currency TEXT, gateway TEXT, hold_expires_at INT8, created_at INT8,
        updated_at INT8, captured_attempt_ref TEXT, pre_refund_status TEXT, merchant_reference TEXT, metadata TEXT,
        open_counted INT8),
    table!("order_lines": order_no TEXT, line_no INT8, sku TEXT, name TEXT, kind TEXT, unit_price_minor INT8,
        quantity INT8, line_total_minor INT8),
    table!("reservations": order_no TEXT, sku TEXT, quantity INT8, status TEXT, expires_at INT8, updated_at INT8),
    table!("payment_attempts": attempt_ref TEXT, order_no TEXT, seq INT8, gateway TEXT, channel TEXT, status TEXT,
        amount_minor INT8, currency TEXT, gateway_txn_id TEXT, created_at INT8, updated_at INT8, captured_minor INT8),
    table!("refunds": refund_no TEXT, order_no TEXT, attempt_ref TEXT, amount_minor INT8, currency TEXT, reason TEXT,
        kind TEXT, status TEXT, gateway_refund_id TEXT, tries INT8, next_at INT8, lease_until INT8, created_at INT8,
        updated_at INT8),
    table!("notifications": id TEXT, gateway TEXT, event_id TEXT, claimed_event_id TEXT, status TEXT, attempt_ref TEXT,
        order_no TEXT, raw_body BYTEA, received_at INT8, body_pruned_at INT8, body_len INT8),
    table!("status_events": order_no TEXT, entity TEXT, entity_id TEXT, from_status TEXT, to_status TEXT,
        trigger_name TEXT, notification_id TEXT, at INT8),
    table!("outbox": id TEXT, order_no TEXT, topic TEXT, payload TEXT, status TEXT, tries INT8, next_at INT8,
        lease_until INT8, created_at INT8, delivered_at INT8),
    table!("idempotency_keys": session_id TEXT, idem_key TEXT, basket_id TEXT, order_no TEXT, created_at INT8),
    table!("card_keys": id TEXT, sku TEXT, fingerprint TEXT, nonce BYTEA, ciphertext BYTEA, status TEXT, order_no TEXT,
        line_no INT8, delivered_at INT8, created_at INT8),
];

pub(super) const SESSIONS: usize = 0;
pub(super) const BASKETS: usize = 1;
pub(super) const BASKET_LINES: usize = 2;
pub(super) const ORDERS: usize = 3;
pub(super) const ORDER_LINES: usize = 4;
pub(super) const RESERVATIONS: usize = 5;
pub(super) const ATTEMPTS: usize = 6;
pub(super) const REFUNDS: usize = 7;
pub(super) const NOTIFICATIONS: usize = 8;
pub(super) const EVENTS: usize = 9;
pub(super) const OUTBOX: usize = 10;
pub(super) const IDEMPOTENCY: usize = 11;
pub(super) const CARD_KEYS: usize = 12;

/// The rows of one batch, per table of [`TABLES`].
pub(super) type Rows = Vec<Vec<Vec<V>>>;

/// Where the rows go.
pub(super) enum Sink {
    Sqlite(rusqlite::Connection),
    Postgres(tokio_postgres::Client),
}

impl Sink {
    pub(super) async fn open(url: &str, kind: DbKind) -> anyhow::Result<Sink> {
        Ok(match kind {
            DbKind::Sqlite => {
                let path = kassa::store::sqlite_path(url).ok_or_else(|| anyhow::anyhow!("not a SQLite URL"))?;
                let conn = rusqlite::Connection::open(path)?;
                conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000;")?;
                Sink::Sqlite(conn)
            }
            DbKind::Postgres => {
                let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
                tokio::spawn(async move {
                    if let Err(e) = connection.await {
                        eprintln!("kassa bench seed: PostgreSQL connection: {e}");
                    }
                });
                Sink::Postgres(client)
            }
        })
    }

    /// Writes one batch in one transaction.
    pub(super) async fn write(&mut self, rows: &Rows) -> anyhow::Result<()> {
        match self {
            Sink::Sqlite(conn) => {
                let tx = conn.transaction()?;
                for (table, rows) in TABLES.iter().zip(rows) {
                    let columns: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
                    let marks: Vec<String> = (1..=columns.len()).map(|n| format!("?{n}")).collect();
                    let sql =
                        format!("INSERT INTO {} ({}) VALUES ({})", table.name, columns.join(", "), marks.join(", "));
                    let mut insert = tx.prepare_cached(&sql)?;
                    for row in rows {
                        insert.execute(rusqlite::params_from_iter(row.iter()))?;
                    }
                }
                tx.commit()?;
            }
            Sink::Postgres(client) => {
                let tx = client.transaction().await?;
                for (table, rows) in TABLES.iter().zip(rows) {
                    if rows.is_empty() {
                        continue;
                    }
                    let columns: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
                    let types: Vec<Type> = table.columns.iter().map(|(_, ty)| ty.clone()).collect();
                    let sink = tx
                        .copy_in(&format!("COPY {} ({}) FROM STDIN (FORMAT binary)", table.name, columns.join(", ")))
                        .await?;
                    let mut writer = pin!(BinaryCopyInWriter::new(sink, &types));
                    for row in rows {
                        let values: Vec<&(dyn ToSql + Sync)> = row.iter().map(V::pg).collect();
                        writer.as_mut().write(&values).await?;
                    }
                    writer.finish().await?;
                }
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// Runs statements with their values (`$1`, `$2` … on both databases), in one transaction.
    pub(super) async fn run(&mut self, statements: &[(&str, Vec<V>)]) -> anyhow::Result<()> {
        match self {
            Sink::Sqlite(conn) => {
                let tx = conn.transaction()?;
                for (sql, values) in statements {
                    tx.execute(sql, rusqlite::params_from_iter(values.iter()))?;
                }
                tx.commit()?;
            }
            Sink::Postgres(client) => {
                let tx = client.transaction().await?;
                for (sql, values) in statements {
                    let values: Vec<&(dyn ToSql + Sync)> = values.iter().map(V::pg).collect();
                    tx.execute(*sql, &values).await?;
                }
                tx.commit().await?;
            }
        }
        Ok(())
    }
}

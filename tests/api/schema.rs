//! The two migration folders build the same schema: both migrated from empty, their tables,
//! columns, indexes and constraints compared. A change made in one folder only fails here.

use kassa::store::sql;
use std::collections::BTreeSet;

use crate::common::{Backend, fresh_database};

/// One fact about a schema, written the same way for both databases.
type Facts = BTreeSet<String>;

/// A column's type as both databases can agree on it.
fn family(declared: &str) -> &'static str {
    let t = declared.to_ascii_lowercase();
    if t.contains("int") || t.contains("serial") {
        "integer"
    } else if t.contains("char") || t.contains("text") {
        "text"
    } else if t.contains("blob") || t.contains("bytea") {
        "bytes"
    } else {
        "other"
    }
}

async fn sqlite_facts(pool: kassa::store::Reader<'_>) -> Facts {
    let mut facts = Facts::new();
    let tables: Vec<String> = sql::query_scalar(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in &tables {
        facts.insert(format!("table {table}"));
        let columns = sql::query("SELECT name, type, \"notnull\", pk FROM pragma_table_info($1)")
            .bind(table)
            .fetch_all(pool)
            .await
            .unwrap();
        let mut pk: Vec<(i64, String)> = Vec::new();
        for c in &columns {
            let name: String = c.get("name");
            let declared: String = c.get("type");
            let key: i64 = c.get("pk");
            // A primary key column is never null, whether or not it says so.
            let not_null = c.get::<i64>("notnull") == 1 || key > 0;
            facts.insert(format!(
                "column {table}.{name} {} {}",
                family(&declared),
                if not_null { "not null" } else { "null" }
            ));
            if key > 0 {
                pk.push((key, name));
            }
        }
        pk.sort();
        let pk: Vec<String> = pk.into_iter().map(|(_, n)| n).collect();
        if !pk.is_empty() {
            facts.insert(format!("primary key {table} ({})", pk.join(", ")));
        }
        let indexes = sql::query("SELECT name, \"unique\", origin, partial FROM pragma_index_list($1)")
            .bind(table)
            .fetch_all(pool)
            .await
            .unwrap();
        for i in &indexes {
            let name: String = i.get("name");
            let origin: String = i.get("origin");
            let cols: Vec<String> = sql::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
                .bind(&name)
                .fetch_all(pool)
                .await
                .unwrap();
            match origin.as_str() {
                "pk" => {}
                "u" => {
                    facts.insert(format!("unique {table} ({})", cols.join(", ")));
                }
                _ => {
                    let unique = if i.get::<i64>("unique") == 1 { "unique " } else { "" };
                    let partial = if i.get::<i64>("partial") == 1 { " partial" } else { "" };
                    facts.insert(format!("{unique}index {name} on {table} ({}){partial}", cols.join(", ")));
                }
            }
        }
        // A key of several columns is one fact, its columns in order (as PostgreSQL lists them).
        let fks = sql::query(
            "SELECT \"table\", group_concat(\"from\", ', ') AS cols, group_concat(\"to\", ', ') AS parent_cols \
             FROM (SELECT * FROM pragma_foreign_key_list($1) ORDER BY id, seq) GROUP BY id",
        )
        .bind(table)
        .fetch_all(pool)
        .await
        .unwrap();
        for f in &fks {
            let (from, parent, to): (String, String, String) = (f.get("cols"), f.get("table"), f.get("parent_cols"));
            facts.insert(format!("foreign key {table}.{from} -> {parent}.{to}"));
        }
        let sql: String = sql::query_scalar("SELECT sql FROM sqlite_schema WHERE name = $1")
            .bind(table)
            .fetch_one(pool)
            .await
            .unwrap();
        facts.insert(format!("checks {table} {}", sql.matches("CHECK").count()));
    }
    let triggers: Vec<String> =
        sql::query_scalar("SELECT tbl_name FROM sqlite_schema WHERE type = 'trigger'").fetch_all(pool).await.unwrap();
    for table in BTreeSet::<String>::from_iter(triggers) {
        facts.insert(format!("triggers on {table}"));
    }
    facts
}

async fn postgres_facts(pool: kassa::store::Reader<'_>) -> Facts {
    let mut facts = Facts::new();
    let tables: Vec<String> = sql::query_scalar(
        "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in &tables {
        facts.insert(format!("table {table}"));
    }
    let columns = sql::query(
        "SELECT CAST(table_name AS TEXT) AS t, CAST(column_name AS TEXT) AS c, CAST(data_type AS TEXT) AS ty, \
         CAST(is_nullable AS TEXT) AS n FROM information_schema.columns WHERE table_schema = current_schema()",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for c in &columns {
        let (t, name, ty, nullable): (String, String, String, String) =
            (c.get("t"), c.get("c"), c.get("ty"), c.get("n"));
        facts.insert(format!(
            "column {t}.{name} {} {}",
            family(&ty),
            if nullable == "NO" { "not null" } else { "null" }
        ));
    }
    // Constraints: primary keys, unique, foreign keys and checks.
    let constraints = sql::query(
        "SELECT CAST(t.relname AS TEXT) AS t, CAST(c.contype AS TEXT) AS kind, \
         CAST(COALESCE(p.relname, '') AS TEXT) AS parent, \
         CAST((SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(c.conkey) WITH ORDINALITY k(attnum, n) \
               JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum) AS TEXT) AS cols, \
         CAST(COALESCE((SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(c.confkey) WITH ORDINALITY k(attnum, n) \
               JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum), '') AS TEXT) AS parent_cols \
         FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid LEFT JOIN pg_class p ON p.oid = c.confrelid \
         WHERE t.relnamespace = CAST(CAST(current_schema() AS TEXT) AS regnamespace)",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut checks: std::collections::BTreeMap<String, usize> = tables.iter().map(|t| (t.clone(), 0)).collect();
    for c in &constraints {
        let (t, kind, parent, cols, parent_cols): (String, String, String, String, String) =
            (c.get("t"), c.get("kind"), c.get("parent"), c.get("cols"), c.get("parent_cols"));
        match kind.as_str() {
            "p" => {
                facts.insert(format!("primary key {t} ({cols})"));
            }
            "u" => {
                facts.insert(format!("unique {t} ({cols})"));
            }
            "f" => {
                facts.insert(format!("foreign key {t}.{cols} -> {parent}.{parent_cols}"));
            }
            "c" => *checks.entry(t).or_default() += 1,
            other => panic!("unexpected constraint kind {other} on {t}"),
        }
    }
    for (t, n) in checks {
        facts.insert(format!("checks {t} {n}"));
    }
    // Indexes of their own (not those backing a primary key or unique constraint).
    let indexes = sql::query(
        "SELECT CAST(i.relname AS TEXT) AS name, CAST(t.relname AS TEXT) AS t, x.indisunique AS uniq, \
         x.indpred IS NOT NULL AS partial, \
         CAST((SELECT string_agg(a.attname, ', ' ORDER BY k.n) FROM unnest(x.indkey) WITH ORDINALITY k(attnum, n) \
               JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum) AS TEXT) AS cols \
         FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid \
         WHERE t.relnamespace = CAST(CAST(current_schema() AS TEXT) AS regnamespace) \
           AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for i in &indexes {
        let (name, t, cols): (String, String, String) = (i.get("name"), i.get("t"), i.get("cols"));
        let unique = if i.get::<bool>("uniq") { "unique " } else { "" };
        let partial = if i.get::<bool>("partial") { " partial" } else { "" };
        facts.insert(format!("{unique}index {name} on {t} ({cols}){partial}"));
    }
    let triggers: Vec<String> = sql::query_scalar(
        "SELECT DISTINCT CAST(event_object_table AS TEXT) FROM information_schema.triggers \
         WHERE trigger_schema = current_schema()",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in triggers {
        facts.insert(format!("triggers on {table}"));
    }
    facts
}

#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test]
async fn both_migration_folders_build_the_same_schema() {
    let Some(pg) = Backend::postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut found = Vec::new();
    for backend in [Backend::Sqlite, pg] {
        let url = fresh_database(&backend, dir.path()).await;
        let db = kassa::store::Db::connect(&url, 2).await.unwrap();
        db.migrate().await.unwrap();
        let facts = match backend {
            Backend::Sqlite => sqlite_facts(db.read_pool()).await,
            Backend::Postgres(_) => postgres_facts(db.read_pool()).await,
        };
        db.close().await;
        found.push(facts);
    }
    let (sqlite, postgres) = (&found[0], &found[1]);
    assert!(sqlite.len() > 150 && sqlite.iter().any(|f| f.starts_with("foreign key orders.basket_id")), "{sqlite:#?}");
    let only_sqlite: Vec<&String> = sqlite.difference(postgres).collect();
    let only_postgres: Vec<&String> = postgres.difference(sqlite).collect();
    assert!(
        only_sqlite.is_empty() && only_postgres.is_empty(),
        "SQLite only: {only_sqlite:#?}\nPostgreSQL only: {only_postgres:#?}"
    );
}

/// The rows of an order in flight, as an older kassa left them: a SKU with one unit held, a
/// session, its frozen basket, the pending order, its reservation, attempt and log row.
/// The schema version this kassa migrates to.
pub const LATEST: i64 = 27;

#[test]
fn latest_is_the_last_migration() {
    assert_eq!(kassa::store::Db::sqlite_migrations().last().unwrap().0, LATEST);
}

pub const OLDER_DATABASE_ROWS: &str = "INSERT INTO skus (sku, name, kind, price_minor, currency, on_hand, reserved, created_at, updated_at) \
       VALUES ('S', 'S', 'physical', 500, 'CNY', 5, 1, 0, 0); \
     INSERT INTO sessions (id, token_hash, csrf_token, created_at) VALUES ('SE', 'h', 'c', 0); \
     INSERT INTO baskets (id, session_id, status, order_no, created_at, updated_at) VALUES ('B', 'SE', 'frozen', 'O-1', 0, 0); \
     INSERT INTO orders (order_no, session_id, basket_id, status, total_minor, currency, gateway, hold_expires_at, created_at, updated_at) \
       VALUES ('O-1', 'SE', 'B', 'pending_payment', 500, 'CNY', 'sandbox', 9, 0, 0); \
     INSERT INTO reservations (order_no, sku, quantity, status, expires_at, updated_at) VALUES ('O-1', 'S', 1, 'active', 9, 0); \
     INSERT INTO payment_attempts (attempt_ref, order_no, seq, gateway, channel, status, amount_minor, currency, created_at, updated_at) \
       VALUES ('O-1_1', 'O-1', 1, 'sandbox', 'form', 'created', 500, 'CNY', 0, 0); \
     INSERT INTO status_events (order_no, entity, entity_id, to_status, trigger_name, at) \
       VALUES ('O-1', 'order', 'O-1', 'pending_payment', 'checkout', 0);";

/// PostgreSQL's migrations 1-8, as a database an older kassa left stops after them.
const POSTGRES_MIGRATIONS_1_TO_8: [&str; 8] = [
    include_str!("../../migrations/postgres/0001_init.sql"),
    include_str!("../../migrations/postgres/0002_sweep_claims.sql"),
    include_str!("../../migrations/postgres/0003_fulfilment_refunds.sql"),
    include_str!("../../migrations/postgres/0004_admin.sql"),
    include_str!("../../migrations/postgres/0005_event_index.sql"),
    include_str!("../../migrations/postgres/0006_captured_attempt.sql"),
    include_str!("../../migrations/postgres/0007_reconciliation.sql"),
    include_str!("../../migrations/postgres/0008_periodic_indexes.sql"),
];

/// A PostgreSQL database an older kassa left — at version 8, or at a version 9 whose checkout
/// rows had no foreign keys — with an order in it, migrated: its rows stay, every condition
/// compares in place (from version 8) and every reference of the checkout is a foreign key again.
#[cfg_attr(not(kassa_test_pg), ignore = "PostgreSQL: KASSA_TEST_DATABASE_URL was not set when the tests were built")]
#[tokio::test]
async fn older_postgres_databases_migrate_to_the_same_references() {
    let Some(pg) = Backend::postgres() else { return };
    let dir = tempfile::tempdir().unwrap();
    for without_references in [false, true] {
        let url = fresh_database(&pg, dir.path()).await;
        {
            let mut script =
                "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL);".to_string();
            for (i, sql) in POSTGRES_MIGRATIONS_1_TO_8.iter().enumerate() {
                script.push_str(sql);
                script.push_str(&format!(
                    ";\nINSERT INTO schema_migrations (version, applied_at) VALUES ({}, 0);\n",
                    i + 1
                ));
            }
            script.push_str(OLDER_DATABASE_ROWS);
            if without_references {
                script.push_str(
                    ";\nALTER TABLE reservations DROP CONSTRAINT reservations_order_no_fkey; \
                     ALTER TABLE orders DROP CONSTRAINT orders_basket_id_fkey; \
                     ALTER TABLE payment_attempts DROP CONSTRAINT payment_attempts_order_no_fkey; \
                     INSERT INTO schema_migrations (version, applied_at) VALUES (9, 0);",
                );
            }
            crate::common::run_script(&url, &script).await;
        }
        let db = kassa::store::Db::connect(&url, 2).await.unwrap();
        db.migrate().await.unwrap();
        let pool = db.read_pool();
        let scalar = |sql: &'static str| async move { sql::query_scalar::<i64>(sql).fetch_one(pool).await.unwrap() };
        assert_eq!(scalar("SELECT MAX(version) FROM schema_migrations").await, crate::schema::LATEST);
        assert_eq!(scalar("SELECT CAST(COUNT(*) AS BIGINT) FROM payment_attempts").await, 1);
        let references = scalar(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_constraint WHERE contype = 'f' AND conname IN \
             ('reservations_order_no_fkey', 'orders_basket_id_fkey', 'payment_attempts_order_no_fkey', 'basket_lines_sku_fkey')",
        )
        .await;
        assert_eq!(references, 4, "without_references: {without_references}");
        let lists = scalar(
            "SELECT CAST(COUNT(*) AS BIGINT) FROM pg_constraint WHERE contype = 'c' \
             AND pg_get_constraintdef(oid) LIKE '%= ANY (ARRAY[%'",
        )
        .await;
        // From version 8 migration 9 rewrites them; a database that took an earlier 9 keeps
        // its equivalent lists.
        if !without_references {
            assert_eq!(lists, 0);
        }
        let orphan = sql::query(
            "INSERT INTO reservations (order_no, sku, quantity, status, expires_at, updated_at) VALUES ('NO-SUCH', 'S', 1, 'active', 0, 0)",
        )
        .execute(pool)
        .await;
        assert!(orphan.is_err(), "the reference is enforced");
        db.close().await;
    }
}

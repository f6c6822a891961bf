//! The two migration folders build the same schema: both migrated from empty, their tables,
//! columns, indexes and constraints compared. A change made in one folder only fails here.

use std::collections::BTreeSet;

use sqlx::Row as _;

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

async fn sqlite_facts(pool: &sqlx::AnyPool) -> Facts {
    let mut facts = Facts::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in &tables {
        facts.insert(format!("table {table}"));
        let columns = sqlx::query("SELECT name, type, \"notnull\", pk FROM pragma_table_info($1)")
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
            let not_null = c.get::<i64, _>("notnull") == 1 || key > 0;
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
        let indexes = sqlx::query("SELECT name, \"unique\", origin, partial FROM pragma_index_list($1)")
            .bind(table)
            .fetch_all(pool)
            .await
            .unwrap();
        for i in &indexes {
            let name: String = i.get("name");
            let origin: String = i.get("origin");
            let cols: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_index_info($1) ORDER BY seqno")
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
                    let unique = if i.get::<i64, _>("unique") == 1 { "unique " } else { "" };
                    let partial = if i.get::<i64, _>("partial") == 1 { " partial" } else { "" };
                    facts.insert(format!("{unique}index {name} on {table} ({}){partial}", cols.join(", ")));
                }
            }
        }
        let fks = sqlx::query("SELECT \"from\", \"table\", \"to\" FROM pragma_foreign_key_list($1)")
            .bind(table)
            .fetch_all(pool)
            .await
            .unwrap();
        for f in &fks {
            let (from, parent, to): (String, String, String) = (f.get("from"), f.get("table"), f.get("to"));
            facts.insert(format!("foreign key {table}.{from} -> {parent}.{to}"));
        }
        let sql: String = sqlx::query_scalar("SELECT sql FROM sqlite_schema WHERE name = $1")
            .bind(table)
            .fetch_one(pool)
            .await
            .unwrap();
        facts.insert(format!("checks {table} {}", sql.matches("CHECK").count()));
    }
    let triggers: Vec<String> =
        sqlx::query_scalar("SELECT tbl_name FROM sqlite_schema WHERE type = 'trigger'").fetch_all(pool).await.unwrap();
    for table in BTreeSet::<String>::from_iter(triggers) {
        facts.insert(format!("append-only {table}"));
    }
    facts
}

async fn postgres_facts(pool: &sqlx::AnyPool) -> Facts {
    let mut facts = Facts::new();
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in &tables {
        facts.insert(format!("table {table}"));
    }
    let columns = sqlx::query(
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
    // Constraints: primary keys, unique, foreign keys (one column each in kassa) and checks.
    let constraints = sqlx::query(
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
    let indexes = sqlx::query(
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
        let unique = if i.get::<bool, _>("uniq") { "unique " } else { "" };
        let partial = if i.get::<bool, _>("partial") { " partial" } else { "" };
        facts.insert(format!("{unique}index {name} on {t} ({cols}){partial}"));
    }
    let triggers: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT CAST(event_object_table AS TEXT) FROM information_schema.triggers \
         WHERE trigger_schema = current_schema()",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    for table in triggers {
        facts.insert(format!("append-only {table}"));
    }
    facts
}

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

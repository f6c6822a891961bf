//! Small named values shared by every instance (the sandbox's keys, the demo admin token hash).

use crate::error::Result;
use crate::store::Db;
use crate::store::sql;

/// Returns the stored value, or stores `make()` and returns it. When several instances start at
/// once, exactly one value wins and all of them read that one.
pub async fn get_or_init(db: &Db, name: &str, make: impl FnOnce() -> String) -> Result<String> {
    let candidate = make();
    crate::write_tx!(db, |tx| {
        sql::query("INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING")
            .bind(name)
            .bind(&candidate)
            .execute(&mut **tx)
            .await?;
        let value: String =
            sql::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name).fetch_one(&mut **tx).await?;
        Ok(value)
    })
}

/// Sets `name` to `value`, or removes it (`None`).
pub async fn set(db: &Db, name: &str, value: Option<&str>) -> Result<()> {
    crate::write_tx!(db, |tx| {
        match value {
            Some(value) => {
                sql::query(
                    "INSERT INTO settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                )
                .bind(name)
                .bind(value)
                .execute(&mut **tx)
                .await?;
            }
            None => {
                sql::query("DELETE FROM settings WHERE name = $1").bind(name).execute(&mut **tx).await?;
            }
        }
        Ok(())
    })
}

//! The machinery that carries the store's statements to the database, behind the store's one SQL
//! seam ([`super::sql`]): the transaction every command runs on ([`conn`]), SQLite's writer
//! connection run in place ([`sqlite`]) on a writer thread ([`writer`]) with group commit
//! ([`group`]), and PostgreSQL's pool with pipelined statements ([`pg`]). How it runs is one [`EngineConfig`], read once at start; the store's commands never
//! see it.

pub mod conn;
pub mod fold;
pub mod group;
pub mod pg;
pub mod pg_tx;
pub mod sqlite;
pub mod writer;

/// How the engine runs. Every setting is on by default; each can be turned off to measure what it
/// buys (BENCHMARKS.md) or, for the writer's CPU, where another process owns that CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineConfig {
    /// SQLite: concurrent write commands share one transaction and one durable commit
    /// ([`group`]); off, each command commits on its own.
    pub sqlite_group_commit: bool,
    /// SQLite: kassa's writer thread is held on the first CPU ([`writer`]).
    pub sqlite_pin_writer: bool,
    /// PostgreSQL: a batch's statements go in one round trip ([`pg::PgClient::pipeline`]); off,
    /// one round trip each.
    pub pg_pipeline: bool,
    /// PostgreSQL: a pipelined batch's consecutive inserts go as one statement ([`fold`]).
    pub pg_fold_inserts: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { sqlite_group_commit: true, sqlite_pin_writer: true, pg_pipeline: true, pg_fold_inserts: true }
    }
}

/// The environment variables [`EngineConfig::from_lookup`] is given, each with the setting it turns.
pub const ENV: [&str; 4] = ["KASSA_SQLITE_GROUP_COMMIT", "KASSA_SQLITE_PIN", "KASSA_PG_PIPELINE", "KASSA_PG_FOLD"];

impl EngineConfig {
    /// The configuration a source of variables asks for (the configuration passes the
    /// environment, `crate::config::engine_from_env`): each of [`ENV`] is `1`/`true` (on) or
    /// `0`/`false` (off); unset is on.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> anyhow::Result<EngineConfig> {
        let flag = |name: &str| -> anyhow::Result<bool> {
            match lookup(name).as_deref().map(str::trim) {
                None | Some("") => Ok(true),
                Some(v) if v == "1" || v.eq_ignore_ascii_case("true") => Ok(true),
                Some(v) if v == "0" || v.eq_ignore_ascii_case("false") => Ok(false),
                Some(v) => anyhow::bail!("{name}={v}: use 1/0 or true/false"),
            }
        };
        let [group, pin, pipeline, fold] = ENV;
        Ok(EngineConfig {
            sqlite_group_commit: flag(group)?,
            sqlite_pin_writer: flag(pin)?,
            pg_pipeline: flag(pipeline)?,
            pg_fold_inserts: flag(fold)?,
        })
    }

    /// How PostgreSQL's batches are sent.
    pub fn pg_flight(&self) -> pg::Flight {
        pg::Flight { pipeline: self.pg_pipeline, fold_inserts: self.pg_fold_inserts }
    }

    /// Every configuration there is, for tests that run each.
    pub fn all() -> Vec<EngineConfig> {
        let mut all = Vec::new();
        for sqlite_group_commit in [true, false] {
            for sqlite_pin_writer in [true, false] {
                for (pg_pipeline, pg_fold_inserts) in [(true, true), (true, false), (false, false)] {
                    all.push(EngineConfig { sqlite_group_commit, sqlite_pin_writer, pg_pipeline, pg_fold_inserts });
                }
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::EngineConfig;

    #[test]
    fn reads_each_switch_from_the_environment() {
        let none = EngineConfig::from_lookup(|_| None).unwrap();
        assert_eq!(none, EngineConfig::default());
        let off =
            EngineConfig::from_lookup(|n| Some(if n == "KASSA_PG_PIPELINE" { "false" } else { "0" }.into())).unwrap();
        assert_eq!(
            off,
            EngineConfig {
                sqlite_group_commit: false,
                sqlite_pin_writer: false,
                pg_pipeline: false,
                pg_fold_inserts: false
            }
        );
        let on = EngineConfig::from_lookup(|_| Some("TRUE".into())).unwrap();
        assert_eq!(on, EngineConfig::default());
        let bad = EngineConfig::from_lookup(|n| (n == "KASSA_SQLITE_PIN").then(|| "off".into())).unwrap_err();
        assert!(bad.to_string().contains("KASSA_SQLITE_PIN=off"), "{bad}");
        assert_eq!(EngineConfig::all().len(), 12);
    }
}

//! Backups and restores. A backup of a SQLite kassa is a consistent online copy of kassa's
//! database and the sandbox's (`VACUUM INTO` on a read snapshot: never a copy of the live files,
//! which a write in between would leave torn), with a manifest: the version that made it, the
//! schema version, each file's size and SHA-256, and the card keys' check value (never the keys
//! secret itself, which is backed up apart: without it every card key is unreadable). A restore
//! checks all of that before it writes anything, and writes only into a data dir with no database.
//! PostgreSQL is backed up with its own tools (`pg_dump`, or base backups with WAL archiving for
//! point-in-time recovery; docs/operations.md); `kassa backup` then writes the manifest only.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::store::{Db, DbKind, sandbox_url, sqlite_path};
use crate::vault::Vault;

/// The manifest's file name in a backup directory.
pub const MANIFEST: &str = "manifest.json";
/// kassa's database in a backup directory (and in a data dir).
pub const DATABASE_FILE: &str = "kassa.db";
/// The sandbox's database in a backup directory (and in a data dir).
pub const SANDBOX_FILE: &str = "kassa-sandbox.db";

/// What a backup holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    /// The kassa version that made it.
    pub kassa_version: String,
    /// `sqlite` or `postgres`.
    pub database: String,
    /// The newest migration applied to the database.
    pub schema_version: i64,
    /// When the copy was taken (ms since the Unix epoch).
    pub taken_at_ms: i64,
    /// The card keys' check value, if the database has one (never the secret).
    pub keys_check: Option<String>,
    pub files: Vec<BackupFile>,
}

/// One file of a backup.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct BackupFile {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

/// The SHA-256 of a file, as hex, and its size.
fn digest(path: &Path) -> anyhow::Result<(String, u64)> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let mut buf = vec![0_u8; 1 << 16];
    let mut bytes = 0_u64;
    loop {
        let n = file.read(&mut buf).with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        bytes += n as u64;
        ctx.update(&buf[..n]);
    }
    Ok((hex::encode(ctx.finish().as_ref()), bytes))
}

/// Takes a backup of `db` (opened from `url`) into `to`, which must not exist or be empty.
pub async fn backup(db: &Db, url: &str, to: &Path, now_ms: i64) -> anyhow::Result<Manifest> {
    if to.exists() && std::fs::read_dir(to).with_context(|| format!("reading {}", to.display()))?.next().is_some() {
        anyhow::bail!("{} is not empty: a backup goes into a new directory", to.display());
    }
    crate::store::files::create_private_dir(to).with_context(|| format!("creating {}", to.display()))?;
    let schema_version = db.schema_version().await?;
    let keys_check = crate::store::fulfilment::keys_check_value(db).await?;
    let mut files = Vec::new();
    if db.kind() == DbKind::Sqlite {
        let target = to.join(DATABASE_FILE);
        db.copy_to(&target).await.context("copying kassa's database")?;
        files.push(DATABASE_FILE);
        if let Some((sandbox, _)) = sandbox_url(url)
            && sqlite_path(&sandbox).is_some_and(|p| Path::new(p).exists())
        {
            let records = Db::connect_existing(&sandbox, 1, Default::default()).await?;
            records.copy_to(&to.join(SANDBOX_FILE)).await.context("copying the sandbox's database")?;
            records.close().await;
            files.push(SANDBOX_FILE);
        }
    }
    let files = files
        .into_iter()
        .map(|name| {
            crate::store::files::make_private(&to.join(name))?;
            let (sha256, bytes) = digest(&to.join(name))?;
            Ok(BackupFile { name: name.to_string(), bytes, sha256 })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let manifest = Manifest {
        kassa_version: env!("CARGO_PKG_VERSION").to_string(),
        database: match db.kind() {
            DbKind::Sqlite => "sqlite",
            DbKind::Postgres => "postgres",
        }
        .to_string(),
        schema_version,
        taken_at_ms: now_ms,
        keys_check,
        files,
    };
    let text = serde_json::to_string_pretty(&manifest)?;
    std::fs::write(to.join(MANIFEST), text + "\n")
        .with_context(|| format!("writing {}", to.join(MANIFEST).display()))?;
    Ok(manifest)
}

/// Reads a backup's manifest.
pub fn read_manifest(from: &Path) -> anyhow::Result<Manifest> {
    let path = from.join(MANIFEST);
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a kassa backup manifest", path.display()))
}

/// Restores the SQLite backup in `from` into the data dir `data_dir`, which must hold no database.
/// Refused before anything is written when a file's checksum differs, when the backup's schema is
/// newer than this kassa knows (`newest_schema`), or when its card keys are sealed under another
/// secret than `vault`'s (a backup with card keys needs the secret).
pub fn restore(from: &Path, data_dir: &Path, newest_schema: i64, vault: Option<&Vault>) -> anyhow::Result<Manifest> {
    let manifest = read_manifest(from)?;
    if manifest.database != "sqlite" {
        anyhow::bail!(
            "this is a backup of a {} database: restore it with that database's own tools (docs/operations.md)",
            manifest.database
        );
    }
    if manifest.schema_version > newest_schema {
        anyhow::bail!(
            "the backup's schema is version {}, newer than this kassa's {newest_schema}: restore it with kassa {} or later",
            manifest.schema_version,
            manifest.kassa_version
        );
    }
    for file in &manifest.files {
        let (sha256, bytes) = digest(&from.join(&file.name))?;
        if sha256 != file.sha256 || bytes != file.bytes {
            anyhow::bail!("{} is damaged: its checksum differs from the manifest's", from.join(&file.name).display());
        }
    }
    if !manifest.files.iter().any(|f| f.name == DATABASE_FILE) {
        anyhow::bail!("the backup holds no {DATABASE_FILE}");
    }
    match (&manifest.keys_check, vault) {
        (Some(check), Some(vault)) if !vault.matches_check(check) => anyhow::bail!(
            "keys_secret_mismatch: the backup's card keys are sealed under another keys secret (use the original)"
        ),
        (Some(_), None) => anyhow::bail!(
            "the backup holds card keys: give the keys secret they are sealed with (--keys-secret, KASSA_KEYS_SECRET or keys.secret in the data dir)"
        ),
        _ => {}
    }
    let targets: Vec<PathBuf> = manifest.files.iter().map(|f| data_dir.join(&f.name)).collect();
    if let Some(existing) = targets.iter().find(|t| t.exists()) {
        anyhow::bail!("{} exists: a restore goes into a data dir without a database", existing.display());
    }
    crate::store::files::create_private_dir(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    for (file, target) in manifest.files.iter().zip(&targets) {
        // Copied under a temporary name, then renamed: a restore cut short leaves no database.
        let partial = target.with_extension("db.partial");
        std::fs::copy(from.join(&file.name), &partial).with_context(|| format!("writing {}", partial.display()))?;
        crate::store::files::make_private(&partial)?;
        std::fs::rename(&partial, target).with_context(|| format!("writing {}", target.display()))?;
    }
    Ok(manifest)
}

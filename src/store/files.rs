//! The files kassa writes hold the shop's data (orders, buyers' tokens, sealed card keys): they are
//! readable by kassa's own user only, whatever the umask — directories it creates 0700, files 0600.

use std::io;
use std::path::Path;

/// Creates `dir` and any missing parent as 0700; a directory that exists is left as it is (the
/// operator may share it on purpose).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Makes `path` readable and writable by its owner only, if it exists. A file kassa may not change
/// the mode of (another user's, shared on purpose) is left as it is, with a warning.
pub fn make_private(path: &Path) -> io::Result<()> {
    match restrict(path) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            tracing::warn!(path = %path.display(), "cannot make the file readable by its owner only: {e}");
            Ok(())
        }
        other => other,
    }
}

fn restrict(path: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        match std::fs::metadata(path) {
            Ok(meta) if meta.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            }
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

/// A SQLite database file and its companions (`-wal`, `-shm`), 0600. Only their modes are
/// changed (by path: no descriptor of the file is opened, which would drop SQLite's locks on it in
/// this process). Called right after SQLite opened (or created) the database and before it switches
/// to WAL, the companions it then creates take the database file's mode.
pub fn private_sqlite_files(db_file: &Path) -> io::Result<()> {
    make_private(db_file)?;
    for suffix in ["-wal", "-shm"] {
        let mut companion = db_file.as_os_str().to_owned();
        companion.push(suffix);
        make_private(Path::new(&companion))?;
    }
    Ok(())
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_and_directories_are_private_whatever_was_there() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("a/b");
        create_private_dir(&data).unwrap();
        assert_eq!(mode(&data), 0o700);
        let db = data.join("kassa.db");
        std::fs::write(&db, b"").unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).unwrap();
        private_sqlite_files(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        let wal = data.join("kassa.db-wal");
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();
        private_sqlite_files(&db).unwrap();
        assert_eq!(mode(&wal), 0o600);
        make_private(&data.join("missing")).unwrap();
    }
}

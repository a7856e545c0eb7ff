//! Credentials and private data on disk: files of mode 600, folders of mode 700.
//!
//! The embedded defaults keep credentials in the data directory (the generated admin token, the
//! managed Redis's password) and a server's data beside them. On a shared machine every local
//! user could otherwise read them, so they are created private, and one found readable by others
//! (copied around, restored from a backup) is made private again, with a warning.

use std::path::Path;

use anyhow::Context;
use rand::RngCore;

use crate::config::Secret;

/// Makes every file this process creates from now on readable and writable by its own user
/// only (umask 077): the SQLite database and its journal, uploaded photos, generated
/// credentials. They hold phones, sessions' owners and orders; nothing but the service reads
/// them (it serves the photos itself). Called first thing by the `hmdp` binary.
pub(crate) fn private_umask() {
    // SAFETY: umask only sets the process's file-creation mask.
    unsafe { libc::umask(0o077) };
}

/// A credential kept in `path`: read when the file holds one (made private if others could read
/// it), else 24 random bytes in hex, written with mode 600. Also says whether it was generated
/// now. `what` names it in messages.
pub(crate) fn settle(path: &Path, what: &str) -> anyhow::Result<(Secret, bool)> {
    if let Ok(existing) = std::fs::read_to_string(path) {
        let existing = existing.trim();
        if existing.len() >= 16 {
            tighten_if_readable_by_others(path, what);
            return Ok((Secret::new(existing), false));
        }
    }
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    let secret = hex::encode(bytes);
    write_private(path, &format!("{secret}\n"))
        .with_context(|| format!("cannot write the {what} to {}", path.display()))?;
    Ok((Secret::new(secret), true))
}

/// Writes `contents` to `path` (creating its folder) with mode 600, also when the file was there
/// with another mode.
pub(crate) fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // `mode` applies only when the file is created; tighten an existing one too.
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    std::io::Write::write_all(&mut f, contents.as_bytes())
}

/// Gives `dir` mode 700 (also a folder an older version made 755): its files are ours alone.
pub(crate) fn make_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// A credential file that others may read is put back to mode 600, with a warning.
fn tighten_if_readable_by_others(path: &Path, what: &str) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::metadata(path) else {
            return;
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            match std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
                Ok(()) => tracing::warn!(
                    file = %path.display(),
                    mode = format!("{mode:o}"),
                    "the {what} file was readable by others; its mode is now 600"
                ),
                Err(e) => tracing::warn!(
                    file = %path.display(),
                    mode = format!("{mode:o}"),
                    error = %e,
                    "the {what} file is readable by others and could not be restricted"
                ),
            }
        }
    }
    #[cfg(not(unix))]
    let _ = (path, what);
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_credential_is_generated_once_private_and_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/secret");
        let (first, generated) = settle(&path, "test secret").unwrap();
        assert!(generated);
        assert_eq!(first.expose().len(), 48);
        assert_eq!(mode(&path), 0o600);
        let (again, generated) = settle(&path, "test secret").unwrap();
        assert!(!generated);
        assert_eq!(again, first);
    }

    #[test]
    fn a_folder_is_made_private() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("redis");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
        make_private_dir(&sub).unwrap();
        assert_eq!(mode(&sub), 0o700);
    }
}

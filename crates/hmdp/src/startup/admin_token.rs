//! The admin credential of `x-admin-token`: configured, or kept in the data directory.

use std::path::PathBuf;

use crate::config::{Config, Secret};

/// The admin token: configured, or read from / generated into `$HMDP_DATA_DIR/admin-token`,
/// with that file (absolute) and whether it was generated now.
///
/// A generated token is never printed: the start-up banner says which file holds it (logs are
/// shipped, kept and read by more people than the data directory).
pub(super) fn settle_admin_token(
    config: &Config,
) -> anyhow::Result<(Secret, Option<(PathBuf, bool)>)> {
    if let Some(t) = &config.admin_token {
        return Ok((t.clone(), None));
    }
    let path = config.data_dir.join("admin-token");
    let (token, generated) = crate::secret_files::settle(&path, "admin token")?;
    let file = std::fs::canonicalize(&path).unwrap_or(path);
    Ok((token, Some((file, generated))))
}

/// The secret of the payment gateway's signatures: configured (`HMDP_PAY_SECRET`), or read
/// from / generated into `$HMDP_DATA_DIR/pay-secret`, for the gateway to be given; with the
/// file (absolute) when it was generated now, which the start-up banner names.
pub(super) fn settle_pay_secret(config: &Config) -> anyhow::Result<(Secret, Option<PathBuf>)> {
    if let Some(s) = &config.seckill.pay_secret {
        return Ok((s.clone(), None));
    }
    let path = config.data_dir.join("pay-secret");
    let (secret, generated) = crate::secret_files::settle(&path, "payment secret")?;
    let generated = generated.then(|| std::fs::canonicalize(&path).unwrap_or(path));
    Ok((secret, generated))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn an_admin_token_file_readable_by_others_is_restricted() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            data_dir: dir.path().to_owned(),
            ..Config::default()
        };
        let path = dir.path().join("admin-token");
        std::fs::write(&path, "0123456789abcdef0123\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (token, _) = settle_admin_token(&config).unwrap();
        assert_eq!(token.expose(), "0123456789abcdef0123");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}

//! The admin credential of `x-admin-token`: configured, or kept in the data directory.

use crate::config::{Config, Secret};

/// The admin token: configured, or read from / generated into `$HMDP_DATA_DIR/admin-token`.
///
/// A generated token is never printed: the log says which file holds it (logs are shipped,
/// kept and read by more people than the data directory).
pub(super) fn settle_admin_token(config: &Config) -> anyhow::Result<Secret> {
    if let Some(t) = &config.admin_token {
        return Ok(t.clone());
    }
    let path = config.data_dir.join("admin-token");
    let (token, generated) = crate::secret_files::settle(&path, "admin token")?;
    let file = std::fs::canonicalize(&path).unwrap_or(path);
    if generated {
        tracing::warn!(
            file = %file.display(),
            "HMDP_ADMIN_TOKEN is unset: generated an admin token into this file (mode 600); \
             send its content as the x-admin-token header"
        );
    } else {
        tracing::info!(file = %file.display(), "admin token read from file (HMDP_ADMIN_TOKEN unset)");
    }
    Ok(token)
}

/// The secret of the payment gateway's signatures: configured (`HMDP_PAY_SECRET`), or read
/// from / generated into `$HMDP_DATA_DIR/pay-secret`, for the gateway to be given.
pub(super) fn settle_pay_secret(config: &Config) -> anyhow::Result<Secret> {
    if let Some(s) = &config.seckill.pay_secret {
        return Ok(s.clone());
    }
    let path = config.data_dir.join("pay-secret");
    let (secret, generated) = crate::secret_files::settle(&path, "payment secret")?;
    if generated {
        let file = std::fs::canonicalize(&path).unwrap_or(path);
        tracing::warn!(
            file = %file.display(),
            "HMDP_PAY_SECRET is unset: generated the payment gateway's signing secret into this \
             file (mode 600); give it to the gateway"
        );
    }
    Ok(secret)
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
        let token = settle_admin_token(&config).unwrap();
        assert_eq!(token.expose(), "0123456789abcdef0123");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}

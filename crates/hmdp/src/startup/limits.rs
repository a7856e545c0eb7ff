//! The open-files limit: every connection is a file descriptor.

use crate::config::Config;

/// Raises the soft limit on open files to the hard limit, and returns `(before, after)`.
///
/// Every connection is a file descriptor, and the usual soft limit (1024) is far below what
/// `HMDP_MAX_CONNECTIONS` allows; the hard limit is what the administrator granted, the soft one
/// only a default for programs that never ask.
pub fn raise_open_files_limit() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let before = limit.rlim_cur;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit only reads the struct it is given.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok((before, limit.rlim_cur))
}

/// Raises the open-files limit ([`raise_open_files_limit`]) and says whether
/// `HMDP_MAX_CONNECTIONS` fits under it.
pub(super) fn check_open_files_limit(config: &Config) {
    // Descriptors that are not client connections: database pool, Redis, SQLite files, logs.
    const RESERVE: u64 = 256;
    let limit = match raise_open_files_limit() {
        Ok((before, after)) => {
            if before < after {
                tracing::debug!(
                    before,
                    after,
                    "raised the open-files limit to its hard limit"
                );
            }
            after
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-files limit");
            return;
        }
    };
    let max = config.max_connections as u64;
    if max > 0 && max + RESERVE > limit {
        tracing::warn!(
            open_files = limit,
            max_connections = max,
            "HMDP_MAX_CONNECTIONS does not leave {RESERVE} of the open-files limit for the rest \
             of the service: with that many connections, accepting may fail (raise the hard \
             limit, e.g. `ulimit -Hn` or systemd's LimitNOFILE, or lower HMDP_MAX_CONNECTIONS)"
        );
    }
}

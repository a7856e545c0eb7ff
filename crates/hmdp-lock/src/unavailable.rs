//! Whether a Redis error means "Redis is away, try again later" rather than "the command was
//! wrong". The lock, the cache client and the service answer the first kind alike (a retry, a
//! fallback, a 503), so they share this one verdict.

use redis::{ErrorKind, RedisError, ServerErrorKind};

/// True when `e` says Redis cannot serve the command now but may soon: the connection failed,
/// was refused, dropped or timed out; a cluster is redirecting or down (`MOVED`, `ASK`,
/// `TRYAGAIN`, `CLUSTERDOWN`); the node is loading its data (`LOADING`) or has lost its
/// primary (`MASTERDOWN`). False for everything the caller got wrong or cannot retry
/// (`ERR`, `WRONGTYPE`, `NOSCRIPT`, `READONLY`, a reply of the wrong type, a failed login, ...).
///
/// ```
/// use redis::{ErrorKind, RedisError, ServerErrorKind};
///
/// let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
/// assert!(hmdp_lock::is_unavailable(&refused));
///
/// let wrong = RedisError::from((ErrorKind::Server(ServerErrorKind::ResponseError), "ERR"));
/// assert!(!hmdp_lock::is_unavailable(&wrong));
/// ```
pub fn is_unavailable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
        || matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::BusyLoading | ServerErrorKind::MasterDown)
        )
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn io_error(kind: io::ErrorKind) -> RedisError {
        RedisError::from(io::Error::from(kind))
    }

    fn server(kind: ServerErrorKind) -> RedisError {
        RedisError::from((ErrorKind::Server(kind), "from the server"))
    }

    #[test]
    fn each_error_kind_has_its_verdict() {
        let cases = [
            (
                "connection refused",
                io_error(io::ErrorKind::ConnectionRefused),
                true,
            ),
            (
                "connection reset",
                io_error(io::ErrorKind::ConnectionReset),
                true,
            ),
            ("broken pipe", io_error(io::ErrorKind::BrokenPipe), true),
            (
                "eof mid-reply",
                io_error(io::ErrorKind::UnexpectedEof),
                true,
            ),
            ("timed out", io_error(io::ErrorKind::TimedOut), true),
            ("other I/O", io_error(io::ErrorKind::Other), true),
            ("TRYAGAIN", server(ServerErrorKind::TryAgain), true),
            ("CLUSTERDOWN", server(ServerErrorKind::ClusterDown), true),
            ("MOVED", server(ServerErrorKind::Moved), true),
            ("ASK", server(ServerErrorKind::Ask), true),
            ("MASTERDOWN", server(ServerErrorKind::MasterDown), true),
            ("LOADING", server(ServerErrorKind::BusyLoading), true),
            // A demoted primary: the Sentinel follower looks the primary up again, but on its
            // own it is an answer of the node, not an absence.
            ("READONLY", server(ServerErrorKind::ReadOnly), false),
            ("ERR", server(ServerErrorKind::ResponseError), false),
            ("NOPERM", server(ServerErrorKind::NoPerm), false),
            ("NOSCRIPT", server(ServerErrorKind::NoScript), false),
            ("EXECABORT", server(ServerErrorKind::ExecAbort), false),
            ("CROSSSLOT", server(ServerErrorKind::CrossSlot), false),
            (
                "unexpected reply",
                RedisError::from((ErrorKind::UnexpectedReturnType, "not an integer")),
                false,
            ),
            (
                "failed login",
                RedisError::from((ErrorKind::AuthenticationFailed, "WRONGPASS")),
                false,
            ),
            (
                "client misuse",
                RedisError::from((ErrorKind::Client, "bad argument")),
                false,
            ),
        ];
        let wrong: Vec<_> = cases
            .iter()
            .filter(|(_, e, away)| is_unavailable(e) != *away)
            .map(|(name, e, away)| format!("{name} ({e:?}): expected {away}"))
            .collect();
        assert!(wrong.is_empty(), "wrong verdicts: {wrong:#?}");
    }
}

//! Writes that are acknowledged only once replicas hold them (`HMDP_REDIS_WAIT_REPLICAS`).
//!
//! `WAIT` covers the writes of the connection that sends it, and blocks that connection until
//! the replicas confirm. On the shared multiplexed connection it would stall every other
//! request behind it and cover their writes too, so the writes that must be replicated run on a
//! small set of connections of their own, one request at a time each. Written here because a
//! pool crate adds nothing but a dependency on its redis-rs version: what is needed is
//! exclusivity, a fixed number of slots and dropping a connection after any error (a reconnected
//! connection has written nothing, so its `WAIT` would confirm at once). The connections are
//! opened from the [`RedisTarget`], and one made before the primary moved (Sentinel) is
//! replaced before its next use.
//!
//! While the Sentinels fail the primary over, such writes are refused (`TRYAGAIN`, answered 503),
//! and one in flight when a failover is announced counts as confirmed by no replica: the
//! replica that confirmed it may not be the one promoted.

use std::{
    sync::atomic::{AtomicUsize, Ordering},
    time::Duration,
};

use redis::{
    AsyncConnectionConfig, ErrorKind, RedisError, RedisResult, ServerErrorKind,
    aio::MultiplexedConnection,
};
use tokio::sync::Mutex;

use super::RedisTarget;

/// Connections for replicated writes: each serves one writer at a time, for its write and the
/// `WAIT` after it.
const CONNECTIONS: usize = 32;
/// How long Redis may take to answer anything but the `WAIT` itself.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs writes on connections of their own and waits for replicas to confirm them.
pub struct ReplicaWait {
    target: RedisTarget,
    slots: Box<[Mutex<Option<Made>>]>,
    next: AtomicUsize,
    replicas: u32,
    timeout: Duration,
}

impl std::fmt::Debug for ReplicaWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaWait")
            .field("replicas", &self.replicas)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// A connection, with the epoch of the primary it was made for ([`RedisTarget::epoch`]).
type Made = (u64, MultiplexedConnection);

/// What a write that needed replicas got from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Replicated {
    /// Replicas that confirmed the write in time.
    pub confirmed: u32,
    /// Replicas asked for.
    pub wanted: u32,
}

impl Replicated {
    /// Every replica asked for confirmed.
    pub fn is_complete(&self) -> bool {
        self.confirmed >= self.wanted
    }
}

impl ReplicaWait {
    /// Prepares (lazily connecting) writers to the primary of `target` (one node, or the
    /// Sentinels' primary) that wait for `replicas` replicas, at most `timeout` each time.
    pub fn new(target: RedisTarget, replicas: u32, timeout: Duration) -> RedisResult<Self> {
        Ok(Self {
            target,
            slots: (0..CONNECTIONS).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            replicas,
            timeout,
        })
    }

    /// Runs `write` on a connection no other request uses; then, if `wrote` says it changed
    /// something, `WAIT`s for the replicas on that connection. Any error drops the connection.
    pub async fn write<T>(
        &self,
        write: impl AsyncFnOnce(&mut MultiplexedConnection) -> RedisResult<T>,
        wrote: impl FnOnce(&T) -> bool,
    ) -> RedisResult<(T, Option<Replicated>)> {
        let slot = &self.slots[self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len()];
        let mut guard = slot.lock().await;
        let announced = self.target.failovers_announced();
        if self.target.failing_over() {
            return Err(RedisError::from((
                ErrorKind::Server(ServerErrorKind::TryAgain),
                "the Redis primary is being failed over",
                "writes that wait for replicas resume on the new primary".to_owned(),
            )));
        }
        let epoch = self.target.epoch();
        if guard.as_ref().is_some_and(|(made, _)| *made != epoch) {
            *guard = None;
        }
        let conn = match guard.as_mut() {
            Some((_, conn)) => conn,
            None => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(RESPONSE_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT + self.timeout));
                let conn = async {
                    self.target
                        .client()?
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                }
                .await
                .inspect_err(|e| self.target.report(e))?;
                &mut guard.insert((epoch, conn)).1
            }
        };
        let result = async {
            let value = write(conn).await?;
            if !wrote(&value) {
                return Ok((value, None));
            }
            let mut confirmed: u32 = redis::cmd("WAIT")
                .arg(self.replicas)
                .arg(self.timeout.as_millis() as u64)
                .query_async(conn)
                .await?;
            if self.target.failovers_announced() != announced {
                tracing::warn!(
                    confirmed,
                    "a failover began while a write waited for its replicas: their confirmation \
                     does not count"
                );
                confirmed = 0;
            }
            let replicated = Replicated {
                confirmed,
                wanted: self.replicas,
            };
            Ok((value, Some(replicated)))
        }
        .await;
        if let Err(e) = &result {
            self.target.report(e);
            *guard = None;
        }
        result
    }

    /// Replicas connected to the primary now (`INFO replication`), for the start-up check.
    pub async fn connected_replicas(&self) -> RedisResult<u32> {
        let mut conn = self
            .target
            .client()?
            .get_multiplexed_async_connection()
            .await?;
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut conn)
            .await?;
        Ok(info
            .lines()
            .find_map(|line| line.strip_prefix("connected_slaves:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0))
    }
}

//! [`RedLock`]: the Redlock algorithm over independent Redis nodes.

use std::time::Duration;

use futures_util::future::join_all;
use rand::Rng;
use tokio::time::Instant;

use crate::client::LockConnection;
use crate::lock::{Attempt, Lock};
use crate::{Error, Result};

/// Default per-node time limit for one acquire/release call.
///
/// ```
/// assert_eq!(hmdp_lock::DEFAULT_NODE_TIMEOUT, std::time::Duration::from_millis(100));
/// ```
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// Default upper bound of the random pause between RedLock rounds.
///
/// ```
/// assert_eq!(hmdp_lock::DEFAULT_RETRY_JITTER, std::time::Duration::from_millis(50));
/// ```
pub const DEFAULT_RETRY_JITTER: Duration = Duration::from_millis(50);

/// The clock-drift allowance subtracted from a RedLock's validity: 1 % of the
/// lease plus 2 ms.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(hmdp_lock::clock_drift(Duration::from_secs(10)), Duration::from_millis(102));
/// ```
pub fn clock_drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// How long a RedLock acquired with `lease` after `elapsed` (measured from
/// before the first request to after the last reply) can be trusted:
/// `lease − elapsed − drift`, or `None` if nothing is left.
///
/// ```
/// use std::time::Duration;
/// let v = hmdp_lock::redlock_validity(Duration::from_secs(10), Duration::from_millis(50));
/// assert_eq!(v, Some(Duration::from_millis(10_000 - 50 - 102)));
/// assert_eq!(hmdp_lock::redlock_validity(Duration::from_millis(100), Duration::from_millis(99)), None);
/// ```
pub fn redlock_validity(lease: Duration, elapsed: Duration) -> Option<Duration> {
    lease
        .checked_sub(elapsed)?
        .checked_sub(clock_drift(lease))
        .filter(|v| !v.is_zero())
}

/// The Redlock algorithm: the same lock on `n` independent Redis masters,
/// held once a majority (`n/2 + 1`) granted it and enough of the lease is
/// left after subtracting the time spent and a clock-drift allowance.
///
/// Each round asks every node in parallel (each call bounded by
/// [`node_timeout`](Self::node_timeout)); a failed round is rolled back on
/// *every* node — a node that timed out may still have granted the lock —
/// and retried after a random pause while the wait budget lasts.
///
/// # Should you use it?
///
/// Redisson deprecated its RedLock in 2020 and points users to a plain lock
/// on one primary (with replica acknowledgement) or to a fenced lock. The
/// reasons, in short:
///
/// * Its safety rests on timing assumptions. Martin Kleppmann's critique:
///   a process can pause (GC, page faults, a stalled VM) or a packet can be
///   delayed past the lease, and a node's clock can jump, so two clients can
///   both believe they hold the lock. The random owner value only protects
///   the lock's own keys, not the resource you are writing to.
/// * Salvatore Sanfilippo (antirez) answered that the elapsed-time check
///   covers delays before acquisition, that the algorithm only needs clocks
///   with bounded error rate (not synchronised clocks), and that large clock
///   jumps and restarts are an operational matter (monotonic time, delayed
///   restarts). Neither side disputes that a pause *after* the validity check
///   can still break mutual exclusion.
/// * It costs several independent masters to operate.
///
/// Rule of thumb: if the lock only saves work (avoid doing the same job
/// twice), a single-node [`Lock`] is enough. If a second holder would corrupt
/// data, make the storage check a fencing token
/// ([`LockOptions::fencing`](crate::LockOptions::fencing)) — or use a
/// consensus system — instead of relying on RedLock. Note that each node
/// keeps its own fencing counter, so fencing tokens are not meaningful across
/// a RedLock.
///
/// RedLock guards have no watchdog; use [`RedLockGuard::extend`].
///
/// ```no_run
/// # async fn demo(nodes: Vec<hmdp_lock::LockClient>) -> hmdp_lock::Result<()> {
/// use std::time::Duration;
/// let locks = nodes.iter().map(|n| n.lock("job:42")).collect::<Result<Vec<_>, _>>()?;
/// let redlock = hmdp_lock::RedLock::new(locks)?;
/// if let Some(guard) = redlock.try_lock(Duration::from_secs(1), Duration::from_secs(10)).await? {
///     println!("valid for {:?}", guard.validity());
///     guard.unlock().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedLock<C: LockConnection = redis::aio::ConnectionManager> {
    locks: Vec<Lock<C>>,
    node_timeout: Duration,
    retry_jitter: Duration,
}

impl<C: LockConnection> Clone for RedLock<C> {
    fn clone(&self) -> Self {
        RedLock {
            locks: self.locks.clone(),
            node_timeout: self.node_timeout,
            retry_jitter: self.retry_jitter,
        }
    }
}

impl<C: LockConnection> RedLock<C> {
    /// One lock per independent node (use the same name on each).
    /// Fails if `locks` is empty.
    ///
    /// ```no_run
    /// # fn f(a: hmdp_lock::Lock, b: hmdp_lock::Lock, c: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let r = hmdp_lock::RedLock::new([a, b, c])?;
    /// assert_eq!(r.quorum(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock<C>>) -> Result<Self> {
        let locks: Vec<_> = locks.into_iter().collect();
        if locks.is_empty() {
            return Err(Error::invalid("a RedLock needs at least one node"));
        }
        Ok(RedLock {
            locks,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            retry_jitter: DEFAULT_RETRY_JITTER,
        })
    }

    /// Per-node time limit for each acquire/release call (default 100 ms).
    /// Keep it well below the lease.
    ///
    /// ```no_run
    /// # fn f(r: hmdp_lock::RedLock) {
    /// let r = r.node_timeout(std::time::Duration::from_millis(50));
    /// # let _ = r;
    /// # }
    /// ```
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Upper bound of the random pause between failed rounds (default 50 ms).
    ///
    /// ```no_run
    /// # fn f(r: hmdp_lock::RedLock) {
    /// let r = r.retry_jitter(std::time::Duration::from_millis(20));
    /// # let _ = r;
    /// # }
    /// ```
    #[must_use]
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.retry_jitter = jitter;
        self
    }

    /// Number of nodes that must grant the lock: `n/2 + 1`.
    ///
    /// ```no_run
    /// # fn f(r: hmdp_lock::RedLock) { println!("{}", r.quorum()); }
    /// ```
    pub fn quorum(&self) -> usize {
        self.locks.len() / 2 + 1
    }

    /// Tries to acquire a majority within `wait`, holding for `lease`.
    /// Returns `Ok(None)` if the budget runs out; in that case nothing is
    /// held on any node.
    ///
    /// ```no_run
    /// # async fn demo(r: hmdp_lock::RedLock) -> hmdp_lock::Result<()> {
    /// use std::time::Duration;
    /// let g = r.try_lock(Duration::ZERO, Duration::from_secs(5)).await?;
    /// # let _ = g;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<RedLockGuard<C>>> {
        if lease < Duration::from_millis(3) {
            return Err(Error::invalid("RedLock lease must be at least 3 ms"));
        }
        let deadline = Instant::now().checked_add(wait);
        loop {
            let token = self.locks[0].client.inner.next_token();
            let start = Instant::now();
            let results = join_all(self.locks.iter().map(|lock| async {
                matches!(
                    tokio::time::timeout(self.node_timeout, lock.attempt(&token, lease)).await,
                    Ok(Ok(Attempt::Acquired { .. }))
                )
            }))
            .await;
            let granted = results.iter().filter(|ok| **ok).count();
            let validity = redlock_validity(lease, start.elapsed());
            if granted >= self.quorum()
                && let Some(v) = validity
            {
                return Ok(Some(RedLockGuard {
                    locks: self.locks.clone(),
                    token,
                    node_timeout: self.node_timeout,
                    granted,
                    valid_until: start + v,
                    released: false,
                }));
            }
            release_everywhere(&self.locks, &token, lease, self.node_timeout).await;
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if now >= d => return Ok(None),
                Some(d) => Some(d - now),
                None => None,
            };
            let jitter_ms = u64::try_from(self.retry_jitter.as_millis()).unwrap_or(u64::MAX);
            let mut pause = Duration::from_millis(rand::rng().random_range(0..=jitter_ms));
            if let Some(r) = remaining {
                pause = pause.min(r);
            }
            tokio::time::sleep(pause).await;
        }
    }
}

async fn release_everywhere<C: LockConnection>(
    locks: &[Lock<C>],
    token: &str,
    lease: Duration,
    node_timeout: Duration,
) -> usize {
    let results = join_all(locks.iter().map(|lock| async move {
        matches!(
            tokio::time::timeout(node_timeout, lock.release_token(token, lease)).await,
            Ok(Ok(n)) if n >= 0
        )
    }))
    .await;
    results.into_iter().filter(|held| *held).count()
}

/// A held [`RedLock`]. Dropping it releases every node in the background.
///
/// ```no_run
/// # async fn demo(r: hmdp_lock::RedLock) -> hmdp_lock::Result<()> {
/// let guard = r.try_lock(std::time::Duration::ZERO, std::time::Duration::from_secs(5)).await?;
/// if let Some(g) = guard {
///     assert!(g.nodes_granted() >= 2);
///     g.unlock().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock"]
pub struct RedLockGuard<C: LockConnection = redis::aio::ConnectionManager> {
    locks: Vec<Lock<C>>,
    token: String,
    node_timeout: Duration,
    granted: usize,
    valid_until: Instant,
    released: bool,
}

impl<C: LockConnection> RedLockGuard<C> {
    /// How many nodes granted the lock in the successful round.
    ///
    /// ```no_run
    /// # fn f(g: hmdp_lock::RedLockGuard) { println!("{}", g.nodes_granted()); }
    /// ```
    pub fn nodes_granted(&self) -> usize {
        self.granted
    }

    /// The owner token used on every node.
    ///
    /// ```no_run
    /// # fn f(g: hmdp_lock::RedLockGuard) { println!("{}", g.token()); }
    /// ```
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Until when (monotonic clock) the lock can be considered held.
    ///
    /// ```no_run
    /// # fn f(g: hmdp_lock::RedLockGuard) { let _ = g.valid_until(); }
    /// ```
    pub fn valid_until(&self) -> std::time::Instant {
        self.valid_until.into_std()
    }

    /// Remaining validity (zero once expired).
    ///
    /// ```no_run
    /// # fn f(g: hmdp_lock::RedLockGuard) { println!("{:?}", g.validity()); }
    /// ```
    pub fn validity(&self) -> Duration {
        self.valid_until.saturating_duration_since(Instant::now())
    }

    /// True once the validity has run out.
    ///
    /// ```no_run
    /// # fn f(g: hmdp_lock::RedLockGuard) { if g.is_lost() { /* stop */ } }
    /// ```
    pub fn is_lost(&self) -> bool {
        Instant::now() >= self.valid_until
    }

    /// Owner-checked extension on every node; succeeds if a majority still
    /// belonged to us and validity remains, and then moves
    /// [`valid_until`](Self::valid_until).
    ///
    /// ```no_run
    /// # async fn demo(mut g: hmdp_lock::RedLockGuard) -> hmdp_lock::Result<()> {
    /// if !g.extend(std::time::Duration::from_secs(10)).await? { /* lost */ }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&mut self, lease: Duration) -> Result<bool> {
        if lease < Duration::from_millis(3) {
            return Err(Error::invalid("RedLock lease must be at least 3 ms"));
        }
        let start = Instant::now();
        let token = &self.token;
        let node_timeout = self.node_timeout;
        let results = join_all(self.locks.iter().map(|lock| async move {
            matches!(
                tokio::time::timeout(node_timeout, lock.extend_token(token, lease)).await,
                Ok(Ok(true))
            )
        }))
        .await;
        let ok = results.iter().filter(|ok| **ok).count();
        let quorum = self.locks.len() / 2 + 1;
        match redlock_validity(lease, start.elapsed()) {
            Some(v) if ok >= quorum => {
                self.valid_until = start + v;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Releases the lock on every node (also those that did not grant it).
    /// `Ok(true)` if a majority still held our token.
    ///
    /// ```no_run
    /// # async fn demo(g: hmdp_lock::RedLockGuard) -> hmdp_lock::Result<()> {
    /// let held = g.unlock().await?;
    /// # let _ = held;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<bool> {
        self.released = true;
        let quorum = self.locks.len() / 2 + 1;
        let held = release_everywhere(
            &self.locks,
            &self.token,
            Duration::from_millis(1),
            self.node_timeout,
        )
        .await;
        Ok(held >= quorum)
    }
}

impl<C: LockConnection> Drop for RedLockGuard<C> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let locks = std::mem::take(&mut self.locks);
            let token = std::mem::take(&mut self.token);
            let node_timeout = self.node_timeout;
            rt.spawn(async move {
                release_everywhere(&locks, &token, Duration::from_millis(1), node_timeout).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_plus_two_ms() {
        assert_eq!(
            clock_drift(Duration::from_millis(1000)),
            Duration::from_millis(12)
        );
        assert_eq!(
            clock_drift(Duration::from_millis(0)),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let lease = Duration::from_millis(1000);
        assert_eq!(
            redlock_validity(lease, Duration::from_millis(100)),
            Some(Duration::from_millis(888))
        );
        assert_eq!(redlock_validity(lease, Duration::from_millis(988)), None);
        assert_eq!(redlock_validity(lease, Duration::from_millis(2000)), None);
        assert_eq!(
            redlock_validity(lease, Duration::from_millis(987)),
            Some(Duration::from_millis(1))
        );
    }
}

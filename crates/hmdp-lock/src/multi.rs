//! [`MultiLock`]: hold several locks at once, all or nothing.

use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use crate::client::LockConnection;
use crate::lock::{Lock, LockGuard};
use crate::{Error, Result};

/// Several locks acquired together (like Redisson's `RedissonMultiLock`).
///
/// Locks are taken one after another in the order given; each may wait for
/// whatever is left of the overall wait budget. If one cannot be taken, every
/// lock already taken in this round is released again, and the round is
/// retried while budget remains. Give the locks in the same order everywhere
/// (e.g. sorted by name) so two multi-locks cannot deadlock each other.
///
/// The locks may come from different [`LockClient`](crate::LockClient)s, e.g.
/// one per independent Redis node.
///
/// ```no_run
/// # async fn demo(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
/// use std::time::Duration;
/// let both = hmdp_lock::MultiLock::new([locks.lock("user:1")?, locks.lock("user:2")?])?;
/// if let Some(guard) = both.try_lock(Duration::from_secs(1), None).await? {
///     // ... transfer between the two users ...
///     guard.unlock().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct MultiLock<C: LockConnection = redis::aio::ConnectionManager> {
    locks: Vec<Lock<C>>,
}

impl<C: LockConnection> Clone for MultiLock<C> {
    fn clone(&self) -> Self {
        MultiLock {
            locks: self.locks.clone(),
        }
    }
}

impl<C: LockConnection> MultiLock<C> {
    /// Groups `locks`; fails with an invalid-argument error if empty.
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// let m = hmdp_lock::MultiLock::new(vec![locks.lock("a")?, locks.lock("b")?])?;
    /// assert_eq!(m.locks().len(), 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(locks: impl IntoIterator<Item = Lock<C>>) -> Result<Self> {
        let locks: Vec<_> = locks.into_iter().collect();
        if locks.is_empty() {
            return Err(Error::invalid("a MultiLock needs at least one lock"));
        }
        Ok(MultiLock { locks })
    }

    /// The grouped locks, in acquisition order.
    ///
    /// ```no_run
    /// # fn f(m: hmdp_lock::MultiLock) { for l in m.locks() { println!("{}", l.key()); } }
    /// ```
    pub fn locks(&self) -> &[Lock<C>] {
        &self.locks
    }

    /// Waits as long as needed, then holds all locks with the watchdog on.
    ///
    /// ```no_run
    /// # async fn demo(m: hmdp_lock::MultiLock) -> hmdp_lock::Result<()> {
    /// let guard = m.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<MultiLockGuard<C>> {
        match self.acquire(None, None).await? {
            Some(g) => Ok(g),
            None => unreachable!("an unbounded wait cannot time out"),
        }
    }

    /// Tries to hold all locks within `wait`. `lease` works as in
    /// [`Lock::try_lock`]. Returns `Ok(None)` (with nothing held) if the
    /// budget runs out.
    ///
    /// ```no_run
    /// # async fn demo(m: hmdp_lock::MultiLock) -> hmdp_lock::Result<()> {
    /// use std::time::Duration;
    /// let got = m.try_lock(Duration::from_millis(200), Some(Duration::from_secs(5))).await?;
    /// # let _ = got;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard<C>>> {
        self.acquire(Some(wait), lease).await
    }

    async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<MultiLockGuard<C>>> {
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let unbounded = deadline.is_none();
        let retry_pause = self.locks[0].client.inner.retry_interval;
        loop {
            let mut held = Vec::with_capacity(self.locks.len());
            let mut error = None;
            for lock in &self.locks {
                let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                match lock.acquire(remaining, lease).await {
                    Ok(Some(g)) => held.push(g),
                    Ok(None) => break,
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            if held.len() == self.locks.len() {
                return Ok(Some(MultiLockGuard { guards: held }));
            }
            release_all(held).await;
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match remaining {
                Some(r) if !unbounded && r.is_zero() => {
                    return match error {
                        Some(e) => Err(e),
                        None => Ok(None),
                    };
                }
                _ => {}
            }
            if let Some(e) = &error {
                tracing::warn!(error = %e, "multi-lock member failed; retrying");
                let pause = remaining.map_or(retry_pause, |r| r.min(retry_pause));
                tokio::time::sleep(pause).await;
            }
        }
    }
}

async fn release_all<C: LockConnection>(guards: Vec<LockGuard<C>>) -> bool {
    let mut all = true;
    for g in guards.into_iter().rev() {
        match g.unlock().await {
            Ok(held) => all &= held,
            Err(e) => {
                tracing::warn!(error = %e, "multi-lock release failed");
                all = false;
            }
        }
    }
    all
}

/// Holds every lock of a [`MultiLock`]. Dropping it releases them in the
/// background.
///
/// ```no_run
/// # async fn demo(m: hmdp_lock::MultiLock) -> hmdp_lock::Result<()> {
/// let guard = m.lock().await?;
/// assert_eq!(guard.guards().len(), m.locks().len());
/// guard.unlock().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[must_use = "dropping the guard releases the locks"]
pub struct MultiLockGuard<C: LockConnection = redis::aio::ConnectionManager> {
    guards: Vec<LockGuard<C>>,
}

impl<C: LockConnection> MultiLockGuard<C> {
    /// The individual guards, in acquisition order.
    ///
    /// ```no_run
    /// # async fn demo(m: hmdp_lock::MultiLock) -> hmdp_lock::Result<()> {
    /// let guard = m.lock().await?;
    /// let tokens: Vec<_> = guard.guards().iter().map(|g| g.fencing_token()).collect();
    /// # let _ = tokens;
    /// # Ok(())
    /// # }
    /// ```
    pub fn guards(&self) -> &[LockGuard<C>] {
        &self.guards
    }

    /// True if any member lock is lost.
    ///
    /// ```no_run
    /// # async fn demo(m: hmdp_lock::MultiLock) -> hmdp_lock::Result<()> {
    /// let guard = m.lock().await?;
    /// assert!(!guard.is_lost());
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves when any member lock is lost.
    ///
    /// ```no_run
    /// # async fn demo(m: hmdp_lock::MultiLock) -> hmdp_lock::Result<()> {
    /// let guard = m.lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => {}
    ///     _ = tokio::time::sleep(std::time::Duration::from_millis(10)) => {}
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lost(&self) {
        futures_util::future::select_all(self.guards.iter().map(|g| g.lost().boxed())).await;
    }

    /// Releases every member (in reverse order). `Ok(true)` if all were
    /// still held; every member is attempted even if one fails.
    ///
    /// ```no_run
    /// # async fn demo(m: hmdp_lock::MultiLock) -> hmdp_lock::Result<()> {
    /// let all_held = m.lock().await?.unlock().await?;
    /// # let _ = all_held;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(self) -> Result<bool> {
        let mut all = true;
        let mut first_err = None;
        for g in self.guards.into_iter().rev() {
            match g.unlock().await {
                Ok(held) => all &= held,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(all),
        }
    }
}

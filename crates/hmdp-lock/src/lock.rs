//! [`Lock`] handles and the [`LockGuard`] returned on acquisition.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{LockClient, LockConnection, LockKind, LockOptions};
use crate::keys::LockKeys;
use crate::scripts;
use crate::stats::{Stats, WaitEnd};
use crate::{Error, ErrorKind, Result};

/// Outcome of one acquisition attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    Acquired { fence: Option<u64> },
    Held { ttl: Option<Duration> },
}

/// Interprets `PTTL` from an acquire script: 0 (expiring this very
/// millisecond) and -2 (gone) mean "retry now"; -1 (no expiry: not one of our
/// locks) means "unknown", so waiters fall back to their retry interval.
pub(crate) fn holder_ttl(pttl: i64) -> Option<Duration> {
    match pttl {
        -2 => Some(Duration::ZERO),
        t if t >= 0 => Some(Duration::from_millis(t.unsigned_abs())),
        _ => None,
    }
}

pub(crate) fn lease_ms(lease: Duration) -> u64 {
    u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// A named distributed lock. Cheap to clone; create it with
/// [`LockClient::lock`] or [`LockClient::lock_with`].
///
/// Every acquisition creates a new owner token, so calling `lock()` twice
/// from the same task *waits for itself*. To re-enter a lock you already hold,
/// use [`LockGuard::reenter`].
///
/// ```no_run
/// # async fn demo(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
/// use std::time::Duration;
/// let lock = locks.lock("voucher:7")?;
/// // Wait up to 1 s; hold for at most 10 s (no watchdog).
/// if let Some(guard) = lock.try_lock(Duration::from_secs(1), Some(Duration::from_secs(10))).await? {
///     // ... critical section ...
///     guard.unlock().await?;
/// }
/// # Ok(())
/// # }
/// ```
pub struct Lock<C = redis::aio::ConnectionManager> {
    pub(crate) client: LockClient<C>,
    pub(crate) keys: Arc<LockKeys>,
    options: LockOptions,
}

impl<C> Clone for Lock<C> {
    fn clone(&self) -> Self {
        Lock {
            client: self.client.clone(),
            keys: self.keys.clone(),
            options: self.options,
        }
    }
}

impl<C> std::fmt::Debug for Lock<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("key", &self.keys.lock)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<C: LockConnection> Lock<C> {
    pub(crate) fn new(client: LockClient<C>, keys: LockKeys, options: LockOptions) -> Self {
        Lock {
            client,
            keys: Arc::new(keys),
            options,
        }
    }

    /// The lock name as given to [`LockClient::lock`].
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// assert_eq!(locks.lock("a")?.name(), "a");
    /// # Ok(())
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis key holding the lock: `{prefix}lock:{name}`.
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// assert!(locks.lock("a")?.key().ends_with("lock:{a}"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.keys.lock
    }

    /// The fencing counter key: `{prefix}lock:{name}:fence`.
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// assert!(locks.lock("a")?.fence_key().ends_with("lock:{a}:fence"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn fence_key(&self) -> &str {
        &self.keys.fence
    }

    /// The unlock notification channel: `{prefix}lock:{name}:ch`.
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// assert!(locks.lock("a")?.channel().ends_with("lock:{a}:ch"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        &self.keys.channel
    }

    /// The options this lock was created with.
    ///
    /// ```no_run
    /// # fn f(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// assert!(!locks.lock("a")?.options().fencing_enabled());
    /// # Ok(())
    /// # }
    /// ```
    pub fn options(&self) -> LockOptions {
        self.options
    }

    /// Waits as long as it takes, then holds the lock with the watchdog on
    /// (lease = watchdog timeout, renewed every third of it).
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self) -> Result<LockGuard<C>> {
        match self.acquire(None, None).await? {
            Some(g) => Ok(g),
            None => unreachable!("an unbounded wait cannot time out"),
        }
    }

    /// Waits as long as it takes, then holds the lock for `lease` without
    /// renewal.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(5)).await?;
    /// guard.unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard<C>> {
        match self.acquire(None, Some(lease)).await? {
            Some(g) => Ok(g),
            None => unreachable!("an unbounded wait cannot time out"),
        }
    }

    /// Tries to acquire the lock, waiting at most `wait` (zero = one attempt).
    ///
    /// `lease`: `Some(d)` holds for `d` without renewal; `None` turns the
    /// watchdog on. While waiting, the task sleeps until an unlock message
    /// arrives on the lock's channel or the holder's lease runs out —
    /// whichever comes first — so no busy polling. Returns `Ok(None)` when
    /// the wait budget is spent.
    ///
    /// Each acquire call to Redis is limited to what is left of the budget
    /// (but at least [`min_attempt_timeout`](crate::LockClientBuilder::min_attempt_timeout)),
    /// so a Redis that stops answering cannot hold the caller much past
    /// `wait`: the call then fails with an error for which
    /// [`Error::is_timeout`] is true. Such a call may still have been
    /// granted by Redis; it is released in the background.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// use std::time::Duration;
    /// match lock.try_lock(Duration::from_millis(500), None).await? {
    ///     Some(guard) => { guard.unlock().await?; }
    ///     None => println!("busy, try later"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard<C>>> {
        self.acquire(Some(wait), lease).await
    }

    /// Whether anyone holds the lock right now (`EXISTS`).
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// if lock.is_locked().await? { println!("busy"); }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn is_locked(&self) -> Result<bool> {
        let mut conn = self.client.inner.conn.clone();
        let n: i64 = redis::cmd("EXISTS")
            .arg(&self.keys.lock)
            .query_async(&mut conn)
            .await?;
        Ok(n == 1)
    }

    /// Deletes the lock regardless of owner and wakes waiters. Returns
    /// whether it was held. Meant for administration and tests.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// lock.force_unlock().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn force_unlock(&self) -> Result<bool> {
        let mut conn = self.client.inner.conn.clone();
        let n: i64 = scripts::FORCE_RELEASE
            .key(&self.keys.lock)
            .key(&self.keys.channel)
            .invoke_async(&mut conn)
            .await?;
        Ok(n == 1)
    }

    fn resolve_lease(&self, lease: Option<Duration>) -> Result<(Duration, bool)> {
        let (lease, watchdog) = match lease {
            Some(l) => (l, false),
            None => (self.client.inner.watchdog_timeout, true),
        };
        if lease < Duration::from_millis(1) {
            return Err(Error::invalid("lease must be at least 1 ms"));
        }
        Ok((lease, watchdog))
    }

    pub(crate) async fn acquire(
        &self,
        wait: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<LockGuard<C>>> {
        let (lease, watchdog) = self.resolve_lease(lease)?;
        let inner = &self.client.inner;
        let stats = &inner.stats;
        let start = Instant::now();
        // `None`: wait as long as it takes (also if `start + wait` overflows).
        let deadline = wait.and_then(|w| start.checked_add(w));
        let token = inner.next_token();
        let mut sub: Option<crate::subscriber::Subscription> = None;
        let mut tried_subscribe = false;
        let mut contended = false;
        loop {
            let sent_at = Instant::now();
            let attempt = match deadline {
                // A hung connection must not outlast the budget: limit the
                // call to what is left of it, with a floor so that a zero
                // budget (or a last retry at its end) still gets one fair
                // round trip.
                Some(d) => {
                    let limit = d
                        .saturating_duration_since(sent_at)
                        .max(inner.min_attempt_timeout);
                    match tokio::time::timeout(limit, self.attempt(&token, lease)).await {
                        Ok(r) => r,
                        Err(_) => Err(Error::timed_out(
                            "lock acquire call did not answer within the wait budget",
                        )),
                    }
                }
                None => self.attempt(&token, lease).await,
            };
            if let Some(s) = sub.as_mut() {
                s.retried();
            }
            let ttl = match attempt {
                Ok(Attempt::Acquired { fence }) => {
                    if contended {
                        stats.waited(start.elapsed(), WaitEnd::Granted);
                    } else {
                        stats.acquired();
                    }
                    return Ok(Some(LockGuard::new(
                        self.clone(),
                        token,
                        lease,
                        watchdog,
                        fence,
                        sent_at,
                    )));
                }
                Ok(Attempt::Held { ttl }) => ttl,
                Err(e) => {
                    stats.error();
                    // The script may have run (and granted the lock) even
                    // though we saw no reply: undo that, owner-checked.
                    self.release_in_background(token, lease);
                    return Err(e);
                }
            };
            contended = true;
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if now >= d => {
                    stats.waited(start.elapsed(), WaitEnd::TimedOut);
                    return Ok(None);
                }
                Some(d) => Some(d - now),
                None => None,
            };
            if !tried_subscribe {
                tried_subscribe = true;
                if let Some(hub) = &inner.hub {
                    let subscribe = hub.subscribe(&self.keys.channel);
                    sub = match remaining {
                        Some(r) => tokio::time::timeout(r, subscribe).await.ok().flatten(),
                        None => subscribe.await,
                    };
                    if sub.is_some() {
                        // Listening now; retry at once so an unlock that
                        // happened before the subscription is not missed.
                        continue;
                    }
                }
            }
            let mut pause = ttl.unwrap_or(inner.retry_interval);
            if sub.is_none() {
                pause = pause.min(inner.retry_interval);
            }
            if let Some(r) = remaining {
                pause = pause.min(r);
            }
            let pause = pause.max(Duration::from_millis(1));
            match sub.as_mut() {
                Some(s) => {
                    let _ = tokio::time::timeout(pause, s.notified()).await;
                }
                None => tokio::time::sleep(pause).await,
            }
        }
    }

    /// Best-effort, owner-checked release of a token whose acquire call
    /// failed or went unanswered. Harmless if the call was never granted:
    /// the token is unique, so nobody else's hold can match it. Bounded by
    /// the lease, after which a stray hold has expired anyway.
    fn release_in_background(&self, token: String, lease: Duration) {
        let lock = self.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(lease, lock.release_token(&token, lease)).await;
        });
    }

    /// One acquire script call with a caller-chosen token.
    pub(crate) async fn attempt(&self, token: &str, lease: Duration) -> Result<Attempt> {
        let script = match self.options.lock_kind() {
            LockKind::Simple => &*scripts::SIMPLE_ACQUIRE,
            LockKind::Reentrant => &*scripts::REENTRANT_ACQUIRE,
        };
        let mut conn = self.client.inner.conn.clone();
        let reply: Vec<i64> = script
            .key(&self.keys.lock)
            .key(&self.keys.fence)
            .arg(token)
            .arg(lease_ms(lease))
            .arg(if self.options.fencing_enabled() {
                "1"
            } else {
                "0"
            })
            .invoke_async(&mut conn)
            .await?;
        match reply.as_slice() {
            [1, _, fence] => Ok(Attempt::Acquired {
                fence: self
                    .options
                    .fencing_enabled()
                    .then(|| u64::try_from(*fence).unwrap_or(0)),
            }),
            [0, ttl, _] => Ok(Attempt::Held {
                ttl: holder_ttl(*ttl),
            }),
            other => Err(Error::reply(format!("acquire script returned {other:?}"))),
        }
    }

    /// One release script call: -1 not held, 0 released, n>0 still held n times.
    pub(crate) async fn release_token(&self, token: &str, lease: Duration) -> Result<i64> {
        let mut conn = self.client.inner.conn.clone();
        let n: i64 = match self.options.lock_kind() {
            LockKind::Simple => {
                scripts::SIMPLE_RELEASE
                    .key(&self.keys.lock)
                    .key(&self.keys.channel)
                    .arg(token)
                    .invoke_async(&mut conn)
                    .await?
            }
            LockKind::Reentrant => {
                scripts::REENTRANT_RELEASE
                    .key(&self.keys.lock)
                    .key(&self.keys.channel)
                    .arg(token)
                    .arg(lease_ms(lease))
                    .invoke_async(&mut conn)
                    .await?
            }
        };
        Ok(n)
    }

    /// Owner-checked `PEXPIRE`.
    pub(crate) async fn extend_token(&self, token: &str, lease: Duration) -> Result<bool> {
        let script = match self.options.lock_kind() {
            LockKind::Simple => &*scripts::SIMPLE_EXTEND,
            LockKind::Reentrant => &*scripts::REENTRANT_EXTEND,
        };
        let mut conn = self.client.inner.conn.clone();
        let n: i64 = script
            .key(&self.keys.lock)
            .arg(token)
            .arg(lease_ms(lease))
            .invoke_async(&mut conn)
            .await?;
        Ok(n == 1)
    }
}

/// State shared between a hold and its watchdog task.
struct HoldState {
    lost: watch::Sender<bool>,
    released: AtomicBool,
    /// When the lease may have run out unless renewed: the time the last
    /// confirmed `PEXPIRE` (acquire, renewal, extend, re-entry) was *sent*
    /// plus the lease it set. Sending time, not reply time, because Redis may
    /// have run the command any time after we sent it. A watch channel so
    /// that [`LockGuard::lost`] notices when it moves (even earlier).
    deadline: watch::Sender<Instant>,
    /// The loss has been counted in the client's stats.
    counted: AtomicBool,
    stats: Arc<Stats>,
}

impl HoldState {
    /// Marks the hold lost (for good) unless it was released.
    fn mark_lost(&self) {
        if !self.released.load(Ordering::SeqCst) {
            self.lost.send_replace(true);
            if !self.counted.swap(true, Ordering::Relaxed) {
                self.stats.lost();
            }
        }
    }

    fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    fn set_deadline(&self, at: Instant) {
        self.deadline.send_replace(at);
    }

    /// Lost, or the lease may have run out without a confirmed renewal
    /// (which then counts as lost from here on).
    fn is_lost(&self) -> bool {
        if *self.lost.borrow() {
            return true;
        }
        if Instant::now() >= self.deadline() {
            self.mark_lost();
            return true;
        }
        false
    }
}

/// One ownership of a lock (one owner token), shared by the guard that
/// acquired it and every guard obtained from it by re-entry.
struct Hold<C: LockConnection> {
    lock: Lock<C>,
    token: String,
    lease: Duration,
    watchdog: bool,
    fence: Option<u64>,
    state: Arc<HoldState>,
    renewer: Mutex<Option<JoinHandle<()>>>,
}

impl<C: LockConnection> Hold<C> {
    fn stop_renewal(&self) {
        if let Some(h) = self
            .renewer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            h.abort();
        }
    }

    async fn release(&self) -> Result<bool> {
        let sent_at = Instant::now();
        let n = self.lock.release_token(&self.token, self.lease).await?;
        if n <= 0 {
            if n < 0 {
                self.state.mark_lost();
            }
            self.state.released.store(true, Ordering::SeqCst);
            self.stop_renewal();
        } else {
            // Holds remain; the script reset the lease.
            self.state.set_deadline(sent_at + self.lease);
        }
        Ok(n >= 0)
    }
}

impl<C: LockConnection> Drop for Hold<C> {
    fn drop(&mut self) {
        self.stop_renewal();
    }
}

/// Renews the lease every `lease / 3` while the hold lasts.
///
/// Each renewal moves the hold's deadline to (time sent + lease). A renewal
/// that fails or gets no answer does not, so [`LockGuard::is_lost`] turns
/// true the moment the last confirmed lease may have run out — another
/// client may hold the lock from then on. Renewal calls are cut off at that
/// deadline; after it the watchdog marks the hold lost and stops.
async fn watchdog<C: LockConnection>(
    lock: Lock<C>,
    token: String,
    lease: Duration,
    state: Arc<HoldState>,
    acquired_at: Instant,
) {
    let period = lease / 3;
    let mut next = acquired_at + period;
    loop {
        tokio::time::sleep_until(next).await;
        let sent_at = Instant::now();
        let left = state.deadline().saturating_duration_since(sent_at);
        if left.is_zero() {
            tracing::warn!(key = %lock.key(), "lock lost: no renewal confirmed within the lease");
            state.mark_lost();
            return;
        }
        match tokio::time::timeout(period.min(left), lock.extend_token(&token, lease)).await {
            Ok(Ok(true)) => state.set_deadline(sent_at + lease),
            Ok(Ok(false)) => {
                tracing::warn!(key = %lock.key(), "lock lost: renewal found another owner or no key");
                state.mark_lost();
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(key = %lock.key(), error = %e, "lock renewal failed");
            }
            Err(_) => tracing::warn!(key = %lock.key(), "lock renewal timed out"),
        }
        // After a failure, retry a period after the last try (at once if it
        // hung that long), but wake at the deadline at the latest.
        next = (sent_at + period).min(state.deadline());
    }
}

/// Proof that you hold a lock.
///
/// * [`unlock`](Self::unlock) releases it and tells you whether you still
///   held it.
/// * Dropping a guard that was not unlocked releases it in the background
///   (`tokio::spawn` on the current runtime); with no runtime, the lock simply
///   expires after its lease.
/// * With the watchdog on, a background task renews the lease every third of
///   it until the guard is released. If a renewal finds the lock gone, or no
///   renewal has been confirmed within a lease of the last confirmed one
///   (Redis unreachable or hung), [`is_lost`](Self::is_lost) turns true and
///   [`lost`](Self::lost) resolves — as soon as another client could have
///   taken the lock, not later.
///
/// ```no_run
/// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
/// let guard = lock.lock().await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lock lost, abort the work"),
///     _ = async { /* critical section */ } => {}
/// }
/// let still_held = guard.unlock().await?;
/// # let _ = still_held;
/// # Ok(())
/// # }
/// ```
#[must_use = "dropping the guard releases the lock"]
pub struct LockGuard<C: LockConnection = redis::aio::ConnectionManager> {
    hold: Arc<Hold<C>>,
    released: bool,
}

impl<C: LockConnection> std::fmt::Debug for LockGuard<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.hold.lock.key())
            .field("token", &self.hold.token)
            .field("fence", &self.hold.fence)
            .field("watchdog", &self.hold.watchdog)
            .finish_non_exhaustive()
    }
}

impl<C: LockConnection> LockGuard<C> {
    fn new(
        lock: Lock<C>,
        token: String,
        lease: Duration,
        watchdog: bool,
        fence: Option<u64>,
        sent_at: Instant,
    ) -> Self {
        let state = Arc::new(HoldState {
            lost: watch::channel(false).0,
            released: AtomicBool::new(false),
            deadline: watch::channel(sent_at + lease).0,
            counted: AtomicBool::new(false),
            stats: lock.client.inner.stats.clone(),
        });
        let renewer = watchdog.then(|| {
            tokio::spawn(self::watchdog(
                lock.clone(),
                token.clone(),
                lease,
                state.clone(),
                sent_at,
            ))
        });
        let hold = Hold {
            lock,
            token,
            lease,
            watchdog,
            fence,
            state,
            renewer: Mutex::new(renewer),
        };
        LockGuard {
            hold: Arc::new(hold),
            released: false,
        }
    }

    /// The lock this guard holds.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// println!("holding {}", guard.lock().key());
    /// # Ok(())
    /// # }
    /// ```
    pub fn lock(&self) -> &Lock<C> {
        &self.hold.lock
    }

    /// The owner token stored in Redis (`<client uuid>:<counter>`).
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// println!("owner {}", guard.token());
    /// # Ok(())
    /// # }
    /// ```
    pub fn token(&self) -> &str {
        &self.hold.token
    }

    /// The fencing token issued at acquisition, if the lock was created with
    /// [`LockOptions::fencing`]. Strictly increasing per lock name; pass it
    /// to the storage you protect and let it reject writes carrying a token
    /// lower than the highest it has seen. Re-entered guards share the token
    /// of the original acquisition.
    ///
    /// ```no_run
    /// # async fn demo(locks: hmdp_lock::LockClient) -> hmdp_lock::Result<()> {
    /// let lock = locks.lock_with("stock:1", hmdp_lock::LockOptions::new().fencing(true))?;
    /// let guard = lock.lock().await?;
    /// let token = guard.fencing_token().expect("fencing is on");
    /// // UPDATE stock SET n = n - 1, fence = ? WHERE id = 1 AND fence < ?
    /// # let _ = token;
    /// # Ok(())
    /// # }
    /// ```
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.fence
    }

    /// Whether the watchdog renews this lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// assert!(lock.lock().await?.has_watchdog());
    /// # Ok(())
    /// # }
    /// ```
    pub fn has_watchdog(&self) -> bool {
        self.hold.watchdog
    }

    /// True once the lock may be lost: a renewal, extension or re-entry
    /// found another owner (or no key), or the lease may have run out — for
    /// an explicit lease when it ends, with the watchdog when no renewal has
    /// been confirmed for a whole lease since the last confirmed one (sent
    /// time + lease). From that moment another client may hold the lock.
    /// Once true, it stays true (a later successful
    /// [`extend`](Self::extend) does not clear it).
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// if guard.is_lost() { return Ok(()); }
    /// # Ok(())
    /// # }
    /// ```
    pub fn is_lost(&self) -> bool {
        self.hold.state.is_lost()
    }

    /// Resolves when the lock is lost (see [`is_lost`](Self::is_lost)).
    /// Pending forever while the lock is safely held.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     _ = guard.lost() => { /* stop writing */ }
    ///     _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lost(&self) {
        let state = &self.hold.state;
        let mut lost_rx = state.lost.subscribe();
        let mut deadline_rx = state.deadline.subscribe();
        loop {
            let deadline = *deadline_rx.borrow_and_update();
            if state.is_lost() {
                return;
            }
            // The senders live in `state`, which we borrow: `changed()`
            // cannot fail while we wait.
            tokio::select! {
                _ = lost_rx.changed() => {}
                _ = deadline_rx.changed() => {}
                _ = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Owner-checked extension: sets the remaining lease to `lease` if we
    /// still own the lock, and moves the guard's deadline to (time sent +
    /// `lease`). Returns `Ok(false)` (and marks the guard lost) if we do not
    /// own it. With the watchdog on, the next renewal resets the lease to
    /// the watchdog timeout again.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let guard = lock.lock_with_lease(std::time::Duration::from_secs(5)).await?;
    /// assert!(guard.extend(std::time::Duration::from_secs(30)).await?);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn extend(&self, lease: Duration) -> Result<bool> {
        if lease < Duration::from_millis(1) {
            return Err(Error::invalid("lease must be at least 1 ms"));
        }
        let sent_at = Instant::now();
        let ok = self.hold.lock.extend_token(&self.hold.token, lease).await?;
        if ok {
            self.hold.state.set_deadline(sent_at + lease);
        } else {
            self.hold.state.mark_lost();
        }
        Ok(ok)
    }

    /// Re-enters the lock: increments the hold count in Redis and returns a
    /// second guard for the same ownership. The lock is free again only after
    /// every guard has been released. The lease is reset to this hold's lease.
    ///
    /// Returns `Ok(None)` if the lock was lost meanwhile, and an error of kind
    /// [`ErrorKind::NotReentrant`] for a [`LockKind::Simple`] lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let outer = lock.lock().await?;
    /// let inner = outer.reenter().await?.expect("still held");
    /// inner.unlock().await?;           // count 2 -> 1, still locked
    /// assert!(lock.is_locked().await?);
    /// outer.unlock().await?;           // count 1 -> 0, free
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reenter(&self) -> Result<Option<LockGuard<C>>> {
        let hold = &self.hold;
        if hold.lock.options().lock_kind() != LockKind::Reentrant {
            return Err(Error::new(
                ErrorKind::NotReentrant,
                format!("{} is a simple lock", hold.lock.key()),
            ));
        }
        let sent_at = Instant::now();
        let mut conn = hold.lock.client.inner.conn.clone();
        let n: i64 = scripts::REENTRANT_REENTER
            .key(hold.lock.key())
            .arg(&hold.token)
            .arg(lease_ms(hold.lease))
            .invoke_async(&mut conn)
            .await?;
        if n <= 0 {
            hold.state.mark_lost();
            return Ok(None);
        }
        hold.state.set_deadline(sent_at + hold.lease);
        Ok(Some(LockGuard {
            hold: self.hold.clone(),
            released: false,
        }))
    }

    /// Releases this guard's hold. `Ok(true)`: we still held the lock (it is
    /// now free, or still held by a re-entered guard). `Ok(false)`: the lock
    /// had already expired or been taken over — the critical section may not
    /// have been exclusive.
    ///
    /// ```no_run
    /// # async fn demo(lock: hmdp_lock::Lock) -> hmdp_lock::Result<()> {
    /// let guard = lock.lock().await?;
    /// if !guard.unlock().await? {
    ///     eprintln!("lease expired before unlock");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn unlock(mut self) -> Result<bool> {
        self.released = true;
        self.hold.release().await
    }
}

impl<C: LockConnection> Drop for LockGuard<C> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let hold = self.hold.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    if let Err(e) = hold.release().await {
                        tracing::warn!(key = %hold.lock.key(), error = %e, "background unlock failed");
                    }
                });
            }
            Err(_) => {
                tracing::debug!(key = %hold.lock.key(), "guard dropped outside a runtime; lock will expire");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_ttl_never_turns_an_expiring_lock_into_a_long_wait() {
        assert_eq!(holder_ttl(250), Some(Duration::from_millis(250)));
        assert_eq!(holder_ttl(0), Some(Duration::ZERO));
        assert_eq!(holder_ttl(-2), Some(Duration::ZERO));
        assert_eq!(holder_ttl(-1), None);
    }

    #[test]
    fn lease_is_sent_in_whole_milliseconds_at_least_one() {
        assert_eq!(lease_ms(Duration::from_micros(10)), 1);
        assert_eq!(lease_ms(Duration::from_millis(1500)), 1500);
    }
}

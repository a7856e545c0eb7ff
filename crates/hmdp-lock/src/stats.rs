//! Counters for observability: [`LockStats`], read with
//! [`LockClient::stats`](crate::LockClient::stats).
//!
//! Every [`LockClient`](crate::LockClient) (and all its clones, and every
//! lock made from them) shares one set of relaxed atomic counters. Updating
//! them costs one or two uncontended atomic adds per acquisition, and reading
//! them never blocks a lock operation, so a `/metrics` endpoint can call
//! [`LockClient::stats`](crate::LockClient::stats) on every scrape.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (inclusive, like Prometheus `le`) of the finite buckets of
/// the wait-time histogram in [`LockStats::wait_buckets`]. A last, implicit
/// `+Inf` bucket follows them, so there are `WAIT_BUCKETS.len() + 1`
/// counts.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(hmdp_lock::WAIT_BUCKETS.len(), 8);
/// assert_eq!(hmdp_lock::WAIT_BUCKETS[0], Duration::from_millis(1));
/// assert_eq!(hmdp_lock::WAIT_BUCKETS[7], Duration::from_secs(5));
/// ```
pub const WAIT_BUCKETS: [Duration; 8] = [
    Duration::from_millis(1),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(5),
];

/// Number of histogram counts: one per bound in [`WAIT_BUCKETS`] plus `+Inf`.
const BUCKETS: usize = WAIT_BUCKETS.len() + 1;

/// A snapshot of a [`LockClient`](crate::LockClient)'s counters, taken with
/// [`LockClient::stats`](crate::LockClient::stats).
///
/// All counters only grow (from the client's creation), so they map directly
/// onto Prometheus counters and a histogram. The fields are read one by one
/// without a global lock, so a snapshot taken while other tasks lock and
/// unlock may be off by the few operations in flight.
///
/// What is counted: acquisitions through [`Lock::lock`](crate::Lock::lock),
/// [`Lock::lock_with_lease`](crate::Lock::lock_with_lease) and
/// [`Lock::try_lock`](crate::Lock::try_lock) — including each member of a
/// [`MultiLock`](crate::MultiLock) — and the loss of any guard. Re-entry
/// ([`LockGuard::reenter`](crate::LockGuard::reenter)) is not an
/// acquisition, and [`RedLock`](crate::RedLock) rounds are not counted. An
/// acquisition whose future is dropped (cancelled) before it finishes is not
/// counted either.
///
/// A *wait* starts when the first attempt finds the lock held by someone
/// else and ends when the lock is granted ([`contended`](Self::contended))
/// or the wait budget is spent ([`timeouts`](Self::timeouts)); its length is
/// measured from the start of the call.
///
/// ```
/// let stats = hmdp_lock::LockStats::default();
/// assert_eq!(stats.waits(), 0);
/// assert_eq!(stats.wait_buckets.len(), hmdp_lock::WAIT_BUCKETS.len() + 1);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStats {
    /// Acquisitions granted at the first attempt, without waiting.
    pub acquired: u64,
    /// Acquisitions granted after waiting for another holder.
    pub contended: u64,
    /// Acquisitions that gave up because the wait budget was spent while
    /// someone else held the lock (`try_lock` returned `Ok(None)`).
    pub timeouts: u64,
    /// Acquisitions that failed with an error (Redis unreachable, a call
    /// that outlived the wait budget, an unexpected reply, …).
    pub errors: u64,
    /// Total length, in microseconds, of the waits that ended (granted or
    /// timed out): the histogram's sum.
    pub wait_time_us: u64,
    /// Guards found to have lost their lock: a watchdog renewal found
    /// another owner or no key, no renewal was confirmed within the lease,
    /// an explicit lease ran out before release, or an unlock, extend or
    /// re-entry found the lock gone. Counted once per acquisition.
    pub lost: u64,
    /// Wait-time histogram, **cumulative** as Prometheus expects:
    /// `wait_buckets[i]` counts the ended waits that took at most
    /// [`WAIT_BUCKETS`]`[i]`; the last entry (`+Inf`) counts every ended
    /// wait, i.e. `contended + timeouts`.
    pub wait_buckets: [u64; BUCKETS],
}

impl LockStats {
    /// Number of waits that ended (the histogram's count, its `+Inf`
    /// bucket).
    ///
    /// ```
    /// assert_eq!(hmdp_lock::LockStats::default().waits(), 0);
    /// ```
    pub fn waits(&self) -> u64 {
        self.wait_buckets[BUCKETS - 1]
    }
}

/// The live counters behind [`LockStats`].
#[derive(Debug, Default)]
pub(crate) struct Stats {
    acquired: AtomicU64,
    contended: AtomicU64,
    timeouts: AtomicU64,
    errors: AtomicU64,
    wait_time_us: AtomicU64,
    lost: AtomicU64,
    /// Per bucket, not cumulative: one add per observation.
    buckets: [AtomicU64; BUCKETS],
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitEnd {
    Granted,
    TimedOut,
}

impl Stats {
    pub(crate) fn acquired(&self) {
        self.acquired.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn lost(&self) {
        self.lost.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn waited(&self, waited: Duration, end: WaitEnd) {
        match end {
            WaitEnd::Granted => &self.contended,
            WaitEnd::TimedOut => &self.timeouts,
        }
        .fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.wait_time_us.fetch_add(us, Ordering::Relaxed);
        self.buckets[bucket_of(waited)].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> LockStats {
        let mut wait_buckets = [0; BUCKETS];
        let mut running = 0;
        for (out, b) in wait_buckets.iter_mut().zip(&self.buckets) {
            running += b.load(Ordering::Relaxed);
            *out = running;
        }
        LockStats {
            acquired: self.acquired.load(Ordering::Relaxed),
            contended: self.contended.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            wait_time_us: self.wait_time_us.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
            wait_buckets,
        }
    }
}

/// Index of the first bucket whose bound is at least `waited`.
fn bucket_of(waited: Duration) -> usize {
    WAIT_BUCKETS
        .iter()
        .position(|b| waited <= *b)
        .unwrap_or(BUCKETS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_land_in_the_first_bucket_that_holds_them() {
        assert_eq!(bucket_of(Duration::ZERO), 0);
        assert_eq!(bucket_of(Duration::from_millis(1)), 0);
        assert_eq!(bucket_of(Duration::from_micros(1001)), 1);
        assert_eq!(bucket_of(Duration::from_millis(60)), 4);
        assert_eq!(bucket_of(Duration::from_secs(5)), 7);
        assert_eq!(bucket_of(Duration::from_secs(6)), 8);
    }

    #[test]
    fn snapshot_buckets_are_cumulative() {
        let s = Stats::default();
        s.waited(Duration::from_millis(3), WaitEnd::Granted);
        s.waited(Duration::from_millis(70), WaitEnd::Granted);
        s.waited(Duration::from_secs(9), WaitEnd::TimedOut);
        s.acquired();
        let snap = s.snapshot();
        assert_eq!(snap.wait_buckets, [0, 1, 1, 1, 2, 2, 2, 2, 3]);
        assert_eq!(snap.waits(), 3);
        assert_eq!(snap.contended, 2);
        assert_eq!(snap.timeouts, 1);
        assert_eq!(snap.acquired, 1);
        assert_eq!(snap.wait_time_us, 3_000 + 70_000 + 9_000_000);
    }
}

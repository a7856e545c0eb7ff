//! Where generators read the time from.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time.
///
/// Generators read the clock once per id (or once per id under a lock in
/// segment mode). The default is [`SystemClock`]; inject another one with
/// [`IdGeneratorBuilder::clock`](crate::IdGeneratorBuilder::clock) to test
/// clock jumps, or to drive time from elsewhere. Any
/// `Fn() -> SystemTime + Send + Sync + 'static` closure is a clock too.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use hmdp_id::Clock;
///
/// let frozen = || UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// assert_eq!(frozen.now(), UNIX_EPOCH + Duration::from_secs(1_700_000_000));
/// assert!(hmdp_id::SystemClock.now() > SystemTime::UNIX_EPOCH);
/// ```
pub trait Clock: Send + Sync + 'static {
    /// The current time. It may jump backwards; generators cope with that.
    ///
    /// ```
    /// use hmdp_id::{Clock, ManualClock};
    /// let clock = ManualClock::from_unix_seconds(1_700_000_000);
    /// let t = clock.now();
    /// assert_eq!(t, std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000));
    /// ```
    fn now(&self) -> SystemTime;
}

impl<F> Clock for F
where
    F: Fn() -> SystemTime + Send + Sync + 'static,
{
    fn now(&self) -> SystemTime {
        self()
    }
}

/// The operating system's wall clock, [`SystemTime::now`].
///
/// A unit struct (deliberately not `#[non_exhaustive]`, so it can be named
/// as a value).
///
/// ```
/// use hmdp_id::Clock;
/// let t = hmdp_id::SystemClock.now();
/// assert!(t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() > 1_640_995_200);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that only moves when told to, for tests.
///
/// Clones share the same time, so keep one clone to steer the clock and give
/// another to the generator. Precision is one millisecond.
///
/// ```
/// use std::time::Duration;
/// use hmdp_id::{Clock, ManualClock};
///
/// let clock = ManualClock::from_unix_seconds(1_700_000_000);
/// let handle = clock.clone();
/// handle.rewind(Duration::from_secs(5));
/// assert_eq!(clock.unix_seconds(), 1_699_999_995);
/// handle.advance(Duration::from_millis(5_500));
/// assert_eq!(clock.unix_seconds(), 1_700_000_000);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct ManualClock {
    unix_millis: Arc<AtomicI64>,
}

impl ManualClock {
    /// A clock stopped at `time`.
    ///
    /// ```
    /// use hmdp_id::{Clock, ManualClock};
    /// let t = std::time::SystemTime::now();
    /// assert_eq!(ManualClock::new(t).unix_seconds(), ManualClock::new(t).unix_seconds());
    /// ```
    pub fn new(time: SystemTime) -> Self {
        let clock = ManualClock {
            unix_millis: Arc::new(AtomicI64::new(0)),
        };
        clock.set(time);
        clock
    }

    /// A clock stopped at the given Unix second.
    ///
    /// ```
    /// let clock = hmdp_id::ManualClock::from_unix_seconds(1_640_995_200);
    /// assert_eq!(clock.unix_seconds(), hmdp_id::EPOCH_SECONDS);
    /// ```
    pub fn from_unix_seconds(secs: i64) -> Self {
        ManualClock {
            unix_millis: Arc::new(AtomicI64::new(secs.saturating_mul(1000))),
        }
    }

    /// Moves the clock to `time` (forwards or backwards).
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// let clock = hmdp_id::ManualClock::from_unix_seconds(1_700_000_000);
    /// clock.set(UNIX_EPOCH + Duration::from_secs(1_600_000_000));
    /// assert_eq!(clock.unix_seconds(), 1_600_000_000);
    /// ```
    pub fn set(&self, time: SystemTime) {
        let millis = match time.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
        };
        self.unix_millis.store(millis, Ordering::SeqCst);
    }

    /// Moves the clock to the given Unix second.
    ///
    /// ```
    /// let clock = hmdp_id::ManualClock::from_unix_seconds(0);
    /// clock.set_unix_seconds(1_700_000_000);
    /// assert_eq!(clock.unix_seconds(), 1_700_000_000);
    /// ```
    pub fn set_unix_seconds(&self, secs: i64) {
        self.unix_millis
            .store(secs.saturating_mul(1000), Ordering::SeqCst);
    }

    /// Moves the clock forwards by `by`.
    ///
    /// ```
    /// let clock = hmdp_id::ManualClock::from_unix_seconds(10);
    /// clock.advance(std::time::Duration::from_secs(2));
    /// assert_eq!(clock.unix_seconds(), 12);
    /// ```
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.unix_millis.fetch_add(ms, Ordering::SeqCst);
    }

    /// Moves the clock backwards by `by`, like an NTP step correction.
    ///
    /// ```
    /// let clock = hmdp_id::ManualClock::from_unix_seconds(10);
    /// clock.rewind(std::time::Duration::from_secs(2));
    /// assert_eq!(clock.unix_seconds(), 8);
    /// ```
    pub fn rewind(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.unix_millis.fetch_sub(ms, Ordering::SeqCst);
    }

    /// The clock's current time as whole Unix seconds (rounded down).
    ///
    /// ```
    /// assert_eq!(hmdp_id::ManualClock::from_unix_seconds(-3).unix_seconds(), -3);
    /// ```
    pub fn unix_seconds(&self) -> i64 {
        self.unix_millis.load(Ordering::SeqCst).div_euclid(1000)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        let ms = self.unix_millis.load(Ordering::SeqCst);
        if ms >= 0 {
            UNIX_EPOCH + Duration::from_millis(ms as u64)
        } else {
            UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
        }
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("unix_millis", &self.unix_millis.load(Ordering::Relaxed))
            .finish()
    }
}

/// Whole Unix seconds of `time`, rounded down (negative before 1970).
pub(crate) fn unix_seconds(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            if d.subsec_nanos() > 0 {
                -secs - 1
            } else {
                -secs
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_round_down_on_both_sides_of_1970() {
        assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_millis(1_999)), 1);
        assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_millis(1)), -1);
        assert_eq!(unix_seconds(UNIX_EPOCH - Duration::from_secs(2)), -2);
    }

    #[test]
    fn manual_clock_clones_share_one_time() {
        let a = ManualClock::from_unix_seconds(100);
        let b = a.clone();
        b.rewind(Duration::from_secs(150));
        assert_eq!(a.unix_seconds(), -50);
        assert_eq!(unix_seconds(a.now()), -50);
    }
}

//! Waiting for something to happen (a server answering, an order written, a message heard) by
//! asking until it has, with a deadline. A fixed sleep is either too short on a loaded machine
//! or needlessly long everywhere else; every wait in the test suites goes through
//! [`wait_until`] instead.

use std::{fmt::Display, time::Duration};

/// How long [`wait_until`] keeps asking, and how often. A plain [`Duration`] is the timeout,
/// asked every 20 ms; [`every`](Self::every) asks more often, to catch a short-lived state or
/// to time an event closely, or less often, when asking is costly.
#[derive(Clone, Copy, Debug)]
pub struct Patience {
    timeout: Duration,
    every: Duration,
}

impl Patience {
    /// Asks every 20 ms for up to `timeout`.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            every: Duration::from_millis(20),
        }
    }

    /// Asks every `interval` instead.
    pub fn every(self, interval: Duration) -> Self {
        Self {
            every: interval,
            ..self
        }
    }
}

impl From<Duration> for Patience {
    fn from(timeout: Duration) -> Self {
        Self::new(timeout)
    }
}

/// What a condition answers when [`wait_until`] asks: whether it holds yet, and then the value
/// the wait returns.
pub trait Ready {
    /// What [`wait_until`] returns once the condition holds.
    type Value;
    /// `Ok` once the condition holds; otherwise why not, if it says.
    fn ready(self) -> Result<Self::Value, Option<String>>;
}

/// `true` holds.
impl Ready for bool {
    type Value = ();
    fn ready(self) -> Result<(), Option<String>> {
        if self { Ok(()) } else { Err(None) }
    }
}

/// `Some(value)` holds, and the wait returns the value.
impl<T> Ready for Option<T> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

/// `Ok(value)` holds, and the wait returns the value; `Err(why)` is "not yet", and the last
/// `why` is shown if time runs out.
impl<T, E: Display> Ready for Result<T, E> {
    type Value = T;
    fn ready(self) -> Result<T, Option<String>> {
        self.map_err(|why| Some(why.to_string()))
    }
}

/// Asks `ready` until it holds (see [`Ready`]: `true`, `Some(value)` or `Ok(value)`) and returns
/// its value; panics naming `what`, and the condition's last word on why not, once `patience`
/// (a timeout, or a [`Patience`]) has run out. Asked at least once, and once more at the
/// deadline.
pub async fn wait_until<R: Ready>(
    patience: impl Into<Patience>,
    what: &str,
    mut ready: impl AsyncFnMut() -> R,
) -> R::Value {
    let Patience { timeout, every } = patience.into();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let late = tokio::time::Instant::now() >= deadline;
        match ready().await.ready() {
            Ok(value) => return value,
            Err(why) if late => match why {
                Some(why) => panic!("{what}: not within {timeout:?} (last: {why})"),
                None => panic!("{what}: not within {timeout:?}"),
            },
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_what_the_condition_found() {
        let mut asked = 0;
        let found = wait_until(Duration::from_secs(5), "the third ask", async || {
            asked += 1;
            (asked == 3).then_some(asked * 10)
        })
        .await;
        assert_eq!((found, asked), (30, 3));
        let n: u32 = wait_until(Duration::from_secs(5), "a number", async || "7".parse()).await;
        assert_eq!(n, 7);
        wait_until(
            Duration::ZERO,
            "a condition that holds at once",
            async || true,
        )
        .await;
    }

    #[tokio::test]
    async fn asks_as_often_as_told() {
        let mut asked = 0u32;
        let started = tokio::time::Instant::now();
        wait_until(
            Patience::new(Duration::from_secs(5)).every(Duration::from_millis(100)),
            "three asks",
            async || {
                asked += 1;
                asked == 3
            },
        )
        .await;
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    #[tokio::test]
    #[should_panic(expected = "the impossible: not within 50ms (last: only 0 of 3)")]
    async fn gives_up_with_the_last_reason() {
        wait_until(Duration::from_millis(50), "the impossible", async || {
            Err::<(), _>("only 0 of 3")
        })
        .await;
    }
}

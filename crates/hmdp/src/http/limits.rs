//! Per-client and per-user request rate limits (`HMDP_RATE_LIMIT_IP`, `HMDP_RATE_LIMIT_USER`).
//!
//! A flash sale invites bots: one client firing thousands of requests a second. Each instance
//! keeps GCRA token buckets in memory (the `governor` crate) — a few nanoseconds per check and no
//! Redis round trip, so the limiter cannot become the bottleneck it protects against. Limits are
//! per instance: with N instances behind a balancer a client gets up to N times the rate, which
//! is fine for abuse protection (exact global quotas are what the per-phone SMS limits in Redis
//! are for). The client check runs before the session lookup, so a flooding client costs no
//! Redis work; the user check runs after it. A client is its [`ClientIp::key`] (the address
//! resolved through `HMDP_TRUSTED_PROXIES`, an IPv6 client by its /64). Both are off with 0
//! (benchmarks).
//!
//! A third, much tighter quota guards `POST /user/code` (`HMDP_CODE_IP_PER_MIN`, [`CodeQuota`]):
//! every code is an SMS someone pays for, and the per-phone cooldown and daily caps in Redis do
//! nothing against one client asking for codes for a thousand different phones. A person needs
//! a code or two; the default lets one address have 10 at once and then one every 6 seconds.

use std::{
    net::IpAddr,
    num::NonZeroU32,
    sync::atomic::{AtomicU64, Ordering},
};

use axum::{
    extract::{Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use governor::{
    DefaultKeyedRateLimiter, Quota,
    clock::{Clock, DefaultClock},
};

use super::{ApiError, client::ClientIp};
use crate::auth::SessionUser;

/// The rate limiters of one instance.
pub struct Limits {
    ip: Option<DefaultKeyedRateLimiter<IpAddr>>,
    user: Option<DefaultKeyedRateLimiter<i64>>,
    checks: AtomicU64,
}

impl Limits {
    /// `per_second` requests with bursts of twice that; 0 turns a limit off.
    pub fn new(ip_per_second: u32, user_per_second: u32) -> Self {
        let quota = |n: u32| {
            NonZeroU32::new(n).map(|n| {
                Quota::per_second(n)
                    .allow_burst(n.saturating_mul(NonZeroU32::new(2).expect("2 > 0")))
            })
        };
        Self {
            ip: quota(ip_per_second).map(DefaultKeyedRateLimiter::keyed),
            user: quota(user_per_second).map(DefaultKeyedRateLimiter::keyed),
            checks: AtomicU64::new(0),
        }
    }

    fn housekeeping(&self) {
        // Forget idle clients now and then so the maps do not grow without bound.
        if self.checks.fetch_add(1, Ordering::Relaxed) % 10_000 == 9_999 {
            if let Some(l) = &self.ip {
                l.retain_recent();
            }
            if let Some(l) = &self.user {
                l.retain_recent();
            }
        }
    }

    /// The refusal of a client over `HMDP_RATE_LIMIT_IP` requests per second, if it is.
    pub(super) fn check_ip(&self, client: ClientIp) -> Result<(), ApiError> {
        let Some(limiter) = &self.ip else {
            return Ok(());
        };
        self.housekeeping();
        limiter.check_key(&client.key()).map_err(|not_until| {
            refuse(
                "address",
                not_until.wait_time_from(DefaultClock::default().now()),
            )
        })
    }

    /// The refusal of a user over `HMDP_RATE_LIMIT_USER` requests per second, if they are.
    pub(super) fn check_user(&self, session: &SessionUser) -> Result<(), ApiError> {
        let Some(limiter) = &self.user else {
            return Ok(());
        };
        limiter
            .check_key(&session.user.id.get())
            .map_err(|not_until| {
                refuse(
                    "user",
                    not_until.wait_time_from(DefaultClock::default().now()),
                )
            })
    }
}

fn refuse(what: &str, wait: std::time::Duration) -> ApiError {
    ApiError::rate_limited(
        format!("请求过于频繁，请稍后再试 (too many requests from this {what})"),
        wait,
    )
}

/// The per-IP quota on login-code requests (`HMDP_CODE_IP_PER_MIN`).
pub(super) struct CodeQuota {
    limiter: DefaultKeyedRateLimiter<IpAddr>,
    checks: AtomicU64,
}

impl CodeQuota {
    /// `per_minute` codes per client IP, in bursts of up to that many; `None` for 0 (off).
    pub(super) fn new(per_minute: u32) -> Option<Self> {
        NonZeroU32::new(per_minute).map(|n| Self {
            limiter: DefaultKeyedRateLimiter::keyed(Quota::per_minute(n)),
            checks: AtomicU64::new(0),
        })
    }

    /// Takes one code from the quota of `ip` (a [`ClientIp::key`]), or says how long until the
    /// next one.
    fn check(&self, ip: IpAddr) -> Result<(), std::time::Duration> {
        if self.checks.fetch_add(1, Ordering::Relaxed) % 1_000 == 999 {
            self.limiter.retain_recent();
        }
        self.limiter
            .check_key(&ip)
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}

/// Refuses a client that asked for more login codes than `HMDP_CODE_IP_PER_MIN` allows; for the
/// `POST /user/code` route only.
pub(super) async fn limit_codes(
    State(quota): State<std::sync::Arc<CodeQuota>>,
    req: Request,
    next: Next,
) -> Response {
    if let Some(client) = req.extensions().get::<ClientIp>()
        && let Err(wait) = quota.check(client.key())
    {
        let secs = wait.as_millis().div_ceil(1000).max(1);
        return ApiError::rate_limited(
            format!(
                "验证码请求过于频繁，请 {secs} 秒后再试 (too many code requests from this address: retry in {secs} s)"
            ),
            wait,
        )
        .into_response();
    }
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_quota_allows_a_burst_per_address_then_refuses() {
        assert!(CodeQuota::new(0).is_none(), "0 turns it off");
        let quota = CodeQuota::new(3).unwrap();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        for _ in 0..3 {
            assert!(quota.check(a).is_ok());
        }
        let wait = quota.check(a).unwrap_err();
        // 3 a minute: the next code is up to 20 s away.
        assert!(
            wait > std::time::Duration::from_secs(15) && wait <= std::time::Duration::from_secs(20),
            "{wait:?}"
        );
        assert!(
            quota.check(b).is_ok(),
            "other addresses have their own quota"
        );
    }
}

//! Login codes in Redis: issue with rate limits, check with a try counter, consume once.
//!
//! All three operations are Lua scripts so that each is one atomic step; their keys are slot
//! mates of the code key (see [`crate::kv::slot_mate`]), so they also run on a Redis Cluster.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use crate::{
    config::CodePolicy,
    domain::{LoginCode, Phone},
    kv::{Keys, RedisConn},
};

/// Stores a new code unless the phone is cooling down or over its daily cap.
///
/// KEYS: code, attempts, cooldown, daily. ARGV: code, code TTL ms, cooldown ms, daily cap,
/// daily window ms. Returns `{0, 0}` when stored, `{1, ms}` while cooling down, `{2, ms}` when
/// the daily cap is reached (`ms` = time until it lifts).
///
/// The daily cap is a fixed window, not a rolling one: the counter is created with the phone's
/// first code and expires a day later, whatever came in between. One counter key per phone is
/// all it costs (a rolling window would keep a timestamp per code); the worst case is twice the
/// cap within a few minutes around the window's end, still a few codes a day.
static ISSUE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local cooldown = redis.call('PTTL', KEYS[3])
if cooldown > 0 then return {1, cooldown} end
local sent = tonumber(redis.call('GET', KEYS[4]) or '0')
if sent >= tonumber(ARGV[4]) then
  return {2, math.max(redis.call('PTTL', KEYS[4]), 0)}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[3], '1', 'PX', ARGV[3]) end
if redis.call('INCR', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], ARGV[5]) end
return {0, 0}
",
    )
});

/// Compares a submitted code without consuming it; a mismatch counts as a wrong try and the
/// last allowed wrong try voids the code.
///
/// KEYS: code, attempts. ARGV: submitted code, max wrong tries.
/// Returns 0 = no code, 1 = match, 2 = wrong, 3 = wrong and now void; plus tries left.
static CHECK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local code = redis.call('GET', KEYS[1])
if not code then return {0, 0} end
if code == ARGV[1] then return {1, 0} end
local tries = redis.call('INCR', KEYS[2])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
local max = tonumber(ARGV[2])
if tries >= max then
  redis.call('DEL', KEYS[1], KEYS[2])
  return {3, 0}
end
return {2, max - tries}
",
    )
});

/// Deletes the code if it is still the one given: the single use. KEYS: code, attempts.
static CONSUME: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
",
    )
});

/// Why no code was issued.
#[derive(Debug, thiserror::Error)]
pub enum CodeError {
    #[error("wait {retry_after:?} before asking for another code")]
    Cooldown { retry_after: Duration },
    #[error("daily code limit reached; next code in {retry_after:?}")]
    DailyLimit { retry_after: Duration },
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

/// The outcome of checking a submitted code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeVerdict {
    /// The code matches; call [`CodeIssuer::consume`] once the login has succeeded.
    Match,
    /// Wrong code; `tries_left` more wrong tries before the code is void.
    Wrong { tries_left: u32 },
    /// Wrong code, and that was the last allowed try: the code is gone.
    Void,
    /// No code for this phone (never sent, expired, used or voided).
    Missing,
}

/// Issues, checks and consumes login codes.
#[derive(Debug, Clone)]
pub struct CodeIssuer {
    redis: RedisConn,
    keys: Keys,
    policy: CodePolicy,
}

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

impl CodeIssuer {
    pub fn new(redis: RedisConn, keys: Keys, policy: CodePolicy) -> Self {
        Self {
            redis,
            keys,
            policy,
        }
    }

    /// Stores a fresh code for `phone` and returns it, or says why not.
    pub async fn issue(&self, phone: &Phone) -> Result<LoginCode, CodeError> {
        let code = LoginCode::generate();
        let p = phone.as_str();
        let (status, ms): (i64, i64) = ISSUE
            .key(self.keys.login_code(p))
            .key(self.keys.login_code_attempts(p))
            .key(self.keys.login_code_cooldown(p))
            .key(self.keys.login_code_daily(p))
            .arg(code.as_str())
            .arg(millis(self.policy.ttl))
            .arg(millis(self.policy.min_interval))
            .arg(self.policy.daily_limit)
            .arg(millis(DAY))
            .invoke_async(&mut self.redis.clone())
            .await?;
        let retry_after = Duration::from_millis(ms.max(0) as u64);
        match status {
            0 => Ok(code),
            1 => Err(CodeError::Cooldown { retry_after }),
            _ => Err(CodeError::DailyLimit { retry_after }),
        }
    }

    /// Lifts the cooldown again, for when the code could not be delivered.
    pub async fn cancel_cooldown(&self, phone: &Phone) -> Result<(), redis::RedisError> {
        let _: () = redis::cmd("DEL")
            .arg(self.keys.login_code_cooldown(phone.as_str()))
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// Compares `code` with the stored one, counting a wrong try.
    pub async fn check(
        &self,
        phone: &Phone,
        code: &LoginCode,
    ) -> Result<CodeVerdict, redis::RedisError> {
        let p = phone.as_str();
        let (status, left): (i64, i64) = CHECK
            .key(self.keys.login_code(p))
            .key(self.keys.login_code_attempts(p))
            .arg(code.as_str())
            .arg(self.policy.max_attempts)
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(match status {
            1 => CodeVerdict::Match,
            2 => CodeVerdict::Wrong {
                tries_left: left.max(0) as u32,
            },
            3 => CodeVerdict::Void,
            _ => CodeVerdict::Missing,
        })
    }

    /// Uses the code up. False if another request used it first.
    pub async fn consume(
        &self,
        phone: &Phone,
        code: &LoginCode,
    ) -> Result<bool, redis::RedisError> {
        let p = phone.as_str();
        let n: i64 = CONSUME
            .key(self.keys.login_code(p))
            .key(self.keys.login_code_attempts(p))
            .arg(code.as_str())
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(n == 1)
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

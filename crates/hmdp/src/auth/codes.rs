//! Login codes in Redis: issue with rate limits, check with try counters, consume once.
//!
//! All three operations are Lua scripts so that each is one atomic step; their keys are slot
//! mates of the code key (see [`crate::kv::slot_mate`]), so they also run on a Redis Cluster.
//!
//! A phone may have several live codes at once (at most [`MAX_LIVE_CODES`]), each valid until it
//! expires or one of them logs in, which uses them all up: a new code no longer voids the one the
//! owner is typing. `login:code:{phone}` keeps the newest one, as in the original.
//!
//! What a third party (who does not hold the phone) can and cannot do:
//! - It cannot use up the phone's day from one address: each (phone, client address) gets
//!   `HMDP_CODE_PHONE_IP_DAILY_LIMIT` codes a day, and only the much higher per-phone ceiling
//!   `HMDP_CODE_DAILY_LIMIT`, reached from many addresses together, refuses the owner.
//! - It cannot void the owner's codes by guessing from one address: wrong tries are counted per
//!   (phone, address), and an address that used its `HMDP_CODE_MAX_ATTEMPTS` is refused (even with
//!   the right code) until it is sent a new code, while the codes stay valid for everyone else.
//! - It cannot brute-force a code: an address gets `HMDP_CODE_MAX_ATTEMPTS` guesses per code it
//!   is sent (capped per day as above), and all addresses together get `HMDP_CODE_MAX_ATTEMPTS` ×
//!   `HMDP_CODE_DAILY_LIMIT` guesses per day, a guess counting once for each live code it is
//!   compared with. Past that every wrong try voids all the phone's codes, so a day of guessing
//!   wins with odds of about 3 in 10,000 with the defaults (250 guesses, then one per code sent),
//!   and many addresses together can keep the owner from logging in for the rest of that day;
//!   from one address nobody can.
//! - It can delay the owner's next code by up to `HMDP_CODE_MIN_INTERVAL_SECS` (the cooldown is
//!   per phone, so the phone gets one SMS a minute at most): the codes it triggers reach the
//!   owner's phone and stay valid, so the owner can log in with them meanwhile.
//! - It cannot guess across many phones from one address: an address gets
//!   `HMDP_CODE_IP_WRONG_DAILY_LIMIT` wrong tries a day against all phones together, then it is
//!   refused (right codes too, as a right code is only known by comparing it).
//! - It cannot run up the SMS bill without end: the service sends `HMDP_SMS_HOURLY_LIMIT` codes
//!   an hour at most, from all addresses together.
//!
//! Those two budgets are one key each, in no phone's slot, so they cannot join the phone's
//! scripts on a cluster. A code request takes a unit from the hourly budget first (`TAKE`) and
//! gives it back (`GIVE_BACK`) when no code went out, so concurrent requests never overdraw it.
//! A login reads its address's wrong tries before comparing and counts a wrong one after
//! (`COUNT`): logins in progress hold nothing, so any number of right codes from one address
//! (an office behind one NAT) go through, and guesses racing the last try can pass the budget
//! by at most the guesses one address has in flight at that moment (bounded by its request
//! rate limit).

use std::{net::IpAddr, sync::LazyLock, time::Duration};

use redis::Script;

use crate::{
    config::CodePolicy,
    domain::{Answer, Answered, ErrorCode, LoginCode, Phone, Refused, ceil_secs},
    kv::{Keys, RedisConn},
};

/// Live codes kept per phone, the newest ones: bounds the set, and the odds of a guess (which
/// is compared with each). The defaults (2-minute codes, one a minute) never have more than 3.
pub(super) const MAX_LIVE_CODES: u32 = 5;

/// Stores a new code unless the phone is cooling down or over a daily cap.
///
/// KEYS: code, live, cooldown, daily, daily per address, wrong tries. ARGV: code, code TTL ms,
/// cooldown ms, daily cap per phone, daily cap per address, daily window ms, client address, live
/// codes kept. Returns `{0, 0}` when stored, `{1, ms}` while cooling down, `{2, ms}` when the
/// phone's daily cap is reached, `{3, ms}` when this address's is (`ms` = time until it lifts).
///
/// Expiries in the live set strictly increase (a code issued in the same millisecond as the
/// previous one expires a millisecond later), so the oldest code is always the one dropped.
///
/// The daily caps are fixed windows, not rolling ones: each counter is created with the phone's
/// first code and expires a day later, whatever came in between. One key per counter is all it
/// costs (a rolling window would keep a timestamp per code); the worst case is twice the cap
/// within a few minutes around the window's end. A new code gives its address fresh tries.
static ISSUE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local cooldown = redis.call('PTTL', KEYS[3])
if cooldown > 0 then return {1, cooldown} end
local sent = tonumber(redis.call('GET', KEYS[4]) or '0')
if sent >= tonumber(ARGV[4]) then
  return {2, math.max(redis.call('PTTL', KEYS[4]), 0)}
end
local mine = tonumber(redis.call('HGET', KEYS[5], ARGV[7]) or '0')
if mine >= tonumber(ARGV[5]) then
  return {3, math.max(redis.call('PTTL', KEYS[5]), 0)}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local expiry = now + ttl
local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]
if last and tonumber(last) >= expiry then expiry = tonumber(last) + 1 end
redis.call('ZADD', KEYS[2], expiry, ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[2], 0, -(tonumber(ARGV[8]) + 1))
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('HDEL', KEYS[6], ARGV[7])
if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[3], '1', 'PX', ARGV[3]) end
if redis.call('INCR', KEYS[4]) == 1 then redis.call('PEXPIRE', KEYS[4], ARGV[6]) end
redis.call('HINCRBY', KEYS[5], ARGV[7], 1)
if redis.call('PTTL', KEYS[5]) < 0 then redis.call('PEXPIRE', KEYS[5], ARGV[6]) end
return {0, 0}
",
    )
});

/// Compares a submitted code with the phone's live ones without consuming them, counting a
/// mismatch against the client address and the phone.
///
/// KEYS: code, live, wrong tries. ARGV: submitted code, client address, wrong tries per address,
/// wrong tries per phone and day, daily window ms. Returns 0 = no live code, 1 = match, 2 =
/// wrong, 3 = wrong and this address has no tries left now, 4 = wrong and the phone's codes are
/// now void, 5 = this address had no tries left (nothing compared); plus tries left. The newest
/// code is also read from the code key alone, so a code stored before the live set existed still
/// counts.
static CHECK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local newest = redis.call('GET', KEYS[1])
local live = redis.call('ZCARD', KEYS[2])
if live == 0 and not newest then return {0, 0} end
local max = tonumber(ARGV[3])
local mine = tonumber(redis.call('HGET', KEYS[3], ARGV[2]) or '0')
if mine >= max then return {5, 0} end
if newest == ARGV[1] or redis.call('ZSCORE', KEYS[2], ARGV[1]) then return {1, 0} end
mine = redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
local total = redis.call('HINCRBY', KEYS[3], '*', math.max(live, 1))
if redis.call('PTTL', KEYS[3]) < 0 then redis.call('PEXPIRE', KEYS[3], ARGV[5]) end
if total >= tonumber(ARGV[4]) then
  redis.call('DEL', KEYS[1], KEYS[2])
  return {4, 0}
end
if mine >= max then return {3, 0} end
return {2, max - mine}
",
    )
});

/// Takes one unit from a budget counted in a fixed window, unless it is spent.
///
/// KEYS: the counter. ARGV: units in a window, window ms. Returns `{0, 0}` when taken, `{1, ms}`
/// when spent (`ms` = time until the window ends). The window opens with its first unit.
static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
if used >= tonumber(ARGV[1]) then
  return {1, math.max(redis.call('PTTL', KEYS[1]), 0)}
end
redis.call('INCR', KEYS[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return {0, 0}
",
    )
});

/// Counts one unit in a fixed window. KEYS: the counter. ARGV: window ms. Returns the count.
static COUNT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local n = redis.call('INCR', KEYS[1])
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
return n
",
    )
});

/// Gives a unit taken by `TAKE` back, unless its window has ended meanwhile. KEYS: the counter.
static GIVE_BACK: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then redis.call('DECR', KEYS[1]) end
return 0
",
    )
});

/// Uses up every live code of the phone if the given one is among them: the single use.
/// KEYS: code, live. ARGV: code.
static CONSUME: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('GET', KEYS[1]) == ARGV[1] or redis.call('ZSCORE', KEYS[2], ARGV[1]) then
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
    /// The phone's own cap (`HMDP_CODE_DAILY_LIMIT`).
    #[error("daily code limit reached; next code in {retry_after:?}")]
    DailyLimit { retry_after: Duration },
    /// This phone's cap for this client address (`HMDP_CODE_PHONE_IP_DAILY_LIMIT`).
    #[error(
        "daily code limit for this phone from this address reached; next code in {retry_after:?}"
    )]
    AddressDailyLimit { retry_after: Duration },
    /// The service's codes for this hour are sent (`HMDP_SMS_HOURLY_LIMIT`).
    #[error("the hourly SMS budget is spent; next code in {retry_after:?}")]
    SmsBudgetSpent { retry_after: Duration },
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

/// A login code that is not sent: the phone's cooldown, a daily cap or the hourly budget.
impl Answered for CodeError {
    fn answer(&self) -> Answer {
        let refused = match *self {
            CodeError::Cooldown { retry_after } => {
                let secs = ceil_secs(retry_after);
                Refused::new(
                    ErrorCode::RateLimited,
                    format!(
                        "验证码发送过于频繁，请 {secs} 秒后再试 (too many codes: retry in {secs} s)"
                    ),
                )
                .retry_after(retry_after)
            }
            CodeError::DailyLimit { retry_after } => Refused::new(
                ErrorCode::RateLimited,
                format!(
                    "今日验证码次数已用完 (daily code limit reached: retry in {} s)",
                    ceil_secs(retry_after)
                ),
            )
            .retry_after(retry_after),
            CodeError::AddressDailyLimit { retry_after } => Refused::new(
                ErrorCode::RateLimited,
                format!(
                    "今日从此网络获取验证码的次数已用完 (daily code limit for this phone from this \
                     address reached: retry in {} s)",
                    ceil_secs(retry_after)
                ),
            )
            .retry_after(retry_after),
            CodeError::SmsBudgetSpent { retry_after } => Refused::new(
                ErrorCode::SmsBudgetSpent,
                format!(
                    "短信发送量已达上限，请稍后再试 (the service's login codes for this hour are \
                     sent: retry in {} s)",
                    ceil_secs(retry_after)
                ),
            )
            .retry_after(retry_after),
            CodeError::Redis(ref r) => return r.answer(),
        };
        refused.into()
    }
}

/// The outcome of checking a submitted code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CodeVerdict {
    /// The code is live; call [`CodeIssuer::consume`] once the login has succeeded.
    Match,
    /// Wrong code; `tries_left` more wrong tries from this address.
    Wrong { tries_left: u32 },
    /// This address has used its wrong tries (just now or before): it is refused, even with the
    /// right code, until it asks for a new code.
    Exhausted,
    /// Wrong code, and the phone's wrong tries for the day are used up: its codes are gone.
    Void,
    /// No live code for this phone (never sent, expired, used or voided).
    Missing,
    /// This address has used its wrong tries of the day against all phones
    /// (`HMDP_CODE_IP_WRONG_DAILY_LIMIT`): nothing was compared.
    AddressSpent { retry_after: Duration },
}

impl CodeVerdict {
    /// `Ok` when the code matched, else why the login is refused.
    pub(crate) fn accept(self) -> Result<(), LoginRefusal> {
        match self {
            CodeVerdict::Match => Ok(()),
            CodeVerdict::Wrong { tries_left } => Err(LoginRefusal::Wrong { tries_left }),
            CodeVerdict::Exhausted => Err(LoginRefusal::Exhausted),
            CodeVerdict::Void => Err(LoginRefusal::Void),
            CodeVerdict::Missing => Err(LoginRefusal::Missing),
            CodeVerdict::AddressSpent { retry_after } => {
                Err(LoginRefusal::AddressSpent { retry_after })
            }
        }
    }
}

/// Why a login is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LoginRefusal {
    #[error("wrong code, {tries_left} tries left")]
    Wrong { tries_left: u32 },
    #[error("too many wrong tries from this address")]
    Exhausted,
    #[error("too many wrong tries for this phone")]
    Void,
    #[error("no live code for this phone")]
    Missing,
    #[error("the address's wrong tries of the day are spent")]
    AddressSpent { retry_after: Duration },
    /// A concurrent login with the same code used it first.
    #[error("the code was just used")]
    JustUsed,
    /// A password instead of a code: the original never implemented password login.
    #[error("password login is not offered")]
    PasswordUnsupported,
}

impl Answered for LoginRefusal {
    fn answer(&self) -> Answer {
        use LoginRefusal as R;
        let refused = match *self {
            R::Wrong { tries_left } => Refused::new(
                ErrorCode::WrongCode,
                format!("验证码错误 (wrong code: {tries_left} tries left)"),
            ),
            R::Exhausted => Refused::new(
                ErrorCode::CodeVoid,
                "验证码错误次数过多，请重新获取 (too many wrong tries from this address: request a \
                 new code)",
            ),
            R::Void => Refused::new(
                ErrorCode::CodeVoid,
                "验证码错误次数过多，请重新获取 (too many wrong tries for this phone: its codes are \
                 void, request a new code)",
            ),
            R::Missing => Refused::new(
                ErrorCode::CodeExpired,
                "验证码已失效，请重新获取 (no valid code for this phone: request one)",
            ),
            R::AddressSpent { retry_after } => Refused::new(
                ErrorCode::TooManyWrongCodes,
                format!(
                    "验证码错误次数过多，请稍后再试 (too many wrong codes from this address: retry \
                     in {} s)",
                    ceil_secs(retry_after)
                ),
            )
            .retry_after(retry_after),
            R::JustUsed => Refused::new(
                ErrorCode::CodeExpired,
                "验证码已失效，请重新获取 (the code was just used)",
            ),
            R::PasswordUnsupported => Refused::new(
                ErrorCode::PasswordLoginUnsupported,
                "暂不支持密码登录，请使用验证码登录 (password login is not offered: use an SMS code)",
            ),
        };
        refused.into()
    }
}

/// Issues, checks and consumes login codes.
#[derive(Debug, Clone)]
pub struct CodeIssuer {
    redis: RedisConn,
    keys: Keys,
    policy: CodePolicy,
    /// `HMDP_SMS_HOURLY_LIMIT`; 0 = no budget.
    sms_hourly_limit: u32,
}

const DAY: Duration = Duration::from_secs(24 * 60 * 60);
const HOUR: Duration = Duration::from_secs(60 * 60);

impl CodeIssuer {
    /// Codes under `policy`, at most `sms_hourly_limit` sent an hour (0 = no such limit).
    pub fn new(redis: RedisConn, keys: Keys, policy: CodePolicy, sms_hourly_limit: u32) -> Self {
        Self {
            redis,
            keys,
            policy,
            sms_hourly_limit,
        }
    }

    /// Stores a fresh code for `phone`, asked for by `client` (a client key: see
    /// [`crate::http::ClientIp::key`]), and returns it, or says why not.
    pub async fn issue(&self, phone: &Phone, client: IpAddr) -> Result<LoginCode, CodeError> {
        let budget = (self.sms_hourly_limit > 0).then(|| self.keys.sms_hourly());
        if let Some(budget) = &budget
            && let Some(retry_after) = self.take(budget, self.sms_hourly_limit, HOUR).await?
        {
            return Err(CodeError::SmsBudgetSpent { retry_after });
        }
        let issued = self.issue_within_budget(phone, client).await;
        if let (Err(_), Some(budget)) = (&issued, &budget) {
            self.give_back(budget).await;
        }
        issued
    }

    /// [`CodeIssuer::issue`] once the hourly budget has granted the code.
    async fn issue_within_budget(
        &self,
        phone: &Phone,
        client: IpAddr,
    ) -> Result<LoginCode, CodeError> {
        let code = LoginCode::generate();
        let p = phone.as_str();
        let (status, ms): (i64, i64) = ISSUE
            .key(self.keys.login_code(p))
            .key(self.keys.login_code_live(p))
            .key(self.keys.login_code_cooldown(p))
            .key(self.keys.login_code_daily(p))
            .key(self.keys.login_code_daily_ip(p))
            .key(self.keys.login_code_wrong(p))
            .arg(code.as_str())
            .arg(millis(self.policy.ttl))
            .arg(millis(self.policy.min_interval))
            .arg(self.policy.daily_limit)
            .arg(self.policy.phone_ip_daily_limit)
            .arg(millis(DAY))
            .arg(client.to_string())
            .arg(MAX_LIVE_CODES)
            .invoke_async(&mut self.redis.clone())
            .await?;
        let retry_after = Duration::from_millis(ms.max(0) as u64);
        match status {
            0 => Ok(code),
            1 => Err(CodeError::Cooldown { retry_after }),
            2 => Err(CodeError::DailyLimit { retry_after }),
            _ => Err(CodeError::AddressDailyLimit { retry_after }),
        }
    }

    /// Lifts the cooldown again and gives the code back to the hourly budget, for when the code
    /// could not be delivered.
    pub async fn cancel_cooldown(&self, phone: &Phone) -> Result<(), redis::RedisError> {
        let _: () = redis::cmd("DEL")
            .arg(self.keys.login_code_cooldown(phone.as_str()))
            .query_async(&mut self.redis.clone())
            .await?;
        if self.sms_hourly_limit > 0 {
            self.give_back(&self.keys.sms_hourly()).await;
        }
        Ok(())
    }

    /// Takes a unit from the budget at `key` (`TAKE`); `Some(time until the window ends)`
    /// when it is spent.
    async fn take(
        &self,
        key: &str,
        limit: u32,
        window: Duration,
    ) -> Result<Option<Duration>, redis::RedisError> {
        let (spent, ms): (i64, i64) = TAKE
            .key(key)
            .arg(limit)
            .arg(millis(window))
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok((spent == 1).then(|| Duration::from_millis(ms.max(0) as u64)))
    }

    /// Gives a unit back to the budget at `key` (`GIVE_BACK`). A failure only leaves the
    /// budget one unit stricter, so it is logged, not returned.
    async fn give_back(&self, key: &str) {
        let given: Result<i64, _> = GIVE_BACK
            .key(key)
            .invoke_async(&mut self.redis.clone())
            .await;
        if let Err(e) = given {
            tracing::warn!(error = %e, "a login budget unit could not be given back");
        }
    }

    /// Compares `code`, sent by `client` (a client key), with the phone's live codes, counting
    /// a wrong try.
    pub async fn check(
        &self,
        phone: &Phone,
        code: &LoginCode,
        client: IpAddr,
    ) -> Result<CodeVerdict, redis::RedisError> {
        let budget = self.keys.login_wrong_ip(&client.to_string());
        let (wrong, ms): (Option<u64>, i64) = redis::pipe()
            .get(&budget)
            .pttl(&budget)
            .query_async(&mut self.redis.clone())
            .await?;
        if wrong.unwrap_or(0) >= u64::from(self.policy.ip_wrong_daily_limit) {
            return Ok(CodeVerdict::AddressSpent {
                retry_after: Duration::from_millis(ms.max(0) as u64),
            });
        }
        let p = phone.as_str();
        let (status, left): (i64, i64) = CHECK
            .key(self.keys.login_code(p))
            .key(self.keys.login_code_live(p))
            .key(self.keys.login_code_wrong(p))
            .arg(code.as_str())
            .arg(client.to_string())
            .arg(self.policy.max_attempts)
            .arg(self.phone_wrong_tries())
            .arg(millis(DAY))
            .invoke_async(&mut self.redis.clone())
            .await?;
        // Only a wrong code compared is a wrong try of this address.
        if matches!(status, 2..=4) {
            let _: i64 = COUNT
                .key(&budget)
                .arg(millis(DAY))
                .invoke_async(&mut self.redis.clone())
                .await?;
        }
        Ok(match status {
            1 => CodeVerdict::Match,
            2 => CodeVerdict::Wrong {
                tries_left: left.max(0) as u32,
            },
            3 | 5 => CodeVerdict::Exhausted,
            4 => CodeVerdict::Void,
            _ => CodeVerdict::Missing,
        })
    }

    /// Uses up the phone's codes if `code` is one of them. False if another request used them
    /// first.
    pub async fn consume(
        &self,
        phone: &Phone,
        code: &LoginCode,
    ) -> Result<bool, redis::RedisError> {
        let p = phone.as_str();
        let n: i64 = CONSUME
            .key(self.keys.login_code(p))
            .key(self.keys.login_code_live(p))
            .arg(code.as_str())
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(n == 1)
    }

    /// Wrong tries a phone's codes take a day from all addresses together: as many per code as
    /// one address gets, for as many codes as the phone may be sent.
    fn phone_wrong_tries(&self) -> u64 {
        u64::from(self.policy.max_attempts) * u64::from(self.policy.daily_limit)
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

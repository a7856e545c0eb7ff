//! Sessions: `login:token:{token}` hashes with a sliding TTL (the original's Redis session), an
//! absolute lifetime, and a list of each user's sessions so that all of them can be ended.
//!
//! Redis is the authority on a session. A request that carries a token reads the hash and
//! slides its TTL in one round trip, as the original's `RefreshTokenInterceptor` does, unless
//! this instance read that session within the last `HMDP_SESSION_CACHE_MS` (on by default):
//! then it trusts the copy in memory, so a session costs at most one Redis round trip per
//! window per instance, and its TTL slides at most once per window (nothing next to a
//! 30-minute TTL). A logout on any instance publishes the token and every instance forgets it
//! at once ([`hmdp_cache::InvalidatedCache`]); a read of that session still under way then is
//! not kept either (the logout leaves a tombstone that the read checks when it stores its copy).
//! Only a session deleted in Redis by other means (by hand, or expired, which a session in use
//! within the window cannot be) is still trusted for up to the window. Unknown tokens are never
//! cached, so a session created on another instance works at once.
//!
//! Sliding alone would keep a session in use alive for ever. Each session records when it began
//! (`created`, ms on Redis's clock; a session from before that field gets it on its first read)
//! and ends `HMDP_SESSION_MAX_AGE_SECS` later however it is used: its TTL never slides past that
//! instant, so Redis expires it then, and an instance that trusts it from memory does so for one
//! cache window longer at most.
//!
//! `login:sessions:{userId}` lists a user's sessions (token → the instant it ends at the
//! latest) for `POST /user/logout/all`, which ends each as a logout does. A session is listed
//! before its hash is written, so every session that exists is listed; ended ones leave the list
//! once their latest end has passed (at the user's next login), and the list expires with its
//! newest session. A login that completes while all sessions are being ended may survive that.
//!
//! The same list lets a nickname or icon change reach every live session of the user
//! ([`SessionStore::update_user`]): each hash still there gets the new values (an ended one is
//! not brought back), and every instance forgets its copy as after a logout. A login that reads
//! the user just before the change writes its new session with the old values.

use std::{
    sync::{Arc, LazyLock},
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use hmdp_cache::{InvalidatedCache, L1Options};
use redis::{AsyncCommands, Script};

use crate::{
    domain::{SessionToken, UserDto, UserId},
    kv::{Keys, RedisConn},
};

/// Writes a new session with its start on Redis's clock.
///
/// KEYS: the session. ARGV: TTL ms, maximum age ms, then the hash's fields and values.
static CREATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'created', now, unpack(ARGV, 3))
redis.call('PEXPIRE', KEYS[1], math.min(tonumber(ARGV[1]), tonumber(ARGV[2])))
return 0
",
    )
});

/// Reads a session and slides its TTL, never past its maximum age; a session older than that is
/// deleted. A session without `created` (made before the field existed) starts its age now.
///
/// KEYS: the session. ARGV: TTL ms, maximum age ms. Returns `{adopted, fields}`: the hash's
/// fields and values (none when there is no live session), and 1 when `created` was just set.
static TOUCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local fields = redis.call('HGETALL', KEYS[1])
if #fields == 0 then return {0, fields} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local created
for i = 1, #fields, 2 do
  if fields[i] == 'created' then created = tonumber(fields[i + 1]) end
end
local adopted = 0
if not created then
  created = now
  redis.call('HSET', KEYS[1], 'created', now)
  adopted = 1
end
local left = created + tonumber(ARGV[2]) - now
if left <= 0 then
  redis.call('DEL', KEYS[1])
  return {0, {}}
end
redis.call('PEXPIRE', KEYS[1], math.min(tonumber(ARGV[1]), left))
return {adopted, fields}
",
    )
});

/// Writes a live session's user fields; a session that ended stays ended.
///
/// KEYS: the session. ARGV: the hash's fields and values. Returns 1 when the session was live.
static UPDATE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV))
return 1
",
    )
});

/// The user behind a valid session token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionUser {
    pub token: SessionToken,
    pub user: UserDto,
}

/// Creates, reads (refreshing the TTL) and deletes sessions.
#[derive(Debug, Clone)]
pub struct SessionStore {
    redis: RedisConn,
    keys: Keys,
    ttl: Duration,
    /// `HMDP_SESSION_MAX_AGE_SECS`: how long a session lives at most, however it is used.
    max_age: Duration,
    /// Sessions read from Redis recently, by token (see the module docs); `None` = off.
    recent: Option<InvalidatedCache<Arc<SessionUser>>>,
}

impl SessionStore {
    /// Sessions sliding by `ttl`, each ending `max_age` after its login at the latest.
    pub fn new(redis: RedisConn, keys: Keys, ttl: Duration, max_age: Duration) -> Self {
        Self {
            redis,
            keys,
            ttl,
            max_age,
            recent: None,
        }
    }

    /// Trusts a session read from Redis for `for_at_most` afterwards (at most `capacity`
    /// sessions kept), forgetting it when any instance publishes its logout on `channel`
    /// (subscribed through `subscriber`); a zero duration leaves the cache off.
    pub async fn with_cache(
        mut self,
        for_at_most: Duration,
        capacity: u64,
        subscriber: impl hmdp_lock::PubSubSource,
        channel: String,
    ) -> hmdp_cache::Result<Self> {
        if !for_at_most.is_zero() {
            let options = L1Options::new(capacity, for_at_most);
            self.recent = Some(InvalidatedCache::start(options, subscriber, channel).await?);
        }
        Ok(self)
    }

    /// Stores a new session for `user` and returns its token.
    pub async fn create(&self, user: &UserDto) -> Result<SessionToken, redis::RedisError> {
        let token = SessionToken::generate();
        // Listed first: a session that exists is always on its user's list.
        self.list(user.id, &token).await?;
        let _: i64 = CREATE
            .key(self.keys.login_token(token.as_str()))
            .arg(millis(self.ttl))
            .arg(millis(self.max_age))
            .arg("id")
            .arg(user.id.to_string())
            .arg("nickName")
            .arg(&user.nick_name)
            .arg("icon")
            .arg(&user.icon)
            .invoke_async(&mut self.redis.clone())
            .await?;
        Ok(token)
    }

    /// Gives every live session of `user.id` the nickname and icon of `user`; how many there
    /// were.
    pub async fn update_user(&self, user: &UserDto) -> Result<u64, redis::RedisError> {
        let key = self.keys.user_sessions(user.id.get());
        let tokens: Vec<String> = self.redis.clone().zrange(&key, 0, -1).await?;
        let mut updated = 0;
        for token in &tokens {
            // One key a call: the sessions may live on different nodes of a cluster.
            let live: u64 = UPDATE
                .key(self.keys.login_token(token))
                .arg("nickName")
                .arg(&user.nick_name)
                .arg("icon")
                .arg(&user.icon)
                .invoke_async(&mut self.redis.clone())
                .await?;
            updated += live;
            // After the write, as for a logout: a read racing it cannot keep the old values.
            self.forget_everywhere(token, "a session change").await;
        }
        Ok(updated)
    }

    /// Puts `token` on `user`'s list of sessions, dropping those whose latest end has passed.
    async fn list(&self, user: UserId, token: &SessionToken) -> Result<(), redis::RedisError> {
        let key = self.keys.user_sessions(user.get());
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let _: () = redis::pipe()
            .atomic()
            .zrembyscore(&key, "-inf", millis(now))
            .zadd(&key, token.as_str(), millis(now + self.max_age))
            .pexpire(&key, millis(self.max_age) as i64)
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(())
    }

    /// The session's user, refreshing its TTL in the same round trip; `None` if the session
    /// does not exist (expired, too old, logged out, never issued).
    pub async fn touch(
        &self,
        token: &SessionToken,
    ) -> Result<Option<Arc<SessionUser>>, redis::RedisError> {
        self.touch_then(token, std::future::ready(())).await
    }

    /// [`SessionStore::touch`], running `meanwhile` between reading Redis and keeping the copy
    /// in memory: what a logout racing the read does (feature `test-util`).
    #[cfg(feature = "test-util")]
    pub async fn touch_racing(
        &self,
        token: &SessionToken,
        meanwhile: impl Future<Output = ()>,
    ) -> Result<Option<Arc<SessionUser>>, redis::RedisError> {
        self.touch_then(token, meanwhile).await
    }

    async fn touch_then(
        &self,
        token: &SessionToken,
        meanwhile: impl Future<Output = ()>,
    ) -> Result<Option<Arc<SessionUser>>, redis::RedisError> {
        if let Some(recent) = &self.recent
            && let Some(user) = recent.get(token.as_str()).await
        {
            return Ok(Some(user));
        }
        let read_at = Instant::now();
        let (adopted, fields): (i64, Vec<(String, String)>) = TOUCH
            .key(self.keys.login_token(token.as_str()))
            .arg(millis(self.ttl))
            .arg(millis(self.max_age))
            .invoke_async(&mut self.redis.clone())
            .await?;
        let mut id = None;
        let mut nick_name = String::new();
        let mut icon = String::new();
        for (k, v) in fields {
            match k.as_str() {
                "id" => id = v.parse::<UserId>().ok(),
                "nickName" => nick_name = v,
                "icon" => icon = v,
                _ => {}
            }
        }
        let user = id.map(|id| {
            Arc::new(SessionUser {
                token: token.clone(),
                user: UserDto {
                    id,
                    nick_name,
                    icon,
                },
            })
        });
        if let (1, Some(user)) = (adopted, &user)
            && let Err(e) = self.list(user.user.id, token).await
        {
            // Only `POST /user/logout/all` misses it; it still ends at its maximum age.
            tracing::warn!(error = %e, "an older session could not be listed for its user");
        }
        meanwhile.await;
        if let (Some(recent), Some(user)) = (&self.recent, &user) {
            recent
                .insert_read_at(token.as_str(), user.clone(), read_at)
                .await;
        }
        Ok(user)
    }

    /// Ends a session.
    pub async fn delete(&self, session: &SessionUser) -> Result<(), redis::RedisError> {
        self.end(session.token.as_str()).await?;
        let _: i64 = self
            .redis
            .clone()
            .zrem(
                self.keys.user_sessions(session.user.id.get()),
                session.token.as_str(),
            )
            .await?;
        Ok(())
    }

    /// Ends every session of `user`; how many there were.
    pub async fn delete_all(&self, user: UserId) -> Result<u64, redis::RedisError> {
        let key = self.keys.user_sessions(user.get());
        let tokens: Vec<String> = self.redis.clone().zrange(&key, 0, -1).await?;
        let mut ended = 0;
        for token in &tokens {
            ended += self.end(token).await?;
        }
        if !tokens.is_empty() {
            let _: i64 = self.redis.clone().zrem(&key, &tokens).await?;
        }
        Ok(ended)
    }

    /// Deletes the session of `token` and tells every instance to forget it; 1 if it existed.
    async fn end(&self, token: &str) -> Result<u64, redis::RedisError> {
        let deleted: u64 = self.redis.clone().del(self.keys.login_token(token)).await?;
        // After the DEL, not before: a request of this session could otherwise read it back in
        // while the DEL is on its way.
        self.forget_everywhere(token, "a logout").await;
        Ok(deleted)
    }

    /// Drops `token` from every instance's recent-sessions cache, after its Redis record
    /// changed. A failed publish is logged: this instance has forgotten it, the others do
    /// within their window.
    async fn forget_everywhere(&self, token: &str, what: &str) {
        if let Some(recent) = &self.recent
            && let Err(e) = recent
                .invalidate_everywhere(&mut self.redis.clone(), token)
                .await
        {
            tracing::warn!(error = %e, "{what} not published to the other instances");
        }
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u64::MAX as u128) as u64
}

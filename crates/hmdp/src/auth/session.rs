//! Sessions: `login:token:{token}` hashes with a sliding TTL (the original's Redis session).
//!
//! Redis is the only authority on a session. Every request that carries a token reads the hash
//! and slides its TTL in one round trip, as the original's `RefreshTokenInterceptor` does.
//!
//! That round trip is the largest part of a flash-sale request after the grab script itself
//! (BENCHMARKS.md: a grab runs at 81–92 % of the rate of `GET /user/me`, which is the session
//! read alone). [`SessionStore::with_cache`] (`HMDP_SESSION_CACHE_MS`, off by default) lets an
//! instance trust a session it read from Redis in the last N milliseconds without asking
//! again. The price, bounded by N: a logout through *another* instance, a session deleted in
//! Redis by hand, or one that expired there, is still accepted here for up to N ms; and the
//! TTL slides at most once per N ms per instance (irrelevant next to a 30-minute TTL). A logout
//! through this instance drops the cached copy at once (only a request of that session already
//! reading Redis at that moment can put it back, for at most N ms). Only live sessions are
//! cached: an
//! unknown token always goes to Redis, so a session created on another instance works at once.

use std::time::Duration;

use moka::future::Cache;
use redis::AsyncCommands;

use crate::{
    domain::{SessionToken, UserDto, UserId},
    kv::{Keys, RedisConn},
};

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
    /// Sessions read from Redis recently, by token (see the module docs); `None` = off.
    recent: Option<Cache<String, SessionUser>>,
}

impl SessionStore {
    pub fn new(redis: RedisConn, keys: Keys, ttl: Duration) -> Self {
        Self {
            redis,
            keys,
            ttl,
            recent: None,
        }
    }

    /// Trusts a session read from Redis for `for_at_most` afterwards (at most `capacity`
    /// sessions kept); a zero duration leaves the cache off. See the module docs for what
    /// that trades.
    pub fn with_cache(mut self, for_at_most: Duration, capacity: u64) -> Self {
        self.recent = (!for_at_most.is_zero()).then(|| {
            Cache::builder()
                .max_capacity(capacity)
                .time_to_live(for_at_most)
                .build()
        });
        self
    }

    /// Stores a new session for `user` and returns its token.
    pub async fn create(&self, user: &UserDto) -> Result<SessionToken, redis::RedisError> {
        let token = SessionToken::generate();
        let key = self.keys.login_token(token.as_str());
        let _: () = redis::pipe()
            .atomic()
            .hset_multiple(
                &key,
                &[
                    ("id", user.id.to_string()),
                    ("nickName", user.nick_name.clone()),
                    ("icon", user.icon.clone()),
                ],
            )
            .pexpire(&key, self.ttl_ms())
            .query_async(&mut self.redis.clone())
            .await?;
        Ok(token)
    }

    /// The session's user, refreshing its TTL in the same round trip; `None` if the session
    /// does not exist (expired, logged out, never issued).
    pub async fn touch(
        &self,
        token: &SessionToken,
    ) -> Result<Option<SessionUser>, redis::RedisError> {
        if let Some(recent) = &self.recent
            && let Some(user) = recent.get(token.as_str()).await
        {
            return Ok(Some(user));
        }
        let key = self.keys.login_token(token.as_str());
        // PEXPIRE on a missing key is a no-op, so reading and refreshing can share one round trip.
        let (fields, _): (Vec<(String, String)>, i64) = redis::pipe()
            .hgetall(&key)
            .pexpire(&key, self.ttl_ms())
            .query_async(&mut self.redis.clone())
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
        let user = id.map(|id| SessionUser {
            token: token.clone(),
            user: UserDto {
                id,
                nick_name,
                icon,
            },
        });
        if let (Some(recent), Some(user)) = (&self.recent, &user) {
            recent.insert(token.as_str().to_owned(), user.clone()).await;
        }
        Ok(user)
    }

    /// Ends a session.
    pub async fn delete(&self, token: &SessionToken) -> Result<(), redis::RedisError> {
        let _: i64 = self
            .redis
            .clone()
            .del(self.keys.login_token(token.as_str()))
            .await?;
        // After the DEL, not before: a request of this session could otherwise read it back in
        // while the DEL is on its way.
        if let Some(recent) = &self.recent {
            recent.invalidate(token.as_str()).await;
        }
        Ok(())
    }

    fn ttl_ms(&self) -> i64 {
        self.ttl.as_millis().min(i64::MAX as u128) as i64
    }
}

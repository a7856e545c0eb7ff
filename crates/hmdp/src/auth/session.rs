//! Sessions: `login:token:{token}` hashes with a sliding TTL (the original's Redis session).
//!
//! Redis is the authority on a session. A request that carries a token reads the hash and
//! slides its TTL in one round trip, as the original's `RefreshTokenInterceptor` does, unless
//! this instance read that session within the last `HMDP_SESSION_CACHE_MS` (on by default):
//! then it trusts the copy in memory, so a session costs at most one Redis round trip per
//! window per instance, and its TTL slides at most once per window (nothing next to a
//! 30-minute TTL). A logout on any instance publishes the token and every instance forgets it
//! at once ([`hmdp_cache::InvalidatedCache`]); only a session deleted in Redis by other means
//! (by hand, or expired, which a session in use within the window cannot be) is still trusted
//! for up to the window. Unknown tokens are never cached, so a session created on another
//! instance works at once.

use std::{sync::Arc, time::Duration};

use hmdp_cache::{InvalidatedCache, L1Options};
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
    recent: Option<InvalidatedCache<Arc<SessionUser>>>,
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
    /// sessions kept), forgetting it when any instance publishes its logout on `channel`
    /// (subscribed through `subscriber`); a zero duration leaves the cache off.
    pub async fn with_cache(
        mut self,
        for_at_most: Duration,
        capacity: u64,
        subscriber: redis::Client,
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
    ) -> Result<Option<Arc<SessionUser>>, redis::RedisError> {
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
        if let (Some(recent), Some(user)) = (&self.recent, &user) {
            recent.insert(token.as_str(), user.clone()).await;
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
        if let Some(recent) = &self.recent
            && let Err(e) = recent
                .invalidate_everywhere(&mut self.redis.clone(), token.as_str())
                .await
        {
            // Gone here and in Redis; other instances forget it within their window.
            tracing::warn!(error = %e, "logout not published to the other instances");
        }
        Ok(())
    }

    fn ttl_ms(&self) -> i64 {
        self.ttl.as_millis().min(i64::MAX as u128) as i64
    }
}

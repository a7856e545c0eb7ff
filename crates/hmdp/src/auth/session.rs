//! Sessions: `login:token:{token}` hashes with a sliding TTL (the original's Redis session).

use std::time::Duration;

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
}

impl SessionStore {
    pub fn new(redis: RedisConn, keys: Keys, ttl: Duration) -> Self {
        Self { redis, keys, ttl }
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
        Ok(id.map(|id| SessionUser {
            token: token.clone(),
            user: UserDto {
                id,
                nick_name,
                icon,
            },
        }))
    }

    /// Ends a session.
    pub async fn delete(&self, token: &SessionToken) -> Result<(), redis::RedisError> {
        let _: i64 = self
            .redis
            .clone()
            .del(self.keys.login_token(token.as_str()))
            .await?;
        Ok(())
    }

    fn ttl_ms(&self) -> i64 {
        self.ttl.as_millis().min(i64::MAX as u128) as i64
    }
}

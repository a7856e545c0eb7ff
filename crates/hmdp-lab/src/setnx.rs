//! The course's hand-written Redis lock: `SET key <owner> NX PX <ttl>` to take it, and the
//! three ways the course releases it, from wrong to right: a plain `DEL`; `GET`, compare with
//! our owner value, then `DEL`; compare and delete in one Lua script. The lock experiments and
//! `one-per-user`'s Redis version share it, so each runs exactly the course's commands.

use std::time::Duration;

use redis::aio::ConnectionManager;

/// Compare-and-delete in one step: deletes the key only while it holds our owner value.
const UNLOCK: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                      return redis.call('del', KEYS[1]) else return 0 end";

/// One attempt's hold on the lock `key`: its own owner value, the TTL it sets.
pub(crate) struct SetNx {
    conn: ConnectionManager,
    key: String,
    owner: String,
    ttl: Duration,
}

impl SetNx {
    /// A hold on `key` with a fresh owner value (the course's UUID + thread id).
    pub(crate) fn new(conn: ConnectionManager, key: String, ttl: Duration) -> Self {
        Self {
            conn,
            key,
            owner: uuid::Uuid::new_v4().simple().to_string(),
            ttl,
        }
    }

    /// `SET key owner NX PX ttl`, once: whether we took it.
    pub(crate) async fn try_acquire(&self) -> anyhow::Result<bool> {
        let set: Option<String> = redis::cmd("SET")
            .arg(&self.key)
            .arg(&self.owner)
            .arg("NX")
            .arg("PX")
            .arg(self.ttl.as_millis() as u64)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(set.is_some())
    }

    /// Tries every `retry` for at most `wait`: whether we took it.
    pub(crate) async fn acquire_within(
        &self,
        wait: Duration,
        retry: Duration,
    ) -> anyhow::Result<bool> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.try_acquire().await? {
                return Ok(true);
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(false);
            }
            tokio::time::sleep(retry).await;
        }
    }

    /// The first unlock: `DEL`, whoever holds the lock now.
    pub(crate) async fn del(&self) -> anyhow::Result<()> {
        redis::cmd("DEL")
            .arg(&self.key)
            .query_async::<()>(&mut self.conn.clone())
            .await?;
        Ok(())
    }

    /// The second unlock: `GET`, and only if it is still ours, `DEL` — after `pause` (a GC
    /// pause, say) between the two, which nothing prevents. Whether the check passed.
    pub(crate) async fn check_then_del(
        &self,
        pause: impl std::future::Future<Output = anyhow::Result<()>>,
    ) -> anyhow::Result<bool> {
        if self.holder().await?.as_deref() != Some(self.owner.as_str()) {
            return Ok(false);
        }
        pause.await?;
        self.del().await?;
        Ok(true)
    }

    /// The owner value the key holds now (`GET`).
    pub(crate) async fn holder(&self) -> anyhow::Result<Option<String>> {
        Ok(redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut self.conn.clone())
            .await?)
    }

    /// Polls the key every `retry`, for at most `wait`, until another owner's value is in it:
    /// our lock expired and someone else took it.
    pub(crate) async fn taken_by_another(
        &self,
        wait: Duration,
        retry: Duration,
    ) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self.holder().await? {
                Some(h) if h != self.owner => return Ok(()),
                _ if tokio::time::Instant::now() >= deadline => {
                    anyhow::bail!("nobody else took the lock {} within {wait:?}", self.key)
                }
                _ => tokio::time::sleep(retry).await,
            }
        }
    }

    /// The third unlock: compare and delete in one Lua script.
    pub(crate) async fn unlock(&self) -> anyhow::Result<()> {
        redis::Script::new(UNLOCK)
            .key(&self.key)
            .arg(&self.owner)
            .invoke_async::<i64>(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

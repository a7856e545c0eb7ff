//! The course's hand-written Redis lock: `SET key <owner> NX PX <ttl>` to take it, and the
//! three ways the course releases it, from wrong to right: a plain `DEL`; `GET`, compare with
//! our owner value, then `DEL`; compare and delete in one Lua script. The lock experiments and
//! `one-per-user`'s Redis version share it, so each runs exactly the course's commands (the
//! plain `DEL` goes out with a `GET` in one `MULTI`, which only observes whose value it deletes).

use std::time::Duration;

use redis::aio::ConnectionManager;

/// Compare-and-delete in one step: deletes the key only while it holds our owner value.
const UNLOCK: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                      return redis.call('del', KEYS[1]) else return 0 end";

/// What the `GET`-compare-`DEL` unlock did.
pub(crate) enum Checked {
    /// The `GET` found this value, not ours: nothing deleted.
    NotOurs(Option<String>),
    /// The `GET` found ours; the `DEL` after the pause deleted this value.
    Deleted(Option<String>),
}

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
        Ok(self.acquire_counting(wait, retry).await?.is_some())
    }

    /// Tries every `retry` for at most `wait`: once taken, how many attempts were refused
    /// before.
    pub(crate) async fn acquire_counting(
        &self,
        wait: Duration,
        retry: Duration,
    ) -> anyhow::Result<Option<u32>> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut refused = 0;
        loop {
            if self.try_acquire().await? {
                return Ok(Some(refused));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            refused += 1;
            tokio::time::sleep(retry).await;
        }
    }

    /// The owner value this hold sets.
    pub(crate) fn owner(&self) -> &str {
        &self.owner
    }

    /// The first unlock: `DEL`, whoever holds the lock now. The value it deleted, read by a
    /// `GET` in the same `MULTI` (so it sees exactly what the `DEL` removes, and changes
    /// nothing the `DEL` does), for the trace to say whose lock went.
    pub(crate) async fn del(&self) -> anyhow::Result<Option<String>> {
        let (value, _deleted): (Option<String>, i64) = redis::pipe()
            .atomic()
            .cmd("GET")
            .arg(&self.key)
            .cmd("DEL")
            .arg(&self.key)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(value)
    }

    /// The second unlock: `GET`, and only if it is still ours, `DEL` — after `pause` (a GC
    /// pause, say) between the two, which nothing prevents.
    pub(crate) async fn check_then_del(
        &self,
        pause: impl std::future::Future<Output = anyhow::Result<()>>,
    ) -> anyhow::Result<Checked> {
        let seen = self.holder().await?;
        if seen.as_deref() != Some(self.owner.as_str()) {
            return Ok(Checked::NotOurs(seen));
        }
        pause.await?;
        Ok(Checked::Deleted(self.del().await?))
    }

    /// The owner value the key holds now (`GET`).
    pub(crate) async fn holder(&self) -> anyhow::Result<Option<String>> {
        Ok(redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut self.conn.clone())
            .await?)
    }

    /// Polls the key every `retry`, for at most `wait`, until another owner's value is in it:
    /// our lock expired and someone else took it. That owner's value.
    pub(crate) async fn taken_by_another(
        &self,
        wait: Duration,
        retry: Duration,
    ) -> anyhow::Result<String> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match self.holder().await? {
                Some(h) if h != self.owner => return Ok(h),
                _ if tokio::time::Instant::now() >= deadline => {
                    anyhow::bail!("nobody else took the lock {} within {wait:?}", self.key)
                }
                _ => tokio::time::sleep(retry).await,
            }
        }
    }

    /// The third unlock: compare and delete in one Lua script. Whether it deleted the key.
    pub(crate) async fn unlock(&self) -> anyhow::Result<bool> {
        let deleted = redis::Script::new(UNLOCK)
            .key(&self.key)
            .arg(&self.owner)
            .invoke_async::<i64>(&mut self.conn.clone())
            .await?;
        Ok(deleted == 1)
    }
}

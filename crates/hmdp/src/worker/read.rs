//! Taking entries from the consumer group: this consumer's own pending ones, new ones,
//! idle ones of any consumer (`XAUTOCLAIM`), and the ones held through an outage (`XCLAIM`).

use std::time::Duration;

use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};

use super::{GROUP, OrderWorker, Step, WorkerError};
use crate::kv::RedisConn;

impl OrderWorker {
    /// Creates the consumer group (and the stream) if missing.
    pub async fn ensure_group(&self, shard: u32) -> Result<(), WorkerError> {
        let r: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.redis.clone())
            .await;
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Re-reads and writes the first batch of this consumer's own pending entries.
    #[cfg(feature = "test-util")]
    pub async fn step_pending(
        &self,
        shard: u32,
        reader: &mut RedisConn,
    ) -> Result<Step, WorkerError> {
        let entries = self.read(shard, reader, "0", None).await?;
        self.write(shard, entries).await
    }

    /// Reads and writes new entries, blocking up to `block` for them.
    pub async fn step_new(
        &self,
        shard: u32,
        reader: &mut RedisConn,
        block: Duration,
    ) -> Result<Step, WorkerError> {
        let entries = self.read(shard, reader, ">", Some(block)).await?;
        self.write(shard, entries).await
    }

    /// Where the next [`OrderWorker::step_claim`] of `shard` continues (`0-0`: from the start).
    pub fn claim_cursor(&self, shard: u32) -> String {
        self.claim_cursors
            .lock()
            .expect("claim cursors")
            .get(&shard)
            .cloned()
            .unwrap_or_else(|| "0-0".into())
    }

    /// Takes over entries idle longer than `claim_idle` (with any consumer), and writes them.
    /// Each call continues the scan of the pending list where the previous one stopped.
    pub async fn step_claim(&self, shard: u32) -> Result<Step, WorkerError> {
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(self.settings.claim_idle.as_millis() as u64)
            .arg(self.claim_cursor(shard))
            .arg("COUNT")
            .arg(self.settings.batch)
            .query_async(&mut self.redis.clone())
            .await?;
        self.claim_cursors
            .lock()
            .expect("claim cursors")
            .insert(shard, reply.next_stream_id.clone());
        if !reply.deleted_ids.is_empty() {
            if self.uses_rabbitmq() {
                // The queue's consumer deletes the outbox entry of each order it wrote, also one
                // whose relay died before acknowledging it: written, not lost.
                tracing::info!(
                    shard,
                    entries = reply.deleted_ids.len(),
                    "outbox entries of a dead relay were deleted by the consumer after writing their orders"
                );
            } else {
                // Trimming never drops a pending entry, so this means someone deleted orders.
                tracing::error!(shard, ids = ?reply.deleted_ids, "pending order entries were deleted from the stream; those orders are lost");
            }
        }
        if !reply.claimed.is_empty() {
            self.stats.claimed.inc_by(reply.claimed.len() as u64);
            tracing::info!(
                shard,
                entries = reply.claimed.len(),
                "took over idle orders (left by a dead consumer, or failed before)"
            );
        }
        self.write(shard, reply.claimed).await
    }

    /// Retries entries held through a database outage: reclaims them first (without raising
    /// their delivery count), drops those someone else acknowledged meanwhile, writes the rest.
    pub(super) async fn retry(
        &self,
        shard: u32,
        entries: Vec<StreamId>,
    ) -> Result<Step, WorkerError> {
        let mut cmd = redis::cmd("XCLAIM");
        cmd.arg(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(&self.consumer)
            .arg(0);
        for e in &entries {
            cmd.arg(&e.id);
        }
        cmd.arg("JUSTID");
        let still_pending: Vec<String> = cmd.query_async(&mut self.redis.clone()).await?;
        let entries: Vec<StreamId> = entries
            .into_iter()
            .filter(|e| still_pending.contains(&e.id))
            .collect();
        if entries.is_empty() {
            return Ok(Step::Idle);
        }
        self.write(shard, entries).await
    }

    /// Up to a batch of entries after `from` (`0`: this consumer's own pending ones, `>`: new
    /// ones), waiting up to `block` for new ones.
    pub(super) async fn read(
        &self,
        shard: u32,
        reader: &mut RedisConn,
        from: &str,
        block: Option<Duration>,
    ) -> Result<Vec<StreamId>, WorkerError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(self.settings.batch);
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis() as u64);
        }
        cmd.arg("STREAMS")
            .arg(self.keys.seckill_stream(shard))
            .arg(from);
        let reply: Option<StreamReadReply> = cmd.query_async(reader).await?;
        Ok(reply
            .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
            .unwrap_or_default())
    }
}

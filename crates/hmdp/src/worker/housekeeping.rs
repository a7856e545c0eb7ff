//! Keeping the streams and the group small: trimming written entries, and removing consumers
//! that have been idle for long with nothing pending.

use redis::streams::StreamPendingReply;

use super::{GROUP, OrderWorker, WorkerError, scripts::DROP_IDLE_CONSUMERS};
use crate::order_stream;

impl OrderWorker {
    /// Removes consumers of the shard's group that hold no pending entries and have been idle
    /// longer than the consumer expiry (never this worker); returns their names.
    pub async fn remove_idle_consumers(&self, shard: u32) -> Result<Vec<String>, WorkerError> {
        Ok(DROP_IDLE_CONSUMERS
            .key(self.keys.seckill_stream(shard))
            .arg(GROUP)
            .arg(self.consumer_expiry.as_millis() as u64)
            .arg(&self.consumer)
            .invoke_async(&mut self.redis.clone())
            .await?)
    }

    /// Drops entries below the oldest one still pending or undelivered (`XTRIM MINID`), so an
    /// unwritten order is never dropped.
    /// With RabbitMQ the consumer deletes each entry after its commit instead: an entry the
    /// broker holds stays, so a warm-up still counts its order.
    pub async fn trim(&self, shard: u32) -> Result<(), WorkerError> {
        if self.uses_rabbitmq() {
            return Ok(());
        }
        let stream = self.keys.seckill_stream(shard);
        let Some(group) = order_stream::group_info(&self.redis, &stream).await? else {
            return Ok(());
        };
        let mut redis = self.redis.clone();
        let mut min_id = group.last_delivered_id;
        if group.pending > 0 {
            let summary: StreamPendingReply = redis::cmd("XPENDING")
                .arg(&stream)
                .arg(GROUP)
                .query_async(&mut redis)
                .await?;
            if let StreamPendingReply::Data(d) = summary
                && stream_id_less(&d.start_id, &min_id)
            {
                min_id = d.start_id;
            }
        }
        if min_id == "0-0" {
            return Ok(());
        }
        let _: i64 = redis::cmd("XTRIM")
            .arg(&stream)
            .arg("MINID")
            .arg(&min_id)
            .query_async(&mut redis)
            .await?;
        Ok(())
    }
}

/// Orders stream ids (`ms-seq`) numerically.
fn stream_id_less(a: &str, b: &str) -> bool {
    let p = |s: &str| -> (u64, u64) {
        let (ms, seq) = s.split_once('-').unwrap_or((s, "0"));
        (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
    };
    p(a) < p(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_compare_numerically() {
        assert!(stream_id_less("9-0", "10-0"));
        assert!(stream_id_less("10-2", "10-10"));
        assert!(!stream_id_less("10-10", "10-2"));
        assert!(!stream_id_less("5-5", "5-5"));
    }
}

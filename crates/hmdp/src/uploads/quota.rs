//! What one user, and the disk, may take: a daily cap per user on photos and bytes, and a floor
//! of free space under the upload folder.
//!
//! The per-photo size limit alone lets one account store photos until the disk is full, and the
//! upload folder often shares its disk with the SQLite file and the managed Redis's AOF: a full
//! disk then stops logins and the sale too. A user's day is one Redis hash
//! (`upload:quota:{userId}:{yyyyMMdd}`), shared by every instance; a photo is charged by one
//! script, after it is written and checked and before it is renamed into place, with the bytes
//! actually stored, so a refused or failed upload costs nothing. A cheap read before the body
//! is read turns away a user whose day is spent without writing anything.

use std::{path::Path, sync::LazyLock};

use chrono::Utc;
use redis::{AsyncCommands, Script};

use super::UploadError;
use crate::{
    config::TimeZone,
    domain::UserId,
    kv::{Keys, RedisConn},
};

/// Adds one photo of `ARGV[3]` bytes to a user's day unless that would pass a cap.
///
/// KEYS: `upload:quota:{userId}:{day}`. ARGV: photos a day, bytes a day, this photo's bytes,
/// the key's lifetime (s). Returns 1 when charged, 0 when a cap would be passed.
static CHARGE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local count = tonumber(redis.call('HGET', KEYS[1], 'count') or '0')
local bytes = tonumber(redis.call('HGET', KEYS[1], 'bytes') or '0')
if count + 1 > tonumber(ARGV[1]) or bytes + tonumber(ARGV[3]) > tonumber(ARGV[2]) then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('HINCRBY', KEYS[1], 'bytes', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
",
    )
});

/// The daily caps of one deployment (`HMDP_UPLOAD_USER_DAILY_*`).
pub(super) struct Quota {
    pub(super) redis: RedisConn,
    pub(super) keys: Keys,
    pub(super) time_zone: TimeZone,
    pub(super) daily_count: u64,
    pub(super) daily_bytes: u64,
}

impl Quota {
    /// The bytes `user` may still upload today; refused when the day's photos or bytes are
    /// spent.
    pub(super) async fn remaining(&self, user: UserId) -> Result<u64, UploadError> {
        let mut redis = self.redis.clone();
        let (count, bytes): (Option<u64>, Option<u64>) =
            redis.hmget(self.key(user), &["count", "bytes"]).await?;
        let (count, bytes) = (count.unwrap_or(0), bytes.unwrap_or(0));
        if count >= self.daily_count || bytes >= self.daily_bytes {
            return Err(self.exceeded());
        }
        Ok(self.daily_bytes - bytes)
    }

    /// Charges one photo of `len` bytes to `user`'s day, or refuses it when that would pass a
    /// cap (uploads racing each other: the first to be charged wins).
    pub(super) async fn charge(&self, user: UserId, len: u64) -> Result<(), UploadError> {
        let mut redis = self.redis.clone();
        let charged: i64 = CHARGE
            .key(self.key(user))
            .arg(self.daily_count)
            .arg(self.daily_bytes)
            .arg(len)
            .arg(TimeZone::DAY_RECORD_TTL.as_secs())
            .invoke_async(&mut redis)
            .await?;
        if charged == 1 {
            Ok(())
        } else {
            Err(self.exceeded())
        }
    }

    /// Gives back a charged photo that was not stored after all.
    pub(super) async fn refund(&self, user: UserId, len: u64) -> Result<(), redis::RedisError> {
        let key = self.key(user);
        let mut redis = self.redis.clone();
        redis::pipe()
            .hincr(&key, "count", -1)
            .ignore()
            .hincr(&key, "bytes", -(len as i64))
            .ignore()
            .query_async(&mut redis)
            .await
    }

    pub(super) fn exceeded(&self) -> UploadError {
        UploadError::QuotaExceeded {
            count: self.daily_count,
            bytes: self.daily_bytes,
            retry_after: self.time_zone.until_midnight(Utc::now()),
        }
    }

    fn key(&self, user: UserId) -> String {
        self.keys
            .upload_quota(user.get(), &self.time_zone.day(Utc::now()))
    }
}

/// The bytes free for an unprivileged user on the file system holding `dir`.
pub(super) async fn free_space(dir: &Path) -> std::io::Result<u64> {
    let dir = dir.to_owned();
    let stat = tokio::task::spawn_blocking(move || rustix::fs::statvfs(&dir))
        .await
        .map_err(std::io::Error::other)??;
    Ok(stat.f_bavail.saturating_mul(stat.f_frsize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_free_space_is_read_from_the_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_space(dir.path()).await.unwrap();
        assert!(free > 0);
        assert!(free_space(&dir.path().join("missing")).await.is_err());
    }
}

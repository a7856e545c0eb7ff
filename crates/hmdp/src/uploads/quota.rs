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

use std::{path::Path, sync::LazyLock, time::Duration};

use chrono::{Days, TimeZone as _, Utc};
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

/// A day's record outlives the day in every time zone.
const KEY_TTL: Duration = Duration::from_secs(2 * 24 * 3600);

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
            .arg(KEY_TTL.as_secs())
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
            retry_after: until_midnight(self.time_zone, Utc::now()),
        }
    }

    fn key(&self, user: UserId) -> String {
        let day = Utc::now().with_timezone(&self.time_zone.0).date_naive();
        self.keys
            .upload_quota(user.get(), &day.format("%Y%m%d").to_string())
    }
}

/// The time from `now` to the next midnight in `tz` (when a spent day starts again).
fn until_midnight(tz: TimeZone, now: chrono::DateTime<Utc>) -> Duration {
    let local = now.with_timezone(&tz.0);
    local
        .date_naive()
        .checked_add_days(Days::new(1))
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .and_then(|m| tz.0.from_local_datetime(&m).earliest())
        .and_then(|m| (m.with_timezone(&Utc) - now).to_std().ok())
        .unwrap_or(Duration::from_secs(24 * 3600))
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

    #[test]
    fn a_spent_day_starts_again_at_local_midnight() {
        let shanghai = TimeZone(chrono_tz::Asia::Shanghai);
        // 15:30 UTC is 23:30 in Shanghai.
        let now = Utc.with_ymd_and_hms(2024, 5, 1, 15, 30, 0).unwrap();
        assert_eq!(until_midnight(shanghai, now), Duration::from_secs(30 * 60));
        let utc = TimeZone(chrono_tz::UTC);
        assert_eq!(
            until_midnight(utc, now),
            Duration::from_secs(8 * 3600 + 30 * 60)
        );
    }

    #[tokio::test]
    async fn the_free_space_is_read_from_the_file_system() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_space(dir.path()).await.unwrap();
        assert!(free > 0);
        assert!(free_space(&dir.path().join("missing")).await.is_err());
    }
}

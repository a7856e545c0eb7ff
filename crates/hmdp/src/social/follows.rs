//! Follows: `tb_follow` is the truth (one row per pair, a unique index); `follows:{userId}` is
//! its copy in Redis for set operations (common follows, the feed's pulled authors).
//!
//! **Bounds.** One user follows at most `HMDP_FOLLOW_MAX` users (checked under the user's lock),
//! so a set, its rebuild and an intersection stay small; common follows show the first
//! [`COMMON_FOLLOWS_SHOWN`] by id, and their users are read in bounded `IN (…)` lists.
//!
//! **Lost sets.** An empty SET does not exist in Redis, so "follows nobody" and "the set was
//! lost" (evicted, flushed, a fresh Redis) would look the same. Every set built here holds the
//! marker member [`LOADED`] (`0`, never a user id); a set without it is rebuilt from the table
//! before it is read (the rebuild script re-checks the marker, so racing rebuilds write once).
//! Changes and rebuilds of one user run under that user's database lock
//! (`storage::follows`), and a change touches Redis only when the set is loaded, so the set is
//! always exactly the table.
//!
//! **Redis Cluster.** `SINTER follows:{a} follows:{b}` names two keys that live in different
//! slots on a cluster, where it fails with `CROSSSLOT`. Tagging the keys to share a slot
//! (`follows:{x}:a`) would put every user's set in one slot: one node holding all follows.
//! So on a cluster the two sets are read with `SMEMBERS` and intersected here (the sets are
//! one user's follows: small); a single node keeps `SINTER`.

use std::collections::HashSet;

use super::{
    Social, SocialError,
    scripts::{APPLY_FOLLOW, REBUILD_FOLLOWS},
};
use crate::{
    domain::{UserDto, UserId},
    kv::RedisConn,
    storage::{follows, users},
};

/// The marker member of a `follows:{userId}` set built from `tb_follow`.
pub(crate) const LOADED: &str = "0";

/// How many users `/follow/common/{id}` shows at most: the first ones by id.
pub(crate) const COMMON_FOLLOWS_SHOWN: usize = 100;

impl Social {
    /// Makes `user` follow `target` (`follow`) or stop following; idempotent. Returns whether
    /// `user` now follows `target`.
    pub async fn follow(
        &self,
        user: UserId,
        target: UserId,
        follow: bool,
    ) -> Result<bool, SocialError> {
        if user == target {
            return Err(SocialError::FollowSelf);
        }
        if users::find_by_id(&self.db, target).await?.is_none() {
            return Err(SocialError::UserNotFound);
        }
        let key = self.keys.follows(user.get());
        let mut conn = self.conn();
        let max = self.settings.follow_max;
        let done = follows::set_locked(&self.db, user, target, follow, max, || async move {
            let _: i64 = APPLY_FOLLOW
                .key(&key)
                .arg(LOADED)
                .arg(target.get())
                .arg(if follow { "1" } else { "0" })
                .invoke_async(&mut conn)
                .await?;
            Ok::<_, SocialError>(())
        })
        .await?;
        if !done {
            return Err(SocialError::FollowLimit(max));
        }
        Ok(follow)
    }

    /// Whether `user` follows `target` (from the table, as the original).
    pub async fn is_following(&self, user: UserId, target: UserId) -> Result<bool, SocialError> {
        Ok(follows::is_following(&self.db, user, target).await?)
    }

    /// The first [`COMMON_FOLLOWS_SHOWN`] users both `user` and `other` follow, by id.
    pub async fn common_follows(
        &self,
        user: UserId,
        other: UserId,
    ) -> Result<Vec<UserDto>, SocialError> {
        if users::find_by_id(&self.db, other).await?.is_none() {
            return Ok(Vec::new());
        }
        let mut ids = None;
        // A set can vanish between the check and the read; the second try rebuilds it again,
        // and after that the table answers.
        for _ in 0..2 {
            self.ensure_follows(user).await?;
            self.ensure_follows(other).await?;
            if let Some(found) = self.intersect(user, other).await? {
                ids = Some(found);
                break;
            }
        }
        let mut ids = match ids {
            Some(ids) => ids,
            None => follows::common(&self.db, user, other).await?,
        };
        ids.sort_unstable();
        ids.truncate(COMMON_FOLLOWS_SHOWN);
        Ok(follows::users_by_ids(&self.db, &ids).await?)
    }

    /// The intersection of two loaded sets, without the marker; `None` if either set lost its
    /// marker meanwhile.
    async fn intersect(&self, a: UserId, b: UserId) -> Result<Option<Vec<i64>>, SocialError> {
        let (ka, kb) = (self.keys.follows(a.get()), self.keys.follows(b.get()));
        let mut conn = self.conn();
        let members: Vec<String> = match &self.redis {
            RedisConn::Single(_) | RedisConn::Sentinel(_) => {
                redis::AsyncCommands::sinter(&mut conn, &[ka, kb]).await?
            }
            RedisConn::Cluster(_) => {
                let sa: HashSet<String> = redis::AsyncCommands::smembers(&mut conn, ka).await?;
                let sb: HashSet<String> = redis::AsyncCommands::smembers(&mut conn, kb).await?;
                sa.intersection(&sb).cloned().collect()
            }
        };
        if !members.iter().any(|m| m == LOADED) {
            return Ok(None);
        }
        Ok(Some(
            members
                .iter()
                .filter(|m| *m != LOADED)
                .filter_map(|m| m.parse().ok())
                .collect(),
        ))
    }

    /// Rebuilds `follows:{user}` from the table unless it is loaded. Returns whether it
    /// rebuilt.
    pub async fn ensure_follows(&self, user: UserId) -> Result<bool, SocialError> {
        let key = self.keys.follows(user.get());
        let loaded: bool = redis::AsyncCommands::sismember(&mut self.conn(), &key, LOADED).await?;
        if loaded {
            return Ok(false);
        }
        let mut conn = self.conn();
        follows::rebuild_locked(&self.db, user, |ids| async move {
            let rebuilt: i64 = REBUILD_FOLLOWS
                .key(&key)
                .arg(LOADED)
                .arg(ids)
                .invoke_async(&mut conn)
                .await?;
            Ok::<_, SocialError>(rebuilt == 1)
        })
        .await
    }

    /// Which of `authors` `user` follows (from the loaded set).
    pub(super) async fn followed_among(
        &self,
        user: UserId,
        authors: &[i64],
    ) -> Result<Vec<i64>, SocialError> {
        if authors.is_empty() {
            return Ok(Vec::new());
        }
        self.ensure_follows(user).await?;
        let mut cmd = redis::cmd("SMISMEMBER");
        cmd.arg(self.keys.follows(user.get())).arg(authors);
        let flags: Vec<bool> = cmd.query_async(&mut self.conn()).await?;
        Ok(authors
            .iter()
            .zip(flags)
            .filter_map(|(a, f)| f.then_some(*a))
            .collect())
    }
}

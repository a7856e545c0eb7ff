//! Likes: `blog:liked:{id}` (ZSET of user ids scored by the time of the like, in ms) is the
//! truth of who likes a note; `tb_blog.liked` is its size, kept for ordering `/blog/hot`.
//!
//! The original checks (`ZSCORE`) and then acts (DB `liked±1`, `ZADD`/`ZREM`), so two quick
//! clicks of one user can both see "not liked" and count twice. Here one Lua script
//! ([`TOGGLE_LIKE`](super::scripts::TOGGLE_LIKE)) decides and applies a toggle and returns the
//! set's new size, and that size is written to `tb_blog.liked` while the toggle holds the
//! note's row lock (`storage::blogs::set_liked_locked`). The counter is *set*, not moved by
//! ±1, so it cannot go negative and heals by itself on the next toggle: a note from the
//! original `hmdp.sql` says `liked=1` while its Redis set is empty (the dump has no Redis
//! data), and a Redis that lost its sets likewise. Such a count stands (and orders the hot
//! list) until the note's first toggle here, which replaces it with the number of likers
//! Redis knows of. If the database write fails after the script ran, the set is ahead until
//! the next toggle of that note fixes the count; the user sees an error and may click again.

use serde::Serialize;

use super::{Social, SocialError, scripts::TOGGLE_LIKE};
use crate::{
    domain::{BlogId, UserDto, UserId},
    storage::{blogs, follows},
};

/// How many likers `/blog/likes/{id}` shows (the original's top 5).
pub const LIKERS_SHOWN: isize = 5;

/// A note's like state after a toggle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LikeState {
    /// Whether the user now likes the note.
    pub is_like: bool,
    /// How many users like the note now.
    pub liked: i64,
}

impl Social {
    /// Likes the note for `user`, or takes the like back if there is one.
    pub async fn toggle_like(&self, blog: BlogId, user: UserId) -> Result<LikeState, SocialError> {
        let key = self.keys.blog_liked(blog.get());
        let mut conn = self.conn();
        let state = blogs::set_liked_locked(&self.db, blog, || async move {
            let (_, now_ms) = super::blogs::now_local();
            let (likes, size): (i64, i64) = TOGGLE_LIKE
                .key(&key)
                .arg(user.get())
                .arg(now_ms)
                .invoke_async(&mut conn)
                .await?;
            Ok::<_, SocialError>((
                LikeState {
                    is_like: likes == 1,
                    liked: size,
                },
                size,
            ))
        })
        .await?;
        state.ok_or(SocialError::BlogNotFound)
    }

    /// The first five users who like the note, in the order they liked it.
    pub async fn likers(&self, blog: BlogId) -> Result<Vec<UserDto>, SocialError> {
        let ids: Vec<i64> = redis::AsyncCommands::zrange(
            &mut self.conn(),
            self.keys.blog_liked(blog.get()),
            0,
            LIKERS_SHOWN - 1,
        )
        .await?;
        Ok(follows::users_by_ids(&self.db, &ids).await?)
    }

    /// Whether `user` likes each of `blogs`, in order.
    pub(super) async fn likes_of(
        &self,
        user: UserId,
        blogs: &[BlogId],
    ) -> Result<Vec<bool>, SocialError> {
        let cmds = blogs
            .iter()
            .map(|b| {
                let mut c = redis::cmd("ZSCORE");
                c.arg(self.keys.blog_liked(b.get())).arg(user.get());
                c
            })
            .collect();
        let scores: Vec<Option<f64>> = self.query_each(cmds).await?;
        Ok(scores.into_iter().map(|s| s.is_some()).collect())
    }
}

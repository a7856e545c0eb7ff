//! Likes: `hmdp_blog_like` is the truth of who likes a note; `blog:liked:{id}` (ZSET of user
//! ids scored by the time of the like, in ms) is its copy that answers "do I like it" and "who
//! likes it", and `tb_blog.liked` its count, kept for ordering `/blog/hot`.
//!
//! **Toggles.** The original checks (`ZSCORE`) and then acts (DB `liked±1`, `ZADD`/`ZREM`), so
//! two quick clicks of one user can both see "not liked" and count twice. Here one Lua script
//! ([`TOGGLE_LIKE`]) decides and applies a toggle in Redis and returns the number of likers;
//! the like row and that number are written while the toggle holds the note's row lock
//! (`storage::likes`). The count is *set*, not moved by ±1, so it never goes negative: a note
//! from the original `hmdp.sql` says `liked=1` with no likers anywhere, and keeps that count
//! (and its place in the hot list) until its first toggle here.
//!
//! **Lost sets.** As with follows, every set built here holds the marker member [`LOADED`]
//! (`0`, score 0, never a user id); a set without it is rebuilt from the table, under the
//! note's lock, before a toggle or a read uses it, so a Redis that lost its data counts the
//! next like as one more, not as the first. Members a set held without the marker (a set
//! written before the table existed, or by the original) are kept and added to the table.
//!
//! **Order of the writes.** Redis is changed first and the database transaction commits after
//! it. If the commit fails (or the process dies in between), Redis is one toggle of one user
//! ahead: the user was answered an error and sees the Redis state, and their next click
//! toggles it back in both places. The other order would leave a committed like missing from
//! a loaded set, which nothing would ever repair.

use serde::Serialize;

use super::{
    Social, SocialError,
    scripts::{REBUILD_LIKES, TOGGLE_LIKE},
};
use crate::{
    domain::{BlogId, UserDto, UserId},
    storage::{
        follows,
        likes::{self, Like, Toggled},
    },
};

/// How many likers `/blog/likes/{id}` shows (the original's top 5).
pub const LIKERS_SHOWN: usize = 5;

/// The marker member of a `blog:liked:{id}` set built from the table.
pub const LOADED: &str = "0";

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
        let (_, now_ms) = super::blogs::now_local();
        let toggle = || {
            let (key, mut conn) = (key.clone(), self.conn());
            async move {
                let (likes, count): (i64, i64) = TOGGLE_LIKE
                    .key(&key)
                    .arg(LOADED)
                    .arg(user.get())
                    .arg(now_ms)
                    .invoke_async(&mut conn)
                    .await?;
                Ok::<_, SocialError>(match likes {
                    -1 => Toggled::NotLoaded,
                    l => Toggled::Applied {
                        likes: l == 1,
                        count,
                    },
                })
            }
        };
        let rebuild = |likes: Vec<Like>| self.load_likes(key.clone(), likes);
        match likes::toggle_locked(&self.db, blog, user, now_ms, toggle, rebuild).await? {
            None => Err(SocialError::BlogNotFound),
            Some(Toggled::NotLoaded) => Err(SocialError::LikesNotLoaded),
            Some(Toggled::Applied { likes, count }) => Ok(LikeState {
                is_like: likes,
                liked: count,
            }),
        }
    }

    /// The first five users who like the note, in the order they liked it.
    pub async fn likers(&self, blog: BlogId) -> Result<Vec<UserDto>, SocialError> {
        self.ensure_likes(blog).await?;
        let members: Vec<String> = redis::AsyncCommands::zrange(
            &mut self.conn(),
            self.keys.blog_liked(blog.get()),
            0,
            LIKERS_SHOWN as isize,
        )
        .await?;
        let ids: Vec<i64> = members
            .iter()
            .filter(|m| *m != LOADED)
            .filter_map(|m| m.parse().ok())
            .take(LIKERS_SHOWN)
            .collect();
        Ok(follows::users_by_ids(&self.db, &ids).await?)
    }

    /// Rebuilds `blog:liked:{blog}` from the table unless it is loaded (or there is no such
    /// note).
    async fn ensure_likes(&self, blog: BlogId) -> Result<(), SocialError> {
        let key = self.keys.blog_liked(blog.get());
        let loaded: Option<f64> =
            redis::AsyncCommands::zscore(&mut self.conn(), &key, LOADED).await?;
        if loaded.is_none() {
            likes::rebuild_locked(&self.db, blog, |likes| self.load_likes(key, likes)).await?;
        }
        Ok(())
    }

    /// Runs [`REBUILD_LIKES`] with the table's `likes`: `None` if the set was loaded already,
    /// else the likes the set held that are to be added to the table.
    async fn load_likes(
        &self,
        key: String,
        likes: Vec<Like>,
    ) -> Result<Option<Vec<Like>>, SocialError> {
        let mut invocation = REBUILD_LIKES.key(&key);
        invocation.arg(LOADED);
        for like in &likes {
            invocation.arg(like.at_ms).arg(like.user);
        }
        let before: Option<Vec<String>> = invocation.invoke_async(&mut self.conn()).await?;
        let Some(before) = before else {
            return Ok(None);
        };
        let known: std::collections::HashSet<i64> = likes.iter().map(|l| l.user).collect();
        Ok(Some(
            before
                .chunks_exact(2)
                .filter_map(|pair| {
                    let user: i64 = pair[0].parse().ok().filter(|u| *u > 0)?;
                    let at_ms = pair[1].parse::<f64>().ok()? as i64;
                    (!known.contains(&user)).then_some(Like { user, at_ms })
                })
                .collect(),
        ))
    }

    /// Whether `user` likes each of `blogs`, in order. Sets found not loaded are rebuilt first.
    pub(super) async fn likes_of(
        &self,
        user: UserId,
        blogs: &[BlogId],
    ) -> Result<Vec<bool>, SocialError> {
        let cmds = blogs
            .iter()
            .map(|b| {
                let mut c = redis::cmd("ZMSCORE");
                c.arg(self.keys.blog_liked(b.get()))
                    .arg(LOADED)
                    .arg(user.get());
                c
            })
            .collect();
        let scores: Vec<Vec<Option<f64>>> = self.query_each(cmds).await?;
        let mut out = Vec::with_capacity(blogs.len());
        for (blog, score) in blogs.iter().zip(scores) {
            let (loaded, likes) = (
                score.first().is_some_and(Option::is_some),
                score.get(1).is_some_and(Option::is_some),
            );
            if loaded {
                out.push(likes);
                continue;
            }
            self.ensure_likes(*blog).await?;
            let score: Option<f64> = redis::AsyncCommands::zscore(
                &mut self.conn(),
                self.keys.blog_liked(blog.get()),
                user.get(),
            )
            .await?;
            out.push(score.is_some());
        }
        Ok(out)
    }
}

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
//! Such a set is adopted when its note is next read or toggled, and at start-up
//! ([`Social::adopt_unmarked_likes`] walks every `blog:liked:*` set once, in the background),
//! so a Redis that loses its data after an upgrade loses no like of a note nobody opened since.
//!
//! **Order of the writes.** Redis is changed first and the database transaction commits after
//! it. If the commit fails (or the process dies in between), Redis is one toggle of one user
//! ahead: the user was answered an error and sees the Redis state, and their next click
//! toggles it back in both places. The other order would leave a committed like missing from
//! a loaded set, which nothing would ever repair.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::{
    Social, SocialError,
    scripts::{REBUILD_LIKES, TOGGLE_LIKE},
};
use crate::{
    domain::{BlogId, UserDto, UserId},
    kv::KeyScan,
    storage::{
        follows,
        likes::{self, Like, Toggled},
    },
};

/// How many likers `/blog/likes/{id}` shows (the original's top 5).
pub(crate) const LIKERS_SHOWN: usize = 5;

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

/// What one walk of [`Social::adopt_unmarked_likes`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Adoption {
    /// `blog:liked:{id}` sets looked at.
    pub seen: u64,
    /// Sets without the marker whose likers went into the table (they now carry the marker).
    pub adopted: u64,
    /// Sets without the marker of a note that does not exist (left as they are).
    pub orphans: u64,
    /// Sets that could not be adopted (each logged); the next read or toggle of the note
    /// tries again.
    pub failed: u64,
}

/// Every how many sets looked at the walk logs its progress.
const ADOPTION_PROGRESS_EVERY: u64 = 10_000;

impl Social {
    /// Starts [`Social::adopt_unmarked_likes`] in the background: its outcome is logged, never
    /// returned, and [`Social::shutdown`] stops it between two notes.
    pub fn adopt_likes_in_background(&self) {
        let me = self.clone();
        self.jobs.spawn(async move {
            match me.adopt_unmarked_likes().await {
                Ok(done) if done.failed > 0 => tracing::warn!(
                    seen = done.seen,
                    adopted = done.adopted,
                    orphans = done.orphans,
                    failed = done.failed,
                    "like sets without the marker: some could not be adopted (each is tried \
                     again when its note is read or liked)"
                ),
                Ok(done) => tracing::info!(
                    seen = done.seen,
                    adopted = done.adopted,
                    orphans = done.orphans,
                    "like sets without the marker adopted into the database"
                ),
                Err(e) => tracing::warn!(
                    error = %e,
                    "cannot walk the like sets; those without the marker are adopted when their \
                     note is read or liked"
                ),
            }
        });
    }

    /// Walks every `blog:liked:{id}` set (`SCAN`; on a cluster, every primary) and adopts each
    /// one without the marker, as a read of its note would: under the note's lock, its likers
    /// go into `hmdp_blog_like` and the set gets the marker. A set with the marker costs one
    /// `ZSCORE` (pipelined), so a second walk is cheap. A failure on one note is logged and the
    /// walk goes on; an error of the walk itself is returned.
    pub async fn adopt_unmarked_likes(&self) -> Result<Adoption, SocialError> {
        let mut scan =
            KeyScan::start(&self.redis, self.keys.blog_liked_pattern(), Some("zset")).await?;
        let mut done = Adoption::default();
        while let Some(keys) = scan.next_batch().await? {
            let sets: Vec<(String, BlogId)> = keys
                .into_iter()
                .filter_map(|key| {
                    let blog = BlogId::new(self.keys.blog_liked_id(&key)?).ok()?;
                    Some((key, blog))
                })
                .collect();
            let cmds = sets
                .iter()
                .map(|(key, _)| {
                    let mut c = redis::cmd("ZSCORE");
                    c.arg(key).arg(LOADED);
                    c
                })
                .collect();
            let markers: Vec<Option<f64>> = self.query_each(cmds).await?;
            for ((key, blog), marker) in sets.into_iter().zip(markers) {
                if self.jobs.stopping.load(Ordering::Acquire) {
                    tracing::info!(?done, "like set adoption stopped by shutdown");
                    return Ok(done);
                }
                done.seen += 1;
                if done.seen % ADOPTION_PROGRESS_EVERY == 0 {
                    tracing::info!(?done, "adopting like sets without the marker");
                }
                if marker.is_some() {
                    continue;
                }
                let mut adopted = false;
                let flag = &mut adopted;
                let rebuilt = likes::rebuild_locked(&self.db, blog, |likes| async move {
                    let before = self.load_likes(key, likes).await;
                    *flag = matches!(before, Ok(Some(_)));
                    before
                })
                .await;
                match rebuilt {
                    Ok(true) if adopted => done.adopted += 1,
                    // Loaded meanwhile by a read or a toggle of the note.
                    Ok(true) => {}
                    Ok(false) => done.orphans += 1,
                    Err(e) => {
                        done.failed += 1;
                        tracing::warn!(blog = blog.get(), error = %e, "cannot adopt a like set");
                    }
                }
            }
        }
        Ok(done)
    }

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

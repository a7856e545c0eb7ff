//! Notes, likes, follows and the followers' feed (the course's ZSET and SET chapters).
//!
//! - [`blogs`]: notes are sanitised on write (the pages render `content` as raw HTML) and shown
//!   with their author and whether the viewer likes them; deleting one takes its comments,
//!   likes and feed entries with it and hands its photos back to the upload clean-up.
//! - [`comments`]: comments on a note, sanitised like notes, counted in `tb_blog.comments`
//!   under the note's row lock, each user's a day capped; a comment is deleted by its author
//!   or the note's.
//! - [`likes`]: `hmdp_blog_like` is the truth, `blog:liked:{id}` its copy with a marker
//!   member (rebuilt when lost); one Lua script decides a toggle, and the row and
//!   `tb_blog.liked` follow it under the note's row lock, so racing clicks never double-count.
//! - [`follows`]: `tb_follow` is the truth; `follows:{userId}` is a copy that carries a marker
//!   member, so a lost set is rebuilt instead of read as "follows nobody".
//! - [`feed`]: push to followers' inboxes, or, past `HMDP_FEED_PUSH_MAX_FOLLOWERS`, pull from
//!   the author's outbox at read time; one scroll over both.
//!
//! Fan-outs to many followers run in the background, and so does the start-up adoption of
//! like sets without the marker ([`Social::adopt_likes_in_background`]); [`Social::shutdown`]
//! waits for the fan-outs and stops the adoption between two notes.

pub(crate) mod blogs;
pub(crate) mod comments;
pub(crate) mod feed;
pub(crate) mod follows;
pub(crate) mod likes;
mod scripts;

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use futures_util::{StreamExt, TryStreamExt};
use redis::{Cmd, FromRedisValue, Pipeline, RedisResult};
use tokio::sync::Notify;

pub(crate) use blogs::{Blog, BlogInput};
pub(crate) use comments::{Comment, CommentInput};
pub(crate) use feed::ScrollResult;
pub(crate) use likes::LikeState;

use crate::{
    catalogue::{Catalogue, CatalogueError},
    config::SocialSettings,
    domain::{Answer, Answered, ErrorCode, Refused},
    kv::{Keys, RedisConn},
    storage::{Db, StorageError},
};

/// Errors of the social service.
#[derive(Debug, thiserror::Error)]
pub enum SocialError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Catalogue(#[from] CatalogueError),
    /// No such note.
    #[error("笔记不存在")]
    BlogNotFound,
    /// A note that breaks a rule; the message says which.
    #[error("{0}")]
    InvalidBlog(String),
    /// Deleting someone else's note.
    #[error("只能删除自己的笔记 (only the author may delete a note)")]
    NotYourBlog,
    /// No such comment.
    #[error("评论不存在 (no such comment)")]
    CommentNotFound,
    /// A comment that breaks a rule; the message says which.
    #[error("{0}")]
    InvalidComment(String),
    /// Deleting a comment someone else wrote on someone else's note.
    #[error(
        "只能删除自己的评论或自己笔记下的评论 (only the comment's author or the note's may \
         delete a comment)"
    )]
    NotYourComment,
    /// The user posted `HMDP_COMMENT_USER_DAILY_COUNT` comments today; until the next midnight.
    #[error("daily comment quota spent ({count} comments a day)")]
    CommentQuota {
        count: u64,
        retry_after: std::time::Duration,
    },
    /// No such user.
    #[error("用户不存在 (no such user)")]
    UserNotFound,
    /// A user cannot follow themselves.
    #[error("不能关注自己 (you cannot follow yourself)")]
    FollowSelf,
    /// The user already follows as many users as `HMDP_FOLLOW_MAX` allows.
    #[error("关注人数已达上限 (at most {0} follows)")]
    FollowLimit(u64),
    /// A note's set of likers kept vanishing while it was rebuilt (Redis is losing data).
    #[error("the likers of a note could not be loaded into redis")]
    LikesNotLoaded,
}

impl Answered for SocialError {
    fn answer(&self) -> Answer {
        use SocialError as E;
        let refused = match self {
            E::Storage(s) => return s.answer(),
            E::Redis(r) => return r.answer(),
            E::Catalogue(c) => return c.answer(),
            E::LikesNotLoaded => return Answer::Unavailable("redis"),
            E::BlogNotFound => Refused::new(ErrorCode::BlogNotFound, "笔记不存在"),
            E::InvalidBlog(msg) => Refused::new(ErrorCode::InvalidBlog, msg.clone()),
            E::NotYourBlog => Refused::new(
                ErrorCode::NotYourBlog,
                "只能删除自己的笔记 (only the author may delete a note)",
            ),
            E::CommentNotFound => {
                Refused::new(ErrorCode::CommentNotFound, "评论不存在 (no such comment)")
            }
            E::InvalidComment(msg) => Refused::new(ErrorCode::InvalidComment, msg.clone()),
            E::NotYourComment => Refused::new(
                ErrorCode::NotYourComment,
                "只能删除自己的评论或自己笔记下的评论 (only the comment's author or the note's \
                 may delete a comment)",
            ),
            E::CommentQuota { count, retry_after } => Refused::new(
                ErrorCode::CommentQuota,
                format!("今日评论已达上限 (daily comment quota spent: {count} comments a day)"),
            )
            .retry_after(*retry_after),
            E::UserNotFound => Refused::new(ErrorCode::UserNotFound, "用户不存在 (no such user)"),
            E::FollowSelf => Refused::new(
                ErrorCode::FollowSelf,
                "不能关注自己 (you cannot follow yourself)",
            ),
            E::FollowLimit(max) => Refused::new(
                ErrorCode::FollowLimit,
                format!("关注人数已达上限 (you follow {max} users, the most allowed)"),
            ),
        };
        refused.into()
    }
}

/// How many commands go to Redis in one pipeline (single node), or at once (cluster).
const BATCH: usize = 500;

/// The social service: notes with likes, follows and the push/pull feed.
#[derive(Clone)]
pub struct Social {
    db: Db,
    redis: RedisConn,
    keys: Keys,
    settings: SocialSettings,
    catalogue: Catalogue,
    /// Fan-outs.
    background: Arc<Background>,
    /// Start-up jobs (the adoption of like sets).
    jobs: Arc<Background>,
}

impl Social {
    pub fn new(
        db: Db,
        redis: RedisConn,
        keys: Keys,
        settings: SocialSettings,
        catalogue: Catalogue,
    ) -> Self {
        Self {
            db,
            redis,
            keys,
            settings,
            catalogue,
            background: Arc::default(),
            jobs: Arc::default(),
        }
    }

    /// Finishes background work (fan-outs in flight) and stops the start-up jobs (after the
    /// note they are at) before the process exits.
    pub async fn shutdown(&self) {
        self.jobs.stopping.store(true, Ordering::Release);
        self.background.idle().await;
        self.jobs.idle().await;
    }

    /// Fan-outs running in the background right now.
    #[cfg(feature = "test-util")]
    pub fn fan_outs_in_flight(&self) -> usize {
        self.background.running.load(Ordering::Acquire)
    }

    fn conn(&self) -> RedisConn {
        self.redis.clone()
    }

    /// Runs independent one-key commands and returns their replies in order: pipelined on a
    /// single node, concurrently (each routed to its slot's node) on a cluster, where one
    /// pipeline may not span slots.
    async fn query_each<T: FromRedisValue + Send + 'static>(
        &self,
        cmds: Vec<Cmd>,
    ) -> RedisResult<Vec<T>> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        match &self.redis {
            RedisConn::Single(_) | RedisConn::Sentinel(_) => {
                let mut out = Vec::with_capacity(cmds.len());
                for chunk in cmds.chunks(BATCH) {
                    let mut pipe = Pipeline::with_capacity(chunk.len());
                    for c in chunk {
                        pipe.add_command(c.clone());
                    }
                    let replies: Vec<T> = pipe.query_async(&mut self.conn()).await?;
                    out.extend(replies);
                }
                Ok(out)
            }
            RedisConn::Cluster(_) => {
                futures_util::stream::iter(cmds)
                    .map(|c| {
                        let mut conn = self.conn();
                        async move { c.query_async::<T>(&mut conn).await }
                    })
                    .buffered(BATCH)
                    .try_collect()
                    .await
            }
        }
    }
}

/// Counts background tasks so that shutdown can wait for them.
#[derive(Debug, Default)]
struct Background {
    running: AtomicUsize,
    done: Notify,
    /// Set on shutdown: long tasks stop at their next step.
    stopping: AtomicBool,
}

impl Background {
    fn spawn(self: &Arc<Self>, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.running.fetch_add(1, Ordering::AcqRel);
        let me = self.clone();
        tokio::spawn(async move {
            task.await;
            if me.running.fetch_sub(1, Ordering::AcqRel) == 1 {
                me.done.notify_waiters();
            }
        });
    }

    async fn idle(&self) {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            done.await;
        }
    }
}

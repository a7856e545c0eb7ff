//! The followers' feed: push to inboxes, pull from big authors' outboxes, one scroll over both.
//!
//! **Push** (the original): publishing a note adds its id, scored by the publish time in ms, to
//! `feed:{followerId}` of every follower, trimmed to `HMDP_FEED_INBOX_MAX` newest entries.
//! Commands go in pipelines of [`BATCH`](super::BATCH) (on a cluster, where a pipeline may not
//! span slots, as concurrent single commands). An author with up to one batch of followers is
//! fanned out before `POST /blog` answers; a larger fan-out runs in a background task that
//! [`Social::shutdown`] waits for.
//!
//! **Pull** (the hybrid): an author with more than `HMDP_FEED_PUSH_MAX_FOLLOWERS` followers
//! (default 5,000; `0` pulls for everyone) is not fanned out, which would cost one ZADD and
//! one inbox entry per follower for every note. The note goes to the author's own
//! `feed:outbox:{authorId}` (trimmed like an inbox) and the author joins
//! `feed:pulled-authors`. Reading a feed merges the reader's inbox with the outboxes of the
//! pulled authors the reader follows. The threshold is checked per note, so an author's notes
//! are each in exactly one place (inboxes or the outbox) and the merge needs no de-duplication
//! beyond a guard; an author stays in `feed:pulled-authors` once there, so older outbox notes
//! stay readable after the author drops below the threshold.
//!
//! **Follows do not backfill**: a new follower's inbox gets the author's future notes only, as
//! in the original. For a pulled author the follower sees the outbox (the author's recent
//! notes) at once, and stops seeing them at unfollow; pushed notes stay in an inbox after an
//! unfollow, as in the original.
//!
//! **Deleted notes** leave the inboxes of the author's followers and the author's outbox
//! ([`Social::withdraw`]); an entry that stays (in an ex-follower's inbox) names no note and
//! the scroll's read of the notes leaves it out.
//!
//! **Scroll** (`/blog/of/follow?lastId=&offset=`): the original's `ZREVRANGEBYSCORE feed:{me}
//! lastId 0 WITHSCORES LIMIT offset 2`, two notes per page, newest first. The reply's `minTime`
//! is the smallest score on the page and `offset` the number of notes on the page with that
//! score, plus the request's `offset` when that score is still `lastId` (the whole page tied
//! with the notes skipped before it). The next request sends them back as `lastId` and
//! `offset`, so notes that share a millisecond are neither skipped nor shown twice. The merged
//! stream orders like Redis: score descending, then member descending (bytewise), and each
//! source contributes its first `offset + 2` entries at or below `lastId`, which hold the
//! merged stream's first `offset + 2`.

use std::collections::HashSet;

use futures_util::{StreamExt, TryStreamExt};
use redis::{Pipeline, RedisResult};
use serde::Serialize;

use super::{BATCH, Blog, Social, SocialError};
use crate::{
    domain::{BlogId, UserId},
    kv::RedisConn,
    storage::{blogs, follows},
};

/// Notes per feed page (the original's 2).
pub(crate) const FEED_PAGE: usize = 2;

/// The largest `offset` accepted: more notes than this with one millisecond is not a feed.
pub(crate) const MAX_OFFSET: usize = 10_000;

/// One page of the feed: the original's `ScrollResult`.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScrollResult {
    /// The notes, newest first.
    pub list: Vec<Blog>,
    /// The smallest score (publish time, ms) on the page: the next request's `lastId`.
    pub min_time: i64,
    /// How many notes with score `minTime` have been shown: the next request's `offset`.
    pub offset: usize,
}

/// Entries of a feed source: (note id, score).
type Entries = Vec<(String, f64)>;

impl Social {
    /// Hands a new note to the followers' feeds: pushed to each inbox, or put in the author's
    /// outbox when the author has too many followers. Failures are logged: the note is saved
    /// either way, and a retry would publish it twice.
    pub(super) async fn distribute(&self, author: UserId, blog: BlogId, score: i64) {
        let max = self.settings.feed_push_max_followers;
        let followers = if max == 0 {
            None
        } else {
            match follows::followers(&self.db, author, max.saturating_add(1)).await {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!(error = %e, %author, %blog, "cannot read the followers: the note reaches no feed");
                    return;
                }
            }
        };
        match followers {
            Some(f) if f.len() as u64 <= max => {
                if f.len() <= BATCH {
                    if let Err(e) = self.push(&f, blog, score).await {
                        tracing::warn!(error = %e, %author, %blog, "fan-out failed");
                    }
                } else {
                    let me = self.clone();
                    self.background.spawn(async move {
                        let started = std::time::Instant::now();
                        match me.push(&f, blog, score).await {
                            Ok(()) => tracing::debug!(
                                followers = f.len(), %blog, took = ?started.elapsed(), "fan-out done"
                            ),
                            Err(e) => tracing::warn!(error = %e, %author, %blog, "fan-out failed"),
                        }
                    });
                }
            }
            _ => {
                if let Err(e) = self.to_outbox(author, blog, score).await {
                    tracing::warn!(error = %e, %author, %blog, "cannot add the note to the outbox");
                }
            }
        }
    }

    /// Takes a deleted note out of the feeds: the inbox of every follower of its author and
    /// the author's outbox. Like a fan-out, a large one runs in the background, and failures
    /// are logged (a scroll leaves out entries of notes that are gone).
    pub(super) async fn withdraw(&self, author: UserId, blog: BlogId) {
        let followers = match follows::followers(&self.db, author, u64::MAX).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, %author, %blog, "cannot read the followers: a deleted note stays in their inboxes");
                Vec::new()
            }
        };
        let mut keys: Vec<String> = followers.iter().map(|f| self.keys.feed(*f)).collect();
        keys.push(self.keys.feed_outbox(author.get()));
        let me = self.clone();
        let remove = async move {
            let cmds = keys
                .iter()
                .map(|k| {
                    let mut c = redis::cmd("ZREM");
                    c.arg(k).arg(blog.get());
                    c
                })
                .collect();
            if let Err(e) = me.query_each::<i64>(cmds).await {
                tracing::warn!(error = %e, %author, %blog, "cannot take a deleted note out of the feeds");
            }
        };
        if followers.len() < BATCH {
            remove.await;
        } else {
            self.background.spawn(remove);
        }
    }

    /// `ZADD feed:{f} score blog` + trim, for every follower `f`.
    async fn push(&self, followers: &[i64], blog: BlogId, score: i64) -> RedisResult<()> {
        let keep = self.keep();
        for chunk in followers.chunks(BATCH) {
            match &self.redis {
                RedisConn::Single(_) | RedisConn::Sentinel(_) => {
                    let mut pipe = Pipeline::with_capacity(chunk.len() * 2);
                    for f in chunk {
                        add_and_trim(&mut pipe, &self.keys.feed(*f), blog, score, keep);
                    }
                    pipe.query_async::<()>(&mut self.conn()).await?;
                }
                RedisConn::Cluster(_) => {
                    let pipes: Vec<Pipeline> = chunk
                        .iter()
                        .map(|f| {
                            let mut pipe = Pipeline::with_capacity(2);
                            add_and_trim(&mut pipe, &self.keys.feed(*f), blog, score, keep);
                            pipe
                        })
                        .collect();
                    futures_util::stream::iter(pipes)
                        .map(|pipe| {
                            let mut conn = self.conn();
                            async move { pipe.query_async::<()>(&mut conn).await }
                        })
                        .buffer_unordered(64)
                        .try_collect::<Vec<()>>()
                        .await?;
                }
            }
        }
        Ok(())
    }

    /// Puts a pulled author's note in the outbox and the author among the pulled ones.
    async fn to_outbox(&self, author: UserId, blog: BlogId, score: i64) -> RedisResult<()> {
        let mut pipe = Pipeline::with_capacity(2);
        add_and_trim(
            &mut pipe,
            &self.keys.feed_outbox(author.get()),
            blog,
            score,
            self.keep(),
        );
        pipe.query_async::<()>(&mut self.conn()).await?;
        redis::AsyncCommands::sadd::<_, _, ()>(
            &mut self.conn(),
            self.keys.feed_pulled_authors(),
            author.get(),
        )
        .await
    }

    fn keep(&self) -> isize {
        isize::try_from(self.settings.feed_inbox_max.max(1)).unwrap_or(isize::MAX)
    }

    /// One page of `user`'s feed: notes scored at most `last_id`, skipping the first `offset`
    /// of those; `None` when there is nothing (the original's empty `ok()`).
    pub async fn scroll(
        &self,
        user: UserId,
        last_id: i64,
        offset: usize,
    ) -> Result<Option<ScrollResult>, SocialError> {
        let offset = offset.min(MAX_OFFSET);
        let pulled: Vec<i64> =
            redis::AsyncCommands::smembers(&mut self.conn(), self.keys.feed_pulled_authors())
                .await?;
        let authors = self.followed_among(user, &pulled).await?;
        let inbox = self.keys.feed(user.get());
        let page: Entries = if authors.is_empty() {
            range(&inbox, last_id, offset, FEED_PAGE)
                .query_async(&mut self.conn())
                .await?
        } else {
            let mut cmds = vec![range(&inbox, last_id, 0, offset + FEED_PAGE)];
            for a in &authors {
                cmds.push(range(
                    &self.keys.feed_outbox(*a),
                    last_id,
                    0,
                    offset + FEED_PAGE,
                ));
            }
            let sources: Vec<Entries> = self.query_each(cmds).await?;
            merge_page(sources, offset, FEED_PAGE)
        };
        let Some(&(_, min)) = page.last() else {
            return Ok(None);
        };
        let min_time = min as i64;
        let mut next = page.iter().filter(|(_, s)| *s as i64 == min_time).count();
        if min_time == last_id {
            next += offset;
        }
        let ids: Vec<BlogId> = page
            .iter()
            .filter_map(|(m, _)| m.parse::<i64>().ok())
            .filter_map(|id| BlogId::new(id).ok())
            .collect();
        let rows = blogs::find_many(&self.db, &ids).await?;
        Ok(Some(ScrollResult {
            list: self.views(rows, Some(user)).await?,
            min_time,
            offset: next,
        }))
    }
}

fn add_and_trim(pipe: &mut Pipeline, key: &str, blog: BlogId, score: i64, keep: isize) {
    pipe.zadd(key, blog.get(), score)
        .ignore()
        .zremrangebyrank(key, 0, -(keep + 1))
        .ignore();
}

/// `ZREVRANGEBYSCORE key max 0 WITHSCORES LIMIT offset count`.
fn range(key: &str, max: i64, offset: usize, count: usize) -> redis::Cmd {
    let mut c = redis::cmd("ZREVRANGEBYSCORE");
    c.arg(key)
        .arg(max)
        .arg(0)
        .arg("WITHSCORES")
        .arg("LIMIT")
        .arg(offset)
        .arg(count);
    c
}

/// Merges sources (each already newest first) into one stream ordered like Redis orders one
/// sorted set (score descending, then member descending), drops repeated members, skips
/// `offset` and takes `count`.
fn merge_page(sources: Vec<Entries>, offset: usize, count: usize) -> Entries {
    let mut all: Entries = sources.into_iter().flatten().collect();
    all.sort_by(|(ma, sa), (mb, sb)| {
        sb.total_cmp(sa)
            .then_with(|| mb.as_bytes().cmp(ma.as_bytes()))
    });
    let mut seen = HashSet::new();
    all.into_iter()
        .filter(|(m, _)| seen.insert(m.clone()))
        .skip(offset)
        .take(count)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(m: &str, s: f64) -> (String, f64) {
        (m.to_owned(), s)
    }

    #[test]
    fn merged_sources_order_like_one_sorted_set() {
        let inbox = vec![e("9", 300.0), e("7", 200.0), e("5", 200.0)];
        let outbox = vec![e("8", 200.0), e("6", 100.0)];
        let all = merge_page(vec![inbox.clone(), outbox.clone()], 0, 10);
        let ids: Vec<&str> = all.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(ids, ["9", "8", "7", "5", "6"]);
        let page = merge_page(vec![inbox, outbox], 1, 2);
        assert_eq!(page, vec![e("8", 200.0), e("7", 200.0)]);
        let dup = merge_page(vec![vec![e("1", 5.0)], vec![e("1", 5.0)]], 0, 2);
        assert_eq!(dup, vec![e("1", 5.0)]);
    }
}

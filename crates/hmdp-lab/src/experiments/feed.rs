//! 好友关注: the feed. An author's notes are pushed into a follower's inbox, a ZSET scored by
//! the time each was written (`feed:{user}`); the follower scrolls it a page at a time, newest
//! first, while the author goes on writing. Paging by position (`ZREVRANGE` from
//! `page × size`) shifts under each new note: what was on the last page comes again. Scrolling
//! by score (`ZREVRANGEBYSCORE` from the last page's smallest score) does not shift, but notes
//! written in the same millisecond share a score, and without the offset that skips those
//! already shown, they come again; with it (the course's version) every note shows once.
//!
//! The notes are rows of `tb_blog`; each page is loaded from the database by its ids, as the
//! service does, so a note shown twice is also read twice.

use super::{Experiment, Text, version};
use crate::{Lab, Outcome};

/// Notes in the inbox when the follower starts scrolling.
const NOTES: i64 = 30;
/// Notes written at once share a millisecond: this many to a score.
const SAME_MS: i64 = 3;
/// Notes the author writes after each page the follower reads.
const NEW_PER_PAGE: i64 = 2;
/// The page size.
const PAGE: i64 = 10;

pub static EXPERIMENT: Experiment = Experiment {
    name: "feed-paging",
    chapter: "好友关注",
    invariant: "scrolling the feed to its end shows each note that was there when scrolling began \
                exactly once, while new notes arrive",
    invariant_zh: "一边有新笔记进来，一边把收件箱翻到底：开始翻时已有的每篇笔记恰好出现一次",
    lesson: Text {
        zh: "会变的有序集合不能按位置分页：按上一页的最小分数往下翻，并用 offset 跳过同分数里已经看过的。",
        en: "Do not page a growing sorted set by position: scroll from the last page's smallest score, with an offset past the notes of that score already shown.",
    },
    versions: &[
        version!(
            "offset-paging",
            false,
            "ZREVRANGE feed page × size … : every new note shifts the pages by one",
            "ZREVRANGE 按 页号 × 每页条数 取：每来一篇新笔记，后面的页就整体后移一位",
            offset_paging
        ),
        version!(
            "max-score-no-offset",
            false,
            "ZREVRANGEBYSCORE from the last page's smallest score, LIMIT 0: notes of that score again",
            "ZREVRANGEBYSCORE 从上一页的最小分数开始、LIMIT 0：同分数的笔记会再出现",
            max_score_no_offset
        ),
        version!(
            "scroll",
            true,
            "the course's scroll: max = the last page's smallest score, offset = notes of that score shown",
            "课程的滚动分页：max 取上一页的最小分数，offset 取这个分数已经看过的条数",
            scroll
        ),
    ],
};

#[derive(Clone, Copy, PartialEq)]
enum Paging {
    ByPosition,
    ByScore { offset: bool },
}

async fn offset_paging(lab: &Lab) -> anyhow::Result<Outcome> {
    read_to_the_end(lab, "offset", Paging::ByPosition).await
}

async fn max_score_no_offset(lab: &Lab) -> anyhow::Result<Outcome> {
    read_to_the_end(lab, "no-offset", Paging::ByScore { offset: false }).await
}

async fn scroll(lab: &Lab) -> anyhow::Result<Outcome> {
    read_to_the_end(lab, "scroll", Paging::ByScore { offset: true }).await
}

/// The author's inbox writes: the note in `tb_blog`, its id into the follower's inbox at `ms`.
struct Author<'a> {
    lab: &'a Lab,
    inbox: String,
    next_id: i64,
    ms: i64,
    written: i64,
}

impl Author<'_> {
    async fn write(&mut self) -> anyhow::Result<i64> {
        let id = self.next_id;
        self.next_id += 1;
        sqlx::query("INSERT INTO tb_blog (id, shop_id, user_id, title) VALUES (?, 1, 1, 'lab')")
            .bind(id)
            .execute(&self.lab.db)
            .await?;
        // Notes written together share a millisecond; time moves on for the next group.
        if self.written % SAME_MS == 0 {
            self.ms += 1;
        }
        self.written += 1;
        let mut redis = self.lab.redis.clone();
        redis::cmd("ZADD")
            .arg(&self.inbox)
            .arg(self.ms)
            .arg(id)
            .query_async::<()>(&mut redis)
            .await?;
        Ok(id)
    }
}

/// Fills an inbox with [`NOTES`], then scrolls it page by page until a page comes back short
/// (or empty), the author writing [`NEW_PER_PAGE`] after each page; counts what the first notes
/// came to.
async fn read_to_the_end(lab: &Lab, name: &str, how: Paging) -> anyhow::Result<Outcome> {
    let first_id: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM tb_blog")
        .fetch_one(&lab.db)
        .await?;
    let mut author = Author {
        lab,
        inbox: lab.key(&format!("feed:{name}")),
        next_id: first_id,
        ms: 1_700_000_000_000,
        written: 0,
    };
    let mut before = Vec::new();
    for _ in 0..NOTES {
        before.push(author.write().await?);
    }
    let mut redis = lab.redis.clone();
    let mut shown: Vec<i64> = Vec::new();
    let (mut page_no, mut max, mut offset) = (0_i64, f64::INFINITY, 0_i64);
    let mut pages = 0;
    loop {
        let page: Vec<(i64, f64)> = match how {
            Paging::ByPosition => {
                redis::cmd("ZREVRANGE")
                    .arg(&author.inbox)
                    .arg(page_no * PAGE)
                    .arg(page_no * PAGE + PAGE - 1)
                    .arg("WITHSCORES")
                    .query_async(&mut redis)
                    .await?
            }
            Paging::ByScore { .. } => {
                redis::cmd("ZREVRANGEBYSCORE")
                    .arg(&author.inbox)
                    .arg(if max.is_finite() {
                        max.to_string()
                    } else {
                        "+inf".into()
                    })
                    .arg(0)
                    .arg("WITHSCORES")
                    .arg("LIMIT")
                    .arg(offset)
                    .arg(PAGE)
                    .query_async(&mut redis)
                    .await?
            }
        };
        if page.is_empty() {
            break;
        }
        pages += 1;
        let ids: Vec<i64> = page.iter().map(|(id, _)| *id).collect();
        shown.extend(load(lab, &ids).await?);
        // Where the next page starts: after this page's position, or at its smallest score,
        // past the notes of that score shown on it (and before it, when the page is all one
        // score) when the version keeps an offset.
        page_no += 1;
        let min = page.last().map(|(_, s)| *s).unwrap_or(max);
        let at_min = page.iter().rev().take_while(|(_, s)| *s == min).count() as i64;
        offset = match how {
            Paging::ByScore { offset: true } if min == max => offset + at_min,
            Paging::ByScore { offset: true } => at_min,
            _ => 0,
        };
        max = min;
        // A short page is the last one, as the client takes it.
        if page.len() < PAGE as usize || pages > NOTES {
            break;
        }
        for _ in 0..NEW_PER_PAGE {
            author.write().await?;
        }
    }
    let times = |id: &i64| shown.iter().filter(|s| *s == id).count();
    let duplicates = before.iter().filter(|id| times(id) > 1).count();
    let skipped = before.iter().filter(|id| times(id) == 0).count();
    Ok(Outcome::new(duplicates == 0 && skipped == 0)
        .metric("notes", NOTES)
        .metric("same_ms", SAME_MS)
        .metric("page_size", PAGE)
        .metric("pages", pages)
        .metric("arrived_while_scrolling", author.written - NOTES)
        .metric("shown", shown.len() as u64)
        .metric("shown_twice", duplicates as u64)
        .metric("skipped", skipped as u64))
}

/// The notes of one page, read from `tb_blog` by id: the ids found, in the page's order.
async fn load(lab: &Lab, ids: &[i64]) -> anyhow::Result<Vec<i64>> {
    let marks = vec!["?"; ids.len()].join(", ");
    let sql = format!("SELECT id FROM tb_blog WHERE id IN ({marks})");
    let mut q = sqlx::query_scalar::<_, i64>(&sql);
    for id in ids {
        q = q.bind(id);
    }
    let found = q.fetch_all(&lab.db).await?;
    Ok(ids
        .iter()
        .copied()
        .filter(|id| found.contains(id))
        .collect())
}

//! 达人探店: likes. The like button is a toggle: a click on a note you have not liked likes it,
//! a click on one you have unlikes it. Every user here likes the note, and every other one
//! double-clicks: two clicks at once, which should leave them where they began. The
//! course checks who liked the note (`ZSCORE blog:liked:{id} user`), then acts (`UPDATE tb_blog
//! SET liked = liked ± 1`, then `ZADD` or `ZREM`), so both clicks can see "not liked" and both
//! like: the count in the database grows by two while the set holds the user once. The fix lets
//! one Lua script check and toggle the set together and answers which way it went; the database
//! then moves by that answer, so the count always equals the set's size.

use std::time::Duration;

use redis::Script;

use super::{Experiment, Text, version};
use crate::{
    Lab, Outcome, Trace,
    trace::{Actor, Event, What},
};

/// Users, each clicking once; the even ones click twice at once.
const USERS: i64 = 40;
/// The course's round trip to the database between the check and the `ZADD`: it makes the race
/// the chapter is about happen on every run instead of now and then.
const WINDOW: Duration = Duration::from_millis(20);

pub static EXPERIMENT: Experiment = Experiment {
    name: "likes",
    chapter: "达人探店",
    invariant: "a note's like count in the database equals the number of users in its liked set",
    invariant_zh: "笔记在数据库里的点赞数，等于它的点赞集合里的用户数",
    lesson: Text {
        zh: "“先查是否点过、再改计数”要原子：让 Lua 脚本一次完成判断和增删，数据库按脚本的答复加减。",
        en: "Checking whether the user liked it and moving the count must be one step: a Lua script toggles the set and says which way, the database follows that answer.",
    },
    versions: &[
        version!(
            "check-then-like",
            false,
            "the course: ZSCORE to check, then UPDATE liked ± 1 and ZADD / ZREM",
            "课程的写法：先 ZSCORE 判断，再 UPDATE liked ± 1，然后 ZADD / ZREM",
            check_then_like
        ),
        version!(
            "lua-toggle",
            true,
            "one Lua script checks and toggles the liked set; UPDATE liked by the ±1 it answers",
            "一个 Lua 脚本判断并切换点赞集合，数据库按它答复的 ±1 更新 liked",
            lua_toggle
        ),
    ],
};

/// Likes or unlikes as the set says, in one step: `1` when it liked, `-1` when it unliked.
const TOGGLE: &str = r"
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return -1
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
";

#[derive(Clone, Copy)]
enum Click {
    CheckThenAct,
    Script,
}

async fn check_then_like(lab: &Lab) -> anyhow::Result<Outcome> {
    double_clicks(lab, Click::CheckThenAct).await
}

async fn lua_toggle(lab: &Lab) -> anyhow::Result<Outcome> {
    double_clicks(lab, Click::Script).await
}

/// A new note, then every user's click, and the even users' second click, at once; the count in
/// the database against the set.
async fn double_clicks(lab: &Lab, how: Click) -> anyhow::Result<Outcome> {
    let blog = new_blog(lab).await?;
    let key = lab.key(&format!("blog:liked:{blog}"));
    let trace = Trace::start();
    let mut clicks = Vec::new();
    for user in 1..=USERS {
        for n in 1..=(1 + i64::from(user % 2 == 0)) {
            let (db, mut redis, key) = (lab.db.clone(), lab.redis.clone(), key.clone());
            let (trace, me) = (
                trace.clone(),
                Actor::Request {
                    user,
                    n,
                    instance: None,
                },
            );
            clicks.push(tokio::spawn(async move {
                let now = chrono::Utc::now().timestamp_millis();
                let delta: i64 = match how {
                    Click::CheckThenAct => {
                        let score: Option<f64> = redis::cmd("ZSCORE")
                            .arg(&key)
                            .arg(user)
                            .query_async(&mut redis)
                            .await?;
                        trace.record(
                            me,
                            What::CheckLiked {
                                liked: score.is_some(),
                            },
                        );
                        tokio::time::sleep(WINDOW).await;
                        if score.is_some() { -1 } else { 1 }
                    }
                    Click::Script => {
                        let delta = Script::new(TOGGLE)
                            .key(&key)
                            .arg(user)
                            .arg(now)
                            .invoke_async(&mut redis)
                            .await?;
                        trace.record(me, What::ToggleScript { delta });
                        delta
                    }
                };
                sqlx::query("UPDATE tb_blog SET liked = liked + ? WHERE id = ?")
                    .bind(delta)
                    .bind(blog)
                    .execute(&db)
                    .await?;
                trace.record(me, What::UpdateLiked { delta });
                if let Click::CheckThenAct = how {
                    let verb = if delta > 0 { "ZADD" } else { "ZREM" };
                    let mut cmd = redis::cmd(verb);
                    cmd.arg(&key);
                    if delta > 0 {
                        cmd.arg(now);
                    }
                    cmd.arg(user).query_async::<()>(&mut redis).await?;
                    trace.record(me, What::SetLiked { added: delta > 0 });
                }
                anyhow::Ok(())
            }));
        }
    }
    for c in clicks {
        c.await??;
    }
    let liked: i64 = sqlx::query_scalar("SELECT CAST(liked AS SIGNED) FROM tb_blog WHERE id = ?")
        .bind(blog)
        .fetch_one(&lab.db)
        .await?;
    let mut redis = lab.redis.clone();
    let likers: i64 = redis::cmd("ZCARD")
        .arg(&key)
        .query_async(&mut redis)
        .await?;
    trace.record(Actor::Lab, What::LikesVsSet { liked, likers });
    let shown = double_liked(&trace.events());
    let timeline = trace.timeline(|e| e.actor == Actor::Lab || e.actor.user() == shown, 64);
    Ok(Outcome::new(liked == likers)
        .metric("users", USERS)
        .metric("clicks", USERS + USERS / 2)
        .metric("liked_in_db", liked)
        .metric("likers_in_set", likers)
        .metric("miscounted", (liked - likers).abs())
        .metric("blog", blog)
        .traced(timeline))
}

/// The first user both of whose clicks saw "not liked" and added a like: the double count.
fn double_liked(events: &[Event]) -> Option<i64> {
    let mut added: std::collections::BTreeMap<i64, (u32, u64)> = Default::default();
    for e in events {
        if let (What::UpdateLiked { delta: 1 }, Some(user)) = (&e.what, e.actor.user()) {
            let seen = added.entry(user).or_insert((0, e.t_us));
            seen.0 += 1;
            seen.1 = e.t_us;
        }
    }
    added
        .into_iter()
        .filter(|(_, (n, _))| *n >= 2)
        .min_by_key(|(_, (_, at))| *at)
        .map(|(user, _)| user)
}

/// A new note in `tb_blog` with no likes: its id.
async fn new_blog(lab: &Lab) -> anyhow::Result<i64> {
    let id: i64 = sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) + 1 FROM tb_blog")
        .fetch_one(&lab.db)
        .await?;
    sqlx::query("INSERT INTO tb_blog (id, shop_id, user_id, title) VALUES (?, 1, 1, 'lab')")
        .bind(id)
        .execute(&lab.db)
        .await?;
    Ok(id)
}

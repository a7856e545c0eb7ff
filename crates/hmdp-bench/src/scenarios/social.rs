//! `social`: likes, the hot list, feed reads, and the fan-out to many followers.
//!
//! In-process only (the fan-out phases insert follower rows straight into the database and
//! read Redis memory under the server's prefix). Phases:
//!
//! 1. `PUT /blog/like/{id}`: every connection toggles one hot note (the row lock and the Lua
//!    script serialise them), then toggles spread over 50 notes; afterwards
//!    `tb_blog.liked` must equal `ZCARD blog:liked:{id}` for every note (a failed check fails
//!    the run).
//! 2. `GET /blog/hot`, anonymous (one query) and logged in (plus one pipelined `ZSCORE` per
//!    note for `isLike`).
//! 3. `GET /blog/of/follow` first pages of 64 readers who follow 4 authors (40 notes each
//!    inbox), next to a raw `ZREVRANGEBYSCORE` of one inbox.
//! 4. One note by an author with `--followers` followers (default 100,000), pushed (threshold
//!    above the count) and pulled (the default threshold, 5,000): time to publish (the HTTP
//!    answer, and until the last inbox has it), the Redis memory it costs (`MEMORY USAGE` of
//!    every key written), and the readers' feed latency on each; next to a raw pipelined
//!    `ZADD` + trim into as many keys over one connection.

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Args;

use super::setup::{CodeSource, User, create_users};
use crate::{
    Cli,
    check::Check,
    load::{Conn, Req, Stop, redis_phase, request_phase},
    report::{Report, Row},
    server::{self, BenchServer, Database},
};

#[derive(Debug, Clone, Args)]
pub struct SocialArgs {
    /// Followers of the author in the fan-out phases.
    #[arg(long, default_value_t = 100_000)]
    pub followers: u64,
    /// Users who toggle likes.
    #[arg(long, default_value_t = 200)]
    pub users: usize,
}

/// Readers whose feeds are read (they log in; the other followers are rows only).
const READERS: usize = 64;

pub async fn run(cli: &Cli, args: &SocialArgs) -> anyhow::Result<Report> {
    anyhow::ensure!(
        cli.url.is_none(),
        "the social scenario starts its own servers (no --url)"
    );
    let duration = Duration::from_secs(cli.seconds);
    let c = cli.connections;
    let db = Database::from_flag(cli.database_url.as_deref());
    let mut report = Report::new("social", c);

    // ---- likes, hot list, feed reads ----
    let s = server::start_on(&cli.redis_url, &db, |_| {}).await?;
    let users = create_users(
        s.addr,
        &CodeSource::Sms(s.sms.clone()),
        args.users.max(READERS + 4),
        16,
    )
    .await?;
    let mut conn = Conn::connect(s.addr).await?;
    let mut notes = Vec::new();
    for i in 0..50 {
        notes.push(publish(&mut conn, &users[0], &format!("hmdp-bench note {i}")).await?);
    }
    let (authors, readers) = (&users[..4], &users[4..4 + READERS]);
    for r in readers {
        for a in authors {
            follow(&mut conn, r, a.id).await?;
        }
    }
    for a in authors {
        for i in 0..10 {
            publish(&mut conn, a, &format!("feed note {i}")).await?;
        }
    }

    let tokens: Arc<Vec<String>> = Arc::new(users.iter().map(|u| u.token.clone()).collect());
    let hot_note = notes[0];
    let t = tokens.clone();
    let o = request_phase(
        "like toggle, one note",
        s.addr,
        c,
        Stop::After(duration),
        false,
        Arc::new(move |i| {
            Req::put(format!("/api/blog/like/{hot_note}"))
                .header("authorization", &t[i as usize % t.len()])
        }),
    )
    .await?;
    report.rows.push(
        Row::from_outcome("PUT /blog/like/{id}, one hot note", &o)
            .note("every toggle of the note waits for the row lock")
            .charted(),
    );
    let (t, n) = (tokens.clone(), Arc::new(notes.clone()));
    let o = request_phase(
        "like toggle, 50 notes",
        s.addr,
        c,
        Stop::After(duration),
        false,
        Arc::new(move |i| {
            let i = i as usize;
            Req::put(format!("/api/blog/like/{}", n[i % n.len()]))
                .header("authorization", &t[(i / n.len()) % t.len()])
        }),
    )
    .await?;
    report.rows.push(
        Row::from_outcome("PUT /blog/like/{id}, 50 notes", &o)
            .note("SQLite: one writer at a time for all notes; MariaDB: a row lock per note")
            .charted(),
    );
    report.checks.push(likes_match(&s, &notes).await?);

    let o = request_phase(
        "GET /blog/hot anonymous",
        s.addr,
        c,
        Stop::After(duration),
        false,
        Arc::new(|i| Req::get(format!("/api/blog/hot?current={}", i % 5 + 1))),
    )
    .await?;
    report.rows.push(
        Row::from_outcome("GET /blog/hot?current=1..5, anonymous", &o)
            .note("one query: notes joined with their authors")
            .charted(),
    );
    let t = tokens.clone();
    let o = request_phase(
        "GET /blog/hot logged in",
        s.addr,
        c,
        Stop::After(duration),
        false,
        Arc::new(move |i| {
            Req::get(format!("/api/blog/hot?current={}", i % 5 + 1))
                .header("authorization", &t[i as usize % t.len()])
        }),
    )
    .await?;
    report.rows.push(
        Row::from_outcome("GET /blog/hot?current=1..5, logged in", &o)
            .note("+ session read + 10 pipelined ZSCORE for isLike"),
    );

    let feed = feed_phase(
        "GET /blog/of/follow (40-note inbox)",
        s.addr,
        c,
        duration,
        readers,
    )
    .await?;
    report.rows.push(
        Row::from_outcome("GET /blog/of/follow, first page, 40-note inbox", &feed)
            .note("+ session read, SMEMBERS of the pulled authors, 1 ZREVRANGEBYSCORE, 1 query"),
    );
    let inbox = format!("{}feed:{}", s.prefix, readers[0].id);
    let far = chrono::Local::now().timestamp_millis() + 3_600_000;
    let raw = redis_phase(
        "raw ZREVRANGEBYSCORE",
        &cli.redis_url,
        c,
        duration,
        Arc::new(move |_| {
            let mut cmd = redis::cmd("ZREVRANGEBYSCORE");
            cmd.arg(&inbox)
                .arg(far)
                .arg(0)
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(2);
            cmd
        }),
    )
    .await?;
    report.rows.push(Row::from_outcome(
        &format!("raw Redis ZREVRANGEBYSCORE … LIMIT 0 2, {c} connections"),
        &raw,
    ));
    report.summary.push(format!(
        "feed read vs raw ZREVRANGEBYSCORE of the inbox, same run: {:.2}× the rate, p99 {:.2} ms",
        feed.rate() / raw.rate().max(1e-9),
        feed.latency.value_at_quantile(0.99) as f64 / 1000.0
    ));
    s.stop().await;

    // ---- fan-out: raw baseline, push, hybrid ----
    let raw_secs = raw_fan_out(&cli.redis_url, args.followers).await?;
    report.rows.push(
        Row::figure(
            &format!("raw pipelined ZADD + trim into {} keys", args.followers),
            args.followers,
            raw_secs,
        )
        .note(format!(
            "{:.2} s over one connection, batches of 500 keys",
            raw_secs
        )),
    );
    let mut outcomes = Vec::new();
    for push in [true, false] {
        let f = fan_out(
            cli,
            &db,
            args.followers,
            push,
            duration.min(Duration::from_secs(5)),
        )
        .await?;
        let mode = if push { "push" } else { "pull (hybrid)" };
        report.rows.push(
            Row::figure(
                &format!("publish to {} followers, {mode}", args.followers),
                args.followers,
                f.delivered.as_secs_f64(),
            )
            .note(format!(
                "POST /blog answered in {:.1} ms; in every feed after {:.2} s; Redis memory written: {}",
                f.answered.as_secs_f64() * 1000.0,
                f.delivered.as_secs_f64(),
                bytes(f.memory)
            )),
        );
        report.rows.push(Row::from_outcome(
            &format!("GET /blog/of/follow after it, {mode}"),
            &f.reads,
        ));
        outcomes.push(f);
    }
    let (push, pull) = (&outcomes[0], &outcomes[1]);
    report.summary.push(format!(
        "publish to {} followers: push {:.2} s until every inbox has it ({} of Redis), pull {:.1} ms ({}); feed read p99 push {:.2} ms, pull {:.2} ms",
        args.followers,
        push.delivered.as_secs_f64(),
        bytes(push.memory),
        pull.delivered.as_secs_f64() * 1000.0,
        bytes(pull.memory),
        push.reads.latency.value_at_quantile(0.99) as f64 / 1000.0,
        pull.reads.latency.value_at_quantile(0.99) as f64 / 1000.0,
    ));
    Ok(report)
}

fn bytes(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / (1 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

async fn publish(conn: &mut Conn, user: &User, title: &str) -> anyhow::Result<i64> {
    let a = conn
        .call(
            &Req::post("/api/blog")
                .header("authorization", &user.token)
                .json(&serde_json::json!({
                    "shopId": 1,
                    "title": title,
                    "content": "<p>hmdp-bench 好吃<br>推荐</p>",
                    "images": "/imgs/blogs/1/2/bench.jpg",
                })),
        )
        .await?;
    anyhow::ensure!(a.success(), "publishing: {}", a.code());
    a.data()
        .as_i64()
        .ok_or_else(|| anyhow::anyhow!("POST /blog answered no id"))
}

async fn follow(conn: &mut Conn, user: &User, target: i64) -> anyhow::Result<()> {
    let a = conn
        .call(&Req::put(format!("/api/follow/{target}/true")).header("authorization", &user.token))
        .await?;
    anyhow::ensure!(a.success(), "following: {}", a.code());
    Ok(())
}

async fn feed_phase(
    name: &str,
    addr: SocketAddr,
    c: usize,
    duration: Duration,
    readers: &[User],
) -> anyhow::Result<crate::load::Outcome> {
    let tokens: Arc<Vec<String>> = Arc::new(readers.iter().map(|u| u.token.clone()).collect());
    let far = chrono::Local::now().timestamp_millis() + 3_600_000;
    request_phase(
        name,
        addr,
        c,
        Stop::After(duration),
        false,
        Arc::new(move |i| {
            Req::get(format!("/api/blog/of/follow?lastId={far}"))
                .header("authorization", &tokens[i as usize % tokens.len()])
        }),
    )
    .await
}

/// `tb_blog.liked` equals the size of the note's like set, for every note.
async fn likes_match(s: &BenchServer, notes: &[i64]) -> anyhow::Result<Check> {
    let mut redis = s.state.redis.clone();
    let mut bad = Vec::new();
    let mut total = 0;
    for id in notes {
        let key = format!("{}blog:liked:{id}", s.prefix);
        let (all, marker): (i64, Option<f64>) = redis::pipe()
            .cmd("ZCARD")
            .arg(&key)
            .cmd("ZSCORE")
            .arg(&key)
            .arg(hmdp::testing::social::LIKES_LOADED)
            .query_async(&mut redis)
            .await?;
        // The set's loaded marker is no liker.
        let card = all - i64::from(marker.is_some());
        let liked: i64 = hmdp::on_pool!(&s.state.db, pool => {
            sqlx::query_scalar("SELECT CAST(liked AS SIGNED) FROM tb_blog WHERE id = ?")
                .bind(id)
                .fetch_one(pool)
                .await?
        });
        total += card;
        if card != liked {
            bad.push(format!("note {id}: liked {liked}, set {card}"));
        }
    }
    Ok(Check {
        name: "tb_blog.liked = ZCARD blog:liked:{id} after the like bursts".to_owned(),
        ok: bad.is_empty(),
        detail: if bad.is_empty() {
            format!("{} notes, {total} likes in all", notes.len())
        } else {
            bad.join("; ")
        },
    })
}

/// What one fan-out measured.
struct FanOut {
    /// Until `POST /blog` answered.
    answered: Duration,
    /// Until every follower's feed has the note (push: the background fan-out finished).
    delivered: Duration,
    /// Bytes of Redis memory of the keys the note was written to.
    memory: u64,
    /// Feed reads of the logged-in followers afterwards.
    reads: crate::load::Outcome,
}

async fn fan_out(
    cli: &Cli,
    db: &Database,
    followers: u64,
    push: bool,
    duration: Duration,
) -> anyhow::Result<FanOut> {
    let s = server::start_on(&cli.redis_url, db, |cfg| {
        cfg.social.feed_push_max_followers = if push {
            followers + READERS as u64 + 1
        } else {
            // The default threshold, below the follower count even for small runs.
            cfg.social.feed_push_max_followers.min(followers / 2)
        };
    })
    .await?;
    let users = create_users(s.addr, &CodeSource::Sms(s.sms.clone()), READERS + 1, 16).await?;
    let (author, readers) = (&users[0], &users[1..]);
    let mut conn = Conn::connect(s.addr).await?;
    for r in readers {
        follow(&mut conn, r, author.id).await?;
    }
    // The other followers: rows only (ids far above the real users').
    let first = 50_000_000_i64;
    let ids: Vec<i64> = (first..first + followers as i64).collect();
    hmdp::on_pool!(&s.state.db, pool => {
        for chunk in ids.chunks(500) {
            let marks = vec!["(?, ?)"; chunk.len()].join(", ");
            let sql = format!("INSERT INTO tb_follow (user_id, follow_user_id) VALUES {marks}");
            let mut q = sqlx::query(&sql);
            for f in chunk {
                q = q.bind(*f).bind(author.id);
            }
            q.execute(pool).await?;
        }
    });

    let started = Instant::now();
    let blog = publish(&mut conn, author, "to every follower").await?;
    let answered = started.elapsed();
    s.state.social.shutdown().await;
    let delivered = started.elapsed();

    let mut redis = s.state.redis.clone();
    let keys: Vec<String> = if push {
        ids.iter()
            .copied()
            .chain(readers.iter().map(|r| r.id))
            .map(|id| format!("{}feed:{id}", s.prefix))
            .collect()
    } else {
        vec![
            format!("{}feed:outbox:{}", s.prefix, author.id),
            format!("{}feed:pulled-authors", s.prefix),
        ]
    };
    let mut memory = 0;
    for chunk in keys.chunks(5000) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.cmd("MEMORY").arg("USAGE").arg(k);
        }
        let sizes: Vec<Option<u64>> = pipe.query_async(&mut redis).await?;
        memory += sizes.into_iter().flatten().sum::<u64>();
    }
    // Every logged-in follower sees the note first.
    let check = crate::load::call_once(
        s.addr,
        &Req::get(format!(
            "/api/blog/of/follow?lastId={}",
            chrono::Local::now().timestamp_millis() + 60_000
        ))
        .header("authorization", &readers[0].token),
    )
    .await?;
    anyhow::ensure!(
        check.data()["list"][0]["id"].as_i64() == Some(blog),
        "the follower's feed does not show the note: {}",
        String::from_utf8_lossy(&check.body)
    );
    let reads = feed_phase(
        "GET /blog/of/follow after the fan-out",
        s.addr,
        cli.connections,
        duration,
        readers,
    )
    .await?;
    s.stop().await;
    Ok(FanOut {
        answered,
        delivered,
        memory,
        reads,
    })
}

/// Seconds to `ZADD` + trim one member into `n` keys, pipelined 500 keys at a time over one
/// connection: the floor of a push fan-out.
async fn raw_fan_out(redis_url: &str, n: u64) -> anyhow::Result<f64> {
    let mut conn = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await?;
    let prefix = format!("bench:fanout:{}:", uuid::Uuid::new_v4().simple());
    let started = Instant::now();
    let ids: Vec<u64> = (0..n).collect();
    for chunk in ids.chunks(500) {
        let mut pipe = redis::pipe();
        for i in chunk {
            let key = format!("{prefix}{i}");
            pipe.zadd(&key, 1, 1_700_000_000_000_i64)
                .ignore()
                .zremrangebyrank(&key, 0, -1001)
                .ignore();
        }
        pipe.query_async::<()>(&mut conn).await?;
    }
    let secs = started.elapsed().as_secs_f64();
    for chunk in ids.chunks(1000) {
        let keys: Vec<String> = chunk.iter().map(|i| format!("{prefix}{i}")).collect();
        let _: () = redis::cmd("DEL").arg(keys).query_async(&mut conn).await?;
    }
    Ok(secs)
}

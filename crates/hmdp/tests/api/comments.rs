//! Comments on notes and deleting notes: every route and refusal, sanitising, the comment
//! count under racing posts and deletes, who may delete a comment, each user's daily cap, and a
//! deleted note vanishing from every place that showed it (the note, the hot list, a
//! follower's feed, its likes, its comments) while its photos go back to the upload clean-up.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use hmdp::testing::storage::{DELETE_REPLIES, Db};
use redis::AsyncCommands;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    both_backends,
    helpers::{Backend, Resp, TestApp, login_many, spawn_app, spawn_app_with, square_png},
    social::{exec, me, publish, put, scalar, without_demo_notes},
    uploads::uploaded,
};

both_backends!(
    comments_are_sanitised_and_listed_newest_first,
    bad_comments_are_refused_with_clear_errors,
    replies_must_stay_in_one_note_and_thread,
    comments_are_deleted_by_their_author,
    a_note_s_author_deletes_any_comment_on_it_and_strangers_none,
    a_user_s_comments_a_day_are_capped,
    a_thread_s_replies_are_deleted_through_their_index,
    racing_comments_keep_the_count_exact,
    notes_are_deleted_by_their_author_only,
    a_deleted_note_vanishes_everywhere_and_frees_its_photos,
    a_deleted_note_leaves_its_author_s_icon_alone,
    notes_and_comments_load_nothing_from_other_hosts,
    a_deleted_note_hands_photos_back_to_their_uploader,
);

// ---- helpers ----

async fn delete(app: &TestApp, path: &str, token: Option<&str>) -> Resp {
    let mut req = app.client.request(Method::DELETE, app.url(path));
    if let Some(t) = token {
        req = req.header("authorization", t);
    }
    app.send(req).await
}

async fn post_comment(app: &TestApp, blog: i64, body: &Value, token: Option<&str>) -> Resp {
    app.post_json(&format!("/api/blog/{blog}/comments"), body, token)
        .await
}

/// Comments on `blog`; the new comment's id.
async fn comment(app: &TestApp, blog: i64, token: &str, body: Value) -> i64 {
    let r = post_comment(app, blog, &body, Some(token)).await;
    assert!(r.success(), "comment: {r:?}");
    r.body["data"].as_i64().unwrap()
}

/// Page `current` of a note's comments, as anyone (no login).
async fn page(app: &TestApp, blog: i64, current: i64) -> Vec<Value> {
    let r = app
        .get(
            &format!("/api/blog/{blog}/comments?current={current}"),
            None,
        )
        .await;
    assert!(r.success(), "{r:?}");
    r.body["data"].as_array().unwrap().clone()
}

fn ids(list: &[Value]) -> Vec<i64> {
    list.iter().map(|c| c["id"].as_i64().unwrap()).collect()
}

/// `tb_blog.comments` of a note.
async fn counter(app: &TestApp, blog: i64) -> i64 {
    scalar(
        app,
        "SELECT CAST(COALESCE(comments, 0) AS SIGNED) FROM tb_blog WHERE id = ?",
        &[blog],
    )
    .await
}

async fn rows(app: &TestApp, blog: i64) -> i64 {
    scalar(
        app,
        "SELECT COUNT(*) FROM tb_blog_comments WHERE blog_id = ?",
        &[blog],
    )
    .await
}

// ---- the tests ----

async fn comments_are_sanitised_and_listed_newest_first(backend: Backend) {
    let app = spawn_app(backend).await;
    let author = app.login("13812345601").await;
    let reader = app.login("13812345602").await;
    let reader_id = me(&app, &reader).await;
    let blog = publish(&app, &author, "a note").await;

    let hostile = "<b>nice</b><script>alert(1)</script><img src=x onerror=alert(2)>\
                   <a href=\"javascript:alert(3)\">l</a>";
    let first = comment(&app, blog, &reader, json!({"content": hostile})).await;
    let mut all = vec![first];
    for i in 0..11 {
        all.push(comment(&app, blog, &reader, json!({"content": format!("c{i}")})).await);
    }
    all.reverse();

    // No login needed to read; ten a page, newest first.
    let one = page(&app, blog, 1).await;
    let two = page(&app, blog, 2).await;
    assert_eq!(one.len(), 10);
    assert_eq!([ids(&one), ids(&two)].concat(), all);
    assert!(page(&app, blog, 3).await.is_empty());
    let plain = app.get(&format!("/api/blog/{blog}/comments"), None).await;
    assert_eq!(plain.body["data"], json!(one), "current defaults to 1");

    let c = &two[1];
    assert_eq!(c["id"], first);
    assert_eq!(c["userId"], reader_id);
    assert_eq!(c["blogId"], blog);
    let user = app.get("/api/user/me", Some(&reader)).await.body["data"].clone();
    assert_eq!(c["name"], user["nickName"]);
    assert_eq!(c["icon"], user["icon"]);
    assert!(c["createTime"].as_str().unwrap().contains('T'), "{c}");
    assert!(
        c.get("parentId").is_none() && c.get("answerId").is_none(),
        "{c}"
    );
    let content = c["content"].as_str().unwrap();
    for bad in ["<script", "onerror", "javascript:", "alert"] {
        assert!(!content.contains(bad), "{bad} in {content}");
    }
    assert!(content.contains("<b>nice</b>"), "{content}");

    assert_eq!(counter(&app, blog).await, 12);
    let shown = app.get(&format!("/api/blog/{blog}"), Some(&author)).await;
    assert_eq!(shown.body["data"]["comments"], 12);
}

async fn bad_comments_are_refused_with_clear_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13812345603").await;
    let blog = publish(&app, &token, "a note").await;

    // Posting needs login; a malformed body is a 400 either way.
    let r = post_comment(&app, blog, &json!({"content": "hi"}), None).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    let r = post_comment(&app, blog, &json!({"text": "hi"}), None).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));

    for content in [
        String::new(),
        "   ".into(),
        "<script>alert(1)</script>".into(),
        "好".repeat(256),
        // `<` is `&lt;` once cleaned: 100 of them are 400 characters.
        "<".repeat(100),
        "a\u{1}b".into(),
    ] {
        let r = post_comment(&app, blog, &json!({"content": content}), Some(&token)).await;
        assert_eq!(
            (r.status, r.code()),
            (200, "invalid_comment"),
            "{content:?}: {r:?}"
        );
        assert!(!r.success());
    }
    comment(&app, blog, &token, json!({"content": "好".repeat(255)})).await;

    for bad in [
        json!({"content": "x", "parentId": 0}),
        json!({"content": "x", "answerId": -1}),
    ] {
        let r = post_comment(&app, blog, &bad, Some(&token)).await;
        assert_eq!((r.status, r.code()), (400, "invalid_request"), "{bad}");
    }
    let r = app
        .get(&format!("/api/blog/{blog}/comments?current=0"), None)
        .await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    let r = app.get("/api/blog/0/comments", None).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));

    // An unknown note, as the other note routes answer it.
    let r = post_comment(&app, 999_999, &json!({"content": "x"}), Some(&token)).await;
    assert_eq!((r.status, r.code()), (200, "blog_not_found"));
    let r = app.get("/api/blog/999999/comments", None).await;
    assert_eq!((r.status, r.code()), (200, "blog_not_found"));
    assert_eq!(counter(&app, blog).await, 1);
    assert_eq!(rows(&app, blog).await, 1);
}

async fn replies_must_stay_in_one_note_and_thread(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13812345604").await;
    let blog = publish(&app, &token, "one").await;
    let other = publish(&app, &token, "two").await;
    let top = comment(&app, blog, &token, json!({"content": "top"})).await;
    let top2 = comment(&app, blog, &token, json!({"content": "top2"})).await;
    let elsewhere = comment(&app, other, &token, json!({"content": "elsewhere"})).await;

    let reply = comment(&app, blog, &token, json!({"content": "r", "parentId": top})).await;
    // answerId alone: the thread is the answered comment's.
    let answer = comment(
        &app,
        blog,
        &token,
        json!({"content": "a", "answerId": reply}),
    )
    .await;
    let both = comment(
        &app,
        blog,
        &token,
        json!({"content": "b", "parentId": top, "answerId": top}),
    )
    .await;
    let list = page(&app, blog, 1).await;
    let by_id = |id: i64| list.iter().find(|c| c["id"] == id).unwrap().clone();
    assert_eq!(by_id(reply)["parentId"], top);
    assert!(by_id(reply).get("answerId").is_none());
    assert_eq!(
        (
            by_id(answer)["parentId"].clone(),
            by_id(answer)["answerId"].clone()
        ),
        (json!(top), json!(reply))
    );
    assert_eq!(
        (
            by_id(both)["parentId"].clone(),
            by_id(both)["answerId"].clone()
        ),
        (json!(top), json!(top))
    );

    for (body, why) in [
        (
            json!({"content": "x", "parentId": 999_999}),
            "unknown parent",
        ),
        (
            json!({"content": "x", "parentId": elsewhere}),
            "parent on another note",
        ),
        (
            json!({"content": "x", "parentId": reply}),
            "parent that is a reply",
        ),
        (
            json!({"content": "x", "answerId": 999_999}),
            "unknown answer",
        ),
        (
            json!({"content": "x", "answerId": elsewhere}),
            "answer on another note",
        ),
        (
            json!({"content": "x", "parentId": top2, "answerId": reply}),
            "answer in another thread",
        ),
    ] {
        let r = post_comment(&app, blog, &body, Some(&token)).await;
        assert_eq!(
            (r.status, r.code()),
            (200, "invalid_comment"),
            "{why}: {r:?}"
        );
    }
    assert_eq!(counter(&app, blog).await, 5);
    assert_eq!(rows(&app, blog).await, 5);
}

async fn comments_are_deleted_by_their_author(backend: Backend) {
    let app = spawn_app(backend).await;
    let author = app.login("13812345605").await;
    let other = app.login("13812345606").await;
    let blog = publish(&app, &author, "a note").await;
    let top = comment(&app, blog, &author, json!({"content": "top"})).await;
    let reply = comment(&app, blog, &other, json!({"content": "r", "parentId": top})).await;
    let answer = comment(
        &app,
        blog,
        &author,
        json!({"content": "a", "answerId": reply}),
    )
    .await;
    let alone = comment(&app, blog, &author, json!({"content": "alone"})).await;
    assert_eq!(counter(&app, blog).await, 4);

    let path = |id: i64| format!("/api/blog/comments/{id}");
    let r = delete(&app, &path(alone), None).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    let r = delete(&app, &path(alone), Some(&other)).await;
    assert_eq!((r.status, r.code()), (200, "not_your_comment"));
    let r = delete(&app, &path(999_999), Some(&author)).await;
    assert_eq!((r.status, r.code()), (200, "comment_not_found"));
    let r = delete(&app, "/api/blog/comments/0", Some(&author)).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));
    assert_eq!(counter(&app, blog).await, 4);

    // A reply goes alone; a top-level comment takes its thread.
    let r = delete(&app, &path(reply), Some(&other)).await;
    assert_eq!(r.body, json!({"success": true}));
    assert_eq!(ids(&page(&app, blog, 1).await), vec![alone, answer, top]);
    assert_eq!(counter(&app, blog).await, 3);
    assert!(delete(&app, &path(top), Some(&author)).await.success());
    assert_eq!(ids(&page(&app, blog, 1).await), vec![alone]);
    assert_eq!(counter(&app, blog).await, 1);
    let r = delete(&app, &path(top), Some(&author)).await;
    assert_eq!(r.code(), "comment_not_found", "a second delete");
    assert!(delete(&app, &path(alone), Some(&author)).await.success());
    assert_eq!((counter(&app, blog).await, rows(&app, blog).await), (0, 0));
}

async fn a_note_s_author_deletes_any_comment_on_it_and_strangers_none(backend: Backend) {
    let app = spawn_app(backend).await;
    let author = app.login("13812345611").await;
    let reader = app.login("13812345612").await;
    let stranger = app.login("13812345613").await;
    let blog = publish(&app, &author, "a note").await;
    let elsewhere = publish(&app, &stranger, "the stranger's note").await;
    let spam = comment(&app, blog, &reader, json!({"content": "spam"})).await;
    let reply = comment(
        &app,
        blog,
        &stranger,
        json!({"content": "r", "parentId": spam}),
    )
    .await;
    let other = comment(&app, blog, &reader, json!({"content": "more spam"})).await;
    let own = comment(&app, blog, &author, json!({"content": "the author's"})).await;
    let away = comment(&app, elsewhere, &reader, json!({"content": "away"})).await;
    let path = |id: i64| format!("/api/blog/comments/{id}");

    // Someone who wrote neither the comment nor the note: refused, whoever else they are (the
    // author of another note, of a reply in the thread, or the comment's addressee).
    for (id, token) in [
        (other, &stranger),
        (spam, &stranger),
        (own, &reader),
        (away, &author),
    ] {
        let r = delete(&app, &path(id), Some(token)).await;
        assert_eq!(
            (r.status, r.code()),
            (200, "not_your_comment"),
            "{id}: {r:?}"
        );
    }
    assert_eq!(counter(&app, blog).await, 4);

    // The note's author deletes another's top-level comment, its thread with it.
    let r = delete(&app, &path(spam), Some(&author)).await;
    assert_eq!(r.body, json!({"success": true}));
    assert_eq!(ids(&page(&app, blog, 1).await), vec![own, other]);
    assert_eq!((counter(&app, blog).await, rows(&app, blog).await), (2, 2));
    let r = delete(&app, &path(reply), Some(&stranger)).await;
    assert_eq!(
        r.code(),
        "comment_not_found",
        "the reply went with its thread"
    );
    // ...and a comment's own author still deletes it.
    assert!(delete(&app, &path(other), Some(&reader)).await.success());
    assert_eq!(ids(&page(&app, blog, 1).await), vec![own]);
    assert!(delete(&app, &path(away), Some(&stranger)).await.success());
    assert_eq!(
        (counter(&app, elsewhere).await, rows(&app, elsewhere).await),
        (0, 0)
    );
}

async fn a_user_s_comments_a_day_are_capped(backend: Backend) {
    let app = spawn_app_with(backend, |c| c.social.comment_user_daily_count = 3).await;
    let alice = app.login("13812345621").await;
    let bob = app.login("13812345622").await;
    let blog = publish(&app, &bob, "a note").await;

    // Refused comments cost nothing: bad content, an unknown note, a bad thread.
    for (to, body) in [
        (blog, json!({"content": "<script>x</script>"})),
        (999_999, json!({"content": "hi"})),
        (blog, json!({"content": "hi", "parentId": 999_999})),
    ] {
        assert!(!post_comment(&app, to, &body, Some(&alice)).await.success());
    }
    // Ten at once: exactly three are written, whoever wins.
    let bodies: Vec<Value> = (0..10)
        .map(|i| json!({"content": format!("c{i}")}))
        .collect();
    let answers = futures_util::future::join_all(
        bodies
            .iter()
            .map(|body| post_comment(&app, blog, body, Some(&alice))),
    )
    .await;
    assert_eq!(
        answers.iter().filter(|r| r.success()).count(),
        3,
        "{answers:?}"
    );
    assert_eq!(rows(&app, blog).await, 3);
    for r in answers.iter().filter(|r| !r.success()) {
        assert_eq!((r.status, r.code()), (429, "comment_quota"), "{r:?}");
        // Until the next midnight of HMDP_TIME_ZONE.
        let secs: i64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
        let expected = until_midnight(app.state.config.social.time_zone.0);
        assert!(
            (secs - expected).abs() <= 5,
            "{secs} s, {expected} s expected"
        );
    }

    // Deleting gives nothing back; another user has a day of their own.
    let mine = ids(&page(&app, blog, 1).await)[0];
    assert!(
        delete(&app, &format!("/api/blog/comments/{mine}"), Some(&alice))
            .await
            .success()
    );
    let r = post_comment(&app, blog, &json!({"content": "again"}), Some(&alice)).await;
    assert_eq!((r.status, r.code()), (429, "comment_quota"), "{r:?}");
    comment(&app, blog, &bob, json!({"content": "bob's"})).await;
}

/// Seconds from now to the next midnight in `tz`.
fn until_midnight(tz: chrono_tz::Tz) -> i64 {
    use chrono::TimeZone as _;
    let now = chrono::Utc::now();
    let midnight = now
        .with_timezone(&tz)
        .date_naive()
        .succ_opt()
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap();
    (tz.from_local_datetime(&midnight)
        .earliest()
        .unwrap()
        .with_timezone(&chrono::Utc)
        - now)
        .num_seconds()
}

/// Deleting a top-level comment deletes its replies by `parent_id`: an index serves that on
/// both backends (the original's table has none, and a scan holds SQLite's write lock).
async fn a_thread_s_replies_are_deleted_through_their_index(backend: Backend) {
    let app = spawn_app(backend).await;
    let sql = DELETE_REPLIES.replace('?', "7");
    let plan = match &app.state.db {
        Db::Sqlite(p) => {
            let rows: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .fetch_all(p)
                    .await
                    .unwrap();
            rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("; ")
        }
        Db::MySql(p) => {
            // MariaDB's EXPLAIN is a result set: `key` names the index used.
            let row = sqlx::query(&format!("EXPLAIN {sql}"))
                .fetch_one(p)
                .await
                .unwrap();
            let key: Option<String> = sqlx::Row::try_get(&row, "key").unwrap();
            key.unwrap_or_default()
        }
    };
    assert!(plan.contains("idx_blog_comments_parent"), "plan: {plan}");
}

async fn racing_comments_keep_the_count_exact(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let tokens = login_many(&app, 10).await;
    let blog = publish(&app, &tokens[0], "popular").await;
    // A note adopted from the original's database has a NULL count.
    exec(
        &app,
        "UPDATE tb_blog SET comments = NULL WHERE id = ?",
        &[blog],
    )
    .await;
    let mut early = Vec::new();
    for i in 0..25 {
        early.push(
            comment(
                &app,
                blog,
                &tokens[i % 10],
                json!({"content": format!("e{i}")}),
            )
            .await,
        );
    }

    // 50 posts and 25 deletes at once.
    let mut tasks = Vec::new();
    for i in 0..50 {
        let (app, token) = (app.clone(), tokens[i % 10].clone());
        tasks.push(tokio::spawn(async move {
            let r = post_comment(
                &app,
                blog,
                &json!({"content": format!("c{i}")}),
                Some(&token),
            )
            .await;
            assert!(r.success(), "{r:?}");
        }));
    }
    for (i, id) in early.iter().enumerate() {
        let (app, token, id) = (app.clone(), tokens[i % 10].clone(), *id);
        tasks.push(tokio::spawn(async move {
            let r = delete(&app, &format!("/api/blog/comments/{id}"), Some(&token)).await;
            assert!(r.success(), "{r:?}");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(rows(&app, blog).await, 50);
    assert_eq!(counter(&app, blog).await, 50);
}

async fn notes_are_deleted_by_their_author_only(backend: Backend) {
    let app = spawn_app(backend).await;
    let author = app.login("13812345607").await;
    let other = app.login("13812345608").await;
    let blog = publish(&app, &author, "mine").await;
    let path = format!("/api/blog/{blog}");

    let r = delete(&app, &path, None).await;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    let r = delete(&app, &path, Some(&other)).await;
    assert_eq!((r.status, r.code()), (200, "not_your_blog"));
    assert!(app.get(&path, Some(&author)).await.success());
    let r = delete(&app, "/api/blog/999999", Some(&author)).await;
    assert_eq!((r.status, r.code()), (200, "blog_not_found"));
    let r = delete(&app, "/api/blog/0", Some(&author)).await;
    assert_eq!((r.status, r.code()), (400, "invalid_request"));

    assert_eq!(
        delete(&app, &path, Some(&author)).await.body,
        json!({"success": true})
    );
    // Idempotent: the second delete finds no note.
    let r = delete(&app, &path, Some(&author)).await;
    assert_eq!((r.status, r.code()), (200, "blog_not_found"));
}

async fn a_deleted_note_vanishes_everywhere_and_frees_its_photos(backend: Backend) {
    let app = spawn_app_with(backend, |c| {
        c.social.upload_grace = Duration::from_secs(30);
    })
    .await;
    without_demo_notes(&app).await;
    let author = app.login("13812345609").await;
    let follower = app.login("13812345610").await;
    let (author_id, follower_id) = (me(&app, &author).await, me(&app, &follower).await);
    assert!(
        put(
            &app,
            &format!("/api/follow/{author_id}/true"),
            Some(&follower)
        )
        .await
        .success()
    );

    let photo = uploaded(&app, &author, &square_png(1, [7, 7, 7])).await;
    let r = app
        .post_json(
            "/api/blog",
            &json!({"shopId": 1, "title": "gone soon", "content": "<p>x</p>",
                    "images": format!("/imgs{photo}")}),
            Some(&author),
        )
        .await;
    let blog = r.body["data"].as_i64().unwrap();
    let kept = publish(&app, &author, "stays").await;
    assert!(
        put(&app, &format!("/api/blog/like/{blog}"), Some(&follower))
            .await
            .success()
    );
    comment(&app, blog, &follower, json!({"content": "nice"})).await;

    // The photo belongs to the note now: a sweep keeps it and takes it off the queue.
    let later = SystemTime::now() + Duration::from_secs(60);
    let swept = app.state.uploads.sweep_once(later).await.unwrap();
    assert_eq!(swept.kept, 1, "{swept:?}");
    let on_disk = app.state.uploads.dir().join(photo.trim_start_matches('/'));
    assert!(on_disk.exists());

    let inbox = app.state.keys.feed(follower_id);
    let liked = app.state.keys.blog_liked(blog);
    let mut redis = app.redis().await;
    let in_feed: Option<f64> = redis.zscore(&inbox, blog).await.unwrap();
    assert!(in_feed.is_some());
    let hot = app.get("/api/blog/hot", None).await;
    assert_eq!(hot.body["data"][0]["id"], blog, "the liked note leads");

    assert!(
        delete(&app, &format!("/api/blog/{blog}"), Some(&author))
            .await
            .success()
    );

    let r = app.get(&format!("/api/blog/{blog}"), Some(&follower)).await;
    assert_eq!(r.code(), "blog_not_found");
    let hot = app.get("/api/blog/hot", None).await;
    let hot_ids: Vec<i64> = hot.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_i64().unwrap())
        .collect();
    assert_eq!(hot_ids, vec![kept]);
    // The feed: the entry is gone from the inbox, and a scroll shows only the other note.
    let in_feed: Option<f64> = redis.zscore(&inbox, blog).await.unwrap();
    assert_eq!(in_feed, None);
    let now = chrono::Local::now().timestamp_millis() + 60_000;
    let feed = app
        .get(
            &format!("/api/blog/of/follow?lastId={now}"),
            Some(&follower),
        )
        .await;
    assert_eq!(feed.body["data"]["list"].as_array().unwrap().len(), 1);
    assert_eq!(feed.body["data"]["list"][0]["id"], kept);
    // Likes: the set and the rows are gone, and the note cannot be liked again.
    let exists: bool = redis.exists(&liked).await.unwrap();
    assert!(!exists);
    let like_rows = scalar(
        &app,
        "SELECT COUNT(*) FROM hmdp_blog_like WHERE blog_id = ?",
        &[blog],
    )
    .await;
    assert_eq!(like_rows, 0);
    let r = put(&app, &format!("/api/blog/like/{blog}"), Some(&follower)).await;
    assert_eq!(r.code(), "blog_not_found");
    let exists: bool = redis.exists(&liked).await.unwrap();
    assert!(!exists, "a refused like leaves no set behind");
    // Comments.
    assert_eq!(rows(&app, blog).await, 0);
    let r = app.get(&format!("/api/blog/{blog}/comments"), None).await;
    assert_eq!(r.code(), "blog_not_found");
    let r = post_comment(&app, blog, &json!({"content": "late"}), Some(&follower)).await;
    assert_eq!(r.code(), "blog_not_found");

    // The photo is queued again: a sweep within the grace keeps it, one after deletes it.
    let queued: Option<f64> = redis
        .zscore(app.state.keys.upload_pending(), &photo)
        .await
        .unwrap();
    assert!(queued.is_some());
    let swept = app
        .state
        .uploads
        .sweep_once(SystemTime::now())
        .await
        .unwrap();
    assert_eq!(swept.deleted, 0, "{swept:?}");
    assert!(on_disk.exists());
    let swept = app
        .state
        .uploads
        .sweep_once(SystemTime::now() + Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(swept.deleted, 1, "{swept:?}");
    assert!(!on_disk.exists());
    assert_eq!(app.get_bytes(&format!("/imgs{photo}")).await.0, 404);

    let r = delete(&app, &format!("/api/blog/{blog}"), Some(&author)).await;
    assert_eq!(r.code(), "blog_not_found");
}

/// A photo its author made their icon, then also put in a note: deleting the note does not
/// hand the icon to the clean-up.
async fn a_deleted_note_leaves_its_author_s_icon_alone(backend: Backend) {
    let app = spawn_app_with(backend, |c| {
        c.social.upload_grace = Duration::from_secs(30);
    })
    .await;
    let author = app.login("13812345611").await;
    let photo = uploaded(&app, &author, &square_png(1, [5, 6, 7])).await;
    let r = app
        .send(
            app.client
                .put(app.url("/api/user/info"))
                .json(&json!({"icon": format!("/imgs{photo}")}))
                .header("authorization", &author),
        )
        .await;
    assert!(r.success(), "{r:?}");
    let r = app
        .post_json(
            "/api/blog",
            &json!({"shopId": 1, "title": "my face", "content": "<p>me</p>",
                    "images": format!("/imgs{photo}")}),
            Some(&author),
        )
        .await;
    assert!(r.success(), "{r:?}");
    let blog = r.body["data"].as_i64().unwrap();
    assert!(
        delete(&app, &format!("/api/blog/{blog}"), Some(&author))
            .await
            .success()
    );
    let queued: Option<f64> = app
        .redis()
        .await
        .zscore(app.state.keys.upload_pending(), &photo)
        .await
        .unwrap();
    assert_eq!(queued, None, "the icon is not queued for the clean-up");
    let swept = app
        .state
        .uploads
        .sweep_once(SystemTime::now() + Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(swept.deleted, 0, "{swept:?}");
    assert_eq!(app.get_bytes(&format!("/imgs{photo}")).await.0, 200);
}

/// An image on another host would learn the address of every reader of the note: notes and
/// comments keep images (and anything else fetched on view) only on this site, whatever the
/// spelling of the other host; links elsewhere stay (they need a click).
async fn notes_and_comments_load_nothing_from_other_hosts(backend: Backend) {
    let app = spawn_app(backend).await;
    let author = app.login("13812345613").await;
    let remote = "<p>看<img src=\"https://evil.example/a.png\"><img src=\"//evil.example/b.png\">\
        <img src=\"/\\evil.example/c.png\"><img src=\"/&#9;/evil.example/d.png\">\
        <img src=\"HTTPS://evil.example/e.png\" srcset=\"https://evil.example/f.png 2x\">\
        <img src=\" https://evil.example/g.png\"><img src=\"data:image/png;base64,AAAA\">\
        <table background=\"https://evil.example/h.png\"><tbody><tr><td>表</td></tr></tbody></table>\
        <img src=\"/imgs/blogs/1/2/a.jpg\"><img src=\"imgs/x.jpg\">\
        <a href=\"https://example.com/\">链接</a></p>";
    let r = app
        .post_json(
            "/api/blog",
            &json!({"shopId": 1, "title": "remote", "content": remote,
                    "images": "/imgs/blogs/1/2/a.jpg"}),
            Some(&author),
        )
        .await;
    assert!(r.success(), "{r:?}");
    let blog = r.body["data"].as_i64().unwrap();
    let shown = app.get(&format!("/api/blog/{blog}"), Some(&author)).await;
    let content = shown.body["data"]["content"].as_str().unwrap();
    assert_on_site(content);
    assert!(content.contains("<td>表</td>"), "{content}");
    assert!(
        content.contains("<a href=\"https://example.com/\" rel=\"noopener noreferrer\">链接</a>"),
        "links stay: {content}"
    );

    let c = comment(
        &app,
        blog,
        &author,
        json!({"content": "<img src=\"https://evil.example/a.png\">好 \
                           <img src=\"/imgs/blogs/1/2/a.jpg\"><img src=\"imgs/x.jpg\">\
                           <a href=\"https://example.com/\">链接</a>"}),
    )
    .await;
    let listed = page(&app, blog, 1).await;
    let shown = listed.iter().find(|x| x["id"] == c).expect("the comment");
    let content = shown["content"].as_str().unwrap();
    assert_on_site(content);
    assert!(
        content.contains("href=\"https://example.com/\""),
        "{content}"
    );

    // A note's photos are paths of this site too.
    for images in [
        "https://evil.example/a.jpg",
        "/imgs/blogs/1/2/a.jpg,//evil.example/b.jpg",
    ] {
        let r = app
            .post_json(
                "/api/blog",
                &json!({"shopId": 1, "title": "remote photo", "content": "<p>x</p>",
                        "images": images}),
                Some(&author),
            )
            .await;
        assert_eq!(r.code(), "invalid_blog", "{images}: {r:?}");
    }
}

/// No image of `content` points at another host; the ones of this site stay.
fn assert_on_site(content: &str) {
    assert!(!content.contains("evil.example"), "{content}");
    assert!(!content.contains("data:"), "{content}");
    assert!(!content.contains("srcset"), "{content}");
    assert!(
        content.contains("<img src=\"/imgs/blogs/1/2/a.jpg\">"),
        "{content}"
    );
    assert!(content.contains("<img src=\"imgs/x.jpg\">"), "{content}");
}

/// Anyone may list anyone's photo in a note (a note keeps what it lists), but deleting the note
/// hands each photo back to its uploader, never to the note's author: B cannot delete A's
/// photo through a note of his, nor make it his icon, and A still can.
async fn a_deleted_note_hands_photos_back_to_their_uploader(backend: Backend) {
    let app = spawn_app_with(backend, |c| {
        c.social.upload_grace = Duration::from_secs(30);
    })
    .await;
    let alice = app.login("13812345614").await;
    let bob = app.login("13812345615").await;
    let hers = uploaded(&app, &alice, &square_png(1, [3, 1, 4])).await;
    let his = uploaded(&app, &bob, &square_png(1, [1, 5, 9])).await;
    let both = format!("/imgs{hers},/imgs{his}");

    // One note of his is swept first (the photos are the note's, off the queue), one is
    // deleted while they still wait for the sweep.
    for swept in [true, false] {
        let r = app
            .post_json(
                "/api/blog",
                &json!({"shopId": 1, "title": "borrowed", "content": "<p>x</p>",
                        "images": both}),
                Some(&bob),
            )
            .await;
        assert!(r.success(), "{r:?}");
        let blog = r.body["data"].as_i64().unwrap();
        if swept {
            let later = SystemTime::now() + Duration::from_secs(60);
            let r = app.state.uploads.sweep_once(later).await.unwrap();
            assert_eq!(r.kept, 2, "{r:?}");
        }
        assert!(
            delete(&app, &format!("/api/blog/{blog}"), Some(&bob))
                .await
                .success()
        );

        let as_icon = |token: &str, photo: &str| {
            app.send(
                app.client
                    .put(app.url("/api/user/info"))
                    .json(&json!({"icon": format!("/imgs{photo}")}))
                    .header("authorization", token),
            )
        };
        let r = as_icon(&bob, &hers).await;
        assert_eq!(r.code(), "invalid_icon", "swept {swept}: {r:?}");
        let r = app
            .send(
                app.client
                    .get(app.url("/api/upload/blog/delete"))
                    .query(&[("name", &hers)])
                    .header("authorization", &bob),
            )
            .await;
        assert_eq!(r.code(), "not_your_file", "swept {swept}: {r:?}");
        // His own photo is his again.
        assert!(
            app.state
                .uploads
                .dir()
                .join(his.trim_start_matches('/'))
                .exists()
        );
        let mut redis = app.redis().await;
        for (photo, owner) in [
            (&hers, me(&app, &alice).await),
            (&his, me(&app, &bob).await),
        ] {
            let recorded: Option<i64> = redis
                .hget(app.state.keys.upload(photo), "user")
                .await
                .unwrap();
            assert_eq!(recorded, Some(owner), "swept {swept}: {photo}");
        }
    }
    // Hers is still hers: she makes it her icon.
    let r = app
        .send(
            app.client
                .put(app.url("/api/user/info"))
                .json(&json!({"icon": format!("/imgs{hers}")}))
                .header("authorization", &alice),
        )
        .await;
    assert!(r.success(), "{r:?}");
}

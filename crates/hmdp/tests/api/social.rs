//! Notes, likes, follows and the feed: the original pages' contract, sanitising, racing likes
//! and follows against real Redis, the tie-safe scroll, the push/pull hybrid and a cluster.

use std::{collections::HashSet, sync::Arc, time::Duration};

use redis::AsyncCommands;
use reqwest::Method;
use serde_json::{Value, json};

use crate::{
    both_backends,
    helpers::{Backend, RedisCluster, TestApp, login_many, spawn_app, spawn_app_with, wait_until},
};

both_backends!(
    notes_are_sanitised_and_shown_like_the_original,
    bad_notes_are_refused_with_clear_errors,
    the_hot_list_orders_by_likes_ten_a_page,
    notes_of_me_and_of_a_user_page_in_writing_order,
    racing_like_toggles_keep_the_count_equal_to_the_set,
    a_lost_like_set_is_rebuilt_from_the_database,
    like_sets_without_the_marker_are_adopted_at_start_up,
    follows_are_idempotent_and_refuse_self_and_unknown_users,
    racing_follow_toggles_keep_the_set_equal_to_the_rows,
    follows_per_user_are_capped,
    common_follows_show_the_first_hundred_by_id,
    users_are_read_in_bounded_lists_in_the_order_asked,
    the_feed_scrolls_two_at_a_time_without_skipping_ties,
    big_authors_are_pulled_into_the_feed_at_read_time,
);

// ---- helpers ----

pub(crate) async fn put(app: &TestApp, path: &str, token: Option<&str>) -> crate::helpers::Resp {
    let mut req = app.client.request(Method::PUT, app.url(path));
    if let Some(t) = token {
        req = req.header("authorization", t);
    }
    app.send(req).await
}

pub(crate) async fn me(app: &TestApp, token: &str) -> i64 {
    app.get("/api/user/me", Some(token)).await.body["data"]["id"]
        .as_i64()
        .unwrap()
}

/// Publishes a note on shop 1; its id.
pub(crate) async fn publish(app: &TestApp, token: &str, title: &str) -> i64 {
    let r = app
        .post_json(
            "/api/blog",
            &json!({"shopId": 1, "title": title, "content": format!("<p>{title}</p>"),
                    "images": "/imgs/blogs/1/2/a.jpg"}),
            Some(token),
        )
        .await;
    assert!(r.success(), "publish: {r:?}");
    r.body["data"].as_i64().unwrap()
}

/// One integer from the database (`?` bound to `args` in order).
pub(crate) async fn scalar(app: &TestApp, sql: &str, args: &[i64]) -> i64 {
    hmdp::on_pool!(&app.state.db, pool => {
        let mut q = sqlx::query_scalar::<_, i64>(sql);
        for a in args {
            q = q.bind(*a);
        }
        q.fetch_one(pool).await.unwrap()
    })
}

async fn column(app: &TestApp, sql: &str, args: &[i64]) -> Vec<i64> {
    hmdp::on_pool!(&app.state.db, pool => {
        let mut q = sqlx::query_scalar::<_, i64>(sql);
        for a in args {
            q = q.bind(*a);
        }
        q.fetch_all(pool).await.unwrap()
    })
}

pub(crate) async fn exec(app: &TestApp, sql: &str, args: &[i64]) {
    hmdp::on_pool!(&app.state.db, pool => {
        let mut q = sqlx::query(sql);
        for a in args {
            q = q.bind(*a);
        }
        q.execute(pool).await.unwrap();
    })
}

/// Removes the demo notes a new database starts with, for tests that read whole lists.
pub(crate) async fn without_demo_notes(app: &TestApp) {
    exec(app, "DELETE FROM tb_blog", &[]).await;
}

async fn db_liked(app: &TestApp, blog: i64) -> i64 {
    scalar(
        app,
        "SELECT CAST(liked AS SIGNED) FROM tb_blog WHERE id = ?",
        &[blog],
    )
    .await
}

/// The likers in a note's set (without the loaded marker `0`).
async fn zcard(app: &TestApp, key: &str) -> i64 {
    let members: Vec<String> = app.redis().await.zrange(key, 0, -1).await.unwrap();
    members.iter().filter(|m| *m != "0").count() as i64
}

/// The likers in a note's set, in the order they liked.
async fn like_set(app: &TestApp, blog: i64) -> Vec<i64> {
    let members: Vec<String> = app
        .redis()
        .await
        .zrange(format!("{}blog:liked:{blog}", app.prefix), 0, -1)
        .await
        .unwrap();
    members
        .iter()
        .filter(|m| *m != "0")
        .map(|m| m.parse().unwrap())
        .collect()
}

fn sorted(ids: &[i64]) -> Vec<i64> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids
}

/// The likers in the table, by user id.
async fn like_rows(app: &TestApp, blog: i64) -> Vec<i64> {
    column(
        app,
        "SELECT CAST(user_id AS SIGNED) FROM hmdp_blog_like WHERE blog_id = ? ORDER BY user_id",
        &[blog],
    )
    .await
}

/// The ids in `follows:{user}` without the loaded marker, sorted.
async fn follow_set(app: &TestApp, user: i64) -> Vec<i64> {
    let members: Vec<String> = app
        .redis()
        .await
        .smembers(format!("{}follows:{user}", app.prefix))
        .await
        .unwrap();
    let mut ids: Vec<i64> = members
        .iter()
        .filter(|m| *m != "0")
        .map(|m| m.parse().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

async fn follow_rows(app: &TestApp, user: i64) -> Vec<i64> {
    column(
        app,
        "SELECT CAST(follow_user_id AS SIGNED) FROM tb_follow WHERE user_id = ? \
         ORDER BY follow_user_id",
        &[user],
    )
    .await
}

fn ids_of(list: &Value) -> Vec<i64> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_i64().unwrap())
        .collect()
}

/// Scrolls a whole feed the way info.html does (no `offset` param while it is 0); the note
/// ids in the order shown.
async fn scroll_all(app: &TestApp, token: &str, start: i64) -> Vec<i64> {
    let (mut last, mut offset) = (start, 0_i64);
    let mut shown = Vec::new();
    for _ in 0..100 {
        let path = if offset == 0 {
            format!("/api/blog/of/follow?lastId={last}")
        } else {
            format!("/api/blog/of/follow?lastId={last}&offset={offset}")
        };
        let r = app.get(&path, Some(token)).await;
        assert!(r.success(), "{r:?}");
        let Some(page) = r.body.get("data") else {
            return shown;
        };
        let ids = ids_of(&page["list"]);
        assert!(!ids.is_empty() && ids.len() <= 2, "{page}");
        shown.extend(ids);
        last = page["minTime"].as_i64().unwrap();
        offset = page["offset"].as_i64().unwrap();
    }
    panic!("the feed did not end");
}

/// The order Redis shows an inbox in: score descending, then member descending (bytewise).
fn redis_order(mut entries: Vec<(i64, i64)>) -> Vec<i64> {
    entries
        .sort_by(|(ia, sa), (ib, sb)| sb.cmp(sa).then_with(|| ib.to_string().cmp(&ia.to_string())));
    entries.into_iter().map(|(id, _)| id).collect()
}

/// `notes` in the order Redis shows them, by their scores in `key`.
async fn order_in(app: &TestApp, key: &str, notes: &[i64]) -> Vec<i64> {
    let mut conn = app.redis().await;
    let mut entries = Vec::new();
    for id in notes {
        let score: f64 = conn.zscore(key, id).await.unwrap();
        entries.push((*id, score as i64));
    }
    redis_order(entries)
}

// ---- notes ----

async fn notes_are_sanitised_and_shown_like_the_original(backend: Backend) {
    let app = spawn_app(backend).await;
    without_demo_notes(&app).await;
    let token = app.login("13812345678").await;
    let author = me(&app, &token).await;
    let body = json!({
        "shopId": 1,
        "title": "好吃的茶餐厅",
        "content": "<p onclick=\"steal()\">好吃<br/>推荐</p><script>alert(document.cookie)</script>\
                    <img src=\"/imgs/a.jpg\" onerror=\"alert(2)\"><a href=\"javascript:alert(3)\">看</a>",
        "images": "/imgs/blogs/1/2/a.jpg,/imgs/blogs/3/4/b.jpg",
    });
    assert_eq!(
        app.post_json("/api/blog", &body, None).await.status,
        401,
        "publishing needs login"
    );
    let r = app.post_json("/api/blog", &body, Some(&token)).await;
    assert!(r.success(), "{r:?}");
    let id = r.body["data"].as_i64().unwrap();

    let got = app.get(&format!("/api/blog/{id}"), Some(&token)).await;
    assert!(got.success(), "{got:?}");
    let blog = &got.body["data"];
    let content = blog["content"].as_str().unwrap();
    for bad in [
        "<script",
        "onerror",
        "onclick",
        "javascript:",
        "alert",
        "steal",
    ] {
        assert!(!content.contains(bad), "{bad:?} survived: {content}");
    }
    for kept in ["<p>", "好吃<br>推荐", "<img src=\"/imgs/a.jpg\">"] {
        assert!(content.contains(kept), "{kept:?} lost: {content}");
    }
    // The original's Blog JSON: camelCase, null fields omitted, ISO local date-times.
    let keys: HashSet<&str> = blog
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let expected: HashSet<&str> = [
        "id",
        "shopId",
        "userId",
        "title",
        "images",
        "content",
        "liked",
        "createTime",
        "updateTime",
        "name",
        "icon",
        "isLike",
    ]
    .into();
    assert_eq!(keys, expected);
    assert!(blog.as_object().unwrap().values().all(|v| !v.is_null()));
    assert_eq!(blog["userId"], author);
    assert_eq!(blog["shopId"], 1);
    assert_eq!(blog["liked"], 0);
    assert_eq!(blog["isLike"], false);
    assert!(blog["name"].as_str().unwrap().starts_with("user_"));
    assert_eq!(
        blog["images"],
        "/imgs/blogs/1/2/a.jpg,/imgs/blogs/3/4/b.jpg"
    );
    let time = regex::Regex::new(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$").unwrap();
    assert!(
        time.is_match(blog["createTime"].as_str().unwrap()),
        "{blog}"
    );

    // Login is required everywhere but /blog/hot (the original's exclude list).
    for path in [
        format!("/api/blog/{id}"),
        format!("/api/blog/likes/{id}"),
        "/api/blog/of/me".to_owned(),
        format!("/api/blog/of/user?id={author}"),
        "/api/blog/of/follow?lastId=1".to_owned(),
        format!("/api/follow/or/not/{author}"),
        format!("/api/follow/common/{author}"),
    ] {
        assert_eq!(app.get(&path, None).await.status, 401, "{path}");
    }
    for path in [
        format!("/api/blog/like/{id}"),
        format!("/api/follow/{author}/true"),
    ] {
        assert_eq!(put(&app, &path, None).await.status, 401, "{path}");
    }
    let hot = app.get("/api/blog/hot", None).await;
    assert!(hot.success(), "{hot:?}");
    assert_eq!(hot.body["data"][0]["id"], id);
    assert!(
        hot.body["data"][0].get("isLike").is_none(),
        "no isLike when logged out"
    );
    assert_eq!(
        app.get("/api/blog/hot", Some(&token)).await.body["data"][0]["isLike"],
        false
    );
}

async fn bad_notes_are_refused_with_clear_errors(backend: Backend) {
    let app = spawn_app(backend).await;
    let token = app.login("13812345678").await;
    let note = |title: &str, content: &str, images: &str, shop: i64| json!({"shopId": shop, "title": title, "content": content, "images": images});
    let cases = [
        note("", "内容", "", 1),
        note(&"长".repeat(256), "内容", "", 1),
        note("标题", "", "", 1),
        note("标题", "<script>only a script</script>", "", 1),
        note("标题", &"好".repeat(2049), "", 1),
        // 2000 characters, but 4× as many once `<` is escaped.
        note("标题", &"<".repeat(2000), "", 1),
        note("标题", "内容", &["/imgs/a.jpg"; 10].join(","), 1),
        note("标题", "内容", "javascript:alert(1)", 1),
        note("标题", "内容", "", 999_999),
    ];
    for body in &cases {
        let r = app.post_json("/api/blog", body, Some(&token)).await;
        assert_eq!(r.code(), "invalid_blog", "{body}: {r:?}");
        assert_eq!(r.status, 200);
    }
    // The limits hold in characters: 255 CJK characters are fine (765 bytes).
    let ok = app
        .post_json(
            "/api/blog",
            &note(&"长".repeat(255), &"好".repeat(2048), "", 1),
            Some(&token),
        )
        .await;
    assert!(ok.success(), "{ok:?}");
    let missing = app.get("/api/blog/999999", Some(&token)).await;
    assert_eq!(missing.code(), "blog_not_found");
    assert_eq!(missing.msg(), "笔记不存在");
    assert_eq!(
        put(&app, "/api/blog/like/999999", Some(&token))
            .await
            .code(),
        "blog_not_found"
    );
    assert_eq!(
        app.post_json("/api/blog", &json!({"title": "x"}), Some(&token))
            .await
            .status,
        400
    );
    assert_eq!(
        app.get("/api/blog/hot?current=0", None).await.code(),
        "invalid_request"
    );
    assert_eq!(
        app.get("/api/blog/0", Some(&token)).await.code(),
        "invalid_request"
    );
}

async fn the_hot_list_orders_by_likes_ten_a_page(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    without_demo_notes(&app).await;
    let tokens = login_many(&app, 4).await;
    let mut ids = Vec::new();
    for i in 0..12 {
        ids.push(publish(&app, &tokens[0], &format!("note {i}")).await);
    }
    // Note k gets k likes (k = 1..=3) from different users.
    for (k, blog) in ids.iter().take(4).enumerate() {
        for t in tokens.iter().take(k) {
            let r = put(&app, &format!("/api/blog/like/{blog}"), Some(t)).await;
            assert!(r.success(), "{r:?}");
            assert_eq!(r.body["data"]["isLike"], true);
        }
    }
    let first = app.get("/api/blog/hot", Some(&tokens[1])).await;
    let list = first.body["data"].as_array().unwrap();
    assert_eq!(list.len(), 10);
    let likes: Vec<i64> = list.iter().map(|b| b["liked"].as_i64().unwrap()).collect();
    assert!(likes.windows(2).all(|w| w[0] >= w[1]), "{likes:?}");
    assert_eq!(&ids_of(&first.body["data"])[..3], &[ids[3], ids[2], ids[1]]);
    // tokens[1] liked notes 2 and 3 (k >= 2) but not note 1.
    assert_eq!(list[0]["isLike"], true);
    assert_eq!(list[1]["isLike"], true);
    assert_eq!(list[2]["isLike"], false);
    let second = app.get("/api/blog/hot?current=2", None).await;
    assert_eq!(second.body["data"].as_array().unwrap().len(), 2);
    let all: HashSet<i64> = ids_of(&first.body["data"])
        .into_iter()
        .chain(ids_of(&second.body["data"]))
        .collect();
    assert_eq!(all.len(), 12, "no note twice, none missing");
    assert_eq!(
        app.get("/api/blog/hot?current=3", None).await.body["data"],
        json!([])
    );
    // The likers, in the order they liked.
    let likers = app
        .get(&format!("/api/blog/likes/{}", ids[3]), Some(&tokens[0]))
        .await;
    let liker_ids: Vec<i64> = likers.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_i64().unwrap())
        .collect();
    let mut expected = HashSet::new();
    for t in &tokens[..3] {
        expected.insert(me(&app, t).await);
    }
    assert_eq!(liker_ids.iter().copied().collect::<HashSet<_>>(), expected);
    // In the order they liked: the set's order (by time, then id for the same millisecond).
    assert_eq!(liker_ids, like_set(&app, ids[3]).await);
    assert!(likers.body["data"][0]["nickName"].is_string());
}

async fn notes_of_me_and_of_a_user_page_in_writing_order(backend: Backend) {
    let app = spawn_app(backend).await;
    let a = app.login("13812345678").await;
    let b = app.login("13812345679").await;
    let a_id = me(&app, &a).await;
    let mut mine = Vec::new();
    for i in 0..11 {
        mine.push(publish(&app, &a, &format!("a{i}")).await);
    }
    let theirs = publish(&app, &b, "b0").await;
    let p1 = app.get("/api/blog/of/me", Some(&a)).await;
    assert_eq!(ids_of(&p1.body["data"]), mine[..10]);
    let p2 = app.get("/api/blog/of/me?current=2", Some(&a)).await;
    assert_eq!(ids_of(&p2.body["data"]), mine[10..]);
    let of_a = app
        .get(&format!("/api/blog/of/user?id={a_id}&current=1"), Some(&b))
        .await;
    assert_eq!(ids_of(&of_a.body["data"]), mine[..10]);
    assert_eq!(of_a.body["data"][0]["isLike"], false);
    assert!(!ids_of(&of_a.body["data"]).contains(&theirs));
    assert_eq!(
        app.get("/api/blog/of/user", Some(&b)).await.status,
        400,
        "id is required"
    );
}

// ---- likes ----

async fn racing_like_toggles_keep_the_count_equal_to_the_set(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let tokens = login_many(&app, 50).await;
    let blog = publish(&app, &tokens[0], "popular").await;
    let key = format!("{}blog:liked:{blog}", app.prefix);

    // One user clicks 50 times at once: 25 likes and 25 unlikes, in some order.
    let mut tasks = Vec::new();
    for _ in 0..50 {
        let (app, token) = (app.clone(), tokens[1].clone());
        tasks.push(tokio::spawn(async move {
            put(&app, &format!("/api/blog/like/{blog}"), Some(&token)).await
        }));
    }
    let mut likes = 0;
    for t in tasks {
        let r = t.await.unwrap();
        assert!(r.success(), "{r:?}");
        likes += i64::from(r.body["data"]["isLike"] == true);
    }
    assert_eq!(likes, 25, "each toggle saw the one before it");
    assert_eq!(zcard(&app, &key).await, 0);
    assert_eq!(db_liked(&app, blog).await, 0);

    // 50 users like at once, then 20 of them take it back at once while 10 click twice.
    let mut tasks = Vec::new();
    for token in tokens.clone() {
        let app = app.clone();
        tasks.push(tokio::spawn(async move {
            put(&app, &format!("/api/blog/like/{blog}"), Some(&token)).await
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap().success());
    }
    assert_eq!(zcard(&app, &key).await, 50);
    assert_eq!(db_liked(&app, blog).await, 50);
    let mut tasks = Vec::new();
    for (i, token) in tokens.iter().take(30).cloned().enumerate() {
        let clicks = if i < 20 { 1 } else { 2 };
        for _ in 0..clicks {
            let (app, token) = (app.clone(), token.clone());
            tasks.push(tokio::spawn(async move {
                put(&app, &format!("/api/blog/like/{blog}"), Some(&token)).await
            }));
        }
    }
    for t in tasks {
        assert!(t.await.unwrap().success());
    }
    assert_eq!(zcard(&app, &key).await, 30);
    assert_eq!(db_liked(&app, blog).await, 30);
    let shown = app
        .get(&format!("/api/blog/{blog}"), Some(&tokens[0]))
        .await;
    assert_eq!(shown.body["data"]["liked"], 30);
    assert_eq!(shown.body["data"]["isLike"], false, "tokens[0] unliked");
}

/// The likers are kept in the database: a Redis that lost a note's set rebuilds it from there,
/// so the next like is one more (not the first), and the likers list comes back.
async fn a_lost_like_set_is_rebuilt_from_the_database(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let tokens = login_many(&app, 5).await;
    let mut ids = Vec::new();
    for t in &tokens {
        ids.push(me(&app, t).await);
    }
    let blog = publish(&app, &tokens[0], "loved").await;
    let key = format!("{}blog:liked:{blog}", app.prefix);
    let like = |token: String| {
        let app = app.clone();
        async move { put(&app, &format!("/api/blog/like/{blog}"), Some(&token)).await }
    };
    let lose = || {
        let (app, key) = (app.clone(), key.clone());
        async move {
            let _: () = app.redis().await.del(&key).await.unwrap();
        }
    };
    for t in &tokens[1..4] {
        assert!(like(t.clone()).await.success());
    }
    assert_eq!(like_rows(&app, blog).await, sorted(&ids[1..4]));

    // The set is lost; a fourth user likes the note.
    lose().await;
    let r = like(tokens[4].clone()).await;
    assert_eq!(r.body["data"], json!({"isLike": true, "liked": 4}), "{r:?}");
    assert_eq!(db_liked(&app, blog).await, 4);
    let in_redis = like_set(&app, blog).await;
    assert_eq!(sorted(&in_redis), sorted(&ids[1..5]));
    let likers = app
        .get(&format!("/api/blog/likes/{blog}"), Some(&tokens[0]))
        .await;
    let likers: Vec<i64> = likers.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_i64().unwrap())
        .collect();
    assert_eq!(likers, in_redis, "in the order they liked");

    // Lost again: reads rebuild it too, and an unlike counts down from the right number.
    lose().await;
    let shown = app
        .get(&format!("/api/blog/{blog}"), Some(&tokens[1]))
        .await;
    assert_eq!(shown.body["data"]["isLike"], true, "{shown:?}");
    lose().await;
    let r = like(tokens[2].clone()).await;
    assert_eq!(
        r.body["data"],
        json!({"isLike": false, "liked": 3}),
        "{r:?}"
    );
    assert_eq!(
        like_rows(&app, blog).await,
        sorted(&[ids[1], ids[3], ids[4]])
    );

    // A set written before the table existed (no marker) is kept and recorded, not wiped.
    let older = publish(&app, &tokens[0], "older").await;
    let older_key = format!("{}blog:liked:{older}", app.prefix);
    let _: () = app
        .redis()
        .await
        .zadd_multiple(&older_key, &[(1_000, ids[1]), (2_000, ids[2])])
        .await
        .unwrap();
    let r = put(&app, &format!("/api/blog/like/{older}"), Some(&tokens[3])).await;
    assert_eq!(r.body["data"], json!({"isLike": true, "liked": 3}), "{r:?}");
    assert_eq!(like_rows(&app, older).await, sorted(&ids[1..4]));
    assert_eq!(like_set(&app, older).await, ids[1..4].to_vec());
}

/// A set written before the likes table (no marker) of a note nobody opens is copied into the
/// table at start-up, so a Redis that loses its data afterwards loses none of its likes.
async fn like_sets_without_the_marker_are_adopted_at_start_up(backend: Backend) {
    // Demo note 1 exists on a new database; its likers come from an older version's set.
    let (prefix, blog, older) = (hmdp_testkit::unique_prefix(), 1_i64, [900_001_i64, 900_002]);
    let key = format!("{prefix}blog:liked:{blog}");
    let mut redis = redis::Client::open(hmdp_testkit::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis
        .zadd_multiple(&key, &[(1_000, older[0]), (2_000, older[1])])
        .await
        .unwrap();
    let app = spawn_app_with(backend, |c| c.redis_prefix = prefix.clone()).await;
    wait_until(
        Duration::from_secs(10),
        "the likers in the table",
        async || like_rows(&app, blog).await == older,
    )
    .await;

    // Redis loses its data: the next like counts on from the adopted likers.
    let _: () = redis.del(&key).await.unwrap();
    let token = app.login("13812345678").await;
    let r = put(&app, &format!("/api/blog/like/{blog}"), Some(&token)).await;
    assert_eq!(r.body["data"], json!({"isLike": true, "liked": 3}), "{r:?}");
    assert_eq!(db_liked(&app, blog).await, 3);
}

/// A note from the original `hmdp.sql` says `liked=1` with no likers in Redis: the first toggle
/// replaces the count with the set's size, and it never goes negative.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_like_count_gives_way_to_the_set_size() {
    let app = spawn_app(Backend::Sqlite).await;
    let token = app.login("13812345678").await;
    let blog = publish(&app, &token, "legacy").await;
    exec(&app, "UPDATE tb_blog SET liked = 1 WHERE id = ?", &[blog]).await;
    assert_eq!(
        app.get(&format!("/api/blog/{blog}"), Some(&token))
            .await
            .body["data"]["liked"],
        1
    );
    let r = put(&app, &format!("/api/blog/like/{blog}"), Some(&token)).await;
    assert_eq!(r.body["data"], json!({"isLike": true, "liked": 1}));
    assert_eq!(db_liked(&app, blog).await, 1);
    let r = put(&app, &format!("/api/blog/like/{blog}"), Some(&token)).await;
    assert_eq!(r.body["data"], json!({"isLike": false, "liked": 0}));
    assert_eq!(db_liked(&app, blog).await, 0);
}

// ---- follows ----

async fn follows_are_idempotent_and_refuse_self_and_unknown_users(backend: Backend) {
    let app = spawn_app(backend).await;
    let a = app.login("13812345678").await;
    let b = app.login("13812345679").await;
    let c = app.login("13812345670").await;
    let (a_id, b_id, c_id) = (me(&app, &a).await, me(&app, &b).await, me(&app, &c).await);

    for _ in 0..2 {
        let r = put(&app, &format!("/api/follow/{b_id}/true"), Some(&a)).await;
        assert!(r.success(), "{r:?}");
        assert_eq!(r.body["data"], true);
    }
    assert_eq!(
        scalar(
            &app,
            "SELECT COUNT(*) FROM tb_follow WHERE user_id = ? AND follow_user_id = ?",
            &[a_id, b_id]
        )
        .await,
        1,
        "one row per pair"
    );
    let or_not = app
        .get(&format!("/api/follow/or/not/{b_id}"), Some(&a))
        .await;
    assert_eq!(or_not.body, json!({"success": true, "data": true}));
    assert_eq!(
        app.get(&format!("/api/follow/or/not/{a_id}"), Some(&b))
            .await
            .body["data"],
        false
    );

    // Common follows: a and c both follow b.
    assert!(
        put(&app, &format!("/api/follow/{b_id}/true"), Some(&c))
            .await
            .success()
    );
    let common = app
        .get(&format!("/api/follow/common/{c_id}"), Some(&a))
        .await;
    assert_eq!(
        common.body["data"].as_array().unwrap().len(),
        1,
        "{common:?}"
    );
    assert_eq!(common.body["data"][0]["id"], b_id);
    assert!(common.body["data"][0]["nickName"].is_string());
    assert_eq!(
        app.get("/api/follow/common/999999", Some(&a)).await.body["data"],
        json!([])
    );

    // Unfollow twice, with Spring's other spellings of a boolean.
    for flag in ["false", "0"] {
        let r = put(&app, &format!("/api/follow/{b_id}/{flag}"), Some(&a)).await;
        assert_eq!(r.body["data"], false, "{r:?}");
    }
    assert_eq!(
        app.get(&format!("/api/follow/or/not/{b_id}"), Some(&a))
            .await
            .body["data"],
        false
    );
    assert_eq!(
        app.get(&format!("/api/follow/common/{c_id}"), Some(&a))
            .await
            .body["data"],
        json!([])
    );
    assert_eq!(follow_set(&app, a_id).await, Vec::<i64>::new());

    let own = put(&app, &format!("/api/follow/{a_id}/true"), Some(&a)).await;
    assert_eq!(own.code(), "follow_self");
    let unknown = put(&app, "/api/follow/999999/true", Some(&a)).await;
    assert_eq!(unknown.code(), "user_not_found");
    assert_eq!(
        put(&app, &format!("/api/follow/{b_id}/maybe"), Some(&a))
            .await
            .status,
        400
    );

    // A lost set is rebuilt from the table, not read as "follows nobody".
    assert!(
        put(&app, &format!("/api/follow/{b_id}/true"), Some(&a))
            .await
            .success()
    );
    let _: () = app
        .redis()
        .await
        .del(format!("{}follows:{a_id}", app.prefix))
        .await
        .unwrap();
    let common = app
        .get(&format!("/api/follow/common/{c_id}"), Some(&a))
        .await;
    assert_eq!(common.body["data"][0]["id"], b_id, "{common:?}");
    assert_eq!(follow_set(&app, a_id).await, vec![b_id]);
}

async fn racing_follow_toggles_keep_the_set_equal_to_the_rows(backend: Backend) {
    let app = Arc::new(spawn_app(backend).await);
    let tokens = login_many(&app, 6).await;
    let mut ids = Vec::new();
    for t in &tokens {
        ids.push(me(&app, t).await);
    }
    let user = ids[0];
    let targets = ids[1..].to_vec();
    for round in 0..3 {
        // Round 0 starts without a set; later rounds lose it in the middle of the burst, so
        // rebuilds race the changes.
        let mut tasks = Vec::new();
        for i in 0..60_usize {
            let (app, token) = (app.clone(), tokens[0].clone());
            // Two pairs, each followed and unfollowed 15 times at once: any reordering of the
            // database and Redis writes of one pair leaves them different.
            let target = targets[(i + round) % 2];
            let flag = (i / 2 + round) % 2 == 0;
            let other = tokens[1 + i % 5].clone();
            tasks.push(tokio::spawn(async move {
                if i % 10 == 5 {
                    if round > 0 {
                        let _: () = app
                            .redis()
                            .await
                            .del(format!("{}follows:{user}", app.prefix))
                            .await
                            .unwrap();
                    }
                    // A read that rebuilds the set while the changes go on.
                    let r = app
                        .get(&format!("/api/follow/common/{user}"), Some(&other))
                        .await;
                    assert!(r.success(), "{r:?}");
                }
                let r = put(&app, &format!("/api/follow/{target}/{flag}"), Some(&token)).await;
                assert!(r.success(), "{r:?}");
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        // Load the set if the last burst left it lost, then compare.
        let r = app
            .get(
                &format!("/api/follow/common/{}", targets[0]),
                Some(&tokens[0]),
            )
            .await;
        assert!(r.success());
        let rows = follow_rows(&app, user).await;
        assert_eq!(follow_set(&app, user).await, rows, "round {round}");
        let distinct: HashSet<i64> = rows.iter().copied().collect();
        assert_eq!(distinct.len(), rows.len(), "one row per pair");
    }
}

/// `HMDP_FOLLOW_MAX` refuses a new follow beyond it; following again and unfollowing still work.
async fn follows_per_user_are_capped(backend: Backend) {
    let app = Arc::new(spawn_app_with(backend, |c| c.social.follow_max = 2).await);
    let tokens = login_many(&app, 4).await;
    let mut ids = Vec::new();
    for t in &tokens {
        ids.push(me(&app, t).await);
    }
    let user = &tokens[0];
    for target in [ids[1], ids[2]] {
        let r = put(&app, &format!("/api/follow/{target}/true"), Some(user)).await;
        assert!(r.success(), "{r:?}");
    }
    let over = put(&app, &format!("/api/follow/{}/true", ids[3]), Some(user)).await;
    assert_eq!(over.status, 200, "a business refusal: {over:?}");
    assert_eq!(over.code(), "follow_limit", "{over:?}");
    assert!(!over.success());
    assert_eq!(follow_rows(&app, ids[0]).await, sorted(&[ids[1], ids[2]]));
    let again = put(&app, &format!("/api/follow/{}/true", ids[1]), Some(user)).await;
    assert!(
        again.success(),
        "following again is no new follow: {again:?}"
    );

    assert!(
        put(&app, &format!("/api/follow/{}/false", ids[2]), Some(user))
            .await
            .success()
    );
    let now = put(&app, &format!("/api/follow/{}/true", ids[3]), Some(user)).await;
    assert!(now.success(), "room again after an unfollow: {now:?}");
    assert_eq!(follow_rows(&app, ids[0]).await, sorted(&[ids[1], ids[3]]));
    let r = app
        .get(&format!("/api/follow/common/{}", ids[1]), Some(user))
        .await;
    assert!(r.success());
    assert_eq!(follow_set(&app, ids[0]).await, sorted(&[ids[1], ids[3]]));
}

/// Inserts `n` users straight into the table; their ids, ascending.
async fn insert_users(app: &TestApp, n: i64) -> Vec<i64> {
    for i in 0..n {
        exec(
            app,
            "INSERT INTO tb_user (phone, nick_name) VALUES (?, 'bulk')",
            &[13_700_000_000 + i],
        )
        .await;
    }
    column(
        app,
        "SELECT CAST(id AS SIGNED) FROM tb_user WHERE nick_name = 'bulk' ORDER BY id",
        &[],
    )
    .await
}

/// Two users who both follow 150 others see the first 100 of them by id, whether Redis or the
/// table answers.
async fn common_follows_show_the_first_hundred_by_id(backend: Backend) {
    let app = spawn_app(backend).await;
    let a = app.login("13812345678").await;
    let b = app.login("13812345679").await;
    let (a_id, b_id) = (me(&app, &a).await, me(&app, &b).await);
    let others = insert_users(&app, 150).await;
    assert_eq!(others.len(), 150);
    for id in &others {
        for follower in [a_id, b_id] {
            exec(
                &app,
                "INSERT INTO tb_follow (user_id, follow_user_id) VALUES (?, ?)",
                &[follower, *id],
            )
            .await;
        }
    }
    let r = app
        .get(&format!("/api/follow/common/{b_id}"), Some(&a))
        .await;
    assert!(r.success(), "{r:?}");
    assert_eq!(ids_of(&r.body["data"]), others[..100].to_vec());
}

/// More ids than one statement may bind (SQLite: 32,766; MySQL: 65,535) are read in bounded
/// lists, and the users come back in the order asked, unknown ids left out.
async fn users_are_read_in_bounded_lists_in_the_order_asked(backend: Backend) {
    let app = spawn_app(backend).await;
    let known = insert_users(&app, 3).await;
    let mut ids: Vec<i64> = (1_000_000..1_070_000).collect();
    ids.insert(0, known[1]);
    ids.insert(40_000, known[2]);
    ids.push(known[0]);
    ids.push(known[1]);
    let users = hmdp::testing::storage::users_by_ids(&app.state.db, &ids)
        .await
        .unwrap();
    let got: Vec<i64> = users.iter().map(|u| u.id.get()).collect();
    assert_eq!(got, vec![known[1], known[2], known[0]]);
}

// ---- feed ----

async fn the_feed_scrolls_two_at_a_time_without_skipping_ties(backend: Backend) {
    let app = spawn_app(backend).await;
    let reader = app.login("13812345678").await;
    let author = app.login("13812345679").await;
    let (reader_id, author_id) = (me(&app, &reader).await, me(&app, &author).await);
    let now = chrono::Local::now().timestamp_millis() + 60_000;

    let empty = app
        .get(&format!("/api/blog/of/follow?lastId={now}"), Some(&reader))
        .await;
    assert_eq!(
        empty.body,
        json!({"success": true}),
        "an empty inbox: no data"
    );

    let before = publish(&app, &author, "before the follow").await;
    assert!(
        put(
            &app,
            &format!("/api/follow/{author_id}/true"),
            Some(&reader)
        )
        .await
        .success()
    );
    let mut notes = Vec::new();
    for i in 0..7 {
        notes.push(publish(&app, &author, &format!("n{i}")).await);
    }
    let inbox = format!("{}feed:{reader_id}", app.prefix);
    assert_eq!(zcard(&app, &inbox).await, 7, "pushed at once; no backfill");
    let shown = scroll_all(&app, &reader, now).await;
    assert_eq!(shown, order_in(&app, &inbox, &notes).await);
    assert!(!shown.contains(&before));

    // Ties: five notes share one millisecond, two another.
    let scores = [1000, 1000, 1000, 1000, 1000, 900, 900];
    let mut conn = app.redis().await;
    for (id, score) in notes.iter().zip(scores) {
        let _: () = redis::cmd("ZADD")
            .arg(&inbox)
            .arg("XX")
            .arg(score)
            .arg(id)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    let expected = redis_order(notes.iter().copied().zip(scores).collect());
    let shown = scroll_all(&app, &reader, now).await;
    assert_eq!(shown, expected, "each note once, in Redis's order");
    // The page where the whole page ties with lastId carries the incoming offset on.
    let p = app
        .get("/api/blog/of/follow?lastId=1000&offset=2", Some(&reader))
        .await;
    assert_eq!(p.body["data"]["minTime"], 1000);
    assert_eq!(p.body["data"]["offset"], 4);
    let p = app
        .get("/api/blog/of/follow?lastId=1000&offset=4", Some(&reader))
        .await;
    assert_eq!(p.body["data"]["minTime"], 900);
    assert_eq!(p.body["data"]["offset"], 1);
    assert_eq!(
        p.body["data"]["list"][0]["name"].as_str().unwrap().len(),
        15
    );
    assert_eq!(
        app.get("/api/blog/of/follow", Some(&reader)).await.status,
        400,
        "lastId is required"
    );
}

async fn big_authors_are_pulled_into_the_feed_at_read_time(backend: Backend) {
    let app = Arc::new(
        spawn_app_with(backend, |c| {
            c.social.feed_push_max_followers = 1;
            c.social.feed_inbox_max = 3;
        })
        .await,
    );
    let tokens = login_many(&app, 4).await;
    let (reader, small, big, other) = (&tokens[0], &tokens[1], &tokens[2], &tokens[3]);
    let ids = [
        me(&app, reader).await,
        me(&app, small).await,
        me(&app, big).await,
        me(&app, other).await,
    ];
    for (who, whom) in [(reader, ids[1]), (reader, ids[2]), (other, ids[2])] {
        assert!(
            put(&app, &format!("/api/follow/{whom}/true"), Some(who))
                .await
                .success()
        );
    }
    let mut from_small = Vec::new();
    let mut from_big = Vec::new();
    for i in 0..3 {
        from_small.push(publish(&app, small, &format!("s{i}")).await);
        from_big.push(publish(&app, big, &format!("b{i}")).await);
    }
    let inbox = format!("{}feed:{}", app.prefix, ids[0]);
    let outbox = format!("{}feed:outbox:{}", app.prefix, ids[2]);
    assert_eq!(zcard(&app, &inbox).await, 3, "only the small author pushed");
    assert_eq!(
        zcard(&app, &outbox).await,
        3,
        "the big author's notes wait in the outbox"
    );
    let start = chrono::Local::now().timestamp_millis() + 60_000;
    let mut conn = app.redis().await;
    let mut entries = Vec::new();
    for (key, notes) in [(&inbox, &from_small), (&outbox, &from_big)] {
        for id in notes.iter() {
            let score: f64 = conn.zscore(key, id).await.unwrap();
            entries.push((*id, score as i64));
        }
    }
    assert_eq!(scroll_all(&app, reader, start).await, redis_order(entries));
    assert_eq!(
        scroll_all(&app, other, start).await,
        order_in(&app, &outbox, &from_big).await
    );

    // Ties across the inbox and the outbox are neither skipped nor repeated.
    let mut entries = Vec::new();
    for (key, notes) in [(&inbox, &from_small), (&outbox, &from_big)] {
        for id in notes.iter() {
            let _: () = redis::cmd("ZADD")
                .arg(key)
                .arg("XX")
                .arg(500)
                .arg(id)
                .query_async(&mut conn)
                .await
                .unwrap();
            entries.push((*id, 500));
        }
    }
    assert_eq!(scroll_all(&app, reader, start).await, redis_order(entries));

    // Unfollowing a pulled author takes its notes out of the feed at once.
    assert!(
        put(&app, &format!("/api/follow/{}/false", ids[2]), Some(reader))
            .await
            .success()
    );
    assert_eq!(
        scroll_all(&app, reader, start).await,
        redis_order(from_small.iter().map(|id| (*id, 500)).collect())
    );

    // Inboxes are trimmed to the newest `feed_inbox_max`.
    for i in 0..2 {
        publish(&app, small, &format!("more{i}")).await;
    }
    assert_eq!(zcard(&app, &inbox).await, 3);
}

/// An author with more followers than one pipeline batch is fanned out in the background;
/// shutdown waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_fan_out_runs_in_the_background_and_shutdown_waits_for_it() {
    let app = spawn_app(Backend::Sqlite).await;
    let author = app.login("13812345678").await;
    let author_id = me(&app, &author).await;
    // 1,200 followers (rows only: the fan-out reads tb_follow).
    hmdp::on_pool!(&app.state.db, pool => {
        for chunk in (100_000..101_200).collect::<Vec<i64>>().chunks(300) {
            let marks = vec!["(?, ?)"; chunk.len()].join(", ");
            let sql = format!("INSERT INTO tb_follow (user_id, follow_user_id) VALUES {marks}");
            let mut q = sqlx::query(&sql);
            for f in chunk {
                q = q.bind(*f).bind(author_id);
            }
            q.execute(pool).await.unwrap();
        }
    });
    let blog = publish(&app, &author, "to many").await;
    app.state.social.shutdown().await;
    assert_eq!(app.state.social.fan_outs_in_flight(), 0);
    let mut conn = app.redis().await;
    for f in [100_000, 100_599, 101_199] {
        let score: Option<f64> = conn
            .zscore(format!("{}feed:{f}", app.prefix), blog)
            .await
            .unwrap();
        assert!(score.is_some(), "follower {f}");
    }
    let mut pipe = redis::pipe();
    for f in 100_000..101_200 {
        pipe.zcard(format!("{}feed:{f}", app.prefix));
    }
    let sizes: Vec<i64> = pipe.query_async(&mut conn).await.unwrap();
    assert!(sizes.iter().all(|n| *n == 1));
}

/// On a Redis Cluster the follow sets of two users are in different slots: common follows are
/// intersected in the service, and likes, the feed and the hybrid merge keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_social_half_runs_on_a_redis_cluster() {
    let cluster = RedisCluster::start().await;
    let url = cluster.urls().join(",");
    let app = Arc::new(
        spawn_app_with(Backend::Sqlite, move |c| {
            c.redis_url = Some(url);
            c.social.feed_push_max_followers = 1;
        })
        .await,
    );
    without_demo_notes(&app).await;
    let tokens = login_many(&app, 4).await;
    let mut ids = Vec::new();
    for t in &tokens {
        ids.push(me(&app, t).await);
    }
    // 0 and 1 both follow 2 and 3, so 2 and 3 have two followers each: both are pulled.
    for token in &tokens[..2] {
        for whom in [2, 3] {
            let r = put(
                &app,
                &format!("/api/follow/{}/true", ids[whom]),
                Some(token),
            )
            .await;
            assert!(r.success(), "{r:?}");
        }
    }
    let common = app
        .get(&format!("/api/follow/common/{}", ids[1]), Some(&tokens[0]))
        .await;
    assert!(common.success(), "{common:?}");
    let mut got: Vec<i64> = common.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["id"].as_i64().unwrap())
        .collect();
    got.sort_unstable();
    let mut want = vec![ids[2], ids[3]];
    want.sort_unstable();
    assert_eq!(got, want);

    let blog = publish(&app, &tokens[3], "on a cluster").await;
    let r = put(&app, &format!("/api/blog/like/{blog}"), Some(&tokens[0])).await;
    assert_eq!(r.body["data"]["liked"], 1, "{r:?}");
    let hot = app.get("/api/blog/hot", Some(&tokens[0])).await;
    assert_eq!(hot.body["data"][0]["isLike"], true, "{hot:?}");
    let start = chrono::Local::now().timestamp_millis() + 60_000;
    wait_until(Duration::from_secs(5), "the note in the feed", async || {
        scroll_all(&app, &tokens[1], start).await == vec![blog]
    })
    .await;

    // Like sets from an older version, on every primary, are adopted by the start-up walk.
    let ranges = [0..5461, 5461..10923, 10923..16384];
    let mut older = Vec::new();
    while !ranges.iter().all(|r| {
        older.iter().any(|b| {
            r.contains(&hmdp::testing::kv::key_slot(&format!(
                "{}blog:liked:{b}",
                app.prefix
            )))
        })
    }) {
        assert!(older.len() < 40, "notes on every primary");
        let note = publish(&app, &tokens[3], "older").await;
        let _: () = app
            .state
            .redis
            .clone()
            .zadd(format!("{}blog:liked:{note}", app.prefix), ids[2], 1_000)
            .await
            .unwrap();
        older.push(note);
    }
    let done = app.state.social.adopt_unmarked_likes().await.unwrap();
    assert_eq!(done.adopted, older.len() as u64, "{done:?}");
    for note in &older {
        assert_eq!(like_rows(&app, *note).await, vec![ids[2]]);
    }
    let again = app.state.social.adopt_unmarked_likes().await.unwrap();
    assert_eq!((again.seen, again.adopted), (older.len() as u64 + 1, 0));
}

//! Running on a database created by the original project: its schema, its rows, no record of
//! any migration.
//!
//! Each check runs on `tests/fixtures/original-schema.sql` (the original's tables with rows of
//! our own), and in addition on the original `hmdp.sql` when it is at hand (see
//! [`SchemaDump::available`]); the test prints which ones ran.

use serde_json::json;
use sqlx::Connection;

use crate::{
    both_backends,
    helpers::{Backend, SchemaDump, TestApp, TestDatabase, spawn_with_config, test_config},
};

both_backends!(
    adopted_notes_are_sanitized_once_and_ours_are_left_alone,
    a_database_that_kept_remote_images_loses_them,
);

/// Every migration version, in order.
fn all_versions() -> Vec<i64> {
    (1..=13).collect()
}

/// What a dump holds, for the checks to compare with.
struct Facts {
    users: i64,
    shops: i64,
    /// A user who logs in with their phone: phone, id and nick name.
    member: (&'static str, i64, &'static str),
    /// Another user: id and nick name.
    other: (i64, &'static str),
    types: usize,
    /// Shop types at positions of the list sorted by `sort`, which is not the order of ids.
    sorted_types: [(usize, &'static str); 3],
    /// The title of the first voucher on sale at shop 1.
    first_voucher_of_shop_1: &'static str,
    /// The table's AUTO_INCREMENT counter, where a new user's id starts.
    next_user_id: i64,
}

fn facts(dump: &SchemaDump) -> Facts {
    match dump {
        SchemaDump::Fixture => Facts {
            users: 4,
            shops: 9,
            member: ("13511110007", 7, "周末探店人"),
            other: (2, "青柠汽水"),
            types: 5,
            sorted_types: [(0, "火锅"), (1, "咖啡馆"), (3, "宠物店")],
            first_voucher_of_shop_1: "88元双人锅底券",
            next_user_id: 120,
        },
        SchemaDump::Original(_) => Facts {
            users: 1005,
            shops: 14,
            member: ("13686869696", 1, "小鱼同学"),
            other: (2, "可可今天不吃肉"),
            types: 10,
            sorted_types: [(0, "美食"), (1, "KTV"), (3, "美睫·美甲")],
            first_voucher_of_shop_1: "50元代金券",
            next_user_id: 1010,
        },
    }
}

async fn count(db: &TestDatabase, sql: &str) -> i64 {
    let mut conn = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_the_original_database() {
    SchemaDump::check_each(
        "the_service_runs_on_the_original_database",
        the_service_runs_on,
    )
    .await;
}

async fn the_service_runs_on(dump: &SchemaDump) {
    let facts = facts(dump);
    let db = TestDatabase::create().await;
    dump.load_into(&db).await;
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM tb_user").await,
        facts.users
    );

    let dir = tempfile::tempdir().unwrap();
    let config = test_config(db.url.clone(), dir.path());
    let url = db.url.clone();
    let app = spawn_with_config(config, Backend::MySql, Some(db), dir).await;

    // An existing user logs in with their phone and gets their own id back.
    let (phone, id, nick) = facts.member;
    let token = app.login(phone).await;
    let me = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(me.body["data"]["id"], id, "{me:?}");
    assert_eq!(me.body["data"]["nickName"], nick);
    let other = app
        .get(&format!("/api/user/{}", facts.other.0), Some(&token))
        .await;
    assert_eq!(other.body["data"]["nickName"], facts.other.1);

    // The original catalogue is served as it is, and was not "seeded" over.
    let types = app.get("/api/shop-type/list", None).await;
    let types = types.body["data"].as_array().unwrap().clone();
    assert_eq!(types.len(), facts.types);
    for (at, name) in facts.sorted_types {
        assert_eq!(types[at]["name"], name, "sorted by sort: {types:?}");
    }
    let shop = app.get("/api/shop/1", None).await;
    assert!(shop.success(), "{shop:?}");
    assert_eq!(shop.body["data"]["typeId"], 1);
    let vouchers = app.get("/api/voucher/list/1", None).await;
    assert_eq!(
        vouchers.body["data"][0]["title"],
        facts.first_voucher_of_shop_1
    );

    // A new phone still creates a new user, after the existing ones.
    let t = app.login("13900000001").await;
    let me = app.get("/api/user/me", Some(&t)).await;
    assert!(me.body["data"]["id"].as_i64().unwrap() >= facts.next_user_id);

    // Migrations run again (a second start) without harm.
    let db2 = hmdp::testing::storage::Db::connect(&url, 2).await.unwrap();
    let report = hmdp::testing::storage::migrate(&db2).await.unwrap();
    assert!(report.applied.is_empty(), "{report:?}");
    assert!(!report.seeded_demo);
    db2.close().await;
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_adopt_the_original_schema_and_are_idempotent() {
    SchemaDump::check_each("migrations_adopt_the_original_schema", migrations_adopt).await;
}

async fn migrations_adopt(dump: &SchemaDump) {
    let facts = facts(dump);
    let db = TestDatabase::create().await;
    dump.load_into(&db).await;
    let pool = hmdp::testing::storage::Db::connect(&db.url, 2)
        .await
        .unwrap();

    let blogs = count(&db, "SELECT COUNT(*) FROM tb_blog").await;
    let first = hmdp::testing::storage::migrate(&pool).await.unwrap();
    assert_eq!(first.applied, all_versions());
    assert!(!first.seeded_demo, "an existing catalogue is never seeded");
    assert!(!first.seeded_demo_people, "nor are demo people added");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM tb_blog").await, blogs);
    let second = hmdp::testing::storage::migrate(&pool).await.unwrap();
    assert!(second.applied.is_empty());

    // Existing data is untouched and the one-order-per-user key now exists.
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM tb_user").await,
        facts.users
    );
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM tb_shop").await,
        facts.shops
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() \
             AND table_name = 'tb_voucher_order' AND index_name = 'uk_voucher_order_user_voucher' \
             AND non_unique = 0"
        )
        .await,
        2,
        "a unique index over two columns"
    );
    // The original's comments table gets the index a thread's delete goes through.
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() \
             AND table_name = 'tb_blog_comments' AND index_name = 'idx_blog_comments_parent'"
        )
        .await,
        1
    );
    // Every flash-sale voucher has its initial stock: its stock plus its orders.
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM tb_seckill_voucher sv JOIN hmdp_voucher_initial_stock i \
             ON i.voucher_id = sv.voucher_id WHERE i.initial_stock = sv.stock + \
             (SELECT COUNT(*) FROM tb_voucher_order o WHERE o.voucher_id = sv.voucher_id AND o.status <> 4)"
        )
        .await,
        count(&db, "SELECT COUNT(*) FROM tb_seckill_voucher").await,
    );
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent_on_sqlite_too() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/x.db", dir.path().display());
    let db = hmdp::testing::storage::Db::connect(&url, 1).await.unwrap();
    let first = hmdp::testing::storage::migrate(&db).await.unwrap();
    assert_eq!(first.applied, all_versions());
    assert!(first.seeded_demo);
    assert!(first.seeded_demo_people);
    assert!(
        hmdp::testing::storage::migrate(&db)
            .await
            .unwrap()
            .applied
            .is_empty()
    );
    // Forget the records: every step must still be safe to repeat.
    if let hmdp::testing::storage::Db::Sqlite(pool) = &db {
        sqlx::query("DELETE FROM hmdp_schema_migrations")
            .execute(pool)
            .await
            .unwrap();
    }
    let again = hmdp::testing::storage::migrate(&db).await.unwrap();
    assert_eq!(again.applied, all_versions());
    assert!(!again.seeded_demo, "the catalogue is not seeded twice");
    assert!(!again.seeded_demo_people, "nor the people");
    if let hmdp::testing::storage::Db::Sqlite(pool) = &db {
        for (table, rows) in [("tb_user", 5), ("tb_blog", 10), ("tb_follow", 11)] {
            let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(n, rows, "{table}");
        }
    }
    db.close().await;
}

/// A note of the original's that would run in every reader's browser.
const HOSTILE: &str = "<p>好吃</p><script>alert(1)</script><img src=x onerror=alert(2)>\
    <a href=\"javascript:alert(3)\">看</a>";

/// Notes adopted from the original database were never cleaned, and its pages render `content`
/// as HTML: a migration cleans each once (recorded like any migration), and what hmdp wrote is
/// left byte for byte. On MySQL the note comes with the original's schema; on SQLite (which the
/// original never ran on) it is inserted into a database whose record of that migration is
/// forgotten.
async fn adopted_notes_are_sanitized_once_and_ours_are_left_alone(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (url, test_db) = match backend {
        Backend::MySql => {
            let db = TestDatabase::create().await;
            SchemaDump::Fixture.load_into(&db).await;
            (db.url.clone(), Some(db))
        }
        Backend::Sqlite => (format!("sqlite://{}/hmdp.db", dir.path().display()), None),
    };
    let db = hmdp::testing::storage::Db::connect(&url, 2).await.unwrap();
    if backend == Backend::Sqlite {
        hmdp::testing::storage::migrate(&db).await.unwrap();
        forget_migration(&db, 8).await;
    }
    let hostile = insert_note(&db, HOSTILE, 1_000_000).await;
    db.close().await;

    let config = test_config(url.clone(), dir.path());
    let app = spawn_with_config(config, backend, test_db, dir).await;
    let token = app.login("13900000001").await;
    let shown = app.get(&format!("/api/blog/{hostile}"), Some(&token)).await;
    assert!(shown.success(), "{shown:?}");
    assert_clean(shown.body["data"]["content"].as_str().unwrap());
    let hot = app.get("/api/blog/hot", None).await;
    assert_eq!(
        hot.body["data"][0]["id"], hostile,
        "the most liked: {hot:?}"
    );
    assert_clean(hot.body["data"][0]["content"].as_str().unwrap());

    // A note hmdp wrote, with everything the cleaner keeps; then the migration runs again.
    let ours = "<p>第一行<br>第二行 <b>粗</b> <i>斜</i> &amp; &lt;括号&gt;</p>\
        <a href=\"https://example.com/\" rel=\"noopener noreferrer\">链接</a>\
        <img src=\"/imgs/blogs/1/2/a.jpg\">";
    let r = app
        .post_json(
            "/api/blog",
            &json!({"shopId": 1, "title": "ours", "content": ours}),
            Some(&token),
        )
        .await;
    assert!(r.success(), "{r:?}");
    let id = r.body["data"].as_i64().unwrap();
    let before = note_content(&app, id).await;
    assert_eq!(before, ours);
    let db = hmdp::testing::storage::Db::connect(&url, 2).await.unwrap();
    forget_migration(&db, 8).await;
    let report = hmdp::testing::storage::migrate(&db).await.unwrap();
    assert_eq!(report.applied, vec![8]);
    db.close().await;
    assert_eq!(note_content(&app, id).await, before, "ours is left alone");
    assert_clean(&note_content(&app, hostile).await);
    app.stop().await;
}

fn assert_clean(content: &str) {
    for bad in ["<script", "onerror", "javascript:", "alert"] {
        assert!(!content.contains(bad), "{bad} in {content}");
    }
    assert!(
        content.contains("<p>好吃</p>"),
        "formatting kept: {content}"
    );
}

async fn forget_migration(db: &hmdp::testing::storage::Db, version: i64) {
    hmdp::on_pool!(db, pool => {
        sqlx::query("DELETE FROM hmdp_schema_migrations WHERE version = ?")
            .bind(version)
            .execute(pool)
            .await
            .unwrap();
    });
}

/// Inserts a note straight into `tb_blog`, by user 2 on shop 1; its id.
async fn insert_note(db: &hmdp::testing::storage::Db, content: &str, liked: i64) -> i64 {
    hmdp::on_pool!(db, pool => {
        sqlx::query(
            "INSERT INTO tb_blog (shop_id, user_id, title, images, content, liked, comments, \
             create_time, update_time) VALUES (1, 2, 'adopted', '/imgs/blogs/blog1.jpg', ?, ?, \
             0, '2022-01-11 16:05:47', '2022-01-11 16:05:47')",
        )
        .bind(content)
        .bind(liked)
        .execute(pool)
        .await
        .unwrap();
        sqlx::query_scalar::<_, i64>("SELECT CAST(MAX(id) AS SIGNED) FROM tb_blog")
            .fetch_one(pool)
            .await
            .unwrap()
    })
}

async fn note_content(app: &TestApp, id: i64) -> String {
    hmdp::on_pool!(&app.state.db, pool => {
        sqlx::query_scalar::<_, String>("SELECT content FROM tb_blog WHERE id = ?")
            .bind(id)
            .fetch_one(pool)
            .await
            .unwrap()
    })
}

/// A database migrated before version 12 kept images of other hosts (in notes' `content` and
/// `images`, and in comments): version 12 drops them and keeps the rest, once.
async fn a_database_that_kept_remote_images_loses_them(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (url, _test_db) = match backend {
        Backend::MySql => {
            let db = TestDatabase::create().await;
            (db.url.clone(), Some(db))
        }
        Backend::Sqlite => (format!("sqlite://{}/hmdp.db", dir.path().display()), None),
    };
    let db = hmdp::testing::storage::Db::connect(&url, 2).await.unwrap();
    hmdp::testing::storage::migrate(&db).await.unwrap();
    forget_migration(&db, 12).await;
    let remote = "<p>店<img src=\"https://evil.example/a.png\"><img src=\"/imgs/blogs/1/2/a.jpg\">\
        <a href=\"https://example.com/\" rel=\"noopener noreferrer\">链接</a></p>";
    let note = insert_note(&db, remote, 0).await;
    let comment = "<img src=\"//evil.example/b.png\">好<img src=\"/imgs/blogs/1/2/a.jpg\">";
    hmdp::on_pool!(&db, pool => {
        sqlx::query("UPDATE tb_blog SET images = ? WHERE id = ?")
            .bind("https://evil.example/c.jpg,/imgs/blogs/blog1.jpg")
            .bind(note)
            .execute(pool)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO tb_blog_comments (user_id, blog_id, parent_id, answer_id, content, \
             liked, status) VALUES (2, ?, 0, 0, ?, 0, 0)",
        )
        .bind(note)
        .bind(comment)
        .execute(pool)
        .await
        .unwrap();
    });

    let report = hmdp::testing::storage::migrate(&db).await.unwrap();
    assert_eq!(report.applied, vec![12]);
    let row = || async {
        hmdp::on_pool!(&db, pool => {
            let (content, images): (String, String) =
                sqlx::query_as("SELECT content, images FROM tb_blog WHERE id = ?")
                    .bind(note)
                    .fetch_one(pool)
                    .await
                    .unwrap();
            let comment: String =
                sqlx::query_scalar("SELECT content FROM tb_blog_comments WHERE blog_id = ?")
                    .bind(note)
                    .fetch_one(pool)
                    .await
                    .unwrap();
            (content, images, comment)
        })
    };
    let cleaned = row().await;
    assert_eq!(
        cleaned,
        (
            "<p>店<img><img src=\"/imgs/blogs/1/2/a.jpg\">\
             <a href=\"https://example.com/\" rel=\"noopener noreferrer\">链接</a></p>"
                .to_owned(),
            "/imgs/blogs/blog1.jpg".to_owned(),
            "<img>好<img src=\"/imgs/blogs/1/2/a.jpg\">".to_owned(),
        )
    );
    // Once cleaned, a repeat changes nothing.
    forget_migration(&db, 12).await;
    assert_eq!(
        hmdp::testing::storage::migrate(&db).await.unwrap().applied,
        vec![12]
    );
    assert_eq!(row().await, cleaned);
    db.close().await;
}

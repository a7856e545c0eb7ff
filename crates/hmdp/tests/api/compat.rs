//! Running on a database created by the original project: its schema, its rows, no record of
//! any migration.
//!
//! Each check runs on `tests/fixtures/original-schema.sql` (the original's tables with rows of
//! our own), and in addition on the original `hmdp.sql` when it is at hand (see
//! [`SchemaDump::available`]); the test prints which ones ran.

use sqlx::Connection;

use crate::helpers::{Backend, SchemaDump, TestDatabase, spawn_with_config, test_config};

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
    let db2 = hmdp::storage::Db::connect(&url, 2).await.unwrap();
    let report = hmdp::storage::migrate(&db2).await.unwrap();
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
    let pool = hmdp::storage::Db::connect(&db.url, 2).await.unwrap();

    let blogs = count(&db, "SELECT COUNT(*) FROM tb_blog").await;
    let first = hmdp::storage::migrate(&pool).await.unwrap();
    assert_eq!(first.applied, vec![1, 2, 3, 4, 5, 6, 7]);
    assert!(!first.seeded_demo, "an existing catalogue is never seeded");
    assert!(!first.seeded_demo_people, "nor are demo people added");
    assert_eq!(count(&db, "SELECT COUNT(*) FROM tb_blog").await, blogs);
    let second = hmdp::storage::migrate(&pool).await.unwrap();
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
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_are_idempotent_on_sqlite_too() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/x.db", dir.path().display());
    let db = hmdp::storage::Db::connect(&url, 1).await.unwrap();
    let first = hmdp::storage::migrate(&db).await.unwrap();
    assert_eq!(first.applied, vec![1, 2, 3, 4, 5, 6, 7]);
    assert!(first.seeded_demo);
    assert!(first.seeded_demo_people);
    assert!(
        hmdp::storage::migrate(&db)
            .await
            .unwrap()
            .applied
            .is_empty()
    );
    // Forget the records: every step must still be safe to repeat.
    if let hmdp::storage::Db::Sqlite(pool) = &db {
        sqlx::query("DELETE FROM hmdp_schema_migrations")
            .execute(pool)
            .await
            .unwrap();
    }
    let again = hmdp::storage::migrate(&db).await.unwrap();
    assert_eq!(again.applied, vec![1, 2, 3, 4, 5, 6, 7]);
    assert!(!again.seeded_demo, "the catalogue is not seeded twice");
    assert!(!again.seeded_demo_people, "nor the people");
    if let hmdp::storage::Db::Sqlite(pool) = &db {
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

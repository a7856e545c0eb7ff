//! Running on a database created from the original project's `hmdp.sql`.

use std::path::{Path, PathBuf};

use sqlx::{Connection, Executor};

use crate::helpers::{Backend, TestDatabase, spawn_with_config, test_config};

/// The original dump: `HMDP_ORIGINAL_SQL`, or `shared/data/hmdp.sql` beside the checkout (looked
/// up in every ancestor of the workspace, so a clone anywhere under the directory that holds
/// `shared/` finds it). Never copied into the repository: it is the original project's data.
fn original_sql() -> String {
    let path = std::env::var("HMDP_ORIGINAL_SQL")
        .map(PathBuf::from)
        .ok()
        .or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .map(|dir| dir.join("shared/data/hmdp.sql"))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| {
            panic!(
                "cannot find the original hmdp.sql in shared/data/ beside any parent of {}; \
                 set HMDP_ORIGINAL_SQL to its path",
                env!("CARGO_MANIFEST_DIR")
            )
        });
    std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read the original hmdp.sql at {} ({e}); set HMDP_ORIGINAL_SQL",
            path.display()
        )
    })
}

/// Loads the dump as the original project would have, into a fresh database.
pub async fn load_original(db: &TestDatabase) {
    let sql = original_sql();
    let mut conn = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    // The dump is from MySQL 5.6 and declares '0000-00-00' defaults, which strict modes reject.
    conn.execute("SET SESSION sql_mode = ''").await.unwrap();
    sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
    conn.close().await.unwrap();
}

async fn count(db: &TestDatabase, sql: &str) -> i64 {
    let mut conn = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
    sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_runs_on_the_original_database() {
    let db = TestDatabase::create().await;
    load_original(&db).await;
    assert_eq!(count(&db, "SELECT COUNT(*) FROM tb_user").await, 1005);

    let dir = tempfile::tempdir().unwrap();
    let config = test_config(db.url.clone(), dir.path());
    let url = db.url.clone();
    let app = spawn_with_config(config, Backend::MySql, Some(db), dir).await;

    // An existing user logs in with their phone and gets their own id back.
    let token = app.login("13686869696").await;
    let me = app.get("/api/user/me", Some(&token)).await;
    assert_eq!(me.body["data"]["id"], 1, "{me:?}");
    assert_eq!(me.body["data"]["nickName"], "小鱼同学");
    let other = app.get("/api/user/2", Some(&token)).await;
    assert_eq!(other.body["data"]["nickName"], "可可今天不吃肉");

    // The original catalogue is served as it is, and was not "seeded" over.
    let types = app.get("/api/shop-type/list", None).await;
    let types = types.body["data"].as_array().unwrap().clone();
    assert_eq!(types.len(), 10);
    assert_eq!(types[0]["name"], "美食");
    assert_eq!(types[1]["name"], "KTV");
    assert_eq!(types[3]["name"], "美睫·美甲", "sorted by sort: {types:?}");
    let shop = app.get("/api/shop/1", None).await;
    assert!(shop.success(), "{shop:?}");
    assert_eq!(shop.body["data"]["typeId"], 1);
    let vouchers = app.get("/api/voucher/list/1", None).await;
    assert_eq!(vouchers.body["data"][0]["title"], "50元代金券");

    // A new phone still creates a new user after the existing 1005.
    let t = app.login("13900000001").await;
    let me = app.get("/api/user/me", Some(&t)).await;
    assert!(me.body["data"]["id"].as_i64().unwrap() >= 1010);

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
    let db = TestDatabase::create().await;
    load_original(&db).await;
    let pool = hmdp::storage::Db::connect(&db.url, 2).await.unwrap();

    let first = hmdp::storage::migrate(&pool).await.unwrap();
    assert_eq!(first.applied, vec![1, 2, 3]);
    assert!(!first.seeded_demo, "an existing catalogue is never seeded");
    let second = hmdp::storage::migrate(&pool).await.unwrap();
    assert!(second.applied.is_empty());

    // Existing data is untouched and the one-order-per-user key now exists.
    assert_eq!(count(&db, "SELECT COUNT(*) FROM tb_user").await, 1005);
    assert_eq!(count(&db, "SELECT COUNT(*) FROM tb_shop").await, 14);
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
    assert_eq!(first.applied, vec![1, 2, 3]);
    assert!(first.seeded_demo);
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
    assert_eq!(again.applied, vec![1, 2, 3]);
    assert!(!again.seeded_demo, "the catalogue is not seeded twice");
    db.close().await;
}

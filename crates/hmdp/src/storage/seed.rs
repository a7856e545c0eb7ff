//! A small demo catalogue for an empty database, so a fresh `hmdp` has something to show.
//!
//! The data is made up for hmdp (a few places in Chengdu); it is inserted only when both
//! `tb_shop_type` and `tb_shop` are empty, so an existing catalogue (e.g. the original's) is
//! never touched.

use chrono::{Duration, Utc};

use super::{BeginWrite, Db, Result, last_id};

struct DemoType {
    name: &'static str,
    icon: &'static str,
    sort: i64,
}

struct DemoShop {
    name: &'static str,
    type_index: usize,
    area: &'static str,
    address: &'static str,
    x: f64,
    y: f64,
    avg_price: i64,
    sold: i64,
    comments: i64,
    score: i64,
    open_hours: &'static str,
}

const TYPES: &[DemoType] = &[
    DemoType {
        name: "美食",
        icon: "/types/food.svg",
        sort: 1,
    },
    DemoType {
        name: "咖啡",
        icon: "/types/coffee.svg",
        sort: 2,
    },
    DemoType {
        name: "KTV",
        icon: "/types/ktv.svg",
        sort: 3,
    },
    DemoType {
        name: "健身",
        icon: "/types/gym.svg",
        sort: 4,
    },
];

const SHOPS: &[DemoShop] = &[
    DemoShop {
        name: "锦江老码头火锅",
        type_index: 0,
        area: "春熙路",
        address: "锦江区红星路三段 18 号",
        x: 104.0817,
        y: 30.6571,
        avg_price: 98,
        sold: 5210,
        comments: 1893,
        score: 47,
        open_hours: "11:00-02:00",
    },
    DemoShop {
        name: "宽窄巷子担担面",
        type_index: 0,
        area: "宽窄巷子",
        address: "青羊区长顺上街 66 号",
        x: 104.0560,
        y: 30.6697,
        avg_price: 25,
        sold: 12044,
        comments: 3307,
        score: 45,
        open_hours: "07:00-21:00",
    },
    DemoShop {
        name: "玉林路小酒馆咖啡",
        type_index: 1,
        area: "玉林",
        address: "武侯区玉林西路 9 号",
        x: 104.0561,
        y: 30.6321,
        avg_price: 36,
        sold: 2301,
        comments: 655,
        score: 46,
        open_hours: "09:00-23:00",
    },
    DemoShop {
        name: "太古里手冲实验室",
        type_index: 1,
        area: "太古里",
        address: "锦江区中纱帽街 8 号",
        x: 104.0835,
        y: 30.6545,
        avg_price: 48,
        sold: 980,
        comments: 240,
        score: 48,
        open_hours: "10:00-22:00",
    },
    DemoShop {
        name: "天府麦霸量贩 KTV",
        type_index: 2,
        area: "天府广场",
        address: "青羊区人民南路一段 86 号",
        x: 104.0665,
        y: 30.6574,
        avg_price: 120,
        sold: 3120,
        comments: 801,
        score: 43,
        open_hours: "12:00-04:00",
    },
    DemoShop {
        name: "熊猫力量健身",
        type_index: 3,
        area: "高新区",
        address: "高新区天府大道北段 1700 号",
        x: 104.0689,
        y: 30.5757,
        avg_price: 150,
        sold: 430,
        comments: 118,
        score: 44,
        open_hours: "06:00-23:00",
    },
];

/// Inserts the demo catalogue if the catalogue is empty; returns whether it did.
pub(super) async fn seed_if_empty(db: &Db) -> Result<bool> {
    let (types, shops): (i64, i64) = crate::on_pool!(db, pool => {
        let t: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_shop_type").fetch_one(pool).await?;
        let s: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_shop").fetch_one(pool).await?;
        (t, s)
    });
    if types > 0 || shops > 0 {
        return Ok(false);
    }
    let now = Utc::now().naive_utc();
    let begin = now - Duration::hours(1);
    let end = now + Duration::days(30);
    crate::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let mut type_ids = Vec::with_capacity(TYPES.len());
        for t in TYPES {
            let r = sqlx::query("INSERT INTO tb_shop_type (name, icon, sort) VALUES (?, ?, ?)")
                .bind(t.name)
                .bind(t.icon)
                .bind(t.sort)
                .execute(&mut *tx)
                .await?;
            type_ids.push(last_id(&r));
        }
        let mut first_shop = None;
        for s in SHOPS {
            let r = sqlx::query(
                "INSERT INTO tb_shop (name, type_id, images, area, address, x, y, avg_price, sold, \
                 comments, score, open_hours) VALUES (?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(s.name)
            .bind(type_ids[s.type_index])
            .bind(s.area)
            .bind(s.address)
            .bind(s.x)
            .bind(s.y)
            .bind(s.avg_price)
            .bind(s.sold)
            .bind(s.comments)
            .bind(s.score)
            .bind(s.open_hours)
            .execute(&mut *tx)
            .await?;
            first_shop.get_or_insert(last_id(&r));
        }
        let r = sqlx::query(
            "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type, status) \
             VALUES (?, ?, ?, ?, ?, ?, 1, 1)",
        )
        .bind(first_shop)
        .bind("100元火锅代金券")
        .bind("周一至周日均可使用")
        .bind("全场通用\\n无需预约\\n每人限抢一张")
        .bind(6900_i64)
        .bind(10000_i64)
        .execute(&mut *tx)
        .await?;
        let voucher_id = last_id(&r);
        sqlx::query(
            "INSERT INTO tb_seckill_voucher (voucher_id, stock, begin_time, end_time) VALUES (?, ?, ?, ?)",
        )
        .bind(voucher_id)
        .bind(100_i64)
        .bind(begin)
        .bind(end)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
    });
    tracing::info!(
        shop_types = TYPES.len(),
        shops = SHOPS.len(),
        "inserted the demo catalogue into the empty database"
    );
    Ok(true)
}

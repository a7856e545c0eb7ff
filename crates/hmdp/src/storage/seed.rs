//! Demo data for an empty database, so a fresh `hmdp` has something to show — in our UI and in
//! the original front-end pages alike.
//!
//! Everything here is made up for hmdp. The pages fix what "fits": `shop-list.html` always asks
//! for shops within 5 km of one point in Hangzhou (x=120.149993, y=30.334229), so most demo
//! shops are there, of every type; type icons use the original's file names (`/types/ms.png`, the
//! pages show `'/imgs/' + icon`), drawn by us and served by the UI at `/imgs/types/…`; notes,
//! shop pictures and avatars point at our own images under `/imgs/demo/…`. One shop is in
//! Chengdu (where the first demo catalogue was), which the shop tests search around.
//!
//! Two steps, each inserting only into an empty database: the catalogue (migration 3) when
//! `tb_shop_type` and `tb_shop` are empty, and the people (migration 5: users, notes, follows)
//! only right after the catalogue was seeded in the same run — never into a database someone
//! else filled, such as the original's `hmdp.sql`.
//!
//! Notes inserted here are not in anybody's feed inbox (`feed:{userId}` is filled when a note is
//! published through the API) and their `liked` counts have no likers in Redis, as in the
//! original's data.

use chrono::{Duration, Local, NaiveDateTime, Timelike};
use sqlx::Row;

use super::{BeginWrite, Db, Result, last_id};

struct DemoType {
    name: &'static str,
    icon: &'static str,
    sort: i64,
}

struct DemoShop {
    name: &'static str,
    type_index: usize,
    images: &'static str,
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

/// Type ids follow this order on an empty database. Tests rely on two facts: type 1 (food) has
/// a shop near Chengdu's centre, and type 4 (fitness) has exactly one shop.
const TYPES: &[DemoType] = &[
    DemoType {
        name: "美食",
        icon: "/types/ms.png",
        sort: 1,
    },
    DemoType {
        name: "KTV",
        icon: "/types/KTV.png",
        sort: 2,
    },
    DemoType {
        name: "丽人·美发",
        icon: "/types/lrmf.png",
        sort: 3,
    },
    DemoType {
        name: "健身运动",
        icon: "/types/jsyd.png",
        sort: 4,
    },
    DemoType {
        name: "按摩·足疗",
        icon: "/types/amzl.png",
        sort: 5,
    },
    DemoType {
        name: "亲子游乐",
        icon: "/types/qzyl.png",
        sort: 6,
    },
    DemoType {
        name: "酒吧",
        icon: "/types/jiuba.png",
        sort: 7,
    },
    DemoType {
        name: "美睫·美甲",
        icon: "/types/mjmj.png",
        sort: 8,
    },
];

const FOOD: usize = 0;
const KTV: usize = 1;
const HAIR: usize = 2;
const FITNESS: usize = 3;
const MASSAGE: usize = 4;
const FAMILY: usize = 5;
const BAR: usize = 6;
const NAILS: usize = 7;

/// Shop ids follow this order on an empty database: shop 1 carries the demo flash sale.
const SHOPS: &[DemoShop] = &[
    DemoShop {
        name: "运河人家老灶火锅",
        type_index: FOOD,
        images: "/imgs/demo/hotpot.svg",
        area: "大关",
        address: "拱墅区大关路 188 号",
        x: 120.1532,
        y: 30.3318,
        avg_price: 96,
        sold: 4210,
        comments: 1320,
        score: 47,
        open_hours: "11:00-02:00",
    },
    DemoShop {
        name: "宽窄巷子担担面",
        type_index: FOOD,
        images: "/imgs/demo/noodles.svg",
        area: "宽窄巷子",
        address: "成都市青羊区长顺上街 66 号",
        x: 104.0560,
        y: 30.6697,
        avg_price: 25,
        sold: 12044,
        comments: 3307,
        score: 45,
        open_hours: "07:00-21:00",
    },
    DemoShop {
        name: "桥西片儿川老店",
        type_index: FOOD,
        images: "/imgs/demo/noodles.svg",
        area: "拱宸桥",
        address: "拱墅区桥西直街 31 号",
        x: 120.1418,
        y: 30.3192,
        avg_price: 22,
        sold: 8800,
        comments: 2150,
        score: 46,
        open_hours: "06:30-20:30",
    },
    DemoShop {
        name: "大关铁馆健身",
        type_index: FITNESS,
        images: "/imgs/demo/gym.svg",
        area: "大关",
        address: "拱墅区上塘路 458 号",
        x: 120.1576,
        y: 30.3301,
        avg_price: 120,
        sold: 620,
        comments: 188,
        score: 45,
        open_hours: "06:00-23:00",
    },
    DemoShop {
        name: "麦浪量贩 KTV",
        type_index: KTV,
        images: "/imgs/demo/ktv.svg",
        area: "湖墅",
        address: "拱墅区湖墅南路 366 号",
        x: 120.1561,
        y: 30.3049,
        avg_price: 110,
        sold: 3120,
        comments: 801,
        score: 43,
        open_hours: "12:00-04:00",
    },
    DemoShop {
        name: "湖墅小笼包子铺",
        type_index: FOOD,
        images: "/imgs/demo/dumplings.svg",
        area: "湖墅",
        address: "拱墅区湖墅南路 102 号",
        x: 120.1540,
        y: 30.3135,
        avg_price: 18,
        sold: 15320,
        comments: 4021,
        score: 44,
        open_hours: "06:00-14:00",
    },
    DemoShop {
        name: "运河夜航精酿",
        type_index: BAR,
        images: "/imgs/demo/beer.svg",
        area: "小河",
        address: "拱墅区小河路 400 号",
        x: 120.1398,
        y: 30.3167,
        avg_price: 88,
        sold: 1540,
        comments: 602,
        score: 46,
        open_hours: "18:00-02:00",
    },
    DemoShop {
        name: "剪影造型",
        type_index: HAIR,
        images: "",
        area: "大关",
        address: "拱墅区大关西苑 5 幢底商",
        x: 120.1465,
        y: 30.3285,
        avg_price: 68,
        sold: 2210,
        comments: 530,
        score: 47,
        open_hours: "10:00-22:00",
    },
    DemoShop {
        name: "小河公园亲子乐园",
        type_index: FAMILY,
        images: "/imgs/demo/park.svg",
        area: "小河",
        address: "拱墅区小河路 1 号",
        x: 120.1432,
        y: 30.3368,
        avg_price: 60,
        sold: 980,
        comments: 260,
        score: 45,
        open_hours: "09:00-18:00",
    },
    DemoShop {
        name: "舒筋堂足道",
        type_index: MASSAGE,
        images: "",
        area: "和睦",
        address: "拱墅区和睦路 210 号",
        x: 120.1402,
        y: 30.3296,
        avg_price: 128,
        sold: 1870,
        comments: 640,
        score: 46,
        open_hours: "12:00-01:00",
    },
    DemoShop {
        name: "指尖花园美甲",
        type_index: NAILS,
        images: "/imgs/demo/nails.svg",
        area: "信义坊",
        address: "拱墅区湖墅南路 88 号",
        x: 120.1549,
        y: 30.3098,
        avg_price: 99,
        sold: 760,
        comments: 210,
        score: 48,
        open_hours: "10:00-21:30",
    },
    DemoShop {
        name: "声浪主题 KTV",
        type_index: KTV,
        images: "/imgs/demo/ktv.svg",
        area: "祥符",
        address: "拱墅区莫干山路 1418 号",
        x: 120.1335,
        y: 30.3420,
        avg_price: 95,
        sold: 2050,
        comments: 512,
        score: 44,
        open_hours: "13:00-03:00",
    },
    DemoShop {
        name: "胜利河烤鱼",
        type_index: FOOD,
        images: "/imgs/demo/fish.svg",
        area: "胜利河",
        address: "拱墅区胜利河美食街 16 号",
        x: 120.1680,
        y: 30.3010,
        avg_price: 78,
        sold: 6630,
        comments: 1890,
        score: 46,
        open_hours: "11:00-24:00",
    },
    DemoShop {
        name: "桥西手冲咖啡",
        type_index: FOOD,
        images: "/imgs/demo/coffee.svg",
        area: "拱宸桥",
        address: "拱墅区小河直街 27 号",
        x: 120.1449,
        y: 30.3222,
        avg_price: 38,
        sold: 2300,
        comments: 702,
        score: 47,
        open_hours: "09:00-22:00",
    },
    DemoShop {
        name: "大关南苑家常菜",
        type_index: FOOD,
        images: "/imgs/demo/dumplings.svg,/imgs/demo/noodles.svg",
        area: "大关",
        address: "拱墅区大关南路 9 号",
        x: 120.1505,
        y: 30.3265,
        avg_price: 55,
        sold: 3300,
        comments: 990,
        score: 44,
        open_hours: "10:30-21:30",
    },
];

/// Inserts the demo catalogue if the catalogue is empty; returns whether it did.
pub(super) async fn seed_if_empty(db: &Db) -> Result<bool> {
    let (types, shops): (i64, i64) = crate::storage::on_pool!(db, pool => {
        let t: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_shop_type").fetch_one(pool).await?;
        let s: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_shop").fetch_one(pool).await?;
        (t, s)
    });
    if types > 0 || shops > 0 {
        return Ok(false);
    }
    // Sale windows are kept in the server's local time, as the original does.
    let now = local_now();
    let begin = now - Duration::hours(1);
    let end = now + Duration::days(30);
    crate::storage::on_pool!(db, pool => {
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
                 comments, score, open_hours) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(s.name)
            .bind(type_ids[s.type_index])
            .bind(s.images)
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
    tracing::debug!(
        shop_types = TYPES.len(),
        shops = SHOPS.len(),
        "inserted the demo catalogue into the empty database"
    );
    Ok(true)
}

// ------------------------------------------------------------------------------- people

struct DemoUser {
    /// Log in with this phone (the code is in the server log) to act as this user.
    phone: &'static str,
    nick_name: &'static str,
    icon: &'static str,
    introduce: &'static str,
    /// `tb_user_info.gender`: false/true as the original's Boolean.
    gender: bool,
}

struct DemoNote {
    author: usize,
    /// An index into [`SHOPS`].
    shop: usize,
    title: &'static str,
    /// Plain text with `<br>` line breaks (the pages render `content` as HTML).
    content: &'static str,
    images: &'static str,
    liked: i64,
    hours_ago: i64,
}

const USERS: &[DemoUser] = &[
    DemoUser {
        phone: "16600000001",
        nick_name: "湖畔吃货",
        icon: "/imgs/demo/avatar-1.svg",
        introduce: "在运河边吃了五年，还没吃完",
        gender: true,
    },
    DemoUser {
        phone: "16600000002",
        nick_name: "运河边的猫",
        icon: "/imgs/demo/avatar-2.svg",
        introduce: "早起吃面，晚上喝咖啡",
        gender: false,
    },
    DemoUser {
        phone: "16600000003",
        nick_name: "周末去哪儿",
        icon: "/imgs/demo/avatar-3.svg",
        introduce: "带娃找地方玩的爸爸",
        gender: false,
    },
    DemoUser {
        phone: "16600000004",
        nick_name: "夜猫子阿杰",
        icon: "/imgs/demo/avatar-4.svg",
        introduce: "白天上班，晚上唱歌",
        gender: false,
    },
    DemoUser {
        phone: "16600000005",
        nick_name: "健身小白",
        icon: "/imgs/demo/avatar-5.svg",
        introduce: "第一次办健身卡",
        gender: true,
    },
];

const NOTES: &[DemoNote] = &[
    DemoNote {
        author: 0,
        shop: 0,
        title: "运河边的鸳鸯锅，辣得刚刚好",
        content: "下班和同事来的，排了二十分钟。<br>红汤偏麻，清汤是菌菇底，毛肚和鸭血都很新鲜。<br>人均一百左右，店里的秒杀券很划算。",
        images: "/imgs/demo/hotpot.svg",
        liked: 12,
        hours_ago: 30,
    },
    DemoNote {
        author: 1,
        shop: 2,
        title: "早上七点的一碗片儿川",
        content: "雪菜、笋片、瘦肉，汤头清爽。<br>老板说面是每天现压的，加一个荷包蛋刚好。",
        images: "/imgs/demo/noodles.svg",
        liked: 9,
        hours_ago: 20,
    },
    DemoNote {
        author: 0,
        shop: 5,
        title: "一笼八个的小笼包",
        content: "皮薄汤多，先咬一个小口再喝汤。<br>早上九点前去不用排队。",
        images: "/imgs/demo/dumplings.svg",
        liked: 8,
        hours_ago: 3,
    },
    DemoNote {
        author: 2,
        shop: 8,
        title: "带娃的周末：小河公园",
        content: "草坪很大，气球摊和小滑梯都有。<br>下午四点以后人少一些，记得带驱蚊水。<br>出门走五分钟就是运河，可以顺路散步。",
        images: "/imgs/demo/park.svg,/imgs/demo/canal.svg",
        liked: 7,
        hours_ago: 50,
    },
    DemoNote {
        author: 3,
        shop: 6,
        title: "一杯精酿，看运河夜景",
        content: "靠窗的位置能看到运河上的灯。<br>推荐小麦啤和店里的炸鸡，十点以后有驻唱。",
        images: "/imgs/demo/beer.svg,/imgs/demo/canal.svg",
        liked: 6,
        hours_ago: 5,
    },
    DemoNote {
        author: 1,
        shop: 13,
        title: "桥西的一杯手冲",
        content: "豆子可以自己挑，店员会讲产地和烘焙度。<br>窗外就是小河直街，适合发呆一下午。",
        images: "/imgs/demo/coffee.svg",
        liked: 5,
        hours_ago: 1,
    },
    DemoNote {
        author: 3,
        shop: 4,
        title: "麦浪 KTV 包厢测评",
        content: "中包四个人正好，音响很清楚，点歌系统不卡。<br>工作日下午场最划算。",
        images: "/imgs/demo/ktv.svg",
        liked: 4,
        hours_ago: 70,
    },
    DemoNote {
        author: 4,
        shop: 3,
        title: "健身小白的第一周",
        content: "教练很耐心，先从动作学起。<br>器械区早上人少，晚上八点最挤。",
        images: "/imgs/demo/gym.svg",
        liked: 3,
        hours_ago: 10,
    },
    DemoNote {
        author: 2,
        shop: 12,
        title: "胜利河的烤鱼，两个人刚好",
        content: "点了麻辣味，鱼很嫩，配菜加了豆皮和藕片。<br>晚上六点半以后要等位。",
        images: "/imgs/demo/fish.svg",
        liked: 2,
        hours_ago: 26,
    },
    DemoNote {
        author: 4,
        shop: 10,
        title: "第一次做美甲",
        content: "选了很简单的纯色，店员手很稳，一个小时做完。",
        images: "/imgs/demo/nails.svg",
        liked: 1,
        hours_ago: 40,
    },
];

/// Who follows whom, as indexes into [`USERS`]: every demo user follows someone, so feeds and
/// common follows have something to show once notes are published through the API.
const FOLLOWS: &[(usize, usize)] = &[
    (0, 1),
    (0, 2),
    (0, 3),
    (1, 0),
    (1, 2),
    (2, 0),
    (3, 0),
    (3, 1),
    (3, 4),
    (4, 0),
    (4, 3),
];

/// Inserts the demo users, notes and follows; only when `catalogue_seeded` (the demo catalogue
/// was inserted by this same migration run, so the shops the notes name are ours) and no note,
/// follow or demo phone exists yet. Returns whether it did.
pub(super) async fn seed_people_if_fresh(db: &Db, catalogue_seeded: bool) -> Result<bool> {
    if !catalogue_seeded {
        tracing::debug!("demo users and notes not added: the catalogue is not the demo's");
        return Ok(false);
    }
    let phones = USERS.iter().map(|u| u.phone).collect::<Vec<_>>();
    let taken_sql = format!(
        "SELECT COUNT(*) FROM tb_user WHERE phone IN ({})",
        vec!["?"; phones.len()].join(", ")
    );
    let (blogs, follows, taken): (i64, i64, i64) = crate::storage::on_pool!(db, pool => {
        let b: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_blog").fetch_one(pool).await?;
        let f: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM tb_follow").fetch_one(pool).await?;
        let mut q = sqlx::query_scalar(&taken_sql);
        for p in &phones {
            q = q.bind(*p);
        }
        let t: i64 = q.fetch_one(pool).await?;
        (b, f, t)
    });
    if blogs > 0 || follows > 0 || taken > 0 {
        tracing::debug!("demo users and notes not added: the database has notes, follows or users");
        return Ok(false);
    }
    let shop_ids: Vec<i64> = crate::storage::on_pool!(db, pool => {
        let rows = sqlx::query("SELECT id FROM tb_shop ORDER BY id").fetch_all(pool).await?;
        rows.iter()
            .map(|r| r.try_get_unchecked::<i64, _>(0))
            .collect::<std::result::Result<Vec<_>, _>>()?
    });
    if shop_ids.len() != SHOPS.len() {
        tracing::debug!("demo users and notes not added: the catalogue is not the demo's");
        return Ok(false);
    }
    let now = local_now();
    crate::storage::on_pool!(db, pool => {
        let mut tx = pool.begin_write().await?;
        let mut user_ids = Vec::with_capacity(USERS.len());
        for u in USERS {
            let r = sqlx::query("INSERT INTO tb_user (phone, nick_name, icon) VALUES (?, ?, ?)")
                .bind(u.phone)
                .bind(u.nick_name)
                .bind(u.icon)
                .execute(&mut *tx)
                .await?;
            user_ids.push(last_id(&r));
        }
        for (i, u) in USERS.iter().enumerate() {
            let fans = FOLLOWS.iter().filter(|(_, b)| *b == i).count() as i64;
            let followee = FOLLOWS.iter().filter(|(a, _)| *a == i).count() as i64;
            sqlx::query(
                "INSERT INTO tb_user_info (user_id, city, introduce, fans, followee, gender, credits, level) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(user_ids[i])
            .bind("杭州")
            .bind(u.introduce)
            .bind(fans)
            .bind(followee)
            .bind(i64::from(u.gender))
            .bind(100 * (i as i64 + 1))
            .bind(1 + (i as i64 % 3))
            .execute(&mut *tx)
            .await?;
        }
        for n in NOTES {
            let at = now - Duration::hours(n.hours_ago);
            sqlx::query(
                "INSERT INTO tb_blog (shop_id, user_id, title, images, content, liked, comments, \
                 create_time, update_time) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)",
            )
            .bind(shop_ids[n.shop])
            .bind(user_ids[n.author])
            .bind(n.title)
            .bind(n.images)
            .bind(n.content)
            .bind(n.liked)
            .bind(at)
            .bind(at)
            .execute(&mut *tx)
            .await?;
        }
        for &(a, b) in FOLLOWS {
            sqlx::query("INSERT INTO tb_follow (user_id, follow_user_id) VALUES (?, ?)")
                .bind(user_ids[a])
                .bind(user_ids[b])
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    });
    tracing::debug!(
        users = USERS.len(),
        notes = NOTES.len(),
        follows = FOLLOWS.len(),
        "inserted demo users, notes and follows"
    );
    Ok(true)
}

/// The server's local time to the second (the original keeps `LocalDateTime`s).
fn local_now() -> NaiveDateTime {
    let now = Local::now().naive_local();
    now.with_nanosecond(0).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The position `shop-list.html` sends with every nearby search (longitude, latitude).
    const PAGE_POINT: (f64, f64) = (120.149993, 30.334229);

    /// Great-circle distance in metres with Redis's earth radius (what GEOSEARCH uses).
    fn metres(a: (f64, f64), b: (f64, f64)) -> f64 {
        let r = 6_372_797.560856_f64;
        let (lat1, lat2) = (a.1.to_radians(), b.1.to_radians());
        let (dlat, dlon) = ((b.1 - a.1).to_radians(), (b.0 - a.0).to_radians());
        let h = (dlat / 2.0).sin().powi(2) + lat1.cos() * lat2.cos() * (dlon / 2.0).sin().powi(2);
        2.0 * r * h.sqrt().asin()
    }

    #[test]
    fn the_demo_fits_the_original_pages() {
        let near: Vec<&DemoShop> = SHOPS
            .iter()
            .filter(|s| metres(PAGE_POINT, (s.x, s.y)) <= 4_500.0)
            .collect();
        // All but the Chengdu shop, with a margin under the 5 km radius.
        assert_eq!(near.len(), SHOPS.len() - 1);
        // Every type has a shop there, and food more than one page (5) of them.
        for (i, t) in TYPES.iter().enumerate() {
            assert!(near.iter().any(|s| s.type_index == i), "{}", t.name);
            assert!(t.icon.starts_with("/types/") && t.icon.ends_with(".png"));
        }
        assert!(near.iter().filter(|s| s.type_index == FOOD).count() > 5);
        // What the shop tests rely on (see TYPES).
        assert!(metres((104.08, 30.66), (SHOPS[1].x, SHOPS[1].y)) < 5_000.0);
        assert_eq!(SHOPS[1].type_index, FOOD);
        assert_eq!(SHOPS.iter().filter(|s| s.type_index == 3).count(), 1);
    }

    #[test]
    fn notes_and_follows_refer_to_demo_rows_and_fit_the_columns() {
        for n in NOTES {
            assert!(
                n.author < USERS.len() && n.shop < SHOPS.len(),
                "{}",
                n.title
            );
            assert!(n.title.chars().count() <= 255);
            assert!(n.content.chars().count() <= 2048 && n.images.len() <= 2048);
            assert!(n.images.split(',').all(|i| i.starts_with("/imgs/demo/")));
            // Clean already, so the migration that cleans adopted notes leaves them alone.
            let clean = crate::domain::SafeHtml::clean(n.content);
            assert_eq!(clean.as_str(), n.content);
            // The shop of a note is one the pages find (not the one in Chengdu).
            assert_ne!(n.shop, 1, "{}", n.title);
        }
        for &(a, b) in FOLLOWS {
            assert!(a != b && a < USERS.len() && b < USERS.len());
        }
        let mut pairs = FOLLOWS.to_vec();
        pairs.sort_unstable();
        pairs.dedup();
        assert_eq!(pairs.len(), FOLLOWS.len(), "one follow per pair");
        for u in USERS {
            assert!(crate::domain::Phone::parse(u.phone).is_ok(), "{}", u.phone);
            assert!(u.nick_name.chars().count() <= 32);
        }
    }
}

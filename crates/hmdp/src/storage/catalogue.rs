//! The catalogue: `tb_shop_type`, `tb_shop`, `tb_voucher` and `tb_seckill_voucher`.
//!
//! Plain database access; caching sits above this layer.

use serde::{Deserialize, Serialize};

use super::{Db, Result, impl_from_row, last_id};
use crate::domain::ApiDateTime;
use crate::domain::{ShopId, VoucherId};

/// A shop type, as the original serialises it (no time stamps).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ShopType {
    pub id: i64,
    pub name: Option<String>,
    pub icon: Option<String>,
    pub sort: Option<i64>,
}

impl_from_row!(ShopType, |row| {
    Ok(ShopType {
        id: row.try_get_unchecked("id")?,
        name: row.try_get_unchecked("name")?,
        icon: row.try_get_unchecked("icon")?,
        sort: row.try_get_unchecked("sort")?,
    })
});

/// A shop, field for field the original's `Shop` JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Shop {
    pub id: i64,
    pub name: String,
    pub type_id: i64,
    pub images: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub area: Option<String>,
    pub address: String,
    pub x: f64,
    pub y: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_price: Option<i64>,
    pub sold: i64,
    pub comments: i64,
    pub score: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_hours: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub create_time: Option<ApiDateTime>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub update_time: Option<ApiDateTime>,
    /// Metres from the caller's position, set only by the nearby search.
    #[serde(skip_serializing_if = "Option::is_none", skip_deserializing, default)]
    pub distance: Option<f64>,
}

impl_from_row!(Shop, |row| {
    Ok(Shop {
        id: row.try_get_unchecked("id")?,
        name: row.try_get_unchecked("name")?,
        type_id: row.try_get_unchecked("type_id")?,
        images: row.try_get_unchecked("images")?,
        area: row.try_get_unchecked("area")?,
        address: row.try_get_unchecked("address")?,
        x: row.try_get_unchecked("x")?,
        y: row.try_get_unchecked("y")?,
        avg_price: row.try_get_unchecked("avg_price")?,
        sold: row.try_get_unchecked("sold")?,
        comments: row.try_get_unchecked("comments")?,
        score: row.try_get_unchecked("score")?,
        open_hours: row.try_get_unchecked("open_hours")?,
        create_time: row.try_get_unchecked("create_time")?,
        update_time: row.try_get_unchecked("update_time")?,
        distance: None,
    })
});

/// The fields of a shop that a client may set.
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShopInput {
    #[schema(min_length = 1, max_length = 128)]
    pub name: String,
    #[schema(minimum = 1)]
    pub type_id: i64,
    #[serde(default)]
    #[schema(max_length = 1024)]
    pub images: String,
    #[schema(max_length = 128)]
    pub area: Option<String>,
    #[serde(default)]
    #[schema(max_length = 255)]
    pub address: String,
    #[schema(minimum = 0, maximum = 180)]
    pub x: f64,
    #[schema(minimum = 0, maximum = 85.05)]
    pub y: f64,
    #[schema(minimum = 0)]
    pub avg_price: Option<i64>,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 4294967295.0)]
    pub sold: i64,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 4294967295.0)]
    pub comments: i64,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 4294967295.0)]
    pub score: i64,
    #[schema(max_length = 32)]
    pub open_hours: Option<String>,
}

/// A voucher of a shop joined with its flash-sale fields (the original's `queryVoucherOfShop`).
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Voucher {
    pub id: i64,
    pub shop_id: Option<i64>,
    pub title: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sub_title: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rules: Option<String>,
    pub pay_value: i64,
    pub actual_value: i64,
    /// 0 plain, 1 flash sale.
    #[serde(rename = "type")]
    #[schema(minimum = 0, maximum = 1)]
    pub kind: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stock: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub begin_time: Option<ApiDateTime>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_time: Option<ApiDateTime>,
}

impl_from_row!(Voucher, |row| {
    Ok(Voucher {
        id: row.try_get_unchecked("id")?,
        shop_id: row.try_get_unchecked("shop_id")?,
        title: row.try_get_unchecked("title")?,
        sub_title: row.try_get_unchecked("sub_title")?,
        rules: row.try_get_unchecked("rules")?,
        pay_value: row.try_get_unchecked("pay_value")?,
        actual_value: row.try_get_unchecked("actual_value")?,
        kind: row.try_get_unchecked("type")?,
        stock: row.try_get_unchecked("stock")?,
        begin_time: row.try_get_unchecked("begin_time")?,
        end_time: row.try_get_unchecked("end_time")?,
    })
});

/// All shop types, by `sort` ascending.
pub(crate) async fn shop_types(db: &Db) -> Result<Vec<ShopType>> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, ShopType>("SELECT id, name, icon, sort FROM tb_shop_type ORDER BY sort ASC, id ASC")
            .fetch_all(pool)
            .await?
    }))
}

/// `sold`, `comments` and `score` are `INT UNSIGNED` in the original schema, and sqlx decodes a
/// 4-byte MySQL integer read as `i64` with sign extension: 4294967294 would come back as -2.
/// Casting to a signed 64-bit integer in the query keeps the whole range (on SQLite the cast is
/// a no-op for integers).
const SHOP_COLUMNS: &str = "SELECT id, name, type_id, images, area, address, x, y, avg_price, \
    CAST(sold AS SIGNED) AS sold, CAST(comments AS SIGNED) AS comments, \
    CAST(score AS SIGNED) AS score, open_hours, create_time, update_time FROM tb_shop";

/// One shop by id.
pub(crate) async fn shop(db: &Db, id: ShopId) -> Result<Option<Shop>> {
    let sql = format!("{SHOP_COLUMNS} WHERE id = ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, Shop>(&sql).bind(id.get()).fetch_optional(pool).await?
    }))
}

/// The shops with these ids, in the order of `ids` (missing ids are skipped).
pub(crate) async fn shops_by_ids(db: &Db, ids: &[i64]) -> Result<Vec<Shop>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let placeholders = vec!["?"; ids.len()].join(", ");
    let sql = format!("{SHOP_COLUMNS} WHERE id IN ({placeholders})");
    let mut shops: Vec<Shop> = crate::storage::on_pool!(db, pool => {
        let mut q = sqlx::query_as::<_, Shop>(&sql);
        for id in ids {
            q = q.bind(*id);
        }
        q.fetch_all(pool).await?
    });
    // The original's ORDER BY FIELD(id, …), done portably.
    shops.sort_by_key(|s| ids.iter().position(|id| *id == s.id));
    Ok(shops)
}

/// One page of a type's shops, by id.
pub(crate) async fn shops_of_type(
    db: &Db,
    type_id: i64,
    offset: i64,
    limit: i64,
) -> Result<Vec<Shop>> {
    let sql = format!("{SHOP_COLUMNS} WHERE type_id = ? ORDER BY id LIMIT ? OFFSET ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, Shop>(&sql).bind(type_id).bind(limit).bind(offset).fetch_all(pool).await?
    }))
}

/// One page of shops whose name contains `name` (all shops when `name` is empty), by id.
pub(crate) async fn shops_by_name(
    db: &Db,
    name: &str,
    offset: i64,
    limit: i64,
) -> Result<Vec<Shop>> {
    // LIKE wildcards typed by the user are matched literally. '!' is the escape character
    // because a backslash means different things in MySQL and SQLite string literals.
    let escaped = name
        .replace('!', "!!")
        .replace('%', "!%")
        .replace('_', "!_");
    let pattern = format!("%{escaped}%");
    let sql = format!("{SHOP_COLUMNS} WHERE name LIKE ? ESCAPE '!' ORDER BY id LIMIT ? OFFSET ?");
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, Shop>(&sql).bind(&pattern).bind(limit).bind(offset).fetch_all(pool).await?
    }))
}

/// Where a shop is, for the GEO index.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ShopPosition {
    pub id: i64,
    pub type_id: i64,
    pub x: f64,
    pub y: f64,
}

impl_from_row!(ShopPosition, |row| {
    Ok(ShopPosition {
        id: row.try_get_unchecked("id")?,
        type_id: row.try_get_unchecked("type_id")?,
        x: row.try_get_unchecked("x")?,
        y: row.try_get_unchecked("y")?,
    })
});

/// Every shop's position (optionally of one type), for building the GEO index.
pub(crate) async fn shop_positions(db: &Db, type_id: Option<i64>) -> Result<Vec<ShopPosition>> {
    Ok(crate::storage::on_pool!(db, pool => {
        match type_id {
            Some(t) => sqlx::query_as::<_, ShopPosition>("SELECT id, type_id, x, y FROM tb_shop WHERE type_id = ? ORDER BY id")
                .bind(t)
                .fetch_all(pool)
                .await?,
            None => sqlx::query_as::<_, ShopPosition>("SELECT id, type_id, x, y FROM tb_shop ORDER BY id")
                .fetch_all(pool)
                .await?,
        }
    }))
}

/// A bare id (read unchecked: the original's id columns are `UNSIGNED`).
struct IdRow(i64);

impl_from_row!(IdRow, |row| { Ok(IdRow(row.try_get_unchecked("id")?)) });

/// Every shop id, for building the Bloom filter of shop ids.
pub(crate) async fn shop_ids(db: &Db) -> Result<Vec<i64>> {
    let rows: Vec<IdRow> = crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, IdRow>("SELECT id FROM tb_shop ORDER BY id")
            .fetch_all(pool)
            .await?
    });
    Ok(rows.into_iter().map(|r| r.0).collect())
}

/// Binds a shop's writable fields in column order (name … open_hours).
macro_rules! bind_shop_fields {
    ($query:expr, $s:expr) => {
        $query
            .bind(&$s.name)
            .bind($s.type_id)
            .bind(&$s.images)
            .bind(&$s.area)
            .bind(&$s.address)
            .bind($s.x)
            .bind($s.y)
            .bind($s.avg_price)
            .bind($s.sold)
            .bind($s.comments)
            .bind($s.score)
            .bind(&$s.open_hours)
    };
}

/// Inserts a shop and returns its id.
pub(crate) async fn insert_shop(db: &Db, s: &ShopInput) -> Result<ShopId> {
    let id = crate::storage::on_pool!(db, pool => {
        let insert = sqlx::query(
            "INSERT INTO tb_shop (name, type_id, images, area, address, x, y, avg_price, sold, \
             comments, score, open_hours) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        );
        let r = bind_shop_fields!(insert, s)
        .execute(pool)
        .await?;
        last_id(&r)
    });
    Ok(ShopId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?)
}

/// Updates a shop; returns false when there is no shop with that id.
pub(crate) async fn update_shop(db: &Db, id: ShopId, s: &ShopInput) -> Result<bool> {
    let affected = crate::storage::on_pool!(db, pool => {
        let update = sqlx::query(
            "UPDATE tb_shop SET name = ?, type_id = ?, images = ?, area = ?, address = ?, x = ?, \
             y = ?, avg_price = ?, sold = ?, comments = ?, score = ?, open_hours = ?, \
             update_time = CURRENT_TIMESTAMP WHERE id = ?",
        );
        bind_shop_fields!(update, s)
        .bind(id.get())
        .execute(pool)
        .await?
        .rows_affected()
    });
    Ok(affected > 0)
}

/// The vouchers on sale (`status = 1`) of a shop, with flash-sale stock and window if any.
pub(crate) async fn vouchers_of_shop(db: &Db, shop: ShopId) -> Result<Vec<Voucher>> {
    Ok(crate::storage::on_pool!(db, pool => {
        sqlx::query_as::<_, Voucher>(
            "SELECT v.id, v.shop_id, v.title, v.sub_title, v.rules, v.pay_value, v.actual_value, \
             v.type, sv.stock, sv.begin_time, sv.end_time \
             FROM tb_voucher v LEFT JOIN tb_seckill_voucher sv ON v.id = sv.voucher_id \
             WHERE v.shop_id = ? AND v.status = 1 ORDER BY v.id",
        )
        .bind(shop.get())
        .fetch_all(pool)
        .await?
    }))
}

/// A plain (non flash-sale) voucher to create.
#[derive(Debug, Clone, PartialEq, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct VoucherInput {
    #[schema(minimum = 1)]
    pub shop_id: i64,
    #[schema(min_length = 1, max_length = 255)]
    pub title: String,
    #[schema(max_length = 255)]
    pub sub_title: Option<String>,
    #[schema(max_length = 1024)]
    pub rules: Option<String>,
    #[schema(minimum = 0)]
    pub pay_value: i64,
    #[schema(minimum = 0)]
    pub actual_value: i64,
}

/// Inserts a plain voucher (`type = 0`, on sale) and returns its id.
pub(crate) async fn insert_voucher(db: &Db, v: &VoucherInput) -> Result<VoucherId> {
    let id = crate::storage::on_pool!(db, pool => {
        let r = sqlx::query(
            "INSERT INTO tb_voucher (shop_id, title, sub_title, rules, pay_value, actual_value, type, status) \
             VALUES (?, ?, ?, ?, ?, ?, 0, 1)",
        )
        .bind(v.shop_id)
        .bind(&v.title)
        .bind(&v.sub_title)
        .bind(&v.rules)
        .bind(v.pay_value)
        .bind(v.actual_value)
        .execute(pool)
        .await?;
        last_id(&r)
    });
    Ok(VoucherId::new(id).map_err(|e| sqlx::Error::Decode(Box::new(e)))?)
}

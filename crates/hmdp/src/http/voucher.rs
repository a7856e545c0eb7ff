//! `/voucher/*`: the vouchers of a shop (public) and creating one (admin).

use axum::{
    Router,
    extract::State,
    routing::{get, post},
};

use super::{
    ApiError, ApiResult, AppState,
    extract::{Admin, AppJson, AppPath},
    ok,
};
use chrono::NaiveDateTime;
use serde::Deserialize;

use crate::{
    domain::{ShopId, VoucherId},
    seckill::SaleStats,
    storage::{
        catalogue::{self, Voucher, VoucherInput},
        datetime_format,
        orders::{self, NewSeckillVoucher},
    },
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/voucher", post(create_voucher))
        .route("/voucher/seckill", post(create_seckill_voucher))
        .route("/voucher/seckill/{id}/stats", get(sale_stats))
        .route("/voucher/list/{shop_id}", get(vouchers_of_shop))
}

async fn create_voucher(
    State(state): State<AppState>,
    _: Admin,
    AppJson(input): AppJson<VoucherInput>,
) -> ApiResult<i64> {
    check_texts(
        &input.title,
        input.sub_title.as_deref(),
        input.rules.as_deref(),
    )?;
    if input.pay_value < 0 || input.actual_value < 0 {
        return Err(ApiError::invalid(
            "payValue and actualValue must not be negative",
        ));
    }
    let shop = ShopId::new(input.shop_id)
        .map_err(|_| ApiError::invalid("shopId must be a positive integer"))?;
    if catalogue::shop(&state.db, shop).await?.is_none() {
        return Err(ApiError::new(
            super::ErrorCode::ShopNotFound,
            "店铺不存在！",
        ));
    }
    ok(catalogue::insert_voucher(&state.db, &input).await?.get())
}

async fn vouchers_of_shop(
    State(state): State<AppState>,
    AppPath(shop): AppPath<ShopId>,
) -> ApiResult<Vec<Voucher>> {
    ok(catalogue::vouchers_of_shop(&state.db, shop).await?)
}

/// Title, subtitle and rules within the original's column sizes.
fn check_texts(title: &str, sub_title: Option<&str>, rules: Option<&str>) -> Result<(), ApiError> {
    if title.trim().is_empty() || title.chars().count() > 255 {
        return Err(ApiError::invalid("title must be 1 to 255 characters"));
    }
    if sub_title.is_some_and(|s| s.chars().count() > 255) {
        return Err(ApiError::invalid("subTitle must be at most 255 characters"));
    }
    if rules.is_some_and(|s| s.chars().count() > 1024) {
        return Err(ApiError::invalid("rules must be at most 1024 characters"));
    }
    Ok(())
}

/// The original's seckill `Voucher` body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SeckillVoucherInput {
    shop_id: i64,
    title: String,
    sub_title: Option<String>,
    rules: Option<String>,
    pay_value: i64,
    actual_value: i64,
    stock: i64,
    #[serde(deserialize_with = "datetime_format::deserialize")]
    begin_time: NaiveDateTime,
    #[serde(deserialize_with = "datetime_format::deserialize")]
    end_time: NaiveDateTime,
}

/// `POST /voucher/seckill`: saves the voucher and its sale in one transaction and loads the
/// stock and the sale window into Redis. Times are the server's local time, as the original.
async fn create_seckill_voucher(
    State(state): State<AppState>,
    _: Admin,
    AppJson(v): AppJson<SeckillVoucherInput>,
) -> ApiResult<i64> {
    check_texts(&v.title, v.sub_title.as_deref(), v.rules.as_deref())?;
    if v.stock < 1 || v.stock > 10_000_000 {
        return Err(ApiError::invalid("stock must be between 1 and 10000000"));
    }
    if v.begin_time >= v.end_time {
        return Err(ApiError::invalid("beginTime must be before endTime"));
    }
    // MySQL TIMESTAMP columns (the original's) hold 1970-01-01 … 2038-01-19 only.
    let earliest = chrono::NaiveDate::from_ymd_opt(1970, 1, 2).and_then(|d| d.and_hms_opt(0, 0, 0));
    let latest = chrono::NaiveDate::from_ymd_opt(2038, 1, 18).and_then(|d| d.and_hms_opt(0, 0, 0));
    if Some(v.begin_time) < earliest || Some(v.end_time) > latest {
        return Err(ApiError::invalid(
            "beginTime and endTime must lie between 1970-01-02 and 2038-01-18",
        ));
    }
    if v.pay_value < 0 || v.actual_value < 0 {
        return Err(ApiError::invalid(
            "payValue and actualValue must not be negative",
        ));
    }
    let shop = ShopId::new(v.shop_id)
        .map_err(|_| ApiError::invalid("shopId must be a positive integer"))?;
    if catalogue::shop(&state.db, shop).await?.is_none() {
        return Err(ApiError::new(
            super::ErrorCode::ShopNotFound,
            "店铺不存在！",
        ));
    }
    let id = orders::insert_seckill_voucher(
        &state.db,
        &NewSeckillVoucher {
            shop_id: v.shop_id,
            title: v.title,
            sub_title: v.sub_title,
            rules: v.rules,
            pay_value: v.pay_value,
            actual_value: v.actual_value,
            stock: v.stock,
            begin_time: v.begin_time,
            end_time: v.end_time,
        },
    )
    .await?;
    state
        .seckill
        .load_new_voucher(id, v.stock, v.begin_time, v.end_time)
        .await;
    ok(id.get())
}

/// `GET /voucher/seckill/{id}/stats`: the live state of a sale (stock in Redis and in the
/// database, accepted vs written orders, the order stream's backlog), for the dashboard.
async fn sale_stats(
    State(state): State<AppState>,
    AppPath(id): AppPath<VoucherId>,
) -> ApiResult<SaleStats> {
    match state.seckill.sale_stats(id).await? {
        Some(stats) => ok(stats),
        None => Err(ApiError::new(
            super::ErrorCode::VoucherNotFound,
            "优惠券不存在 (no flash-sale voucher with this id)",
        )),
    }
}

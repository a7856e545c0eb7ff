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
    if input.title.trim().is_empty() {
        return Err(ApiError::invalid("title must not be empty"));
    }
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
    if v.title.trim().is_empty() || v.title.chars().count() > 255 {
        return Err(ApiError::invalid("title must be 1 to 255 characters"));
    }
    if v.stock < 1 || v.stock > 10_000_000 {
        return Err(ApiError::invalid("stock must be between 1 and 10000000"));
    }
    if v.begin_time >= v.end_time {
        return Err(ApiError::invalid("beginTime must be before endTime"));
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

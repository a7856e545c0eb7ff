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
use crate::{
    domain::ShopId,
    storage::catalogue::{self, Voucher, VoucherInput},
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/voucher", post(create_voucher))
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

//! `/voucher-order/*`: grabbing a flash-sale voucher and following the order.

use axum::{
    Router,
    extract::State,
    routing::{get, post},
};
use serde::Serialize;

use super::{
    ApiError, ApiResult, AppState, ErrorCode,
    extract::{AppPath, CurrentUser},
    ok,
};
use crate::{
    domain::{OrderId, VoucherId},
    seckill::{OrderStatus, Refusal},
    storage::orders::{self, VoucherOrder},
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/voucher-order/seckill/{id}", post(grab))
        .route("/voucher-order/of/me", get(my_orders))
        .route("/voucher-order/{id}", get(order_status))
}

/// `POST /voucher-order/seckill/{voucherId}`: the new order's id, or why not.
async fn grab(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(voucher): AppPath<VoucherId>,
) -> ApiResult<i64> {
    match state.seckill.grab(session.user.id, voucher).await? {
        Ok(order_id) => ok(order_id),
        Err(refusal) => Err(refusal_error(refusal)),
    }
}

/// The original's messages, each with its own code.
pub fn refusal_error(r: Refusal) -> ApiError {
    match r {
        Refusal::SoldOut => ApiError::new(ErrorCode::SoldOut, "库存不足"),
        Refusal::Duplicate => ApiError::new(ErrorCode::DuplicateOrder, "不能重复下单"),
        Refusal::NotStarted => ApiError::new(ErrorCode::SeckillNotStarted, "秒杀尚未开始"),
        Refusal::Ended => ApiError::new(ErrorCode::SeckillEnded, "秒杀已经结束"),
        Refusal::UnknownVoucher => ApiError::new(
            ErrorCode::VoucherNotFound,
            "优惠券不存在 (no flash-sale voucher with this id)",
        ),
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusView {
    id: i64,
    id_str: String,
    voucher_id: i64,
    /// `pending` (accepted, not yet in the database), `created`, or `failed` (accepted, but it
    /// could not be written and waits in the dead letters for an operator).
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    order: Option<VoucherOrder>,
}

/// `GET /voucher-order/{id}`: `pending`, `created` or `failed`, for the order's owner only.
async fn order_status(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(order_id): AppPath<OrderId>,
) -> ApiResult<StatusView> {
    let id = order_id.get();
    match state
        .seckill
        .order_status(session.user.id, order_id)
        .await?
    {
        OrderStatus::Pending { voucher_id } => ok(StatusView {
            id,
            id_str: id.to_string(),
            voucher_id,
            state: "pending",
            order: None,
        }),
        OrderStatus::Failed { voucher_id } => ok(StatusView {
            id,
            id_str: id.to_string(),
            voucher_id,
            state: "failed",
            order: None,
        }),
        OrderStatus::Created(order) => ok(StatusView {
            id,
            id_str: id.to_string(),
            voucher_id: order.voucher_id,
            state: "created",
            order: Some(order),
        }),
        OrderStatus::Unknown => Err(ApiError::new(
            ErrorCode::OrderNotFound,
            "订单不存在 (no such order of yours)",
        )),
    }
}

/// `GET /voucher-order/of/me`: the user's written orders, newest first (at most 100).
async fn my_orders(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
) -> ApiResult<Vec<VoucherOrder>> {
    ok(orders::orders_of_user(&state.db, session.user.id, 100).await?)
}

//! `/shop/*` and `/shop-type/list`. Reads are public; writes need the admin token.
//!
//! Step 1 serves these straight from the database; the cache layer comes in front later.

use axum::{
    Router,
    extract::State,
    routing::{get, post},
};
use serde::Deserialize;

use super::{
    ApiError, ApiResult, AppState, ErrorCode,
    extract::{Admin, AppJson, AppPath},
    ok, ok_empty,
};
use crate::{
    domain::ShopId,
    storage::catalogue::{self, Shop, ShopInput, ShopType},
};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/shop/{id}", get(shop_by_id))
        .route("/shop", post(create_shop).put(update_shop))
        .route("/shop-type/list", get(shop_types))
}

async fn shop_by_id(
    State(state): State<AppState>,
    AppPath(id): AppPath<ShopId>,
) -> ApiResult<Shop> {
    match catalogue::shop(&state.db, id).await? {
        Some(shop) => ok(shop),
        None => Err(ApiError::new(ErrorCode::ShopNotFound, "店铺不存在！")),
    }
}

async fn create_shop(
    State(state): State<AppState>,
    _: Admin,
    AppJson(input): AppJson<ShopInput>,
) -> ApiResult<i64> {
    validate(&input)?;
    let id = catalogue::insert_shop(&state.db, &input).await?;
    ok(id.get())
}

#[derive(Debug, Deserialize)]
struct ShopUpdate {
    id: Option<i64>,
    #[serde(flatten)]
    fields: ShopInput,
}

async fn update_shop(
    State(state): State<AppState>,
    _: Admin,
    AppJson(update): AppJson<ShopUpdate>,
) -> ApiResult<()> {
    let Some(id) = update.id else {
        return Err(ApiError::new(ErrorCode::ShopIdRequired, "店铺id不能为空"));
    };
    let id = ShopId::new(id).map_err(|_| ApiError::invalid("id must be a positive integer"))?;
    validate(&update.fields)?;
    if !catalogue::update_shop(&state.db, id, &update.fields).await? {
        return Err(ApiError::new(ErrorCode::ShopNotFound, "店铺不存在！"));
    }
    ok_empty()
}

fn validate(s: &ShopInput) -> Result<(), ApiError> {
    if s.name.trim().is_empty() || s.name.chars().count() > 128 {
        return Err(ApiError::invalid("name must be 1 to 128 characters"));
    }
    if !(-180.0..=180.0).contains(&s.x) || !(-90.0..=90.0).contains(&s.y) {
        return Err(ApiError::invalid(
            "x must be a longitude (-180..180) and y a latitude (-90..90)",
        ));
    }
    if s.type_id <= 0 {
        return Err(ApiError::invalid("typeId must be a positive integer"));
    }
    Ok(())
}

async fn shop_types(State(state): State<AppState>) -> ApiResult<Vec<ShopType>> {
    ok(catalogue::shop_types(&state.db).await?)
}

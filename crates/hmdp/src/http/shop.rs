//! `/shop/*` and `/shop-type/list`: cached reads (public), writes with the admin token, and
//! the unique-visitor counts (public, like all of `/shop/**` in the original).
//!
//! A successful `GET /shop/{id}` counts its reader as a visitor (the user when logged in, else
//! the client address) in memory only: the activity service sends visits to Redis in batches,
//! so the cached read makes no extra round trip.

use std::sync::Arc;

use axum::{
    extract::{FromRequestParts, State},
    http::request::Parts,
};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    ApiError, ApiResult, AppState, JsonReply,
    client::ClientIp,
    extract::{Admin, AppJson, AppPath, AppQuery},
    ok, ok_empty,
};
use crate::{
    activity::{MAX_UV_DAYS, Visitor},
    auth::SessionUser,
    catalogue::CatalogueError,
    domain::ShopId,
    storage::catalogue::{Shop, ShopInput, ShopType},
};

const TAG: &str = "shop";

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(shop_by_id))
        .routes(routes!(create_shop, update_shop))
        .routes(routes!(shops_of_type))
        .routes(routes!(shops_by_name))
        .routes(routes!(shop_types))
        .routes(routes!(shop_uv))
        .routes(routes!(site_uv))
}

/// A shop, cached.
///
/// Unknown ids are answered from the Bloom filter or a cached miss (`shop_not_found`). A found
/// shop counts its reader as a visitor (see `/shop/{id}/uv`).
#[utoipa::path(get, path = "/shop/{id}", tag = TAG,
    params(("id" = inline(ShopId), Path, description = "a positive id")),
    responses((status = OK, body = Shop)))]
async fn shop_by_id(
    State(state): State<AppState>,
    Reader(reader): Reader,
    AppPath(id): AppPath<ShopId>,
) -> Result<JsonReply, ApiError> {
    // Answered with the cached text as it is (see `JsonReply`).
    match state.catalogue.shop_json(id).await? {
        Some(shop) => {
            if let Some(visitor) = reader {
                state.activity.visit(id, visitor).await;
            }
            Ok(JsonReply(shop))
        }
        None => Err(CatalogueError::ShopNotFound.into()),
    }
}

/// Who is reading, as a visitor: the logged-in user, else the client address (its /64 for IPv6,
/// whose privacy addresses change daily; none when the request came without a peer address, as
/// in-process tests of the router do).
struct Reader(Option<Visitor>);

impl<S: Send + Sync> FromRequestParts<S> for Reader {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if let Some(session) = parts.extensions.get::<Arc<SessionUser>>() {
            return Ok(Reader(Some(Visitor::User(session.user.id))));
        }
        Ok(Reader(
            parts
                .extensions
                .get::<ClientIp>()
                .map(|client| Visitor::Addr(client.key())),
        ))
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct UvQuery {
    /// How many days, today included (1 = today).
    #[param(minimum = 1, maximum = 90, default = 1)]
    days: Option<i64>,
}

fn uv_days(days: Option<i64>) -> Result<u32, ApiError> {
    match days.unwrap_or(1) {
        d if (1..=i64::from(MAX_UV_DAYS)).contains(&d) => Ok(d as u32),
        _ => Err(ApiError::invalid(format!(
            "days must be between 1 and {MAX_UV_DAYS}"
        ))),
    }
}

/// Unique visitors of a shop over the last `days` days (today included).
///
/// A visitor is a user, or the client address of an anonymous reader, counted once over the
/// whole span (HyperLogLog, about 0.81 % standard error; visits reach the count within
/// `HMDP_UV_FLUSH_MS`).
#[utoipa::path(get, path = "/shop/{id}/uv", tag = TAG,
    params(("id" = inline(ShopId), Path, description = "a positive id"), UvQuery),
    responses((status = OK, body = u64)))]
async fn shop_uv(
    State(state): State<AppState>,
    client: ClientIp,
    AppPath(id): AppPath<ShopId>,
    AppQuery(q): AppQuery<UvQuery>,
) -> ApiResult<u64> {
    let days = uv_days(q.days)?;
    if !state.catalogue.shop_exists(id).await? {
        return Err(CatalogueError::ShopNotFound.into());
    }
    ok(state.activity.shop_uv(id, days, client.key()).await?)
}

/// Unique visitors of any shop page over the last `days` days (today included).
#[utoipa::path(get, path = "/shop/uv/site", tag = TAG, params(UvQuery),
    responses((status = OK, body = u64)))]
async fn site_uv(
    State(state): State<AppState>,
    client: ClientIp,
    AppQuery(q): AppQuery<UvQuery>,
) -> ApiResult<u64> {
    let days = uv_days(q.days)?;
    ok(state.activity.site_uv(days, client.key()).await?)
}

/// Create a shop; data is its id.
#[utoipa::path(post, path = "/shop", tag = TAG, security(("admin" = [])), request_body = ShopInput,
    responses((status = OK, body = i64)))]
async fn create_shop(
    State(state): State<AppState>,
    _: Admin,
    AppJson(input): AppJson<ShopInput>,
) -> ApiResult<i64> {
    validate(&input)?;
    ok(state.catalogue.create_shop(&input).await?.get())
}

/// A shop's id and its new fields.
#[derive(Debug, Deserialize, ToSchema)]
struct ShopUpdate {
    /// Required (`shop_id_required` without it).
    #[schema(minimum = 1)]
    id: Option<i64>,
    #[serde(flatten)]
    fields: ShopInput,
}

/// Update a shop (then its cache entry is deleted).
#[utoipa::path(put, path = "/shop", tag = TAG, security(("admin" = [])), request_body = ShopUpdate)]
async fn update_shop(
    State(state): State<AppState>,
    _: Admin,
    AppJson(update): AppJson<ShopUpdate>,
) -> ApiResult<()> {
    let Some(id) = update.id else {
        return Err(CatalogueError::ShopIdRequired.into());
    };
    let id = ShopId::new(id).map_err(|_| ApiError::invalid("id must be a positive integer"))?;
    validate(&update.fields)?;
    if !state.catalogue.update_shop(id, &update.fields).await? {
        return Err(CatalogueError::ShopNotFound.into());
    }
    ok_empty()
}

/// True for text with control characters (NUL, newlines, …), which no name or address needs
/// and which some databases truncate at.
fn has_control(s: &str) -> bool {
    s.chars().any(char::is_control)
}

fn validate(s: &ShopInput) -> Result<(), ApiError> {
    if s.name.trim().is_empty() || s.name.chars().count() > 128 {
        return Err(ApiError::invalid("name must be 1 to 128 characters"));
    }
    let texts = [
        Some(&s.name),
        Some(&s.address),
        Some(&s.images),
        s.area.as_ref(),
        s.open_hours.as_ref(),
    ];
    if texts.into_iter().flatten().any(|t| has_control(t)) {
        return Err(ApiError::invalid(
            "text fields must not contain control characters",
        ));
    }
    // The original schema stores x and y as DOUBLE UNSIGNED (its shops are all in China), so
    // only the eastern and northern hemispheres fit; GEO indexing stops at ±85.05°.
    if !(0.0..=180.0).contains(&s.x) || !(0.0..=85.05).contains(&s.y) {
        return Err(ApiError::invalid(
            "x must be a longitude (0..180) and y a latitude (0..85.05)",
        ));
    }
    if s.type_id <= 0 {
        return Err(ApiError::invalid("typeId must be a positive integer"));
    }
    // The column sizes of the original schema: longer text would be cut or refused by MySQL.
    for (field, value, max) in [
        ("images", Some(&s.images), 1024),
        ("area", s.area.as_ref(), 128),
        ("address", Some(&s.address), 255),
        ("openHours", s.open_hours.as_ref(), 32),
    ] {
        if value.is_some_and(|v| v.chars().count() > max) {
            return Err(ApiError::invalid(format!(
                "{field} must be at most {max} characters"
            )));
        }
    }
    for (field, value) in [
        ("sold", s.sold),
        ("comments", s.comments),
        ("score", s.score),
    ] {
        if !(0..=i64::from(u32::MAX)).contains(&value) {
            return Err(ApiError::invalid(format!(
                "{field} must be between 0 and 4294967295"
            )));
        }
    }
    if s.avg_price.is_some_and(|p| p < 0) {
        return Err(ApiError::invalid("avgPrice must not be negative"));
    }
    Ok(())
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct TypeQuery {
    /// The shop type.
    type_id: i64,
    /// The page number.
    #[param(minimum = 1, maximum = 1000, default = 1)]
    current: Option<i64>,
    /// Longitude (with y).
    #[param(minimum = -180, maximum = 180)]
    x: Option<f64>,
    /// Latitude (with x).
    #[param(minimum = -85.05, maximum = 85.05)]
    y: Option<f64>,
}

/// Shops of a type, 5 per page; with x and y: within 5 km, nearest first.
#[utoipa::path(get, path = "/shop/of/type", tag = TAG, params(TypeQuery),
    responses((status = OK, body = Vec<Shop>)))]
async fn shops_of_type(
    State(state): State<AppState>,
    AppQuery(q): AppQuery<TypeQuery>,
) -> ApiResult<Vec<Shop>> {
    let current = super::extract::page(q.current)?;
    let position = match (q.x, q.y) {
        (Some(x), Some(y)) => {
            if !(-180.0..=180.0).contains(&x) || !(-85.05..=85.05).contains(&y) {
                return Err(ApiError::invalid(
                    "x and y must be a longitude and a latitude",
                ));
            }
            Some((x, y))
        }
        (None, None) => None,
        _ => return Err(ApiError::invalid("give both x and y, or neither")),
    };
    ok(state
        .catalogue
        .shops_of_type(q.type_id, current, position)
        .await?)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct NameQuery {
    /// Part of the name.
    #[param(max_length = 128)]
    name: Option<String>,
    /// The page number.
    #[param(minimum = 1, maximum = 1000, default = 1)]
    current: Option<i64>,
}

/// Shops whose name contains `name`, 10 per page.
#[utoipa::path(get, path = "/shop/of/name", tag = TAG, params(NameQuery),
    responses((status = OK, body = Vec<Shop>)))]
async fn shops_by_name(
    State(state): State<AppState>,
    AppQuery(q): AppQuery<NameQuery>,
) -> ApiResult<Vec<Shop>> {
    let current = super::extract::page(q.current)?;
    let name = q.name.unwrap_or_default();
    if name.chars().count() > 128 || has_control(&name) {
        return Err(ApiError::invalid(
            "name must be at most 128 characters, without control characters",
        ));
    }
    ok(state.catalogue.shops_by_name(&name, current).await?)
}

/// Shop types by sort order, cached.
#[utoipa::path(get, path = "/shop-type/list", tag = TAG, responses((status = OK, body = Vec<ShopType>)))]
async fn shop_types(State(state): State<AppState>) -> ApiResult<Vec<ShopType>> {
    ok(state.catalogue.shop_types().await?)
}

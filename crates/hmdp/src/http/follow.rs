//! `/follow/*`: follow and unfollow, "do I follow", common follows (the original's
//! FollowController). All need login.
//!
//! `PUT /follow/{id}/{isFollow}` answers whether you now follow the user as `data` (the
//! original answers none; its pages ignore it).

use axum::extract::State;
use serde::{Deserialize, Deserializer};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    ApiResult, AppState,
    extract::{AppPath, CurrentUser},
    ok,
};
use crate::domain::{UserDto, UserId};

const TAG: &str = "follow";

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(follow))
        .routes(routes!(is_following))
        .routes(routes!(common))
}

/// A boolean path segment read as Spring reads one: `true`/`false`, also `1`/`0`, `yes`/`no`,
/// `on`/`off` (any case).
#[derive(Debug, Clone, Copy)]
struct Flag(bool);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(Flag(true)),
            "false" | "0" | "no" | "off" => Ok(Flag(false)),
            _ => Err(serde::de::Error::custom(format!(
                "isFollow must be true or false, not {s:?}"
            ))),
        }
    }
}

/// Follow (`true`) or unfollow (`false`) a user; data is whether you now follow them.
///
/// Idempotent. Refused for yourself (`follow_self`), unknown users (`user_not_found`) and a new
/// follow beyond `HMDP_FOLLOW_MAX` (`follow_limit`).
#[utoipa::path(put, path = "/follow/{id}/{isFollow}", tag = TAG, security(("session" = [])),
    params(
        ("id" = inline(UserId), Path, description = "the user to follow"),
        ("isFollow" = bool, Path, description = "true to follow, false to unfollow"),
    ),
    responses((status = OK, body = bool)))]
async fn follow(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath((id, flag)): AppPath<(UserId, Flag)>,
) -> ApiResult<bool> {
    ok(state.social.follow(session.user.id, id, flag.0).await?)
}

/// Whether you follow a user.
#[utoipa::path(get, path = "/follow/or/not/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(UserId), Path, description = "a positive id")),
    responses((status = OK, body = bool)))]
async fn is_following(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(id): AppPath<UserId>,
) -> ApiResult<bool> {
    ok(state.social.is_following(session.user.id, id).await?)
}

/// The users both you and this user follow: the first 100, by id.
#[utoipa::path(get, path = "/follow/common/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(UserId), Path, description = "a positive id")),
    responses((status = OK, body = Vec<UserDto>)))]
async fn common(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(id): AppPath<UserId>,
) -> ApiResult<Vec<UserDto>> {
    ok(state.social.common_follows(session.user.id, id).await?)
}

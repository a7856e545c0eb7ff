//! `/user/*`: SMS code, login, logout, me, public user lookups, and the daily sign-in.

use std::sync::Arc;

use axum::middleware;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{
    router::{OpenApiRouter, UtoipaMethodRouterExt},
    routes,
};

use super::{
    ApiError, ApiResult, AppState, ErrorCode,
    client::ClientIp,
    error::accept_code,
    extract::{AppJson, AppPath, AppQuery, CurrentUser},
    limits::{self, CodeQuota},
    ok, ok_empty,
};
use crate::{
    activity::{SignMonth, YearMonth},
    config::Config,
    domain::{LoginCode, NickName, Phone, UserDto, UserId},
    storage::users::{self, UserInfo},
};

const TAG: &str = "user";

pub(super) fn router(config: &Config) -> OpenApiRouter<AppState> {
    let quota = CodeQuota::new(config.code.ip_per_min).map(Arc::new);
    OpenApiRouter::new()
        .routes(routes!(send_code).map(|code| match quota {
            Some(quota) => {
                code.route_layer(middleware::from_fn_with_state(quota, limits::limit_codes))
            }
            None => code,
        }))
        .routes(routes!(login))
        .routes(routes!(logout))
        .routes(routes!(logout_all))
        .routes(routes!(me))
        .routes(routes!(info))
        .routes(routes!(user_by_id))
        .routes(routes!(sign))
        .routes(routes!(sign_count))
        .routes(routes!(sign_month))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct CodeParams {
    /// A mainland mobile number.
    phone: String,
}

/// Send a 6-digit login code (by SMS gateway, or logged as the original does: `HMDP_SMS`).
///
/// Each phone has a cooldown and a daily cap, each phone and client address a daily cap, each
/// client address a quota of code requests (`HMDP_CODE_IP_PER_MIN`), and the service an hourly
/// budget (`HMDP_SMS_HOURLY_LIMIT`, 503 `sms_budget_spent`). Earlier codes stay valid. When the
/// code cannot be sent the answer is 503 and the phone's cooldown is lifted.
// The IP quota is the route layer in `router` (`limits::limit_codes`).
#[utoipa::path(post, path = "/user/code", tag = TAG, params(CodeParams))]
async fn send_code(
    axum::extract::State(state): axum::extract::State<AppState>,
    client: ClientIp,
    AppQuery(params): AppQuery<CodeParams>,
) -> ApiResult<()> {
    let phone = Phone::parse(&params.phone)?;
    let code = state.codes.issue(&phone, client.key()).await?;
    if let Err(e) = state.sms.send_code(phone.as_str(), code.as_str()).await {
        // Let the user ask again at once: the code they never received must not cost a minute.
        if let Err(re) = state.codes.cancel_cooldown(&phone).await {
            tracing::warn!(error = %re, "could not lift the code cooldown after an SMS failure");
        }
        return Err(ApiError::unavailable("sms", e));
    }
    tracing::debug!(%phone, "login code issued");
    ok_empty()
}

/// A login: the phone and the code sent to it (password login is not offered).
#[derive(Debug, Deserialize, ToSchema)]
struct LoginForm {
    phone: String,
    code: Option<String>,
    password: Option<String>,
}

/// Log in with phone and code; data is the session token.
///
/// Any live code of the phone will do, and the login uses them all up. Send the token in the
/// `authorization` header of later requests. A client address that made
/// `HMDP_CODE_IP_WRONG_DAILY_LIMIT` wrong tries today, on any phones, is refused with 429
/// `too_many_wrong_codes`.
#[utoipa::path(post, path = "/user/login", tag = TAG, request_body = LoginForm,
    responses((status = OK, body = String)))]
async fn login(
    axum::extract::State(state): axum::extract::State<AppState>,
    client: ClientIp,
    AppJson(form): AppJson<LoginForm>,
) -> ApiResult<String> {
    let phone = Phone::parse(&form.phone)?;
    let code = match (form.code.as_deref(), form.password.as_deref()) {
        (Some(c), _) if !c.is_empty() => c,
        (_, Some(_)) => {
            return Err(ApiError::new(
                ErrorCode::PasswordLoginUnsupported,
                "暂不支持密码登录，请使用验证码登录 (password login is not offered: use an SMS code)",
            ));
        }
        _ => return Err(ApiError::invalid("缺少验证码 (missing field `code`)")),
    };
    let code = LoginCode::parse(code)?;

    accept_code(state.codes.check(&phone, &code, client.key()).await?)?;
    // The database work comes before the code is used up, so a database failure here leaves
    // the code valid for a retry instead of burning it.
    let user = users::find_or_create(&state.db, &phone, &NickName::random()).await?;
    if !state.codes.consume(&phone, &code).await? {
        // A concurrent login with the same code won: single use means one of them only.
        return Err(ApiError::new(
            ErrorCode::CodeExpired,
            "验证码已失效，请重新获取 (the code was just used)",
        ));
    }
    let token = state.sessions.create(&user.dto()).await?;
    tracing::info!(user_id = %user.id, %phone, "user logged in");
    ok(token.as_str().to_owned())
}

/// End the session.
#[utoipa::path(post, path = "/user/logout", tag = TAG, security(("session" = [])))]
async fn logout(
    axum::extract::State(state): axum::extract::State<AppState>,
    CurrentUser(session): CurrentUser,
) -> ApiResult<()> {
    state.sessions.delete(&session).await?;
    ok_empty()
}

/// End every session of the logged-in user, this one included; data is how many ended.
///
/// Every instance forgets them at once, as after a logout.
#[utoipa::path(post, path = "/user/logout/all", tag = TAG, security(("session" = [])),
    responses((status = OK, body = u64)))]
async fn logout_all(
    axum::extract::State(state): axum::extract::State<AppState>,
    CurrentUser(session): CurrentUser,
) -> ApiResult<u64> {
    let ended = state.sessions.delete_all(session.user.id).await?;
    tracing::info!(user_id = %session.user.id, ended, "all sessions of a user ended");
    ok(ended)
}

/// The logged-in user.
#[utoipa::path(get, path = "/user/me", tag = TAG, security(("session" = [])),
    responses((status = OK, body = UserDto)))]
async fn me(CurrentUser(session): CurrentUser) -> ApiResult<UserDto> {
    ok(session.user)
}

/// A user's public fields (no data if none).
#[utoipa::path(get, path = "/user/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(UserId), Path, description = "a positive id")),
    responses((status = OK, body = UserDto)))]
async fn user_by_id(
    axum::extract::State(state): axum::extract::State<AppState>,
    _: CurrentUser,
    AppPath(id): AppPath<UserId>,
) -> ApiResult<UserDto> {
    let user = users::find_by_id(&state.db, id).await?;
    Ok(super::Reply(user.map(|u| u.dto())))
}

/// A user's profile (no data if none).
#[utoipa::path(get, path = "/user/info/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(UserId), Path, description = "a positive id")),
    responses((status = OK, body = UserInfo)))]
async fn info(
    axum::extract::State(state): axum::extract::State<AppState>,
    _: CurrentUser,
    AppPath(id): AppPath<UserId>,
) -> ApiResult<UserInfo> {
    Ok(super::Reply(users::find_info(&state.db, id).await?))
}

/// Sign in for today (in `HMDP_TIME_ZONE`); signing twice is harmless.
///
/// Sets bit `day - 1` of `sign:{userId}:{yyyyMM}`, as the original does.
#[utoipa::path(post, path = "/user/sign", tag = TAG, security(("session" = [])))]
async fn sign(
    axum::extract::State(state): axum::extract::State<AppState>,
    CurrentUser(session): CurrentUser,
) -> ApiResult<()> {
    state.activity.sign(session.user.id).await?;
    ok_empty()
}

/// Consecutive signed days ending today, within this month (the original's count).
///
/// 0 while today is not signed yet, even after a streak up to yesterday (the original's
/// behaviour; `GET /user/sign/month` reports the streak that is still alive).
#[utoipa::path(get, path = "/user/sign/count", tag = TAG, security(("session" = [])),
    responses((status = OK, body = u32)))]
async fn sign_count(
    axum::extract::State(state): axum::extract::State<AppState>,
    CurrentUser(session): CurrentUser,
) -> ApiResult<u32> {
    ok(state.activity.sign_count(session.user.id).await?)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct MonthQuery {
    /// The month, `yyyyMM` (default: this month).
    #[param(example = "202405")]
    month: Option<String>,
}

/// A month's sign-in calendar: the signed days, today and the live streak.
///
/// `streak` counts consecutive signed days up to today, or up to yesterday while today is not
/// signed yet, across month boundaries.
#[utoipa::path(get, path = "/user/sign/month", tag = TAG, security(("session" = [])),
    params(MonthQuery), responses((status = OK, body = SignMonth)))]
async fn sign_month(
    axum::extract::State(state): axum::extract::State<AppState>,
    CurrentUser(session): CurrentUser,
    AppQuery(q): AppQuery<MonthQuery>,
) -> ApiResult<SignMonth> {
    let month = match q.month.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => Some(
            m.parse::<YearMonth>()
                .map_err(|e| ApiError::invalid(e.to_string()))?,
        ),
        None => None,
    };
    ok(state.activity.sign_month(session.user.id, month).await?)
}

//! `/user/*`: SMS code, login, logout, me, one's own profile, public user lookups, and the daily
//! sign-in.

use std::sync::Arc;

use axum::middleware;
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{
    router::{OpenApiRouter, UtoipaMethodRouterExt},
    routes,
};

use super::{
    ApiError, ApiResult, AppState,
    client::ClientIp,
    extract::{AppJson, AppPath, AppQuery, CurrentUser},
    limits::{self, CodeQuota},
    ok, ok_empty,
};
use crate::{
    activity::{SignMonth, YearMonth},
    auth::LoginRefusal,
    config::Config,
    domain::{Birthday, LoginCode, NickName, Phone, ProfileError, ProfileText, UserDto, UserId},
    social::SocialError,
    storage::users::{self, Profile, ProfileChange, PublicUserInfo},
    uploads::UploadError,
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
        .routes(routes!(my_profile, update_profile))
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
            return Err(LoginRefusal::PasswordUnsupported.into());
        }
        _ => return Err(ApiError::invalid("缺少验证码 (missing field `code`)")),
    };
    let code = LoginCode::parse(code)?;

    state
        .codes
        .check(&phone, &code, client.key())
        .await?
        .accept()?;
    // The database work comes before the code is used up, so a database failure here leaves
    // the code valid for a retry instead of burning it.
    let user = users::find_or_create(&state.db, &phone, NickName::random().as_str()).await?;
    if !state.codes.consume(&phone, &code).await? {
        // A concurrent login with the same code won: single use means one of them only.
        return Err(LoginRefusal::JustUsed.into());
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

/// A user's public profile (no data if none): `introduce`, `fans`, `followee`, `credits` and
/// `level`.
///
/// The same for every caller, the user included: city, gender and birthday are private, shown
/// only to their owner by `GET /user/info`.
#[utoipa::path(get, path = "/user/info/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(UserId), Path, description = "a positive id")),
    responses((status = OK, body = PublicUserInfo)))]
async fn info(
    axum::extract::State(state): axum::extract::State<AppState>,
    _: CurrentUser,
    AppPath(id): AppPath<UserId>,
) -> ApiResult<PublicUserInfo> {
    Ok(super::Reply(users::find_public_info(&state.db, id).await?))
}

/// The logged-in user's profile: the `/user/info/{id}` fields and the private ones (`city`,
/// `gender`, `birthday`), absent while never set, with `nickName` and `icon`.
#[utoipa::path(get, path = "/user/info", tag = TAG, security(("session" = [])),
    responses((status = OK, body = Profile)))]
async fn my_profile(
    axum::extract::State(state): axum::extract::State<AppState>,
    CurrentUser(session): CurrentUser,
) -> ApiResult<Profile> {
    Ok(super::Reply(
        users::find_profile(&state.db, session.user.id).await?,
    ))
}

/// A change of one's profile: the fields present are set, the others (and `null` ones) left
/// as they are. Texts are plain text, stored as typed.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct ProfileForm {
    /// 1 to 32 characters, trimmed, no control characters.
    nick_name: Option<String>,
    /// Empty, or a photo you uploaded (`/imgs/blogs/…` as `POST /upload/blog` names it): it is
    /// then kept for good and can no longer be deleted.
    icon: Option<String>,
    /// At most 64 characters, trimmed; empty clears it.
    city: Option<String>,
    /// At most 128 characters, trimmed; empty clears it.
    introduce: Option<String>,
    /// `false` (or 0) male, `true` (or 1) female, as the original's `tinyint(1)`.
    #[schema(value_type = Option<bool>)]
    gender: Option<GenderInput>,
    /// `YYYY-MM-DD`, from 1900-01-01 up to today (in `HMDP_TIME_ZONE`).
    #[schema(format = Date)]
    birthday: Option<String>,
}

/// The original's gender: a Boolean in its JSON, a `tinyint(1)` in its table.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum GenderInput {
    Bool(bool),
    Int(u8),
}

/// Change one's profile; data is the profile as it now is.
///
/// `nickName` and `icon` are `tb_user`'s, the rest `tb_user_info`'s (its row is created when
/// missing). Every session of the user shows the new nickname and icon at once. A field that
/// breaks its rule refuses the whole change with 400: `invalid_nickname`, `invalid_icon`,
/// `invalid_profile` (city, introduce, gender, birthday); a field of the wrong JSON type is
/// `invalid_request`.
#[utoipa::path(put, path = "/user/info", tag = TAG, security(("session" = [])),
    request_body = ProfileForm, responses((status = OK, body = Profile)))]
async fn update_profile(
    axum::extract::State(state): axum::extract::State<AppState>,
    session: Result<CurrentUser, ApiError>,
    AppJson(form): AppJson<ProfileForm>,
) -> ApiResult<Profile> {
    // The login is checked after the body is read, as for `POST /blog`: a malformed body is a
    // 400 whether or not the session is alive.
    let CurrentUser(session) = session?;
    let id = session.user.id;
    let mut change = ProfileChange {
        nick_name: form
            .nick_name
            .as_deref()
            .map(|n| NickName::parse(n).map(|n| n.as_str().to_owned()))
            .transpose()?,
        icon: None,
        city: form
            .city
            .as_deref()
            .map(|c| ProfileText::City.parse(c))
            .transpose()?,
        introduce: form
            .introduce
            .as_deref()
            .map(|i| ProfileText::Introduce.parse(i))
            .transpose()?,
        gender: match form.gender {
            None => None,
            Some(GenderInput::Bool(b)) => Some(b),
            Some(GenderInput::Int(i @ (0 | 1))) => Some(i == 1),
            Some(GenderInput::Int(_)) => {
                return Err(ProfileError(
                    "性别格式错误 (gender must be false, true, 0 or 1)".to_owned(),
                )
                .into());
            }
        },
        birthday: form
            .birthday
            .as_deref()
            .map(|b| Birthday::parse(b, state.activity.today()))
            .transpose()?,
    };
    if let Some(icon) = form.icon.as_deref().map(str::trim) {
        let current = users::find_by_id(&state.db, id).await?.map(|u| u.icon);
        change.icon = if icon.is_empty() {
            Some(String::new())
        } else if current.as_deref() == Some(icon) {
            None
        } else {
            let photo = state
                .uploads
                .adopt(id, icon)
                .await
                .map_err(UploadError::for_icon)?;
            Some(format!("/imgs{photo}"))
        };
    }
    users::update_profile(&state.db, id, &change).await?;
    let not_found = || ApiError::from(SocialError::UserNotFound);
    let mut profile = users::find_profile(&state.db, id)
        .await?
        .ok_or_else(not_found)?;
    if change.nick_name.is_some() || change.icon.is_some() {
        profile = sync_sessions(
            profile,
            Profile::dto,
            |dto| {
                let state = state.clone();
                async move {
                    state.sessions.update_user(&dto).await?;
                    Ok::<_, ApiError>(())
                }
            },
            || {
                let state = state.clone();
                async move {
                    users::find_profile(&state.db, id)
                        .await?
                        .ok_or_else(not_found)
                }
            },
        )
        .await?;
        tracing::info!(user_id = %id, "profile changed");
    }
    ok(profile)
}

/// How many times a profile change writes its user's live sessions at most.
const SESSION_SYNC_WRITES: usize = 4;

/// Writes `dto(profile)` to the live sessions of its user until a re-read of the database
/// gives what was written: a concurrent change may write the sessions between this one's read
/// and write. After [`SESSION_SYNC_WRITES`] writes it gives up with a warning (the sessions may
/// show an older nickname or icon until the next change or login). Returns the last profile
/// read.
async fn sync_sessions<P, E, W, R>(
    mut profile: P,
    dto: impl Fn(&P) -> UserDto,
    mut write: impl FnMut(UserDto) -> W,
    mut read: impl FnMut() -> R,
) -> Result<P, E>
where
    W: Future<Output = Result<(), E>>,
    R: Future<Output = Result<P, E>>,
{
    for _ in 0..SESSION_SYNC_WRITES {
        let written = dto(&profile);
        write(written.clone()).await?;
        profile = read().await?;
        if dto(&profile) == written {
            return Ok(profile);
        }
    }
    tracing::warn!(
        user_id = %dto(&profile).id,
        writes = SESSION_SYNC_WRITES,
        "the live sessions may show an older nickname or icon: the profile kept changing"
    );
    Ok(profile)
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        io::Write,
        sync::{Arc, Mutex},
    };

    use super::*;

    /// The log lines written while `f` runs on this thread.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Captured {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    fn user(nick_name: &str) -> UserDto {
        UserDto {
            id: UserId::new(42).unwrap(),
            nick_name: nick_name.to_owned(),
            icon: String::new(),
        }
    }

    /// Runs the re-sync with a database whose nickname reads as `reads` gives them; the
    /// writes made and the warnings logged.
    async fn resync(mut reads: impl FnMut(usize) -> String) -> (Vec<String>, String) {
        let logs = Captured::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let written = Mutex::new(Vec::new());
        let mut read = 0;
        sync_sessions(
            user("first"),
            Clone::clone,
            |dto| {
                written.lock().unwrap().push(dto.nick_name);
                std::future::ready(Ok::<_, Infallible>(()))
            },
            || {
                read += 1;
                std::future::ready(Ok(user(&reads(read))))
            },
        )
        .await
        .unwrap();
        (written.into_inner().unwrap(), logs.text())
    }

    #[tokio::test]
    async fn a_profile_that_stays_put_is_written_once_without_a_warning() {
        let (written, logs) = resync(|_| "first".to_owned()).await;
        assert_eq!(written, ["first"]);
        assert_eq!(logs, "");
    }

    #[tokio::test]
    async fn a_profile_that_keeps_changing_is_given_up_on_with_a_warning() {
        let (written, logs) = resync(|n| format!("change {n}")).await;
        assert_eq!(written, ["first", "change 1", "change 2", "change 3"]);
        assert!(logs.contains("WARN"), "no warning: {logs:?}");
        assert!(
            logs.contains("user_id=42"),
            "the warning names no user: {logs:?}"
        );
    }
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

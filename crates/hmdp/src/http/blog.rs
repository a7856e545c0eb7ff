//! `/blog/*`: notes, likes and the followers' feed (the original's BlogController).
//!
//! All but `/blog/hot` and a note's comments need login (the original's exclude list, which
//! has no comments); `/blog/hot` shows `isLike` only to a logged-in viewer.
//! `PUT /blog/like/{id}` answers the new like state as `data` (the original answers none; its
//! pages ignore it). Comments and deleting a note or a comment are hmdp's own (the original's
//! comment controller is empty).

use std::sync::Arc;

use axum::{Extension, extract::State};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    ApiError, ApiResult, AppState, Reply,
    extract::{AppJson, AppPath, AppQuery, CurrentUser},
    ok, ok_empty,
};
use crate::{
    auth::SessionUser,
    domain::{BlogId, CommentId, UserDto, UserId},
    social::{Blog, BlogInput, Comment, CommentInput, LikeState, ScrollResult, feed::MAX_OFFSET},
};

const TAG: &str = "blog";

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(publish))
        .routes(routes!(blog_by_id))
        .routes(routes!(toggle_like))
        .routes(routes!(likers))
        .routes(routes!(hot))
        .routes(routes!(of_me))
        .routes(routes!(of_user))
        .routes(routes!(of_follow))
        .routes(routes!(delete_blog))
        .routes(routes!(add_comment, comments))
        .routes(routes!(delete_comment))
}

/// Publish a note; data is its id.
///
/// `content` is HTML and is cleaned of anything that could run in a reader's browser (scripts,
/// event handlers, `javascript:` links, styles); formatting stays. The note reaches the
/// followers' feeds (`/blog/of/follow`).
#[utoipa::path(post, path = "/blog", tag = TAG, security(("session" = [])), request_body = BlogInput,
    responses((status = OK, body = BlogId)))]
async fn publish(
    State(state): State<AppState>,
    session: Result<CurrentUser, ApiError>,
    AppJson(input): AppJson<BlogInput>,
) -> ApiResult<BlogId> {
    // The login is checked after the body is read, so a malformed body is a 400 whether or not
    // the session is still alive (the OpenAPI test sends one after logging out); a well-formed
    // note without login is the original's 401.
    let CurrentUser(session) = session?;
    ok(state.social.publish(session.user.id, &input).await?)
}

/// A note with its author (`name`, `icon`) and whether you like it (`blog_not_found` if none).
#[utoipa::path(get, path = "/blog/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(BlogId), Path, description = "a positive id")),
    responses((status = OK, body = Blog)))]
async fn blog_by_id(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(id): AppPath<BlogId>,
) -> ApiResult<Blog> {
    ok(state.social.blog(id, session.user.id).await?)
}

/// Delete your note (`not_your_blog` for someone else's, `blog_not_found` if none).
///
/// Its comments, likes and feed entries go with it; its photos are handed back to the upload
/// clean-up, which deletes them after the grace period unless another note lists them. Each
/// photo is its uploader's again (to delete, or make his icon), never the note author's.
#[utoipa::path(delete, path = "/blog/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(BlogId), Path, description = "a positive id")))]
async fn delete_blog(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(id): AppPath<BlogId>,
) -> ApiResult<()> {
    let images = state.social.delete_blog(id, session.user.id).await?;
    // The note is gone either way; photos not handed back stay on disk (never deleted wrongly).
    if let Err(e) = state.uploads.release(&images).await {
        tracing::warn!(error = %e, blog = %id, "cannot hand a deleted note's photos to the clean-up");
    }
    ok_empty()
}

/// Comment on a note; data is the comment's id.
///
/// `content` is HTML, cleaned as a note's is, then 1 to 255 characters. A reply names the
/// thread it joins (`parentId`, a top-level comment of the note) and/or the comment it
/// answers (`answerId`); anything else is `invalid_comment`.
#[utoipa::path(post, path = "/blog/{id}/comments", tag = TAG, security(("session" = [])),
    params(("id" = inline(BlogId), Path, description = "a positive id")),
    request_body = CommentInput, responses((status = OK, body = CommentId)))]
async fn add_comment(
    State(state): State<AppState>,
    session: Result<CurrentUser, ApiError>,
    AppPath(id): AppPath<BlogId>,
    AppJson(input): AppJson<CommentInput>,
) -> ApiResult<CommentId> {
    // As `publish`: a malformed body is a 400 with or without login.
    let CurrentUser(session) = session?;
    ok(state.social.comment(id, session.user.id, &input).await?)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct CommentPageQuery {
    /// The page number (10 comments a page).
    #[param(minimum = 1, maximum = 1000, default = 1)]
    current: Option<i64>,
}

/// A note's comments, 10 per page, newest first, each with its author (`name`, `icon`); no
/// login needed.
#[utoipa::path(get, path = "/blog/{id}/comments", tag = TAG,
    params(("id" = inline(BlogId), Path, description = "a positive id"), CommentPageQuery),
    responses((status = OK, body = Vec<Comment>)))]
async fn comments(
    State(state): State<AppState>,
    AppPath(id): AppPath<BlogId>,
    AppQuery(q): AppQuery<CommentPageQuery>,
) -> ApiResult<Vec<Comment>> {
    let current = super::extract::page(q.current)?;
    ok(state.social.comments(id, current).await?)
}

/// Delete your comment, with its replies when it is a top-level one (`not_your_comment` for
/// someone else's, `comment_not_found` if none).
#[utoipa::path(delete, path = "/blog/comments/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(CommentId), Path, description = "a positive id")))]
async fn delete_comment(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(id): AppPath<CommentId>,
) -> ApiResult<()> {
    state.social.delete_comment(id, session.user.id).await?;
    ok_empty()
}

/// Like a note, or take the like back; data is the new state.
#[utoipa::path(put, path = "/blog/like/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(BlogId), Path, description = "a positive id")),
    responses((status = OK, body = LikeState)))]
async fn toggle_like(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppPath(id): AppPath<BlogId>,
) -> ApiResult<LikeState> {
    ok(state.social.toggle_like(id, session.user.id).await?)
}

/// The first five users who liked a note, in the order they liked it.
#[utoipa::path(get, path = "/blog/likes/{id}", tag = TAG, security(("session" = [])),
    params(("id" = inline(BlogId), Path, description = "a positive id")),
    responses((status = OK, body = Vec<UserDto>)))]
async fn likers(
    State(state): State<AppState>,
    _: CurrentUser,
    AppPath(id): AppPath<BlogId>,
) -> ApiResult<Vec<UserDto>> {
    ok(state.social.likers(id).await?)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct PageQuery {
    /// The page number (10 notes a page).
    #[param(minimum = 1, maximum = 1000, default = 1)]
    current: Option<i64>,
}

/// The most liked notes, 10 per page; `isLike` only when logged in.
#[utoipa::path(get, path = "/blog/hot", tag = TAG, params(PageQuery),
    responses((status = OK, body = Vec<Blog>)))]
async fn hot(
    State(state): State<AppState>,
    viewer: Option<Extension<Arc<SessionUser>>>,
    AppQuery(q): AppQuery<PageQuery>,
) -> ApiResult<Vec<Blog>> {
    let current = super::extract::page(q.current)?;
    let viewer = viewer.map(|Extension(s)| s.user.id);
    ok(state.social.hot(current, viewer).await?)
}

/// Your notes, 10 per page, oldest first (as the original).
#[utoipa::path(get, path = "/blog/of/me", tag = TAG, security(("session" = [])), params(PageQuery),
    responses((status = OK, body = Vec<Blog>)))]
async fn of_me(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppQuery(q): AppQuery<PageQuery>,
) -> ApiResult<Vec<Blog>> {
    let current = super::extract::page(q.current)?;
    let me = session.user.id;
    ok(state.social.of_user(me, current, me).await?)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct UserPageQuery {
    /// The author.
    #[param(value_type = i64, minimum = 1)]
    id: UserId,
    /// The page number (10 notes a page).
    #[param(minimum = 1, maximum = 1000, default = 1)]
    current: Option<i64>,
}

/// A user's notes, 10 per page, oldest first (as the original).
#[utoipa::path(get, path = "/blog/of/user", tag = TAG, security(("session" = [])),
    params(UserPageQuery), responses((status = OK, body = Vec<Blog>)))]
async fn of_user(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppQuery(q): AppQuery<UserPageQuery>,
) -> ApiResult<Vec<Blog>> {
    let current = super::extract::page(q.current)?;
    ok(state.social.of_user(q.id, current, session.user.id).await?)
}

#[derive(Debug, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
struct ScrollQuery {
    /// The largest publish time (ms) to show: now for the first page, then the previous
    /// page's `minTime`.
    last_id: i64,
    /// How many notes with score `lastId` were shown already: the previous page's `offset`.
    #[param(minimum = 0, maximum = 10000, default = 0)]
    offset: Option<usize>,
}

/// Notes of the authors you follow, newest first, 2 per page.
///
/// Scroll with the previous page's `minTime` as `lastId` and its `offset`; notes published in
/// the same millisecond are neither skipped nor repeated. No `data` when there is nothing
/// (more).
#[utoipa::path(get, path = "/blog/of/follow", tag = TAG, security(("session" = [])),
    params(ScrollQuery), responses((status = OK, body = ScrollResult)))]
async fn of_follow(
    State(state): State<AppState>,
    CurrentUser(session): CurrentUser,
    AppQuery(q): AppQuery<ScrollQuery>,
) -> ApiResult<ScrollResult> {
    let offset = q.offset.unwrap_or(0);
    if offset > MAX_OFFSET {
        return Err(ApiError::invalid(format!(
            "offset must be between 0 and {MAX_OFFSET}"
        )));
    }
    Ok(Reply(
        state
            .social
            .scroll(session.user.id, q.last_id, offset)
            .await?,
    ))
}

//! Extractors that answer in the envelope when a request is malformed, plus the login and
//! admin guards.

use std::sync::Arc;

use axum::{
    extract::{FromRequest, FromRequestParts},
    http::request::Parts,
};

use super::{ApiError, AppState};
use crate::auth::SessionUser;

/// `Json<T>` whose rejections (bad JSON, missing field, wrong type, too large) are envelopes.
#[derive(Debug, FromRequest)]
#[from_request(via(axum::Json), rejection(ApiError))]
pub(crate) struct AppJson<T>(pub T);

/// `Query<T>` whose rejections are envelopes.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct AppQuery<T>(pub T);

/// `Path<T>` whose rejections are envelopes.
#[derive(Debug, FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct AppPath<T>(pub T);

/// Set by the session middleware when Redis could not be asked about the token, so that a
/// protected route answers 503 ("try again") rather than 401 ("log in again").
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionLookupFailed;

/// The logged-in user; a handler taking it requires login (the original's LoginInterceptor).
#[derive(Debug, Clone)]
pub(crate) struct CurrentUser(pub SessionUser);

impl<S: Send + Sync> FromRequestParts<S> for CurrentUser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        if let Some(user) = parts.extensions.get::<Arc<SessionUser>>() {
            return Ok(CurrentUser(SessionUser::clone(user)));
        }
        if parts.extensions.get::<SessionLookupFailed>().is_some() {
            return Err(ApiError::session_store_away());
        }
        Err(ApiError::unauthorized())
    }
}

/// Proof that the request carries the admin token in `x-admin-token`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Admin;

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let given = parts
            .headers
            .get("x-admin-token")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if constant_time_eq(given, state.admin_token.expose().as_bytes()) {
            Ok(Admin)
        } else {
            Err(ApiError::admin_required())
        }
    }
}

/// Compares without an early exit, so response timing does not reveal a matching prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The largest page number accepted (deeper pages are a scan, not a feature).
const MAX_PAGE: i64 = 1000;

/// The `current` page of a list route (1 when absent), refused past [`MAX_PAGE`].
pub(super) fn page(current: Option<i64>) -> Result<i64, ApiError> {
    let current = current.unwrap_or(1);
    if (1..=MAX_PAGE).contains(&current) {
        Ok(current)
    } else {
        Err(ApiError::invalid(format!(
            "current must be between 1 and {MAX_PAGE}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::constant_time_eq;

    #[test]
    fn constant_time_eq_compares_whole_strings() {
        assert!(constant_time_eq(b"secret-token", b"secret-token"));
        assert!(!constant_time_eq(b"secret-token", b"secret-tokeN"));
        assert!(!constant_time_eq(b"secret", b"secret-token"));
        assert!(!constant_time_eq(b"", b"x"));
    }
}

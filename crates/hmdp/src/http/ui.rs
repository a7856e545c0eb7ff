//! The web UI, embedded in the binary (placeholder until the UI lands).

use axum::Router;

use super::AppState;

/// Routes of the embedded UI.
pub fn routes() -> Router<AppState> {
    Router::new()
}

//! `GET /health`: is the service able to serve? Checks Redis and the database.

use std::time::Duration;

use axum::{
    Json,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{AppState, Envelope};
use crate::{kv::RedisConn, storage::Db};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(health))
}

/// Each part: `ok`, or `down` (then the answer is a 503 with this as its data).
#[derive(Debug, Serialize, ToSchema)]
struct Health {
    status: &'static str,
    redis: &'static str,
    database: &'static str,
}

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Redis and database health.
#[utoipa::path(get, path = "/health", tag = "ops", responses((status = OK, body = Health)))]
async fn health(State(state): State<AppState>) -> Response {
    check(&state.redis, &state.db).await
}

/// Pings Redis and the database (each within [`CHECK_TIMEOUT`]): 200 with `status: ok`, or 503
/// in the envelope saying which one is down. Also the standalone worker's `/health`.
pub(crate) async fn check(redis: &RedisConn, db: &Db) -> Response {
    let (redis, db) = tokio::join!(
        tokio::time::timeout(CHECK_TIMEOUT, redis.ping()),
        tokio::time::timeout(CHECK_TIMEOUT, db.ping()),
    );
    let redis_ok = matches!(redis, Ok(Ok(())));
    let db_ok = matches!(db, Ok(Ok(())));
    if !redis_ok {
        tracing::warn!(?redis, "health: redis check failed");
    }
    if !db_ok {
        tracing::warn!(?db, "health: database check failed");
    }
    let healthy = redis_ok && db_ok;
    let body = Health {
        status: if healthy { "ok" } else { "degraded" },
        redis: if redis_ok { "ok" } else { "down" },
        database: if db_ok { "ok" } else { "down" },
    };
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(Envelope {
            success: healthy,
            error_msg: (!healthy).then_some("服务暂时不可用 (a dependency is down)".into()),
            data: Some(body),
            total: None,
            code: (!healthy).then_some("unavailable"),
        }),
    )
        .into_response()
}

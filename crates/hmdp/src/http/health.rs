//! `GET /health`: is the service able to serve? Checks Redis and the database; with
//! `HMDP_ORDER_TRANSPORT=rabbitmq` it also says whether the worker is connected to the broker.
//! A broker away does not make the answer a 503: grabs are still decided and wait in the
//! stream, so the instance should stay in rotation; alert on `broker` (or
//! `hmdp_amqp_*_connected`) instead.

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
    /// `ok` or `down`; only with `HMDP_ORDER_TRANSPORT=rabbitmq` where the worker runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    broker: Option<&'static str>,
}

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Redis and database health.
#[utoipa::path(get, path = "/health", tag = "ops", responses((status = OK, body = Health)))]
async fn health(State(state): State<AppState>) -> Response {
    check(&state.redis, &state.db, state.broker.as_deref()).await
}

/// Pings Redis and the database (each within [`CHECK_TIMEOUT`]): 200 with `status: ok`, or 503
/// in the envelope saying which one is down. Also the standalone worker's `/health`.
pub(crate) async fn check(
    redis: &RedisConn,
    db: &Db,
    broker: Option<&crate::amqp::AmqpStats>,
) -> Response {
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
        broker: broker.map(|b| if b.connected() { "ok" } else { "down" }),
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

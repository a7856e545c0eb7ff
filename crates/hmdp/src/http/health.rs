//! `GET /health`: is the service able to serve? Checks Redis and the database; with
//! `HMDP_ORDER_TRANSPORT=rabbitmq` it also says whether the worker is connected to the broker.
//! A broker away does not make the answer a 503: grabs are still decided and wait in the
//! stream, so the instance should stay in rotation; alert on `broker` (or
//! `hmdp_amqp_*_connected`) instead. Likewise `warnings` never turns the answer into a 503:
//! `redis_not_durable` says that a Redis restart would lose the accepted orders not yet written
//! (no AOF, no `HMDP_REDIS_WAIT_REPLICAS`), which is a setting to fix, not an outage.

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
use crate::{
    kv::{NOT_DURABLE, RedisConn, orders_at_risk},
    storage::Db,
};

pub(crate) fn router() -> OpenApiRouter<AppState> {
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
    /// What works but risks data: `redis_not_durable`; absent when there is nothing to say.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<&'static str>,
}

const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// Redis and database health.
#[utoipa::path(get, path = "/health", tag = "ops", responses((status = OK, body = Health)))]
async fn health(State(state): State<AppState>) -> Response {
    check(
        &state.redis,
        &state.db,
        state.broker.as_deref(),
        sale_redis(&state.config),
    )
    .await
}

/// `Some(HMDP_REDIS_WAIT_REPLICAS)` when accepted orders wait in Redis (`async` mode), for
/// [`check`]'s durability warning.
pub(crate) fn sale_redis(config: &crate::Config) -> Option<u32> {
    (config.seckill.mode == crate::config::SeckillMode::Async)
        .then_some(config.seckill.wait_replicas)
}

/// Pings Redis and the database (each within [`CHECK_TIMEOUT`]): 200 with `status: ok`, or 503
/// in the envelope saying which one is down. With `sale_redis` (see [`sale_redis`]) it also
/// asks Redis whether it persists. Also the standalone worker's `/health`.
pub(crate) async fn check(
    redis_conn: &RedisConn,
    db: &Db,
    broker: Option<&crate::amqp::AmqpStats>,
    sale_redis: Option<u32>,
) -> Response {
    let at_risk = async {
        match sale_redis {
            Some(wait_replicas) => {
                tokio::time::timeout(CHECK_TIMEOUT, orders_at_risk(redis_conn, wait_replicas))
                    .await
                    .unwrap_or(false)
            }
            None => false,
        }
    };
    let (redis, db, at_risk) = tokio::join!(
        tokio::time::timeout(CHECK_TIMEOUT, redis_conn.ping()),
        tokio::time::timeout(CHECK_TIMEOUT, db.ping()),
        at_risk,
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
        warnings: if at_risk { vec![NOT_DURABLE] } else { vec![] },
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

//! `hmdp reconcile`: each sale's Redis state against the database and the order streams.

use anyhow::Context;

use super::{
    components,
    connect::{Redis, connect_database},
};
use crate::{config::Config, domain::VoucherId, seckill::SaleCheck};

/// `hmdp reconcile`: checks (and with `repair` fixes) each sale's Redis state against the
/// database and the order streams, on the configured Redis (never a managed one it would start).
pub(crate) async fn reconcile(
    config: &Config,
    only: Option<VoucherId>,
    repair: bool,
) -> anyhow::Result<Vec<SaleCheck>> {
    let db = connect_database(config).await?;
    let redis = Redis::configured(config).await?;
    let locks = redis.locks()?;
    let seckill = components::seckill(config, &db, &redis, &locks)?;
    seckill
        .check_shards()
        .await
        .context("cannot read the order streams")?;
    Ok(seckill.reconcile(only, repair).await?)
}

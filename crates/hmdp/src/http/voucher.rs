//! `/voucher/*`: the vouchers of a shop (public) and creating one (admin).
//!
//! # Times and time zones
//!
//! The original stores a sale's window as the server's *local* date-time without a zone and
//! returns it as `yyyy-MM-ddTHH:mm:ss`; a client in another zone cannot tell which instant
//! that is. We keep those fields unchanged (the original front-end reads them) and add the
//! same instants as epoch milliseconds (`beginMillis`, `endMillis`, computed with the same
//! [`local_millis`] the flash-sale script's window uses), plus the server's current UTC offset
//! on the stats endpoint. Creating a sale accepts the original local format and also an
//! RFC 3339 time with an offset (`2026-11-23T10:00:00+08:00` or `…Z`), which is converted to
//! the server's local time before it is stored.

use axum::extract::State;

use super::{
    ApiError, ApiResult, AppState,
    extract::{Admin, AppJson, AppPath, AppQuery},
    ok,
};
use chrono::{DateTime, Local, NaiveDateTime};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    catalogue::CatalogueError,
    domain::{ShopId, StockBuckets, VoucherId, parse_datetime},
    seckill::{Refusal, SaleStats, local_millis},
    storage::{
        catalogue::{self, Voucher, VoucherInput},
        orders::{self, NewSeckillVoucher},
    },
};

const TAG: &str = "voucher";

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_voucher))
        .routes(routes!(create_seckill_voucher))
        .routes(routes!(sale_stats))
        .routes(routes!(vouchers_of_shop))
}

/// Create a plain voucher; data is its id.
#[utoipa::path(post, path = "/voucher", tag = TAG, security(("admin" = [])),
    request_body = VoucherInput, responses((status = OK, body = i64)))]
async fn create_voucher(
    State(state): State<AppState>,
    _: Admin,
    AppJson(input): AppJson<VoucherInput>,
) -> ApiResult<i64> {
    check_texts(
        &input.title,
        input.sub_title.as_deref(),
        input.rules.as_deref(),
    )?;
    if input.pay_value < 0 || input.actual_value < 0 {
        return Err(ApiError::invalid(
            "payValue and actualValue must not be negative",
        ));
    }
    let shop = ShopId::new(input.shop_id)
        .map_err(|_| ApiError::invalid("shopId must be a positive integer"))?;
    if catalogue::shop(&state.db, shop).await?.is_none() {
        return Err(CatalogueError::ShopNotFound.into());
    }
    ok(catalogue::insert_voucher(&state.db, &input).await?.get())
}

/// A voucher as listed: the original's fields, and for a flash sale its window as instants.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct VoucherView {
    #[serde(flatten)]
    voucher: Voucher,
    /// `beginTime` (server-local) as milliseconds since the epoch (UTC): the instant, whatever
    /// the zones.
    #[serde(skip_serializing_if = "Option::is_none")]
    begin_millis: Option<i64>,
    /// `endTime` (server-local) as milliseconds since the epoch (UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    end_millis: Option<i64>,
}

/// A shop's vouchers on sale.
///
/// Flash-sale ones with their stock and window: `beginTime`/`endTime` server-local,
/// `beginMillis`/`endMillis` as instants.
#[utoipa::path(get, path = "/voucher/list/{shop_id}", tag = TAG,
    params(("shop_id" = inline(ShopId), Path, description = "a positive id")),
    responses((status = OK, body = Vec<VoucherView>)))]
async fn vouchers_of_shop(
    State(state): State<AppState>,
    AppPath(shop): AppPath<ShopId>,
) -> ApiResult<Vec<VoucherView>> {
    let vouchers = catalogue::vouchers_of_shop(&state.db, shop).await?;
    ok(vouchers
        .into_iter()
        .map(|voucher| VoucherView {
            begin_millis: voucher.begin_time.map(|t| local_millis(t.0)),
            end_millis: voucher.end_time.map(|t| local_millis(t.0)),
            voucher,
        })
        .collect())
}

/// Title, subtitle and rules within the original's column sizes.
fn check_texts(title: &str, sub_title: Option<&str>, rules: Option<&str>) -> Result<(), ApiError> {
    if title.trim().is_empty() || title.chars().count() > 255 {
        return Err(ApiError::invalid("title must be 1 to 255 characters"));
    }
    if sub_title.is_some_and(|s| s.chars().count() > 255) {
        return Err(ApiError::invalid("subTitle must be at most 255 characters"));
    }
    if rules.is_some_and(|s| s.chars().count() > 1024) {
        return Err(ApiError::invalid("rules must be at most 1024 characters"));
    }
    Ok(())
}

/// The original's seckill `Voucher` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct SeckillVoucherInput {
    #[schema(minimum = 1)]
    shop_id: i64,
    #[schema(min_length = 1, max_length = 255)]
    title: String,
    #[schema(max_length = 255)]
    sub_title: Option<String>,
    #[schema(max_length = 1024)]
    rules: Option<String>,
    #[schema(minimum = 0)]
    pay_value: i64,
    #[schema(minimum = 0)]
    actual_value: i64,
    #[schema(minimum = 1, maximum = 10_000_000)]
    stock: i64,
    /// Server-local `yyyy-MM-ddTHH:mm:ss` (as the original), or RFC 3339 with an offset or `Z`
    /// (converted to server-local time).
    #[serde(deserialize_with = "sale_time")]
    #[schema(value_type = String, example = "2026-11-21T10:00:00+08:00")]
    begin_time: NaiveDateTime,
    /// As `beginTime`.
    #[serde(deserialize_with = "sale_time")]
    #[schema(value_type = String, example = "2026-11-21T12:00:00+08:00")]
    end_time: NaiveDateTime,
    /// How many buckets Redis splits the stock over (库存分桶), each in its own hash slot, so
    /// that a cluster spreads one voucher's grabs over its masters; 1 (the default) is one key.
    #[schema(minimum = 1, maximum = 64)]
    stock_buckets: Option<i64>,
}

/// Reads a sale's begin or end as the server-local date-time the database stores: the
/// original's `yyyy-MM-ddTHH:mm:ss` (already server-local), or an RFC 3339 time with an offset
/// or `Z` (an unambiguous instant, converted to the server's zone). A browser knows its own
/// offset but not the server's, so the web UI sends the second form.
fn sale_time<'de, D: serde::Deserializer<'de>>(d: D) -> Result<NaiveDateTime, D::Error> {
    let s: String = Deserialize::deserialize(d)?;
    parse_sale_time(&s).ok_or_else(|| {
        serde::de::Error::custom(format!(
            "{s:?} is not a date-time like 2026-01-25T10:00:00 (server-local) \
             or 2026-01-25T10:00:00+08:00"
        ))
    })
}

fn parse_sale_time(s: &str) -> Option<NaiveDateTime> {
    parse_datetime(s).or_else(|| {
        DateTime::parse_from_rfc3339(s.trim())
            .ok()
            .map(|t| t.with_timezone(&Local).naive_local())
    })
}

/// Create a flash-sale voucher and load it into Redis; data is its id.
///
/// Times are server-local, as the original's, or carry their own offset.
// The voucher and its sale are saved in one transaction, then the stock and the window are
// loaded into Redis (see `sale_time` for the time formats).
#[utoipa::path(post, path = "/voucher/seckill", tag = TAG, security(("admin" = [])),
    request_body = SeckillVoucherInput, responses((status = OK, body = i64)))]
async fn create_seckill_voucher(
    State(state): State<AppState>,
    _: Admin,
    AppJson(v): AppJson<SeckillVoucherInput>,
) -> ApiResult<i64> {
    check_texts(&v.title, v.sub_title.as_deref(), v.rules.as_deref())?;
    if v.stock < 1 || v.stock > 10_000_000 {
        return Err(ApiError::invalid("stock must be between 1 and 10000000"));
    }
    if v.begin_time >= v.end_time {
        return Err(ApiError::invalid("beginTime must be before endTime"));
    }
    // MySQL TIMESTAMP columns (the original's) hold 1970-01-01 … 2038-01-19 only.
    let earliest = chrono::NaiveDate::from_ymd_opt(1970, 1, 2).and_then(|d| d.and_hms_opt(0, 0, 0));
    let latest = chrono::NaiveDate::from_ymd_opt(2038, 1, 18).and_then(|d| d.and_hms_opt(0, 0, 0));
    if Some(v.begin_time) < earliest || Some(v.end_time) > latest {
        return Err(ApiError::invalid(
            "beginTime and endTime must lie between 1970-01-02 and 2038-01-18",
        ));
    }
    if v.pay_value < 0 || v.actual_value < 0 {
        return Err(ApiError::invalid(
            "payValue and actualValue must not be negative",
        ));
    }
    let buckets = match v.stock_buckets {
        None => StockBuckets::ONE,
        Some(n) => StockBuckets::new(n).map_err(|e| ApiError::invalid(e.to_string()))?,
    };
    let shop = ShopId::new(v.shop_id)
        .map_err(|_| ApiError::invalid("shopId must be a positive integer"))?;
    if catalogue::shop(&state.db, shop).await?.is_none() {
        return Err(CatalogueError::ShopNotFound.into());
    }
    let id = orders::insert_seckill_voucher(
        &state.db,
        &NewSeckillVoucher {
            shop_id: v.shop_id,
            title: v.title,
            sub_title: v.sub_title,
            rules: v.rules,
            pay_value: v.pay_value,
            actual_value: v.actual_value,
            stock: v.stock,
            begin_time: v.begin_time,
            end_time: v.end_time,
            buckets,
        },
    )
    .await?;
    state
        .seckill
        .load_new_voucher(id, v.stock, v.begin_time, v.end_time, buckets)
        .await;
    ok(id.get())
}

/// A sale's live state, with its window as instants and the server's zone.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct SaleStatsView {
    #[serde(flatten)]
    stats: SaleStats,
    /// `beginTime` as milliseconds since the epoch (UTC).
    begin_millis: i64,
    /// `endTime` as milliseconds since the epoch (UTC).
    end_millis: i64,
    /// The server's offset from UTC right now, in minutes (east positive), so a page can say
    /// which zone `beginTime`/`endTime` are in.
    server_utc_offset_minutes: i32,
}

/// What a sale's live state includes.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct SaleStatsQuery {
    /// With each stock bucket of a split sale (`buckets` in the answer).
    #[serde(default)]
    buckets: bool,
}

/// A sale's live state.
///
/// Stock in Redis and in the database, accepted vs written orders, the order stream's
/// backlog, and the written orders by status (`paid`, `unpaid`, `released`, `byStatus`): what
/// the dashboard shows.
#[utoipa::path(get, path = "/voucher/seckill/{id}/stats", tag = TAG,
    params(("id" = inline(VoucherId), Path, description = "a positive id"), SaleStatsQuery),
    responses((status = OK, body = SaleStatsView)))]
async fn sale_stats(
    State(state): State<AppState>,
    AppPath(id): AppPath<VoucherId>,
    AppQuery(query): AppQuery<SaleStatsQuery>,
) -> ApiResult<SaleStatsView> {
    match state.seckill.sale_stats(id).await? {
        Some(mut stats) => {
            if !query.buckets {
                stats.buckets = None;
            }
            ok(SaleStatsView {
                begin_millis: local_millis(stats.begin_time.0),
                end_millis: local_millis(stats.end_time.0),
                server_utc_offset_minutes: Local::now().offset().local_minus_utc() / 60,
                stats,
            })
        }
        None => Err(Refusal::UnknownVoucher.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sale_times_are_server_local_or_carry_an_offset() {
        let local = parse_sale_time("2030-01-02T03:04:05").unwrap();
        assert_eq!(local.to_string(), "2030-01-02 03:04:05");
        assert_eq!(parse_sale_time("2030-01-02 03:04:05"), Some(local));
        // With an offset: the same instant, in the server's zone.
        let instant = DateTime::parse_from_rfc3339("2030-01-02T03:04:05+08:00").unwrap();
        let t = parse_sale_time("2030-01-02T03:04:05+08:00").unwrap();
        assert_eq!(local_millis(t), instant.timestamp_millis());
        let z = parse_sale_time("2030-01-01T19:04:05Z").unwrap();
        assert_eq!(z, t);
        assert_eq!(parse_sale_time("tomorrow"), None);
        assert_eq!(parse_sale_time("2030-01-02T03:04:05+25:00"), None);
    }
}

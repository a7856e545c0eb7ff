//! Test support (feature `test-util`): the one documented surface for this crate's tests and
//! the bench, beside the public API. What several of them need in the same shape is here once,
//! so that a change to it (a field of the sale's form, say) is made in one place.
//!
//! A flash sale is created through the admin route, as an operator would: the voucher row and
//! its sale in the database, then the sale loaded into Redis by the service itself. A test that
//! needs Redis in a particular state starts from there ([`crate::seckill::voucher_hash`] names
//! the fields of the sale's hash).

use chrono::{Duration, Local, NaiveDateTime};
use serde_json::{Value, json};

use crate::domain::ApiDateTime;
#[cfg(test)]
use crate::domain::parse_datetime;

// The internals the tests and the bench drive directly, named by the room they live in. Each
// is re-exported item by item, so what is reachable from outside is this list and nothing more.

/// Sign-in and visitors.
pub mod activity {
    pub use crate::activity::{VisitMode, Visitor};
}

/// The RabbitMQ side of the order pipeline.
pub mod amqp {
    pub use crate::amqp::{
        AmqpStats, CONTENT_TYPE, OrderMessage, Outgoing, Publisher, accepted_at_ms, connect,
        topology,
    };
}

/// Login: an SMS sender that keeps the codes it is asked to send.
pub mod auth {
    pub use crate::auth::CapturingSms;
}

/// Shops.
pub mod catalogue {
    pub use crate::catalogue::NAME_MAX_PAGE;
}

/// The newtypes parsed at the edge.
pub mod domain {
    pub use crate::domain::{
        ApiDateTime, OrderId, SessionToken, ShopId, StockBuckets, UserId, VoucherId,
    };
}

/// The running service's shared state and its documented routes.
pub mod http {
    pub use crate::http::{AppState, api};
}

/// Redis: the connection, the key names, the managed `redis-server`.
pub mod kv {
    pub use crate::kv::{
        Keys, RedisConn, RedisTarget, SentinelConn, SentinelPrimary, key_slot,
        managed::answers_ping,
    };
}

/// The Prometheus registry.
pub mod metrics {
    pub use crate::metrics::{Registry, encode};
}

/// The order's life after the grab: the gateway's signature, as the gateway computes it.
pub mod order_life {
    pub use crate::order_life::gateway::{SIGNATURE_HEADER, sign};
}

/// The contract between the flash sale and the worker.
pub mod order_stream {
    pub use crate::order_stream::{PENDING_TTL, PendingRecord};
}

/// The flash sale: its decision script and the voucher hash.
pub mod seckill {
    pub use crate::seckill::{
        SaleCheck, Seckill, SeckillError, ShardCountMismatch,
        scripts::{GRAB, GrabAnswer, GrabCall},
        voucher_hash,
    };
}

/// Notes and likes.
pub mod social {
    pub use crate::social::likes::LOADED as LIKES_LOADED;
}

/// The commands' building blocks a test runs on its own.
pub mod startup {
    pub use crate::startup::{order_id_generator, raise_open_files_limit, run_worker_with};
}

/// The database.
pub mod storage {
    pub use crate::storage::{
        Db,
        comments::DELETE_REPLIES,
        follows::users_by_ids,
        migrate,
        orders::{self, NewOrder},
    };
}

/// Note photos.
pub mod uploads {
    pub use crate::uploads::SweepReport;
}

/// The order worker.
pub mod worker {
    pub use crate::worker::{GROUP, OrderWorker, Step, WorkerError, WorkerStats};
}

/// A flash-sale voucher to create with `POST` [`FlashSale::PATH`]: by default on shop 1, on sale
/// from a minute ago for an hour (server-local time, the original's format).
#[derive(Debug, Clone, PartialEq)]
pub struct FlashSale {
    shop_id: i64,
    title: String,
    sub_title: Option<String>,
    rules: Option<String>,
    pay_value: i64,
    actual_value: i64,
    stock: i64,
    begin: String,
    end: String,
    /// `stockBuckets`, sent only when set.
    buckets: Option<i64>,
}

impl FlashSale {
    /// The admin route that creates a flash-sale voucher (header `x-admin-token`).
    pub const PATH: &'static str = "/api/voucher/seckill";

    /// `stock` vouchers, on sale from a minute ago for an hour.
    pub fn new(stock: i64) -> Self {
        Self::running_at(stock, Local::now().naive_local())
    }

    /// `stock` vouchers, on sale from a minute before `now` until an hour after it.
    pub fn running_at(stock: i64, now: NaiveDateTime) -> Self {
        Self {
            shop_id: 1,
            title: "限时抢购券".to_owned(),
            sub_title: None,
            rules: None,
            pay_value: 100,
            actual_value: 1000,
            stock,
            begin: api_time(now - Duration::minutes(1)),
            end: api_time(now + Duration::hours(1)),
            buckets: None,
        }
    }

    /// The stock split over `n` buckets (`stockBuckets`; sent as given, so a test can send a
    /// refused count).
    pub fn buckets(mut self, n: i64) -> Self {
        self.buckets = Some(n);
        self
    }

    /// On sale from `begin` to `end` seconds from now (negative: in the past).
    pub fn from_now(self, begin: i64, end: i64) -> Self {
        let now = Local::now().naive_local();
        self.window(now + Duration::seconds(begin), now + Duration::seconds(end))
    }

    /// On sale from `begin` to `end`, server-local time.
    pub fn window(self, begin: NaiveDateTime, end: NaiveDateTime) -> Self {
        self.window_text(&api_time(begin), &api_time(end))
    }

    /// On sale from `begin` to `end` as written (any format the route accepts, with an offset
    /// say).
    pub fn window_text(mut self, begin: &str, end: &str) -> Self {
        begin.clone_into(&mut self.begin);
        end.clone_into(&mut self.end);
        self
    }

    pub fn shop(mut self, shop_id: i64) -> Self {
        self.shop_id = shop_id;
        self
    }

    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = title.into();
        self
    }

    pub fn sub_title(mut self, sub_title: impl Into<String>) -> Self {
        self.sub_title = Some(sub_title.into());
        self
    }

    pub fn rules(mut self, rules: impl Into<String>) -> Self {
        self.rules = Some(rules.into());
        self
    }

    /// What the voucher costs and what it is worth (in cents).
    pub fn values(mut self, pay_value: i64, actual_value: i64) -> Self {
        self.pay_value = pay_value;
        self.actual_value = actual_value;
        self
    }

    /// The request's JSON body.
    pub fn body(&self) -> Value {
        let mut body = json!({
            "shopId": self.shop_id,
            "title": self.title,
            "payValue": self.pay_value,
            "actualValue": self.actual_value,
            "stock": self.stock,
            "beginTime": self.begin,
            "endTime": self.end,
        });
        if let Some(s) = &self.sub_title {
            body["subTitle"] = json!(s);
        }
        if let Some(n) = self.buckets {
            body["stockBuckets"] = json!(n);
        }
        if let Some(r) = &self.rules {
            body["rules"] = json!(r);
        }
        body
    }

    /// Creates the sale on the service at `base_url` (`http://host:port`) as the admin of
    /// `admin_token`: the new voucher's id, or the answer that refused it.
    pub async fn create(
        self,
        client: &reqwest::Client,
        base_url: &str,
        admin_token: &str,
    ) -> anyhow::Result<i64> {
        let r = client
            .post(format!("{base_url}{}", Self::PATH))
            .header("x-admin-token", admin_token)
            .json(&self.body())
            .send()
            .await?;
        let status = r.status();
        let text = r.text().await?;
        let answer: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match answer["data"].as_i64() {
            Some(id) if status.is_success() && answer["success"] == true => Ok(id),
            _ => anyhow::bail!("creating the flash sale {}: {status} {text}", self.body()),
        }
    }
}

/// A date-time in the API's format (server-local, no zone).
pub fn api_time(t: NaiveDateTime) -> String {
    ApiDateTime(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_the_routes_fields() {
        let now = parse_datetime("2026-11-21T14:30:00").unwrap();
        let b = FlashSale::running_at(500, now).body();
        assert_eq!(b["beginTime"], "2026-11-21T14:29:00");
        assert_eq!(b["endTime"], "2026-11-21T15:30:00");
        assert_eq!(
            (b["stock"].as_i64(), b["shopId"].as_i64()),
            (Some(500), Some(1))
        );
        assert!(b.get("subTitle").is_none() && b.get("rules").is_none());
        let b = FlashSale::new(5)
            .shop(2)
            .sub_title("测试")
            .rules("每人一张")
            .window_text("2030-06-01T10:00:00+08:00", "2030-06-01T20:00:00Z")
            .body();
        assert_eq!(b["shopId"], 2);
        assert_eq!(
            (b["subTitle"].as_str(), b["rules"].as_str()),
            (Some("测试"), Some("每人一张"))
        );
        assert_eq!(b["beginTime"], "2030-06-01T10:00:00+08:00");
    }
}

//! Redis access: one connection type for a single node, a Redis Cluster and a primary watched
//! by Redis Sentinel.
//!
//! [`RedisTarget`] says where Redis is; every connection of the service is opened from it, so
//! none holds an address that a Sentinel failover would leave behind. [`RedisConn`] implements
//! redis-rs's `ConnectionLike`, so every command helper (`AsyncCommands`, `Script::invoke_async`,
//! pipelines) runs on it unchanged, whichever topology is behind it. `HMDP_REDIS_URL` with one
//! URL means a single node (reached through a reconnecting `ConnectionManager`); several
//! comma-separated URLs mean a cluster; `HMDP_REDIS_SENTINELS` means a primary found through the
//! Sentinels, followed when they promote another (`sentinel`).
//!
//! Key names come from [`Keys`], which adds the deployment prefix and keeps the original's
//! names (`login:code:{phone}`, `login:token:{token}`, …). Keys that one Lua script touches
//! together are built as *slot mates* ([`slot_mate`]) so that the script stays legal on a
//! cluster, where all keys of one script must hash to one slot.

pub(crate) mod managed;
mod persistence;
mod replicas;
mod scan;
mod sentinel;
mod target;

pub(crate) use persistence::{NOT_DURABLE, orders_at_risk};
pub(crate) use replicas::{ReplicaWait, Replicated};
pub(crate) use scan::KeyScan;
pub use sentinel::{SentinelConn, SentinelPrimary};
pub use target::RedisTarget;

use std::time::Duration;

use redis::{
    Cmd, RedisFuture, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
};

/// A Redis connection to a single node, to a cluster, or to the primary the Sentinels name.
/// Cheap to clone; clones share the underlying multiplexed connection(s), so there is no pool
/// to size.
#[derive(Clone)]
pub enum RedisConn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl std::fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RedisConn::Single(_) => f.write_str("RedisConn::Single"),
            RedisConn::Cluster(_) => f.write_str("RedisConn::Cluster"),
            RedisConn::Sentinel(_) => f.write_str("RedisConn::Sentinel"),
        }
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(c) => c.req_packed_command(cmd),
            RedisConn::Cluster(c) => c.req_packed_command(cmd),
            RedisConn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            RedisConn::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(c) => c.get_db(),
            RedisConn::Cluster(c) => c.get_db(),
            RedisConn::Sentinel(c) => c.get_db(),
        }
    }
}

/// How long a command may take before it fails (so a hung Redis answers fast instead of
/// holding requests until the HTTP timeout).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

impl RedisConn {
    /// Connects to `url`: one `redis://` URL for a single node, several comma-separated
    /// for a cluster (tests and benches; the service connects through its [`RedisTarget`]).
    #[cfg(any(test, feature = "test-util"))]
    pub async fn connect(url: &str) -> redis::RedisResult<Self> {
        RedisTarget::from_url(url).connect().await
    }

    async fn connect_single(url: &str) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        Ok(RedisConn::Single(
            ConnectionManager::new_with_config(client, cfg).await?,
        ))
    }

    async fn connect_cluster(nodes: &[String]) -> redis::RedisResult<Self> {
        let client = ClusterClient::builder(nodes.iter().map(String::as_str))
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .build()?;
        Ok(RedisConn::Cluster(client.get_async_connection().await?))
    }

    async fn connect_sentinel(primary: &SentinelPrimary) -> redis::RedisResult<Self> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        Ok(RedisConn::Sentinel(
            SentinelConn::connect(primary.clone(), config).await?,
        ))
    }

    /// One `PING` (health checks).
    pub async fn ping(&self) -> redis::RedisResult<()> {
        let mut c = self.clone();
        let pong: String = redis::cmd("PING").query_async(&mut c).await?;
        debug_assert_eq!(pong, "PONG");
        Ok(())
    }
}

/// Builds every Redis key the service uses, with the deployment prefix in front.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// `prefix` must not contain `{` or `}` (the configuration checks this).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// `login:code:{phone}`: the newest SMS code of a phone (the original's key and value; the
    /// other live codes are in [`Keys::login_code_live`]).
    pub fn login_code(&self, phone: &str) -> String {
        format!("{}login:code:{phone}", self.prefix)
    }

    /// Every live code of a phone, scored by its expiry (ms); a slot mate of the code key.
    pub fn login_code_live(&self, phone: &str) -> String {
        slot_mate(&self.login_code(phone), "live")
    }

    /// Wrong tries against a phone's codes: a field per client address and `*` for all of them
    /// (hash); a slot mate of the code key.
    pub fn login_code_wrong(&self, phone: &str) -> String {
        slot_mate(&self.login_code(phone), "wrong")
    }

    /// Present while a phone must wait before the next code; a slot mate of the code key.
    pub fn login_code_cooldown(&self, phone: &str) -> String {
        slot_mate(&self.login_code(phone), "cooldown")
    }

    /// Codes sent to a phone in the current 24-hour window; a slot mate of the code key.
    pub fn login_code_daily(&self, phone: &str) -> String {
        slot_mate(&self.login_code(phone), "daily")
    }

    /// Codes sent to a phone in the current 24-hour window, a field per client address that
    /// asked (hash); a slot mate of the code key.
    pub fn login_code_daily_ip(&self, phone: &str) -> String {
        slot_mate(&self.login_code(phone), "daily:ip")
    }

    /// `login:wrong:{address}`: wrong code tries from one client address (see
    /// [`crate::http::ClientIp::key`]) against all phones in the current 24-hour window.
    pub fn login_wrong_ip(&self, address: &str) -> String {
        format!("{}login:wrong:{address}", self.prefix)
    }

    /// `login:sms:hour`: login codes sent by the whole service in the current hour.
    pub fn sms_hourly(&self) -> String {
        format!("{}login:sms:hour", self.prefix)
    }

    /// `login:token:{token}`: the session hash (id, nickName, icon) (the original's key).
    pub fn login_token(&self, token: &str) -> String {
        format!("{}login:token:{token}", self.prefix)
    }

    /// `login:sessions:{userId}`: a user's sessions, token → the instant (ms) it ends at the
    /// latest (ZSET), for ending them all.
    pub fn user_sessions(&self, user_id: i64) -> String {
        format!("{}login:sessions:{user_id}", self.prefix)
    }

    // ---- notes, likes, follows, feed (`social`) ----

    /// `blog:liked:{blogId}`: who liked a note, scored by the time (ms) of the like (the
    /// original's key).
    pub fn blog_liked(&self, blog_id: i64) -> String {
        format!("{}blog:liked:{blog_id}", self.prefix)
    }

    /// The `SCAN … MATCH` pattern of every [`Keys::blog_liked`] key (the prefix taken
    /// literally, even if it holds `*`, `?`, `[` or `\`).
    pub fn blog_liked_pattern(&self) -> String {
        format!("{}blog:liked:*", glob_escape(&self.prefix))
    }

    /// The note id of a [`Keys::blog_liked`] key; `None` for any other key.
    pub fn blog_liked_id(&self, key: &str) -> Option<i64> {
        key.strip_prefix(self.prefix.as_str())?
            .strip_prefix("blog:liked:")?
            .parse()
            .ok()
            .filter(|id| *id > 0)
    }

    /// `follows:{userId}`: whom a user follows (the original's key; `tb_follow` is the truth).
    pub fn follows(&self, user_id: i64) -> String {
        format!("{}follows:{user_id}", self.prefix)
    }

    /// `feed:{userId}`: a user's inbox of followed authors' note ids, scored by publish time
    /// (ms) (the original's key).
    pub fn feed(&self, user_id: i64) -> String {
        format!("{}feed:{user_id}", self.prefix)
    }

    /// `feed:outbox:{authorId}`: the note ids of an author whose notes are pulled into the
    /// followers' feeds at read time (too many followers to push to), scored like the inbox.
    pub fn feed_outbox(&self, author_id: i64) -> String {
        format!("{}feed:outbox:{author_id}", self.prefix)
    }

    /// `feed:pulled-authors`: the authors that have a [`Keys::feed_outbox`].
    pub fn feed_pulled_authors(&self) -> String {
        format!("{}feed:pulled-authors", self.prefix)
    }

    /// `comment:quota:{userId}:{yyyyMMdd}`: how many comments one user posted on one day (in
    /// `HMDP_TIME_ZONE`). Expires after two days.
    pub fn comment_quota(&self, user_id: i64, day: &str) -> String {
        format!("{}comment:quota:{user_id}:{day}", self.prefix)
    }

    /// `cache:shop:{id}` *without* the prefix: the cache client adds it.
    pub fn cache_shop(id: crate::domain::ShopId) -> String {
        format!("cache:shop:{id}")
    }

    /// `cache:shop-type:list` *without* the prefix: the cache client adds it.
    pub fn cache_shop_types() -> &'static str {
        "cache:shop-type:list"
    }

    /// `shop:geo:{typeId}`: the GEO set of a shop type's positions (the original's key).
    pub fn shop_geo(&self, type_id: i64) -> String {
        format!("{}shop:geo:{type_id}", self.prefix)
    }

    /// `cache:shop-geo:{typeId}` *without* the prefix: how many shops were loaded into the
    /// type's GEO index just now, or the null marker for a type without shops.
    pub fn cache_shop_geo_loaded(type_id: i64) -> String {
        format!("cache:shop-geo:{type_id}")
    }

    /// `bloom:shop`: the Bloom filter of shop ids.
    pub fn shop_bloom(&self) -> String {
        format!("{}bloom:shop", self.prefix)
    }

    // ---- sign-in and unique visitors (`activity`) ----

    /// `sign:{userId}:{yyyyMM}`: the month's sign-in bitmap, bit `day - 1` (the original's key).
    pub fn sign(&self, user_id: i64, year_month: &str) -> String {
        format!("{}sign:{user_id}:{year_month}", self.prefix)
    }

    /// `uv:shop:{<shopId>}:<yyyyMMdd>`: a shop's visitors of one day (HyperLogLog). The shop id
    /// is the hash tag, so one `PFCOUNT` over several days of a shop stays in one cluster slot.
    pub fn uv_shop(&self, shop_id: i64, day: &str) -> String {
        format!("{}uv:shop:{{{shop_id}}}:{day}", self.prefix)
    }

    /// `uv:{site}:<yyyyMMdd>`: the whole site's visitors of one day (HyperLogLog).
    pub fn uv_site(&self, day: &str) -> String {
        format!("{}uv:{{site}}:{day}", self.prefix)
    }

    /// `uv:shop:{<shopId>}:w:<yyyyMMdd>`: a shop's visitors of the week (Monday to Sunday) that
    /// starts on that Monday (HyperLogLog): its seven days merged once the week is over, so a
    /// long count reads one key per week. Tagged like the shop's days: a merge and a count over
    /// weeks and days stay in one cluster slot.
    pub fn uv_shop_week(&self, shop_id: i64, monday: &str) -> String {
        format!("{}uv:shop:{{{shop_id}}}:w:{monday}", self.prefix)
    }

    /// `uv:{site}:w:<yyyyMMdd>`: the whole site's visitors of the week starting on that Monday
    /// (HyperLogLog), merged from its days as [`Keys::uv_shop_week`].
    pub fn uv_site_week(&self, monday: &str) -> String {
        format!("{}uv:{{site}}:w:{monday}", self.prefix)
    }

    /// The order-stream shard of a voucher.
    pub fn seckill_shard(voucher_id: i64, shards: u32) -> u32 {
        (voucher_id.rem_euclid(i64::from(shards.max(1)))) as u32
    }

    /// `seckill:{s<k>}:voucher:<id>`: a voucher's live sale (its fields: `seckill::voucher_hash`).
    /// Every key of one shard carries the hash tag `{s<k>}`, so the flash-sale script's keys
    /// and the shard's order stream share one Redis Cluster slot.
    pub fn seckill_voucher(&self, shard: u32, voucher_id: i64) -> String {
        format!("{}seckill:{{s{shard}}}:voucher:{voucher_id}", self.prefix)
    }

    /// `seckill:{s<k>}:bought:<id>`: hash of the users who bought the voucher, each with the id
    /// of their order (so a second grab can answer it). Earlier versions kept a plain set under
    /// `…:buyers:<id>`; the new name means such a leftover is never read as this hash.
    pub fn seckill_buyers(&self, shard: u32, voucher_id: i64) -> String {
        format!("{}seckill:{{s{shard}}}:bought:{voucher_id}", self.prefix)
    }

    /// The shard of bucket `bucket` of a voucher ([`crate::domain::StockBuckets`]): bucket 0 is
    /// on the voucher's own shard, the others on the shards after it in turn, so that with at
    /// least as many shards as buckets each bucket has a slot (and a stream) of its own.
    pub fn seckill_bucket_shard(voucher_id: i64, bucket: u32, shards: u32) -> u32 {
        let shards = shards.max(1);
        (Self::seckill_shard(voucher_id, shards) + bucket % shards) % shards
    }

    /// Bucket `bucket`'s voucher hash: bucket 0 is the one-key layout's
    /// [`Keys::seckill_voucher`], bucket `b` above it `seckill:{s<k>}:voucher:<id>:b<b>`.
    pub fn seckill_bucket(&self, shard: u32, voucher_id: i64, bucket: u32) -> String {
        let hash = self.seckill_voucher(shard, voucher_id);
        match bucket {
            0 => hash,
            b => format!("{hash}:b{b}"),
        }
    }

    /// Bucket `bucket`'s buyers hash (the users whose home it is): bucket 0's is
    /// [`Keys::seckill_buyers`], bucket `b`'s `seckill:{s<k>}:bought:<id>:b<b>`.
    pub fn seckill_bucket_buyers(&self, shard: u32, voucher_id: i64, bucket: u32) -> String {
        let buyers = self.seckill_buyers(shard, voucher_id);
        match bucket {
            0 => buyers,
            b => format!("{buyers}:b{b}"),
        }
    }

    /// Bucket `bucket`'s released set (bucket 0's is [`Keys::seckill_released`]).
    pub fn seckill_bucket_released(&self, shard: u32, voucher_id: i64, bucket: u32) -> String {
        slot_mate(&self.seckill_bucket(shard, voucher_id, bucket), "released")
    }

    /// `…:claims`: a sorted set of a bucket's buyer records whose unit is being borrowed from
    /// another bucket (order id, scored by when it was claimed); a slot mate of the bucket.
    pub fn seckill_bucket_claims(&self, shard: u32, voucher_id: i64, bucket: u32) -> String {
        slot_mate(&self.seckill_bucket(shard, voucher_id, bucket), "claims")
    }

    /// `…:lent`: a hash of the orders a bucket lent a unit to (order id → user id), or that it
    /// will never lend to (→ `void`, written when a stale claim is settled).
    pub fn seckill_bucket_lent(&self, shard: u32, voucher_id: i64, bucket: u32) -> String {
        slot_mate(&self.seckill_bucket(shard, voucher_id, bucket), "lent")
    }

    /// `seckill:{s<k>}:orders`: the shard's stream of accepted orders.
    pub fn seckill_stream(&self, shard: u32) -> String {
        format!("{}seckill:{{s{shard}}}:orders", self.prefix)
    }

    /// `seckill:{s<k>}:orders:dead`: orders that could not be written after many tries.
    pub fn seckill_dead_letters(&self, shard: u32) -> String {
        format!("{}seckill:{{s{shard}}}:orders:dead", self.prefix)
    }

    /// `seckill:{s<k>}:orders:failing`: first failure time and count of the shard's entries
    /// that failed to be written; a slot mate of its stream.
    pub fn seckill_failing(&self, shard: u32) -> String {
        format!("{}seckill:{{s{shard}}}:orders:failing", self.prefix)
    }

    /// `seckill:{s<k>}:voucher:<id>:gen`: the voucher's newest load generation (a counter that
    /// never goes back, see `scripts::NEXT_GENERATION`); a slot mate of the voucher hash.
    pub fn seckill_generation(&self, shard: u32, voucher_id: i64) -> String {
        slot_mate(&self.seckill_voucher(shard, voucher_id), "gen")
    }

    /// `seckill:{s<k>}:voucher:<id>:released`: the closed orders whose unit the voucher hash
    /// got back (or the load that wrote it counted), so that giving a unit back is one
    /// idempotent step (`seckill::release`); a slot mate of the voucher hash.
    pub fn seckill_released(&self, shard: u32, voucher_id: i64) -> String {
        slot_mate(&self.seckill_voucher(shard, voucher_id), "released")
    }

    /// `seckill:{s<k>}:deadlines`: the shard's unpaid orders by pay deadline (a sorted set of
    /// order ids scored in ms), added by the grab script, claimed by the closer
    /// (`order_life::deadlines`).
    pub fn seckill_deadlines(&self, shard: u32) -> String {
        format!("{}seckill:{{s{shard}}}:deadlines", self.prefix)
    }

    /// `seckill:{s<k>}:deadlines:traces`: the grab's `traceparent` of the shard's written
    /// orders that carried one (order id to traceparent), so that the close at the deadline
    /// joins the grab's trace; written by the worker only while traces are exported, removed
    /// by the closer with the deadline (`order_life::deadlines`). A slot mate of the deadlines.
    pub fn seckill_deadline_traces(&self, shard: u32) -> String {
        slot_mate(&self.seckill_deadlines(shard), "traces")
    }

    /// The pub/sub channel on which a voucher about to be (re)loaded into Redis is announced,
    /// so that every instance forgets what it remembers of the sale (`seckill::memory`).
    pub fn seckill_clear_channel(&self) -> String {
        format!("{}seckill:clear", self.prefix)
    }

    /// `seckill:clear-ack:<nonce>`: how many instances acknowledged one announcement (short-lived).
    pub fn seckill_clear_ack(&self, nonce: &str) -> String {
        format!("{}seckill:clear-ack:{nonce}", self.prefix)
    }

    /// `seckill:pending:<orderId>`: owner and voucher of an accepted order until it is written.
    pub fn seckill_pending(&self, order_id: i64) -> String {
        format!("{}seckill:pending:{order_id}", self.prefix)
    }

    /// `seckill:failed`: hash of the orders the worker gave up on (dead-lettered), order id to
    /// `user:voucher`, kept as long as the dead letters: the status query's answer once an
    /// order's pending record has expired.
    pub fn seckill_failed(&self) -> String {
        format!("{}seckill:failed", self.prefix)
    }

    /// `seckill:failed:backfilled`: set once the orders dead-lettered before `seckill:failed`
    /// existed have been copied into it (the worker does it once, at its first start).
    pub fn seckill_failed_backfilled(&self) -> String {
        format!("{}seckill:failed:backfilled", self.prefix)
    }

    /// `seckill:shards`: the shard count recorded by the first instance (no hash tag: it is
    /// read on its own).
    pub fn seckill_shards(&self) -> String {
        format!("{}seckill:shards", self.prefix)
    }

    /// The lock name (*without* the prefix: the lock client adds it and `lock:`) under which
    /// one caller loads a flash-sale voucher into Redis.
    pub fn seckill_warm_lock(voucher_id: i64) -> String {
        format!("seckill:warm:{voucher_id}")
    }

    /// `redis:promotion:<replid>:reconciled`: set once the live sales were reconciled after the
    /// Redis promotion that gave the primary replication id `replid` (short-lived: a week).
    pub fn redis_promotion_reconciled(&self, replid: &str) -> String {
        format!("{}redis:promotion:{replid}:reconciled", self.prefix)
    }

    /// The lock name (*without* the prefix) under which one instance reconciles the live sales
    /// after the Redis promotion that gave the primary replication id `replid`.
    pub fn redis_promotion_lock(replid: &str) -> String {
        format!("redis:promotion:{replid}")
    }

    /// The lock name (*without* the prefix) of a user's sync-mode order attempt.
    pub fn order_lock(user_id: i64) -> String {
        format!("order:{user_id}")
    }

    // ---- photo uploads (`uploads`) ----

    /// `upload:pending`: photos not yet used by a note nor cleaned up, scored by upload time
    /// (ms). The clean-up reads it oldest first and removes what it has decided.
    pub fn upload_pending(&self) -> String {
        format!("{}upload:pending", self.prefix)
    }

    /// `upload:{name}` (`upload:/blogs/…`): who uploaded a photo (`user`), for as long as it is
    /// kept; while it waits for the clean-up (`upload:pending`) also when it was queued (`at`,
    /// ms) and the newest note id at that moment (`after`), and it expires as a backstop. A
    /// photo its uploader made their icon has none.
    pub fn upload(&self, name: &str) -> String {
        format!("{}upload:{name}", self.prefix)
    }

    /// `upload:quota:{userId}:{yyyyMMdd}`: what one user uploaded on one day (in
    /// `HMDP_TIME_ZONE`): photos (`count`) and their bytes (`bytes`). Expires after two days.
    pub fn upload_quota(&self, user_id: i64, day: &str) -> String {
        format!("{}upload:quota:{user_id}:{day}", self.prefix)
    }

    /// The pub/sub channel on which instances tell each other to forget a session (its token)
    /// they trust from memory (`HMDP_SESSION_CACHE_MS`): a logout anywhere ends it everywhere.
    pub fn session_channel(&self) -> String {
        format!("{}session:invalidate", self.prefix)
    }

    /// The pub/sub channel on which instances tell each other to drop L1 entries.
    pub fn cache_l1_channel(&self) -> String {
        format!("{}cache:l1:invalidate", self.prefix)
    }
}

/// `s` with the characters special to Redis glob patterns escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A key that hashes to the same Redis Cluster slot as `key`, named `key` + `:` + `suffix`.
///
/// A key without a hash tag hashes as a whole, so wrapping it in braces (`{key}:suffix`) makes
/// the new key hash exactly like `key`. A key that already has a hash tag keeps it.
pub(crate) fn slot_mate(key: &str, suffix: &str) -> String {
    if hash_tag(key).is_some() {
        format!("{key}:{suffix}")
    } else {
        format!("{{{key}}}:{suffix}")
    }
}

/// The part of `key` that Redis Cluster hashes, if the key has a non-empty `{…}` tag.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    let tag = &key[open + 1..open + 1 + close];
    (!tag.is_empty()).then_some(tag)
}

/// The Redis Cluster slot (0..16384) of a key: CRC16/XMODEM of the key or its hash tag.
pub fn key_slot(key: &str) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16_xmodem(hashed.as_bytes()) % 16384
}

fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in data {
        crc ^= (b as u16) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_mate_hashes_like_its_key() {
        let mate = slot_mate("login:code:13812345678", "wrong");
        assert_eq!(mate, "{login:code:13812345678}:wrong");
        assert_eq!(key_slot(&mate), key_slot("login:code:13812345678"));
    }

    #[test]
    fn key_slot_matches_the_cluster_specification() {
        // Reference values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        // An empty tag does not count: the whole key is hashed.
        assert_eq!(hash_tag("foo{}{bar}"), None);
    }

    #[test]
    fn like_set_keys_are_matched_and_parsed_under_the_prefix() {
        let keys = Keys::new("a*b:");
        assert_eq!(keys.blog_liked_pattern(), "a\\*b:blog:liked:*");
        assert_eq!(keys.blog_liked_id(&keys.blog_liked(42)), Some(42));
        assert_eq!(keys.blog_liked_id("a*b:blog:liked:x"), None);
        assert_eq!(keys.blog_liked_id("a*b:blog:liked:0"), None);
        assert_eq!(keys.blog_liked_id("other:blog:liked:42"), None);
    }

    #[test]
    fn slot_mates_share_the_slot_of_their_key() {
        let keys = Keys::new("t1:");
        let code = keys.login_code("13812345678");
        assert_eq!(code, "t1:login:code:13812345678");
        for mate in [
            keys.login_code_live("13812345678"),
            keys.login_code_wrong("13812345678"),
            keys.login_code_cooldown("13812345678"),
            keys.login_code_daily("13812345678"),
            keys.login_code_daily_ip("13812345678"),
        ] {
            assert_eq!(key_slot(&mate), key_slot(&code), "{mate}");
            assert_ne!(mate, code);
        }
        let tagged = "seckill:{v:1}:stock";
        assert_eq!(slot_mate(tagged, "x"), "seckill:{v:1}:stock:x");
        assert_eq!(key_slot(&slot_mate(tagged, "x")), key_slot(tagged));
    }

    #[test]
    fn a_shards_flash_sale_keys_share_one_slot() {
        let keys = Keys::new("p:");
        for voucher in [1_i64, 2, 17, 1000] {
            let shard = Keys::seckill_shard(voucher, 4);
            let slot = key_slot(&keys.seckill_stream(shard));
            assert_eq!(key_slot(&keys.seckill_voucher(shard, voucher)), slot);
            assert_eq!(key_slot(&keys.seckill_buyers(shard, voucher)), slot);
            assert_eq!(key_slot(&keys.seckill_dead_letters(shard)), slot);
            assert_eq!(key_slot(&keys.seckill_failing(shard)), slot);
            assert_eq!(key_slot(&keys.seckill_generation(shard, voucher)), slot);
            assert_eq!(key_slot(&keys.seckill_deadlines(shard)), slot);
            assert_eq!(key_slot(&keys.seckill_deadline_traces(shard)), slot);
        }
        assert_ne!(
            key_slot(&keys.seckill_stream(0)),
            key_slot(&keys.seckill_stream(1)),
            "shards spread over slots"
        );
        assert_eq!(Keys::seckill_shard(7, 1), 0);
        assert_eq!(Keys::seckill_shard(7, 4), 3);
    }

    #[test]
    fn keys_keep_the_original_names_after_the_prefix() {
        let keys = Keys::new("");
        assert_eq!(keys.login_code("13812345678"), "login:code:13812345678");
        assert_eq!(
            keys.login_token("0123456789abcdef0123456789abcdef"),
            "login:token:0123456789abcdef0123456789abcdef"
        );
        let keys = Keys::new("p:");
        assert_eq!(keys.seckill_failing(3), "p:seckill:{s3}:orders:failing");
        assert_eq!(
            keys.seckill_deadline_traces(3),
            "p:seckill:{s3}:deadlines:traces"
        );
        assert_eq!(keys.seckill_shards(), "p:seckill:shards");
    }
}

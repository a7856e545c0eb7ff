//! Refusals from memory: most answers of a sale are "sold out" or "you already bought", and
//! neither needs Redis once this instance has heard it from the grab script.
//!
//! The iron rule: never refuse a grab the script would accept. Stock only comes back by a
//! (re)load of the voucher hash, and every load goes through [`Seckill::announce_load`]: it
//! takes a new *generation* (above all earlier ones), PUBLISHes it, waits (bounded) until every
//! subscribed instance has acknowledged it, and only then writes the hash with that generation.
//! An instance that hears it raises the voucher's cleared generation, and honours a remembered
//! answer only if it came from a hash of at least that generation. So (1) after the load every
//! instance already ignores the old answers, and (2) an old answer still in flight when the
//! announcement arrived is ignored when it lands (its generation is older). Memory is honoured
//! only while the subscription is up and since the same subscription as the answer's request:
//! a lost subscription may have missed announcements. A short TTL bounds what a missed
//! announcement (an acknowledgement timeout) can cost.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use hmdp_lock::{ChannelSubscription, Gap, PubSubSource};

use super::{Seckill, SeckillError, scripts};
use crate::{
    domain::VoucherId,
    kv::{Keys, RedisConn},
};

/// How long a sold-out answer is reused: the bound on a wrong refusal should an announcement
/// be missed, yet long enough that a sale's flood of refusals mostly skips Redis.
const SOLD_OUT_TTL: Duration = Duration::from_secs(1);
/// How long a buyer is remembered (a buyer stays one unless a reload forgets them, which
/// announces itself; the TTL bounds a missed announcement).
const BUYER_TTL: Duration = Duration::from_secs(10);
/// Buyers remembered at most.
const BUYER_CAPACITY: usize = 50_000;
/// How long a load waits for every instance to acknowledge its announcement.
const ACK_WAIT: Duration = Duration::from_millis(500);
/// How long an acknowledgement counter lives in Redis.
const ACK_KEY_TTL: Duration = Duration::from_secs(10);
/// Sold-out flags kept before expired ones are swept.
const SWEEP_ABOVE: usize = 1024;

/// A request's view of the subscription when it was sent: its answer is remembered only if the
/// subscription has not been lost since.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ticket(u64);

/// What this instance remembers of its sales.
pub(super) struct SaleMemory {
    state: Mutex<State>,
    /// `(voucher, user)` → what the script said about that buyer.
    buyers: Ids<Remembered, (i64, i64)>,
}

/// A bounded map of ids read by every grab: `quick_cache`, whose reads record nothing, rather
/// than moka, whose reads queue themselves for its LRU; and foldhash rather than SipHash, which
/// took a sixth of the grab decision's CPU (perf, the buying grab's profile): the keys are ids this service hands
/// out. Lifetimes are the values' own (`until`), checked when read.
pub(super) type Ids<V, K = i64> =
    quick_cache::sync::Cache<K, V, quick_cache::UnitWeighter, foldhash::fast::RandomState>;

/// An empty [`Ids`] of `capacity` entries.
pub(super) fn ids<K: Eq + std::hash::Hash, V: Clone>(capacity: usize) -> Ids<V, K> {
    quick_cache::sync::Cache::with(
        capacity,
        capacity as u64,
        quick_cache::UnitWeighter,
        foldhash::fast::RandomState::default(),
        quick_cache::sync::DefaultLifecycle::default(),
    )
}

#[derive(Default)]
struct State {
    /// Counts subscriptions and their losses: an answer is honoured only in the epoch its
    /// request was sent in.
    epoch: u64,
    subscribed: bool,
    /// The newest generation announced for each voucher (one entry per voucher reloaded while
    /// the process runs: vouchers are few).
    cleared: HashMap<i64, u64>,
    sold_out: HashMap<i64, Remembered>,
}

#[derive(Debug, Clone, Copy)]
struct Remembered {
    /// The order id for a buyer; unused for a sold-out flag.
    order: i64,
    generation: u64,
    epoch: u64,
    until: Instant,
}

impl State {
    fn honours(&self, voucher: i64, r: &Remembered, now: Instant) -> bool {
        self.subscribed
            && r.epoch == self.epoch
            && now < r.until
            && r.generation >= self.cleared.get(&voucher).copied().unwrap_or(0)
    }
}

impl SaleMemory {
    pub(super) fn new() -> Self {
        Self {
            state: Mutex::default(),
            buyers: ids(BUYER_CAPACITY),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Taken before a grab runs the script; `None` while not subscribed.
    pub(super) fn ticket(&self) -> Option<Ticket> {
        let s = self.state();
        s.subscribed.then_some(Ticket(s.epoch))
    }

    pub(super) fn sold_out(&self, voucher: i64) -> bool {
        let s = self.state();
        s.sold_out
            .get(&voucher)
            .is_some_and(|r| s.honours(voucher, r, Instant::now()))
    }

    pub(super) fn remember_sold_out(&self, voucher: i64, generation: u64, ticket: Ticket) {
        let now = Instant::now();
        let mut s = self.state();
        if s.sold_out.len() >= SWEEP_ABOVE {
            s.sold_out.retain(|_, r| now < r.until);
        }
        s.sold_out.insert(
            voucher,
            Remembered {
                order: 0,
                generation,
                epoch: ticket.0,
                until: now + SOLD_OUT_TTL,
            },
        );
    }

    /// The order of a buyer this instance remembers.
    pub(super) fn bought(&self, voucher: i64, user: i64) -> Option<i64> {
        let r = self.buyers.get(&(voucher, user))?;
        self.state()
            .honours(voucher, &r, Instant::now())
            .then_some(r.order)
    }

    pub(super) fn remember_buyer(
        &self,
        voucher: i64,
        user: i64,
        order: i64,
        generation: u64,
        ticket: Ticket,
    ) {
        let r = Remembered {
            order,
            generation,
            epoch: ticket.0,
            until: Instant::now() + BUYER_TTL,
        };
        self.buyers.insert((voucher, user), r);
    }

    /// A load of `voucher` with `generation` is coming: forget every older answer.
    pub(super) fn clear(&self, voucher: i64, generation: u64) {
        let mut s = self.state();
        let cleared = s.cleared.entry(voucher).or_default();
        *cleared = (*cleared).max(generation);
        s.sold_out.remove(&voucher);
    }

    fn subscribed(&self) {
        let mut s = self.state();
        s.epoch += 1;
        s.subscribed = true;
        s.sold_out.clear();
    }

    fn lost(&self) {
        let mut s = self.state();
        s.epoch += 1;
        s.subscribed = false;
        s.sold_out.clear();
        self.buyers.clear();
    }
}

/// Aborts the subscriber when the last clone of the service is dropped.
pub(super) struct ListenerGuard(tokio::task::JoinHandle<()>);

impl Drop for ListenerGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An announcement: `<voucher> <generation> <nonce>`.
fn parse(payload: &str) -> Option<(i64, u64, &str)> {
    let mut parts = payload.split(' ');
    let voucher = parts.next()?.parse().ok()?;
    let generation = parts.next()?.parse().ok()?;
    let nonce = parts.next()?;
    Some((voucher, generation, nonce))
}

impl Seckill {
    /// Starts answering refusals from memory: subscribes to the load announcements (before
    /// returning, so none published afterwards is missed) and keeps a task listening.
    /// `subscriber` opens the subscription, again after each loss (on a cluster, on any node:
    /// PUBLISH reaches every node; on Sentinel, on the primary of the moment).
    pub async fn remember_refusals(
        &mut self,
        subscriber: impl PubSubSource,
    ) -> redis::RedisResult<()> {
        let channel = self.keys.seckill_clear_channel();
        let sub = ChannelSubscription::open(subscriber, channel).await?;
        let memory = Arc::new(SaleMemory::new());
        memory.subscribed();
        let task = tokio::spawn(listen(
            sub,
            memory.clone(),
            self.redis.clone(),
            self.keys.clone(),
        ));
        self.memory = Some(memory);
        self.listener = Some(Arc::new(ListenerGuard(task)));
        Ok(())
    }

    /// Announces to every instance that `voucher` is about to be loaded with a new generation,
    /// and waits (at most [`ACK_WAIT`]) until each subscribed instance has acknowledged it.
    /// Call it before writing the hash; it returns the generation to write.
    pub(super) async fn announce_load(
        &self,
        voucher: VoucherId,
        shard: u32,
    ) -> Result<u64, SeckillError> {
        let mut redis = self.redis.clone();
        let generation: u64 = scripts::NEXT_GENERATION
            .key(self.keys.seckill_generation(shard, voucher.get()))
            .invoke_async(&mut redis)
            .await?;
        if let Some(memory) = &self.memory {
            memory.clear(voucher.get(), generation);
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let message = format!("{} {generation} {nonce}", voucher.get());
        let publish = redis::cmd("PUBLISH")
            .arg(self.keys.seckill_clear_channel())
            .arg(&message)
            .clone();
        // On a cluster, PUBLISH counts only the subscribers of the node it ran on: publish on
        // the node the instances subscribe through.
        let receivers: i64 = match &self.publisher {
            Some(p) => match publish.query_async(&mut p.conn().await?).await {
                Ok(n) => n,
                // Broken since its last use (Redis restarted, say): the manager reconnects for
                // the next command, so one more try tells an outage from a stale connection.
                Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                    publish.query_async(&mut p.conn().await?).await?
                }
                Err(e) => return Err(e.into()),
            },
            None => publish.query_async(&mut redis).await?,
        };
        if receivers <= 0 {
            return Ok(generation);
        }
        let ack = self.keys.seckill_clear_ack(&nonce);
        let deadline = Instant::now() + ACK_WAIT;
        loop {
            let acked: Option<i64> = redis::cmd("GET").arg(&ack).query_async(&mut redis).await?;
            if acked.unwrap_or(0) >= receivers {
                return Ok(generation);
            }
            if Instant::now() >= deadline {
                self.stats.clear_ack_timeouts.inc();
                tracing::warn!(
                    voucher = voucher.get(),
                    receivers,
                    acked = acked.unwrap_or(0),
                    "not every instance acknowledged the reload of a flash-sale voucher in time; \
                     one may refuse it as sold out for up to a second"
                );
                return Ok(generation);
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// A plain client of the node the instances subscribe through, for announcements.
pub(super) struct Publisher {
    client: redis::Client,
    conn: tokio::sync::OnceCell<redis::aio::ConnectionManager>,
}

impl Publisher {
    pub(super) fn new(client: redis::Client) -> Self {
        Self {
            client,
            conn: tokio::sync::OnceCell::new(),
        }
    }

    /// A reconnecting connection, made on first use.
    async fn conn(&self) -> redis::RedisResult<redis::aio::ConnectionManager> {
        let conn = self
            .conn
            .get_or_try_init(|| redis::aio::ConnectionManager::new(self.client.clone()))
            .await?;
        Ok(conn.clone())
    }
}

/// Clears what each announcement on the subscription's channel names and acknowledges it;
/// forgets everything at each gap (an announcement may have been missed in it).
async fn listen(
    mut sub: ChannelSubscription,
    memory: Arc<SaleMemory>,
    redis: RedisConn,
    keys: Keys,
) {
    loop {
        let msg = match sub.next().await {
            Ok(msg) => msg,
            Err(gap) => {
                memory.lost();
                let channel = sub.channel();
                match gap {
                    Gap::Moved => {
                        tracing::info!(%channel, "the Redis primary moved; forgot every remembered refusal, the announcement subscription follows it")
                    }
                    Gap::Lost => {
                        tracing::warn!(%channel, "flash-sale announcement subscription lost; forgot every remembered refusal, reconnecting")
                    }
                }
                sub.reopen(gap).await;
                memory.subscribed();
                continue;
            }
        };
        let Ok(payload) = msg.get_payload::<String>() else {
            continue;
        };
        let Some((voucher, generation, nonce)) = parse(&payload) else {
            tracing::warn!(%payload, "unreadable flash-sale load announcement");
            continue;
        };
        memory.clear(voucher, generation);
        let ack = keys.seckill_clear_ack(nonce);
        let acked: redis::RedisResult<()> = redis::pipe()
            .incr(&ack, 1)
            .ignore()
            .pexpire(&ack, ACK_KEY_TTL.as_millis() as i64)
            .ignore()
            .query_async(&mut redis.clone())
            .await;
        if let Err(e) = acked {
            tracing::warn!(voucher, error = %e, "could not acknowledge a flash-sale load announcement");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_older_than_the_newest_announcement_is_ignored() {
        let m = SaleMemory::new();
        m.subscribed();
        let t = m.ticket().unwrap();
        m.remember_sold_out(1, 5, t);
        m.remember_buyer(1, 7, 70, 5, t);
        assert!(m.sold_out(1));
        assert_eq!(m.bought(1, 7), Some(70));
        // Generation 6 announced; an answer of generation 5 lands afterwards.
        m.clear(1, 6);
        m.remember_sold_out(1, 5, t);
        assert!(!m.sold_out(1));
        assert_eq!(m.bought(1, 7), None);
        // Answers of the new hash count; an older announcement arriving late lowers nothing.
        m.remember_sold_out(1, 6, t);
        m.clear(1, 4);
        m.remember_sold_out(1, 6, t);
        assert!(m.sold_out(1));
        assert!(!m.sold_out(2));
    }

    #[test]
    fn nothing_is_honoured_across_a_lost_subscription() {
        let m = SaleMemory::new();
        assert!(m.ticket().is_none(), "not subscribed yet");
        m.subscribed();
        let before = m.ticket().unwrap();
        m.lost();
        assert!(m.ticket().is_none());
        m.subscribed();
        // The answer of a request sent before the loss lands after the new subscription.
        m.remember_sold_out(1, 1, before);
        m.remember_buyer(1, 7, 70, 1, before);
        assert!(!m.sold_out(1));
        assert_eq!(m.bought(1, 7), None);
        let now = m.ticket().unwrap();
        m.remember_sold_out(1, 1, now);
        assert!(m.sold_out(1));
    }

    #[test]
    fn announcements_parse() {
        assert_eq!(parse("12 345 abc"), Some((12, 345, "abc")));
        assert_eq!(parse("12 x abc"), None);
        assert_eq!(parse("12 3"), None);
    }
}

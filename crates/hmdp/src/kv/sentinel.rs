//! Redis Sentinel: one primary with replicas, whose address changes when the Sentinels promote
//! a replica.
//!
//! [`SentinelPrimary`] knows the primary of the moment. It is found through the Sentinels at
//! start, and again whenever they name another address: every configured Sentinel is asked
//! `get-master-addr-by-name` at once, an address is taken only when a majority of the configured
//! Sentinels name it (see [`verdict`]: one wrong or hostile Sentinel cannot move this process),
//! and only once that node answers `ROLE` as a master. One background task per process does every
//! lookup (so a storm of failing commands costs one lookup, not one each): every [`POLL`], and at
//! once when a command reports a failure that may mean "no longer the primary". Each move raises an epoch that every
//! connection compares with its own, so commands, scripts, the replica waits and the worker's
//! blocking reads reconnect to the new primary on their next use, even when nothing failed.
//! Pub/sub subscribers follow through [`hmdp_lock::PubSubSource`]: the Sentinels close the
//! demoted primary's client connections, and a subscriber that reconnects asks for the primary
//! of the moment.
//!
//! A command is never sent twice here: one that failed with an I/O error or a timeout may have
//! run (a grab script may have taken stock), so its caller sees the error and decides.
//!
//! A failover is also heard as it starts: every Sentinel's `+try-failover` is subscribed to.
//! From then until the primary moved, [`SentinelPrimary::failing_over`] is true and the writes
//! that must survive a promotion (grabs waiting for replicas, `kv::replicas`) are refused. The
//! old primary keeps taking writes until it is demoted, and a replica still following it would
//! confirm them: in a planned failover (`SENTINEL FAILOVER`) such a write is acknowledged and
//! then lost with the old primary's data. One configured Sentinel's announcement is enough:
//! only the Sentinel that tries to lead a failover announces it, so asking for several would
//! miss every real one, and its effect is on the safe side (those grabs answer 503 for at most
//! [`FAILOVER_HOLD`] per announcement). Only a Sentinel that announced the failover can give it
//! up: another one's abort (one that lost the election, or a hostile one) does not end the hold.

use std::{
    fmt,
    sync::{
        Arc, Mutex, RwLock, Weak,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures_util::{StreamExt, future::join_all};
use prometheus_client::metrics::counter::Counter;
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError,
    RedisFuture, RedisResult, Role, ServerErrorKind, Value,
    aio::{ConnectionLike, MultiplexedConnection},
};
use tokio::sync::{Notify, watch};

use crate::config::{Secret, SentinelSpec};

/// How often the Sentinels are asked whether the primary moved.
const POLL: Duration = Duration::from_millis(500);
/// The shortest pause between two lookups, however many failures ask for one.
const MIN_PAUSE: Duration = Duration::from_millis(100);
/// How long one lookup (the Sentinels, then the named primary's `ROLE`) may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one question to one Sentinel may take.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(500);
/// The longest a failover announced by a Sentinel holds the replicated writes back without the
/// primary moving (the Sentinels may give up without saying so to this process). After it, such
/// writes go to the old primary again; its replicas are being moved away, so they are mostly
/// answered `not_replicated` rather than lost.
const FAILOVER_HOLD: Duration = Duration::from_secs(10);
/// How long a lost subscription to a Sentinel's announcements waits before it is made again.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_secs(1);
/// The Sentinel channels listened to: a failover starts, the primary moved.
const TRY_FAILOVER: &str = "+try-failover";
const SWITCH_MASTER: &str = "+switch-master";
/// A failover given up (`-failover-abort-not-elected`, `-failover-abort-no-good-slave`, …).
const ABORTED: &str = "-failover-abort-*";

/// The primary of the moment, as the Sentinels name it. Cheap to clone; clones share one
/// watcher, which stops when the last clone is dropped.
#[derive(Clone)]
pub struct SentinelPrimary {
    inner: Arc<Inner>,
}

struct Inner {
    spec: SentinelSpec,
    /// A connection to each configured Sentinel, kept between lookups (made again after a
    /// failure); the lock makes one lookup at a time.
    asked: tokio::sync::Mutex<Vec<Option<MultiplexedConnection>>>,
    current: RwLock<Current>,
    /// Raised at each move of the primary.
    epoch: watch::Sender<u64>,
    /// Asks the watcher to look now.
    suspect: Arc<Notify>,
    /// The failover a Sentinel announced and that has not moved the primary yet.
    failover: Mutex<Option<Announced>>,
    /// Failovers announced by a Sentinel (`hmdp_redis_failovers_announced_total`).
    announced: Counter,
}

/// A failover under way: announced while the primary was at `epoch` by the Sentinels `by`
/// (their indexes in the configured list), held until `until`.
struct Announced {
    epoch: u64,
    until: Instant,
    by: Vec<usize>,
}

#[derive(Clone)]
struct Current {
    addr: (String, u16),
    client: redis::Client,
}

impl fmt::Debug for SentinelPrimary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SentinelPrimary")
            .field("master", &self.inner.spec.master)
            .field("sentinels", &self.inner.spec.sentinels.to_string())
            .field("primary", &self.address())
            .finish()
    }
}

impl SentinelPrimary {
    /// Asks the Sentinels for the primary of `spec.master` and starts watching it.
    /// Fails when no Sentinel answers, none knows the name, no majority of the configured
    /// Sentinels names one address, or the node named is not a reachable primary.
    pub async fn discover(spec: SentinelSpec) -> RedisResult<Self> {
        let configured = spec.sentinels.addrs().len();
        let mut asked = vec![None; configured];
        let lookup = async {
            let answers = ask_sentinels(&spec, &mut asked).await;
            let addr = match verdict(configured, &answers) {
                Verdict::Agreed(addr) => addr,
                Verdict::Unknown => {
                    return Err(RedisError::from((
                        ErrorKind::MasterNameNotFoundBySentinel,
                        "no Sentinel knows a master by that name",
                        format!(
                            "master `{}` at Sentinels {} (check HMDP_REDIS_SENTINEL_MASTER)",
                            spec.master, spec.sentinels
                        ),
                    )));
                }
                Verdict::Undecided { answered, agreeing } => {
                    return Err(RedisError::from((
                        ErrorKind::Io,
                        "no majority of the configured Sentinels names one primary",
                        format!(
                            "{answered} of the {configured} Sentinels {} answered, at most \
                             {agreeing} naming the same primary of `{}`; {} must agree",
                            spec.sentinels,
                            spec.master,
                            majority(configured)
                        ),
                    )));
                }
            };
            let client = confirmed_primary(&spec, &addr).await?;
            Ok((addr, client))
        };
        let (addr, client) = match tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await {
            Ok(found) => found?,
            Err(_) => {
                return Err(RedisError::from((
                    ErrorKind::Io,
                    "the Sentinels did not name a primary in time",
                    spec.sentinels.to_string(),
                )));
            }
        };
        let suspect = Arc::new(Notify::new());
        let inner = Arc::new(Inner {
            spec,
            asked: tokio::sync::Mutex::new(asked),
            current: RwLock::new(Current { addr, client }),
            epoch: watch::Sender::new(0),
            suspect: suspect.clone(),
            failover: Mutex::new(None),
            announced: Counter::default(),
        });
        tokio::spawn(watch_primary(Arc::downgrade(&inner), suspect));
        for i in 0..inner.spec.sentinels.addrs().len() {
            tokio::spawn(hear_announcements(Arc::downgrade(&inner), i));
        }
        Ok(Self { inner })
    }

    /// A client of the primary of the moment.
    pub fn client(&self) -> redis::Client {
        self.current().client
    }

    /// `host:port` of the primary of the moment.
    pub fn address(&self) -> String {
        let (host, port) = self.current().addr;
        format!("{host}:{port}")
    }

    /// How many times the primary moved since this process found it.
    pub fn epoch(&self) -> u64 {
        *self.inner.epoch.borrow()
    }

    /// Told each time the primary moves (the value is [`Self::epoch`]).
    pub fn moves(&self) -> watch::Receiver<u64> {
        self.inner.epoch.subscribe()
    }

    /// The configured master name and Sentinels, for messages.
    pub fn spec(&self) -> &SentinelSpec {
        &self.inner.spec
    }

    /// Whether a Sentinel announced a failover that has not moved the primary yet (and has not
    /// been given up): writes sent now may land on a primary about to be demoted.
    pub fn failing_over(&self) -> bool {
        let epoch = self.epoch();
        self.inner
            .failover
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|f| f.epoch == epoch && Instant::now() < f.until)
    }

    /// Counts the failovers announced by a Sentinel: a write confirmed while this changed may
    /// have been confirmed by a replica that is not the one promoted.
    pub fn failovers_announced(&self) -> &Counter {
        &self.inner.announced
    }

    /// Something failed in a way that may mean the primary moved: look again now.
    pub fn suspect(&self) {
        self.inner.suspect.notify_one();
    }

    fn current(&self) -> Current {
        self.inner
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// What the Sentinels asked at once say of the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Verdict {
    /// A majority of the configured Sentinels name this address.
    Agreed((String, u16)),
    /// Every Sentinel that answered knows no master by the configured name.
    Unknown,
    /// No address has a majority: too few Sentinels answered, or they disagree.
    Undecided { answered: usize, agreeing: usize },
}

/// A strict majority of `configured` Sentinels: 1 of 1, 2 of 3, 3 of 5.
fn majority(configured: usize) -> usize {
    configured / 2 + 1
}

/// The primary named by the Sentinels that answered (`answers`: one entry each, `None` when it
/// knows no master by the name), out of `configured`.
///
/// An address is taken when a strict majority of the *configured* Sentinels name it, not a
/// majority of those that answered. That is the Sentinels' own rule: a failover is led only by
/// a Sentinel elected by a majority of all of them, so a promotion they really made is soon
/// named by a majority (the others learn it within their hello period, ~2 s). One Sentinel down
/// of three leaves two that must agree, so the primary is still found and followed. With two of
/// three down the Sentinels cannot fail over either, so the primary has not legitimately moved:
/// this process stays where it is (and a start fails rather than trust one Sentinel). Counting
/// only those that answered would hand the decision to a lone wrong or hostile Sentinel exactly
/// when the others are slow or cut off, which is when it would be tried.
fn verdict(configured: usize, answers: &[Option<(String, u16)>]) -> Verdict {
    let mut counts: Vec<(&(String, u16), usize)> = Vec::new();
    for addr in answers.iter().flatten() {
        match counts.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, n)) => *n += 1,
            None => counts.push((addr, 1)),
        }
    }
    if let Some((addr, _)) = counts.iter().find(|(_, n)| *n >= majority(configured)) {
        return Verdict::Agreed((*addr).clone());
    }
    if !answers.is_empty() && counts.is_empty() {
        return Verdict::Unknown;
    }
    Verdict::Undecided {
        answered: answers.len(),
        agreeing: counts.iter().map(|(_, n)| *n).max().unwrap_or(0),
    }
}

/// Asks every configured Sentinel at once for the primary's address, each within
/// [`SENTINEL_TIMEOUT`], on the connections in `conns` (one per Sentinel, made when missing,
/// dropped after a failure): the answers of those that answered.
async fn ask_sentinels(
    spec: &SentinelSpec,
    conns: &mut [Option<MultiplexedConnection>],
) -> Vec<Option<(String, u16)>> {
    let asked = conns.iter_mut().enumerate().map(|(i, slot)| async move {
        let mut conn = match slot.take() {
            Some(conn) => conn,
            None => connect_sentinel(spec, i).await.ok()?,
        };
        let mut cmd = redis::cmd("SENTINEL");
        cmd.arg("get-master-addr-by-name").arg(&spec.master);
        let asked = cmd.query_async::<Option<(String, u16)>>(&mut conn);
        let named = tokio::time::timeout(SENTINEL_TIMEOUT, asked)
            .await
            .ok()?
            .ok()?;
        *slot = Some(conn);
        Some(named)
    });
    join_all(asked).await.into_iter().flatten().collect()
}

/// A client of the `i`-th Sentinel, with the Sentinels' password.
fn sentinel_client(spec: &SentinelSpec, i: usize) -> RedisResult<redis::Client> {
    let (host, port) = &spec.sentinels.addrs()[i];
    client_with(host, *port, spec.sentinel_password.as_ref())
}

async fn connect_sentinel(spec: &SentinelSpec, i: usize) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(SENTINEL_TIMEOUT))
        .set_response_timeout(Some(SENTINEL_TIMEOUT));
    sentinel_client(spec, i)?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

fn client_with(host: &str, port: u16, password: Option<&Secret>) -> RedisResult<redis::Client> {
    let mut info = ConnectionAddr::Tcp(host.to_owned(), port).into_connection_info()?;
    if let Some(password) = password {
        let settings = info
            .redis_settings()
            .clone()
            .set_password(password.expose());
        info = info.set_redis_settings(settings);
    }
    redis::Client::open(info)
}

/// A client of the data node at `addr`, once it answered `ROLE` as a master.
async fn confirmed_primary(
    spec: &SentinelSpec,
    addr: &(String, u16),
) -> RedisResult<redis::Client> {
    let client = client_with(&addr.0, addr.1, spec.password.as_ref())?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(SENTINEL_TIMEOUT))
        .set_response_timeout(Some(SENTINEL_TIMEOUT));
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    match redis::cmd("ROLE").query_async::<Role>(&mut conn).await? {
        Role::Primary { .. } => Ok(client),
        _ => Err(RedisError::from((
            ErrorKind::MasterNameNotFoundBySentinel,
            "the node the Sentinels name is not a primary",
            format!("{}:{} (master `{}`)", addr.0, addr.1, spec.master),
        ))),
    }
}

/// Whether a failed command may mean the primary moved (or died): the connection broke or
/// timed out, or the node refuses writes because it is a replica now. Not
/// `hmdp_lock::is_unavailable`: that asks whether to answer "try again later", this whether to
/// look the primary up again, so `READONLY` and a broken connection's parse errors count here.
pub(crate) fn may_have_moved(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
        || e.kind() == ErrorKind::Server(ServerErrorKind::MasterDown)
}

impl Inner {
    fn addr(&self) -> (String, u16) {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .addr
            .clone()
    }

    /// The `i`-th configured Sentinel said something of a failover of this master.
    fn announcement(&self, i: usize, channel: &str, payload: &str) {
        // `+try-failover` and the aborts name the master as `master <name> <ip> <port>`;
        // `+switch-master` as `<name> <old ip> <old port> <new ip> <new port>`.
        let mut words = payload.split_whitespace();
        let name = if channel == SWITCH_MASTER {
            words.next()
        } else {
            words.nth(1)
        };
        if name != Some(self.spec.master.as_str()) {
            return;
        }
        let epoch = *self.epoch.borrow();
        let mut failover = self.failover.lock().unwrap_or_else(|e| e.into_inner());
        match channel {
            TRY_FAILOVER => {
                let mut by = match failover.take() {
                    Some(f) if f.epoch == epoch => f.by,
                    _ => Vec::new(),
                };
                let fresh = by.is_empty();
                if !by.contains(&i) {
                    by.push(i);
                }
                *failover = Some(Announced {
                    epoch,
                    until: Instant::now() + FAILOVER_HOLD,
                    by,
                });
                drop(failover);
                if fresh {
                    self.announced.inc();
                    tracing::warn!(
                        master = %self.spec.master,
                        "a Sentinel started a failover; grabs that wait for replicas are refused \
                         (503) until the new primary is found"
                    );
                }
            }
            SWITCH_MASTER => {
                drop(failover);
                self.suspect.notify_one();
            }
            _ => {
                let Some(f) = failover.as_mut().filter(|f| f.by.contains(&i)) else {
                    return;
                };
                f.by.retain(|j| *j != i);
                if f.by.is_empty() {
                    *failover = None;
                    tracing::warn!(master = %self.spec.master, event = channel, "the Sentinels gave the failover up");
                }
            }
        }
    }

    /// Asks the Sentinels and, if a majority of them names another node that answers as a
    /// master, moves to it. Returns the addresses named by a minority against the current one
    /// (a Sentinel that disagrees, or one that learnt of a promotion before the others).
    async fn look(&self) -> Vec<(String, u16)> {
        let mut asked = self.asked.lock().await;
        let answers = ask_sentinels(&self.spec, &mut asked).await;
        let current = self.addr();
        let addr = match verdict(asked.len(), &answers) {
            Verdict::Agreed(addr) if addr == current => return Vec::new(),
            Verdict::Agreed(addr) => addr,
            Verdict::Unknown | Verdict::Undecided { .. } => {
                let mut others: Vec<_> = answers.into_iter().flatten().collect();
                others.retain(|a| *a != current);
                others.sort();
                others.dedup();
                return others;
            }
        };
        let client = match tokio::time::timeout(
            LOOKUP_TIMEOUT,
            confirmed_primary(&self.spec, &addr),
        )
        .await
        {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "the primary the Sentinels name is not confirmed yet");
                return Vec::new();
            }
            Err(_) => {
                tracing::debug!("the primary the Sentinels name did not answer in time");
                return Vec::new();
            }
        };
        let from = {
            let mut current = self.current.write().unwrap_or_else(|e| e.into_inner());
            std::mem::replace(
                &mut *current,
                Current {
                    addr: addr.clone(),
                    client,
                },
            )
            .addr
        };
        self.epoch.send_modify(|e| *e += 1);
        tracing::warn!(
            master = %self.spec.master,
            from = %format!("{}:{}", from.0, from.1),
            to = %format!("{}:{}", addr.0, addr.1),
            "the Sentinels promoted another Redis primary; every connection moves to it"
        );
        Vec::new()
    }
}

/// Listens to the announcements of the `i`-th Sentinel for as long as the primary is watched.
async fn hear_announcements(inner: Weak<Inner>, i: usize) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let subscribed = async {
            let mut pubsub = sentinel_client(&strong.spec, i)?.get_async_pubsub().await?;
            pubsub.subscribe(&[TRY_FAILOVER, SWITCH_MASTER]).await?;
            pubsub.psubscribe(ABORTED).await?;
            RedisResult::Ok(pubsub)
        };
        let subscribed = tokio::time::timeout(LOOKUP_TIMEOUT, subscribed).await;
        // Closed when the last handle is dropped: the subscription goes with it.
        let mut watched = strong.epoch.subscribe();
        drop(strong);
        if let Ok(Ok(pubsub)) = subscribed {
            let mut messages = pubsub.into_on_message();
            loop {
                let msg = tokio::select! {
                    msg = messages.next() => msg,
                    gone = watched.changed() => match gone {
                        Ok(()) => continue,
                        Err(_) => return,
                    },
                };
                let Some(msg) = msg else { break };
                let Some(inner) = inner.upgrade() else { return };
                if let Ok(payload) = msg.get_payload::<String>() {
                    inner.announcement(i, msg.get_channel_name(), &payload);
                }
            }
            tracing::debug!(
                sentinel = i,
                "lost the subscription to a Sentinel's announcements"
            );
        }
        tokio::time::sleep(RESUBSCRIBE_PAUSE).await;
    }
}

/// The one task that looks the primary up: every [`POLL`], or sooner when a failure asks.
async fn watch_primary(inner: Weak<Inner>, suspect: Arc<Notify>) {
    let mut dissent = Vec::new();
    loop {
        tokio::select! {
            () = suspect.notified() => {}
            () = tokio::time::sleep(POLL) => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        let others = inner.look().await;
        if others != dissent && !others.is_empty() {
            let named: Vec<String> = others.iter().map(|(h, p)| format!("{h}:{p}")).collect();
            let (host, port) = inner.addr();
            tracing::warn!(
                master = %inner.spec.master,
                primary = %format!("{host}:{port}"),
                named = %named.join(","),
                "a minority of the Sentinels names another primary: not followed until a \
                 majority of the configured Sentinels agrees"
            );
        }
        dissent = others;
        drop(inner);
        tokio::time::sleep(MIN_PAUSE).await;
    }
}

/// A multiplexed connection to the primary of the moment: made on first use, remade on the
/// next command after the primary moved or the connection failed.
#[derive(Clone)]
pub struct SentinelConn {
    primary: SentinelPrimary,
    shared: Arc<Slot>,
}

struct Slot {
    live: RwLock<Option<Live>>,
    connecting: tokio::sync::Mutex<()>,
    config: AsyncConnectionConfig,
}

#[derive(Clone)]
struct Live {
    epoch: u64,
    id: u64,
    conn: MultiplexedConnection,
}

static CONNECTION_IDS: AtomicU64 = AtomicU64::new(0);

impl SentinelConn {
    /// A connection to `primary`'s node of the moment, made now (so a start-up fails early).
    pub(crate) async fn connect(
        primary: SentinelPrimary,
        config: AsyncConnectionConfig,
    ) -> RedisResult<Self> {
        let conn = Self {
            primary,
            shared: Arc::new(Slot {
                live: RwLock::new(None),
                connecting: tokio::sync::Mutex::new(()),
                config,
            }),
        };
        conn.live().await?;
        Ok(conn)
    }

    fn current(&self) -> Option<Live> {
        let epoch = self.primary.epoch();
        self.shared
            .live
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .filter(|l| l.epoch == epoch)
            .cloned()
    }

    async fn live(&self) -> RedisResult<Live> {
        if let Some(live) = self.current() {
            return Ok(live);
        }
        let _one = self.shared.connecting.lock().await;
        if let Some(live) = self.current() {
            return Ok(live);
        }
        let epoch = self.primary.epoch();
        let client = self.primary.client();
        match client
            .get_multiplexed_async_connection_with_config(&self.shared.config)
            .await
        {
            Ok(conn) => {
                let live = Live {
                    epoch,
                    id: CONNECTION_IDS.fetch_add(1, Ordering::Relaxed),
                    conn,
                };
                *self.shared.live.write().unwrap_or_else(|e| e.into_inner()) = Some(live.clone());
                Ok(live)
            }
            Err(e) => {
                self.primary.suspect();
                Err(e)
            }
        }
    }

    /// After a failed command: a connection that may point at a dead or demoted node is
    /// dropped (the next command makes a new one) and the watcher looks again.
    fn failed(&self, live: &Live, e: &RedisError) {
        if !may_have_moved(e) {
            return;
        }
        let mut slot = self.shared.live.write().unwrap_or_else(|e| e.into_inner());
        if slot.as_ref().is_some_and(|l| l.id == live.id) {
            *slot = None;
        }
        drop(slot);
        self.primary.suspect();
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut live = self.live().await?;
            let result = live.conn.req_packed_command(cmd).await;
            if let Err(e) = &result {
                self.failed(&live, e);
            }
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut live = self.live().await?;
            let result = live.conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &result {
                self.failed(&live, e);
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A primary of `master` as if discovered, with no Sentinel behind it.
    fn watched(master: &str) -> SentinelPrimary {
        let spec = SentinelSpec {
            sentinels: "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3".parse().unwrap(),
            master: master.to_owned(),
            sentinel_password: None,
            password: None,
        };
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        SentinelPrimary {
            inner: Arc::new(Inner {
                asked: tokio::sync::Mutex::new(vec![None; 3]),
                spec,
                current: RwLock::new(Current {
                    addr: ("127.0.0.1".to_owned(), 1),
                    client,
                }),
                epoch: watch::Sender::new(0),
                suspect: Arc::new(Notify::new()),
                failover: Mutex::new(None),
                announced: Counter::default(),
            }),
        }
    }

    #[test]
    fn a_failover_holds_from_its_announcement_until_the_primary_moves_or_it_is_given_up() {
        let p = watched("hmdp");
        let about = |name: &str| format!("master {name} 127.0.0.1 6379");
        let abort = "-failover-abort-not-elected";
        assert!(!p.failing_over());
        p.inner.announcement(0, TRY_FAILOVER, &about("another"));
        assert!(!p.failing_over(), "another master's failover");
        p.inner.announcement(0, TRY_FAILOVER, &about("hmdp"));
        assert!(
            p.failing_over(),
            "one configured Sentinel's announcement holds"
        );
        p.inner.announcement(0, TRY_FAILOVER, &about("hmdp"));
        assert_eq!(
            p.failovers_announced().get(),
            1,
            "one failover, tried twice"
        );
        p.inner.announcement(0, abort, &about("another"));
        assert!(p.failing_over(), "another master's abort");
        p.inner.announcement(0, abort, &about("hmdp"));
        assert!(!p.failing_over(), "given up");

        p.inner.announcement(0, TRY_FAILOVER, &about("hmdp"));
        assert_eq!(p.failovers_announced().get(), 2);
        p.inner
            .announcement(1, SWITCH_MASTER, "hmdp 127.0.0.1 6379 127.0.0.1 6380");
        assert!(p.failing_over(), "held until this process has moved");
        p.inner.epoch.send_modify(|e| *e += 1);
        assert!(!p.failing_over(), "the primary moved");
    }

    #[test]
    fn only_a_sentinel_that_announced_a_failover_can_give_it_up() {
        let p = watched("hmdp");
        let about = "master hmdp 127.0.0.1 6379";
        let abort = "-failover-abort-not-elected";
        p.inner.announcement(0, TRY_FAILOVER, about);
        p.inner.announcement(2, abort, about);
        assert!(p.failing_over(), "a Sentinel that announced nothing");
        p.inner.announcement(1, TRY_FAILOVER, about);
        assert_eq!(
            p.failovers_announced().get(),
            1,
            "one failover, two candidates"
        );
        p.inner.announcement(0, abort, about);
        assert!(
            p.failing_over(),
            "the candidate that lost gave up, not the other one"
        );
        p.inner
            .announcement(1, "-failover-abort-no-good-slave", about);
        assert!(!p.failing_over(), "every candidate gave up");
    }

    fn at(port: u16) -> Option<(String, u16)> {
        Some(("10.0.0.1".to_owned(), port))
    }

    #[test]
    fn a_primary_is_taken_when_a_majority_of_the_configured_sentinels_names_it() {
        let agreed = |port| Verdict::Agreed(at(port).unwrap());
        // Every Sentinel, or every one but one, agrees.
        assert_eq!(verdict(3, &[at(1), at(1), at(1)]), agreed(1));
        assert_eq!(verdict(3, &[at(1), at(1)]), agreed(1), "one Sentinel down");
        assert_eq!(
            verdict(3, &[at(2), at(1), at(1)]),
            agreed(1),
            "one Sentinel lies"
        );
        assert_eq!(verdict(5, &[at(2), at(1), at(2), at(1), at(1)]), agreed(1));
        assert_eq!(
            verdict(1, &[at(1)]),
            agreed(1),
            "a lone Sentinel configured"
        );
        // One Sentinel is never enough when more are configured, whatever the others do.
        assert_eq!(
            verdict(3, &[at(2)]),
            Verdict::Undecided {
                answered: 1,
                agreeing: 1
            },
            "the only one answering"
        );
        assert_eq!(
            verdict(3, &[at(2), None]),
            Verdict::Undecided {
                answered: 2,
                agreeing: 1
            },
            "the other one knows no such master"
        );
        assert_eq!(
            verdict(3, &[at(1), at(2), at(3)]),
            Verdict::Undecided {
                answered: 3,
                agreeing: 1
            }
        );
        assert_eq!(
            verdict(4, &[at(1), at(1), at(2), at(2)]),
            Verdict::Undecided {
                answered: 4,
                agreeing: 2
            },
            "half is no majority"
        );
        assert_eq!(
            verdict(5, &[at(1), at(1)]),
            Verdict::Undecided {
                answered: 2,
                agreeing: 2
            },
            "a majority of those that answered, not of those configured"
        );
        assert_eq!(
            verdict(3, &[]),
            Verdict::Undecided {
                answered: 0,
                agreeing: 0
            }
        );
        // No Sentinel that answered knows the name: a start-up error says so.
        assert_eq!(verdict(3, &[None, None]), Verdict::Unknown);
    }
}

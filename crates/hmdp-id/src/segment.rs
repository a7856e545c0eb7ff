//! Segment mode: blocks of sequence numbers reserved with one `INCRBY`,
//! handed out from memory, with the next block prefetched in the background.
//!
//! Invariants that uniqueness rests on:
//!
//! * a block is the range `(hi - step, hi]` returned by `INCRBY day-key step`,
//!   so no other caller of that day key (either mode, any process) ever
//!   receives those numbers;
//! * a block is only ever combined with timestamps of *its own* UTC day; when
//!   the clamped clock enters a new day, blocks of the old day are dropped.
//!
//! Invariant that ordering rests on: fetches for one day are serialised (at
//! most one in flight per day), so blocks of a day arrive in increasing order
//! and are queued in arrival order.

use std::sync::{Arc, PoisonError, Weak};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};

use crate::error::{Error, Result};
use crate::generator::{IdConnection, Inner, SegmentOptions, bump};
use crate::layout::{MAX_SEQUENCE, SECONDS_PER_DAY, compose, day_key, day_number};

type FetchFuture = Shared<BoxFuture<'static, Result<()>>>;

/// A reserved run of sequence numbers of one day key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    /// Days since 1970-01-01 (UTC) of the key the block came from.
    day: i64,
    /// The next number to hand out.
    next: u64,
    /// The last number of the block (inclusive).
    last: u64,
    /// How many numbers the block had when fetched.
    len: u64,
}

impl Block {
    fn new(day: i64, first: u64, last: u64) -> Self {
        Block {
            day,
            next: first,
            last,
            len: last - first + 1,
        }
    }

    fn remaining(&self) -> u64 {
        (self.last + 1).saturating_sub(self.next)
    }

    fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
}

/// The block reserved by an `INCRBY key step` that returned `hi`, cut at
/// [`MAX_SEQUENCE`]: numbers past `2^32 - 1` are never handed out.
pub(crate) fn block_from_reply(day: i64, hi: i64, step: u32, key: &str) -> Result<Block> {
    let first = hi - i64::from(step) + 1;
    if first < 1 {
        return Err(Error::reply(format!(
            "INCRBY {key} {step} returned {hi}; the counter was changed by hand"
        )));
    }
    let first = first as u64;
    if first > MAX_SEQUENCE {
        return Err(Error::exhausted(first));
    }
    Ok(Block::new(day, first, (hi as u64).min(MAX_SEQUENCE)))
}

struct Fetch {
    epoch: u64,
    day: i64,
    done: FetchFuture,
}

/// Blocks in use and in flight. Guarded by `Inner::segment`.
#[derive(Default)]
pub(crate) struct SegmentState {
    current: Option<Block>,
    spare: Option<Block>,
    fetch: Option<Fetch>,
    epoch: u64,
}

impl SegmentState {
    /// Drops blocks that belong to a day other than `day`. Returns how many.
    fn drop_other_days(&mut self, day: i64) -> u64 {
        let mut dropped = 0;
        for slot in [&mut self.current, &mut self.spare] {
            if slot.is_some_and(|b| b.day != day) {
                if slot.is_some_and(|b| !b.is_empty()) {
                    dropped += 1;
                }
                *slot = None;
            }
        }
        dropped
    }

    /// Takes the next number, moving to the spare block when the current
    /// one is empty. Returns the number and what is left of its block.
    fn take(&mut self) -> Option<(u64, Block)> {
        loop {
            if let Some(b) = self.current.as_mut().filter(|b| !b.is_empty()) {
                let seq = b.next;
                b.next += 1;
                return Some((seq, *b));
            }
            self.current = Some(self.spare.take()?);
        }
    }

    /// Queues a freshly fetched block behind the ones already held.
    /// Returns false if both slots are full and the block was dropped.
    fn push(&mut self, block: Block) -> bool {
        if self.current.is_none_or(|b| b.is_empty()) {
            self.current = self.spare.take();
        }
        if self.current.is_none_or(|b| b.is_empty()) {
            self.current = Some(block);
            true
        } else if self.spare.is_none() {
            self.spare = Some(block);
            true
        } else {
            false
        }
    }

    fn fetch_for(&self, day: i64) -> Option<FetchFuture> {
        self.fetch
            .as_ref()
            .filter(|f| f.day == day)
            .map(|f| f.done.clone())
    }
}

fn wants_prefetch(block: &Block, fraction: f64) -> bool {
    block.remaining() as f64 <= fraction * block.len as f64
}

impl<C: IdConnection> Inner<C> {
    fn state(&self) -> std::sync::MutexGuard<'_, SegmentState> {
        self.segment.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) async fn next_segment(self: &Arc<Self>, opts: SegmentOptions) -> Result<i64> {
        loop {
            let wait = {
                let mut st = self.state();
                // Read the clock under the lock so that the order of
                // (second, sequence) pairs matches the order of issue.
                let second = self.clamped_now()?;
                let day = day_number(second);
                for _ in 0..st.drop_other_days(day) {
                    bump(&self.counters.blocks_discarded);
                }
                if let Some((seq, block)) = st.take() {
                    if st.spare.is_none()
                        && wants_prefetch(&block, opts.prefetch_fraction())
                        && st.fetch_for(day).is_none()
                    {
                        // Spawned in the background; nobody waits for it yet.
                        let _prefetch = self.start_fetch(&mut st, day, opts.step_size());
                    }
                    return compose(second, seq);
                }
                match st.fetch_for(day) {
                    Some(done) => done,
                    None => self.start_fetch(&mut st, day, opts.step_size()),
                }
            };
            // Every caller that ran dry waits on the same fetch.
            bump(&self.counters.fetch_waits);
            wait.await?;
        }
    }

    /// Starts fetching a block for `day` and records it as the fetch in
    /// flight. The fetch is spawned on the current Tokio runtime so it makes
    /// progress even if nobody awaits it (the prefetch case); waiters await
    /// the shared handle.
    fn start_fetch(self: &Arc<Self>, st: &mut SegmentState, day: i64, step: u32) -> FetchFuture {
        st.epoch += 1;
        let epoch = st.epoch;
        // A weak reference: a pending fetch must not keep a dropped
        // generator alive.
        let weak: Weak<Self> = Arc::downgrade(self);
        let done = async move {
            let Some(inner) = weak.upgrade() else {
                return Err(Error::new(
                    crate::ErrorKind::BackgroundTask,
                    "generator dropped before its block fetch ran",
                ));
            };
            let result = inner.fetch_block(day, step).await;
            inner.install(epoch, result)
        }
        .boxed()
        .shared();
        st.fetch = Some(Fetch {
            epoch,
            day,
            done: done.clone(),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(done.clone());
        }
        done
    }

    async fn fetch_block(&self, day: i64, step: u32) -> Result<Block> {
        let key = day_key(&self.key_prefix, &self.biz, day * SECONDS_PER_DAY);
        let mut conn = self.conn.clone();
        bump(&self.counters.round_trips);
        let hi: i64 = redis::cmd("INCRBY")
            .arg(&key)
            .arg(step)
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::redis(format!("INCRBY {key} {step}"), e))?;
        block_from_reply(day, hi, step, &key)
    }

    /// Records the outcome of fetch `epoch`. A block is kept only if the
    /// clamped clock is still on the block's day.
    fn install(&self, epoch: u64, result: Result<Block>) -> Result<()> {
        let mut st = self.state();
        if st.fetch.as_ref().is_some_and(|f| f.epoch == epoch) {
            st.fetch = None;
        }
        let block = match result {
            Ok(block) => block,
            Err(e) => {
                tracing::warn!(biz = %self.biz, error = %e, "id block fetch failed");
                return Err(e);
            }
        };
        let today = day_number(self.last_second.load(std::sync::atomic::Ordering::SeqCst));
        if block.day != today || !st.push(block) {
            bump(&self.counters.blocks_discarded);
            tracing::debug!(
                biz = %self.biz,
                block_day = block.day,
                today,
                "dropping a fetched id block that is no longer usable"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_covers_exactly_the_reserved_range() {
        let b = block_from_reply(7, 3000, 1000, "k").unwrap();
        assert_eq!((b.next, b.last, b.len, b.day), (2001, 3000, 1000, 7));
        let first = block_from_reply(7, 1000, 1000, "k").unwrap();
        assert_eq!(first.next, 1);
    }

    #[test]
    fn a_block_is_cut_at_the_32_bit_limit() {
        let hi = (MAX_SEQUENCE + 500) as i64;
        let b = block_from_reply(0, hi, 1000, "k").unwrap();
        assert_eq!(b.next, MAX_SEQUENCE - 499);
        assert_eq!(b.last, MAX_SEQUENCE);
        assert_eq!(b.remaining(), 500);
    }

    #[test]
    fn a_block_entirely_past_the_limit_is_an_error() {
        let hi = (MAX_SEQUENCE + 1000) as i64;
        let e = block_from_reply(0, hi, 1000, "k").unwrap_err();
        assert!(e.is_sequence_exhausted());
    }

    #[test]
    fn a_counter_set_by_hand_below_the_step_is_rejected() {
        let e = block_from_reply(0, 10, 1000, "k").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::UnexpectedReply);
    }

    #[test]
    fn take_drains_current_then_spare_in_order() {
        let mut st = SegmentState::default();
        assert!(st.push(Block::new(1, 1, 2)));
        assert!(st.push(Block::new(1, 11, 12)));
        assert!(!st.push(Block::new(1, 21, 22)), "both slots full");
        let got: Vec<u64> = std::iter::from_fn(|| st.take().map(|(s, _)| s)).collect();
        assert_eq!(got, [1, 2, 11, 12]);
    }

    #[test]
    fn push_after_the_current_block_ran_out_keeps_arrival_order() {
        let mut st = SegmentState::default();
        st.push(Block::new(1, 1, 1));
        st.push(Block::new(1, 5, 6));
        assert_eq!(st.take().unwrap().0, 1); // current now empty, spare queued
        st.push(Block::new(1, 9, 9));
        let got: Vec<u64> = std::iter::from_fn(|| st.take().map(|(s, _)| s)).collect();
        assert_eq!(got, [5, 6, 9]);
    }

    #[test]
    fn blocks_of_another_day_are_dropped() {
        let mut st = SegmentState::default();
        st.push(Block::new(1, 1, 10));
        st.push(Block::new(1, 11, 20));
        assert_eq!(st.drop_other_days(2), 2);
        assert!(st.take().is_none());
    }

    #[test]
    fn prefetch_starts_at_the_configured_fraction() {
        let mut b = Block::new(0, 1, 100);
        b.next = 80; // 21 left
        assert!(!wants_prefetch(&b, 0.2));
        b.next = 81; // 20 left
        assert!(wants_prefetch(&b, 0.2));
        b.next = 100;
        assert!(!wants_prefetch(&b, 0.0));
        b.next = 101;
        assert!(wants_prefetch(&b, 0.0));
    }
}

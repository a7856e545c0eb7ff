//! The relay's window (`HMDP_ORDER_TRANSPORT=rabbitmq`): a shard loop sends the next batch of
//! new entries while earlier batches' confirms are still on their way, up to
//! `HMDP_AMQP_BATCHES_IN_FLIGHT` of them, so a batch's round trip to the broker (a quorum
//! queue's confirm waits for its replicas' disk) no longer stops the shard.
//!
//! Batches are settled oldest first: a batch's entries are acknowledged once all its messages
//! are confirmed and every batch sent before it has been settled. When a batch fails, it and
//! every batch sent after it are held and published again, confirmed or not, so nothing is
//! acknowledged ahead of a batch that may be lost; a repeat is harmless (the consumer's insert
//! is idempotent). A relay that dies with batches in flight
//! leaves their entries pending, to be read again by its successor.

use std::collections::VecDeque;

use redis::streams::StreamId;
use tracing::Instrument as _;

use super::{Held, OrderWorker, Step, WorkerError};
use crate::{
    amqp::{Outgoing, Unconfirmed},
    domain::SPAN_TARGET,
    order_stream,
    storage::orders::NewOrder,
};

/// A batch sent to the broker, its confirms still to come.
pub(super) struct InFlight {
    entries: Vec<(StreamId, NewOrder)>,
    sent: Unconfirmed,
}

impl OrderWorker {
    /// Sends the orders of `entries` to the broker without waiting for the confirms; if they
    /// cannot be sent, the entries are held for a retry.
    pub(super) async fn send_batch(
        &self,
        shard: u32,
        entries: Vec<(StreamId, NewOrder)>,
    ) -> Result<InFlight, WorkerError> {
        let publisher = self.publisher.as_ref().expect("only a relay sends batches");
        let orders: Vec<Outgoing> = entries
            .iter()
            .map(|(e, o)| Outgoing {
                order: *o,
                accepted_at_ms: order_stream::accepted_at_ms(e).unwrap_or(0),
                outbox_entry: Some(order_stream::outbox_entry(shard, &e.id)),
                trace: order_stream::trace_of(e),
            })
            .collect();
        // The relay's span (exported traces only), linked to the grab of each order it sends;
        // the messages carry the grabs' own contexts, for the consumer's write.
        let span = tracing::info_span!(
            target: SPAN_TARGET,
            "relay orders",
            otel.kind = "producer",
            messaging.system = "rabbitmq",
            hmdp.orders = orders.len(),
            hmdp.shard = shard,
        );
        for trace in orders.iter().filter_map(|o| o.trace.as_ref()) {
            trace.link(&span);
        }
        let sent = publisher.send(&orders).instrument(span).await;
        match sent {
            Ok(sent) => Ok(InFlight { entries, sent }),
            Err(e) => Err(held(entries, e)),
        }
    }

    /// Waits for a sent batch's confirms, then acknowledges its entries; if the broker does not
    /// confirm it all, the entries are held for a retry.
    pub(super) async fn settle_batch(
        &self,
        shard: u32,
        batch: InFlight,
    ) -> Result<usize, WorkerError> {
        let publisher = self.publisher.as_ref().expect("only a relay sends batches");
        match publisher.confirmed(batch.sent).await {
            // The entries and the pending records stay: the queue's consumer removes both
            // after its commit, so a warm-up meanwhile still counts these orders.
            Ok(()) => {
                self.ack(shard, &batch.entries, false).await?;
                Ok(batch.entries.len())
            }
            Err(e) => Err(held(batch.entries, e)),
        }
    }
}

fn held(entries: Vec<(StreamId, NewOrder)>, e: crate::amqp::PublishError) -> WorkerError {
    WorkerError::Stalled {
        entries: entries.into_iter().map(|(e, _)| e).collect(),
        source: Held::Broker(e),
    }
}

/// A batch in a [`Window`]: what it gives back when it is held unsettled.
pub(super) trait Sent {
    fn into_entries(self) -> Vec<StreamId>;
}

impl Sent for InFlight {
    fn into_entries(self) -> Vec<StreamId> {
        self.entries.into_iter().map(|(e, _)| e).collect()
    }
}

/// The batches one shard has sent and not settled yet, oldest first.
pub(super) struct Window<B> {
    limit: usize,
    batches: VecDeque<B>,
}

impl<B: Sent> Window<B> {
    /// A window of at most `limit` batches (at least one).
    pub(super) fn new(limit: usize) -> Self {
        Self {
            limit: limit.max(1),
            batches: VecDeque::new(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    pub(super) fn is_full(&self) -> bool {
        self.batches.len() >= self.limit
    }

    pub(super) fn push(&mut self, batch: B) {
        self.batches.push_back(batch);
    }

    /// Settles the oldest batch with `settle`. If it is held ([`WorkerError::Stalled`]), every
    /// batch sent after it is held with it, unsettled, and the window is empty; if only its
    /// acknowledgement failed (another error), its entries stay pending, to be read again,
    /// and the batches after it stay in the window.
    pub(super) async fn settle_oldest<F, Fut>(&mut self, settle: F) -> Result<Step, WorkerError>
    where
        F: FnOnce(B) -> Fut,
        Fut: Future<Output = Result<Step, WorkerError>>,
    {
        let Some(oldest) = self.batches.pop_front() else {
            return Ok(Step::Idle);
        };
        match settle(oldest).await {
            Err(WorkerError::Stalled {
                mut entries,
                source,
            }) => {
                entries.extend(self.take_all());
                Err(WorkerError::Stalled { entries, source })
            }
            other => other,
        }
    }

    /// Empties the window, unsettled: the entries of every batch in it, oldest first.
    pub(super) fn take_all(&mut self) -> Vec<StreamId> {
        self.batches
            .drain(..)
            .flat_map(Sent::into_entries)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::amqp::PublishError;

    /// A batch of entries named `<batch>-<i>`.
    struct Fake(u32, Vec<StreamId>);

    impl Sent for Fake {
        fn into_entries(self) -> Vec<StreamId> {
            self.1
        }
    }

    fn batch(n: u32) -> Fake {
        let entries = (0..3)
            .map(|i| StreamId {
                id: format!("{n}-{i}"),
                ..StreamId::default()
            })
            .collect();
        Fake(n, entries)
    }

    fn ids(entries: &[StreamId]) -> Vec<&str> {
        entries.iter().map(|e| e.id.as_str()).collect()
    }

    /// Settles batch `n`: confirmed unless `n` is in `unconfirmed`, a failed acknowledgement
    /// if in `unacked`; records each settled batch.
    async fn settle(
        b: Fake,
        unconfirmed: &[u32],
        unacked: &[u32],
        seen: &Mutex<Vec<u32>>,
    ) -> Result<Step, WorkerError> {
        seen.lock().unwrap().push(b.0);
        if unconfirmed.contains(&b.0) {
            Err(WorkerError::Stalled {
                entries: b.1,
                source: Held::Broker(PublishError::Nacked(1)),
            })
        } else if unacked.contains(&b.0) {
            Err(WorkerError::Redis(
                std::io::Error::other("Redis away").into(),
            ))
        } else {
            Ok(Step::Wrote(b.1.len()))
        }
    }

    #[test]
    fn a_window_holds_its_limit_and_at_least_one() {
        let mut w = Window::new(3);
        for n in 0..3 {
            assert!(!w.is_full());
            w.push(batch(n));
        }
        assert!(w.is_full());
        let mut one = Window::new(0);
        assert!(one.is_empty() && !one.is_full());
        one.push(batch(0));
        assert!(one.is_full());
    }

    #[tokio::test]
    async fn batches_are_settled_oldest_first() {
        let seen = Mutex::new(Vec::new());
        let mut w = Window::new(4);
        for n in 1..=3 {
            w.push(batch(n));
        }
        for _ in 0..3 {
            let step = w.settle_oldest(|b| settle(b, &[], &[], &seen)).await;
            assert!(matches!(step, Ok(Step::Wrote(3))));
        }
        assert!(w.is_empty());
        assert!(matches!(
            w.settle_oldest(|b| settle(b, &[], &[], &seen)).await,
            Ok(Step::Idle)
        ));
        assert_eq!(*seen.lock().unwrap(), [1, 2, 3]);
    }

    /// A batch the broker did not confirm holds every later one with it, unsettled, even if
    /// the broker confirmed those: nothing is acknowledged ahead of a batch that may be lost.
    #[tokio::test]
    async fn an_unconfirmed_batch_holds_every_batch_after_it() {
        let seen = Mutex::new(Vec::new());
        let mut w = Window::new(4);
        for n in 1..=4 {
            w.push(batch(n));
        }
        assert!(matches!(
            w.settle_oldest(|b| settle(b, &[2], &[], &seen)).await,
            Ok(Step::Wrote(3))
        ));
        match w.settle_oldest(|b| settle(b, &[2], &[], &seen)).await {
            Err(WorkerError::Stalled { entries, source }) => {
                assert_eq!(
                    ids(&entries),
                    [
                        "2-0", "2-1", "2-2", "3-0", "3-1", "3-2", "4-0", "4-1", "4-2"
                    ]
                );
                assert!(matches!(source, Held::Broker(PublishError::Nacked(1))));
            }
            other => panic!("expected the rest held, got {other:?}"),
        }
        assert!(w.is_empty());
        // Batches 3 and 4 were never settled, so never acknowledged.
        assert_eq!(*seen.lock().unwrap(), [1, 2]);
    }

    /// A confirmed batch whose acknowledgement failed stays pending (read again later), and
    /// the confirmed batches after it are still settled.
    #[tokio::test]
    async fn a_failed_acknowledgement_leaves_the_rest_in_flight() {
        let seen = Mutex::new(Vec::new());
        let mut w = Window::new(4);
        for n in 1..=3 {
            w.push(batch(n));
        }
        assert!(matches!(
            w.settle_oldest(|b| settle(b, &[], &[1], &seen)).await,
            Err(WorkerError::Redis(_))
        ));
        assert!(!w.is_empty());
        assert_eq!(
            ids(&w.take_all()),
            ["2-0", "2-1", "2-2", "3-0", "3-1", "3-2"]
        );
        assert!(w.is_empty());
    }
}

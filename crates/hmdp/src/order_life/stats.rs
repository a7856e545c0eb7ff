//! The order life cycle's counters (`hmdp_order_*`).

use std::collections::HashMap;

use crate::{
    domain::VoucherOrderStatus,
    metrics::{Counter, Family, Registry},
};

type Labels = [(&'static str, &'static str); 2];

/// Moves of orders between statuses made by this process, and the closer's work.
#[derive(Debug)]
pub(crate) struct OrderStats {
    transitions: Family<Labels, Counter>,
    /// One handle per move the life cycle makes, created once: counting is one atomic add.
    moves: HashMap<(VoucherOrderStatus, VoucherOrderStatus), Counter>,
    /// Pay deadlines claimed by this process's closer (stream transport) or delivered by the
    /// close queue (RabbitMQ), including those whose order had moved on.
    pub deadlines_handled: Counter,
    /// Deadlines dropped because no order and no pending record exists (given up on).
    pub deadlines_dropped: Counter,
}

/// Every move an order can make.
pub(crate) const MOVES: [(VoucherOrderStatus, VoucherOrderStatus); 5] = {
    use VoucherOrderStatus as S;
    [
        (S::Unpaid, S::Paid),
        (S::Unpaid, S::Cancelled),
        (S::Paid, S::Used),
        (S::Paid, S::Refunding),
        (S::Refunding, S::Refunded),
    ]
};

impl Default for OrderStats {
    fn default() -> Self {
        let transitions = Family::<Labels, Counter>::default();
        let moves = MOVES
            .iter()
            .map(|&(from, to)| {
                let c = transitions
                    .get_or_create(&[("from", from.name()), ("to", to.name())])
                    .clone();
                ((from, to), c)
            })
            .collect();
        Self {
            transitions,
            moves,
            deadlines_handled: Counter::default(),
            deadlines_dropped: Counter::default(),
        }
    }
}

impl OrderStats {
    /// Counts `n` orders moved from `from` to `to`.
    pub(crate) fn moved(&self, from: VoucherOrderStatus, to: VoucherOrderStatus, n: u64) {
        match self.moves.get(&(from, to)) {
            Some(c) => {
                c.inc_by(n);
            }
            None => debug_assert!(false, "{from:?} → {to:?} is no move of the life cycle"),
        }
    }

    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "hmdp_order_transitions",
            "Orders moved between statuses by this process (from, to: unpaid, paid, used, \
             cancelled, refunding, refunded)",
            self.transitions.clone(),
        );
        registry.register(
            "hmdp_order_deadlines_handled",
            "Pay deadlines this process's closer handled (closed, or found paid or cancelled)",
            self.deadlines_handled.clone(),
        );
        registry.register(
            "hmdp_order_deadlines_dropped",
            "Pay deadlines dropped because neither the order nor its pending record exists",
            self.deadlines_dropped.clone(),
        );
    }
}

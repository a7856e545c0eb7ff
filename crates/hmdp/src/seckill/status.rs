//! What the owner of an order can learn about it.

use super::{Seckill, SeckillError};
use crate::{
    domain::{OrderId, UserId, VoucherId},
    order_stream::{self, PendingRecord},
    storage::orders::{self, VoucherOrder},
};

/// An order's state as its owner may see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OrderStatus {
    /// Accepted, not yet in the database.
    Pending { voucher_id: VoucherId },
    /// Accepted, but the worker could not write it and moved it to the dead-letter stream
    /// (an operator must settle it).
    Failed { voucher_id: VoucherId },
    /// In the database.
    Created(VoucherOrder),
    /// No such order of this user.
    Unknown,
}

impl Seckill {
    /// An order's status as its owner may see it.
    ///
    /// The pending record is read *before* the database: the worker deletes it only after its
    /// commit, so an order missing from both reads was never accepted (reading the database
    /// first could miss a commit and then find the record deleted). Without a record, the
    /// orders given up on are the last place to look.
    pub async fn order_status(
        &self,
        user: UserId,
        order_id: OrderId,
    ) -> Result<OrderStatus, SeckillError> {
        let pending = order_stream::read_pending(&self.redis, &self.keys, order_id.get()).await?;
        if let Some(order) = orders::order(&self.db, order_id.get()).await?
            && order.user_id == user.get()
        {
            return Ok(OrderStatus::Created(order));
        }
        Ok(match pending {
            Some(PendingRecord {
                user_id,
                voucher_id,
                failed,
            }) if user_id == user => {
                if failed {
                    OrderStatus::Failed { voucher_id }
                } else {
                    OrderStatus::Pending { voucher_id }
                }
            }
            Some(_) => OrderStatus::Unknown,
            // The record expired (a day after the order was accepted): an order given up on is
            // still known as such.
            None => {
                let failed = order_stream::read_failed(&self.redis, &self.keys, order_id.get());
                match failed.await? {
                    Some(r) if r.user_id == user => OrderStatus::Failed {
                        voucher_id: r.voucher_id,
                    },
                    _ => OrderStatus::Unknown,
                }
            }
        })
    }
}

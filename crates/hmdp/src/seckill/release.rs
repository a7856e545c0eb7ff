//! Units of closed orders coming back to a sale in Redis.
//!
//! The database gives a closed order's unit back in the transaction that closes it
//! (`storage::order_life::close_unpaid`); Redis gets it after that commit, through one script
//! that records the order in the voucher's released set and adds to the stock only for orders
//! new to it ([`scripts::RELEASE`]). So the step can be repeated after any failure (the closer
//! and a repeated cancel do), and a warm-up that read the database after the commit, which
//! counts the unit already, puts the order in the set first ([`scripts::LOAD`]).

use super::{Seckill, SeckillError, SeckillMode, scripts};
use crate::domain::VoucherId;

impl Seckill {
    /// Gives the units of these closed orders of `voucher` back to its sale in Redis, each at
    /// most once however often it is called: how many came back now. Once a sold-out sale has
    /// stock again, every instance forgets that it was sold out.
    pub(crate) async fn give_back(
        &self,
        voucher: VoucherId,
        orders: &[i64],
    ) -> Result<i64, SeckillError> {
        if orders.is_empty() || self.settings.mode == SeckillMode::Sync {
            return Ok(0);
        }
        let shard = self.shard(voucher);
        let hash = self.keys.seckill_voucher(shard, voucher.get());
        let mut redis = self.redis.clone();
        let release = scripts::ReleaseCall {
            hash: &hash,
            released: &self.keys.seckill_released(shard, voucher.get()),
            orders,
        }
        .command();
        let (added, before): (i64, i64) =
            scripts::eval(&scripts::RELEASE, &release, &mut redis).await?;
        if added > 0 && before == 0 {
            // Instances may be answering "sold out" from memory: a new generation makes them
            // forget it, and the hash carries it so their next answers are remembered again.
            let generation = self.announce_load(voucher, shard).await?;
            let raise = scripts::RaiseGenerationCall {
                hash: &hash,
                generation,
            }
            .command();
            let _: i64 = scripts::eval(&scripts::RAISE_GENERATION, &raise, &mut redis).await?;
        }
        Ok(added)
    }
}

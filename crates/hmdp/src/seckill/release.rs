//! Units of closed orders coming back to a sale in Redis.
//!
//! The database gives a closed order's unit back in the transaction that closes it
//! (`storage::order_life::close_unpaid`); Redis gets it after that commit, through one script
//! that records the order in the voucher's released set and adds to the stock only for orders
//! new to it ([`scripts::RELEASE`]). So the step can be repeated after any failure (the closer
//! and a repeated cancel do), and a warm-up that read the database after the commit, which
//! counts the unit already, puts the order in the set first ([`scripts::LOAD`]). A sale split
//! over buckets gives each unit back to the order's return bucket
//! ([`crate::domain::StockBuckets::return_bucket`]).

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
        let buckets = self.buckets_of(voucher).await?;
        let mut redis = self.redis.clone();
        let mut added = 0;
        let mut announced = None;
        for b in self.all_buckets(voucher, buckets) {
            // Each order's unit goes back to one bucket, always the same: a repeated release
            // meets the released set that already holds it.
            let mine: Vec<i64> = orders
                .iter()
                .copied()
                .filter(|o| buckets.return_bucket(*o) == b.index)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let release = scripts::ReleaseCall {
                hash: &b.hash,
                released: &b.released,
                orders: &mine,
            }
            .command();
            let (now, before): (i64, i64) =
                scripts::eval(&scripts::RELEASE, &release, &mut redis).await?;
            added += now;
            if now > 0 && before == 0 {
                // Instances may be answering "sold out" from memory: a new generation makes
                // them forget it, and the bucket carries it so their next answers are
                // remembered again.
                let generation = match announced {
                    Some(g) => g,
                    None => {
                        let g = self.announce_load(voucher, self.shard(voucher)).await?;
                        announced = Some(g);
                        g
                    }
                };
                let raise = scripts::RaiseGenerationCall {
                    hash: &b.hash,
                    generation,
                }
                .command();
                let _: i64 = scripts::eval(&scripts::RAISE_GENERATION, &raise, &mut redis).await?;
            }
        }
        Ok(added)
    }
}

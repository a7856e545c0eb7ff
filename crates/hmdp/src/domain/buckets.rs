//! How many buckets a flash-sale voucher's stock is split over (库存分桶), and which bucket a
//! buyer or an order belongs to.
//!
//! One bucket is the course's layout: one key holds the stock, so one Redis core serves the
//! whole sale. More buckets put shares of the stock in different hash slots, which a cluster
//! spreads over its masters. A buyer's *home* bucket holds their buyer record, so "one order
//! per user" is decided in one slot whatever bucket the unit comes from; an order's *return*
//! bucket is where its unit goes back when it is closed, so a repeated release meets the same
//! released set. Both are fixed functions of the id: every instance agrees without asking.

/// A voucher's number of stock buckets: 1 to [`StockBuckets::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StockBuckets(u8);

/// Refused bucket counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stockBuckets must be between 1 and {}", StockBuckets::MAX)]
pub struct BucketsOutOfRange;

impl StockBuckets {
    /// The course's layout: the whole stock in one key.
    pub const ONE: Self = Self(1);
    pub const MAX: u8 = 64;

    pub fn new(n: i64) -> Result<Self, BucketsOutOfRange> {
        match u8::try_from(n) {
            Ok(n) if (1..=Self::MAX).contains(&n) => Ok(Self(n)),
            _ => Err(BucketsOutOfRange),
        }
    }

    pub fn get(self) -> u32 {
        u32::from(self.0)
    }

    /// Whether the stock is split at all.
    pub fn split(self) -> bool {
        self.0 > 1
    }

    /// The bucket that keeps `user`'s buyer record.
    pub fn home(self, user: i64) -> u32 {
        self.spread(user ^ 0x5bd1_e995)
    }

    /// The bucket a closed `order` gives its unit back to.
    pub fn return_bucket(self, order: i64) -> u32 {
        self.spread(order)
    }

    /// The share of `stock` that bucket `b` holds when a sale is loaded whole: the remainder
    /// goes one unit each to the first buckets.
    pub fn share(self, stock: i64, b: u32) -> i64 {
        let n = i64::from(self.0);
        let stock = stock.max(0);
        stock / n + i64::from(i64::from(b) < stock % n)
    }

    /// Ids handed out in sequence (users, orders) would fall into buckets in turn under a plain
    /// modulo, and order ids carry a timestamp in their high bits: a multiplicative hash mixes
    /// every bit into the choice.
    fn spread(self, id: i64) -> u32 {
        let mixed = (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        ((mixed >> 32) % u64::from(self.0)) as u32
    }
}

impl Default for StockBuckets {
    fn default() -> Self {
        Self::ONE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_to_sixty_four_buckets() {
        assert_eq!(StockBuckets::new(0), Err(BucketsOutOfRange));
        assert_eq!(StockBuckets::new(65), Err(BucketsOutOfRange));
        assert_eq!(StockBuckets::new(-1), Err(BucketsOutOfRange));
        assert_eq!(StockBuckets::new(64).map(StockBuckets::get), Ok(64));
        assert!(!StockBuckets::ONE.split());
    }

    #[test]
    fn shares_add_up_to_the_stock() {
        for n in [1, 2, 3, 12, 64] {
            let b = StockBuckets::new(n).unwrap();
            for stock in [0, 1, 5, 11, 12, 13, 1000, 1001] {
                let shares: Vec<i64> = (0..b.get()).map(|i| b.share(stock, i)).collect();
                assert_eq!(shares.iter().sum::<i64>(), stock, "{n} buckets, {stock}");
                let (min, max) = (shares.iter().min(), shares.iter().max());
                assert!(max.unwrap() - min.unwrap() <= 1);
            }
        }
    }

    #[test]
    fn one_bucket_is_bucket_zero_and_ids_spread_over_all() {
        assert_eq!(StockBuckets::ONE.home(12345), 0);
        assert_eq!(StockBuckets::ONE.return_bucket(987), 0);
        let b = StockBuckets::new(12).unwrap();
        let mut seen = [0u32; 12];
        for user in 1..=12_000 {
            seen[b.home(user) as usize] += 1;
        }
        // Consecutive ids land on every bucket, none with more than twice its fair share.
        assert!(seen.iter().all(|&n| n > 500 && n < 2000), "{seen:?}");
    }
}

//! The voucher hash (`seckill:{s<k>}:voucher:<id>`, [`crate::kv::Keys::seckill_voucher`]):
//! the one record of a sale in Redis that the grab script decides on. Its field names are
//! declared here and nowhere else: the flash sale's scripts get them formatted into their text
//! ([`super::scripts`]), and the service, the tests and the bench write a sale with [`Sale::load`]
//! and read one back as a [`VoucherHash`].
//!
//! A loaded sale has [`FIELD_STOCK`], [`FIELD_BEGIN`], [`FIELD_END`], [`FIELD_SOLD`] and
//! [`FIELD_GENERATION`]; an id that is no flash-sale voucher has only [`FIELD_MISSING`], for a
//! while. A hash with only some of stock, begin and end is unusable: the grab answers "not
//! loaded" and the warm-up drops and rebuilds it.

use std::collections::HashMap;

use redis::{FromRedisValue, ParsingError, RedisResult, Value, aio::ConnectionLike};

use super::scripts;

/// Stock left (decremented by each accepted grab).
pub const FIELD_STOCK: &str = "stock";
/// When the sale begins, in ms since the epoch.
pub const FIELD_BEGIN: &str = "begin";
/// When the sale ends, in ms since the epoch.
pub const FIELD_END: &str = "end";
/// Orders accepted since the hash was loaded, with those the load counted: while above 0 the
/// buyers hash must exist, else buyers were lost (see [`scripts::GRAB`]).
pub const FIELD_SOLD: &str = "sold";
/// The load's generation ([`scripts::NEXT_GENERATION`]); absent in a hash loaded before
/// generations existed, which reads as 0.
pub const FIELD_GENERATION: &str = "gen";
/// The marker of an id that is no flash-sale voucher (set with a TTL, only without stock).
pub const FIELD_MISSING: &str = "missing";

/// A sale as the loader writes it into the voucher hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sale {
    pub stock: i64,
    pub begin_ms: i64,
    pub end_ms: i64,
    /// Buyers the load recorded in the buyers hash.
    pub sold: i64,
    pub generation: u64,
}

impl Sale {
    /// Writes the sale into the voucher hash at `key` unless a complete one is there already
    /// ([`scripts::LOAD`]; a missing marker or a partial hash is replaced): whether it wrote.
    pub async fn load(&self, key: &str, conn: &mut impl ConnectionLike) -> RedisResult<bool> {
        self.load_counting(key, None, conn).await
    }

    /// [`Sale::load`] for a sale whose orders can be closed: `released` is the voucher's
    /// released set and the closed orders whose units `stock` already holds, so that units
    /// given back after the snapshot are counted once (see [`scripts::LOAD`]).
    pub(crate) async fn load_counting(
        &self,
        key: &str,
        released: Option<(&str, &[i64])>,
        conn: &mut impl ConnectionLike,
    ) -> RedisResult<bool> {
        let load = scripts::LoadCall {
            key,
            sale: self,
            released,
        }
        .command();
        let written: i64 = scripts::eval(&scripts::LOAD, &load, conn).await?;
        Ok(written == 1)
    }
}

/// A voucher hash as read back: each field as Redis holds it (`None` when absent or not a
/// number).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VoucherHash {
    pub stock: Option<i64>,
    pub begin_ms: Option<i64>,
    pub end_ms: Option<i64>,
    pub sold: Option<i64>,
    pub generation: Option<u64>,
    /// The "no such voucher" marker is there.
    pub missing: bool,
}

impl VoucherHash {
    /// Reads the voucher hash at `key` (`HGETALL`; a key that does not exist reads as empty).
    #[cfg(feature = "test-util")]
    pub async fn read(key: &str, conn: &mut impl ConnectionLike) -> RedisResult<Self> {
        redis::cmd("HGETALL").arg(key).query_async(conn).await
    }

    /// The hash from its fields, as `HGETALL` returns them.
    pub fn from_fields(fields: &HashMap<String, String>) -> Self {
        let number = |name: &str| fields.get(name).and_then(|v| v.parse::<i64>().ok());
        Self {
            stock: number(FIELD_STOCK),
            begin_ms: number(FIELD_BEGIN),
            end_ms: number(FIELD_END),
            sold: number(FIELD_SOLD),
            generation: fields
                .get(FIELD_GENERATION)
                .and_then(|v| v.parse::<u64>().ok()),
            missing: fields.contains_key(FIELD_MISSING),
        }
    }

    /// The sale, if stock, begin and end are all there (what the grab script needs); `sold`
    /// and the generation read as 0 when absent, as the script reads them.
    pub fn sale(&self) -> Option<Sale> {
        Some(Sale {
            stock: self.stock?,
            begin_ms: self.begin_ms?,
            end_ms: self.end_ms?,
            sold: self.sold.unwrap_or(0),
            generation: self.generation.unwrap_or(0),
        })
    }

    /// Marked as no flash-sale voucher, and not loaded since.
    pub fn marked_unknown(&self) -> bool {
        self.missing && self.stock.is_none()
    }
}

impl FromRedisValue for VoucherHash {
    fn from_redis_value(v: Value) -> Result<Self, ParsingError> {
        let fields: HashMap<String, String> = FromRedisValue::from_redis_value(v)?;
        Ok(Self::from_fields(&fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_complete_hash_reads_as_its_sale() {
        let h = VoucherHash::from_fields(&fields(&[
            (FIELD_STOCK, "7"),
            (FIELD_BEGIN, "1000"),
            (FIELD_END, "2000"),
            (FIELD_SOLD, "3"),
            (FIELD_GENERATION, "42"),
        ]));
        let sale = Sale {
            stock: 7,
            begin_ms: 1000,
            end_ms: 2000,
            sold: 3,
            generation: 42,
        };
        assert_eq!(h.sale(), Some(sale));
        assert!(!h.marked_unknown());
    }

    #[test]
    fn a_hash_without_sold_or_generation_reads_them_as_zero() {
        let h = VoucherHash::from_fields(&fields(&[
            (FIELD_STOCK, "7"),
            (FIELD_BEGIN, "1000"),
            (FIELD_END, "2000"),
        ]));
        assert_eq!(h.sale().map(|s| (s.sold, s.generation)), Some((0, 0)));
    }

    #[test]
    fn a_partial_hash_or_a_marker_is_no_sale() {
        let partial = VoucherHash::from_fields(&fields(&[(FIELD_STOCK, "7"), (FIELD_END, "2")]));
        assert_eq!(partial.sale(), None);
        assert_eq!(partial.stock, Some(7));
        let marker = VoucherHash::from_fields(&fields(&[(FIELD_MISSING, "1")]));
        assert_eq!(marker.sale(), None);
        assert!(marker.marked_unknown());
        assert_eq!(
            VoucherHash::from_fields(&HashMap::new()),
            VoucherHash::default()
        );
    }
}

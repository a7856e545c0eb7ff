//! The bit layout of an id and the day keys, as pure functions.
//!
//! Nothing here talks to Redis or reads a clock, so the service and tests can
//! use these helpers to take ids apart or to predict key names.

use crate::error::{Error, Result};

/// The custom epoch: 2022-01-01T00:00:00Z as Unix seconds.
///
/// The timestamp part of an id counts seconds from this instant, exactly like
/// the original `RedisIdWorker`'s `BEGIN_TIMESTAMP`.
///
/// ```
/// assert_eq!(hmdp_id::EPOCH_SECONDS, 1_640_995_200);
/// ```
pub const EPOCH_SECONDS: i64 = 1_640_995_200;

/// How many low bits of an id hold the per-day sequence number.
///
/// ```
/// let id = hmdp_id::compose(hmdp_id::EPOCH_SECONDS + 1, 7).unwrap();
/// assert_eq!(id, (1 << hmdp_id::SEQUENCE_BITS) | 7);
/// ```
pub const SEQUENCE_BITS: u32 = 32;

/// The largest sequence number an id can carry (`2^32 - 1`).
///
/// Redis counters start at 1, so one business key can issue at most this many
/// ids per UTC day. A counter that goes past it makes id generation fail with
/// [`ErrorKind::SequenceExhausted`](crate::ErrorKind::SequenceExhausted);
/// it never wraps.
///
/// ```
/// assert_eq!(hmdp_id::MAX_SEQUENCE, u32::MAX as u64);
/// ```
pub const MAX_SEQUENCE: u64 = (1 << SEQUENCE_BITS) - 1;

/// The last Unix second that still fits in the timestamp bits.
///
/// Ids are positive `i64`s, so the timestamp part has 31 bits: about 68 years
/// after the epoch, i.e. up to 2090-01-19T03:14:07Z.
///
/// ```
/// assert_eq!(hmdp_id::MAX_UNIX_SECONDS, 1_640_995_200 + (1_i64 << 31) - 1);
/// ```
pub const MAX_UNIX_SECONDS: i64 = EPOCH_SECONDS + (1 << (63 - SEQUENCE_BITS)) - 1;

/// Seconds per UTC day (Unix time has no leap seconds).
pub(crate) const SECONDS_PER_DAY: i64 = 86_400;

/// Builds an id from a Unix timestamp (seconds) and a sequence number.
///
/// This is the formula of the original worker,
/// `(unix_seconds - EPOCH_SECONDS) << 32 | sequence`, with range checks: the
/// time must lie in `EPOCH_SECONDS..=MAX_UNIX_SECONDS` and the sequence in
/// `0..=MAX_SEQUENCE`. Out-of-range input is an error, never a wrapped id.
///
/// ```
/// use hmdp_id::{compose, decode, ErrorKind, EPOCH_SECONDS, MAX_SEQUENCE};
///
/// let id = compose(1_700_000_000, 42).unwrap();
/// assert_eq!(decode(id), (1_700_000_000, 42));
///
/// let too_big = compose(1_700_000_000, MAX_SEQUENCE + 1).unwrap_err();
/// assert_eq!(too_big.kind(), ErrorKind::SequenceExhausted);
/// let too_early = compose(EPOCH_SECONDS - 1, 1).unwrap_err();
/// assert_eq!(too_early.kind(), ErrorKind::ClockOutOfRange);
/// ```
pub fn compose(unix_seconds: i64, sequence: u64) -> Result<i64> {
    check_time(unix_seconds)?;
    if sequence > MAX_SEQUENCE {
        return Err(Error::exhausted(sequence));
    }
    Ok(((unix_seconds - EPOCH_SECONDS) << SEQUENCE_BITS) | sequence as i64)
}

/// Splits an id into `(unix_seconds, sequence)`.
///
/// The inverse of [`compose`]. The timestamp is the second the generator
/// used, which is the wall-clock second of issue unless the clock went
/// backwards (see the crate docs on clamping). The sequence is the value the
/// per-day counter handed out.
///
/// ```
/// let (unix_seconds, seq) = hmdp_id::decode(4_294_967_297);
/// assert_eq!(unix_seconds, hmdp_id::EPOCH_SECONDS + 1);
/// assert_eq!(seq, 1);
/// ```
pub fn decode(id: i64) -> (i64, u32) {
    (EPOCH_SECONDS + (id >> SEQUENCE_BITS), id as u32)
}

/// The Redis key that holds the sequence counter for `biz` on the UTC day
/// that contains `unix_seconds`: `{key_prefix}icr:{biz}:{yyyy:MM:dd}`.
///
/// Both generator modes use this key, so they can share it.
///
/// ```
/// // 2024-02-29T12:00:00Z
/// assert_eq!(hmdp_id::day_key("t1:", "order", 1_709_208_000), "t1:icr:order:2024:02:29");
/// ```
pub fn day_key(key_prefix: &str, biz: &str, unix_seconds: i64) -> String {
    let (y, m, d) = civil_from_days(unix_seconds.div_euclid(SECONDS_PER_DAY));
    format!("{key_prefix}icr:{biz}:{y:04}:{m:02}:{d:02}")
}

/// Days since 1970-01-01 of the UTC day containing `unix_seconds`.
pub(crate) fn day_number(unix_seconds: i64) -> i64 {
    unix_seconds.div_euclid(SECONDS_PER_DAY)
}

pub(crate) fn check_time(unix_seconds: i64) -> Result<()> {
    if (EPOCH_SECONDS..=MAX_UNIX_SECONDS).contains(&unix_seconds) {
        Ok(())
    } else {
        Err(Error::clock(format!(
            "unix time {unix_seconds}s is outside the id range \
             {EPOCH_SECONDS}..={MAX_UNIX_SECONDS} (2022-01-01 to 2090-01-19 UTC)"
        )))
    }
}

/// Proleptic Gregorian (year, month, day) for a count of days since
/// 1970-01-01, after Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11], March-based
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose_matches_the_original_formula() {
        let t = 1_700_000_000;
        let id = compose(t, 5).unwrap();
        assert_eq!(id, ((t - 1_640_995_200) << 32) | 5);
        assert!(id > 0);
    }

    #[test]
    fn decode_inverts_compose_at_the_edges() {
        for (t, s) in [
            (EPOCH_SECONDS, 0),
            (EPOCH_SECONDS, MAX_SEQUENCE),
            (MAX_UNIX_SECONDS, MAX_SEQUENCE),
            (MAX_UNIX_SECONDS, 1),
            (1_763_700_000, 123_456),
        ] {
            let id = compose(t, s).unwrap();
            assert!(id >= 0);
            assert_eq!(decode(id), (t, s as u32));
        }
        assert_eq!(compose(MAX_UNIX_SECONDS, MAX_SEQUENCE).unwrap(), i64::MAX);
    }

    #[test]
    fn out_of_range_input_is_an_error_not_a_wrapped_id() {
        assert!(
            compose(EPOCH_SECONDS - 1, 1)
                .unwrap_err()
                .is_clock_out_of_range()
        );
        assert!(
            compose(MAX_UNIX_SECONDS + 1, 1)
                .unwrap_err()
                .is_clock_out_of_range()
        );
        assert!(
            compose(EPOCH_SECONDS, 1 << 32)
                .unwrap_err()
                .is_sequence_exhausted()
        );
    }

    #[test]
    fn later_seconds_always_give_larger_ids_whatever_the_sequence() {
        let a = compose(1_700_000_000, MAX_SEQUENCE).unwrap();
        let b = compose(1_700_000_001, 1).unwrap();
        assert!(b > a);
    }

    #[test]
    fn day_key_uses_the_utc_day_with_zero_padding() {
        assert_eq!(day_key("", "order", EPOCH_SECONDS), "icr:order:2022:01:01");
        assert_eq!(
            day_key("p:", "order", EPOCH_SECONDS - 1),
            "p:icr:order:2021:12:31"
        );
        // 2024-03-01T00:00:00Z, the day after a leap day.
        assert_eq!(day_key("", "x", 1_709_251_200), "icr:x:2024:03:01");
        assert_eq!(day_key("", "x", 1_709_251_199), "icr:x:2024:02:29");
        assert_eq!(day_key("", "x", MAX_UNIX_SECONDS), "icr:x:2090:01:19");
    }

    #[test]
    fn civil_dates_agree_with_chrono_for_every_day_of_the_id_range() {
        let first = day_number(EPOCH_SECONDS) - 400;
        let last = day_number(MAX_UNIX_SECONDS) + 400;
        for day in first..=last {
            let dt = chrono::DateTime::from_timestamp(day * SECONDS_PER_DAY, 0).unwrap();
            let want = dt.format("%Y:%m:%d").to_string();
            let (y, m, d) = civil_from_days(day);
            assert_eq!(format!("{y:04}:{m:02}:{d:02}"), want, "day {day}");
        }
    }
}

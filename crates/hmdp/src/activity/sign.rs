//! Daily sign-in: one bitmap per user and month, `sign:{userId}:{yyyyMM}`, bit `day - 1` set on
//! the days the user signed (the original's layout, so its data stays readable).
//!
//! A month is at most 31 bits, so one `BITFIELD key GET u{days} 0` reads all of it as an
//! integer whose highest bit is day 1 and lowest bit the month's last day. Two streaks:
//! - [`Activity::sign_count`] is the original's `GET /user/sign/count`: consecutive signed days
//!   ending *today*, inside the current month — 0 when today is not signed yet, and at most
//!   today's day of the month.
//! - [`Activity::sign_month`]'s `streak` is what a calendar page shows: the streak that is
//!   still alive. It ends today if today is signed, else yesterday (the user can still extend
//!   it today), and crosses month boundaries, reading earlier months while they are fully
//!   signed. So on the 1st, a user who signed all of last month has a streak of 30 or 31, not
//!   0 (today not yet signed) or 1 (signed).

use std::{fmt, str::FromStr};

use chrono::{Datelike, NaiveDate};
use redis::AsyncCommands;
use serde::Serialize;
use utoipa::ToSchema;

use super::{Activity, ActivityError};
use crate::domain::UserId;

/// How many earlier months a streak may reach back (20 years; a safety bound on the loop).
const MAX_MONTHS_BACK: u32 = 240;

/// A calendar month, written `yyyyMM` (as in the original's key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct YearMonth {
    year: i32,
    month: u32,
}

/// Why a `month` is not a `yyyyMM`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("month must be yyyyMM (e.g. 202405), from 200001 to 999912")]
pub struct MonthError;

impl YearMonth {
    /// The month of `day`.
    pub fn of(day: NaiveDate) -> Self {
        Self {
            year: day.year(),
            month: day.month(),
        }
    }

    /// Its first day.
    pub fn first_day(self) -> NaiveDate {
        NaiveDate::from_ymd_opt(self.year, self.month, 1).expect("a valid year and month")
    }

    /// How many days it has (28 to 31).
    pub fn days(self) -> u32 {
        let next = self.next().first_day();
        (next - self.first_day()).num_days() as u32
    }

    /// The month before.
    pub fn previous(self) -> Self {
        match self.month {
            1 => Self {
                year: self.year - 1,
                month: 12,
            },
            m => Self {
                year: self.year,
                month: m - 1,
            },
        }
    }

    /// The month after.
    pub fn next(self) -> Self {
        match self.month {
            12 => Self {
                year: self.year + 1,
                month: 1,
            },
            m => Self {
                year: self.year,
                month: m + 1,
            },
        }
    }
}

impl FromStr for YearMonth {
    type Err = MonthError;

    fn from_str(s: &str) -> Result<Self, MonthError> {
        if s.len() != 6 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(MonthError);
        }
        let year: i32 = s[..4].parse().map_err(|_| MonthError)?;
        let month: u32 = s[4..].parse().map_err(|_| MonthError)?;
        if year < 2000 || !(1..=12).contains(&month) {
            return Err(MonthError);
        }
        Ok(Self { year, month })
    }
}

impl fmt::Display for YearMonth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}{:02}", self.year, self.month)
    }
}

/// One month's sign-in bits as `BITFIELD GET u{days} 0` answers them: day 1 is the highest of
/// `days` bits, the last day the lowest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MonthBits {
    days: u32,
    bits: u64,
}

impl MonthBits {
    pub(crate) fn new(days: u32, bits: u64) -> Self {
        Self { days, bits }
    }

    /// True if the user signed on `day` (1-based).
    pub(crate) fn signed(self, day: u32) -> bool {
        (1..=self.days).contains(&day) && (self.bits >> (self.days - day)) & 1 == 1
    }

    /// The signed days, ascending.
    pub(crate) fn signed_days(self) -> Vec<u32> {
        (1..=self.days).filter(|&d| self.signed(d)).collect()
    }

    /// Consecutive signed days ending on `day` (inclusive), counted back to day 1 at most; 0
    /// for day 0. The original's "count trailing 1-bits of `BITFIELD GET u{day} 0`".
    pub(crate) fn run_ending(self, day: u32) -> u32 {
        if day == 0 {
            return 0;
        }
        let day = day.min(self.days);
        (self.bits >> (self.days - day)).trailing_ones().min(day)
    }
}

/// A user's sign-in calendar of one month, for the web UI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignMonth {
    /// The month shown, `yyyyMM`.
    #[schema(example = "202405")]
    pub month: String,
    /// The days of that month the user signed, ascending.
    #[schema(example = json!([1, 2, 5]))]
    pub days: Vec<u32>,
    /// Today's day of the month, when `month` is the current month (else omitted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub today: Option<u32>,
    /// Whether the user has signed today.
    pub signed_today: bool,
    /// Consecutive signed days up to today, or up to yesterday while today is not signed yet
    /// (the streak is still alive); crosses month boundaries.
    pub streak: u32,
}

impl Activity {
    /// Signs the user in for today; true if this is today's first sign-in (signing twice is
    /// harmless).
    pub async fn sign(&self, user: UserId) -> Result<bool, ActivityError> {
        let today = self.today();
        let key = self.sign_key(user, YearMonth::of(today));
        let mut redis = self.0.redis.clone();
        let was: bool = redis.setbit(&key, today.day0() as usize, true).await?;
        Ok(!was)
    }

    /// The original's count: consecutive signed days ending today, within this month (0 when
    /// today is not signed yet).
    pub async fn sign_count(&self, user: UserId) -> Result<u32, ActivityError> {
        let today = self.today();
        let bits = self.month_bits(user, YearMonth::of(today)).await?;
        Ok(bits.run_ending(today.day()))
    }

    /// The calendar of `month` (default: this month) with today's state and the live streak.
    pub async fn sign_month(
        &self,
        user: UserId,
        month: Option<YearMonth>,
    ) -> Result<SignMonth, ActivityError> {
        let today = self.today();
        let current = YearMonth::of(today);
        let month = month.unwrap_or(current);
        let this = self.month_bits(user, current).await?;
        let shown = if month == current {
            this
        } else {
            self.month_bits(user, month).await?
        };
        Ok(SignMonth {
            month: month.to_string(),
            days: shown.signed_days(),
            today: (month == current).then(|| today.day()),
            signed_today: this.signed(today.day()),
            streak: self.live_streak(user, today, this).await?,
        })
    }

    /// Consecutive signed days ending today (or yesterday, if today is not signed), reading
    /// earlier months while the streak covers them completely.
    async fn live_streak(
        &self,
        user: UserId,
        today: NaiveDate,
        this: MonthBits,
    ) -> Result<u32, ActivityError> {
        let end = if this.signed(today.day()) {
            today.day()
        } else {
            today.day() - 1
        };
        let mut streak = this.run_ending(end);
        if streak < end {
            return Ok(streak);
        }
        let mut month = YearMonth::of(today).previous();
        for _ in 0..MAX_MONTHS_BACK {
            let bits = self.month_bits(user, month).await?;
            let run = bits.run_ending(bits.days);
            streak += run;
            if run < bits.days {
                break;
            }
            month = month.previous();
        }
        Ok(streak)
    }

    /// The month's bits, with one `BITFIELD key GET u{days} 0` (0 for a month without a key).
    async fn month_bits(&self, user: UserId, month: YearMonth) -> Result<MonthBits, ActivityError> {
        let days = month.days();
        let mut redis = self.0.redis.clone();
        let got: Vec<Option<i64>> = redis::cmd("BITFIELD")
            .arg(self.sign_key(user, month))
            .arg("GET")
            .arg(format!("u{days}"))
            .arg(0)
            .query_async(&mut redis)
            .await?;
        let bits = got.first().copied().flatten().unwrap_or(0);
        Ok(MonthBits::new(days, bits as u64))
    }

    fn sign_key(&self, user: UserId, month: YearMonth) -> String {
        self.0.keys.sign(user.get(), &month.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bits for a month of `days` days with the given days signed.
    fn bits(days: u32, signed: &[u32]) -> MonthBits {
        let v = signed.iter().fold(0u64, |v, d| v | 1 << (days - d));
        MonthBits::new(days, v)
    }

    #[test]
    fn months_parse_print_and_step() {
        let m: YearMonth = "202402".parse().unwrap();
        assert_eq!(m.to_string(), "202402");
        assert_eq!(m.days(), 29, "a leap February");
        assert_eq!("202302".parse::<YearMonth>().unwrap().days(), 28);
        assert_eq!("202412".parse::<YearMonth>().unwrap().days(), 31);
        assert_eq!(
            "202401"
                .parse::<YearMonth>()
                .unwrap()
                .previous()
                .to_string(),
            "202312"
        );
        assert_eq!(
            "202312".parse::<YearMonth>().unwrap().next().to_string(),
            "202401"
        );
        for bad in [
            "", "2024", "2024-05", "202413", "202400", "199912", "20240a", "+20245",
        ] {
            assert_eq!(bad.parse::<YearMonth>(), Err(MonthError), "{bad:?}");
        }
    }

    #[test]
    fn month_bits_read_day_one_as_the_highest_bit() {
        // BITFIELD GET u30 0 on a month where days 1 and 30 are set.
        let b = MonthBits::new(30, (1 << 29) | 1);
        assert!(b.signed(1) && b.signed(30));
        assert!(!b.signed(2) && !b.signed(0) && !b.signed(31));
        assert_eq!(b.signed_days(), vec![1, 30]);
    }

    #[test]
    fn runs_count_trailing_signed_days_like_the_original() {
        let b = bits(31, &[1, 2, 3, 5, 6, 7, 8]);
        assert_eq!(b.run_ending(8), 4, "5..=8");
        assert_eq!(b.run_ending(3), 3, "1..=3, stops at day 1");
        assert_eq!(b.run_ending(4), 0, "day 4 not signed");
        assert_eq!(b.run_ending(9), 0);
        assert_eq!(b.run_ending(0), 0);
        let full = bits(28, &(1..=28).collect::<Vec<_>>());
        assert_eq!(full.run_ending(28), 28);
        assert_eq!(full.run_ending(40), 28, "capped at the month's days");
    }

    #[test]
    fn the_clock_can_be_pinned() {
        let at = chrono::DateTime::parse_from_rfc3339("2024-03-01T00:30:00+08:00")
            .unwrap()
            .to_utc();
        let clock = super::super::Clock::system();
        let shared = clock.clone();
        clock.pin(at);
        assert_eq!(shared.now(), at);
        assert_eq!(super::super::Clock::fixed(at).now(), at);
    }
}

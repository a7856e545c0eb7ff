//! [`ApiDateTime`]: a date-time as the API writes and reads it, `yyyy-MM-ddTHH:mm:ss` in the
//! server's time zone without an offset — the original's (Jackson's) format, which its pages
//! parse. One type, so every date-time field of every answer is written the same way and
//! documented once.

use std::{fmt, ops::Deref};

use chrono::{Datelike, NaiveDateTime, Timelike};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The format, as chrono spells it.
pub(crate) const FORMAT: &str = "%Y-%m-%dT%H:%M:%S";

/// Server-local `yyyy-MM-ddTHH:mm:ss` (the original's format, no zone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, utoipa::ToSchema)]
#[schema(as = LocalDateTime, value_type = String, example = "2026-11-21T10:00:00")]
pub struct ApiDateTime(pub NaiveDateTime);

/// Stored as the `datetime` it wraps.
impl<DB: sqlx::Database> sqlx::Type<DB> for ApiDateTime
where
    NaiveDateTime: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <NaiveDateTime as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <NaiveDateTime as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for ApiDateTime
where
    NaiveDateTime: sqlx::Decode<'r, DB>,
{
    fn decode(value: DB::ValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        <NaiveDateTime as sqlx::Decode<'r, DB>>::decode(value).map(Self)
    }
}

impl From<NaiveDateTime> for ApiDateTime {
    fn from(v: NaiveDateTime) -> Self {
        Self(v)
    }
}

impl Deref for ApiDateTime {
    type Target = NaiveDateTime;
    fn deref(&self) -> &NaiveDateTime {
        &self.0
    }
}

/// Written without interpreting the format string each time (chrono's `format` did, at 3 % of
/// a cached shop read's CPU); chrono's own for what the fixed layout cannot show (years outside
/// 0..=9999, leap seconds).
impl fmt::Display for ApiDateTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        if !(0..=9999).contains(&v.year()) || v.nanosecond() >= 1_000_000_000 {
            return write!(f, "{}", v.format(FORMAT));
        }
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            v.year(),
            v.month(),
            v.day(),
            v.hour(),
            v.minute(),
            v.second()
        )
    }
}

impl Serialize for ApiDateTime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Reads exactly what [`Display`](fmt::Display) writes (the cached shops are read back this way).
impl<'de> Deserialize<'de> for ApiDateTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s: std::borrow::Cow<'de, str> = Deserialize::deserialize(d)?;
        match parse_written(&s) {
            Some(v) => Ok(Self(v)),
            None => NaiveDateTime::parse_from_str(&s, FORMAT)
                .map(Self)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Reads exactly `yyyy-MM-ddTHH:mm:ss`, what this service writes, without a format string;
/// `None` for anything else.
fn parse_written(s: &str) -> Option<NaiveDateTime> {
    let b = s.as_bytes();
    if b.len() != 19 || [b[4], b[7], b[10], b[13], b[16]] != *b"--T::" {
        return None;
    }
    let n = |at: usize, len: usize| {
        b[at..at + len].iter().try_fold(0u32, |acc, &c| {
            c.is_ascii_digit().then(|| acc * 10 + u32::from(c - b'0'))
        })
    };
    chrono::NaiveDate::from_ymd_opt(i32::try_from(n(0, 4)?).ok()?, n(5, 2)?, n(8, 2)?)?.and_hms_opt(
        n(11, 2)?,
        n(14, 2)?,
        n(17, 2)?,
    )
}

/// Reads `yyyy-MM-ddTHH:mm:ss` (also with a space instead of `T`, and with fractions), as an
/// admin's input may come.
pub(crate) fn parse_flexible(s: &str) -> Option<NaiveDateTime> {
    let s = s.trim();
    parse_written(s).or_else(|| {
        ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"]
            .iter()
            .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_times_read_and_write_as_chrono_with_the_format_would() {
        #[derive(serde::Serialize, serde::Deserialize)]
        struct T {
            at: ApiDateTime,
            maybe: Option<ApiDateTime>,
        }
        for text in [
            "2026-11-24T06:30:00",
            "0000-01-01T00:00:00",
            "9999-12-31T23:59:59",
            "2024-02-29T12:07:09",
            "+10000-01-01T00:00:00",
        ] {
            let v = ApiDateTime(NaiveDateTime::parse_from_str(text, FORMAT).unwrap());
            let json = serde_json::to_string(&T {
                at: v,
                maybe: Some(v),
            })
            .unwrap();
            let chrono = v.format(FORMAT).to_string();
            assert_eq!(json, format!(r#"{{"at":"{chrono}","maybe":"{chrono}"}}"#));
            let back: T = serde_json::from_str(&json).unwrap();
            assert_eq!((back.at, back.maybe), (v, Some(v)), "{text}");
        }
        // What the fixed layout refuses still goes through chrono.
        let leap = serde_json::from_str::<T>(r#"{"at":"2016-12-31T23:59:60","maybe":null}"#);
        assert_eq!(
            leap.map(|t| t.at.format(FORMAT).to_string()).ok(),
            NaiveDateTime::parse_from_str("2016-12-31T23:59:60", FORMAT)
                .ok()
                .map(|v| v.format(FORMAT).to_string())
        );
        for bad in [
            "2026-13-01T00:00:00",
            "2026-02-30T00:00:00",
            "2026-1x-01T00:00:00",
        ] {
            let json = format!(r#"{{"at":"{bad}","maybe":"{bad}"}}"#);
            assert!(serde_json::from_str::<T>(&json).is_err(), "{bad}");
        }
        assert_eq!(
            parse_flexible(" 2026-11-24 06:30:00.5 ").map(|v| v.to_string()),
            Some("2026-11-24 06:30:00.500".to_owned())
        );
    }
}

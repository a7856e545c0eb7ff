//! Value types of settings that belong to no one feature: a secret, a time zone.

use std::{fmt, str::FromStr};

/// A secret string that never shows up in `Debug`/`Display` output or logs.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself; call only where it is really needed.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// A time zone by its IANA name (`HMDP_TIME_ZONE`), e.g. `Asia/Shanghai` or `UTC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeZone(pub chrono_tz::Tz);

impl FromStr for TimeZone {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.trim()
            .parse::<chrono_tz::Tz>()
            .map(TimeZone)
            .map_err(|_| format!("`{s}` is not an IANA time zone name (e.g. Asia/Shanghai, UTC)"))
    }
}

impl fmt::Display for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

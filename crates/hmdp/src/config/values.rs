//! Value types of settings that are more than one of several names: a secret, a time zone (and
//! the day it makes of a moment, which every daily cap counts by), the trusted proxies, the
//! Sentinels. Each is parsed here on nothing but the standard library and parsing crates; what
//! it does is the business of the feature it steers.

use std::{fmt, net::IpAddr, str::FromStr, time::Duration};

use chrono::{DateTime, Days, TimeZone as _, Utc};

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

impl TimeZone {
    /// How long a daily cap keeps a day's record: longer than a day in every time zone.
    pub const DAY_RECORD_TTL: Duration = Duration::from_secs(2 * 24 * 3600);

    /// The day `now` falls on in this zone, as `yyyyMMdd` (the day in a daily cap's key).
    pub fn day(self, now: DateTime<Utc>) -> String {
        now.with_timezone(&self.0)
            .date_naive()
            .format("%Y%m%d")
            .to_string()
    }

    /// The time from `now` to the next midnight in this zone (when a spent day starts again).
    pub fn until_midnight(self, now: DateTime<Utc>) -> Duration {
        now.with_timezone(&self.0)
            .date_naive()
            .checked_add_days(Days::new(1))
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .and_then(|m| self.0.from_local_datetime(&m).earliest())
            .and_then(|m| (m.with_timezone(&Utc) - now).to_std().ok())
            .unwrap_or(Duration::from_secs(24 * 3600))
    }
}

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

/// The reverse proxies of `HMDP_TRUSTED_PROXIES`: CIDRs, or single addresses (a /32 or /128).
///
/// Parsed with the configuration, so a typo stops the start instead of silently trusting
/// nobody; the request pipeline asks them who the client is (`http::client`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    /// Whether `ip` is one of the proxies (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// No proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromStr for TrustedProxies {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        s.split([',', ' ', '\t', '\n'])
            .filter(|part| !part.is_empty())
            .map(|part| {
                part.parse::<ipnet::IpNet>()
                    .or_else(|_| part.parse::<IpAddr>().map(ipnet::IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| {
                        format!("`{part}` is not a CIDR (e.g. 10.0.0.0/8) nor an IP address")
                    })
            })
            .collect::<Result<_, _>>()
            .map(TrustedProxies)
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, net) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{net}")?;
        }
        Ok(())
    }
}

/// `HMDP_REDIS_SENTINELS`: the Sentinels' addresses, `host:port` comma-separated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelAddrs(Vec<(String, u16)>);

impl SentinelAddrs {
    /// The addresses, in the configured order.
    pub fn addrs(&self) -> &[(String, u16)] {
        &self.0
    }
}

impl FromStr for SentinelAddrs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let addrs = s
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| {
                let (host, port) = a
                    .rsplit_once(':')
                    .filter(|(h, _)| !h.is_empty())
                    .ok_or_else(|| format!("`{a}` is not host:port"))?;
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("`{a}` has no valid port"))?;
                let host = host.trim_start_matches('[').trim_end_matches(']');
                Ok((host.to_owned(), port))
            })
            .collect::<Result<Vec<_>, String>>()?;
        if addrs.is_empty() {
            return Err("no Sentinel address (host:port, comma-separated)".to_owned());
        }
        Ok(Self(addrs))
    }
}

impl fmt::Display for SentinelAddrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (host, port)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if host.contains(':') {
                write!(f, "[{host}]:{port}")?;
            } else {
                write!(f, "{host}:{port}")?;
            }
        }
        Ok(())
    }
}

/// Where a Sentinel-watched primary is found, and the passwords on the way.
#[derive(Debug, Clone)]
pub struct SentinelSpec {
    pub sentinels: SentinelAddrs,
    /// The master's name in the Sentinels' configuration (`sentinel monitor <name> …`).
    pub master: String,
    /// The Sentinels' own password (`requirepass` in their configuration).
    pub sentinel_password: Option<Secret>,
    /// The primary's and replicas' password.
    pub password: Option<Secret>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_is_the_zone_s_and_starts_again_at_its_midnight() {
        let shanghai = TimeZone(chrono_tz::Asia::Shanghai);
        let utc = TimeZone(chrono_tz::UTC);
        // 15:30 UTC is 23:30 in Shanghai.
        let now = Utc.with_ymd_and_hms(2024, 5, 1, 15, 30, 0).unwrap();
        assert_eq!(shanghai.until_midnight(now), Duration::from_secs(30 * 60));
        assert_eq!(
            utc.until_midnight(now),
            Duration::from_secs(8 * 3600 + 30 * 60)
        );
        assert_eq!(
            (shanghai.day(now), utc.day(now)),
            ("20240501".into(), "20240501".into())
        );
        let later = now + chrono::Duration::hours(1);
        assert_eq!(
            (shanghai.day(later), utc.day(later)),
            ("20240502".into(), "20240501".into())
        );
    }

    #[test]
    fn sentinel_addresses_parse_and_show() {
        let a: SentinelAddrs = " 127.0.0.1:26379, sentinel-b:26380,[::1]:26381 "
            .parse()
            .unwrap();
        assert_eq!(a.addrs()[1], ("sentinel-b".to_owned(), 26380));
        assert_eq!(a.addrs()[2], ("::1".to_owned(), 26381));
        assert_eq!(
            a.to_string(),
            "127.0.0.1:26379,sentinel-b:26380,[::1]:26381"
        );
        for bad in ["", " , ", "host", "host:0", "host:x", ":26379"] {
            assert!(bad.parse::<SentinelAddrs>().is_err(), "{bad}");
        }
    }
}

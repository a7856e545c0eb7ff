//! 用户签到: the streak. A sign-in sets the day's bit in the user's month
//! (`SETBIT sign:{user}:{yyyyMM} <day - 1> 1`); the streak is counted from today backwards
//! (`BITFIELD … GET u<day> 0`, then the trailing ones). Which day and which month is a question
//! of the time zone. The course takes `LocalDateTime.now()`, the server's clock zone; a server
//! that runs in UTC (as most containers do) for users in China puts a 07:30 sign-in in Beijing
//! on yesterday, and the one on the 1st in last month's key. The fix asks the business's time
//! zone, as the service does (`HMDP_TIME_ZONE`, Asia/Shanghai by default).
//!
//! The user signs in every morning at 07:30 Beijing time from 1 to 10 March 2024 (the month
//! after a 29-day February) and looks at the streak right after the last one. The moments are
//! fixed, so every run asks the same question; the bits go to real Redis.

use chrono::{DateTime, Datelike, FixedOffset, NaiveDate, TimeZone, Utc};

use super::{Experiment, Text, version};
use crate::{Lab, Outcome};

/// Days the user signs in, from the 1st.
const DAYS: u32 = 10;

pub static EXPERIMENT: Experiment = Experiment {
    name: "sign-streak",
    chapter: "用户签到",
    invariant: "a user who signed in on each of the last N days of their calendar has a streak of N, \
                every sign-in in the right month's key",
    invariant_zh: "用户按自己的日历连续签到了 N 天，连续签到天数就是 N，每次签到都记在对应月份的 key 里",
    lesson: Text {
        zh: "“今天是几号”取决于时区：签到的日期和月份要按业务所在的时区算，不能跟着服务器时钟的时区走。",
        en: "Which day it is depends on the time zone: count sign-ins in the business's zone, never in the server clock's.",
    },
    versions: &[
        version!(
            "server-clock-utc",
            false,
            "the course's LocalDateTime.now() on a server whose clock zone is UTC, users in Beijing",
            "课程的 LocalDateTime.now()，服务器时钟是 UTC，用户在北京",
            server_clock_utc
        ),
        version!(
            "business-zone",
            true,
            "day and month taken in the business's zone, Asia/Shanghai (UTC+8), as hmdp does",
            "日期和月份按业务时区 Asia/Shanghai（UTC+8）取，和 hmdp 一样",
            business_zone
        ),
    ],
};

async fn server_clock_utc(lab: &Lab) -> anyhow::Result<Outcome> {
    streak(lab, "utc", FixedOffset::east_opt(0).expect("UTC")).await
}

async fn business_zone(lab: &Lab) -> anyhow::Result<Outcome> {
    streak(lab, "cst", FixedOffset::east_opt(8 * 3600).expect("UTC+8")).await
}

/// The user's key of the month `at` falls in, in `zone`.
fn month_key(lab: &Lab, name: &str, at: DateTime<Utc>, zone: FixedOffset) -> String {
    let local = at.with_timezone(&zone);
    lab.key(&format!(
        "sign:{name}:1:{:04}{:02}",
        local.year(),
        local.month()
    ))
}

/// Signs in at 07:30 Beijing time on each of the first [`DAYS`] days of March 2024, with days
/// and months taken in `zone`; then counts the streak a minute after the last sign-in.
async fn streak(lab: &Lab, name: &str, zone: FixedOffset) -> anyhow::Result<Outcome> {
    let beijing = FixedOffset::east_opt(8 * 3600).expect("UTC+8");
    let morning = |day: u32| -> anyhow::Result<DateTime<Utc>> {
        let at = NaiveDate::from_ymd_opt(2024, 3, day)
            .and_then(|d| d.and_hms_opt(7, 30, 0))
            .ok_or_else(|| anyhow::anyhow!("no 2024-03-{day}"))?;
        Ok(beijing
            .from_local_datetime(&at)
            .single()
            .ok_or_else(|| anyhow::anyhow!("no single 07:30"))?
            .with_timezone(&Utc))
    };
    let mut redis = lab.redis.clone();
    let mut keys: Vec<String> = Vec::new();
    for day in 1..=DAYS {
        let at = morning(day)?;
        let key = month_key(lab, name, at, zone);
        let offset = at.with_timezone(&zone).day() - 1;
        redis::cmd("SETBIT")
            .arg(&key)
            .arg(offset)
            .arg(1)
            .query_async::<()>(&mut redis)
            .await?;
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    // The user opens the page a minute after the last sign-in.
    let now = morning(DAYS)? + chrono::Duration::minutes(1);
    let today = now.with_timezone(&zone).day();
    let key = month_key(lab, name, now, zone);
    let field: Vec<Option<u64>> = redis::cmd("BITFIELD")
        .arg(&key)
        .arg("GET")
        .arg(format!("u{today}"))
        .arg(0)
        .query_async(&mut redis)
        .await?;
    let bits = field.first().copied().flatten().unwrap_or(0);
    let streak = bits.trailing_ones();
    let this_month: u64 = redis::cmd("BITCOUNT")
        .arg(lab.key(&format!("sign:{name}:1:202403")))
        .query_async(&mut redis)
        .await?;
    Ok(
        Outcome::new(streak == DAYS && this_month == u64::from(DAYS) && keys.len() == 1)
            .metric("days_signed", DAYS)
            .metric("streak", streak)
            .metric("signed_in_march", this_month)
            .metric("month_keys", keys.len() as u64)
            .metric("today_seen_as", today),
    )
}

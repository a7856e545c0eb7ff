//! Flash-sale windows across time zones.
//!
//! `beginTime`/`endTime` stay the server's local time in the original's format (the original
//! front-end reads them), and come with `beginMillis`/`endMillis`, the same instants as epoch
//! milliseconds; the stats also say the server's UTC offset. Creating a sale accepts the
//! original's local format and a time with an offset. The second test runs the service as a
//! separate process in another zone than this test, so a zone mix-up cannot hide.

use chrono::{DateTime, Local, NaiveDateTime, TimeZone};
use hmdp::testing::FlashSale;
use serde_json::{Value, json};

use crate::{
    both_backends,
    helpers::{ADMIN_TOKEN, Backend, ChildGuard, spawn_app, wait_until_up},
};

both_backends!(flash_sale_windows_come_as_instants_too);

/// Milliseconds of a `yyyy-MM-ddTHH:mm:ss` read in `zone`.
fn millis_in<Tz: TimeZone>(zone: &Tz, text: &str) -> i64 {
    let t = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").unwrap();
    zone.from_local_datetime(&t)
        .single()
        .unwrap()
        .timestamp_millis()
}

fn rfc3339_millis(text: &str) -> i64 {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .timestamp_millis()
}

/// Talks to one running service (in-process or a child process) at `base`.
struct Api<'a> {
    client: &'a reqwest::Client,
    base: String,
}

impl Api<'_> {
    async fn json(&self, req: reqwest::RequestBuilder) -> Value {
        let r = req.send().await.unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Creates a flash sale on shop 1; its id.
    async fn create_sale(&self, begin: &str, end: &str) -> i64 {
        FlashSale::new(5)
            .title("时区测试券")
            .window_text(begin, end)
            .create(self.client, &self.base, ADMIN_TOKEN)
            .await
            .unwrap_or_else(|e| panic!("create {begin} .. {end}: {e}"))
    }

    /// The entry of voucher `id` in shop 1's voucher list.
    async fn listed(&self, id: i64) -> Value {
        let r = self
            .json(self.client.get(format!("{}/api/voucher/list/1", self.base)))
            .await;
        r["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("voucher {id} listed: {r}"))
            .clone()
    }

    async fn stats(&self, id: i64) -> Value {
        let r = self
            .json(
                self.client
                    .get(format!("{}/api/voucher/seckill/{id}/stats", self.base)),
            )
            .await;
        assert_eq!(r["success"], true, "{r}");
        r["data"].clone()
    }
}

async fn flash_sale_windows_come_as_instants_too(backend: Backend) {
    let app = spawn_app(backend).await;
    let api = Api {
        client: &app.client,
        base: app.url(""),
    };

    // The original's format: server-local times, returned unchanged, plus their instants.
    let (begin, end) = ("2030-06-01T10:00:00", "2030-06-02T10:30:00");
    let id = api.create_sale(begin, end).await;
    let v = api.listed(id).await;
    assert_eq!(
        (v["beginTime"].as_str(), v["endTime"].as_str()),
        (Some(begin), Some(end))
    );
    assert_eq!(v["beginMillis"], millis_in(&Local, begin), "{v}");
    assert_eq!(v["endMillis"], millis_in(&Local, end), "{v}");
    let s = api.stats(id).await;
    assert_eq!(
        (s["beginTime"].as_str(), s["endTime"].as_str()),
        (Some(begin), Some(end))
    );
    assert_eq!(s["beginMillis"], v["beginMillis"]);
    assert_eq!(s["endMillis"], v["endMillis"]);
    assert_eq!(
        s["serverUtcOffsetMinutes"],
        Local::now().offset().local_minus_utc() / 60
    );

    // With an offset (and with Z): the instant is kept, the local fields are its local time.
    let (begin, end) = ("2030-06-01T10:00:00+08:00", "2030-06-01T20:00:00Z");
    let id = api.create_sale(begin, end).await;
    let v = api.listed(id).await;
    assert_eq!(v["beginMillis"], rfc3339_millis(begin), "{v}");
    assert_eq!(v["endMillis"], rfc3339_millis(end), "{v}");
    let local = |text: &str| {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Local)
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    assert_eq!(v["beginTime"], local(begin));
    assert_eq!(v["endTime"], local(end));

    // Plain vouchers have no window, so no instants either.
    let r = api
        .json(
            app.client
                .post(app.url("/api/voucher"))
                .header("x-admin-token", ADMIN_TOKEN)
                .json(&json!({"shopId": 1, "title": "普通券", "payValue": 1, "actualValue": 2})),
        )
        .await;
    let plain = api.listed(r["data"].as_i64().unwrap()).await;
    assert!(plain.get("beginMillis").is_none(), "{plain}");
    assert!(plain.get("beginTime").is_none(), "{plain}");
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_in_another_zone_reports_its_windows_as_the_right_instants() {
    // A zone (POSIX TZ string: no tz database needed) whose offset differs from ours, so
    // reading a server-local time in the wrong zone would give a different instant.
    let ours = Local::now().offset().local_minus_utc() / 60;
    let (tz, offset_minutes) = if ours != 330 {
        ("IST-5:30", 330)
    } else {
        ("<-03>3", -180)
    };
    let zone = chrono::FixedOffset::east_opt(offset_minutes * 60).unwrap();

    // The in-process app provides the database and Redis prefix (and cleans them up); the
    // service under test is the binary, on the same ones, with TZ set.
    let app = spawn_app(Backend::Sqlite).await;
    let dir = tempfile::tempdir().unwrap();
    let port = crate::helpers::free_port();
    let _child = ChildGuard(
        app.binary(dir.path())
            .env("TZ", tz)
            .env("HMDP_LISTEN", format!("127.0.0.1:{port}"))
            .env("HMDP_REDIS_MANAGED", "never")
            .env("HMDP_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("HMDP_WORKER", "false")
            .spawn()
            .unwrap(),
    );
    wait_until_up(&app.client, port).await;
    let base = format!("http://127.0.0.1:{port}");
    let api = Api {
        client: &app.client,
        base,
    };

    // Server-local times are that zone's.
    let (begin, end) = ("2030-06-01T10:00:00", "2030-06-02T10:30:00");
    let id = api.create_sale(begin, end).await;
    let v = api.listed(id).await;
    assert_eq!(v["beginTime"], begin);
    assert_eq!(v["beginMillis"], millis_in(&zone, begin), "{v}");
    assert_eq!(v["endMillis"], millis_in(&zone, end), "{v}");
    assert_ne!(v["beginMillis"], millis_in(&Local, begin), "zones differ");
    let s = api.stats(id).await;
    assert_eq!(s["serverUtcOffsetMinutes"], offset_minutes, "{s}");
    assert_eq!(s["beginMillis"], v["beginMillis"]);

    // A time with an offset is stored as that zone's local time of the same instant.
    let id = api
        .create_sale("2030-06-01T10:00:00+08:00", "2030-06-01T20:00:00Z")
        .await;
    let v = api.listed(id).await;
    let expect = |text: &str| {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&zone)
            .format("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
    assert_eq!(v["beginTime"], expect("2030-06-01T10:00:00+08:00"), "{v}");
    assert_eq!(v["endTime"], expect("2030-06-01T20:00:00Z"), "{v}");
    assert_eq!(
        v["beginMillis"],
        rfc3339_millis("2030-06-01T10:00:00+08:00")
    );

    // A sale running now by the instant (sent as UTC) is open on the server's clock.
    let now = chrono::Utc::now();
    let fmt = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let id = api
        .create_sale(
            &fmt(now - chrono::Duration::minutes(5)),
            &fmt(now + chrono::Duration::hours(1)),
        )
        .await;
    let s = api.stats(id).await;
    let (b, e, n) = (
        s["beginMillis"].as_i64().unwrap(),
        s["endMillis"].as_i64().unwrap(),
        s["nowMillis"].as_i64().unwrap(),
    );
    assert!(b < n && n < e, "running: {s}");
}

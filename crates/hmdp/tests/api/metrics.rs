//! `/metrics` in the Prometheus text format.

use std::time::Duration;

use crate::helpers::{
    ADMIN_TOKEN, Backend, Patience, create_sale, spawn_app, spawn_app_with, wait_until,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_requests_by_route_and_sales_by_outcome() {
    let app = spawn_app(Backend::Sqlite).await;
    let token = app.login("13812345678").await;
    for id in [1, 2, 2, 777_777] {
        app.get(&format!("/api/shop/{id}"), None).await;
    }
    let voucher = create_sale(&app, 5, -60, 3600).await;
    assert!(
        app.post(
            &format!("/api/voucher-order/seckill/{voucher}"),
            Some(&token)
        )
        .await
        .success()
    );
    assert!(
        !app.post(
            &format!("/api/voucher-order/seckill/{voucher}"),
            Some(&token)
        )
        .await
        .success()
    );

    let resp = app
        .client
        .get(app.url("/metrics"))
        .header("x-admin-token", ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "OpenMetrics text, which Prometheus asks for"
    );
    let text = resp.text().await.unwrap();
    let has = |line: &str| {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        )
    };
    has(r#"hmdp_http_requests_total{method="GET",route="/shop/{id}",status="200"} 4"#); // business refusals are HTTP 200
    has(
        r#"hmdp_http_requests_total{method="POST",route="/voucher-order/seckill/{id}",status="200"} 2"#,
    );
    has(r#"hmdp_seckill_outcomes_total{outcome="accepted"} 1"#);
    has("# TYPE hmdp_http_requests counter");
    has("# HELP hmdp_lock_lost Locks lost while held (lease ran out or a renewal failed).");
    has(r#"hmdp_lock_wait_seconds_bucket{le="+Inf"} 0"#);
    assert_eq!(text.lines().last(), Some("# EOF"), "{text}");
    has(r#"hmdp_seckill_outcomes_total{outcome="duplicate_order"} 1"#);
    has(r#"hmdp_cache_reads_total{result="filtered"} 1"#);
    assert!(text.contains(r#"hmdp_http_request_duration_seconds_bucket{le="+Inf",method="GET",route="/shop/{id}"} 4"#), "{text}");
    assert!(
        text.contains(r#"hmdp_order_stream_length{shard="0"}"#),
        "{text}"
    );
    // Route templates only: a raw id never becomes a label.
    assert!(!text.contains("777777"), "{text}");
    // The cold shop reads rebuilt under the distributed lock (mutex strategy).
    let value = |prefix: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix:?} in:\n{text}"))
    };
    assert!(value(r#"hmdp_lock_acquisitions_total{result="acquired"}"#) >= 1);
    assert_eq!(value(r#"hmdp_lock_acquisitions_total{result="error"}"#), 0);
    value("hmdp_lock_wait_seconds_count");
    assert_eq!(value("hmdp_worker_conflicts_total"), 0);
}

/// Refusals that happen before any handler runs (rate limits, body limit, unknown routes) are
/// requests too: a flood must show up in the metrics, on its route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_the_handler_are_counted_on_their_route() {
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.rate_limit_ip = 5; // bursts of 10
        c.body_limit = 1024;
    })
    .await;
    let r = app.get("/api/no/such/route", None).await;
    assert_eq!(r.status, 404);
    let r = app
        .send(
            app.client
                .post(app.url("/api/user/login"))
                .header("content-type", "application/json")
                .body(format!(r#"{{"phone":"{}"}}"#, "1".repeat(4096))),
        )
        .await;
    assert_eq!((r.status, r.code()), (413, "payload_too_large"), "{r:?}");
    let mut refused = 0;
    for _ in 0..40 {
        if app.get("/api/shop-type/list", None).await.status == 429 {
            refused += 1;
        }
    }
    assert!(
        refused >= 20,
        "a burst of 40 over 5/s (burst 10): {refused} refused"
    );

    // Wait for the address's bucket to refill enough for the scrape.
    let refill = Patience::new(Duration::from_secs(10)).every(Duration::from_millis(250));
    let text = wait_until(refill, "the metrics served again", async || {
        let resp = app
            .client
            .get(app.url("/metrics"))
            .header("x-admin-token", ADMIN_TOKEN)
            .send()
            .await
            .unwrap();
        match resp.status() {
            reqwest::StatusCode::OK => Ok(resp.text().await.unwrap()),
            refused => Err(refused),
        }
    })
    .await;
    let has = |line: &str| {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        )
    };
    has(&format!(
        r#"hmdp_http_requests_total{{method="GET",route="/shop-type/list",status="429"}} {refused}"#
    ));
    has(r#"hmdp_http_requests_total{method="GET",route="unmatched",status="404"} 1"#);
    has(r#"hmdp_http_requests_total{method="POST",route="/user/login",status="413"} 1"#);
}

/// Any token is a valid HTTP method; each must not become a series of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_methods_share_one_label() {
    let app = spawn_app(Backend::Sqlite).await;
    for m in ["FROBNICATE", "X-CUSTOM-METHOD-WITH-A-LONG-NAME"] {
        let method = reqwest::Method::from_bytes(m.as_bytes()).unwrap();
        let r = app
            .client
            .request(method, app.url("/api/shop-type/list"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405);
    }
    let text = app.metrics().await;
    assert!(
        text.lines().any(|l| l
            == r#"hmdp_http_requests_total{method="OTHER",route="/shop-type/list",status="405"} 2"#),
        "{text}"
    );
    assert!(!text.contains("FROBNICATE"), "{text}");
}

/// Sales volumes are nobody else's business: on the public port `/metrics` needs the admin
/// token; a scraper without it reads `HMDP_METRICS_LISTEN`, which serves only `/metrics` and
/// `/health`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_closed_to_the_world_and_open_on_the_metrics_listener() {
    let app = spawn_app_with(Backend::Sqlite, |c| {
        c.metrics_listen = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let token = app.login("13812345678").await;
    let voucher = create_sale(&app, 5, -60, 3600).await;
    let r = app
        .post(
            &format!("/api/voucher-order/seckill/{voucher}"),
            Some(&token),
        )
        .await;
    assert!(r.success(), "{r:?}");
    let accepted = r#"hmdp_seckill_outcomes_total{outcome="accepted"} 1"#;

    for path in ["/metrics", "/api/metrics"] {
        for given in [None, Some("not-the-admin-token"), Some(token.as_str())] {
            let mut req = app.client.get(app.url(path));
            if let Some(t) = given {
                req = req.header("x-admin-token", t).header("authorization", t);
            }
            let r = app.send(req).await;
            assert_eq!(
                (r.status, r.code()),
                (403, "admin_required"),
                "{path}: {r:?}"
            );
            assert!(!r.body.to_string().contains("hmdp_"), "{r:?}");
        }
    }
    let text = app.metrics().await;
    assert!(text.lines().any(|l| l == accepted), "{text}");

    // The scraper's own listener: no credential, and nothing but /metrics and /health.
    let base = format!("http://{}", app.metrics_addr.expect("a metrics listener"));
    let r = app
        .client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text")
    );
    let text = r.text().await.unwrap();
    assert!(text.lines().any(|l| l == accepted), "{text}");
    assert!(text.contains("hmdp_http_requests_total{"), "{text}");
    let r = app.send(app.client.get(format!("{base}/health"))).await;
    assert_eq!(
        (r.status, &r.body["data"]["status"]),
        (200, &"ok".into()),
        "{r:?}"
    );
    for path in ["/shop/1", "/api/metrics", "/docs", "/user/me"] {
        let r = app.send(app.client.get(format!("{base}{path}"))).await;
        assert_eq!(r.status, 404, "{path} on the metrics listener: {r:?}");
    }
}

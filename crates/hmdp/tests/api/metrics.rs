//! `/metrics` in the Prometheus text format.

use crate::{
    helpers::{Backend, spawn_app},
    seckill::create_sale,
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

    let resp = app.client.get(app.url("/metrics")).send().await.unwrap();
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
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
    has(r#"hmdp_seckill_outcomes_total{outcome="duplicate_order"} 1"#);
    has(r#"hmdp_cache_reads_total{result="filtered"} 1"#);
    assert!(text.contains(r#"hmdp_http_request_duration_seconds_bucket{method="GET",route="/shop/{id}",le="+Inf"} 4"#), "{text}");
    assert!(
        text.contains(r#"hmdp_order_stream_length{shard="0"}"#),
        "{text}"
    );
    // Route templates only: a raw id never becomes a label.
    assert!(!text.contains("777777"), "{text}");
}

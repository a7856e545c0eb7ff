//! OpenTelemetry traces: with an OTLP endpoint set, one accepted grab is one trace, from the
//! request's server span in `hmdp serve` to the span that writes its order in a separate
//! `hmdp worker` process and, the order left unpaid, to the span that closes it at its pay
//! deadline, on the stream and on the RabbitMQ transport; the database transactions of the
//! write and of the close are client spans inside the batches that run them. A caller's
//! `traceparent` puts the request into the caller's trace, and the answer names it. A sampled
//! request, and a sampled batch, is the exemplar of its latency bucket on `/metrics`, for a
//! scraper that asks for OpenMetrics.
//!
//! The spans go to the OTLP receiver of `helpers::otlp`.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use hmdp::testing::kv::Keys;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

use crate::helpers::{
    Backend, ChildGuard, Patience, Receiver, TestApp, TracedServe, create_sale, db_orders_in,
    free_port, login_many, order_id_of, spawn_app, spawn_app_with, spawn_app_with_rabbitmq,
    wait_for_orders, wait_until, wait_until_up,
};

/// The pay timeout of both processes: the grab's order, never paid, closes this soon.
const PAY_TIMEOUT_SECS: &str = "2";

/// The `Accept` header Prometheus 2 scrapes with.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET /metrics` of a metrics listener, with `accept` if given: the answer's `Content-Type`,
/// `Vary` and text.
async fn scrape(
    client: &reqwest::Client,
    listener: SocketAddr,
    accept: Option<&str>,
) -> (String, String, String) {
    let mut req = client.get(format!("http://{listener}/metrics"));
    if let Some(accept) = accept {
        req = req.header("accept", accept);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (content_type, vary) = (header("content-type"), header("vary"));
    (content_type, vary, resp.text().await.unwrap())
}

/// The trace ids of the exemplars on the sample lines of `text` that start with `prefix` and
/// contain `with`.
fn exemplar_traces(text: &str, prefix: &str, with: &str) -> Vec<String> {
    let id = regex::Regex::new(r#" # \{trace_id="([0-9a-f]{32})"\} [0-9.e+-]+ [0-9.]+$"#).unwrap();
    text.lines()
        .filter(|l| l.starts_with(prefix) && l.contains(with))
        .filter_map(|l| Some(id.captures(l)?[1].to_owned()))
        .collect()
}

/// A trace id of our own, as a caller that started the trace would send it.
fn new_trace_id() -> String {
    format!("{:032x}", rand::random::<u128>() | 1)
}

/// `hmdp serve` (without its worker) and `hmdp worker`, two processes on `app`'s database and
/// Redis, both exporting to `receiver`; `transport` settings added to both. One grab through
/// `serve` with a `traceparent`; the receiver must get, in that trace, the request's span
/// from `serve` and the order's write span from `worker`.
async fn one_grab_one_trace(app: &Arc<TestApp>, transport: &[(&str, String)]) {
    let receiver = Receiver::start().await;
    let voucher = create_sale(app, 5, -60, 3600).await;
    let token = login_many(app, 1).await.remove(0);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let _serve = ChildGuard(
        app.binary(dir.path())
            .arg("serve")
            .env("HMDP_LISTEN", format!("127.0.0.1:{port}"))
            .env("HMDP_WORKER", "false")
            .env("HMDP_ORDER_PAY_TIMEOUT_SECS", PAY_TIMEOUT_SECS)
            .envs(transport.iter().cloned())
            .envs(receiver.env("grab-serve"))
            .spawn()
            .unwrap(),
    );
    let worker_listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let _worker = ChildGuard(
        app.binary(dir.path())
            .arg("worker")
            .env("HMDP_WORKER_LISTEN", worker_listen.to_string())
            .env("HMDP_ORDER_PAY_TIMEOUT_SECS", PAY_TIMEOUT_SECS)
            .envs(transport.iter().cloned())
            .envs(receiver.env("grab-worker"))
            .spawn()
            .unwrap(),
    );
    wait_until_up(&app.client, port).await;

    let trace = new_trace_id();
    let caller_span = "00f067aa0ba902b7";
    let resp = app
        .client
        .post(format!(
            "http://127.0.0.1:{port}/voucher-order/seckill/{voucher}"
        ))
        .header("authorization", &token)
        .header("traceparent", format!("00-{trace}-{caller_span}-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let answered = resp
        .headers()
        .get("traceresponse")
        .expect("the answer names its trace")
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        answered.starts_with(&format!("00-{trace}-")),
        "the caller's trace: {answered}"
    );
    let body = resp.text().await.unwrap();
    let order = order_id_of(&body).unwrap_or_else(|| panic!("accepted: {body}"));
    wait_for_orders(app, voucher, 1).await;

    let patience = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(100));
    let spans = wait_until(
        patience,
        "the request's span from serve and the order's write from worker, in one trace",
        async || {
            let spans = receiver.of_trace(&trace);
            let served = spans.iter().any(|s| s.service == "grab-serve");
            let written = spans
                .iter()
                .any(|s| s.service == "grab-worker" && s.name == "write order");
            if served && written {
                Ok(spans)
            } else {
                Err(format!("{spans:#?}"))
            }
        },
    )
    .await;

    let request = spans
        .iter()
        .find(|s| s.name == "POST /voucher-order/seckill/{id}")
        .unwrap_or_else(|| panic!("the request's span, by route template: {spans:#?}"));
    assert_eq!(request.service, "grab-serve");
    assert_eq!(
        request.parent_span_id, caller_span,
        "a child of the caller's span"
    );
    assert_eq!(request.attribute("http.response.status_code"), Some("200"));
    assert_eq!(
        request.attribute("http.route"),
        Some("/voucher-order/seckill/{id}")
    );
    assert!(
        answered.contains(&format!("-{}-", request.span_id)),
        "traceresponse names the request's span: {answered}"
    );
    let script = spans
        .iter()
        .find(|s| s.name == "grab script")
        .unwrap_or_else(|| panic!("the grab script's span: {spans:#?}"));
    assert_eq!(script.parent_span_id, request.span_id);
    assert_eq!(
        script.attribute("hmdp.order"),
        Some(order.to_string().as_str())
    );
    let write = spans.iter().find(|s| s.name == "write order").unwrap();
    assert_eq!(write.service, "grab-worker", "written in the other process");
    assert_eq!(write.parent_span_id, script.span_id, "a child of the grab");
    assert_eq!(
        write.attribute("hmdp.order"),
        Some(order.to_string().as_str())
    );

    // Never paid, the order closes at its deadline, in the worker's closer and the grab's trace.
    let patience = Patience::new(Duration::from_secs(30)).every(Duration::from_millis(100));
    let close = wait_until(
        patience,
        "the close of the unpaid order, in the grab's trace",
        async || {
            let spans = receiver.of_trace(&trace);
            match spans.iter().find(|s| s.name == "close order") {
                Some(close) => Ok(close.clone()),
                None => Err(format!("{spans:#?}")),
            }
        },
    )
    .await;
    assert_eq!(close.service, "grab-worker", "closed in the worker");
    assert_eq!(close.parent_span_id, script.span_id, "a child of the grab");
    assert_eq!(
        close.attribute("hmdp.order"),
        Some(order.to_string().as_str())
    );
    assert_eq!(close.attribute("hmdp.closed"), Some("true"), "{close:#?}");
    assert_eq!(close.attribute("hmdp.order.status"), Some("cancelled"));
    assert_eq!(
        db_orders_in(app, voucher, 4).await,
        1,
        "closed in the database"
    );
    // The trace kept for the close went with the deadline.
    let kept: bool = redis::cmd("EXISTS")
        .arg(Keys::new(&app.prefix).seckill_deadline_traces(0))
        .query_async(&mut app.redis().await)
        .await
        .unwrap();
    assert!(!kept, "the closer removed the order's trace");

    // The batch spans live in the worker's own traces and link to the grab's; each runs its
    // database transaction as a client span of its own.
    let all = receiver.spans.lock().unwrap().clone();
    for (batch, operation) in [
        ("write orders", "write_order_batch"),
        ("close orders", "close_unpaid"),
    ] {
        let batch = all
            .iter()
            .find(|s| s.name == batch && s.service == "grab-worker" && s.links.contains(&trace))
            .unwrap_or_else(|| panic!("the {batch} span, linked to the grab: {all:#?}"));
        assert_ne!(batch.trace_id, trace, "{batch:#?}");
        let transaction = all
            .iter()
            .find(|s| {
                s.parent_span_id == batch.span_id
                    && s.attribute("db.operation.name") == Some(operation)
            })
            .unwrap_or_else(|| panic!("the {operation} transaction in {batch:#?}: {all:#?}"));
        assert_eq!(transaction.name, operation);
        assert_eq!(
            transaction.kind,
            SpanKind::Client as i32,
            "{transaction:#?}"
        );
        assert_eq!(transaction.attribute("db.system.name"), Some("sqlite"));
        assert_eq!(transaction.trace_id, batch.trace_id);
    }
    let batch = all
        .iter()
        .find(|s| {
            s.name == "write orders" && s.service == "grab-worker" && s.links.contains(&trace)
        })
        .unwrap();

    // The batch, sampled, is the exemplar of its write time's bucket.
    let (_, _, text) = scrape(&app.client, worker_listen, Some(PROMETHEUS_ACCEPT)).await;
    let exemplars = exemplar_traces(&text, "hmdp_worker_write_seconds_bucket{", "");
    assert!(
        exemplars.contains(&batch.trace_id),
        "the batch's trace {} among the write time's exemplars:\n{text}",
        batch.trace_id
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_grab_is_one_trace_across_processes_on_the_stream() {
    let app = Arc::new(spawn_app_with(Backend::Sqlite, |c| c.seckill.worker = false).await);
    one_grab_one_trace(&app, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_grab_is_one_trace_across_processes_over_rabbitmq() {
    let app =
        Arc::new(spawn_app_with_rabbitmq(Backend::Sqlite, |c| c.seckill.worker = false).await);
    let transport = [
        ("HMDP_ORDER_TRANSPORT", "rabbitmq".to_owned()),
        ("HMDP_AMQP_URL", app.amqp_url()),
    ];
    one_grab_one_trace(&app, &transport).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_traces_on_answers_no_trace() {
    let app = spawn_app_with(Backend::Sqlite, |_| {}).await;
    let resp = app
        .client
        .get(app.url("/shop-type/list"))
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("traceresponse").is_none());
}

/// With traces on, a sampled request is its route's latency exemplar, named by the trace id the
/// answer's `traceresponse` gave; a request whose caller did not sample its trace is none. A
/// scrape that does not ask for OpenMetrics gets the same text without exemplars, and both are
/// answered as OpenMetrics text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampled_request_is_its_latency_exemplar_for_an_openmetrics_scraper() {
    let app = spawn_app(Backend::Sqlite).await;
    let receiver = Receiver::start().await;
    let serve = TracedServe::start(&app, &receiver, "exemplar-serve").await;
    let (port, listener) = (serve.port, serve.metrics);
    let traced = |traceparent: Option<String>| {
        let mut req = app
            .client
            .get(format!("http://127.0.0.1:{port}/shop-type/list"));
        if let Some(tp) = traceparent {
            req = req.header("traceparent", tp);
        }
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200);
            let answered = resp.headers()["traceresponse"].to_str().unwrap().to_owned();
            answered.split('-').nth(1).unwrap().to_owned()
        }
    };
    let sampled = traced(None).await;
    let unsampled_trace = new_trace_id();
    let unsampled = traced(Some(format!("00-{unsampled_trace}-00f067aa0ba902b7-00"))).await;
    assert_eq!(unsampled, unsampled_trace, "the caller's trace");

    let route = r#"route="/shop-type/list""#;
    let bucket = "hmdp_http_request_duration_seconds_bucket{";
    let (content_type, vary, text) = scrape(&app.client, listener, Some(PROMETHEUS_ACCEPT)).await;
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert_eq!(vary, "accept");
    assert_eq!(
        exemplar_traces(&text, bucket, route),
        std::slice::from_ref(&sampled),
        "one exemplar, the sampled request's:\n{text}"
    );
    assert!(!text.contains(&unsampled), "{text}");
    assert!(text.ends_with("# EOF\n"), "{text}");

    for accept in [None, Some("text/plain;version=0.0.4"), Some("*/*")] {
        let (content_type, vary, plain) = scrape(&app.client, listener, accept).await;
        assert!(
            content_type.starts_with("application/openmetrics-text"),
            "{accept:?}: {content_type}"
        );
        assert_eq!(vary, "accept");
        assert!(
            !plain.contains(" # {"),
            "{accept:?} is shown no exemplar:\n{plain}"
        );
        assert!(!plain.contains(&sampled), "{plain}");
        let count = |t: &str| {
            t.lines()
                .filter(|l| l.starts_with(bucket) && l.contains(route))
                .count()
        };
        assert_eq!(count(&plain), count(&text), "the same buckets:\n{plain}");
        assert!(plain.ends_with("# EOF\n"), "{plain}");
    }
}

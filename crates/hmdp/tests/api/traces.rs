//! OpenTelemetry traces: with an OTLP endpoint set, one accepted grab is one trace, from the
//! request's server span in `hmdp serve` to the span that writes its order in a separate
//! `hmdp worker` process and, the order left unpaid, to the span that closes it at its pay
//! deadline, on the stream and on the RabbitMQ transport; the database transactions of the
//! write and of the close are client spans inside the batches that run them. A caller's
//! `traceparent` puts the request into the caller's trace, and the answer names it.
//!
//! The receiver is a small OTLP/HTTP endpoint (`POST /v1/traces`, protobuf) that keeps every
//! span it is sent, with the `service.name` of the process that sent it.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, body::Bytes, extract::State, routing::post};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::any_value,
    trace::v1::span::SpanKind,
};
use prost::Message as _;

use hmdp::testing::kv::Keys;

use crate::helpers::{
    Backend, ChildGuard, Patience, TestApp, create_sale, db_orders_in, free_port, login_many,
    order_id_of, spawn_app_with, spawn_app_with_rabbitmq, wait_for_orders, wait_until,
    wait_until_up,
};

/// The pay timeout of both processes: the grab's order, never paid, closes this soon.
const PAY_TIMEOUT_SECS: &str = "2";

/// A span as the receiver keeps it.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    kind: i32,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    links: Vec<String>,
    attributes: Vec<(String, String)>,
}

impl Received {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The OTLP/HTTP receiver.
struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
    _server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(spans.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            spans,
            _server: server,
        }
    }

    /// The settings that point a process at this receiver, under its own service name, with
    /// spans sent every 100 ms instead of every 5 s.
    fn env(&self, service: &str) -> [(&'static str, String); 3] {
        [
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://{}", self.addr),
            ),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ]
    }

    fn of_trace(&self, trace_id: &str) -> Vec<Received> {
        let spans = self.spans.lock().unwrap();
        spans
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect()
    }
}

async fn receive(State(spans): State<Arc<Mutex<Vec<Received>>>>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let mut kept = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
            kept.push(Received {
                service: service.clone(),
                name: span.name,
                kind: span.kind,
                trace_id: hex::encode(&span.trace_id),
                span_id: hex::encode(&span.span_id),
                parent_span_id: hex::encode(&span.parent_span_id),
                links: span
                    .links
                    .iter()
                    .map(|l| hex::encode(&l.trace_id))
                    .collect(),
                attributes: span
                    .attributes
                    .iter()
                    .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                    .collect(),
            });
        }
    }
    // An empty `ExportTraceServiceResponse`: all accepted.
    Vec::new()
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(n)) => n.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// A trace id of our own, as a caller that started the trace would send it.
fn new_trace_id() -> String {
    format!("{:032x}", rand::random::<u128>() | 1)
}

/// `hmdp serve` (without its worker) and `hmdp worker`, two processes on `app`'s database and
/// Redis, both exporting to `receiver`; `transport` settings added to both. One grab through
/// `serve` with a `traceparent`; the receiver must get, in that trace, the request's span
/// from `serve`, and the order's write span and, after the pay deadline, its close span from
/// `worker`.
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
    let _worker = ChildGuard(
        app.binary(dir.path())
            .arg("worker")
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

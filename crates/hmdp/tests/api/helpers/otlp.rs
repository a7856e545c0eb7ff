//! A small OTLP/HTTP receiver (`POST /v1/traces`, protobuf) that keeps every span it is sent,
//! with the `service.name` of the process that sent it: where the processes a test starts with
//! traces on send them.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use hmdp_testkit::free_port;

use axum::{Router, body::Bytes, extract::State, routing::post};
use opentelemetry_proto::tonic::{
    collector::trace::v1::ExportTraceServiceRequest, common::v1::any_value,
};
use prost::Message as _;

use super::{ChildGuard, TestApp, wait_until_up};

/// A span as the receiver keeps it.
#[derive(Debug, Clone)]
pub struct Received {
    pub service: String,
    pub name: String,
    /// The span's kind, as OTLP numbers it (`SpanKind`).
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub links: Vec<String>,
    pub attributes: Vec<(String, String)>,
}

impl Received {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The OTLP/HTTP receiver.
pub struct Receiver {
    pub addr: SocketAddr,
    pub spans: Arc<Mutex<Vec<Received>>>,
    _server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Self {
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
    pub fn env(&self, service: &str) -> [(&'static str, String); 3] {
        [
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://{}", self.addr),
            ),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ]
    }

    pub fn of_trace(&self, trace_id: &str) -> Vec<Received> {
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

/// `hmdp serve` (without its worker) on a test app's database and Redis, sending its spans to a
/// receiver, with its metrics listener open; killed when dropped.
pub struct TracedServe {
    /// The public port.
    pub port: u16,
    /// The `HMDP_METRICS_LISTEN` listener.
    pub metrics: SocketAddr,
    _process: ChildGuard,
    _dir: tempfile::TempDir,
}

impl TracedServe {
    /// Starts it under `service` (its `service.name`) and waits until it answers.
    pub async fn start(app: &TestApp, receiver: &Receiver, service: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let process = ChildGuard(
            app.binary(dir.path())
                .arg("serve")
                .env("HMDP_LISTEN", format!("127.0.0.1:{port}"))
                .env("HMDP_METRICS_LISTEN", metrics.to_string())
                .env("HMDP_WORKER", "false")
                .envs(receiver.env(service))
                .spawn()
                .unwrap(),
        );
        wait_until_up(&app.client, port).await;
        Self {
            port,
            metrics,
            _process: process,
            _dir: dir,
        }
    }
}

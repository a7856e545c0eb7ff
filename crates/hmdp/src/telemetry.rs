//! Logs and traces. Logs: `tracing` to stderr, human-readable or JSON (`HMDP_LOG_FORMAT`).
//! Traces: OpenTelemetry over OTLP/HTTP, only when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set.
//!
//! The traced spans are `tracing` spans of one target (the caller names it), and they go to
//! the exporter only: the log never shows them, so switching traces on changes no log line.
//! Without an endpoint no layer wants that target, every such span is disabled at its call
//! site (one cached check), and no exporter, thread or connection exists.
//!
//! The OpenTelemetry SDK reads its own settings from the environment, under the ecosystem's
//! names (`OTEL_SERVICE_NAME`, `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`,
//! `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_EXPORTER_OTLP_*`), so they are not redeclared in `config`.

use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing_subscriber::{
    EnvFilter, Layer,
    filter::{FilterExt as _, filter_fn},
    fmt,
    prelude::*,
};

use crate::config::{Config, LogFormat};

/// The variables of which one must be set for traces to be exported.
pub(crate) const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The service name when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` gives one.
const DEFAULT_SERVICE_NAME: &str = "hmdp";

/// Keeps the trace exporter for as long as the process runs; dropping it sends what is still
/// buffered. Hold it until the process ends.
#[must_use = "dropping it stops the trace exporter"]
pub(crate) struct Traces(Option<SdkTracerProvider>);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("hmdp: the trace exporter did not shut down cleanly: {e}");
        }
    }
}

/// Installs the global subscriber, and the trace exporter when an OTLP endpoint is set. Spans
/// of `traced_target` are the traces' and never the log's. Call once, from `main`.
pub(crate) fn init(config: &Config, traced_target: &'static str) -> Traces {
    let filter = EnvFilter::try_new(&config.log_filter).unwrap_or_else(|e| {
        eprintln!(
            "invalid HMDP_LOG filter {:?} ({e}); using \"info\"",
            config.log_filter
        );
        EnvFilter::new("info")
    });
    let not_traced = filter_fn(move |m| !(m.is_span() && m.target() == traced_target));
    let log = match config.log_format {
        LogFormat::Text => fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => fmt::layer().json().with_writer(std::io::stderr).boxed(),
    }
    .with_filter(filter.and(not_traced));
    let (provider, failed) = match exporter_wanted() {
        false => (None, None),
        true => match provider() {
            Ok(p) => (Some(p), None),
            Err(e) => (None, Some(e)),
        },
    };
    let traces = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer()
            .with_tracer(p.tracer("hmdp"))
            .with_filter(filter_fn(move |m| {
                m.is_span() && m.target() == traced_target
            }))
    });
    tracing_subscriber::registry().with(log).with(traces).init();
    if let Some(e) = failed {
        tracing::error!(error = %e, "OTLP trace exporter not started; no traces will be sent");
    }
    Traces(provider)
}

/// Whether an OTLP endpoint for traces is set (an empty value counts as unset).
fn exporter_wanted() -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// The tracer provider: OTLP over HTTP (protobuf), batched on the SDK's own thread, with the
/// sampler and resource the `OTEL_*` variables set.
fn provider() -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    let mut resource = Resource::builder();
    if !service_named() {
        resource = resource.with_service_name(DEFAULT_SERVICE_NAME);
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// Whether the environment names the service, as the SDK reads it.
fn service_named() -> bool {
    let set = |v: &str| std::env::var(v).ok().filter(|s| !s.trim().is_empty());
    set("OTEL_SERVICE_NAME").is_some()
        || set("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
            a.split(',')
                .any(|kv| kv.trim_start().starts_with("service.name="))
        })
}

//! The trace an order belongs to: a W3C `traceparent`, carried from the accepted grab to the
//! span that writes the order (a field of its stream entry, a header of its message) and on to
//! the span that closes it at its pay deadline, so that one grab is one trace across tasks and
//! processes.
//!
//! Spans meant for the traces are `tracing` spans of target [`SPAN_TARGET`]: `telemetry` sends
//! them to the OTLP exporter and keeps them out of the log, and without an exporter they are
//! disabled at their call site, so [`TraceParent::of`] finds nothing and nothing travels.

use std::collections::HashMap;

use opentelemetry::{
    Context,
    propagation::TextMapPropagator,
    trace::{SpanContext, TraceContextExt},
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `tracing` target of the spans that are exported as traces (and never logged).
pub(crate) const SPAN_TARGET: &str = "hmdp::trace";

/// The W3C Trace Context header (and the name of the field or header an order carries it in).
pub(crate) const TRACEPARENT: &str = "traceparent";

/// A valid W3C `traceparent` (`00-<trace id>-<span id>-<flags>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TraceParent(String);

impl TraceParent {
    /// Parses a `traceparent` value; `None` unless it names a valid trace and span.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        let cx = extract(s);
        cx.span()
            .span_context()
            .is_valid()
            .then(|| Self(s.to_owned()))
    }

    /// The context of `span` as a `traceparent`, if the span is exported (traces on).
    pub(crate) fn of(span: &tracing::Span) -> Option<Self> {
        if span.is_disabled() {
            return None;
        }
        let cx = span.context();
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut carrier = HashMap::new();
        TraceContextPropagator::new().inject_context(&cx, &mut carrier);
        carrier.remove(TRACEPARENT).map(Self)
    }

    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The trace id, if the context is sampled (the flags' lowest bit): a trace the exporter
    /// sends, which a metric's exemplar may name.
    pub(crate) fn sampled_trace_id(&self) -> Option<[u8; 16]> {
        let mut parts = self.0.split('-');
        let (_version, trace, _span, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let flags = u8::from_str_radix(flags, 16).ok()?;
        if flags & 1 == 0 {
            return None;
        }
        let mut id = [0; 16];
        hex::decode_to_slice(trace, &mut id).ok()?;
        Some(id)
    }

    /// The remote parent it names, for [`OpenTelemetrySpanExt::set_parent`].
    pub(crate) fn context(&self) -> Context {
        extract(&self.0)
    }

    /// The span it names, for a link.
    pub(crate) fn span_context(&self) -> SpanContext {
        self.context().span().span_context().clone()
    }

    /// Makes `span` (not yet entered) a child of this context.
    pub(crate) fn adopt(&self, span: &tracing::Span) {
        if !span.is_disabled() {
            let _ = span.set_parent(self.context());
        }
    }

    /// Adds this context as a link of `span`.
    pub(crate) fn link(&self, span: &tracing::Span) {
        if !span.is_disabled() {
            span.add_link(self.span_context());
        }
    }
}

impl std::fmt::Display for TraceParent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The spans of a batch that serves orders of several traces, while traces are exported (none
/// when `batch` is disabled): `batch` gets a link to each order's trace, and each order gets the
/// span `item` makes (a root: `parent: None`), made a child of the order's own trace and linked
/// back to the batch. So one grab stays one trace although its order is handled in someone
/// else's batch. Keep the spans until the batch's work is over.
pub(crate) fn fan_out<T>(
    batch: &tracing::Span,
    traced: Vec<(TraceParent, T)>,
    item: impl Fn(&T) -> tracing::Span,
) -> Vec<(T, tracing::Span)> {
    if batch.is_disabled() || traced.is_empty() {
        return Vec::new();
    }
    // Links go in before the span starts (reading its context starts it).
    for (trace, _) in &traced {
        trace.link(batch);
    }
    let Some(batch_trace) = TraceParent::of(batch) else {
        return Vec::new();
    };
    traced
        .into_iter()
        .map(|(trace, t)| {
            let span = item(&t);
            trace.adopt(&span);
            batch_trace.link(&span);
            (t, span)
        })
        .collect()
}

/// Whether spans of [`SPAN_TARGET`] are exported: the process installed a trace exporter
/// (`telemetry` does that first thing, before anything asks).
///
/// It makes a span rather than asking `span_enabled!`: with per-layer filters, a bare
/// `enabled` question leaves the layers' verdicts behind for the thread's next event, and the
/// log layer, which refuses this target, then dropped that event (the start-up banner).
pub(crate) fn traces_exported() -> bool {
    !tracing::info_span!(target: SPAN_TARGET, "traces exported").is_disabled()
}

fn extract(traceparent: &str) -> Context {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    TraceContextPropagator::new().extract(&carrier)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_parses_only_when_valid() {
        let ok = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let tp = TraceParent::parse(ok).unwrap();
        assert_eq!(tp.as_str(), ok);
        assert_eq!(
            tp.span_context().trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert!(tp.span_context().is_remote());
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "not a traceparent",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_a_sampled_context_gives_its_trace_id() {
        let id = |flags: &str| {
            TraceParent::parse(&format!(
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-{flags}"
            ))
            .unwrap()
            .sampled_trace_id()
        };
        let expected: [u8; 16] = hex::decode("4bf92f3577b34da6a3ce929d0e0e4736")
            .unwrap()
            .try_into()
            .unwrap();
        assert_eq!(id("01"), Some(expected));
        assert_eq!(id("03"), Some(expected));
        assert_eq!(id("00"), None);
        assert_eq!(id("02"), None);
    }

    #[test]
    fn a_span_not_exported_has_no_traceparent() {
        assert_eq!(TraceParent::of(&tracing::Span::none()), None);
        assert_eq!(TraceParent::of(&tracing::info_span!("logged only")), None);
    }
}

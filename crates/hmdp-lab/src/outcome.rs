//! What a version measured, and its line of `--json` output (people read it through
//! `render.rs`).

use serde::Serialize;
use serde_json::{Map, Value};

use crate::trace::{JsonEvent, Timeline};

/// What one run of one version measured.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// Whether the experiment's invariant held on this run.
    pub held: bool,
    /// The figures, in the order they were recorded (`stock`, `orders`, `oversold`, ...).
    pub metrics: Map<String, Value>,
    /// The voucher whose `tb_voucher_order` rows this version wrote, for anyone who wants to
    /// count them in the database themselves.
    pub voucher_id: Option<i64>,
    /// The events that explain this run's outcome, where the version records them.
    pub trace: Option<Timeline>,
}

impl Outcome {
    /// An outcome with no figures yet.
    pub fn new(held: bool) -> Self {
        Self {
            held,
            ..Self::default()
        }
    }

    /// Records a figure.
    pub fn metric(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.metrics.insert(name.to_owned(), value.into());
        self
    }

    /// Names the voucher whose orders this version wrote.
    pub fn voucher(mut self, id: i64) -> Self {
        self.voucher_id = Some(id);
        self
    }

    /// Attaches the timeline that explains the outcome.
    pub fn traced(mut self, timeline: Timeline) -> Self {
        self.trace = Some(timeline);
        self
    }
}

/// One line of `--json` output.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub experiment: &'a str,
    pub version: &'a str,
    pub chapter: &'a str,
    pub invariant: &'a str,
    pub held: bool,
    /// Whether the course teaches this version as one that keeps the invariant.
    pub expected_to_hold: bool,
    pub metrics: &'a Map<String, Value>,
    pub voucher_id: Option<i64>,
    /// With `--trace`: the events that explain the outcome, in time order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<Vec<JsonEvent>>,
    /// With `--trace`: how many recorded events `trace` leaves out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_left_out: Option<usize>,
}

//! What a version measured, and its line of `--json` output (people read it through
//! `render.rs`).

use serde::Serialize;
use serde_json::{Map, Value};

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
}

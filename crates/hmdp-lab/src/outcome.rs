//! What a version measured, and how it is printed: a table per experiment for people, one JSON
//! object per version per line for scripts.

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

/// The table of one experiment: a row per version, a column per metric (in first-seen order).
pub(crate) fn table(rows: &[(&str, bool, bool, &Outcome)]) -> String {
    let mut columns: Vec<&str> = Vec::new();
    for (_, _, _, o) in rows {
        for k in o.metrics.keys() {
            if !columns.contains(&k.as_str()) {
                columns.push(k);
            }
        }
    }
    let mut header = vec!["version".to_owned(), "held".to_owned()];
    header.extend(columns.iter().map(|c| (*c).to_owned()));
    header.push("voucher".to_owned());
    let mut lines = vec![header];
    for (version, expected, _, o) in rows {
        let held = match (o.held, expected) {
            (true, true) => "yes",
            (false, false) => "NO (as taught)",
            (true, false) => "yes (expected to fail!)",
            (false, true) => "NO (expected to hold!)",
        };
        let mut line = vec![(*version).to_owned(), held.to_owned()];
        for c in &columns {
            line.push(match o.metrics.get(*c) {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => "–".to_owned(),
            });
        }
        line.push(o.voucher_id.map_or("–".to_owned(), |v| v.to_string()));
        lines.push(line);
    }
    let widths: Vec<usize> = (0..lines[0].len())
        .map(|i| {
            lines
                .iter()
                .map(|l| l[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (n, line) in lines.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
        if n == 0 {
            out.push_str(
                &widths
                    .iter()
                    .map(|w| "-".repeat(*w))
                    .collect::<Vec<_>>()
                    .join("  "),
            );
            out.push('\n');
        }
    }
    out
}

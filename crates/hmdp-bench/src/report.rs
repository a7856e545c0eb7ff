//! The final table and the JSON result file.

use serde::Serialize;

use crate::{load::Outcome, timeline::SecondSummary};

/// One row of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: String,
    pub requests: u64,
    pub seconds: f64,
    pub rate: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub errors: std::collections::BTreeMap<String, u64>,
    /// Extra figures (e.g. database queries caused), printed after the row.
    pub notes: Vec<String>,
    /// Per-second throughput and latency.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<SecondSummary>,
    /// Whether the SVG chart shows this row.
    #[serde(skip)]
    pub chart: bool,
}

impl Row {
    pub fn from_outcome(name: &str, o: &Outcome) -> Self {
        let ms = |q: f64| o.latency.value_at_quantile(q) as f64 / 1000.0;
        Self {
            name: name.to_owned(),
            requests: o.requests,
            seconds: o.elapsed.as_secs_f64(),
            rate: o.rate(),
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p99_ms: ms(0.99),
            max_ms: o.latency.max() as f64 / 1000.0,
            errors: o.errors.clone(),
            notes: Vec::new(),
            timeline: o.timeline.summary(o.elapsed.as_secs_f64()),
            chart: false,
        }
    }

    /// A row for a figure that is not a timed phase of requests (e.g. a drain rate).
    pub fn figure(name: &str, count: u64, seconds: f64) -> Self {
        Self {
            name: name.to_owned(),
            requests: count,
            seconds,
            rate: count as f64 / seconds.max(1e-9),
            p50_ms: f64::NAN,
            p90_ms: f64::NAN,
            p99_ms: f64::NAN,
            max_ms: f64::NAN,
            errors: Default::default(),
            notes: Vec::new(),
            timeline: Vec::new(),
            chart: false,
        }
    }

    /// Shows this row in the SVG chart.
    pub fn charted(mut self) -> Self {
        self.chart = true;
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }
}

/// A scenario's report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub scenario: String,
    pub command: String,
    pub machine: String,
    pub connections: usize,
    pub rows: Vec<Row>,
    /// Ratios and verdicts, printed under the table.
    pub summary: Vec<String>,
    /// Invariant checks (a failed one makes the run exit non-zero).
    pub checks: Vec<crate::check::Check>,
    /// The performance goals (throughput, latency, memory) with the measured value.
    pub goals: Vec<Goal>,
    /// A scenario's own figures beyond the rows (e.g. per node), as it shapes them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// A scenario's own chart, written by `--svg` instead of the per-second one.
    #[serde(skip)]
    pub chart_svg: Option<String>,
}

/// A performance goal set for the service, measured in this run.
#[derive(Debug, Clone, Serialize)]
pub struct Goal {
    pub goal: String,
    pub measured: String,
    pub met: bool,
}

impl Goal {
    pub fn new(goal: impl Into<String>, measured: impl Into<String>, met: bool) -> Self {
        Self {
            goal: goal.into(),
            measured: measured.into(),
            met,
        }
    }
}

/// `code:count` pairs, or `-`.
pub fn format_errors(errors: &std::collections::BTreeMap<String, u64>) -> String {
    if errors.is_empty() {
        return "-".to_owned();
    }
    errors
        .iter()
        .map(|(k, v)| format!("{k}:{v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A latency cell: two decimals, or `-` for rows without latencies.
pub fn format_ms(ms: f64) -> String {
    if ms.is_nan() {
        "-".to_owned()
    } else {
        format!("{ms:.2}")
    }
}

impl Report {
    pub fn new(scenario: &str, connections: usize) -> Self {
        Self {
            scenario: scenario.to_owned(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            machine: machine(),
            connections,
            rows: Vec::new(),
            summary: Vec::new(),
            checks: Vec::new(),
            goals: Vec::new(),
            data: None,
            chart_svg: None,
        }
    }

    /// Whether every invariant check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The rows the SVG chart shows.
    pub fn chart_series(&self) -> Vec<crate::svg::Series> {
        self.rows
            .iter()
            .filter(|r| r.chart && !r.timeline.is_empty())
            .map(|r| crate::svg::Series {
                name: r.name.clone(),
                points: r.timeline.clone(),
            })
            .collect()
    }

    pub fn print(&self) {
        println!(
            "\nscenario: {}   connections: {}   machine: {}",
            self.scenario, self.connections, self.machine
        );
        println!("command:  {}\n", self.command);
        println!(
            "| {:<44} | {:>9} | {:>10} | {:>8} | {:>8} | {:>8} | {:>8} | {:<20} |",
            "phase", "requests", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors"
        );
        println!(
            "|{:-<46}|{:->11}|{:->12}|{:->10}|{:->10}|{:->10}|{:->10}|{:-<22}|",
            "", "", "", "", "", "", "", ""
        );
        for r in &self.rows {
            println!(
                "| {:<44} | {:>9} | {:>10.0} | {:>8} | {:>8} | {:>8} | {:>8} | {:<20} |",
                r.name,
                r.requests,
                r.rate,
                format_ms(r.p50_ms),
                format_ms(r.p90_ms),
                format_ms(r.p99_ms),
                format_ms(r.max_ms),
                format_errors(&r.errors)
            );
            for n in &r.notes {
                println!("|   ↳ {n}");
            }
        }
        println!();
        for s in &self.summary {
            println!("{s}");
        }
        if !self.checks.is_empty() {
            println!("\ninvariants:");
            for c in &self.checks {
                println!(
                    "  [{}] {}: {}",
                    if c.ok { "ok" } else { "FAILED" },
                    c.name,
                    c.detail
                );
            }
        }
        if !self.goals.is_empty() {
            println!("\ngoals:");
            for g in &self.goals {
                println!(
                    "  [{}] {} — measured {}",
                    if g.met { "met" } else { "MISSED" },
                    g.goal,
                    g.measured
                );
            }
        }
    }
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} cores, {model}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_cells() {
        assert_eq!(format_errors(&Default::default()), "-");
        let mut e = std::collections::BTreeMap::new();
        e.insert("sold_out".to_owned(), 3);
        e.insert("duplicate_order".to_owned(), 2);
        assert_eq!(format_errors(&e), "duplicate_order:2 sold_out:3");
        assert_eq!(format_ms(f64::NAN), "-");
        assert_eq!(format_ms(1.234), "1.23");
    }

    #[test]
    fn rows_from_outcomes_and_figures() {
        let mut o = Outcome::new();
        o.requests = 2000;
        o.elapsed = std::time::Duration::from_secs(2);
        for v in [1000, 2000, 3000, 4000] {
            o.latency.record(v).unwrap();
        }
        o.timeline.record(0, 1000, 1000, false);
        o.timeline.record(1, 1000, 1000, false);
        let r = Row::from_outcome("x", &o);
        assert_eq!(r.rate, 1000.0);
        assert!((r.p50_ms - 2.0).abs() < 0.01);
        assert!((r.max_ms - 4.0).abs() < 0.01);
        assert_eq!(r.timeline.len(), 2);
        let f = Row::figure("drain", 500, 0.5);
        assert_eq!(f.rate, 1000.0);
        assert!(f.p99_ms.is_nan());
        let mut rep = Report::new("t", 1);
        rep.rows.push(r.charted());
        rep.rows.push(f);
        assert_eq!(rep.chart_series().len(), 1);
        assert!(rep.passed());
        // NaN latencies serialize as null.
        let json = serde_json::to_value(&rep).unwrap();
        assert!(json["rows"][1]["p99_ms"].is_null());
    }
}

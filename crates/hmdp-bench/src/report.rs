//! The final table and the JSON result file.

use serde::Serialize;

use crate::load::Outcome;

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
        }
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
        }
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
            let errors = if r.errors.is_empty() {
                "-".to_owned()
            } else {
                r.errors
                    .iter()
                    .map(|(k, v)| format!("{k}:{v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            println!(
                "| {:<44} | {:>9} | {:>10.0} | {:>8.2} | {:>8.2} | {:>8.2} | {:>8.2} | {:<20} |",
                r.name, r.requests, r.rate, r.p50_ms, r.p90_ms, r.p99_ms, r.max_ms, errors
            );
            for n in &r.notes {
                println!("|   ↳ {n}");
            }
        }
        println!();
        for s in &self.summary {
            println!("{s}");
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

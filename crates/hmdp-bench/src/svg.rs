//! The SVG charts, written by hand: two panels sharing the time axis — throughput per second on
//! top, p50 (solid) and p99 (dashed) latency per second below — one colour per phase; and a
//! plain plot of one figure against a few settings ([`render_xy`]), one line per series. A
//! plotting crate would pull in a font stack for a few polylines and labels.

use std::fmt::Write;

use crate::timeline::SecondSummary;

/// One phase's line(s).
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<SecondSummary>,
}

const COLOURS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const W: f64 = 900.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 20.0;
const PANEL_H: f64 = 220.0;
const TOP1: f64 = 50.0;
const TOP2: f64 = TOP1 + PANEL_H + 60.0;

/// Escapes text for XML.
pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis maximum (1, 2 or 5 times a power of ten) at or above `max`, and its step
/// for 5 ticks or so.
pub fn nice_max(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 0.2);
    }
    let raw_step = max / 5.0;
    let mag = 10f64.powf(raw_step.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw_step)
        .unwrap_or(10.0 * mag);
    ((max / step).ceil() * step, step)
}

/// Short axis labels: 12 000 → "12k", 1 500 000 → "1.5M", 0.25 → "0.25".
pub fn label(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            s
        }
    };
    if v >= 1e6 {
        format!("{}M", trim(format!("{:.1}", v / 1e6)))
    } else if v >= 1e3 {
        format!("{}k", trim(format!("{:.1}", v / 1e3)))
    } else {
        trim(format!("{v:.2}"))
    }
}

/// One polyline: legend name, colour, dashed, `(x, y)` points.
type Line<'a> = (String, &'a str, bool, Vec<(f64, f64)>);

fn panel(out: &mut String, top: f64, title: &str, max_x: f64, max_y: f64, lines: &[Line<'_>]) {
    let (ymax, ystep) = nice_max(max_y);
    let (xmax, xstep) = nice_max(max_x);
    let pw = W - LEFT - RIGHT;
    let x = |v: f64| LEFT + v / xmax * pw;
    let y = |v: f64| top + PANEL_H - v / ymax * PANEL_H;
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"##,
        top - 10.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{top}" width="{pw}" height="{PANEL_H}" fill="none" stroke="#888"/>"##
    );
    let mut t = 0.0;
    while t <= ymax + ystep / 2.0 {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" font-size="11" text-anchor="end">{4}</text>"##,
            y(t),
            LEFT + pw,
            LEFT - 6.0,
            y(t) + 4.0,
            label(t)
        );
        t += ystep;
    }
    let mut t = 0.0;
    while t <= xmax + xstep / 2.0 {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}s</text>"##,
            x(t),
            top + PANEL_H + 16.0,
            label(t)
        );
        t += xstep;
    }
    for (name, colour, dashed, pts) in lines {
        if pts.is_empty() {
            continue;
        }
        let coords: Vec<String> = pts
            .iter()
            .map(|(px, py)| format!("{:.1},{:.1}", x(*px), y(py.min(ymax))))
            .collect();
        let dash = if *dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="2"{dash} points="{}"><title>{}</title></polyline>"##,
            coords.join(" "),
            escape(name)
        );
    }
}

/// The whole chart. Points are placed at the middle of their second.
pub fn render(title: &str, series: &[Series]) -> String {
    let height = TOP2 + PANEL_H + 40.0 + 18.0 * series.len() as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>"##
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="24" font-size="16" font-weight="bold" text-anchor="middle">{}</text>"##,
        W / 2.0,
        escape(title)
    );
    let max_x = series
        .iter()
        .map(|s| s.points.len() as f64)
        .fold(1.0, f64::max);
    let mid = |p: &SecondSummary| p.second as f64 + 0.5;
    let rate_lines: Vec<_> = series
        .iter()
        .enumerate()
        .map(|(i, s)| {
            (
                s.name.clone(),
                COLOURS[i % COLOURS.len()],
                false,
                s.points
                    .iter()
                    .map(|p| (mid(p), p.rate))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let max_rate = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.rate))
        .fold(0.0, f64::max);
    panel(
        &mut out,
        TOP1,
        "throughput (operations per second, per 1 s bucket)",
        max_x,
        max_rate,
        &rate_lines,
    );
    let mut lat_lines = Vec::new();
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        lat_lines.push((
            format!("{} p50", s.name),
            colour,
            false,
            s.points.iter().map(|p| (mid(p), p.p50_ms)).collect(),
        ));
        lat_lines.push((
            format!("{} p99", s.name),
            colour,
            true,
            s.points.iter().map(|p| (mid(p), p.p99_ms)).collect(),
        ));
    }
    let max_lat = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.p99_ms))
        .fold(0.0, f64::max);
    panel(
        &mut out,
        TOP2,
        "latency per 1 s bucket (ms): p50 solid, p99 dashed",
        max_x,
        max_lat,
        &lat_lines,
    );
    for (i, s) in series.iter().enumerate() {
        let ly = TOP2 + PANEL_H + 40.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="{2}" stroke-width="3"/><text x="{3}" y="{4:.1}" font-size="12">{5}</text>"##,
            ly - 4.0,
            LEFT + 24.0,
            COLOURS[i % COLOURS.len()],
            LEFT + 30.0,
            ly,
            escape(&s.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// One line of [`render_xy`]: its legend and `(x, y)` points.
#[derive(Debug, Clone)]
pub struct XyLine {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// A plot of `lines` over the settings `xs` (ticks at those values only, e.g. 1, 2, 3
/// masters), the y axis from 0, each point marked and labelled with its value (one decimal).
pub fn render_xy(
    title: &str,
    x_title: &str,
    y_title: &str,
    xs: &[f64],
    lines: &[XyLine],
) -> String {
    let height = TOP1 + PANEL_H + 60.0 + 18.0 * lines.len() as f64;
    let pw = W - LEFT - RIGHT;
    let (lo, hi) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(*x), b.max(*x))
        });
    let (lo, hi) = if lo < hi {
        (lo, hi)
    } else {
        (lo - 1.0, lo + 1.0)
    };
    // Half a step of room on each side, so the first and last points are not on the frame.
    let pad = (hi - lo) / (2.0 * xs.len().max(2) as f64 - 2.0);
    let x = |v: f64| LEFT + (v - lo + pad) / (hi - lo + 2.0 * pad) * pw;
    let max_y = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (ymax, ystep) = nice_max(max_y);
    let y = |v: f64| TOP1 + PANEL_H - v / ymax * PANEL_H;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>"##
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="24" font-size="16" font-weight="bold" text-anchor="middle">{}</text>"##,
        W / 2.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="{}" font-size="14" font-weight="bold">{}</text>"##,
        TOP1 - 10.0,
        escape(y_title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{LEFT}" y="{TOP1}" width="{pw}" height="{PANEL_H}" fill="none" stroke="#888"/>"##
    );
    let mut t = 0.0;
    while t <= ymax + ystep / 2.0 {
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#ddd"/><text x="{2}" y="{3:.1}" font-size="11" text-anchor="end">{4}</text>"##,
            y(t),
            LEFT + pw,
            LEFT - 6.0,
            y(t) + 4.0,
            label(t)
        );
        t += ystep;
    }
    for v in xs {
        let _ = writeln!(
            out,
            r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            x(*v),
            TOP1 + PANEL_H + 16.0,
            label(*v)
        );
    }
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text>"##,
        LEFT + pw / 2.0,
        TOP1 + PANEL_H + 36.0,
        escape(x_title)
    );
    for (i, l) in lines.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<(f64, f64)> = l
            .points
            .iter()
            .copied()
            .filter(|p| p.1.is_finite())
            .collect();
        let coords: Vec<String> = pts
            .iter()
            .map(|(px, py)| format!("{:.1},{:.1}", x(*px), y(*py)))
            .collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{colour}" stroke-width="2" points="{}"><title>{}</title></polyline>"##,
            coords.join(" "),
            escape(&l.name)
        );
        // Even lines label their points above them, odd ones below: two lines that meet do
        // not write over each other.
        let dy = if i % 2 == 0 { -7.0 } else { 16.0 };
        for (px, py) in &pts {
            let _ = writeln!(
                out,
                r##"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="11" fill="{colour}">{py:.1}</text>"##,
                x(*px),
                y(*py),
                x(*px) + 7.0,
                y(*py) + dy,
            );
        }
        let ly = TOP1 + PANEL_H + 60.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1}" y2="{0:.1}" stroke="{colour}" stroke-width="3"/><text x="{2}" y="{3:.1}" font-size="12">{4}</text>"##,
            ly - 4.0,
            LEFT + 24.0,
            LEFT + 30.0,
            ly,
            escape(&l.name)
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(second: u64, rate: f64, p99: f64) -> SecondSummary {
        SecondSummary {
            second,
            rate,
            errors: 0,
            p50_ms: p99 / 2.0,
            p90_ms: p99 * 0.8,
            p99_ms: p99,
            max_ms: p99 * 2.0,
        }
    }

    #[test]
    fn nice_axis_maxima() {
        assert_eq!(nice_max(0.0), (1.0, 0.2));
        assert_eq!(nice_max(9_300.0), (10_000.0, 2_000.0));
        assert_eq!(nice_max(12_000.0), (15_000.0, 5_000.0));
        assert_eq!(nice_max(1.0), (1.0, 0.2));
        let (m, s) = nice_max(0.37);
        assert!((m - 0.4).abs() < 1e-9 && (s - 0.1).abs() < 1e-9);
    }

    #[test]
    fn labels_are_short() {
        assert_eq!(label(0.0), "0");
        assert_eq!(label(0.25), "0.25");
        assert_eq!(label(12_000.0), "12k");
        assert_eq!(label(1_500_000.0), "1.5M");
        assert_eq!(label(2_500.0), "2.5k");
    }

    #[test]
    fn renders_one_polyline_per_line_and_escapes_names() {
        let svg = render(
            "seckill <async> & sync",
            &[
                Series {
                    name: "async".into(),
                    points: vec![point(0, 9000.0, 10.0), point(1, 11000.0, 12.0)],
                },
                Series {
                    name: "sync".into(),
                    points: vec![point(0, 800.0, 40.0)],
                },
            ],
        );
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        // 2 series × (1 throughput + 2 latency) lines.
        assert_eq!(svg.matches("<polyline").count(), 6);
        assert!(svg.contains("seckill &lt;async&gt; &amp; sync"));
        assert!(!svg.contains("<async>"));
        assert!(svg.contains("stroke-dasharray"));
        // Axis maximum of the throughput panel.
        assert!(svg.contains(">15k<"));
    }

    #[test]
    fn an_xy_plot_marks_every_point_at_its_setting() {
        let svg = render_xy(
            "hot <voucher>",
            "masters",
            "µs per grab",
            &[1.0, 2.0, 3.0],
            &[
                XyLine {
                    name: "1 bucket".into(),
                    points: vec![(1.0, 30.0), (2.0, 31.0), (3.0, 29.0)],
                },
                XyLine {
                    name: "12 buckets".into(),
                    points: vec![(1.0, 32.0), (2.0, 17.0), (3.0, f64::NAN)],
                },
            ],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        // A NaN (a case not run) is left out.
        assert_eq!(svg.matches("<circle").count(), 5);
        assert!(svg.contains("hot &lt;voucher&gt;"));
        assert!(svg.contains(">40<"), "the y axis reaches a nice maximum");
    }
}

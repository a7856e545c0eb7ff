//! The lab's output for people: the list of experiments, and the report of each experiment run
//! (what it checks, what each version does, the table of what each measured, what the columns
//! mean, and what it came to), in the chosen language and within [`COLUMNS`] columns.

use serde_json::{Value, json};

use crate::{
    Experiment, Outcome, Version, glossary,
    lang::{COLUMNS, Lang, pad, width, wrap},
};

/// A table cell wider than this is printed under the table instead, on a line of its own.
const WIDEST_CELL: usize = 24;

/// `hmdp-lab list`: a line per experiment, the versions wrapped under their column.
pub fn list(experiments: &[&Experiment], lang: Lang) -> String {
    let header = [
        lang.pick("实验", "experiment"),
        lang.pick("章节", "chapter"),
        lang.pick(
            "版本（✗ 课程里会失败的）",
            "versions (✗ fails as the course teaches)",
        ),
    ];
    let name_w = experiments
        .iter()
        .map(|e| width(e.name))
        .chain([width(header[0])])
        .max()
        .unwrap_or(0);
    let chapter_w = experiments
        .iter()
        .map(|e| width(e.chapter))
        .chain([width(header[1])])
        .max()
        .unwrap_or(0);
    let indent = " ".repeat(name_w + chapter_w + 4);
    let mut out = String::new();
    let mut line = |cells: [&str; 3]| {
        let first = format!("{}  {}  ", pad(cells[0], name_w), pad(cells[1], chapter_w));
        for l in wrap(cells[2], COLUMNS, &first, &indent) {
            out.push_str(l.trim_end());
            out.push('\n');
        }
    };
    line(header);
    for e in experiments {
        let versions: Vec<String> = e
            .versions
            .iter()
            .map(|v| format!("{}{}", if v.holds { "" } else { "✗" }, v.name))
            .collect();
        line([e.name, e.chapter, &versions.join(" ")]);
    }
    out
}

/// `hmdp-lab list --json`: one object per experiment.
pub fn list_json(e: &Experiment, lang: Lang) -> Value {
    let versions: Vec<Value> = e
        .versions
        .iter()
        .map(|v| json!({"name": v.name, "expected_to_hold": v.holds, "about": v.about(lang)}))
        .collect();
    json!({"name": e.name, "chapter": e.chapter, "versions": versions})
}

/// The report of one experiment run: every version with its outcome, in the experiment's order.
pub fn experiment(e: &Experiment, rows: &[(&Version, &Outcome)], lang: Lang) -> String {
    let mut out = String::new();
    let mut put = |lines: Vec<String>| {
        for l in lines {
            out.push_str(l.trim_end());
            out.push('\n');
        }
    };
    put(vec![
        String::new(),
        format!("== {}（{}）", e.name, e.chapter),
    ]);
    put(wrap(
        e.invariant(lang),
        COLUMNS,
        lang.pick("不变量：", "invariant: "),
        "  ",
    ));

    let name_w = rows.iter().map(|(v, _)| width(v.name)).max().unwrap_or(0);
    put(vec![lang.pick("版本：", "versions:").to_owned()]);
    let rest = " ".repeat(name_w + 4);
    for (v, _) in rows {
        put(wrap(
            v.about(lang),
            COLUMNS,
            &format!("  {}  ", pad(v.name, name_w)),
            &rest,
        ));
    }

    let (table, long) = table(rows, lang);
    put(vec![String::new()]);
    put(table);
    for (version, metric, value) in &long {
        put(wrap(
            value,
            COLUMNS,
            &format!("  {}  {metric}: ", pad(version, name_w)),
            &rest,
        ));
    }

    let mut shown: Vec<&str> = Vec::new();
    for (_, o) in rows {
        for k in o.metrics.keys() {
            if !shown.contains(&k.as_str()) {
                shown.push(k);
            }
        }
    }
    if rows.iter().any(|(_, o)| o.voucher_id.is_some()) {
        shown.push("voucher");
    }
    let term_w = shown.iter().map(|t| width(t)).max().unwrap_or(0);
    put(vec![
        String::new(),
        lang.pick("列的含义：", "the columns:").to_owned(),
    ]);
    for term in &shown {
        let meaning = glossary::explain(term, lang).unwrap_or("?");
        put(wrap(
            meaning,
            COLUMNS,
            &format!("  {}  ", pad(term, term_w)),
            &" ".repeat(term_w + 4),
        ));
    }

    put(vec![String::new()]);
    let conclusion = [verdict(rows, lang).as_str(), e.lesson.get(lang)].join(lang.pick("", " "));
    put(wrap(
        &conclusion,
        COLUMNS,
        lang.pick("结论：", "conclusion: "),
        "  ",
    ));
    out
}

/// Whether the versions behaved as the course teaches, in a sentence.
fn verdict(rows: &[(&Version, &Outcome)], lang: Lang) -> String {
    let names = |keep: &dyn Fn(&Version, &Outcome) -> bool| -> String {
        let names: Vec<&str> = rows
            .iter()
            .filter(|(v, o)| keep(v, o))
            .map(|(v, _)| v.name)
            .collect();
        names.join(lang.pick("、", ", "))
    };
    let failed = names(&|v, o| !v.holds && !o.held);
    let held = names(&|v, o| v.holds && o.held);
    let held_wrongly = names(&|v, o| !v.holds && o.held);
    let failed_wrongly = names(&|v, o| v.holds && !o.held);
    if held_wrongly.is_empty() && failed_wrongly.is_empty() {
        match lang {
            Lang::Zh => format!("{failed} 如课程所说没有守住，{held} 守住了。"),
            Lang::En => format!("{failed} failed as the course teaches; {held} held."),
        }
    } else {
        let mut s = String::from(lang.pick("与课程不符：", "not as the course teaches: "));
        if !held_wrongly.is_empty() {
            s += &match lang {
                Lang::Zh => format!("{held_wrongly} 本该失败，这次却守住了；"),
                Lang::En => format!("{held_wrongly} should fail but held this time; "),
            };
        }
        if !failed_wrongly.is_empty() {
            s += &match lang {
                Lang::Zh => format!("{failed_wrongly} 本该守住，却失败了；"),
                Lang::En => format!("{failed_wrongly} should hold but failed; "),
            };
        }
        s.pop();
        s.push_str(lang.pick("。", "."));
        s
    }
}

/// The table of one experiment, a row per version and a column per metric in first-seen
/// order, split into several tables (each beginning with the version) when it is wider than
/// [`COLUMNS`]; and the cells too wide for any table, as `(version, metric, value)`.
fn table(
    rows: &[(&Version, &Outcome)],
    lang: Lang,
) -> (Vec<String>, Vec<(String, String, String)>) {
    let mut columns: Vec<String> = Vec::new();
    let mut long = Vec::new();
    let mut cells: Vec<Vec<(String, String)>> = Vec::new();
    for (v, o) in rows {
        let mut row = Vec::new();
        for (k, value) in &o.metrics {
            let text = match value {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            if width(&text) > WIDEST_CELL {
                long.push((v.name.to_owned(), k.clone(), text));
                continue;
            }
            if !columns.contains(k) {
                columns.push(k.clone());
            }
            row.push((k.clone(), text));
        }
        if let Some(id) = o.voucher_id {
            row.push(("voucher".to_owned(), id.to_string()));
        }
        cells.push(row);
    }
    if cells.iter().any(|r| r.iter().any(|(k, _)| k == "voucher")) {
        columns.push("voucher".to_owned());
    }
    let result = |v: &Version, o: &Outcome| -> &'static str {
        match (o.held, v.holds) {
            (true, true) => lang.pick("守住", "held"),
            (false, false) => lang.pick("失败（如课程所说）", "failed (as taught)"),
            (true, false) => lang.pick("守住（本该失败！）", "held (should fail!)"),
            (false, true) => lang.pick("失败（本该守住！）", "FAILED (should hold!)"),
        }
    };
    // Every column as (header, a cell per row); the first two stay in every part.
    let mut all: Vec<(String, Vec<String>)> = vec![
        (
            lang.pick("版本", "version").to_owned(),
            rows.iter().map(|(v, _)| v.name.to_owned()).collect(),
        ),
        (
            lang.pick("结果", "result").to_owned(),
            rows.iter().map(|(v, o)| result(v, o).to_owned()).collect(),
        ),
    ];
    for c in &columns {
        let values = cells
            .iter()
            .map(|r| {
                r.iter()
                    .find(|(k, _)| k == c)
                    .map_or("–".to_owned(), |(_, v)| v.clone())
            })
            .collect();
        all.push((c.clone(), values));
    }
    let col_w = |(h, vs): &(String, Vec<String>)| {
        vs.iter()
            .map(|v| width(v))
            .chain([width(h)])
            .max()
            .unwrap_or(0)
    };
    // Parts: the version column, then as many further columns as fit.
    let mut parts: Vec<Vec<usize>> = Vec::new();
    let first_w = col_w(&all[0]);
    let mut part = vec![0];
    let mut used = first_w;
    for (i, column) in all.iter().enumerate().skip(1) {
        let w = col_w(column);
        if part.len() > 1 && used + 2 + w > COLUMNS {
            parts.push(std::mem::replace(&mut part, vec![0]));
            used = first_w;
        }
        part.push(i);
        used += 2 + w;
    }
    parts.push(part);

    let mut lines = Vec::new();
    for (n, part) in parts.iter().enumerate() {
        if n > 0 {
            lines.push(String::new());
        }
        let widths: Vec<usize> = part.iter().map(|&i| col_w(&all[i])).collect();
        let row = |cells: Vec<&str>| -> String {
            cells
                .iter()
                .zip(&widths)
                .map(|(c, w)| pad(c, *w))
                .collect::<Vec<_>>()
                .join("  ")
        };
        lines.push(row(part.iter().map(|&i| all[i].0.as_str()).collect()));
        lines.push(
            widths
                .iter()
                .map(|w| "-".repeat(*w))
                .collect::<Vec<_>>()
                .join("  "),
        );
        for r in 0..rows.len() {
            lines.push(row(part.iter().map(|&i| all[i].1[r].as_str()).collect()));
        }
    }
    (lines, long)
}

//! The documentation's promises, checked against the tree: every relative link in the Markdown a
//! reader starts from (README.md, README.zh-CN.md, ARCHITECTURE.md, BENCHMARKS.md and the book
//! under docs/) names a file or folder that exists, and every `hmdp-lab run NAME…` they show
//! names only experiments that `hmdp-lab list` knows. Anchors (`#…`) are not checked: headings
//! change wording more often than files move, and a stale anchor still lands on the right page.

use std::path::{Path, PathBuf};

use hmdp_lab::experiments;
use regex::Regex;

/// The repository's root (this crate is `crates/hmdp-lab`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The documents checked: the four at the root (each must exist) and every `.md` under docs/.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs: Vec<PathBuf> = [
        "README.md",
        "README.zh-CN.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
    ]
    .iter()
    .map(|name| root.join(name))
    .collect();
    for doc in &docs {
        assert!(doc.is_file(), "{} is missing", doc.display());
    }
    let book = root.join("docs");
    let before = docs.len();
    collect_markdown(&book, &mut docs);
    assert!(
        docs.len() > before,
        "docs/ holds no Markdown: the book is missing"
    );
    docs
}

fn collect_markdown(dir: &Path, into: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_markdown(&path, into);
        } else if path.extension().is_some_and(|ext| ext == "md") {
            into.push(path);
        }
    }
}

/// One thing wrong in a document, for the failure message.
fn problem(doc: &Path, line: usize, what: String) -> String {
    let shown = doc.strip_prefix(root()).unwrap_or(doc);
    format!("{}:{line}: {what}", shown.display())
}

/// `line` without its inline code spans (a run of backticks up to the next run of the same
/// length), so that code like `a[i](x)` is not read as a link. A span never crosses a line here;
/// the documents do not write one that does.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].len() - rest[start..].trim_start_matches('`').len();
        let fence = &rest[start..start + ticks];
        let after = &rest[start + ticks..];
        // The closing run must be exactly as long as the opening one.
        let mut search = 0;
        let close = loop {
            match after[search..].find(fence) {
                Some(i) => {
                    let at = search + i;
                    let run = after[at..].len() - after[at..].trim_start_matches('`').len();
                    if run == ticks {
                        break Some(at);
                    }
                    search = at + run;
                }
                None => break None,
            }
        };
        match close {
            Some(at) => rest = &after[at + ticks..],
            // An unmatched run is literal text (CommonMark), not code.
            None => {
                out.push_str(fence);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Every link target in `text` that is not inside code, with its line number: inline links and
/// images `[text](target "title")`, reference definitions `[label]: target`, and HTML
/// `href="…"` / `src="…"`.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    // `](`, an optional `<`, the target up to whitespace, `)` or `>`.
    let inline = Regex::new(r#"\]\(\s*<?([^)\s>]+)"#).unwrap();
    // A line that is only `[label]: target` (up to three spaces of indent).
    let definition = Regex::new(r#"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)"#).unwrap();
    let html = Regex::new(r#"(?:href|src)\s*=\s*"([^"]+)""#).unwrap();
    let mut targets = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        // Fenced code blocks (``` or ~~~) are skipped whole.
        match fence {
            Some(open) => {
                if trimmed.starts_with(open) {
                    fence = None;
                }
                continue;
            }
            None if trimmed.starts_with("```") => {
                fence = Some("```");
                continue;
            }
            None if trimmed.starts_with("~~~") => {
                fence = Some("~~~");
                continue;
            }
            None => {}
        }
        let line = without_code_spans(line);
        for re in [&inline, &definition, &html] {
            for found in re.captures_iter(&line) {
                targets.push((i + 1, found[1].to_owned()));
            }
        }
    }
    targets
}

/// What is wrong with the relative links of `doc`, whose text is `text`.
fn broken_links(doc: &Path, text: &str) -> Vec<String> {
    let scheme = Regex::new(r"^[A-Za-z][A-Za-z0-9+.-]*:").unwrap();
    let dir = doc.parent().unwrap();
    let mut problems = Vec::new();
    for (line, target) in link_targets(text) {
        // Other sites, mail, and anchors within this document are not files of the tree.
        if scheme.is_match(&target) || target.starts_with('#') {
            continue;
        }
        let path = target.split(['#', '?']).next().unwrap_or_default();
        if path.starts_with('/') {
            problems.push(problem(
                doc,
                line,
                format!("{target}: a link from the root does not resolve on every viewer; write it relative to this file"),
            ));
        } else if !dir.join(path).exists() {
            problems.push(problem(
                doc,
                line,
                format!("{target}: no such file or folder"),
            ));
        }
    }
    problems
}

/// Every `hmdp-lab run …` (also `hmdp-lab -- run …`, as after `cargo run -p hmdp-lab`) in `text`,
/// code included, with its line and the experiment names it gives. The arguments end at the end
/// of the line, a backtick, a shell comment or operator, or the first non-ASCII character (the
/// prose around a command). Flags are left out, with the value of those that take one;
/// placeholders (`NAME…`, `<name>`) are not names.
fn lab_runs(text: &str) -> Vec<(usize, Vec<String>)> {
    let command = Regex::new(r"hmdp-lab(?:[ \t]+--)?[ \t]+run\b([^\n`#|;&\\)]*)").unwrap();
    let mut runs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for found in command.captures_iter(line) {
            let args = &found[1];
            let args = args
                .char_indices()
                .find(|&(_, c)| !c.is_ascii() && c != '…')
                .map_or(args, |(at, _)| &args[..at]);
            let mut names = Vec::new();
            let mut tokens = args.split_whitespace();
            while let Some(token) = tokens.next() {
                if token.starts_with('-') {
                    if matches!(token, "--redis-url" | "--database-url" | "--amqp-url") {
                        tokens.next();
                    }
                    continue;
                }
                let bare = token.trim_end_matches(['…', '.']);
                let placeholder = (bare.starts_with('<') && bare.ends_with('>'))
                    || (!bare.is_empty()
                        && bare.chars().all(|c| c.is_ascii_uppercase() || c == '_'));
                if !placeholder {
                    names.push(token.to_owned());
                }
            }
            runs.push((i + 1, names));
        }
    }
    runs
}

/// What is wrong with the `hmdp-lab run` commands of `doc`, given the experiments' names.
fn unknown_experiments(doc: &Path, text: &str, known: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    for (line, names) in lab_runs(text) {
        for name in names {
            if name != "all" && !known.contains(&name.as_str()) {
                problems.push(problem(
                    doc,
                    line,
                    format!(
                        "`hmdp-lab run {name}`: no such experiment (`hmdp-lab list` knows {})",
                        known.join(", ")
                    ),
                ));
            }
        }
    }
    problems
}

fn known_experiments() -> Vec<&'static str> {
    experiments::ALL.iter().map(|e| e.name).collect()
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let mut problems = Vec::new();
    let mut links = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        links += link_targets(&text).len();
        problems.extend(broken_links(&doc, &text));
    }
    assert!(links > 0, "no link found: the link reader is broken");
    assert!(
        problems.is_empty(),
        "links that do not resolve:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_experiment_the_docs_run_is_one_hmdp_lab_knows() {
    let known = known_experiments();
    let mut problems = Vec::new();
    let mut runs = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        runs += lab_runs(&text).len();
        problems.extend(unknown_experiments(&doc, &text, &known));
    }
    assert!(
        runs > 0,
        "no `hmdp-lab run` command found in the docs: the command reader is broken"
    );
    assert!(
        problems.is_empty(),
        "experiments the docs run that `hmdp-lab list` does not know:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checks_find_what_is_wrong() {
    let doc = root().join("docs").join("example.md");
    let text = "\
[ok](../README.md) [gone](no-such-file.md#x) ![img](../nowhere.svg)
[root](/README.md) [site](https://example.com/x.md) [here](#anchor)
`[code](not-a-link.md)` and ``[two](ticks.md)``
[def]: ../ARCHITECTURE.md
[bad-def]: missing/
<a href=\"gone.html\">x</a>
```
[fenced](not-a-link-either.md)
hmdp-lab run oversell no-such-experiment --json
```
cargo run -p hmdp-lab -- run --database-url sqlite://x.db oversell `hmdp-lab run NAME…`
运行 `hmdp-lab run all` 或 hmdp-lab run oversell 即可。
";
    let links: Vec<String> = broken_links(&doc, text)
        .iter()
        .map(|p| p.split(": ").nth(1).unwrap().to_owned())
        .collect();
    assert_eq!(
        links,
        [
            "no-such-file.md#x",
            "../nowhere.svg",
            "/README.md",
            "missing/",
            "gone.html"
        ],
        "{links:?}"
    );
    let runs: Vec<Vec<String>> = lab_runs(text).into_iter().map(|(_, names)| names).collect();
    assert_eq!(
        runs,
        [
            vec!["oversell", "no-such-experiment"],
            vec!["oversell"],
            vec![],
            vec!["all"],
            vec!["oversell"],
        ]
    );
    let problems = unknown_experiments(&doc, text, &["oversell"]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("no-such-experiment"), "{problems:?}");
    assert!(problems[0].contains(":9:"), "{problems:?}");
}

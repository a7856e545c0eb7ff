//! The documentation's promises, checked against the tree: every relative link in the Markdown a
//! reader starts from (README.md, README.zh-CN.md, ARCHITECTURE.md, BENCHMARKS.md and the book
//! under docs/) names a file or folder that exists, and every `hmdp-lab run NAME…` they show
//! names only experiments that `hmdp-lab list` knows. Anchors (`#…`) are not checked: headings
//! change wording more often than files move, and a stale anchor still lands on the right page.
//! Line anchors are the exception: a code block quoted from the tree, whose caption links to the
//! lines it shows (`[file](file#L10-L20)` on the line directly above the fence), must equal those
//! lines, so that the quote goes red when the source moves instead of teaching stale code.

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

/// A fenced code block whose caption (the line directly above its opening fence) links to lines
/// of a file: `[crates/x.rs](../crates/x.rs#L40-L72)`, or `#L40` for one line.
struct Quote {
    /// The caption's line in the document.
    line: usize,
    /// The caption's link targets that carry a line range (a quote has exactly one).
    targets: Vec<String>,
    /// The block's lines, without the indentation of its fence.
    body: Vec<String>,
}

/// `#L<a>` or `#L<a>-L<b>` at the end of a link target: the path and the range, 1-based, inclusive.
fn line_range(target: &str) -> Option<(&str, usize, usize)> {
    let range = Regex::new(r"^([^#]*)#L([0-9]+)(?:-L([0-9]+))?$").unwrap();
    let found = range.captures(target)?;
    let first: usize = found[2].parse().ok()?;
    let last: usize = match found.get(3) {
        Some(last) => last.as_str().parse().ok()?,
        None => first,
    };
    Some((found.get(1).unwrap().as_str(), first, last))
}

/// Every quote in `text`. A fence opens with three or more backticks or tildes (indented any
/// amount, as inside a list item) and closes with a run of the same character at least as long;
/// blocks whose caption links to no line range are not quotes (the course's own code, shell
/// sessions).
fn quotes(text: &str) -> Vec<Quote> {
    let inline = Regex::new(r#"\]\(\s*<?([^)\s>]+)"#).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start_matches(' ').len();
        let trimmed = &line[indent..];
        let mark = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let run = mark.map_or(0, |c| trimmed.len() - trimmed.trim_start_matches(c).len());
        if run < 3 {
            i += 1;
            continue;
        }
        let mark = mark.unwrap();
        let closes = |l: &str| {
            let t = l.trim_start_matches(' ');
            let r = t.len() - t.trim_start_matches(mark).len();
            r >= run && t[r..].trim().is_empty()
        };
        let mut end = i + 1;
        while end < lines.len() && !closes(lines[end]) {
            end += 1;
        }
        if i > 0 {
            let caption = without_code_spans(lines[i - 1]);
            let targets: Vec<String> = inline
                .captures_iter(&caption)
                .map(|c| c[1].to_owned())
                .filter(|target| line_range(target).is_some())
                .collect();
            if !targets.is_empty() {
                let body = lines[i + 1..end.min(lines.len())]
                    .iter()
                    .map(|l| {
                        let strip = l.len() - l.trim_start_matches(' ').len();
                        l[strip.min(indent)..].to_owned()
                    })
                    .collect();
                found.push(Quote {
                    line: i,
                    targets,
                    body,
                });
            }
        }
        i = end + 1;
    }
    found
}

/// `lines` without their common leading indentation and trailing whitespace; blank lines are
/// empty and do not count towards the common indentation.
fn dedented<S: AsRef<str>>(lines: &[S]) -> Vec<String> {
    let common = lines
        .iter()
        .map(AsRef::as_ref)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| {
            let l = l.as_ref().trim_end();
            l.get(common..).unwrap_or_default().to_owned()
        })
        .collect()
}

/// What is wrong with the quotes of `doc`: a caption with more than one range, a range outside
/// its file, or a block that is not exactly the lines it links to (less their common indentation).
fn wrong_quotes(doc: &Path, text: &str) -> Vec<String> {
    let dir = doc.parent().unwrap();
    let mut problems = Vec::new();
    for quote in quotes(text) {
        let [target] = quote.targets.as_slice() else {
            problems.push(problem(
                doc,
                quote.line,
                format!(
                    "the caption links to {} line ranges ({}); a quote shows one",
                    quote.targets.len(),
                    quote.targets.join(", ")
                ),
            ));
            continue;
        };
        let (path, first, last) = line_range(target).unwrap();
        // A missing file or a link from the root is the link check's to report.
        let Ok(source) = std::fs::read_to_string(dir.join(path)) else {
            continue;
        };
        let source: Vec<&str> = source.lines().collect();
        if first == 0 || last < first || last > source.len() {
            problems.push(problem(
                doc,
                quote.line,
                format!(
                    "{target}: {path} has {} lines; the range is not in it",
                    source.len()
                ),
            ));
            continue;
        }
        let expected = dedented(&source[first - 1..last]);
        let shown: Vec<String> = quote.body.iter().map(|l| l.trim_end().to_owned()).collect();
        if shown == expected {
            continue;
        }
        let at = shown
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(shown.len().min(expected.len()));
        let what = match (shown.get(at), expected.get(at)) {
            (Some(a), Some(b)) => format!(
                "line {} of the quote reads `{a}`, line {} of the source reads `{b}`",
                at + 1,
                first + at
            ),
            (Some(a), None) => format!(
                "the quote has {} lines, the range {}; it goes on with `{a}`",
                shown.len(),
                expected.len()
            ),
            (None, Some(b)) => format!(
                "the quote has {} lines, the range {}; the source goes on with `{b}`",
                shown.len(),
                expected.len()
            ),
            (None, None) => unreachable!(),
        };
        problems.push(problem(
            doc,
            quote.line,
            format!("{target}: the quote differs from the source: {what}"),
        ));
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

#[test]
fn every_quote_in_the_docs_equals_the_lines_it_links_to() {
    let mut problems = Vec::new();
    let mut count = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        count += quotes(&text).len();
        problems.extend(wrong_quotes(&doc, &text));
    }
    assert!(
        count > 0,
        "no quote of the source found in the docs: the quote reader is broken"
    );
    assert!(
        problems.is_empty(),
        "quotes that no longer match the source they link to:\n{}\n\
         (if only the lines moved, `python3 scripts/requote.py` re-points the ranges)",
        problems.join("\n")
    );
}

#[test]
fn the_quote_check_finds_a_wrong_quote() {
    // This file quotes itself: the lines of `collect_markdown` that choose a folder or a page.
    let this = std::fs::read_to_string(root().join("crates/hmdp-lab/tests/docs.rs")).unwrap();
    let first = 1 + this
        .lines()
        .position(|l| l == "        if path.is_dir() {")
        .expect("collect_markdown moved: pick other lines to quote");
    let (a, b) = (first, first + 2);
    let link = "../crates/hmdp-lab/tests/docs.rs";
    let doc = root().join("docs").join("example.md");
    let text = format!(
        "\
右边对上了 [docs.rs]({link}#L{a}-L{b})：
```rust
if path.is_dir() {{
    collect_markdown(&path, into);
}} else if path.extension().is_some_and(|ext| ext == \"md\") {{
```
缩进被改了 [docs.rs]({link}#L{a}-L{b})
```rust
if path.is_dir() {{
collect_markdown(&path, into);
}} else if path.extension().is_some_and(|ext| ext == \"md\") {{
```
少了一行 [docs.rs]({link}#L{a}-L{b})
```rust
if path.is_dir() {{
    collect_markdown(&path, into);
```
范围超出文件 [docs.rs]({link}#L{a}-L99999)
```rust
if path.is_dir() {{
```
两个范围 [docs.rs]({link}#L{a}) [docs.rs]({link}#L{b})
```rust
if path.is_dir() {{
```
  - 列表里缩进的围栏也核对 [docs.rs]({link}#L{a})
    ````rust
    if path.is_dir() {{
    ````
不算引用：没有行号 [docs.rs]({link})
```rust
not the source
```
不算引用：说明和代码之间空了一行 [docs.rs]({link}#L{a})

```rust
not the source either
```
`[code]({link}#L{a})` 代码里的链接不算
```rust
nor this
```
"
    );
    let found = quotes(&text);
    assert_eq!(
        found.len(),
        6,
        "{:?}",
        found.iter().map(|q| q.line).collect::<Vec<_>>()
    );
    let problems = wrong_quotes(&doc, &text);
    let lines: Vec<&str> = problems
        .iter()
        .map(|p| p.split(':').nth(1).unwrap())
        .collect();
    assert_eq!(lines, ["7", "13", "18", "22"], "{problems:#?}");
    assert!(
        problems[0].contains("line 2 of the quote reads `collect_markdown"),
        "{problems:?}"
    );
    assert!(
        problems[1].contains("the quote has 2 lines, the range 3"),
        "{problems:?}"
    );
    assert!(
        problems[2].contains("the range is not in it"),
        "{problems:?}"
    );
    assert!(problems[3].contains("2 line ranges"), "{problems:?}");
}

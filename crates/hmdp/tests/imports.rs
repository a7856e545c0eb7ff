//! The import rules ARCHITECTURE.md states, checked against the source: its table "The service's
//! rooms, bottom to top" names every top-level module of `crates/hmdp/src` and, for each, the
//! rooms it may import. A room may name only rooms listed above it, so the table is an order and
//! the modules cannot form a cycle; every `crate::…` path in a room's files must be allowed by
//! its row. The map and the code can then only change together.
//!
//! Paths are read as text (comments removed, `use crate::{a, b::c}` groups opened), which is
//! enough because the crate reaches other rooms through `crate::` only.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One row of the rooms table: the rooms it names and the rooms they may import.
#[derive(Debug)]
struct Row {
    rooms: Vec<String>,
    may_import: Allowed,
}

#[derive(Debug)]
enum Allowed {
    Rooms(BTreeSet<String>),
    EverythingAbove,
}

/// Every name in backticks in a table cell, without a trailing `/`.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|name| name.trim_end_matches('/').to_owned())
        .collect()
}

/// The rooms table of ARCHITECTURE.md, in its order.
fn map() -> Vec<Row> {
    let text = std::fs::read_to_string(manifest_dir().join("../../ARCHITECTURE.md")).unwrap();
    let section = text
        .split("### The service's rooms, bottom to top")
        .nth(1)
        .expect("ARCHITECTURE.md has the section \"The service's rooms, bottom to top\"");
    let mut rows = Vec::new();
    for line in section.lines().skip_while(|l| !l.starts_with('|')) {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let (first, last) = (cells[0], cells[cells.len() - 1]);
        if first == "module" || first.starts_with("---") {
            continue;
        }
        let may_import = if last.contains("everything") {
            Allowed::EverythingAbove
        } else {
            Allowed::Rooms(ticked(last).into_iter().collect())
        };
        rows.push(Row {
            rooms: ticked(first),
            may_import,
        });
    }
    assert!(
        !rows.is_empty(),
        "the rooms table of ARCHITECTURE.md is empty"
    );
    rows
}

/// The top-level modules of the crate: each file or folder of `src/` but `lib.rs`/`main.rs`.
fn rooms_in_source() -> BTreeSet<String> {
    std::fs::read_dir(manifest_dir().join("src"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            if p.is_dir() {
                Some(name)
            } else {
                let stem = name.strip_suffix(".rs")?;
                (stem != "lib" && stem != "main").then(|| stem.to_owned())
            }
        })
        .collect()
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The source without its comments (doc links such as [`crate::seckill`] are not imports).
fn without_comments(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find('/') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("//") {
            rest = tail.find('\n').map_or("", |end| &tail[end..]);
        } else if tail.starts_with("/*") {
            rest = tail.find("*/").map_or("", |end| &tail[end + 2..]);
        } else {
            out.push('/');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The first segment of every path that starts with `crate::`, groups opened.
fn crate_paths(src: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 || (depth == 1 && c == ',') {
                    found.push(first_segment(&item));
                    item.clear();
                    if depth == 0 {
                        break;
                    }
                } else {
                    item.push(c);
                }
            }
        } else {
            found.push(first_segment(rest));
        }
    }
    found
}

fn first_segment(path: &str) -> String {
    path.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

#[test]
fn the_rooms_import_only_what_architecture_allows() {
    let rows = map();
    let in_source = rooms_in_source();

    let mut allowed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut above: BTreeSet<String> = BTreeSet::new();
    let mut problems = Vec::new();
    for row in &rows {
        let may = match &row.may_import {
            Allowed::EverythingAbove => above.clone(),
            Allowed::Rooms(rooms) => {
                for r in rooms.difference(&above) {
                    problems.push(format!(
                        "the map lets {:?} import `{r}`, which is not listed above it",
                        row.rooms
                    ));
                }
                rooms.clone()
            }
        };
        for room in &row.rooms {
            allowed.insert(room.clone(), may.clone());
        }
        above.extend(row.rooms.iter().cloned());
    }
    for room in &in_source {
        if !allowed.contains_key(room) {
            problems.push(format!(
                "`{room}` is a module of the crate but not in the map"
            ));
        }
    }
    for room in allowed.keys() {
        if !in_source.contains(room) {
            problems.push(format!(
                "the map names `{room}`, which the crate does not have"
            ));
        }
    }

    let src = manifest_dir().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let room = first.trim_end_matches(".rs");
        let Some(may) = allowed.get(room) else {
            continue;
        };
        let text = without_comments(&std::fs::read_to_string(&file).unwrap());
        let used: BTreeSet<String> = crate_paths(&text)
            .into_iter()
            .filter(|name| name != room && in_source.contains(name))
            .collect();
        for name in used.difference(may) {
            problems.push(format!(
                "src/{} imports `crate::{name}`, which ARCHITECTURE.md does not let `{room}` import",
                rel.display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn paths_are_read_through_groups_and_past_comments() {
    let src = without_comments(
        "use crate::{kv::{Keys, RedisConn}, storage::Db};\n// crate::http\n/* crate::startup */\nlet x = crate::domain::UserId(1); // a/b",
    );
    assert_eq!(crate_paths(&src), ["kv", "storage", "domain"]);
}

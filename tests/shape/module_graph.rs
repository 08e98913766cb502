//! In no crate does a module import, through a chain of others, a module that imports it. A
//! module reaching up to an ancestor (a `mod.rs` is its folder's front) or down to its own
//! children is not a circle; two modules that need each other are, and should become one, or
//! give the shared part a module of its own.
//!
//! Edges are the `crate::…` and `super::…` paths in a module's code (not its comments, not its
//! unit tests), each resolved to the deepest module file it names.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::sources::{before_unit_tests, rust_files, source_roots};

/// A module by its path inside its crate (`["programs", "campaign", "run"]`).
type ModulePath = Vec<String>;

/// Every module file under `src`, by module path (`lib.rs`/`main.rs` is the empty path).
fn modules(src: &Path) -> BTreeMap<ModulePath, PathBuf> {
    let mut found = BTreeMap::new();
    for path in rust_files(src) {
        let relative = path.strip_prefix(src).unwrap().with_extension("");
        let mut module: ModulePath = relative
            .iter()
            .map(|part| part.to_string_lossy().into_owned())
            .collect();
        if matches!(
            module.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            module.pop();
        }
        // A binary's own tree (src/bin/x.rs, src/programs/...) is keyed the same way:
        // each is its own crate root, but the files are distinct, so keys stay distinct.
        found.insert(module, path);
    }
    found
}

/// The code of `file` before its unit tests, without comments.
fn code(file: &Path) -> Vec<String> {
    before_unit_tests(file)
        .lines()
        .map(str::trim_start)
        .filter(|line| !line.starts_with("//"))
        .map(|line| line.split("//").next().unwrap().to_owned())
        .collect()
}

/// The segments of each `crate::…` or `super::…` path in `line`, with how it starts.
fn paths(line: &str) -> Vec<(bool, Vec<String>)> {
    let mut found = Vec::new();
    for (start, is_crate) in [("crate::", true), ("super::", false)] {
        for (at, _) in line.match_indices(start) {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut segments = Vec::new();
            let mut rest = &line[at + start.len()..];
            // `super::super::x` climbs twice.
            if !is_crate {
                segments.push("super".to_owned());
                while let Some(more) = rest.strip_prefix("super::") {
                    segments.push("super".to_owned());
                    rest = more;
                }
            }
            for segment in rest.split("::") {
                let name: String = segment
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.is_empty() {
                    break;
                }
                let whole = name.len() == segment.len();
                segments.push(name);
                if !whole {
                    break;
                }
            }
            found.push((is_crate, segments));
        }
    }
    found
}

/// The deepest module of `modules` that `path`, seen from `from`, names.
fn resolve(
    modules: &BTreeMap<ModulePath, PathBuf>,
    from: &ModulePath,
    is_crate: bool,
    segments: &[String],
) -> Option<ModulePath> {
    let mut base: ModulePath = if is_crate { Vec::new() } else { from.clone() };
    let mut rest = segments;
    while let Some((first, more)) = rest.split_first() {
        if first != "super" {
            break;
        }
        base.pop()?;
        rest = more;
    }
    let mut deepest = None;
    let mut candidate = base.clone();
    if modules.contains_key(&candidate) {
        deepest = Some(candidate.clone());
    }
    for segment in rest {
        candidate.push(segment.clone());
        if !modules.contains_key(&candidate) {
            break;
        }
        deepest = Some(candidate.clone());
    }
    deepest
}

fn is_prefix(a: &ModulePath, b: &ModulePath) -> bool {
    a.len() <= b.len() && a[..] == b[..a.len()]
}

/// The import edges between modules of one crate, neither an ancestor of the other.
fn edges(src: &Path) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let modules = modules(src);
    let mut edges: BTreeMap<ModulePath, BTreeSet<ModulePath>> = BTreeMap::new();
    for (module, file) in &modules {
        for line in code(file) {
            for (is_crate, segments) in paths(&line) {
                let Some(target) = resolve(&modules, module, is_crate, &segments) else {
                    continue;
                };
                if is_prefix(&target, module) || is_prefix(module, &target) {
                    continue;
                }
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    edges
}

/// A circle of imports, if there is one.
fn circle(edges: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Option<Vec<ModulePath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &ModulePath,
        edges: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
        marks: &mut BTreeMap<ModulePath, Mark>,
        stack: &mut Vec<ModulePath>,
    ) -> Option<Vec<ModulePath>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|n| n == node).unwrap();
                return Some(stack[from..].to_vec());
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, marks, stack) {
                return Some(found);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut marks, &mut Vec::new()))
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut circles = Vec::new();
    for src in source_roots() {
        if let Some(found) = circle(&edges(&src)) {
            let names: Vec<String> = found.iter().map(|m| m.join("::")).collect();
            circles.push(format!("{}: {}", src.display(), names.join(" → ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// The check finds a circle where there is one, and none where modules only reach up.
#[test]
fn the_check_sees_a_circle_between_siblings_and_not_up_to_a_parent() {
    let dir = std::env::temp_dir().join(format!("module-graph-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("campaign")).unwrap();
    let write = |file: &str, text: &str| fs::write(src.join(file), text).unwrap();
    write("lib.rs", "mod campaign;\nmod item;\nmod table;\n");
    write(
        "item.rs",
        "use crate::table::Table; // a comment: crate::nothing\n",
    );
    write("table.rs", "pub struct Table;\n");
    write("campaign/mod.rs", "mod run;\npub struct Services;\n");
    write(
        "campaign/run.rs",
        "use super::Services;\nuse crate::item;\n",
    );
    assert_eq!(circle(&edges(&src)), None);

    write(
        "table.rs",
        "use crate::item::Item;\n#[cfg(test)]\nuse crate::campaign::run;\n",
    );
    let found = circle(&edges(&src)).expect("item → table → item");
    let names: BTreeSet<String> = found.iter().map(|m| m.join("::")).collect();
    assert_eq!(names, BTreeSet::from(["item".into(), "table".into()]));
    fs::remove_dir_all(dir).unwrap();
}

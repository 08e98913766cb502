//! No function outside tests is longer than [`LIMIT`] lines: a longer one is a script to be
//! cut into named steps. Functions are found in rustfmt's layout: a line that starts an item
//! `fn` and the first later line that closes it at the same indentation.

use std::path::{Path, PathBuf};

use crate::sources::{before_unit_tests, rust_files, workspace};

const LIMIT: usize = 80;

/// Every file of code that is not a test: each crate's `src` and `benches`, and the examples
/// (not their `tests`).
fn code_files() -> Vec<PathBuf> {
    let root = workspace();
    let mut folders = vec![root.join("src"), root.join("examples")];
    for parent in ["crates", "examples"] {
        let Ok(entries) = std::fs::read_dir(root.join(parent)) else {
            continue;
        };
        for entry in entries {
            let crate_dir = entry.unwrap().path();
            folders.extend(["src", "benches"].map(|folder| crate_dir.join(folder)));
        }
    }
    let mut files: Vec<PathBuf> = folders
        .iter()
        .flat_map(|f| rust_files(f))
        .filter(|file| !file.components().any(|part| part.as_os_str() == "tests"))
        .collect();
    files.sort();
    files.dedup();
    files
}

/// The name of the function `line` starts, if it starts one with a body.
fn function_name(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    for qualifier in [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
    ] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let rest = rest.strip_prefix("fn ")?;
    if line.trim_end().ends_with(';') {
        return None;
    }
    let name = rest
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .next()?;
    (!name.is_empty()).then_some(name)
}

/// Each function of `text` with its length in lines, signature and closing brace included.
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = function_name(line) else {
            continue;
        };
        if line.trim_end().ends_with('}') && line.matches('{').count() == line.matches('}').count()
        {
            found.push((name.to_owned(), 1));
            continue;
        }
        // A declaration whose signature runs over several lines (a trait's method) ends in
        // `;` before any body opens.
        let declaration = lines[start..]
            .iter()
            .map(|l| l.trim_end())
            .find(|l| l.ends_with(';') || l.ends_with('{'))
            .is_some_and(|l| l.ends_with(';'));
        if declaration {
            continue;
        }
        let indent = &line[..line.len() - line.trim_start().len()];
        let closing = format!("{indent}}}");
        if let Some(end) = lines[start..].iter().position(|l| *l == closing) {
            found.push((name.to_owned(), end + 1));
        }
    }
    found
}

fn relative(file: &Path) -> String {
    file.strip_prefix(workspace())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn no_function_outside_tests_is_longer_than_the_limit() {
    let mut report = Vec::new();
    for file in code_files() {
        for (name, lines) in function_lengths(&before_unit_tests(&file)) {
            if lines > LIMIT {
                report.push(format!("{}: fn {name} is {lines} lines", relative(&file)));
            }
        }
    }
    assert!(report.is_empty(), "{}", report.join("\n"));
}

#[test]
fn the_check_measures_a_function_from_its_signature_to_its_closing_brace() {
    let text = "pub async fn settle(\n    a: u32,\n) -> u32 {\n    a\n}\n\n    fn nested() {}\n\
                trait T {\n    fn declared(&self);\n    fn provided(&self) {\n        let _ = 1;\n    }\n}\n";
    assert_eq!(
        function_lengths(text),
        [("settle", 5), ("nested", 1), ("provided", 3)]
            .map(|(name, lines)| (name.to_owned(), lines))
    );
}

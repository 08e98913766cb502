//! The README's "First steps" (a lease, a store, a claim, a confirm, a release) names at most
//! [`LIMIT`] of the library's types and calls: what a newcomer must learn before the first
//! fenced write. The standard library's names (`parse`, `Some`, `Vec`, …) are not counted.

use std::collections::BTreeSet;

use crate::sources::workspace;

const LIMIT: usize = 12;

/// Names the block may use without counting: the standard library's and the language's.
const STANDARD: [&str; 12] = [
    "Some", "None", "Ok", "Err", "Vec", "String", "Option", "Arc", "parse", "expect", "default",
    "unwrap",
];

/// The first Rust block under the README's "## First steps", without its comments and its
/// `use` lines.
fn first_steps(readme: &str) -> String {
    let section = &readme[readme
        .find("## First steps")
        .expect("the README has first steps")..];
    let block = &section[section.find("```rust").expect("with a Rust block") + 7..];
    let block = &block[..block.find("```").expect("that ends")];
    block
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .filter(|line| !line.trim_start().starts_with("use "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The library names in `code`: capitalised identifiers (types) and identifiers called as a
/// method or an associated function (`.name(` or `::name(`).
fn library_names(code: &str) -> BTreeSet<String> {
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut names = BTreeSet::new();
    let mut at = 0;
    while at < bytes.len() {
        if !(bytes[at].is_ascii_alphabetic() || bytes[at] == b'_') {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && is_ident(bytes[at]) {
            at += 1;
        }
        let name = &code[start..at];
        let called = bytes.get(at) == Some(&b'(')
            && (code[..start].ends_with('.') || code[..start].ends_with("::"));
        let in_string = code[..start].matches('"').count() % 2 == 1;
        let counted = (called || name.starts_with(char::is_uppercase)) && !in_string;
        if counted && !STANDARD.contains(&name) {
            names.insert(name.to_owned());
        }
    }
    names
}

#[test]
fn the_first_steps_name_at_most_twelve_of_the_librarys_types_and_calls() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let names = library_names(&first_steps(&readme));
    assert!(
        names.contains("try_acquire") && names.contains("release"),
        "the block acquires and releases: {names:?}"
    );
    assert!(names.len() <= LIMIT, "{} names: {names:?}", names.len());
}

#[test]
fn types_and_calls_are_counted_once_and_strings_and_the_standard_library_not() {
    let names = library_names(
        "let a = Lease::new(); a.write(Some(\"X\".parse()?)); a.write(Vec::new()); let b = c;",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["Lease", "new", "write"]
    );
}

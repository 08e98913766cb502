//! The README's "First steps" (a lease, a store, a claim, a confirm, a release) needs at most
//! [`LIMIT`] of the library's types and calls: what a newcomer must learn before the first
//! fenced write. Every one of them is counted, the inferred ones included: the block hides no
//! type behind inference (no `.parse()`, every `let` shows its type or is built by a call on
//! it), and a `?` counts the `Error` it converts into. The standard library's names (`Some`,
//! `Vec`, `clone`, …) are not counted.

use std::collections::BTreeSet;

use crate::sources::workspace;

const LIMIT: usize = 20;

/// Names the block may use without counting: the standard library's and the language's.
const STANDARD: [&str; 12] = [
    "Some", "None", "Ok", "Err", "Vec", "String", "Option", "Arc", "expect", "default", "unwrap",
    "clone",
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

/// What a reader of `code` must understand: its library names, and `Error` where a `?`
/// converts into it.
fn needed(code: &str) -> BTreeSet<String> {
    let mut names = library_names(code);
    if code.contains('?') {
        names.insert("Error".to_owned());
    }
    names
}

/// The bindings of `code` whose type a reader cannot see: a `let` without `: Type` whose value
/// is not built by a call on a type (`Type::new(…)`), and every `.parse()`.
fn hidden_types(code: &str) -> Vec<String> {
    let mut hidden: Vec<String> = code
        .lines()
        .filter_map(|line| line.trim().strip_prefix("let "))
        .filter(|binding| {
            let (name, value) = binding.split_once('=').unwrap_or((binding, ""));
            let value = value.trim();
            let built_by_its_type = value.starts_with(char::is_uppercase) && value.contains("::");
            !name.contains(':') && !built_by_its_type
        })
        .map(|binding| format!("let {binding}"))
        .collect();
    hidden.extend(code.matches(".parse(").map(str::to_owned));
    hidden
}

#[test]
fn the_first_steps_need_at_most_twenty_of_the_librarys_names_and_hide_none() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let block = first_steps(&readme);
    assert_eq!(
        hidden_types(&block),
        Vec::<String>::new(),
        "types hidden by inference"
    );
    let names = needed(&block);
    assert!(
        names.contains("try_acquire") && names.contains("release"),
        "the block acquires and releases: {names:?}"
    );
    assert!(names.len() <= LIMIT, "{} names: {names:?}", names.len());
}

#[test]
fn a_type_left_to_inference_is_found_and_a_question_mark_counts_the_error() {
    let code = "let a = lease.try_acquire(&r, ttl).await?;\nlet b: Holder = a.holder();\n\
                let c = MemoryStore::new(\"x\");\nlet d = \"r_1\".parse()?;";
    assert_eq!(
        hidden_types(code),
        [
            "let a = lease.try_acquire(&r, ttl).await?;",
            "let d = \"r_1\".parse()?;",
            ".parse(",
        ]
    );
    assert!(needed(code).contains("Error"));
    assert!(!needed("let b: Holder = a.holder();").contains("Error"));
}

#[test]
fn types_and_calls_are_counted_once_and_strings_and_the_standard_library_not() {
    let names = library_names(
        "let a = Lease::new(); a.write(Some(\"X\".parse()?)); a.write(Vec::new()); let b = c;",
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["Lease", "new", "parse", "write"]
    );
}

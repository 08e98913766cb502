//! The facade lists the core's job-facing names one by one (so `fencing::adapter` is not among
//! them); the list must stay the core's whole root, or a name the core adds would be missing
//! from `fencing`.

use std::collections::BTreeSet;

use crate::sources::workspace;

/// The names of every `pub use path::{…};` or `pub use path::name;` at the start of a line in
/// `text` whose path starts with `from`.
fn reexported(text: &str, from: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("\npub use ") {
        rest = &rest[at + "\npub use ".len()..];
        let statement = &rest[..rest.find(';').expect("a use ends")];
        if !statement.starts_with(from) {
            continue;
        }
        let list = match (statement.find('{'), statement.rfind('}')) {
            (Some(open), Some(close)) => &statement[open + 1..close],
            _ => statement.rsplit("::").next().unwrap_or_default(),
        };
        names.extend(
            list.split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned),
        );
    }
    names
}

#[test]
fn the_facade_reexports_the_core_root_name_by_name() {
    let read = |path: &str| std::fs::read_to_string(workspace().join(path)).unwrap();
    let core = reexported(&read("crates/fencing-core/src/lib.rs"), "");
    let facade = reexported(&read("src/lib.rs"), "fencing_core::{");
    assert!(core.len() > 40, "the core's root was read: {core:?}");
    assert_eq!(
        facade, core,
        "the facade's list differs from the core's root"
    );
    assert!(!facade.contains("adapter"));
}

//! The prelude's own part of the core stays what a job names: at most [`LIMIT`] names, read
//! from the facade's `prelude` module (the adapters' stores and leases stand beside them), and
//! none of its names takes the place of one of the standard library's prelude.

use crate::sources::workspace;

const LIMIT: usize = 20;

/// The names in the prelude's `pub use fencing_core::{…}`.
fn core_names_in_the_prelude(lib: &str) -> Vec<String> {
    let prelude = &lib[lib
        .find("pub mod prelude")
        .expect("the facade has a prelude")..];
    let list = &prelude[prelude
        .find("pub use fencing_core::{")
        .expect("it re-exports core")..];
    let list = &list[list.find('{').unwrap() + 1..list.find('}').unwrap()];
    list.split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_prelude_brings_at_most_twenty_names_of_the_core() {
    let lib = std::fs::read_to_string(workspace().join("src/lib.rs")).unwrap();
    let names = core_names_in_the_prelude(&lib);
    assert!(
        (1..=LIMIT).contains(&names.len()),
        "{} names: {names:?}",
        names.len()
    );
}

/// The names the standard library's prelude (2021 and 2024) brings into every module: a glob
/// import of ours that brought one of them would take its place without a word.
const STD_PRELUDE: &[&str] = &[
    "AsMut",
    "AsRef",
    "Box",
    "Clone",
    "Copy",
    "Default",
    "DoubleEndedIterator",
    "Drop",
    "Eq",
    "Err",
    "Error",
    "ExactSizeIterator",
    "Extend",
    "Fn",
    "FnMut",
    "FnOnce",
    "From",
    "FromIterator",
    "Future",
    "Into",
    "IntoFuture",
    "IntoIterator",
    "Iterator",
    "None",
    "Ok",
    "Option",
    "Ord",
    "PartialEq",
    "PartialOrd",
    "Result",
    "Send",
    "Sized",
    "Some",
    "String",
    "Sync",
    "ToOwned",
    "ToString",
    "TryFrom",
    "TryInto",
    "Unpin",
    "Vec",
];

/// Every name the prelude module re-exports, adapters' included.
fn every_name_in_the_prelude(lib: &str) -> Vec<String> {
    let start = lib
        .find("pub mod prelude")
        .expect("the facade has a prelude");
    let body = &lib[start..];
    let body = &body[..body.find("\n}\n").expect("the prelude module ends")];
    let mut names = Vec::new();
    for item in body.split("pub use ").skip(1) {
        let item = &item[..item.find(';').expect("a use ends")];
        let listed = match item.find('{') {
            Some(open) => &item[open + 1..item.rfind('}').unwrap()],
            None => item.rsplit("::").next().unwrap(),
        };
        names.extend(
            listed
                .split(',')
                .map(|name| name.trim().rsplit(" as ").next().unwrap().trim())
                .filter(|name| !name.is_empty())
                .map(str::to_owned),
        );
    }
    names
}

#[test]
fn the_prelude_shadows_nothing_of_the_standard_librarys() {
    let lib = std::fs::read_to_string(workspace().join("src/lib.rs")).unwrap();
    let names = every_name_in_the_prelude(&lib);
    assert!(
        names.len() > 20,
        "the prelude's names were not all read: {names:?}"
    );
    let shadowed: Vec<_> = names
        .iter()
        .filter(|name| STD_PRELUDE.contains(&name.as_str()))
        .collect();
    assert!(shadowed.is_empty(), "the prelude shadows {shadowed:?}");
}

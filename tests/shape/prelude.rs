//! The prelude's own part of the core stays what a job names: at most [`LIMIT`] names, read
//! from the facade's `prelude` module (the adapters' stores and leases stand beside them).

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

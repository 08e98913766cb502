//! Core is laid out bottom-up in folders, and no module imports one above it.
//!
//! `src/lib.rs` declares one folder per layer (values, contracts, the protocol's rules,
//! telemetry, the compare-and-swap engine, what a holder writes with, the in-memory
//! implementations, the adapter author's surface), in groups separated by a blank line, bottom
//! first. Each folder's `mod.rs` lays its own modules out the same way. Every `crate::…` and
//! `super::…` path in a module's code (not its comments, not its unit tests) must name a
//! layer of its own or one below, among the folders and, within its folder, among its
//! siblings.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The modules a `lib.rs` or `mod.rs` declares, each with the index of its group.
fn layers_in(file: &Path) -> HashMap<String, usize> {
    let text = fs::read_to_string(file).unwrap();
    let mut layers = HashMap::new();
    let mut layer = 0;
    let mut in_modules = false;
    for line in text.lines() {
        let declared = ["pub mod ", "pub(crate) mod ", "mod "]
            .iter()
            .find_map(|prefix| line.strip_prefix(prefix))
            .and_then(|rest| rest.strip_suffix(';'));
        match declared {
            Some(module) => {
                in_modules = true;
                layers.insert(module.to_owned(), layer);
            }
            None if in_modules && line.trim().is_empty() => layer += 1,
            None if in_modules && line.starts_with("pub use") => break,
            None => {}
        }
    }
    layers
}

/// The source file of `module` under `dir`: `module.rs` or `module/mod.rs`.
fn file_of(dir: &Path, module: &str) -> PathBuf {
    let single = dir.join(format!("{module}.rs"));
    if single.exists() {
        single
    } else {
        dir.join(module).join("mod.rs")
    }
}

/// The first two segments of every `crate::` path in the code of `file` (before its unit
/// tests), with `super::x` in a folder's module read as `crate::folder::x`.
fn imports(file: &Path, folder: Option<&str>) -> Vec<(String, Option<String>)> {
    let text = fs::read_to_string(file).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap();
    let segment = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let line = line.split("//").next().unwrap();
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            let first = segment(rest);
            let second = rest[first.len()..]
                .strip_prefix("::")
                .map(segment)
                .filter(|s| !s.is_empty());
            if !first.is_empty() {
                found.push((first, second));
            }
        }
        if let Some(folder) = folder {
            for (at, _) in line.match_indices("super::") {
                let sibling = segment(&line[at + "super::".len()..]);
                if !sibling.is_empty() && !line[..at].ends_with("crate::") {
                    found.push((folder.to_owned(), Some(sibling)));
                }
            }
        }
    }
    found
}

/// Every import of core that points up: across folders, or between siblings in one.
fn upward_imports() -> Vec<String> {
    let folders = layers_in(&src().join("lib.rs"));
    let mut upward = Vec::new();
    for (folder, &layer) in &folders {
        let root = file_of(&src(), folder);
        let mut files = vec![(root.clone(), None)];
        let siblings = if root.ends_with("mod.rs") {
            layers_in(&root)
        } else {
            HashMap::new()
        };
        let dir = src().join(folder);
        for sibling in siblings.keys() {
            files.push((file_of(&dir, sibling), Some(sibling.as_str())));
        }
        for (file, own) in files {
            let name = file.strip_prefix(src()).unwrap().display().to_string();
            for (imported, inner) in imports(&file, Some(folder)) {
                let Some(&above) = folders.get(&imported) else {
                    // A path to an item re-exported at the root names no module of its own.
                    continue;
                };
                if above > layer {
                    upward.push(format!("{name} imports {imported} (a layer above)"));
                }
                let (Some(own), Some(inner)) = (own, inner) else {
                    continue;
                };
                if imported != *folder {
                    continue;
                }
                if let (Some(&mine), Some(&theirs)) = (siblings.get(own), siblings.get(&inner))
                    && theirs > mine
                {
                    upward.push(format!(
                        "{name} imports {folder}::{inner} (a group below it in mod.rs)"
                    ));
                }
            }
        }
    }
    upward.sort();
    upward
}

#[test]
fn no_module_of_core_imports_one_above_it() {
    let folders = layers_in(&src().join("lib.rs"));
    assert!(folders.len() >= 8, "lib.rs lists its folders: {folders:?}");
    let upward = upward_imports();
    assert!(
        upward.is_empty(),
        "imports pointing up:\n{}",
        upward.join("\n")
    );
}

#[test]
fn every_layer_is_a_folder() {
    let files: Vec<String> = fs::read_dir(src())
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| entry.file_type().unwrap().is_file())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, ["lib.rs"], "only lib.rs lies beside the folders");
    for folder in layers_in(&src().join("lib.rs")).keys() {
        assert!(
            src().join(folder).join("mod.rs").exists(),
            "{folder} is a folder with a mod.rs"
        );
    }
}

#[test]
fn telemetry_and_the_rules_import_nothing_above_the_contracts() {
    let folders = layers_in(&src().join("lib.rs"));
    let contracts = folders["contract"];
    for folder in ["protocol", "telemetry"] {
        let dir = src().join(folder);
        let mut files = vec![dir.join("mod.rs")];
        files.extend(
            layers_in(&dir.join("mod.rs"))
                .keys()
                .map(|m| file_of(&dir, m)),
        );
        for (imported, _) in files.iter().flat_map(|f| imports(f, Some(folder))) {
            if let Some(&layer) = folders.get(&imported) {
                assert!(
                    layer <= contracts || imported == folder,
                    "{folder} imports {imported}"
                );
            }
        }
    }
}

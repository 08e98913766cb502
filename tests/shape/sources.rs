//! Where the workspace's code is, for the checks that read it.

use std::fs;
use std::path::{Path, PathBuf};

pub(crate) fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `src` folder of the workspace's crates.
pub(crate) fn source_roots() -> Vec<PathBuf> {
    let mut roots = vec![workspace().join("src")];
    for folder in ["crates", "examples"] {
        let Ok(entries) = fs::read_dir(workspace().join(folder)) else {
            continue;
        };
        for entry in entries {
            let src = entry.unwrap().path().join("src");
            if src.is_dir() {
                roots.push(src);
            }
        }
    }
    roots.sort();
    roots
}

/// Every `.rs` file under `folder`, sorted.
pub(crate) fn rust_files(folder: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![folder.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The text of `file` before its unit tests (`#[cfg(test)]`).
pub(crate) fn before_unit_tests(file: &Path) -> String {
    let text = fs::read_to_string(file).unwrap();
    text.split("#[cfg(test)]").next().unwrap().to_owned()
}

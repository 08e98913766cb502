//! Core is laid out bottom-up, and no module imports one above it: `src/lib.rs` declares its
//! modules in layers (groups separated by a blank line: values, contracts, the protocol's
//! rules, telemetry, the fence and its neighbours, the effect helper, the batch, the in-memory
//! implementations, the adapter author's surface), and every `crate::…` path in a module's code
//! (not its comments, not its unit tests) must name a module of its own layer or one below.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The modules of `lib.rs`, each with the index of its layer.
fn layers() -> HashMap<String, usize> {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut layers = HashMap::new();
    let mut layer = 0;
    let mut in_modules = false;
    for line in lib.lines() {
        let declared = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
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

/// The source files of `module`: `module.rs`, or `module/mod.rs` and the files beside it.
fn files_of(module: &str) -> Vec<PathBuf> {
    let single = src().join(format!("{module}.rs"));
    if single.exists() {
        return vec![single];
    }
    let dir = src().join(module);
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

/// Every module named by a `crate::` path in the code of `file`, before its unit tests.
fn imports(file: &Path) -> Vec<String> {
    let text = fs::read_to_string(file).unwrap();
    let code = text.split("#[cfg(test)]").next().unwrap();
    let mut found = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let line = line.split("//").next().unwrap();
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            let module: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !module.is_empty() {
                found.push(module);
            }
        }
    }
    found
}

#[test]
fn no_module_of_core_imports_one_above_it() {
    let layers = layers();
    assert!(layers.len() > 20, "lib.rs lists its modules: {layers:?}");
    let mut upward = Vec::new();
    for (module, &layer) in &layers {
        for file in files_of(module) {
            for imported in imports(&file) {
                let Some(&above) = layers.get(&imported) else {
                    // A path to an item re-exported at the root names no module of its own.
                    continue;
                };
                if above > layer {
                    upward.push(format!(
                        "{} (layer {layer}) imports {imported} (layer {above})",
                        file.strip_prefix(src()).unwrap().display()
                    ));
                }
            }
        }
    }
    upward.sort();
    assert!(
        upward.is_empty(),
        "imports pointing up:\n{}",
        upward.join("\n")
    );
}

#[test]
fn telemetry_and_the_rules_import_nothing_above_the_contracts() {
    let layers = layers();
    let rules = layers["rules"];
    for module in ["rules", "telemetry"] {
        for imported in files_of(module).iter().flat_map(|f| imports(f)) {
            if let Some(&layer) = layers.get(&imported) {
                assert!(
                    layer <= rules || imported == module,
                    "{module} imports {imported}"
                );
            }
        }
    }
}

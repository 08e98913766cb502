//! docs/adapters.md's naming rule, `<Backend><Role>`, checked on the code: every type a store
//! crate declares starts with its backend's name, every type implementing a role ends with that
//! role's name, and every such type stands in the docs' table.

use crate::sources::{before_unit_tests, rust_files, workspace};

/// Each store crate and its backend's short name.
const BACKENDS: [(&str, &str); 8] = [
    ("fencing-core/src/memory", "Memory"),
    ("fencing-postgres/src", "Pg"),
    ("fencing-mysql/src", "MySql"),
    ("fencing-redis/src", "Redis"),
    ("fencing-dynamodb/src", "Dynamo"),
    ("fencing-s3/src", "S3"),
    ("fencing-etcd/src", "Etcd"),
    ("fencing-object-store/src", "ObjectStore"),
];

/// Each role (a core trait) and the name its implementations end with.
const ROLES: [(&str, &str); 5] = [
    ("FencedStore", "Store"),
    ("Lease", "Lease"),
    ("TokenSource", "TokenSource"),
    ("EpochSource", "EpochSource"),
    ("FenceFloor", "FenceFloor"),
];

/// The public types `source` declares, leaving out those kept only as deprecated or hidden
/// names.
fn declared_types(source: &str) -> Vec<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut types = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let ["pub", kind, name, ..] = words[..] else {
            continue;
        };
        if !["struct", "enum", "trait", "type"].contains(&kind) {
            continue;
        }
        let above = &lines[i.saturating_sub(4)..i];
        if above
            .iter()
            .any(|l| l.contains("#[deprecated") || l.contains("#[doc(hidden)]"))
        {
            continue;
        }
        let name = name
            .split(['<', '(', ';', '{', ':', '='])
            .next()
            .unwrap_or_default();
        types.push(name.to_owned());
    }
    types
}

/// Each `(role, type)` of `source`'s `impl Role for Type` blocks.
fn role_impls(source: &str) -> Vec<(String, String)> {
    let mut impls = Vec::new();
    for line in source.lines().filter(|l| l.starts_with("impl")) {
        let Some((head, rest)) = line.split_once(" for ") else {
            continue;
        };
        let role = head.rsplit([' ', '>']).next().unwrap_or_default();
        if ROLES.iter().any(|(r, _)| *r == role) {
            let ty = rest.split(['<', ' ', '{']).next().unwrap_or_default();
            impls.push((role.to_owned(), ty.to_owned()));
        }
    }
    impls
}

fn sources(folder: &str) -> Vec<String> {
    rust_files(&workspace().join("crates").join(folder))
        .iter()
        .map(|file| before_unit_tests(file))
        .collect()
}

#[test]
fn every_type_of_a_store_crate_carries_its_backends_name() {
    let mut wrong = Vec::new();
    for (folder, backend) in BACKENDS {
        for source in sources(folder) {
            for name in declared_types(&source) {
                if !name.starts_with(backend) {
                    wrong.push(format!("{folder}: {name} (not {backend}…)"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn every_type_that_implements_a_role_is_named_after_it_and_stands_in_the_docs_table() {
    let docs = std::fs::read_to_string(workspace().join("docs/adapters.md")).unwrap();
    let table = &docs[docs.find("| role (core trait)").expect("the names table")..];
    let table = &table[..table.find("\n\n").unwrap()];
    let mut wrong = Vec::new();
    let mut seen = 0;
    for (folder, _) in BACKENDS {
        for source in sources(folder) {
            for (role, ty) in role_impls(&source) {
                seen += 1;
                let suffix = ROLES.iter().find(|(r, _)| *r == role).unwrap().1;
                let roles_of_ty: Vec<&str> = role_impls(&source)
                    .iter()
                    .filter(|(_, t)| *t == ty)
                    .map(|(r, _)| ROLES.iter().find(|(x, _)| x == r).unwrap().1)
                    .collect();
                if !ty.ends_with(suffix) && !roles_of_ty.iter().any(|s| ty.ends_with(s)) {
                    wrong.push(format!("{ty} implements {role} but is not named …{suffix}"));
                }
                if !table.contains(&format!("`{ty}`")) {
                    wrong.push(format!("{ty} ({role}) is not in docs/adapters.md's table"));
                }
            }
        }
    }
    assert!(
        seen >= 15,
        "the role implementations were not read ({seen})"
    );
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn a_misnamed_type_and_a_role_implementation_are_read_off_the_source() {
    let source = "pub struct SentinelConnection {\n}\n\n#[deprecated(note = \"renamed\")]\n\
                  pub type Old = New;\n\nimpl<C: Send> Lease for RedisLease<C> {\n}\n";
    assert_eq!(declared_types(source), ["SentinelConnection"]);
    assert_eq!(
        role_impls(source),
        [("Lease".to_owned(), "RedisLease".to_owned())]
    );
}

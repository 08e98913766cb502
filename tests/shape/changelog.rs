//! CHANGELOG.md's renames (`` `Old` → `New` ``) are true of the code: every new name is
//! defined in the workspace's sources, and every old one is either gone or kept as a
//! `#[deprecated]` alias whose note names its replacement.

use std::collections::BTreeSet;

use crate::sources::{before_unit_tests, rust_files, source_roots, workspace};

/// A name as the CHANGELOG writes it: the crate it is qualified with (`fencing_timeline` in
/// `fencing_timeline::Clock`), what it belongs to, and the item's own name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Named {
    krate: Option<String>,
    owner: Owner,
    name: String,
}

/// What a name belongs to, as far as the CHANGELOG says.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Owner {
    /// Nothing: a type, a function or a module of a crate (`Fence`, `acquire`).
    Crate,
    /// A type or trait: the item is its method, associated item or variant
    /// (`LeaseGuard::fence`).
    Type(String),
    /// A value whose type the text does not name (`batch.pipeline(…)`).
    Value,
}

/// The item a code span names: the last path segment before any call or generics
/// (`LeaseGuard::fence()` → `fence` of `LeaseGuard`, `batch.run_effect(…)` → `run_effect` of a
/// value); `None` for a span that is not a path (a pattern, an expression).
fn named(span: &str) -> Option<Named> {
    let path = span.split(['(', '<']).next()?.trim();
    if path.is_empty() || path.contains([' ', '{', '&', '|']) {
        return None;
    }
    let segments: Vec<&str> = path.split("::").collect();
    let (last, before) = segments.split_last()?;
    let (receiver, name) = match last.rsplit_once('.') {
        Some((receiver, name)) => (Some(receiver), name),
        None => (None, *last),
    };
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return None;
    }
    let owner = match (receiver, before.last()) {
        (Some(_), _) => Owner::Value,
        (None, Some(owner)) if owner.starts_with(char::is_uppercase) => {
            Owner::Type((*owner).to_owned())
        }
        _ => Owner::Crate,
    };
    let krate = segments
        .first()
        .filter(|first| first.starts_with("fencing") && segments.len() > 1)
        .map(|first| (*first).to_owned());
    Some(Named {
        krate,
        owner,
        name: name.to_owned(),
    })
}

/// Every `Old → New` of the text: the code spans either side of each arrow.
fn renames(changelog: &str) -> Vec<(Named, Named)> {
    let text = changelog.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut pairs = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("` → `") {
        let before = &rest[..at];
        let after = &rest[at + "` → `".len()..];
        rest = after;
        let Some(old) = before.rfind('`').map(|open| &before[open + 1..]) else {
            continue;
        };
        let Some(new) = after.find('`').map(|close| &after[..close]) else {
            continue;
        };
        if let (Some(old), Some(new)) = (named(old), named(new))
            && old.name != new.name
        {
            pairs.push((old, new));
        }
    }
    pairs
}

/// The names the text says are gone (`` `X` is gone ``).
fn removed(changelog: &str) -> BTreeSet<String> {
    let text = changelog.split_whitespace().collect::<Vec<_>>().join(" ");
    text.match_indices("` is gone")
        .filter_map(|(at, _)| {
            let before = &text[..at];
            named(&before[before.rfind('`')? + 1..]).map(|named| named.name)
        })
        .collect()
}

/// The sources an item of `krate` can be defined in: that crate's, or every crate's.
fn sources_of(krate: &Option<String>) -> Vec<String> {
    let roots = match krate {
        Some(krate) if krate != "fencing" => {
            vec![
                workspace()
                    .join("crates")
                    .join(krate.replace('_', "-"))
                    .join("src"),
            ]
        }
        _ => source_roots(),
    };
    roots
        .iter()
        .flat_map(|root| rust_files(root))
        .map(|file| before_unit_tests(&file))
        .collect()
}

/// The words of `line`: its identifiers.
fn words(line: &str) -> Vec<&str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Whether `line` declares `name` after one of `keywords`.
fn declares(line: &str, keywords: &[&str], name: &str) -> bool {
    let trimmed = line.trim_start();
    !trimmed.starts_with("//")
        && words(line)
            .windows(2)
            .any(|pair| keywords.contains(&pair[0]) && pair[1] == name)
}

/// Whether `line` is the variant `name` of an enum.
fn is_variant(line: &str, name: &str) -> bool {
    let trimmed = line.trim();
    trimmed.starts_with(name)
        && trimmed[name.len()..].starts_with([',', '(', ' ', '{'])
        && (trimmed.ends_with(',') || trimmed.ends_with('{'))
        && !trimmed.contains(['=', '"', '.'])
}

/// The lines of `source` inside the blocks that belong to `owner`: its `impl` blocks (its own
/// and its traits'), and its own `struct`, `enum` or `trait` body; each with the lines above
/// it, for the attributes on what it declares.
fn owned_lines<'a>(source: &'a str, owner: &str) -> Vec<(usize, &'a str)> {
    let lines: Vec<&str> = source.lines().collect();
    let mut owned = Vec::new();
    let mut inside = false;
    for (i, line) in lines.iter().enumerate() {
        if inside {
            if *line == "}" {
                inside = false;
            } else {
                owned.push((i, *line));
            }
            continue;
        }
        let opens = line.starts_with("impl")
            || declares(line, &["struct", "enum", "trait"], owner) && !line.starts_with(' ');
        inside = opens && words(line).contains(&owner) && line.ends_with('{');
    }
    owned
}

/// Each line of `sources` that defines `named`, with whether a `#[deprecated]` stands on it.
fn definitions(sources: &[String], named: &Named) -> Vec<(String, bool)> {
    let name = named.name.as_str();
    let mut found = Vec::new();
    for source in sources {
        let lines: Vec<&str> = source.lines().collect();
        let candidates: Vec<(usize, &str)> = match &named.owner {
            Owner::Type(owner) => owned_lines(source, owner)
                .into_iter()
                .filter(|(_, line)| {
                    declares(line, &["fn", "type", "const"], name) || is_variant(line, name)
                })
                .collect(),
            Owner::Crate => lines
                .iter()
                .enumerate()
                .filter(|(_, line)| {
                    declares(
                        line,
                        &["fn", "struct", "enum", "trait", "type", "const", "as"],
                        name,
                    ) && !line.starts_with(' ')
                        || line.trim_start().starts_with("pub use") && declares(line, &["as"], name)
                })
                .map(|(i, line)| (i, *line))
                .collect(),
            Owner::Value => Vec::new(),
        };
        for (i, line) in candidates {
            let above = &lines[i.saturating_sub(12)..i];
            let deprecated = above.iter().any(|l| l.contains("#[deprecated"));
            found.push((line.trim().to_owned(), deprecated));
        }
    }
    found
}

/// Whether `name` is defined anywhere in `sources`, in any role.
fn defined_anywhere(sources: &[String], name: &str) -> bool {
    let keywords = [
        "fn", "struct", "enum", "trait", "type", "mod", "const", "as",
    ];
    sources.iter().any(|source| {
        source
            .lines()
            .any(|line| declares(line, &keywords, name) || is_variant(line, name))
    })
}

#[test]
fn every_rename_in_the_changelog_names_a_new_name_that_exists_and_an_old_one_gone_or_deprecated() {
    let changelog = std::fs::read_to_string(workspace().join("CHANGELOG.md")).unwrap();
    let pairs = renames(&changelog);
    assert!(pairs.len() >= 20, "the renames were not read: {pairs:?}");
    let mut wrong = BTreeSet::new();
    // A name renamed again or removed later is an old name of a later line: it need not exist.
    let gone = removed(&changelog);
    let renamed_again: BTreeSet<&str> = pairs
        .iter()
        .map(|(old, _)| old.name.as_str())
        .chain(gone.iter().map(String::as_str))
        .collect();
    for (old, new) in &pairs {
        let new_sources = sources_of(&new.krate);
        let exists =
            !definitions(&new_sources, new).is_empty() || defined_anywhere(&new_sources, &new.name);
        if !exists && !renamed_again.contains(new.name.as_str()) {
            wrong.insert(format!(
                "{} (new name of {}) is defined nowhere",
                new.name, old.name
            ));
        }
        for (line, deprecated) in definitions(&sources_of(&old.krate), old) {
            if !deprecated {
                wrong.insert(format!(
                    "{} (renamed {}) still stands: {line}",
                    old.name, new.name
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn renames_are_read_across_lines_and_calls_reduced_to_their_names() {
    let pairs = renames("- `LeaseGuard::fence()`\n  → `LeaseGuard::holder()`, `a + b` → `c`");
    let names: Vec<_> = pairs.iter().map(|(o, n)| (&*o.name, &*n.name)).collect();
    assert_eq!(names, [("fence", "holder")]);
    assert_eq!(pairs[0].0.owner, Owner::Type("LeaseGuard".into()));
    let scoped = named("fencing_timeline::Clock").unwrap();
    assert_eq!(scoped.krate.as_deref(), Some("fencing_timeline"));
    assert_eq!(scoped.owner, Owner::Crate);
    assert_eq!(named("batch.pipeline(…)").unwrap().owner, Owner::Value);
    let gone = removed("`batch.run_fenced(&store, async |f| op(f))` is gone: call `op(…)`");
    assert_eq!(gone.into_iter().collect::<Vec<_>>(), ["run_fenced"]);
}

#[test]
fn an_old_name_is_looked_for_where_it_belonged_and_found_if_still_there() {
    let source = "pub struct LeaseGuard {\n    token: u64,\n}\n\nimpl LeaseGuard {\n    \
                  pub fn holder(&self) {}\n\n    #[deprecated(note = \"use holder\")]\n    \
                  pub fn fence(&self) {}\n}\n\nimpl FoundFence {\n    pub fn stale(&self) {}\n}\n"
        .to_owned();
    let sources = [source];
    let fence = named("LeaseGuard::fence()").unwrap();
    assert_eq!(
        definitions(&sources, &fence),
        [("pub fn fence(&self) {}".to_owned(), true)]
    );
    let stale = named("LeaseGuard::stale()").unwrap();
    assert_eq!(definitions(&sources, &stale), []);
    assert!(defined_anywhere(&sources, "stale"));
}

//! Input validation: what counts as a bad argument, and the text rules every name obeys.
//!
//! Kept apart from the error enum so that the types that validate themselves (tokens, names,
//! TTLs) and the error that carries their refusals do not import each other.

use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Which argument was bad.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InputKind {
    /// A fencing token outside `1 ..= i64::MAX`, or text that is not one.
    Token,
    /// A resource name (what a lease protects).
    ResourceName,
    /// A record key.
    RecordKey,
    /// A record state name.
    State,
    /// A lease time-to-live.
    Ttl,
    /// A retry policy.
    Retry,
    /// The set of stores given to a batch (e.g. the same store twice).
    StoreSet,
    /// A store-specific identifier (table, column, key prefix, bucket).
    Identifier,
    /// A write this store cannot carry out as given: a payload for a table without a payload
    /// column, a column the table lacks, a value its column cannot hold.
    Write,
}

/// A bad argument, caught before anything was sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind:?}: {detail}")]
pub struct InvalidInput {
    kind: InputKind,
    detail: String,
}

impl InvalidInput {
    /// A bad argument of `kind`, with a sentence saying what is wrong with it.
    pub fn new(kind: InputKind, detail: impl Into<String>) -> Self {
        InvalidInput {
            kind,
            detail: detail.into(),
        }
    }

    /// Which argument was bad.
    pub fn kind(&self) -> InputKind {
        self.kind
    }

    /// What is wrong with it.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

/// True for the characters no name may contain: control characters (general category Cc) and
/// format characters (Cf: zero-width spaces and joiners, bidirectional overrides, the BOM).
/// Both are invisible or rearrange text when printed, so two names that differ only by one of
/// them would look identical in a log while naming different things.
pub fn is_refused_char(c: char) -> bool {
    c.is_control() || c.general_category() == GeneralCategory::Format
}

/// Every refused character ([`is_refused_char`]) as inclusive ranges, in order: for adapters
/// that must apply the same rule inside a store (e.g. a SQL check on stored states).
pub fn refused_char_ranges() -> &'static [(char, char)] {
    static RANGES: std::sync::OnceLock<Vec<(char, char)>> = std::sync::OnceLock::new();
    RANGES.get_or_init(|| {
        let mut ranges: Vec<(char, char)> = Vec::new();
        for c in (char::MIN..=char::MAX).filter(|&c| is_refused_char(c)) {
            match ranges.last_mut() {
                Some((_, end)) if char::from_u32(*end as u32 + 1) == Some(c) => *end = c,
                _ => ranges.push((c, c)),
            }
        }
        ranges
    })
}

/// Checks the rules every validated name obeys: non-empty, at most `max_bytes` of UTF-8, and
/// free of refused characters ([`is_refused_char`]).
pub(crate) fn check_text(
    kind: InputKind,
    text: &str,
    max_bytes: usize,
) -> Result<(), InvalidInput> {
    if text.is_empty() {
        return Err(InvalidInput::new(kind, "must not be empty"));
    }
    if text.len() > max_bytes {
        return Err(InvalidInput::new(
            kind,
            format!(
                "{} bytes is longer than the limit of {max_bytes}",
                text.len()
            ),
        ));
    }
    if let Some(c) = text.chars().find(|&c| is_refused_char(c)) {
        return Err(InvalidInput::new(
            kind,
            format!(
                "{text:?} contains {c:?} (U+{:04X}), a control or format character: such \
                 characters are invisible when printed, so they are refused in names",
                c as u32
            ),
        ));
    }
    Ok(())
}

/// Checks a name given to a store ([`crate::FencedStore::name`]), as the adapters' `named`
/// methods take it: non-empty, without control or format characters.
pub fn check_store_name(name: &str) -> Result<(), InvalidInput> {
    if name.is_empty() || name.chars().any(is_refused_char) {
        return Err(InvalidInput::new(
            InputKind::StoreSet,
            format!(
                "{name:?} cannot name a store: it must be non-empty, without control or format characters"
            ),
        ));
    }
    Ok(())
}

/// Checks the request timeout an adapter's lease or token source is given: at least 1 ms
/// (a shorter one would give up on every request before it could be answered).
pub fn check_request_timeout(limit: std::time::Duration) -> Result<(), InvalidInput> {
    if limit < std::time::Duration::from_millis(1) {
        return Err(InvalidInput::new(
            InputKind::Retry,
            format!("a request timeout of {limit:?} is shorter than 1 ms"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invisible_and_reordering_characters_are_refused() {
        for c in [
            '\u{200B}', '\u{200D}', '\u{202E}', '\u{2066}', '\u{FEFF}', '\u{00AD}', '\0', '\u{7F}',
            '\u{85}',
        ] {
            assert!(is_refused_char(c), "U+{:04X}", c as u32);
        }
        for c in ['a', ' ', 'ü', '✓', '{', '\u{00A0}'] {
            assert!(!is_refused_char(c), "U+{:04X}", c as u32);
        }
    }

    #[test]
    fn ranges_cover_exactly_the_refused_characters() {
        let ranges = refused_char_ranges();
        assert!(
            ranges
                .windows(2)
                .all(|w| (w[0].1 as u32) + 1 < w[1].0 as u32)
        );
        let in_ranges = |c: char| ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi);
        for c in (char::MIN..=char::MAX).step_by(7) {
            assert_eq!(in_ranges(c), is_refused_char(c), "U+{:04X}", c as u32);
        }
        assert!(in_ranges('\u{200B}') && in_ranges('\u{1F}') && !in_ranges('x'));
    }

    #[test]
    fn store_names_refuse_only_the_empty_and_the_invisible() {
        assert!(check_store_name("postgres:public.payouts").is_ok());
        assert!(check_store_name("billing ledger (eu)").is_ok());
        for bad in ["", "led\nger", "led\u{200B}ger"] {
            assert_eq!(
                check_store_name(bad).unwrap_err().kind(),
                InputKind::StoreSet
            );
        }
    }

    #[test]
    fn the_detail_says_what_is_wrong() {
        let err = InvalidInput::new(InputKind::Ttl, "0 ms is less than 1 ms");
        assert_eq!(err.detail(), "0 ms is less than 1 ms");
        assert_eq!(err.kind(), InputKind::Ttl);
    }
}

//! SQL identifiers checked and quoted by this crate, since sqlx quotes none.

use std::fmt;

use fencing_core::adapter::is_refused_char;
use fencing_core::{InputKind, InvalidInput};

/// A Postgres identifier (schema, table or column name), as Postgres takes it when quoted:
/// any text of 1 to 63 bytes (Postgres's `NAMEDATALEN - 1`) without NUL or other control or
/// format characters. So `billing-v2`, `LedgerEntries` and `tenant "a"` are names; an empty,
/// over-long or invisible-character name is refused before any query is built. It is always
/// written double-quoted with inner quotes doubled, so it is taken verbatim, case included:
/// a table created with an unquoted `MixedCase` name is really named `mixedcase`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PgIdent(String);

impl PgIdent {
    /// The longest identifier Postgres keeps without truncating it.
    pub const MAX_BYTES: usize = 63;

    /// Checks `name`.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        if name.is_empty() || name.len() > Self::MAX_BYTES || name.chars().any(is_refused_char) {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!(
                    "{name:?} cannot be a Postgres name: it must be 1 to {} bytes without \
                     control or format characters",
                    Self::MAX_BYTES
                ),
            ));
        }
        Ok(PgIdent(name))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name as Postgres folds it when written without quotes (ASCII letters in lower case),
    /// for telling a user that a name they created unquoted is not the one they gave.
    pub(crate) fn folded(&self) -> Option<PgIdent> {
        let folded = self.0.to_ascii_lowercase();
        (folded != self.0).then_some(PgIdent(folded))
    }
}

impl fmt::Display for PgIdent {
    /// Writes the identifier double-quoted, inner quotes doubled.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.0.replace('"', "\"\""))
    }
}

impl fmt::Debug for PgIdent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// `text` as an SQL string literal (`E'…'`, so the same on any `standard_conforming_strings`).
pub(crate) fn literal(text: &str) -> String {
    format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// A schema-qualified name: `"schema"."name"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PgQualifiedName {
    schema: PgIdent,
    name: PgIdent,
}

impl PgQualifiedName {
    /// Checks both parts.
    pub fn new(schema: &str, name: &str) -> Result<Self, InvalidInput> {
        Ok(PgQualifiedName {
            schema: PgIdent::new(schema)?,
            name: PgIdent::new(name)?,
        })
    }

    /// The schema.
    pub fn schema(&self) -> &PgIdent {
        &self.schema
    }

    /// The table's own name.
    pub fn name(&self) -> &PgIdent {
        &self.name
    }
}

impl PgQualifiedName {
    /// The name as Postgres would have it had both parts been written unquoted, where that
    /// differs from this one.
    pub(crate) fn folded(&self) -> Option<PgQualifiedName> {
        let (schema, name) = (self.schema.folded(), self.name.folded());
        (schema.is_some() || name.is_some()).then(|| PgQualifiedName {
            schema: schema.unwrap_or_else(|| self.schema.clone()),
            name: name.unwrap_or_else(|| self.name.clone()),
        })
    }

    /// The name a store on this table goes by in errors and batches: `postgres:schema.name`.
    pub fn store_name(&self) -> String {
        format!("postgres:{}.{}", self.schema.as_str(), self.name.as_str())
    }
}

impl fmt::Display for PgQualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_shows_as_its_text_and_names_its_store() {
        assert_eq!(
            format!("{:?}", PgIdent::new("Refund").unwrap()),
            "\"Refund\""
        );
        let q = PgQualifiedName::new("public", "refunds").unwrap();
        assert_eq!(q.store_name(), "postgres:public.refunds");
    }

    #[test]
    fn a_qualified_name_folds_where_either_part_would() {
        let folded = |schema: &str, name: &str| {
            PgQualifiedName::new(schema, name)
                .unwrap()
                .folded()
                .map(|q| (q.schema().as_str().to_owned(), q.name().as_str().to_owned()))
        };
        assert_eq!(folded("public", "refunds"), None);
        let lower = |s: &str, n: &str| Some((s.to_owned(), n.to_owned()));
        assert_eq!(folded("public", "Refunds"), lower("public", "refunds"));
        assert_eq!(folded("Ledger", "refunds"), lower("ledger", "refunds"));
        assert_eq!(folded("Ledger", "Refunds"), lower("ledger", "refunds"));
    }

    #[test]
    fn plain_names_are_quoted() {
        assert_eq!(PgIdent::new("refund").unwrap().to_string(), "\"refund\"");
        assert_eq!(PgIdent::new("_Fence2").unwrap().to_string(), "\"_Fence2\"");
        let q = PgQualifiedName::new("public", "refund").unwrap();
        assert_eq!(q.to_string(), "\"public\".\"refund\"");
    }

    #[test]
    fn names_postgres_accepts_quoted_are_quoted_correctly() {
        assert_eq!(
            PgIdent::new("billing-v2").unwrap().to_string(),
            "\"billing-v2\""
        );
        assert_eq!(
            PgIdent::new("a\"; DROP TABLE refund; --")
                .unwrap()
                .to_string(),
            "\"a\"\"; DROP TABLE refund; --\""
        );
        assert!(PgIdent::new("x".repeat(63)).is_ok());
        assert!(PgIdent::new("réfund").is_ok());
    }

    #[test]
    fn what_cannot_be_a_name_is_refused() {
        for bad in [
            "",
            "a\0b",
            "a\nb",
            "a\u{200B}b",
            &"x".repeat(64),
            &"é".repeat(32),
        ] {
            let err = PgIdent::new(bad).unwrap_err();
            assert_eq!(err.kind(), InputKind::Identifier, "{bad:?}");
        }
    }

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal("it's \\x"), "E'it''s \\\\x'");
    }

    #[test]
    fn folding_is_reported_only_where_it_changes_the_name() {
        let q = PgQualifiedName::new("Scratch2", "MixedUnquoted").unwrap();
        assert_eq!(
            q.folded().unwrap().to_string(),
            "\"scratch2\".\"mixedunquoted\""
        );
        assert!(
            PgQualifiedName::new("public", "refund")
                .unwrap()
                .folded()
                .is_none()
        );
    }
}

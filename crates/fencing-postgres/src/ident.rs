//! SQL identifiers checked and quoted by this crate, since sqlx quotes none.

use std::fmt;

use fencing_core::{InputKind, InvalidInput};

/// A Postgres identifier (schema, table or column name): a letter or `_`, then letters, digits
/// or `_`, at most 63 bytes (Postgres's `NAMEDATALEN - 1`). Anything else — quotes,
/// semicolons, comments, spaces, an empty or over-long name — is refused before any query is
/// built. It is always written double-quoted, so it is taken verbatim, case included.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Ident(String);

impl Ident {
    /// The longest identifier Postgres keeps without truncating it.
    pub const MAX_BYTES: usize = 63;

    /// Checks `name`.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        let mut chars = name.chars();
        let starts_well = chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !starts_well || !rest_ok || name.len() > Self::MAX_BYTES {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!(
                    "{name:?} is not a plain SQL identifier (a letter or _, then letters, digits \
                     or _, at most {} bytes)",
                    Self::MAX_BYTES
                ),
            ));
        }
        Ok(Ident(name))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Ident {
    /// Writes the identifier double-quoted; it can contain no quote to escape.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", self.0)
    }
}

impl fmt::Debug for Ident {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A schema-qualified name: `"schema"."name"`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct QualifiedName {
    schema: Ident,
    name: Ident,
}

impl QualifiedName {
    /// Checks both parts.
    pub fn new(schema: &str, name: &str) -> Result<Self, InvalidInput> {
        Ok(QualifiedName {
            schema: Ident::new(schema)?,
            name: Ident::new(name)?,
        })
    }

    /// The schema.
    pub fn schema(&self) -> &Ident {
        &self.schema
    }

    /// The table's own name.
    pub fn name(&self) -> &Ident {
        &self.name
    }
}

impl QualifiedName {
    /// The name a store on this table goes by in errors and batches: `postgres:schema.name`.
    pub fn store_name(&self) -> String {
        format!("postgres:{}.{}", self.schema.as_str(), self.name.as_str())
    }
}

impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.schema, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_names_are_quoted() {
        assert_eq!(Ident::new("refund").unwrap().to_string(), "\"refund\"");
        assert_eq!(Ident::new("_Fence2").unwrap().to_string(), "\"_Fence2\"");
        let q = QualifiedName::new("public", "refund").unwrap();
        assert_eq!(q.to_string(), "\"public\".\"refund\"");
    }

    #[test]
    fn injection_attempts_are_refused() {
        for bad in [
            "",
            "refund\"; DROP TABLE refund; --",
            "refund;",
            "a b",
            "a--b",
            "/*x*/",
            "\"quoted\"",
            "1refund",
            "réfund",
            "a.b",
            "a\0b",
            &"x".repeat(64),
        ] {
            let err = Ident::new(bad).unwrap_err();
            assert_eq!(err.kind(), InputKind::Identifier, "{bad:?}");
        }
        assert!(Ident::new("x".repeat(63)).is_ok());
    }
}

//! SQL identifiers checked and quoted by this crate, since sqlx quotes none.

use std::fmt;

use fencing_core::adapter::is_refused_char;
use fencing_core::{InputKind, InvalidInput};

/// A MySQL or MariaDB identifier (database, table or column name), as the server takes it
/// when quoted: 1 to 64 characters, none of them control or format characters or outside the
/// Basic Multilingual Plane (which the server refuses in names), not ending in a space (which
/// the server refuses too). So `billing-v2`, `LedgerEntries` and ``tenant `a` `` are names.
/// It is always written in backticks with inner backticks doubled, so it is taken verbatim.
/// Whether a table name's case matters is the server's `lower_case_table_names`; column names
/// never differ by case.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct MySqlIdent(String);

impl MySqlIdent {
    /// The longest identifier the server takes, in characters.
    pub const MAX_CHARS: usize = 64;

    /// Checks `name`.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        let refused = |c: char| is_refused_char(c) || u32::from(c) > 0xFFFF;
        if name.is_empty()
            || name.chars().count() > Self::MAX_CHARS
            || name.chars().any(refused)
            || name.ends_with(' ')
        {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!(
                    "{name:?} cannot be a MySQL name: it must be 1 to {} characters without \
                     control or format characters or characters beyond U+FFFF, and not end \
                     in a space",
                    Self::MAX_CHARS
                ),
            ));
        }
        Ok(MySqlIdent(name))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for MySqlIdent {
    /// Writes the identifier in backticks, inner backticks doubled.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`", self.0.replace('`', "``"))
    }
}

impl fmt::Debug for MySqlIdent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// A database-qualified name: `` `database`.`name` ``.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MySqlQualifiedName {
    database: MySqlIdent,
    name: MySqlIdent,
}

impl MySqlQualifiedName {
    /// Checks both parts.
    pub fn new(database: &str, name: &str) -> Result<Self, InvalidInput> {
        Ok(MySqlQualifiedName {
            database: MySqlIdent::new(database)?,
            name: MySqlIdent::new(name)?,
        })
    }

    /// The database.
    pub fn database(&self) -> &MySqlIdent {
        &self.database
    }

    /// The name within the database.
    pub fn name(&self) -> &MySqlIdent {
        &self.name
    }

    /// The same database, another name in it.
    pub(crate) fn sibling(&self, suffix: &str) -> MySqlQualifiedName {
        let mut name: String = self.name.as_str().to_owned();
        while name.chars().count() + suffix.chars().count() > MySqlIdent::MAX_CHARS {
            name.pop();
        }
        MySqlQualifiedName {
            database: self.database.clone(),
            name: MySqlIdent::new(format!("{}{suffix}", name.trim_end()))
                .expect("a checked name cut to leave room for a plain suffix is a name"),
        }
    }

    /// The name errors and batches know the store by: `mysql:database.table`.
    pub fn store_name(&self) -> String {
        format!("mysql:{}.{}", self.database.as_str(), self.name.as_str())
    }
}

impl fmt::Display for MySqlQualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.database, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_quoted_verbatim_and_a_name_the_server_refuses_is_refused_here() {
        let odd = MySqlIdent::new("tenant `a` Refunds").unwrap();
        assert_eq!(odd.to_string(), "`tenant ``a`` Refunds`");
        for bad in ["", "trailing ", "nul\0", "emoji\u{1F600}", &"x".repeat(65)] {
            let err = MySqlIdent::new(bad).unwrap_err();
            assert_eq!(err.kind(), InputKind::Identifier, "{bad:?}");
        }
        assert!(
            MySqlIdent::new("é".repeat(64)).is_ok(),
            "64 characters, 128 bytes"
        );
    }

    #[test]
    fn a_sibling_name_fits_the_limit() {
        let long = MySqlQualifiedName::new("test", &"t".repeat(64)).unwrap();
        let sibling = long.sibling("_start");
        assert_eq!(sibling.name().as_str().chars().count(), 64);
        assert!(sibling.name().as_str().ends_with("_start"));
        assert_eq!(long.store_name(), format!("mysql:test.{}", "t".repeat(64)));
    }
}

//! The key column types a store supports, and the one spelling each accepts for a key.

use fencing_core::adapter::{canonical_integer, canonical_uuid};
use fencing_core::{InputKind, InvalidInput, RecordKey};

/// The type of a table's key column, read from the catalog when the store first writes.
///
/// Keys travel as text ([`RecordKey`]) and are cast to the column's type in the statement, so
/// the column's own index serves every lookup. Each type accepts one spelling of a key only
/// (canonical decimal, lower-case hyphenated UUID): otherwise `"033"` and `"33"` would be two
/// keys of a batch naming one row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgKeyType {
    /// `text` or `varchar`.
    Text,
    /// `uuid`.
    Uuid,
    /// `smallint`.
    SmallInt,
    /// `integer`.
    Integer,
    /// `bigint` (so `bigserial` too).
    BigInt,
}

impl PgKeyType {
    /// The type of the column whose type has this OID in `pg_type`, if supported.
    pub(crate) fn from_oid(oid: i64) -> Option<Self> {
        Some(match oid {
            25 | 1043 => PgKeyType::Text,
            2950 => PgKeyType::Uuid,
            21 => PgKeyType::SmallInt,
            23 => PgKeyType::Integer,
            20 => PgKeyType::BigInt,
            _ => return None,
        })
    }

    /// The SQL type a key parameter is cast to.
    pub(crate) fn sql(self) -> &'static str {
        match self {
            PgKeyType::Text => "text",
            PgKeyType::Uuid => "uuid",
            PgKeyType::SmallInt => "int2",
            PgKeyType::Integer => "int4",
            PgKeyType::BigInt => "int8",
        }
    }

    /// Checks that `key` is this type's one spelling of a value, before anything is sent.
    pub(crate) fn check(self, key: &RecordKey) -> Result<(), InvalidInput> {
        let text = key.as_str();
        let integer = "in canonical decimal (no sign +, no leading zeros)";
        let (fits, needs) = match self {
            PgKeyType::Text => return Ok(()),
            PgKeyType::Uuid => (
                canonical_uuid(text).is_some(),
                "a lower-case hyphenated UUID (8-4-4-4-12 hex digits)".to_owned(),
            ),
            PgKeyType::SmallInt => (
                canonical_integer(text).is_some_and(|n| i16::try_from(n).is_ok()),
                format!("a smallint {integer}"),
            ),
            PgKeyType::Integer => (
                canonical_integer(text).is_some_and(|n| i32::try_from(n).is_ok()),
                format!("an integer {integer}"),
            ),
            PgKeyType::BigInt => (
                canonical_integer(text).is_some(),
                format!("a bigint {integer}"),
            ),
        };
        if fits {
            return Ok(());
        }
        Err(InvalidInput::new(
            InputKind::RecordKey,
            format!("{text:?} is not a key of this table: its key column needs {needs}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(text: &str) -> RecordKey {
        RecordKey::new(text).unwrap()
    }

    #[test]
    fn each_type_accepts_one_spelling() {
        let uuid = "0f8fad5b-d9cb-469f-a165-70867728950e";
        assert!(PgKeyType::Uuid.check(&key(uuid)).is_ok());
        for bad in [
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "{0f8fad5b-d9cb-469f-a165-70867728950e}",
            "0f8fad5bd9cb469fa16570867728950e",
            "r_815",
        ] {
            assert!(PgKeyType::Uuid.check(&key(bad)).is_err(), "{bad}");
        }
        assert!(
            PgKeyType::BigInt
                .check(&key("-9223372036854775808"))
                .is_ok()
        );
        for bad in ["033", "+33", "9223372036854775808", "3.0", " 3"] {
            assert!(PgKeyType::BigInt.check(&key(bad)).is_err(), "{bad}");
        }
        assert!(PgKeyType::Integer.check(&key("2147483647")).is_ok());
        assert!(PgKeyType::Integer.check(&key("2147483648")).is_err());
        assert!(PgKeyType::SmallInt.check(&key("32768")).is_err());
        assert!(PgKeyType::Text.check(&key("033")).is_ok());
    }
}

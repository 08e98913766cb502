//! Fenced writes that also set columns of the caller's own, in the same statement.

use fencing_core::adapter::{Extras, SqlValue};
use fencing_core::{InvalidInput, WriteWith};

use crate::ident::MySqlIdent;
use crate::literal;

/// A value for a column a fenced write also sets ([`SqlValue`]). It is written into the
/// statement as a literal the server cannot read as SQL (text and bytes as hex) and converted
/// by the server to the column's type, so text reaches a `DECIMAL`, `DATETIME`, `ENUM` or
/// `JSON` column in its usual text form; [`SqlValue::Now`] is `NOW(6)` (the statement's
/// start time, to the microsecond).
pub type MySqlValue = SqlValue;

/// `value` as a statement's text spells it.
pub(crate) fn literal(value: &MySqlValue) -> String {
    match value {
        SqlValue::Null => "NULL".to_owned(),
        SqlValue::Now => "NOW(6)".to_owned(),
        SqlValue::Text(text) => literal::text(text),
        SqlValue::Int(n) => n.to_string(),
        SqlValue::Bool(b) => if *b { "TRUE" } else { "FALSE" }.to_owned(),
        SqlValue::Bytes(bytes) => literal::bytes(bytes),
    }
}

/// A [`fencing_core::FencedWrite`] on a [`crate::MySqlStore`] that also sets other columns of
/// the row, in the statement that checks the fence: the fence and the change stay one atomic
/// step.
///
/// ```
/// use fencing_core::Lifecycle;
/// use fencing_mysql::{MySqlValue, MySqlWrite};
/// # fn main() -> Result<(), fencing_core::InvalidInput> {
/// let confirm = MySqlWrite::new(Lifecycle::default().confirm())
///     .set("paid_at", MySqlValue::Now)?
///     .set("gateway_ref", "re_3Pq81")?;
/// # let _ = confirm; Ok(()) }
/// ```
///
/// Column names are checked like every identifier when set, and against the table (it has
/// the column; it is none of the key, fence, state and payload columns) before anything is
/// sent.
pub type MySqlWrite = WriteWith<MySqlColumns>;

/// What a [`MySqlWrite`] sets beside the fence: columns of the row, each named by a checked
/// identifier, with a [`MySqlValue`].
#[derive(Debug)]
pub enum MySqlColumns {}

impl Extras for MySqlColumns {
    const KIND: &'static str = "column";
    type Name = MySqlIdent;
    type Value = MySqlValue;

    fn check(column: &str, _: &MySqlValue) -> Result<MySqlIdent, InvalidInput> {
        MySqlIdent::new(column)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_spelled_as_a_literal_the_server_cannot_read_as_sql() {
        assert_eq!(literal(&MySqlValue::Null), "NULL");
        assert_eq!(literal(&MySqlValue::Now), "NOW(6)");
        assert_eq!(
            literal(&MySqlValue::from("1'; DROP")),
            "CONVERT(X'31273b2044524f50' USING utf8mb4)"
        );
        assert_eq!(literal(&MySqlValue::from(-42)), "-42");
        assert_eq!(literal(&MySqlValue::from(true)), "TRUE");
        assert_eq!(literal(&MySqlValue::from(vec![0u8, 255])), "X'00ff'");
    }

    #[test]
    fn a_column_name_is_checked_when_set_and_set_once() {
        let write = MySqlWrite::new(fencing_core::Lifecycle::default().confirm());
        assert!(write.clone().set("", MySqlValue::Null).is_err());
        let twice = write
            .set("paid_at", MySqlValue::Now)
            .unwrap()
            .set("paid_at", MySqlValue::Null);
        assert!(twice.is_err());
    }
}

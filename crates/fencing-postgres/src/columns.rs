//! Fenced writes that also set columns of the caller's own, in the same statement.

use fencing_core::adapter::{Extras, SqlValue};
use fencing_core::{InputKind, InvalidInput, WriteWith};

use crate::ident::PgIdent;

/// A value for a column a fenced write also sets ([`SqlValue`]). It is bound as a
/// parameter (never spliced into the SQL) and cast to the column's type, so text reaches a
/// `uuid`, `numeric`, `timestamptz`, enum or `jsonb` column in its usual text form;
/// [`SqlValue::Now`] is `now()` (the transaction's start time). Postgres text cannot hold
/// NUL.
pub type PgValue = SqlValue;

/// A [`fencing_core::FencedWrite`] on a [`crate::PgStore`] that also sets other columns of the row, in the
/// one statement that checks the fence: the fence and the change stay one atomic step.
///
/// ```
/// use fencing_core::Lifecycle;
/// use fencing_postgres::{PgValue, PgWrite};
/// # fn main() -> Result<(), fencing_core::InvalidInput> {
/// let confirm = PgWrite::new(Lifecycle::default().confirm())
///     .set("paid_at", PgValue::Now)?
///     .set("gateway_ref", "re_3Pq81")?;
/// # let _ = confirm; Ok(()) }
/// ```
///
/// Column names are checked like every identifier when set, and against the table (it has
/// the column; it is none of the key, fence, state and payload columns) before anything is
/// sent.
pub type PgWrite = WriteWith<PgColumns>;

/// What a [`PgWrite`] sets beside the fence: columns of the row, each named by a checked
/// identifier, with a [`PgValue`] (text without NUL, which Postgres text cannot hold).
#[derive(Debug)]
pub enum PgColumns {}

impl Extras for PgColumns {
    const KIND: &'static str = "column";
    type Name = PgIdent;
    type Value = PgValue;

    fn check(column: &str, value: &PgValue) -> Result<PgIdent, InvalidInput> {
        let column = PgIdent::new(column)?;
        if matches!(value, PgValue::Text(text) if text.contains('\0')) {
            return Err(InvalidInput::new(
                InputKind::Write,
                format!(
                    "the text for column {column} contains NUL, which Postgres text cannot hold"
                ),
            ));
        }
        Ok(column)
    }
}

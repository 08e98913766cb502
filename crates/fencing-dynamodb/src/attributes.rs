//! Fenced writes that also set attributes of the caller's own, in the same `UpdateItem`.

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::adapter::Extras;
use fencing_core::{InvalidInput, WriteWith};

use crate::table::check_attribute;

/// A [`fencing_core::FencedWrite`] on a [`crate::DynamoStore`] that also sets attributes of the item, in the
/// one `UpdateItem` that checks the fence: the fence and the change stay one atomic step, and
/// the values stay typed (a Number amount is a Number other readers can query and index).
///
/// ```
/// use aws_sdk_dynamodb::types::AttributeValue;
/// use fencing_core::FencedWrite;
/// use fencing_dynamodb::DynamoWrite;
/// # fn main() -> Result<(), fencing_core::InvalidInput> {
/// let entry = DynamoWrite::new(FencedWrite::claim())
///     .set("amount_cents", AttributeValue::N("1250".into()))?
///     .set("merchant name", AttributeValue::S("Acme".into()))?;
/// # let _ = entry; Ok(()) }
/// ```
///
/// Names are checked when set (1 to 255 bytes, none twice) and against the table before
/// anything is sent: an attribute named like the table's key, sort key, fence, state or
/// payload attribute is refused as [`fencing_core::InputKind::Write`]. Names travel as placeholders, so
/// reserved words and names with dots or spaces are safe.
pub type DynamoWrite = WriteWith<DynamoAttributes>;

/// What a [`DynamoWrite`] sets beside the fence: attributes of the item, each named by 1 to
/// 255 bytes, with a typed [`AttributeValue`].
#[derive(Debug)]
pub enum DynamoAttributes {}

impl Extras for DynamoAttributes {
    const KIND: &'static str = "attribute";
    type Name = String;
    type Value = AttributeValue;

    fn check(name: &str, _: &AttributeValue) -> Result<String, InvalidInput> {
        check_attribute(name)?;
        Ok(name.to_owned())
    }
}

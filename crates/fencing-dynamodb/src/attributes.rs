//! Fenced writes that also set attributes of the caller's own, in the same `UpdateItem`.

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::{FencedWrite, InputKind, InvalidInput};

use crate::table::check_attribute;

/// A [`FencedWrite`] on a [`crate::DynamoStore`] that also sets attributes of the item, in the
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
/// payload attribute is refused as [`InputKind::Write`]. Names travel as placeholders, so
/// reserved words and names with dots or spaces are safe.
#[derive(Clone, Debug, PartialEq)]
pub struct DynamoWrite {
    write: FencedWrite,
    attributes: Vec<(String, AttributeValue)>,
}

impl DynamoWrite {
    /// `write`, setting no other attribute yet.
    pub fn new(write: FencedWrite) -> Self {
        DynamoWrite {
            write,
            attributes: Vec::new(),
        }
    }

    /// Also sets attribute `name` to `value`.
    pub fn set(
        mut self,
        name: impl Into<String>,
        value: AttributeValue,
    ) -> Result<Self, InvalidInput> {
        let name = name.into();
        check_attribute(&name)?;
        if self.attributes.iter().any(|(n, _)| *n == name) {
            return Err(InvalidInput::new(
                InputKind::Write,
                format!("attribute {name:?} is set twice in one write"),
            ));
        }
        self.attributes.push((name, value));
        Ok(self)
    }

    /// The fenced write.
    pub fn write(&self) -> &FencedWrite {
        &self.write
    }

    /// The other attributes set, in the order given.
    pub fn attributes(&self) -> &[(String, AttributeValue)] {
        &self.attributes
    }
}

impl From<FencedWrite> for DynamoWrite {
    fn from(write: FencedWrite) -> Self {
        DynamoWrite::new(write)
    }
}

impl From<&FencedWrite> for DynamoWrite {
    fn from(write: &FencedWrite) -> Self {
        DynamoWrite::new(write.clone())
    }
}

impl From<&DynamoWrite> for DynamoWrite {
    fn from(write: &DynamoWrite) -> Self {
        write.clone()
    }
}

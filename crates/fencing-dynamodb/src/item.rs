//! Items read back from the table, checked: what the store may rely on, and what it reports as
//! corrupt.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::{FencingToken, Record, RecordKey, State};

use crate::error::DynamoFailure;
use crate::table::DynamoTable;

/// An item as the SDK returns it.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// A stored Number read as a token: absent or `0` is "none"; anything but a canonical integer
/// in `0 ..= i64::MAX` is corrupt.
pub(crate) fn token_from(
    what: &str,
    value: Option<&AttributeValue>,
) -> Result<Option<FencingToken>, DynamoFailure> {
    let corrupt = |shown: String| {
        DynamoFailure::Corrupt(format!(
            "stored {what} {shown} is not a fencing token (an integer in 0..={})",
            i64::MAX
        ))
    };
    match value {
        None => Ok(None),
        Some(AttributeValue::N(text)) => match text.parse::<i64>() {
            Ok(0) => Ok(None),
            Ok(n) if n.to_string() == *text => FencingToken::from_i64(n)
                .map(Some)
                .map_err(|_| corrupt(text.clone())),
            _ => Err(corrupt(text.clone())),
        },
        Some(other) => Err(corrupt(format!("{other:?}"))),
    }
}

/// The record an item holds.
pub(crate) fn record_from(
    table: &DynamoTable,
    key: &RecordKey,
    item: &Item,
) -> Result<Record, DynamoFailure> {
    let fence = token_from("fence", item.get(table.fence_attribute()))?;
    let state = match item.get(table.state_attribute()) {
        None => None,
        Some(AttributeValue::S(text)) => Some(State::new(text.clone()).map_err(|e| {
            DynamoFailure::Corrupt(format!("stored state {text:?} is not a state: {e}"))
        })?),
        Some(other) => {
            return Err(DynamoFailure::Corrupt(format!(
                "stored state {other:?} is not a String"
            )));
        }
    };
    let payload = match item.get(table.payload_attribute()) {
        None => Vec::new(),
        Some(AttributeValue::B(blob)) => blob.as_ref().to_vec(),
        Some(other) => {
            return Err(DynamoFailure::Corrupt(format!(
                "stored payload {other:?} is not Binary"
            )));
        }
    };
    Ok(Record {
        key: key.clone(),
        fence,
        state,
        payload,
    })
}

/// The key of `key` in `table`.
pub(crate) fn key_of(table: &DynamoTable, key: &RecordKey) -> Item {
    HashMap::from([(
        table.key_attribute().to_owned(),
        AttributeValue::S(key.to_string()),
    )])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_canonical_integers_in_range_are_tokens() {
        let n = |text: &str| AttributeValue::N(text.into());
        assert_eq!(token_from("fence", None).unwrap(), None);
        assert_eq!(token_from("fence", Some(&n("0"))).unwrap(), None);
        assert_eq!(
            token_from("fence", Some(&n("34"))).unwrap(),
            Some(FencingToken::new(34).unwrap())
        );
        for bad in ["-7", "3.5", "1e3", "034", "9223372036854775808", "abc"] {
            assert!(token_from("fence", Some(&n(bad))).is_err(), "{bad}");
        }
        assert!(token_from("fence", Some(&AttributeValue::S("34".into()))).is_err());
    }
}

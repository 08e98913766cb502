//! How a record key names an item: a partition key alone, or a partition and a sort key, each
//! of type String, Number or Binary.

use std::collections::HashMap;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::{AttributeValue, KeyType, ScalarAttributeType};
use fencing_core::{InputKind, InvalidInput, RecordKey};

use crate::item::Item;

/// The type of a key attribute, as the table declares it, and how a record key spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DynamoKeyType {
    /// `S`: the text as it is (not empty).
    String,
    /// `N`: a number in one spelling only, `-?(0|[1-9][0-9]*)(\.[0-9]*[1-9])?` with at most
    /// 38 significant digits. DynamoDB compares numbers by value, so `7`, `7.0` and `7e0`
    /// name one item; accepting only one spelling keeps two record keys from naming the
    /// same item.
    Number,
    /// `B`: the bytes as lowercase hexadecimal, two digits a byte (not empty), again one
    /// spelling per value.
    Binary,
}

impl DynamoKeyType {
    fn scalar(self) -> ScalarAttributeType {
        match self {
            DynamoKeyType::String => ScalarAttributeType::S,
            DynamoKeyType::Number => ScalarAttributeType::N,
            DynamoKeyType::Binary => ScalarAttributeType::B,
        }
    }

    /// The value `text` spells, or why it spells none. No size check: a record key is at
    /// most 1,024 bytes, within DynamoDB's 2,048 for a partition and 1,024 for a sort key.
    fn value(self, text: &str) -> Result<AttributeValue, String> {
        Ok(match self {
            DynamoKeyType::String => {
                if text.is_empty() {
                    return Err("an empty String (DynamoDB refuses empty key values)".into());
                }
                AttributeValue::S(text.to_owned())
            }
            DynamoKeyType::Number => AttributeValue::N(canonical_number(text)?.to_owned()),
            DynamoKeyType::Binary => AttributeValue::B(Blob::new(hex_bytes(text)?)),
        })
    }
}

/// `text` if it is a number in the one spelling [`DynamoKeyType::Number`] accepts.
fn canonical_number(text: &str) -> Result<&str, String> {
    let refused = |why: &str| Err(format!("not a Number key ({why})"));
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match unsigned.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (unsigned, None),
    };
    let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
        return refused("digits, one optional '-' and one optional '.', no exponent");
    }
    if whole.len() > 1 && whole.starts_with('0') {
        return refused("no leading zeros");
    }
    if fraction.is_some_and(|f| f.ends_with('0')) {
        return refused("no trailing zeros after the '.'");
    }
    if text.starts_with('-') && whole == "0" && fraction.is_none() {
        return refused("zero has no sign");
    }
    let significant = format!("{whole}{}", fraction.unwrap_or(""));
    let significant = significant.trim_start_matches('0');
    if significant.len() > 38 {
        return refused("at most 38 significant digits");
    }
    Ok(text)
}

/// The bytes `text` spells in lowercase hexadecimal.
fn hex_bytes(text: &str) -> Result<Vec<u8>, String> {
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    if text.is_empty() || !text.len().is_multiple_of(2) {
        return Err("not a Binary key (an even, non-zero number of hex digits)".into());
    }
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| "not a Binary key (lowercase hex digits 0-9 a-f only)".into())
}

/// One key attribute: its name and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyAttribute {
    pub(crate) name: String,
    pub(crate) kind: DynamoKeyType,
}

/// A table's key: the partition key, and the sort key with the character that separates the
/// two parts of a record key (`m_4471|815`: the partition before the first separator, the
/// sort key after it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeySchema {
    pub(crate) partition: KeyAttribute,
    pub(crate) sort: Option<KeyAttribute>,
    pub(crate) separator: char,
}

impl KeySchema {
    /// The key attributes of the item `key` names, or why it names none (before anything is
    /// sent).
    pub(crate) fn item(&self, key: &RecordKey) -> Result<Item, InvalidInput> {
        let refused = |detail: String| InvalidInput::new(InputKind::RecordKey, detail);
        let (partition, sort) = match &self.sort {
            None => (key.as_str(), None),
            Some(sort) => {
                let (partition, sort_text) =
                    key.as_str().split_once(self.separator).ok_or_else(|| {
                        refused(format!(
                            "{key:?} has no sort key: this table's record keys are \
                             <{}>{}<{}>",
                            self.partition.name, self.separator, sort.name
                        ))
                    })?;
                (partition, Some((sort, sort_text)))
            }
        };
        let value = |attribute: &KeyAttribute, text: &str| {
            attribute.kind.value(text).map_err(|why| {
                refused(format!(
                    "{key:?}: {:?} for key attribute {:?} ({:?}) is {why}",
                    text, attribute.name, attribute.kind
                ))
            })
        };
        let mut item = HashMap::with_capacity(2);
        item.insert(
            self.partition.name.clone(),
            value(&self.partition, partition)?,
        );
        if let Some((sort, text)) = sort {
            item.insert(sort.name.clone(), value(sort, text)?);
        }
        Ok(item)
    }

    /// The record key of the item with these key values, checked as [`Self::item`] checks it.
    pub(crate) fn record_key(
        &self,
        partition: &str,
        sort: Option<&str>,
    ) -> Result<RecordKey, InvalidInput> {
        let text = match (&self.sort, sort) {
            (None, None) => partition.to_owned(),
            (Some(_), Some(sort)) => {
                if partition.contains(self.separator) {
                    return Err(InvalidInput::new(
                        InputKind::RecordKey,
                        format!(
                            "partition key {partition:?} contains the separator {:?}: \
                             name another with DynamoTable::with_key_separator",
                            self.separator
                        ),
                    ));
                }
                format!("{partition}{}{sort}", self.separator)
            }
            (None, Some(_)) => {
                return Err(InvalidInput::new(
                    InputKind::RecordKey,
                    "a sort key for a table that has none".to_owned(),
                ));
            }
            (Some(sort), None) => {
                return Err(InvalidInput::new(
                    InputKind::RecordKey,
                    format!("no value for the sort key {:?}", sort.name),
                ));
            }
        };
        let key = RecordKey::new(text)?;
        self.item(&key)?;
        Ok(key)
    }

    /// The attribute definitions and key schema elements a table with this key is created
    /// with, partition first.
    pub(crate) fn elements(&self) -> Vec<(&str, ScalarAttributeType, KeyType)> {
        let mut elements = vec![(
            self.partition.name.as_str(),
            self.partition.kind.scalar(),
            KeyType::Hash,
        )];
        if let Some(sort) = &self.sort {
            elements.push((sort.name.as_str(), sort.kind.scalar(), KeyType::Range));
        }
        elements
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema(partition: DynamoKeyType, sort: Option<DynamoKeyType>) -> KeySchema {
        KeySchema {
            partition: KeyAttribute {
                name: "pk".into(),
                kind: partition,
            },
            sort: sort.map(|kind| KeyAttribute {
                name: "sk".into(),
                kind,
            }),
            separator: '|',
        }
    }

    fn key(text: &str) -> RecordKey {
        RecordKey::new(text).unwrap()
    }

    #[test]
    fn numbers_have_one_spelling() {
        for good in ["0", "7", "-7", "815", "0.5", "-12.25", &"9".repeat(38)] {
            assert_eq!(canonical_number(good), Ok(good), "{good:?}");
        }
        for bad in [
            "",
            "-",
            "+7",
            "07",
            "7.0",
            "7.",
            ".5",
            "1e3",
            "-0",
            "0x10",
            "7 ",
            "1,5",
            &"9".repeat(39),
        ] {
            assert!(canonical_number(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn binary_keys_are_lowercase_hex() {
        assert_eq!(hex_bytes("00ff10"), Ok(vec![0, 255, 16]));
        for bad in ["", "0", "0F", "zz", "abc"] {
            assert!(hex_bytes(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_composite_key_splits_at_the_first_separator() {
        let schema = schema(DynamoKeyType::String, Some(DynamoKeyType::String));
        let item = schema.item(&key("m_4471|r_0815|v2")).unwrap();
        assert_eq!(item["pk"], AttributeValue::S("m_4471".into()));
        assert_eq!(item["sk"], AttributeValue::S("r_0815|v2".into()));
    }

    #[test]
    fn typed_keys_become_typed_values() {
        let schema = schema(DynamoKeyType::Binary, Some(DynamoKeyType::Number));
        let item = schema.item(&key("6d5f34343731|815")).unwrap();
        assert_eq!(item["pk"], AttributeValue::B(Blob::new(b"m_4471".to_vec())));
        assert_eq!(item["sk"], AttributeValue::N("815".into()));
    }

    #[test]
    fn keys_the_table_cannot_hold_are_refused() {
        let composite = schema(DynamoKeyType::String, Some(DynamoKeyType::Number));
        for bad in ["m_4471", "m_4471|", "|815", "m_4471|r_0815", "m_4471|815.0"] {
            let err = composite.item(&key(bad)).unwrap_err();
            assert_eq!(err.kind(), InputKind::RecordKey, "{bad:?}");
        }
    }

    #[test]
    fn record_keys_are_built_from_their_parts() {
        let composite = schema(DynamoKeyType::String, Some(DynamoKeyType::Number));
        assert_eq!(
            composite
                .record_key("m_4471", Some("815"))
                .unwrap()
                .as_str(),
            "m_4471|815"
        );
        assert!(composite.record_key("m|4471", Some("815")).is_err());
        assert!(composite.record_key("m_4471", None).is_err());
        assert!(composite.record_key("m_4471", Some("8.50")).is_err());
        let single = schema(DynamoKeyType::Number, None);
        assert!(single.record_key("815", Some("1")).is_err());
        assert_eq!(single.record_key("815", None).unwrap().as_str(), "815");
    }
}

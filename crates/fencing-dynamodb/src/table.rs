//! Which table holds the fenced records, under which attribute names.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use fencing_core::adapter::RequestEffect;
use fencing_core::{InputKind, InvalidInput, Record, RecordKey, Result, State};

use crate::error::{DynamoFailure, classify};
use crate::item::{Fractions, Item, token_from};
use crate::key::{DynamoKeyType, KeyAttribute, KeySchema};

/// A DynamoDB table name: 3 to 255 characters of `A-Z a-z 0-9 _ . -`, checked here because
/// some emulators accept names the service refuses.
pub(crate) fn check_table_name(name: &str) -> Result<(), InvalidInput> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    if !(3..=255).contains(&name.len()) || !name.chars().all(allowed) {
        return Err(InvalidInput::new(
            InputKind::Identifier,
            format!(
                "{name:?} is not a DynamoDB table name: 3 to 255 characters of A-Z, a-z, 0-9, \
                 '_', '.' and '-'"
            ),
        ));
    }
    Ok(())
}

/// An attribute name: non-empty and at most 255 bytes (the limit for key attributes, and more
/// than any fence, state or payload attribute needs).
pub(crate) fn check_attribute(name: &str) -> Result<(), InvalidInput> {
    if name.is_empty() || name.len() > 255 {
        return Err(InvalidInput::new(
            InputKind::Identifier,
            format!("{name:?} is not an attribute name: 1 to 255 bytes"),
        ));
    }
    Ok(())
}

/// A table whose items are fenced records: a partition key (a String unless
/// [`Self::with_key_type`] says otherwise) and optionally a sort key
/// ([`Self::with_sort_key`]), a Number fence attribute (absent or 0: no fence yet), a String
/// state attribute and a Binary payload attribute.
///
/// Every attribute name is configurable and always sent through expression attribute names, so
/// reserved words (`state`) and names with dots or spaces are safe.
///
/// On a table with a sort key, a record key is the partition key's value, the separator
/// (`|` unless [`Self::with_key_separator`] names another) and the sort key's value, split at
/// the first separator; [`Self::record_key`] builds one from its parts. A record key the
/// table cannot hold (no separator, a Number key that is not a number in its one accepted
/// spelling, see [`DynamoKeyType`]) is refused as [`InputKind::RecordKey`] before anything is
/// sent.
///
/// ```
/// use fencing_dynamodb::{DynamoKeyType, DynamoTable};
///
/// # fn main() -> Result<(), fencing_core::InvalidInput> {
/// let ledger = DynamoTable::new("ledger")?
///     .with_key_attribute("merchant")?
///     .with_sort_key("entry", DynamoKeyType::Number)?;
/// let entry = ledger.record_key("m_4471", Some("815"))?;
/// assert_eq!(entry.as_str(), "m_4471|815");
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamoTable {
    name: String,
    key: KeySchema,
    fence: String,
    state: String,
    payload: String,
}

impl DynamoTable {
    /// The table `name` with attributes `id` (partition key), `fence`, `state` and `payload`.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        check_table_name(&name)?;
        Ok(DynamoTable {
            name,
            key: KeySchema {
                partition: KeyAttribute {
                    name: "id".into(),
                    kind: DynamoKeyType::String,
                },
                sort: None,
                separator: '|',
            },
            fence: "fence".into(),
            state: "state".into(),
            payload: "payload".into(),
        })
    }

    /// Names the partition key attribute.
    pub fn with_key_attribute(mut self, name: impl Into<String>) -> Result<Self, InvalidInput> {
        self.key.partition.name = name.into();
        self.checked()
    }

    /// The partition key's type (String unless set).
    pub fn with_key_type(mut self, kind: DynamoKeyType) -> Self {
        self.key.partition.kind = kind;
        self
    }

    /// Gives the table a sort key: attribute `name` of type `kind`.
    pub fn with_sort_key(
        mut self,
        name: impl Into<String>,
        kind: DynamoKeyType,
    ) -> Result<Self, InvalidInput> {
        self.key.sort = Some(KeyAttribute {
            name: name.into(),
            kind,
        });
        self.checked()
    }

    /// The character between a record key's partition and sort key values (`|` unless set):
    /// ASCII punctuation other than `-` and `.`, which Number keys contain.
    pub fn with_key_separator(mut self, separator: char) -> Result<Self, InvalidInput> {
        if !separator.is_ascii_punctuation() || matches!(separator, '-' | '.') {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!(
                    "{separator:?} cannot separate key values: ASCII punctuation other than \
                     '-' and '.'"
                ),
            ));
        }
        self.key.separator = separator;
        Ok(self)
    }

    /// Names the fence attribute (a Number).
    pub fn with_fence_attribute(self, name: impl Into<String>) -> Result<Self, InvalidInput> {
        DynamoTable {
            fence: name.into(),
            ..self
        }
        .checked()
    }

    /// Names the state attribute (a String).
    pub fn with_state_attribute(self, name: impl Into<String>) -> Result<Self, InvalidInput> {
        DynamoTable {
            state: name.into(),
            ..self
        }
        .checked()
    }

    /// Names the payload attribute (a Binary).
    pub fn with_payload_attribute(self, name: impl Into<String>) -> Result<Self, InvalidInput> {
        DynamoTable {
            payload: name.into(),
            ..self
        }
        .checked()
    }

    fn checked(self) -> Result<Self, InvalidInput> {
        let mut names = vec![&self.key.partition.name];
        names.extend(self.key.sort.as_ref().map(|sort| &sort.name));
        names.extend([&self.fence, &self.state, &self.payload]);
        for (i, name) in names.iter().enumerate() {
            check_attribute(name)?;
            if names[..i].contains(name) {
                return Err(InvalidInput::new(
                    InputKind::Identifier,
                    format!("attribute {name:?} is named for two roles"),
                ));
            }
        }
        Ok(self)
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The partition key attribute.
    pub fn key_attribute(&self) -> &str {
        &self.key.partition.name
    }

    /// The partition key's type.
    pub fn key_type(&self) -> DynamoKeyType {
        self.key.partition.kind
    }

    /// The sort key attribute and its type, if the table has one.
    pub fn sort_key(&self) -> Option<(&str, DynamoKeyType)> {
        self.key.sort.as_ref().map(|s| (s.name.as_str(), s.kind))
    }

    /// The character between a record key's partition and sort key values.
    pub fn key_separator(&self) -> char {
        self.key.separator
    }

    /// The record key of the item with these key values (`sort` for a table with a sort
    /// key only), checked as every write checks its key: a partition value containing the
    /// separator, a missing or superfluous sort value, or a value not of its key's type is
    /// refused.
    pub fn record_key(
        &self,
        partition: &str,
        sort: Option<&str>,
    ) -> Result<RecordKey, InvalidInput> {
        self.key.record_key(partition, sort)
    }

    /// Each attribute the table gives a role, with the role's name.
    pub(crate) fn roles(&self) -> Vec<(&str, &'static str)> {
        let mut roles = vec![(self.key.partition.name.as_str(), "partition key")];
        roles.extend(
            self.key
                .sort
                .as_ref()
                .map(|s| (s.name.as_str(), "sort key")),
        );
        roles.extend([
            (self.fence.as_str(), "fence"),
            (self.state.as_str(), "state"),
            (self.payload.as_str(), "payload"),
        ]);
        roles
    }

    /// The key attributes of the item `key` names.
    pub(crate) fn key_item(&self, key: &RecordKey) -> Result<Item, InvalidInput> {
        self.key.item(key)
    }

    /// The record an item of this table holds, or why it is corrupt.
    pub(crate) fn record_from(
        &self,
        key: &RecordKey,
        item: &Item,
    ) -> Result<Record, DynamoFailure> {
        let fence = token_from("fence", item.get(&self.fence), Fractions::RoundUp)?;
        let state = match item.get(&self.state) {
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
        let payload = match item.get(&self.payload) {
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

    /// The fence attribute.
    pub fn fence_attribute(&self) -> &str {
        &self.fence
    }

    /// The state attribute.
    pub fn state_attribute(&self) -> &str {
        &self.state
    }

    /// The payload attribute.
    pub fn payload_attribute(&self) -> &str {
        &self.payload
    }

    /// The name a store on this table goes by in errors and batches: `dynamodb:<table>`.
    pub fn store_name(&self) -> String {
        format!("dynamodb:{}", self.name)
    }

    /// Creates the table (on-demand capacity, its partition and sort keys as declared) and
    /// waits until it is active. A table of that name that exists already is accepted if its
    /// key schema is exactly that (so creating is idempotent), and refused with a message
    /// naming its key schema otherwise.
    pub async fn create_if_missing(&self, client: &Client) -> Result<()> {
        create_table(client, &self.name, &self.key.elements(), &self.store_name()).await
    }

    /// [`Self::create_if_missing`], as 0.1 named it.
    #[deprecated(
        since = "0.2.0",
        note = "renamed `DynamoTable::create_if_missing(&client)`"
    )]
    #[doc(hidden)]
    pub async fn create(&self, client: &Client) -> Result<()> {
        self.create_if_missing(client).await
    }
}

/// The key schema of a table: each key attribute with its type and role, partition first.
pub(crate) type KeyElements<'a> = [(&'a str, ScalarAttributeType, KeyType)];

/// Creates a table with the key `elements`, on-demand, and waits for it to be active (a few
/// polls on the service; at once on an emulator). A table that already exists with exactly
/// that key is waited for instead; one with another key is an error naming it.
pub(crate) async fn create_table(
    client: &Client,
    name: &str,
    elements: &KeyElements<'_>,
    store: &str,
) -> Result<()> {
    let built = |e: aws_sdk_dynamodb::error::BuildError| {
        DynamoFailure::NotBuilt(e).into_error(store, RequestEffect::ReadOnly)
    };
    let mut request = client
        .create_table()
        .table_name(name)
        .billing_mode(BillingMode::PayPerRequest);
    for (attribute, scalar, role) in elements {
        request = request
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name(*attribute)
                    .attribute_type(scalar.clone())
                    .build()
                    .map_err(built)?,
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name(*attribute)
                    .key_type(role.clone())
                    .build()
                    .map_err(built)?,
            );
    }
    let created = request.send().await;
    if let Err(err) = created
        && err
            .as_service_error()
            .is_none_or(|e| !e.is_resource_in_use_exception())
    {
        return Err(classify(err, store, RequestEffect::ReadOnly));
    }
    for _ in 0..600 {
        let described = client
            .describe_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| classify(e, store, RequestEffect::ReadOnly))?;
        let Some(table) = described.table() else {
            break;
        };
        check_key_schema(table, name, elements, store)?;
        if table.table_status().is_some_and(|s| s.as_str() == "ACTIVE") {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(
        DynamoFailure::NotActive(format!("table {name} did not become active within 60 s"))
            .into_error(store, RequestEffect::ReadOnly),
    )
}

/// Refuses a table whose key schema is not exactly `elements`.
fn check_key_schema(
    table: &aws_sdk_dynamodb::types::TableDescription,
    name: &str,
    elements: &KeyElements<'_>,
    store: &str,
) -> Result<()> {
    let schema: Vec<String> = table
        .key_schema()
        .iter()
        .map(|k| {
            let kind = table
                .attribute_definitions()
                .iter()
                .find(|a| a.attribute_name() == k.attribute_name())
                .map_or("?", |a| a.attribute_type().as_str());
            format!("{} ({kind}, {})", k.attribute_name(), k.key_type().as_str())
        })
        .collect();
    let expected: Vec<String> = elements
        .iter()
        .map(|(attribute, scalar, role)| {
            format!("{attribute} ({}, {})", scalar.as_str(), role.as_str())
        })
        .collect();
    if schema == expected {
        return Ok(());
    }
    let expected = expected.join(" + ");
    Err(DynamoFailure::Schema(format!(
        "table {name} already exists with the key {}, not {expected}: name another table, or \
         the attribute its key already is",
        schema.join(" + ")
    ))
    .into_error(store, RequestEffect::ReadOnly))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_follow_the_service_rules() {
        for good in ["abc", "refunds.v2", "a-b_c", &"x".repeat(255)] {
            assert!(DynamoTable::new(good).is_ok(), "{good:?}");
        }
        for bad in [
            "",
            "ab",
            "refunds v2",
            "réfunds",
            "a/b",
            "a:b",
            &"x".repeat(256),
        ] {
            let err = DynamoTable::new(bad).unwrap_err();
            assert_eq!(err.kind(), InputKind::Identifier, "{bad:?}");
        }
    }

    #[test]
    fn attribute_names_are_checked_and_distinct() {
        let table = DynamoTable::new("refunds").unwrap();
        assert!(table.clone().with_state_attribute("").is_err());
        assert!(table.clone().with_fence_attribute("x".repeat(256)).is_err());
        assert!(table.clone().with_fence_attribute("state").is_err());
        let renamed = table
            .with_key_attribute("refund id")
            .unwrap()
            .with_state_attribute("status.v2")
            .unwrap();
        assert_eq!(renamed.key_attribute(), "refund id");
        assert_eq!(renamed.store_name(), "dynamodb:refunds");
    }
}

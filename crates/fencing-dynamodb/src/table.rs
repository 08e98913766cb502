//! Which table holds the fenced records, under which attribute names.

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use fencing_core::adapter::RequestEffect;
use fencing_core::{InputKind, InvalidInput, Result};

use crate::error::classify;

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
fn check_attribute(name: &str) -> Result<(), InvalidInput> {
    if name.is_empty() || name.len() > 255 {
        return Err(InvalidInput::new(
            InputKind::Identifier,
            format!("{name:?} is not an attribute name: 1 to 255 bytes"),
        ));
    }
    Ok(())
}

/// A table whose items are fenced records: a string partition key, a Number fence attribute
/// (absent or 0: no fence yet), a String state attribute and a Binary payload attribute.
///
/// Every attribute name is configurable and always sent through expression attribute names, so
/// reserved words (`state`) and names with dots or spaces are safe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DynamoTable {
    name: String,
    key: String,
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
            key: "id".into(),
            fence: "fence".into(),
            state: "state".into(),
            payload: "payload".into(),
        })
    }

    /// Names the partition key attribute (a String).
    pub fn with_key_attribute(self, name: impl Into<String>) -> Result<Self, InvalidInput> {
        DynamoTable {
            key: name.into(),
            ..self
        }
        .checked()
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
        let names = [&self.key, &self.fence, &self.state, &self.payload];
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
        &self.key
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

    /// Creates the table (on-demand capacity, the key attribute as a String hash key) and
    /// waits until it is active. A table of that name that exists already is accepted if its
    /// key is exactly that attribute as a String hash key (so creating is idempotent), and
    /// refused with a message naming its key schema otherwise.
    pub async fn create(&self, client: &Client) -> Result<()> {
        create_table(client, &self.name, &self.key, &self.store_name()).await
    }
}

/// Creates a table keyed by the String attribute `key`, on-demand, and waits for it to be
/// active (a few polls on the service; at once on an emulator). A table that already exists
/// with exactly that key is waited for instead; one with another key is an error naming it.
pub(crate) async fn create_table(
    client: &Client,
    name: &str,
    key: &str,
    store: &str,
) -> Result<()> {
    let built = |e: aws_sdk_dynamodb::error::BuildError| {
        fencing_core::Error::failed_request(store, RequestEffect::ReadOnly, false, Box::new(e))
    };
    let created = client
        .create_table()
        .table_name(name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(built)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(key)
                .key_type(KeyType::Hash)
                .build()
                .map_err(built)?,
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await;
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
        check_key_schema(table, name, key, store)?;
        if table.table_status().is_some_and(|s| s.as_str() == "ACTIVE") {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(fencing_core::Error::failed_request(
        store,
        RequestEffect::ReadOnly,
        false,
        format!("table {name} did not become active within 60 s").into(),
    ))
}

/// Refuses a table whose key is not exactly `key` as a String hash key.
fn check_key_schema(
    table: &aws_sdk_dynamodb::types::TableDescription,
    name: &str,
    key: &str,
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
    let expected = format!("{key} (S, HASH)");
    if schema == [expected.clone()] {
        return Ok(());
    }
    Err(fencing_core::Error::failed_request(
        store,
        RequestEffect::ReadOnly,
        false,
        format!(
            "table {name} already exists with the key {}, not {expected}: name another table, \
             or the attribute its key already is",
            schema.join(" + ")
        )
        .into(),
    ))
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

//! A client against the AWS emulator, and one fresh table per test.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use aws_sdk_dynamodb::Client;
use fencing_dynamodb::{DynamoKeyType, DynamoLease, DynamoStore, DynamoTable};
use fencing_test_support::aws;
use fencing_testkit::conformance::Capabilities;
use fencing_testkit::unique_name;

/// A client as a user builds one: their endpoint, credentials and HTTP stack.
pub(crate) fn client() -> Client {
    client_with(aws_sdk_dynamodb::Config::builder())
}

/// The same client, built from `config` (which may add interceptors).
pub(crate) fn client_with(config: aws_sdk_dynamodb::config::Builder) -> Client {
    aws::dynamodb_client(config)
}

/// The capabilities of the DynamoDB the tests run on (moto, or DynamoDB Local).
pub(crate) fn caps() -> Capabilities {
    aws::dynamodb_capabilities()
}

/// A fresh table of fenced records.
pub(crate) async fn table(client: &Client) -> DynamoTable {
    let table = DynamoTable::new(unique_name("fencing")).unwrap();
    table.create_if_missing(client).await.unwrap();
    table
}

/// A fresh fenced store.
pub(crate) async fn store() -> DynamoStore {
    let client = client();
    let table = table(&client).await;
    DynamoStore::new(client, table)
}

/// A fresh lease table.
pub(crate) async fn lease(client: &Client) -> DynamoLease {
    let lease = DynamoLease::new(client.clone(), unique_name("leases")).unwrap();
    lease.create_if_missing().await.unwrap();
    lease
}

/// A table as a team's ledger might be keyed: a Binary partition key `merchant` and a Number
/// sort key `entry`, attribute names that are reserved words or need placeholders.
pub(crate) async fn composite_table(client: &Client) -> DynamoTable {
    let table = DynamoTable::new(unique_name("ledger"))
        .unwrap()
        .with_key_attribute("merchant")
        .unwrap()
        .with_key_type(DynamoKeyType::Binary)
        .with_sort_key("entry", DynamoKeyType::Number)
        .unwrap()
        .with_fence_attribute("fence.v2")
        .unwrap()
        .with_state_attribute("status")
        .unwrap();
    table.create_if_missing(client).await.unwrap();
    table
}

/// A fresh store on [`composite_table`].
pub(crate) async fn composite_store() -> DynamoStore {
    let client = client();
    let table = composite_table(&client).await;
    DynamoStore::new(client, table)
}

/// The emulator's capabilities, the suite's keys spelled for [`composite_table`]: the key
/// text's bytes as the partition key, entry 815.
pub(crate) fn composite_caps() -> Capabilities {
    fn spelled(text: &str) -> String {
        let hex: String = text.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{hex}|815")
    }
    caps().with_record_keys(spelled)
}

/// A ledger keyed by merchant (String) and entry number (Number), with the state attribute
/// named `status` (a reserved word).
pub(crate) async fn ledger_table(client: &Client) -> DynamoTable {
    let table = DynamoTable::new(unique_name("ledger"))
        .unwrap()
        .with_key_attribute("merchant")
        .unwrap()
        .with_sort_key("entry", DynamoKeyType::Number)
        .unwrap()
        .with_state_attribute("status")
        .unwrap();
    table.create_if_missing(client).await.unwrap();
    table
}

/// How many items `table` holds, by a strongly consistent scan.
pub(crate) async fn item_count(client: &Client, table: &DynamoTable) -> i32 {
    client
        .scan()
        .table_name(table.name())
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .count()
}

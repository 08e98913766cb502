//! A client against the AWS emulator, and one fresh table per test.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use aws_sdk_dynamodb::Client;
use fencing_dynamodb::{DynamoLease, DynamoStore, DynamoTable};
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

/// The emulator's capabilities, shared by every AWS adapter's tests.
pub(crate) fn caps() -> Capabilities {
    aws::emulator_capabilities()
}

/// A fresh table of fenced records.
pub(crate) async fn table(client: &Client) -> DynamoTable {
    let table = DynamoTable::new(unique_name("fencing")).unwrap();
    table.create(client).await.unwrap();
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
    lease.create_table().await.unwrap();
    lease
}

//! Errors that say their cause: the service's code, message, HTTP status and request id; a
//! request that never reached the service says nothing was applied; creating a table that
//! exists is idempotent when its key is the one asked for, and names the key when it is not.

mod common;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use fencing_core::adapter::StoreWrites;
use fencing_core::{Error, FencedWrite, FencingToken, RecordKey};
use fencing_dynamodb::{DynamoKeyType, DynamoStore, DynamoTable};
use fencing_test_support::aws;

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

#[tokio::test]
async fn a_service_error_says_its_code_message_status_and_request_id() {
    let client = common::client();
    // A table keyed by a Number: a fenced write's String key does not match its schema.
    let name = fencing_testkit::unique_name("numbers");
    client
        .create_table()
        .table_name(&name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::N)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let store = DynamoStore::new(client, DynamoTable::new(&name).unwrap());
    let err = store
        .write(&key("r_1"), FencingToken::MIN, &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Misconfigured { .. }), "{err:?}");
    let message = err.to_string();
    for part in ["ValidationException: ", "(HTTP 400, request id "] {
        assert!(message.contains(part), "{part:?} missing from {message}");
    }
    assert!(!message.ends_with("service error"), "{message}");
}

#[tokio::test]
async fn a_request_to_a_closed_port_was_not_sent_and_says_so() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let client = aws::dynamodb_client_at(&endpoint, aws_sdk_dynamodb::Config::builder());
    let store = DynamoStore::new(client, DynamoTable::new("refunds").unwrap());
    let err = store
        .write(&key("r_1"), FencingToken::MIN, &FencedWrite::claim())
        .await
        .unwrap_err();
    // Not `Ambiguous`: nothing reached the service, so there is nothing to retry for.
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("the request was not sent, so nothing was applied"),
        "{message}"
    );
    assert!(message.to_lowercase().contains("refused"), "{message}");
}

#[tokio::test]
async fn creating_a_table_that_exists_is_idempotent_or_names_the_key_it_has() {
    let client = common::client();
    let table = DynamoTable::new(fencing_testkit::unique_name("refunds")).unwrap();
    table.create_if_missing(&client).await.unwrap();
    table.create_if_missing(&client).await.unwrap();

    let other_key = DynamoTable::new(table.name())
        .unwrap()
        .with_key_attribute("refund_id")
        .unwrap();
    let err = other_key.create_if_missing(&client).await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("already exists with the key id (S, HASH)"),
        "{message}"
    );
    assert!(message.contains("not refund_id (S, HASH)"), "{message}");

    let with_sort_key = DynamoTable::new(table.name())
        .unwrap()
        .with_sort_key("entry", DynamoKeyType::Number)
        .unwrap();
    let message = with_sort_key
        .create_if_missing(&client)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("not id (S, HASH) + entry (N, RANGE)"),
        "{message}"
    );
}

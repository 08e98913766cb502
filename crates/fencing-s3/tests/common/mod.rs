//! A client against the AWS emulator, and one fresh bucket per test.
// Each test binary uses its own subset of these helpers.
#![allow(dead_code)]

use aws_sdk_s3::Client;
use fencing_s3::{JsonCodec, S3Bucket, S3Store};
use fencing_test_support::aws;
use fencing_testkit::conformance::Capabilities;
use fencing_testkit::unique_name;

/// A client as a user builds one, path-style (the emulator has no virtual hosts).
pub(crate) fn client() -> Client {
    client_with(aws_sdk_s3::Config::builder())
}

/// The same client, built from `config` (which may add interceptors).
pub(crate) fn client_with(config: aws_sdk_s3::config::Builder) -> Client {
    aws::s3_client(config)
}

/// The emulator's capabilities, shared by every AWS adapter's tests.
pub(crate) fn caps() -> Capabilities {
    aws::emulator_capabilities()
}

/// A fresh bucket, with the records under `prefix`.
pub(crate) async fn bucket(client: &Client, prefix: &str) -> S3Bucket {
    let name = unique_name("fencing");
    client.create_bucket().bucket(&name).send().await.unwrap();
    S3Bucket::new(name, prefix).unwrap()
}

/// A fresh fenced store under the prefix `m_4471/`.
pub(crate) async fn store() -> S3Store {
    store_on(client()).await
}

/// A fresh fenced store through `client`.
pub(crate) async fn store_on(client: Client) -> S3Store {
    let bucket = bucket(&client, "m_4471/").await;
    S3Store::new(client, bucket)
}

/// A fresh fenced store whose objects are the team's own JSON ([`JsonCodec`]).
pub(crate) async fn json_store() -> S3Store {
    store().await.with_codec(JsonCodec::new())
}

/// The emulator's capabilities, the suite's payloads spelled as JSON objects for
/// [`json_store`]: `{"p":"<the bytes in hex>"}`, and no payload as none.
pub(crate) fn json_caps() -> Capabilities {
    fn spelled(bytes: &[u8]) -> Vec<u8> {
        if bytes.is_empty() {
            return Vec::new();
        }
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("{{\"p\":\"{hex}\"}}").into_bytes()
    }
    caps().with_record_payloads(spelled)
}

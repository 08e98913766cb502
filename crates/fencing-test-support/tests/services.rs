//! The AWS emulator fixture serves what the S3 and DynamoDB adapters will need, in whichever
//! mode `FENCING_TEST_SERVICES` picks (a local `moto_server` or a container).

use std::io::{Read, Write};
use std::net::TcpStream;

use fencing_test_support::services;
use fencing_testkit::unique_name;

/// One HTTP/1.1 request with `Connection: close`; returns the status line and the body.
fn http(
    endpoint: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> (String, String) {
    let authority = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(authority).unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    (
        head.lines().next().unwrap_or_default().to_owned(),
        body.to_owned(),
    )
}

#[test]
fn the_aws_emulator_serves_s3_and_dynamodb() {
    let endpoint = services::aws_endpoint();
    let bucket = unique_name("fencing-probe");
    let (status, _) = http(&endpoint, "PUT", &format!("/{bucket}"), &[], "");
    assert!(status.contains(" 200"), "create bucket: {status}");
    let (status, listing) = http(&endpoint, "GET", "/", &[], "");
    assert!(
        status.contains(" 200") && listing.contains(&bucket),
        "{status}: {listing}"
    );

    let (status, tables) = http(
        &endpoint,
        "POST",
        "/",
        &[
            "X-Amz-Target: DynamoDB_20120810.ListTables",
            "Content-Type: application/x-amz-json-1.0",
            "Authorization: AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00",
        ],
        "{}",
    );
    assert!(
        status.contains(" 200") && tables.contains("TableNames"),
        "{status}: {tables}"
    );
}

/// The moto the fixtures start answers one request at a time: of many conditional writes
/// that meet on one DynamoDB item, exactly one applies, as on AWS (moto's own threaded
/// server lets several through, and two acquisitions of one lease would share a token).
#[test]
fn the_fixtures_moto_applies_one_of_many_conditional_writes_that_meet() {
    let moto = services::MotoServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
            ScalarAttributeType,
        };
        let client = fencing_test_support::aws::dynamodb_client_at(
            &moto.endpoint(),
            aws_sdk_dynamodb::config::Builder::new(),
        );
        let table = unique_name("meet");
        client
            .create_table()
            .table_name(&table)
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("pk")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("pk")
                    .key_type(KeyType::Hash)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
        for round in 0..20 {
            let key = format!("lease-{round}");
            let mut writers = tokio::task::JoinSet::new();
            for writer in 0..24 {
                let (client, table, key) = (client.clone(), table.clone(), key.clone());
                writers.spawn(async move {
                    client
                        .update_item()
                        .table_name(table)
                        .key("pk", AttributeValue::S(key))
                        .update_expression("SET #owner = :owner ADD #token :one")
                        .condition_expression("attribute_not_exists(#owner)")
                        .expression_attribute_names("#owner", "owner")
                        .expression_attribute_names("#token", "token")
                        .expression_attribute_values(
                            ":owner",
                            AttributeValue::N(writer.to_string()),
                        )
                        .expression_attribute_values(":one", AttributeValue::N("1".into()))
                        .send()
                        .await
                        .is_ok()
                });
            }
            let applied = writers
                .join_all()
                .await
                .into_iter()
                .filter(|ok| *ok)
                .count();
            assert_eq!(
                applied, 1,
                "round {round}: {applied} conditional updates applied"
            );
        }
    });
}

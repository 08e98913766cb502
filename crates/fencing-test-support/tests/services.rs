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

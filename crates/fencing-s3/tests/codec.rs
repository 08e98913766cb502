//! The fence inside the team's own JSON object ([`JsonCodec`]) on the emulator: a plain JSON
//! reader reads the receipt, a stale holder is refused, a newer holder's byte-identical
//! payload still changes the ETag, and what JSON cannot hold or the codec cannot read is never
//! written or written over.

mod common;

use aws_sdk_s3::primitives::ByteStream;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FencedStore, FencedWrite, FencingToken, Holder, InputKind, MemoryTokenSource, RecordKey,
    ResourceName, State, TokenSource,
};
use fencing_s3::S3Store;

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

const RECEIPT: &[u8] = br#"{"refund":"r_0815","cents":1250}"#;

fn receipt(payload: &[u8]) -> FencedWrite {
    FencedWrite::claim()
        .set_state(State::new("sent").unwrap())
        .set_payload(payload.to_vec())
}

async fn raw_body(store: &S3Store, key: &RecordKey) -> (Vec<u8>, String) {
    let object = store
        .client()
        .get_object()
        .bucket(store.bucket().bucket())
        .key(store.bucket().object_key(key).unwrap())
        .send()
        .await
        .unwrap();
    let etag = object.e_tag().unwrap().to_owned();
    (
        object.body.collect().await.unwrap().into_bytes().to_vec(),
        etag,
    )
}

#[tokio::test]
async fn a_plain_json_reader_reads_the_receipt_and_the_payload_comes_back_byte_for_byte() {
    let store = common::json_store().await;
    let k = key("r_0815");
    store.write(&k, token(34), &receipt(RECEIPT)).await.unwrap();

    let (body, _) = raw_body(&store, &k).await;
    let plain: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(plain["refund"], "r_0815");
    assert_eq!(plain["cents"], 1250);
    assert_eq!(plain["_fence"], 34);
    assert_eq!(plain["_state"], "sent");
    let record = store.read(&k).await.unwrap().unwrap();
    assert_eq!(record.payload, RECEIPT);
    assert_eq!(record.fence, Some(token(34)));

    let err = store
        .write(&k, token(33), &receipt(RECEIPT))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
}

#[tokio::test]
async fn a_newer_holders_identical_payload_changes_the_etag_so_a_stale_if_match_fails() {
    let store = common::json_store().await;
    let k = key("r_0815");
    store.write(&k, token(33), &receipt(RECEIPT)).await.unwrap();
    let (_, stale_etag) = raw_body(&store, &k).await;
    store.write(&k, token(34), &receipt(RECEIPT)).await.unwrap();
    let (_, etag) = raw_body(&store, &k).await;
    assert_ne!(
        etag, stale_etag,
        "the same payload under a newer fence is another body"
    );

    // What a stale holder's put would be: its body, If-Match on the ETag it remembers.
    let stale_put = store
        .client()
        .put_object()
        .bucket(store.bucket().bucket())
        .key(store.bucket().object_key(&k).unwrap())
        .body(ByteStream::from(RECEIPT.to_vec()))
        .if_match(&stale_etag)
        .send()
        .await;
    assert!(stale_put.is_err(), "the stale If-Match must not land");
    assert_eq!(
        store.read(&k).await.unwrap().unwrap().fence,
        Some(token(34))
    );
}

#[tokio::test]
async fn payloads_json_cannot_hold_are_refused_with_nothing_written() {
    let store = common::json_store().await;
    for (i, payload) in [
        &b"[1, 2]"[..],
        b"70.25",
        b"{\"cents\":",
        br#"{"_fence":1}"#,
        b"{}",
    ]
    .into_iter()
    .enumerate()
    {
        let k = key(&format!("r_{i}"));
        let err = store
            .write(&k, token(1), &receipt(payload))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(input) if input.kind() == InputKind::Write),
            "{payload:?}: {err:?}"
        );
        let head = store
            .client()
            .head_object()
            .bucket(store.bucket().bucket())
            .key(store.bucket().object_key(&k).unwrap())
            .send()
            .await;
        assert!(head.is_err(), "{payload:?}: nothing was written");
    }
}

#[tokio::test]
async fn an_object_the_codec_cannot_read_is_never_written_over() {
    let store = common::json_store().await;
    let k = key("r_0815");
    let object = store.bucket().object_key(&k).unwrap();
    let foreign = br#"{"refund":"r_0815","_fence":"34"}"#.to_vec();
    store
        .client()
        .put_object()
        .bucket(store.bucket().bucket())
        .key(&object)
        .body(ByteStream::from(foreign.clone()))
        .send()
        .await
        .unwrap();
    let err = store
        .write(&k, token(40), &receipt(RECEIPT))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("not written over"), "{err}");
    assert_eq!(raw_body(&store, &k).await.0, foreign);
}

#[tokio::test]
async fn the_json_codec_store_keeps_the_fence_under_a_fence_and_a_floor() {
    let store = std::sync::Arc::new(common::json_store().await);
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let source = MemoryTokenSource::new();
    source.advance_to(&resource, token(34)).await.unwrap();
    let holder = Holder::new(&resource, token(34), &source);
    holder
        .write(&*store, &key("r_0815"), &receipt(RECEIPT))
        .await
        .unwrap();
    let floor = fencing_s3::S3FenceFloor::new(store.clone());
    use fencing_core::FenceFloor;
    assert_eq!(floor.max_fence(&resource).await.unwrap(), Some(token(34)));
}

//! S3-specific behaviour on the emulator: the ETag ABA trap (and why the fence must be in the
//! body), takeovers, fenced deletes, lost answers settled by the write id, objects that are not
//! envelopes, floors and bad input.

mod common;

use std::sync::Arc;

use aws_sdk_s3::primitives::ByteStream;
use fencing_core::adapter::WriteId;
use fencing_core::adapter::envelope::{self, FORMAT_VERSION, MAGIC};
use fencing_core::adapter::{ConditionalPutDefect, HolderExt, StoreWrites};
use fencing_core::{
    Error, FenceFloor, FencedStore, FencedWrite, FencingToken, FoundFence, Holder, InputKind,
    Lifecycle, MemoryTokenSource, Record, RecordKey, ResourceName, TokenSource,
};
use fencing_s3::{JsonCodec, S3Bucket, S3FenceFloor, S3Store};
use fencing_test_support::aws::{LoseAnswers, TamperRequests};
use fencing_testkit::conformance::{self, make_pending};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

async fn put_raw(
    store: &S3Store,
    object: &str,
    body: Vec<u8>,
    fence_metadata: Option<&str>,
) -> String {
    let mut put = store
        .client()
        .put_object()
        .bucket(store.bucket().bucket())
        .key(object)
        .body(ByteStream::from(body));
    if let Some(fence) = fence_metadata {
        put = put.metadata("fence", fence);
    }
    put.send().await.unwrap().e_tag().unwrap().to_owned()
}

async fn get_raw(store: &S3Store, object: &str) -> (Vec<u8>, Option<String>) {
    let out = store
        .client()
        .get_object()
        .bucket(store.bucket().bucket())
        .key(object)
        .send()
        .await
        .unwrap();
    let fence = out.metadata().and_then(|m| m.get("fence").cloned());
    (
        out.body.collect().await.unwrap().into_bytes().to_vec(),
        fence,
    )
}

/// The trap, shown on the emulator with the fence in metadata only, then closed with the fence
/// in the body: a newer holder writes byte-identical content under a higher token; the stale
/// holder's put conditioned on the ETag it last saw must not land.
#[tokio::test]
async fn a_byte_identical_newer_write_cannot_be_overwritten_by_a_stale_holder() {
    let store = common::store().await;
    let bucket = store.bucket().bucket().to_owned();

    // Fence in metadata only: the ETag covers the body, so it does not change, and the stale
    // holder's If-Match succeeds and lowers the fence from 34 to 33.
    let stale_etag = put_raw(&store, "metadata-only", b"70.25".to_vec(), Some("33")).await;
    let newer_etag = put_raw(&store, "metadata-only", b"70.25".to_vec(), Some("34")).await;
    assert_eq!(stale_etag, newer_etag, "same body, same ETag");
    store
        .client()
        .put_object()
        .bucket(&bucket)
        .key("metadata-only")
        .body(ByteStream::from(b"70.25".to_vec()))
        .metadata("fence", "33")
        .if_match(&stale_etag)
        .send()
        .await
        .expect("the metadata-only fence is fooled");
    assert_eq!(
        get_raw(&store, "metadata-only").await.1.as_deref(),
        Some("33")
    );

    // Fence in the body: A (33) writes, B (34) writes the same payload; A's next put, which
    // reuses the ETag of its own last write, is refused and the fence stays at 34.
    let k = key("r_815");
    let payload = FencedWrite::claim().set_payload(b"70.25".to_vec());
    store.write(&k, token(33), &payload).await.unwrap();
    let newer = S3Store::new(store.client().clone(), store.bucket().clone());
    newer.write(&k, token(34), &payload).await.unwrap();
    let err = store.write(&k, token(33), &payload).await.unwrap_err();
    assert!(
        matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(34)),
        "{err:?}"
    );
    let record = newer.read(&k).await.unwrap().unwrap();
    assert_eq!(record.fence, Some(token(34)), "the fence never goes down");
    let (_, mirrored) = get_raw(&store, "m_4471/r_815").await;
    assert_eq!(
        mirrored.as_deref(),
        Some("34"),
        "metadata mirrors the fence"
    );
}

#[tokio::test]
async fn a_stale_holders_put_and_delete_after_a_takeover_are_refused() {
    let (source, resource) = fencing_testkit::issued_up_to(34).await;
    let holder = |n: u64| Holder::new(&resource, token(n), &source);
    let store = common::store().await;
    let lifecycle = Lifecycle::default();
    let k = key("r_815");
    make_pending(&store, &k).await;
    let a = S3Store::new(store.client().clone(), store.bucket().clone());
    let b = S3Store::new(store.client().clone(), store.bucket().clone());
    a.write(&k, token(33), &lifecycle.claim()).await.unwrap();
    // B adopts an object last written under a lower token.
    let taken = b.write(&k, token(34), &lifecycle.claim()).await.unwrap();
    assert_eq!(taken.previous_fence, Some(token(33)));
    for err in [
        a.write(&k, token(33), &lifecycle.confirm())
            .await
            .unwrap_err(),
        a.delete(&holder(33), &k).await.unwrap_err(),
    ] {
        assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    }
    b.write(&k, token(34), &lifecycle.confirm()).await.unwrap();
    let deleted = b.delete(&holder(34), &k).await.unwrap();
    assert_eq!(deleted.state.as_ref(), Some(lifecycle.done()));
    assert_eq!(store.read(&k).await.unwrap(), None);
}

/// Claims `k` with token `n`, then deletes it as that holder.
async fn claim_then_delete(store: &S3Store, k: &RecordKey, n: u64) {
    let (source, resource) = fencing_testkit::issued_up_to(n).await;
    store
        .write(k, token(n), &FencedWrite::claim())
        .await
        .unwrap();
    let holder = Holder::new(&resource, token(n), &source);
    store.delete(&holder, k).await.unwrap();
}

/// The delete a plain `DeleteObject` would get wrong: with the object gone, the stale holder's
/// claim would create the record again under its lower token. The tombstone keeps the fence,
/// in the envelope and in the team's JSON alike, and in the metadata for people browsing.
#[tokio::test]
async fn a_delete_leaves_a_tombstone_that_keeps_a_stale_holder_out() {
    for json in [false, true] {
        let in_codec = |store: S3Store| match json {
            true => store.with_codec(JsonCodec::new()),
            false => store,
        };
        let store = common::store().await;
        let stale = in_codec(S3Store::new(store.client().clone(), store.bucket().clone()));
        let store = in_codec(store);
        let object = |k: &RecordKey| format!("{}{}", store.bucket().prefix(), k.as_str());
        conformance::a_delete_leaves_a_tombstone_that_keeps_the_fence(
            &store,
            &stale,
            S3Store::delete,
            async |k| get_raw(&store, &object(k)).await.0,
        )
        .await;
        let k = key("r_815");
        claim_then_delete(&store, &k, 36).await;
        let out = store
            .client()
            .head_object()
            .bucket(store.bucket().bucket())
            .key(object(&k))
            .send()
            .await
            .unwrap();
        let meta = out.metadata().unwrap();
        assert_eq!(
            (meta.get("fence"), meta.get("deleted")),
            (Some(&"36".to_owned()), Some(&"true".to_owned()))
        );
    }
}

#[tokio::test]
async fn a_confirm_whose_answer_was_lost_is_recognised_by_its_write_id() {
    let faults = LoseAnswers::default();
    let client = common::client_with(aws_sdk_s3::Config::builder().interceptor(faults.clone()));
    let store = common::store_on(client).await;
    let lifecycle = Lifecycle::default();
    let k = key("r_815");
    make_pending(&store, &k).await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let source = MemoryTokenSource::new();
    source.advance_to(&resource, token(1000)).await.unwrap();
    let holder = Holder::new(&resource, token(34), &source);
    for write in [lifecycle.claim(), lifecycle.confirm()] {
        faults.arm(1);
        let written = holder.write(&store, &k, &write).await.unwrap();
        assert_eq!(written.record.fence, Some(token(34)));
    }
    assert_eq!(faults.lost(), 2);
    let record = store.read(&k).await.unwrap().unwrap();
    assert_eq!(record.state.as_ref(), Some(lifecycle.done()));
}

#[tokio::test]
async fn an_object_that_is_not_a_readable_envelope_is_never_written_over() {
    let (source, resource) = fencing_testkit::issued_up_to(9).await;
    let holder = |n: u64| Holder::new(&resource, token(n), &source);
    let store = common::store().await;
    let good = envelope::encode(
        &Record {
            key: key("x"),
            fence: Some(token(3)),
            state: None,
            payload: b"70.25".to_vec(),
        },
        WriteId(1),
    );
    let mut unknown_version = good.clone();
    unknown_version[4] = FORMAT_VERSION + 1;
    let mut longer_than_body = good[..good.len() - 5].to_vec();
    longer_than_body.truncate(longer_than_body.len() - 8);
    longer_than_body.extend_from_slice(&1_000_000u64.to_be_bytes());
    let cases = [
        ("plain", b"a receipt, not an envelope".to_vec()),
        ("truncated", good[..20].to_vec()),
        ("magic-only", MAGIC.to_vec()),
        ("unknown-version", unknown_version),
        ("length-past-the-body", longer_than_body),
    ];
    for (id, body) in cases {
        put_raw(&store, &format!("m_4471/{id}"), body.clone(), None).await;
        let err = store.read(&key(id)).await.unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{id}: {err:?}");
        for write in [FencedWrite::claim(), FencedWrite::holder_only()] {
            let err = store.write(&key(id), token(9), &write).await.unwrap_err();
            assert!(err.to_string().contains("not written over"), "{id}: {err}");
        }
        assert!(store.delete(&holder(9), &key(id)).await.is_err());
        assert_eq!(
            get_raw(&store, &format!("m_4471/{id}")).await.0,
            body,
            "{id}"
        );
    }
}

/// A fresh store whose client goes through `tamper`.
async fn tampered_store(tamper: &TamperRequests) -> S3Store {
    let config = aws_sdk_s3::Config::builder().interceptor(tamper.clone());
    common::store_on(common::client_with(config)).await
}

#[tokio::test]
async fn a_put_or_delete_the_service_refused_is_an_error_and_not_taken_for_a_conflict() {
    let (source, resource) = fencing_testkit::issued_up_to(34).await;
    let holder = |n: u64| Holder::new(&resource, token(n), &source);
    let tamper = TamperRequests::default();
    let store = tampered_store(&tamper).await;
    let k = key("r_815");
    make_pending(&store, &k).await;
    let before = store.read(&k).await.unwrap();

    let puts = tamper.seen("PUT");
    tamper.misroute("PUT", 1);
    let err = store
        .write(&k, token(34), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Misconfigured { .. }), "{err:?}");
    assert!(err.to_string().contains("NoSuchBucket"), "{err}");
    assert_eq!(tamper.seen("PUT"), puts + 1, "the refused put, sent once");
    assert_eq!(store.read(&k).await.unwrap(), before);

    let puts = tamper.seen("PUT");
    tamper.misroute("PUT", 1);
    let err = store.delete(&holder(1), &k).await.unwrap_err();
    assert!(matches!(err, Error::Misconfigured { .. }), "{err:?}");
    assert!(err.to_string().contains("NoSuchBucket"), "{err}");
    assert_eq!(
        tamper.seen("PUT"),
        puts + 1,
        "the refused tombstone, sent once"
    );
    assert_eq!(tamper.seen("DELETE"), 0, "a delete is a put of a tombstone");
    assert_eq!(store.read(&k).await.unwrap(), before);
}

#[tokio::test]
async fn a_delete_that_meets_a_changed_object_is_a_conflict_settled_by_reading_again() {
    let (source, resource) = fencing_testkit::issued_up_to(34).await;
    let holder = |n: u64| Holder::new(&resource, token(n), &source);
    let tamper = TamperRequests::default();
    let store = tampered_store(&tamper).await;
    let k = key("r_815");
    store
        .write(&k, token(34), &FencedWrite::claim())
        .await
        .unwrap();
    let puts = tamper.seen("PUT");
    tamper.stale_if_match("PUT", 1);
    let deleted = store.delete(&holder(34), &k).await.unwrap();
    assert_eq!(deleted.fence, Some(token(34)));
    assert_eq!(
        tamper.seen("PUT"),
        puts + 2,
        "refused once on its stale ETag, then sent again"
    );
    assert_eq!(store.read(&k).await.unwrap(), None);
}

#[tokio::test]
async fn a_read_of_a_bucket_that_does_not_exist_is_an_error_not_a_missing_record() {
    let client = common::client();
    let missing = S3Bucket::new(fencing_testkit::unique_name("missing"), "m_4471/").unwrap();
    let store = S3Store::new(client, missing);
    let err = store.read(&key("r_815")).await.unwrap_err();
    assert!(matches!(err, Error::Misconfigured { .. }), "{err:?}");
    assert!(err.to_string().contains("NoSuchBucket"), "{err}");
    let err = store
        .write(&key("r_815"), token(34), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NoSuchBucket"), "{err}");
}

#[tokio::test]
async fn the_check_finds_a_server_that_ignores_if_match() {
    let tamper = TamperRequests::default();
    let store = tampered_store(&tamper).await;
    store.check_conditional_writes().await.unwrap();
    tamper.drop_if_match();
    let err = store.check_conditional_writes().await.unwrap_err();
    assert!(
        matches!(
            ConditionalPutDefect::of(&err),
            Some(ConditionalPutDefect::StaleVersion)
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_floor_is_the_highest_fence_under_the_prefix_or_one_resources() {
    let store = Arc::new(common::store().await);
    for (k, t) in [("m_1/r_1", 5), ("m_1/r_2", 7), ("m_2/r_1", 9)] {
        store
            .write(&key(k), token(t), &FencedWrite::claim())
            .await
            .unwrap();
    }
    let resource = ResourceName::new("settle:m_1").unwrap();
    let whole = S3FenceFloor::new(store.clone());
    assert_eq!(whole.max_fence(&resource).await.unwrap(), Some(token(9)));
    let per_merchant = S3FenceFloor::per_resource(store.clone(), |r| {
        format!("{}/", r.trim_start_matches("settle:"))
    });
    assert_eq!(
        per_merchant.max_fence(&resource).await.unwrap(),
        Some(token(7))
    );
    let other = ResourceName::new("settle:m_3").unwrap();
    assert_eq!(per_merchant.max_fence(&other).await.unwrap(), None);
    // A deleted record's fence still counts: its tombstone keeps it.
    claim_then_delete(&store, &key("m_3/r_1"), 11).await;
    assert_eq!(
        per_merchant.max_fence(&other).await.unwrap(),
        Some(token(11))
    );
    let shown = format!("{per_merchant:?}");
    assert!(
        shown.starts_with("S3FenceFloor { store: ") && shown.ends_with("per_resource: true }"),
        "{shown}"
    );
    assert!(format!("{whole:?}").ends_with("per_resource: false }"));
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let (source, resource) = fencing_testkit::issued_up_to(1).await;
    let holder = |n: u64| Holder::new(&resource, token(n), &source);
    for bucket in [
        "",
        "ab",
        "Upper",
        "under_score",
        "-edge",
        "edge-",
        "a..b",
        "10.0.0.1",
    ] {
        let err = S3Bucket::new(bucket, "").unwrap_err();
        assert_eq!(err.kind(), InputKind::Identifier, "{bucket:?}");
    }
    let client = common::client();
    let bucket = common::bucket(&client, &"p".repeat(1000)).await;
    let store = S3Store::new(client, bucket);
    let long = key(&"k".repeat(30));
    for err in [
        store
            .write(&long, token(1), &FencedWrite::claim())
            .await
            .unwrap_err(),
        store.read(&long).await.unwrap_err(),
        store.delete(&holder(1), &long).await.unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::RecordKey),
            "{err:?}"
        );
    }
    // Tokens out of range cannot even be made.
    assert!(FencingToken::new(0).is_err() && FencingToken::new(1 << 63).is_err());
}

#[tokio::test]
async fn a_store_named_by_its_user_goes_by_that_name_in_refusals() {
    let client = common::client();
    let bucket = common::bucket(&client, "named/").await;
    assert!(
        S3Store::new(client.clone(), bucket.clone())
            .named("")
            .is_err()
    );
    let receipts = S3Store::new(client, bucket).named("receipts").unwrap();
    assert_eq!(receipts.name(), "receipts");
    receipts
        .write(&key("rc_1"), token(5), &FencedWrite::claim())
        .await
        .unwrap();
    let err = receipts
        .write(&key("rc_1"), token(4), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, .. } if store == "receipts"),
        "{err:?}"
    );
}

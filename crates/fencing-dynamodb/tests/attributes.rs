//! The team's own attributes, typed, set in the same fenced `UpdateItem` on a table keyed as
//! teams key theirs: read back by a plain `GetItem`, never set by a stale holder, refused
//! where they would collide with the table's own attributes, and resent and recognised when
//! an answer is lost.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::adapter::HolderExt;
use fencing_core::{
    Error, FencedWrite, FencingToken, Holder, InputKind, Lifecycle, MemoryTokenSource,
    ResourceName, TokenSource,
};
use fencing_dynamodb::{DynamoStore, DynamoWrite};
use fencing_test_support::aws::LoseAnswers;
use fencing_testkit::cancellation::drop_at_every_yield;
use fencing_testkit::conformance::{make_pending, report_sweep};

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

/// A store on a fresh ledger table.
async fn ledger(client: &aws_sdk_dynamodb::Client) -> DynamoStore {
    DynamoStore::new(client.clone(), common::ledger_table(client).await)
}

/// A token source that has issued up to 40 for the settlement.
async fn issued() -> (MemoryTokenSource, ResourceName) {
    let source = MemoryTokenSource::new();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    source.advance_to(&resource, token(40)).await.unwrap();
    (source, resource)
}

fn entry(amount_cents: &str, by: &str) -> DynamoWrite {
    DynamoWrite::new(FencedWrite::claim().set_state(Lifecycle::default().done().clone()))
        .set("amount_cents", AttributeValue::N(amount_cents.into()))
        .unwrap()
        .set("posted by", AttributeValue::S(by.into()))
        .unwrap()
}

#[tokio::test]
async fn attributes_are_set_with_the_fence_and_a_stale_holder_sets_none() {
    let client = common::client();
    let store = ledger(&client).await;
    let key = store.table().record_key("m_4471", Some("815")).unwrap();
    let (source, resource) = issued().await;
    let newer = Holder::new(&resource, token(34), &source);
    let stale = Holder::new(&resource, token(33), &source);

    store
        .write_with(&newer, &key, entry("1250", "worker-b"))
        .await
        .unwrap();
    let err = store
        .write_with(&stale, &key, entry("9999", "worker-a"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");

    let raw = client
        .get_item()
        .table_name(store.table().name())
        .key("merchant", AttributeValue::S("m_4471".into()))
        .key("entry", AttributeValue::N("815".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let item = raw.item().unwrap();
    assert_eq!(item["amount_cents"], AttributeValue::N("1250".into()));
    assert_eq!(item["posted by"], AttributeValue::S("worker-b".into()));
    assert_eq!(item["fence"], AttributeValue::N("34".into()));
    let done = Lifecycle::default().done().to_string();
    assert_eq!(item["status"], AttributeValue::S(done));

    let (record, attributes) = store.read_with(&key).await.unwrap().unwrap();
    assert_eq!(record.fence, Some(token(34)));
    assert_eq!(attributes.len(), 2, "only the team's own: {attributes:?}");
    assert_eq!(attributes["amount_cents"], AttributeValue::N("1250".into()));
    let missing = store.table().record_key("m_4471", Some("816")).unwrap();
    assert_eq!(store.read_with(&missing).await.unwrap(), None);
}

#[tokio::test]
async fn attributes_named_like_the_tables_own_are_refused_with_nothing_written() {
    let client = common::client();
    let store = ledger(&client).await;
    let key = store.table().record_key("m_4471", Some("815")).unwrap();
    let (source, resource) = issued().await;
    let holder = Holder::new(&resource, token(34), &source);
    for taken in ["merchant", "entry", "fence", "status", "payload"] {
        let write = DynamoWrite::new(FencedWrite::claim())
            .set(taken, AttributeValue::S("x".into()))
            .unwrap();
        let err = store.write_with(&holder, &key, write).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(input) if input.kind() == InputKind::Write),
            "{taken}: {err:?}"
        );
    }
    let twice = DynamoWrite::new(FencedWrite::claim())
        .set("amount_cents", AttributeValue::N("1".into()))
        .unwrap()
        .set("amount_cents", AttributeValue::N("2".into()))
        .unwrap_err();
    assert_eq!(twice.kind(), InputKind::Write);
    assert!(
        DynamoWrite::new(FencedWrite::claim())
            .set("", AttributeValue::Bool(true))
            .is_err()
    );
    assert_eq!(
        common::item_count(&client, store.table()).await,
        0,
        "nothing was written"
    );
}

#[tokio::test]
async fn a_write_with_attributes_whose_answer_is_lost_is_resent_and_recognised() {
    let faults = LoseAnswers::default();
    let client =
        common::client_with(aws_sdk_dynamodb::Config::builder().interceptor(faults.clone()));
    let store = ledger(&client).await;
    let key = store.table().record_key("m_4471", Some("815")).unwrap();
    let (source, resource) = issued().await;
    let holder = Holder::new(&resource, token(34), &source);
    let lifecycle = Lifecycle::default();
    make_pending(&store, &key).await;

    faults.arm(1);
    let claim = DynamoWrite::new(lifecycle.claim())
        .set("gateway", AttributeValue::S("acme".into()))
        .unwrap();
    store.write_with(&holder, &key, claim).await.unwrap();
    faults.arm(1);
    let confirm = DynamoWrite::new(lifecycle.confirm())
        .set("gateway_ref", AttributeValue::S("re_3Pq81".into()))
        .unwrap();
    store.write_with(&holder, &key, confirm).await.unwrap();
    assert_eq!(faults.lost(), 2);

    let (record, attributes) = store.read_with(&key).await.unwrap().unwrap();
    assert_eq!(record.state.as_ref(), Some(lifecycle.done()));
    assert_eq!(attributes["gateway"], AttributeValue::S("acme".into()));
    assert_eq!(
        attributes["gateway_ref"],
        AttributeValue::S("re_3Pq81".into())
    );
}

#[tokio::test]
async fn a_transaction_sets_every_items_attributes_or_none() {
    let client = common::client();
    let store = ledger(&client).await;
    let (first, second) = (
        store.table().record_key("m_4471", Some("815")).unwrap(),
        store.table().record_key("m_4471", Some("816")).unwrap(),
    );
    let (source, resource) = issued().await;
    let newer = Holder::new(&resource, token(35), &source);
    let holder = Holder::new(&resource, token(34), &source);
    // A newer holder has the second entry already.
    store
        .write_with(&newer, &second, entry("700", "worker-c"))
        .await
        .unwrap();

    let both = [
        (first.clone(), entry("1250", "worker-b")),
        (second.clone(), entry("800", "worker-b")),
    ];
    let err = store.transact_with(&holder, &both).await.unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    assert_eq!(store.read_with(&first).await.unwrap(), None);
    let (_, kept) = store.read_with(&second).await.unwrap().unwrap();
    assert_eq!(kept["amount_cents"], AttributeValue::N("700".into()));

    let third = store.table().record_key("m_4471", Some("817")).unwrap();
    let fresh = [
        (first.clone(), entry("1250", "worker-b")),
        (third.clone(), entry("300", "worker-b")),
    ];
    store.transact_with(&holder, &fresh).await.unwrap();
    for (key, cents) in [(&first, "1250"), (&third, "300")] {
        let (record, attributes) = store.read_with(key).await.unwrap().unwrap();
        assert_eq!(record.fence, Some(token(34)));
        assert_eq!(attributes["amount_cents"], AttributeValue::N(cents.into()));
    }

    let colliding = [(
        store.table().record_key("m_4471", Some("818")).unwrap(),
        DynamoWrite::new(FencedWrite::claim())
            .set("status", AttributeValue::S("x".into()))
            .unwrap(),
    )];
    let err = store.transact_with(&holder, &colliding).await.unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert_eq!(common::item_count(&client, store.table()).await, 3);
}

/// A `write_with` dropped at each point where it waited on DynamoDB
/// (`fencing_testkit::cancellation::drop_at_every_yield`) set nothing or the fence, the state
/// and the team's attribute together (one `UpdateItem`), and the holder's resend settles it.
#[tokio::test]
async fn a_dropped_write_with_attributes_sets_all_of_it_or_nothing() {
    let client = common::client();
    let store = ledger(&client).await;
    let (source, resource) = issued().await;
    let holder = Holder::new(&resource, token(34), &source);
    let claim = || {
        DynamoWrite::new(Lifecycle::default().claim())
            .set("gateway", AttributeValue::S("acme".into()))
            .unwrap()
    };
    let entries = AtomicU32::new(815);
    let sweep = drop_at_every_yield(
        async || {
            let entry = entries.fetch_add(1, Ordering::Relaxed).to_string();
            let key = store.table().record_key("m_4471", Some(&entry)).unwrap();
            make_pending(&store, &key).await;
            key
        },
        async |key| store.write_with(&holder, key, claim()).await,
        async |key, output| {
            if let Some(ended) = output {
                ended.unwrap();
            }
            let (record, attributes) = store.read_with(key).await.unwrap().unwrap();
            let claimed = record.fence == Some(token(34));
            assert_eq!(
                attributes.contains_key("gateway"),
                claimed,
                "{record:?} {attributes:?}"
            );
            store.write_with(&holder, key, claim()).await.unwrap();
            let (record, attributes) = store.read_with(key).await.unwrap().unwrap();
            assert_eq!(record.fence, Some(token(34)));
            assert_eq!(attributes["gateway"], AttributeValue::S("acme".into()));
        },
    )
    .await;
    report_sweep("write_with", sweep);
}

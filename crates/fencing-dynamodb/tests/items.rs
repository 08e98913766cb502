//! DynamoDB-specific behaviour on the emulator: fenced transactions, lost answers injected by
//! the SDK's own interceptor hook, corrupt stored values never written over, your own
//! `UpdateItem` with the fence merged in, and bad input refused before anything is sent.

mod common;

use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FenceCheck, FencedStore, FencedWrite, FencingToken, FoundFence, Holder, InputKind,
    Lease, Lifecycle, MemoryTokenSource, RecordKey, ResourceName, State, TokenSource, Ttl,
};
use fencing_dynamodb::{
    DynamoFenceCondition, DynamoLease, DynamoStore, DynamoTable, DynamoTokenSource,
    MAX_TRANSACTION_ITEMS,
};
use fencing_test_support::aws::LoseAnswers;
use fencing_testkit::conformance::make_pending;

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn state(name: &str) -> State {
    State::new(name).unwrap()
}

/// A token source that has issued up to 1,000, so refusals below it are plain stale holders.
async fn issued_up_to_1000(resource: &ResourceName) -> MemoryTokenSource {
    let source = MemoryTokenSource::new();
    source.advance_to(resource, token(1000)).await.unwrap();
    source
}

#[tokio::test]
async fn a_transaction_with_one_item_fenced_higher_applies_nothing_and_names_it() {
    let store = common::store().await;
    let keys: Vec<_> = (1..=5).map(|n| key(&format!("r_{n}"))).collect();
    for k in &keys {
        make_pending(&store, k).await;
    }
    let lifecycle = Lifecycle::default();
    // A newer holder (34) has claimed r_4.
    store
        .write(&keys[3], token(34), &lifecycle.claim())
        .await
        .unwrap();

    let resource = ResourceName::new("settle:m_4471").unwrap();
    let source = issued_up_to_1000(&resource).await;
    let holder = Holder::new(&resource, token(33), &source);
    let writes: Vec<_> = keys
        .iter()
        .map(|k| (k.clone(), lifecycle.claim()))
        .collect();
    let err = store.transact(&holder, &writes).await.unwrap_err();
    match &err {
        Error::Fenced {
            record,
            presented,
            found,
            ..
        } => {
            assert_eq!(record, &keys[3]);
            assert_eq!(*presented, token(33));
            assert_eq!(*found, FoundFence::Fence(token(34)));
        }
        other => panic!("expected the refusal of r_4, got {other:?}"),
    }
    for (i, k) in keys.iter().enumerate() {
        let record = store.read(k).await.unwrap().unwrap();
        let expected = if i == 3 { 34 } else { 1 };
        assert_eq!(record.fence, Some(token(expected)), "{k}: nothing applied");
    }

    // The same transaction under the newer token applies every write.
    let holder = Holder::new(&resource, token(34), &source);
    store.transact(&holder, &writes).await.unwrap();
    let confirms: Vec<_> = keys
        .iter()
        .map(|k| (k.clone(), lifecycle.confirm()))
        .collect();
    store.transact(&holder, &confirms).await.unwrap();
    for k in &keys {
        let record = store.read(k).await.unwrap().unwrap();
        assert_eq!(record.state.as_ref(), Some(lifecycle.done()));
        assert_eq!(record.fence, Some(token(34)));
    }
}

#[tokio::test]
async fn a_transaction_out_of_bounds_is_refused_before_sending() {
    let store = common::store().await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let source = issued_up_to_1000(&resource).await;
    let holder = Holder::new(&resource, token(5), &source);
    let claim = FencedWrite::claim();
    let too_many: Vec<_> = (0..=MAX_TRANSACTION_ITEMS)
        .map(|n| (key(&format!("r_{n}")), claim.clone()))
        .collect();
    let twice = vec![(key("r_1"), claim.clone()), (key("r_1"), claim.clone())];
    let huge: Vec<_> = (1..=14)
        .map(|n| {
            (
                key(&format!("r_{n}")),
                claim.clone().set_payload(vec![1u8; 300 * 1024]),
            )
        })
        .collect();
    for writes in [Vec::new(), too_many, twice, huge] {
        let err = store.transact(&holder, &writes).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    }
    let scanned = store
        .client()
        .scan()
        .table_name(store.table().name())
        .send()
        .await
        .unwrap();
    assert_eq!(scanned.count(), 0, "nothing was sent");
}

#[tokio::test]
async fn a_write_whose_answer_is_lost_after_it_applied_is_retried_and_recognised() {
    let faults = LoseAnswers::default();
    let client =
        common::client_with(aws_sdk_dynamodb::Config::builder().interceptor(faults.clone()));
    let table = common::table(&client).await;
    let store = DynamoStore::new(client, table);
    let lifecycle = Lifecycle::default();
    let k = key("r_815");
    make_pending(&store, &k).await;

    // Straight to the store: the lost answer is reported as unknown, not as a refusal.
    faults.arm(1);
    let err = store
        .write(&k, token(33), &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(err.is_ambiguous(), "{err:?}");
    let record = store.read(&k).await.unwrap().unwrap();
    assert_eq!(record.fence, Some(token(33)), "the lost write did apply");

    // Through the fence: the claim and then the confirm lose their answers; each is retried
    // with the same token and recognised as applied, never reported refused.
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let source = issued_up_to_1000(&resource).await;
    let holder = Holder::new(&resource, token(34), &source);
    for write in [lifecycle.claim(), lifecycle.confirm()] {
        faults.arm(1);
        holder.write(&store, &k, &write).await.unwrap();
    }
    assert_eq!(faults.lost(), 3);
    let record = store.read(&k).await.unwrap().unwrap();
    assert_eq!(record.state.as_ref(), Some(lifecycle.done()));
    assert_eq!(record.fence, Some(token(34)));
}

/// Writes an item as something else than this crate would: its raw attributes.
async fn put_raw(store: &DynamoStore, id: &str, attributes: &[(&str, AttributeValue)]) {
    let mut put = store
        .client()
        .put_item()
        .table_name(store.table().name())
        .item("id", AttributeValue::S(id.into()));
    for (name, value) in attributes {
        put = put.item(*name, value.clone());
    }
    put.send().await.unwrap();
}

async fn raw(store: &DynamoStore, id: &str) -> std::collections::HashMap<String, AttributeValue> {
    store
        .client()
        .get_item()
        .table_name(store.table().name())
        .key("id", AttributeValue::S(id.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item()
        .cloned()
        .unwrap()
}

#[tokio::test]
async fn corrupt_stored_values_are_refused_and_never_written_over() {
    let store = common::store().await;
    let n = |v: &str| AttributeValue::N(v.into());
    let s = |v: &str| AttributeValue::S(v.into());
    let cases: Vec<(&str, Vec<(&str, AttributeValue)>)> = vec![
        ("fence-text", vec![("fence", s("abc"))]),
        (
            "fence-negative",
            vec![("fence", n("-7")), ("state", s("pending"))],
        ),
        ("fence-too-big", vec![("fence", n("99999999999999999999"))]),
        ("state-number", vec![("fence", n("3")), ("state", n("5"))]),
        ("state-empty", vec![("fence", n("3")), ("state", s(""))]),
        ("payload-text", vec![("fence", n("3")), ("payload", s("x"))]),
    ];
    let writes = [
        FencedWrite::claim()
            .set_state(state("sending"))
            .set_payload(b"new".to_vec()),
        FencedWrite::holder_only().set_state(state("sent")),
        Lifecycle::default().claim(),
    ];
    for (id, attributes) in &cases {
        put_raw(&store, id, attributes).await;
        let before = raw(&store, id).await;
        for write in &writes {
            let err = store.write(&key(id), token(9), write).await.unwrap_err();
            assert!(
                matches!(err, Error::Corrupt { .. } | Error::Fenced { .. }),
                "{id}: {err:?}"
            );
            assert_eq!(raw(&store, id).await, before, "{id}: written over");
        }
        assert!(
            store.read(&key(id)).await.is_err(),
            "{id}: read back as valid"
        );
    }
}

#[tokio::test]
async fn a_counter_that_is_not_a_number_is_refused_with_nothing_written() {
    let client = common::client();
    let lease = common::lease(&client).await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    client
        .put_item()
        .table_name(lease.token_source().table())
        .item("resource", AttributeValue::S(resource.to_string()))
        .item("token", AttributeValue::S("thirty-three".into()))
        .send()
        .await
        .unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let err = lease.try_acquire(&resource, ttl).await.unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("not a fencing token"), "{err}");
    for err in [
        lease.token_source().next(&resource).await.unwrap_err(),
        lease.token_source().current(&resource).await.unwrap_err(),
        lease
            .token_source()
            .advance_to(&resource, token(5))
            .await
            .unwrap_err(),
    ] {
        assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    }
    let item = client
        .get_item()
        .table_name(lease.token_source().table())
        .key("resource", AttributeValue::S(resource.to_string()))
        .send()
        .await
        .unwrap();
    let item = item.item().unwrap();
    assert_eq!(
        item.get("token"),
        Some(&AttributeValue::S("thirty-three".into()))
    );
    assert!(!item.contains_key("owner"), "no lease left half-taken");
}

#[tokio::test]
async fn the_fence_merges_into_an_update_of_your_own() {
    let store = common::store().await;
    let (source, resource) = fencing_testkit::issued_up_to(34).await;
    let client = store.client().clone();
    let table = store.table().name().to_owned();
    put_raw(
        &store,
        "p_815",
        &[("status", AttributeValue::S("sending".into()))],
    )
    .await;
    let confirm = |t: u64| {
        let mine = client
            .update_item()
            .table_name(&table)
            .key("id", AttributeValue::S("p_815".into()))
            .condition_expression("#status = :sending")
            .update_expression("SET #status = :sent")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":sending", AttributeValue::S("sending".into()))
            .expression_attribute_values(":sent", AttributeValue::S("sent".into()));
        let holder = Holder::new(&resource, token(t), &source);
        DynamoFenceCondition::new("fence", FenceCheck::Claim, &holder).merge_into(mine)
    };
    confirm(34).unwrap().send().await.unwrap();
    let item = raw(&store, "p_815").await;
    assert_eq!(item.get("fence"), Some(&AttributeValue::N("34".into())));
    assert_eq!(item.get("status"), Some(&AttributeValue::S("sent".into())));

    put_raw(
        &store,
        "p_815",
        &[
            ("status", AttributeValue::S("sending".into())),
            ("fence", AttributeValue::N("34".into())),
        ],
    )
    .await;
    let err = confirm(33).unwrap().send().await.unwrap_err();
    assert_eq!(
        aws_sdk_dynamodb::error::ProvideErrorMetadata::code(&err),
        Some("ConditionalCheckFailedException")
    );
    let taken = client
        .update_item()
        .table_name(&table)
        .key("id", AttributeValue::S("p_815".into()))
        .expression_attribute_values(":fencing_token", AttributeValue::N("1".into()));
    let err = DynamoFenceCondition::new(
        "fence",
        FenceCheck::Claim,
        &Holder::new(&resource, token(1), &source),
    )
    .merge_into(taken)
    .unwrap_err();
    assert_eq!(err.kind(), InputKind::Identifier);
}

#[tokio::test]
async fn bad_input_is_refused_before_anything_is_sent() {
    let store = common::store().await;
    let states: Vec<_> = (0..101).map(|i| state(&format!("s{i}"))).collect();
    let too_many_states = FencedWrite::claim().when_state_in(states);
    let too_big = FencedWrite::claim().set_payload(vec![0u8; 400 * 1024]);
    for write in [too_many_states, too_big] {
        let err = store
            .write(&key("r_1"), token(1), &write)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    }
    assert_eq!(store.read(&key("r_1")).await.unwrap(), None);

    // Below DynamoDB's 400 KB item limit, a large payload is the store's to take.
    let large = vec![7u8; 300 * 1024];
    store
        .write(
            &key("r_2"),
            token(1),
            &FencedWrite::claim().set_payload(large.clone()),
        )
        .await
        .unwrap();
    assert_eq!(
        store.read(&key("r_2")).await.unwrap().unwrap().payload,
        large
    );

    let client = store.client().clone();
    for name in ["", "ab", "has space", "slash/es", &"x".repeat(256)] {
        assert!(DynamoTable::new(name).is_err(), "{name:?}");
        assert!(
            DynamoTokenSource::new(client.clone(), name).is_err(),
            "{name:?}"
        );
        assert!(DynamoLease::new(client.clone(), name).is_err(), "{name:?}");
    }
    for attribute in ["", &"a".repeat(256)] {
        let table = DynamoTable::new("refunds").unwrap();
        assert!(table.clone().with_key_attribute(attribute).is_err());
        assert!(table.with_payload_attribute(attribute).is_err());
    }
    // Keys: empty or over any store's partition-key size cannot even be made.
    assert!(RecordKey::new("").is_err());
    assert!(RecordKey::new("k".repeat(2049)).is_err());

    let missing = DynamoStore::new(client, DynamoTable::new("no-such-table").unwrap());
    let err = missing.read(&key("r_1")).await.unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
}

#[tokio::test]
async fn a_lease_taken_over_after_expiry_refuses_the_old_owners_extend_and_release() {
    let client = common::client();
    let lease = common::lease(&client).await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_millis(200).unwrap();
    let mut old = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    // Released at the end: long enough to outlast the old owner's refusals on a busy machine.
    let new = lease
        .try_acquire(&resource, Ttl::from_secs(60).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(new.token() > old.token());
    assert!(matches!(
        lease.extend(&mut old, ttl).await.unwrap_err(),
        Error::LeaseLost { .. }
    ));
    assert!(matches!(
        lease.release(old).await.unwrap_err(),
        Error::LeaseLost { .. }
    ));
    lease.release(new).await.unwrap();
}

#[tokio::test]
async fn the_floor_is_the_highest_fence_over_the_whole_table_or_one_resources_keys() {
    use fencing_core::FenceFloor;
    use fencing_dynamodb::DynamoFenceFloor;
    let store = common::store().await;
    for (k, t) in [("m_1/r_1", 5), ("m_1/r_2", 7), ("m_2/r_1", 9)] {
        store
            .write(&key(k), token(t), &FencedWrite::claim())
            .await
            .unwrap();
    }
    let resource = ResourceName::new("settle:m_1").unwrap();
    let whole = DynamoFenceFloor::new(store.client().clone(), store.table().clone());
    assert_eq!(whole.max_fence(&resource).await.unwrap(), Some(token(9)));
    let per_merchant =
        DynamoFenceFloor::per_resource(store.client().clone(), store.table().clone(), |r| {
            format!("{}/", r.trim_start_matches("settle:"))
        });
    assert_eq!(
        per_merchant.max_fence(&resource).await.unwrap(),
        Some(token(7))
    );
    let other = ResourceName::new("settle:m_3").unwrap();
    assert_eq!(per_merchant.max_fence(&other).await.unwrap(), None);
}

#[tokio::test]
async fn a_store_named_by_its_user_goes_by_that_name_in_refusals() {
    let store = common::store().await;
    assert!(store.clone().named("").is_err());
    assert!(store.clone().named("led\u{200B}ger").is_err());
    let ledger = store.named("ledger").unwrap();
    assert_eq!(ledger.name(), "ledger");
    ledger
        .write(&key("l_1"), token(5), &FencedWrite::claim())
        .await
        .unwrap();
    let err = ledger
        .write(&key("l_1"), token(4), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, .. } if store == "ledger"),
        "{err:?}"
    );
}

/// A batch over a `DynamoStore` admits its clones (one client, one table) and refuses a store
/// made apart on the same table, through `Holder::write` as through `transact`.
#[tokio::test]
async fn a_batch_admits_a_clone_of_its_store_and_refuses_one_made_apart() {
    let store = common::store().await;
    let k = key("r_815");
    make_pending(&store, &k).await;
    let batch = fencing_testkit::batch_over(std::sync::Arc::new(store.clone())).await;
    let claim = Lifecycle::default().claim();

    let apart = DynamoStore::new(store.client().clone(), store.table().clone());
    let refused =
        |err: &Error| matches!(err, Error::InvalidInput(e) if e.kind() == InputKind::StoreSet);
    let err = batch.holder().write(&apart, &k, &claim).await.unwrap_err();
    assert!(refused(&err), "{err:?}");
    let err = apart
        .transact(&batch.holder(), &[(k.clone(), claim.clone())])
        .await
        .unwrap_err();
    assert!(refused(&err), "{err:?}");
    assert_eq!(
        store.read(&k).await.unwrap().unwrap().fence,
        Some(FencingToken::MIN)
    );

    batch.holder().write(&store, &k, &claim).await.unwrap();
    assert_eq!(
        store.read(&k).await.unwrap().unwrap().fence,
        Some(batch.token())
    );
    batch.finish().await.unwrap();
}

//! Tables keyed as teams key theirs: a partition and a sort key, of type String, Number or
//! Binary, stored as typed attributes a plain `GetItem` finds, and record keys such a table
//! cannot hold refused before anything is sent.

mod common;

use aws_sdk_dynamodb::primitives::Blob;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::FenceFloor;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{Error, FencedStore, FencedWrite, FencingToken, InputKind, RecordKey, State};
use fencing_core::{Lease, Ttl};
use fencing_dynamodb::{DynamoFenceFloor, DynamoKeyType, DynamoLease, DynamoStore, DynamoTable};
use fencing_testkit::unique_name;

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

#[tokio::test]
async fn a_composite_key_is_two_typed_attributes_a_plain_get_item_finds() {
    let client = common::client();
    let table = common::ledger_table(&client).await;
    let store = DynamoStore::new(client.clone(), table.clone());
    let entry = table.record_key("m_4471", Some("815")).unwrap();
    let sending = FencedWrite::claim().set_state(State::new("sending").unwrap());
    store.write(&entry, token(34), &sending).await.unwrap();

    let raw = client
        .get_item()
        .table_name(table.name())
        .key("merchant", AttributeValue::S("m_4471".into()))
        .key("entry", AttributeValue::N("815".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let item = raw.item().expect("the item under its two key attributes");
    assert_eq!(item["fence"], AttributeValue::N("34".into()));
    assert_eq!(item["status"], AttributeValue::S("sending".into()));
    assert_eq!(item.len(), 4, "the two keys, fence and state: {item:?}");

    let stale = store.write(&entry, token(33), &sending).await.unwrap_err();
    assert!(matches!(stale, Error::Fenced { .. }), "{stale:?}");
    let neighbour = table.record_key("m_4471", Some("816")).unwrap();
    assert_eq!(store.read(&neighbour).await.unwrap(), None);
    assert_eq!(
        store.read(&entry).await.unwrap().unwrap().fence,
        Some(token(34))
    );
}

#[tokio::test]
async fn a_binary_partition_key_holds_the_bytes_its_hex_spells() {
    let client = common::client();
    let table = DynamoTable::new(unique_name("blobs"))
        .unwrap()
        .with_key_type(DynamoKeyType::Binary);
    table.create_if_missing(&client).await.unwrap();
    let store = DynamoStore::new(client.clone(), table.clone());
    store
        .write(&key("00ff6d"), token(7), &FencedWrite::claim())
        .await
        .unwrap();
    let raw = client
        .get_item()
        .table_name(table.name())
        .key("id", AttributeValue::B(Blob::new(vec![0x00, 0xff, 0x6d])))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(
        raw.item().expect("stored under its bytes")["fence"],
        AttributeValue::N("7".into())
    );
}

#[tokio::test]
async fn record_keys_the_table_cannot_hold_are_refused_with_nothing_written() {
    let client = common::client();
    let table = common::ledger_table(&client).await;
    let store = DynamoStore::new(client.clone(), table.clone());
    for bad in [
        "m_4471",        // no sort key
        "m_4471|",       // an empty one
        "|815",          // no partition key
        "m_4471|r_0815", // a sort key that is not a Number
        "m_4471|815.0",  // a Number in another spelling than its one
        "m_4471|0815",
        "m_4471|8e2",
    ] {
        let err = store
            .write(&key(bad), token(1), &FencedWrite::claim())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(input) if input.kind() == InputKind::RecordKey),
            "{bad:?}: {err:?}"
        );
        let err = store.read(&key(bad)).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput(_)), "{bad:?}: {err:?}");
    }
    let good = table.record_key("m_4471", Some("815")).unwrap();
    let bad = key("m_4471|x");
    let err = store
        .transact(
            &fencing_core::Holder::new(
                &fencing_core::ResourceName::new("settle:m_4471").unwrap(),
                token(1),
                &fencing_core::MemoryTokenSource::new(),
            ),
            &[(good, FencedWrite::claim()), (bad, FencedWrite::claim())],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert_eq!(
        common::item_count(&client, &table).await,
        0,
        "nothing was written"
    );
}

#[tokio::test]
async fn a_key_prefix_floor_needs_a_string_partition_key() {
    let client = common::client();
    let table = DynamoTable::new(unique_name("numbered"))
        .unwrap()
        .with_key_type(DynamoKeyType::Number);
    table.create_if_missing(&client).await.unwrap();
    let floor = DynamoFenceFloor::per_resource(client, table, |r| r.to_string());
    let err = floor
        .max_fence(&fencing_core::ResourceName::new("settle:m_4471").unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(input) if input.kind() == InputKind::Identifier),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_lease_keeps_its_item_in_a_teams_table_under_the_teams_key_name() {
    let client = common::client();
    let name = unique_name("team");
    DynamoTable::new(&name)
        .unwrap()
        .with_key_attribute("pk")
        .unwrap()
        .create_if_missing(&client)
        .await
        .unwrap();
    let lease = DynamoLease::new(client.clone(), &name)
        .unwrap()
        .with_key_attribute("pk")
        .unwrap();
    // The team's table gets the counters' binding item beside its own.
    lease.create_if_missing().await.unwrap();
    let resource = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    let guard = lease
        .try_acquire(&resource, Ttl::from_secs(30).unwrap())
        .await
        .unwrap()
        .expect("a free lease");
    let raw = client
        .get_item()
        .table_name(&name)
        .key("pk", AttributeValue::S("settle:m_4471".into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    let item = raw.item().expect("the lease item under the team's key");
    assert_eq!(item["token"], AttributeValue::N(guard.token().to_string()));
    assert!(item.contains_key("owner") && item.contains_key("expires_at_ms"));
    for taken in ["token", "owner", "expires_at_ms", ""] {
        assert!(
            DynamoLease::new(client.clone(), &name)
                .unwrap()
                .with_key_attribute(taken)
                .is_err(),
            "{taken:?}"
        );
    }
}

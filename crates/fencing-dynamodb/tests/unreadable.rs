//! Items this crate cannot read are refused by the service itself and left exactly as they
//! were: every check the decoder makes is in the condition (or in the pin the condition
//! carries), for records, counters and lease items. And answers lost after the lease or the
//! counter applied are settled by this crate, not by the SDK's retries.

mod common;

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FencedStore, FencedWrite, FencingToken, FoundFence, Holder, Lease, Lifecycle,
    MemoryTokenSource, RecordKey, ResourceName, State, TokenSource, Ttl,
};
use fencing_dynamodb::{DynamoLease, DynamoStore};
use fencing_test_support::aws::LoseAnswers;

type Item = HashMap<String, AttributeValue>;

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn state(name: &str) -> State {
    State::new(name).unwrap()
}

fn n(text: &str) -> AttributeValue {
    AttributeValue::N(text.into())
}

fn s(text: &str) -> AttributeValue {
    AttributeValue::S(text.into())
}

async fn put(client: &Client, table: &str, item: Item) {
    client
        .put_item()
        .table_name(table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

async fn get(client: &Client, table: &str, key: (&str, &str)) -> Option<Item> {
    client
        .get_item()
        .table_name(table)
        .key(key.0, s(key.1))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
}

fn record_item(id: &str, attributes: &[(&str, AttributeValue)]) -> Item {
    let mut item = Item::from([("id".to_owned(), s(id))]);
    for (name, value) in attributes {
        item.insert((*name).to_owned(), value.clone());
    }
    item
}

#[tokio::test]
async fn a_state_with_an_invisible_character_is_never_written_over() {
    let store = common::store().await;
    let (client, table) = (store.client().clone(), store.table().name().to_owned());
    let writes = [
        (
            5,
            FencedWrite::claim().set_state(state("sent")),
            "claim setting sent",
        ),
        (5000, FencedWrite::claim(), "claim without a state"),
        (
            3,
            FencedWrite::holder_only().set_payload(b"x".to_vec()),
            "holder-only write",
        ),
        (5, Lifecycle::default().claim(), "the lifecycle's claim"),
    ];
    for (id, stored) in [
        ("newline", "se\nnt"),
        ("zero-width", "se\u{200B}nt"),
        ("bidi", "\u{202E}sent"),
    ] {
        put(
            &client,
            &table,
            record_item(id, &[("fence", n("3")), ("state", s(stored))]),
        )
        .await;
        let before = get(&client, &table, ("id", id)).await;
        for (t, write, what) in &writes {
            let err = store.write(&key(id), token(*t), write).await.unwrap_err();
            assert!(
                matches!(err, Error::Corrupt { .. } | Error::StateMismatch { .. }),
                "{id}, {what}: {err:?}"
            );
            assert_eq!(
                get(&client, &table, ("id", id)).await,
                before,
                "{id}, {what}: written over"
            );
        }
        let err = store.read(&key(id)).await.unwrap_err();
        assert!(err.to_string().contains("is not a state"), "{err}");
    }
}

#[tokio::test]
async fn a_write_without_a_state_condition_follows_a_valid_state_it_did_not_know() {
    let store = common::store().await;
    let (client, table) = (store.client().clone(), store.table().name().to_owned());
    put(
        &client,
        &table,
        record_item("r_1", &[("fence", n("3")), ("state", s("sending"))]),
    )
    .await;
    // No state condition: the first attempt expects no state, the service refuses and returns
    // `sending`, and the second attempt (pinned to it) applies.
    let written = store
        .write(
            &key("r_1"),
            token(3),
            &FencedWrite::holder_only().set_payload(b"receipt".to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(written.previous_state, Some(state("sending")));
    let record = store.read(&key("r_1")).await.unwrap().unwrap();
    assert_eq!(record.payload, b"receipt");
    assert_eq!(record.state, Some(state("sending")));
    assert_eq!(record.fence, Some(token(3)));

    // In a transaction too, next to a write that has a state condition.
    put(
        &client,
        &table,
        record_item("r_2", &[("state", s("pending"))]),
    )
    .await;
    put(
        &client,
        &table,
        record_item("r_3", &[("state", s("se\u{7}nt"))]),
    )
    .await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let source = MemoryTokenSource::new();
    source.advance_to(&resource, token(100)).await.unwrap();
    let holder = Holder::new(&resource, token(7), &source);
    store
        .transact(
            &holder,
            &[
                (
                    key("r_1"),
                    FencedWrite::claim().set_payload(b"again".to_vec()),
                ),
                (key("r_2"), Lifecycle::default().claim()),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        store.read(&key("r_1")).await.unwrap().unwrap().fence,
        Some(token(7))
    );
    assert_eq!(
        store.read(&key("r_2")).await.unwrap().unwrap().state,
        Some(state("sending"))
    );
    let before = get(&client, &table, ("id", "r_3")).await;
    let err = store
        .transact(
            &holder,
            &[
                (key("r_1"), FencedWrite::claim()),
                (key("r_3"), FencedWrite::claim().set_state(state("sent"))),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("is not a state"), "{err}");
    assert_eq!(
        get(&client, &table, ("id", "r_3")).await,
        before,
        "written over"
    );
}

#[tokio::test]
async fn a_fence_is_read_by_its_value_as_the_service_compares_it() {
    let store = common::store().await;
    let (client, table) = (store.client().clone(), store.table().name().to_owned());
    // The service stores numbers normalised; the emulator keeps `1e3` as sent. Either way it
    // is the number 1000, and compared as such.
    put(
        &client,
        &table,
        record_item("r_e", &[("fence", n("1e3")), ("state", s("sending"))]),
    )
    .await;
    let before = get(&client, &table, ("id", "r_e")).await;
    let err = store
        .write(&key("r_e"), token(5), &Lifecycle::default().claim())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(1000)),
        "{err:?}"
    );
    assert_eq!(get(&client, &table, ("id", "r_e")).await, before);
    let written = store
        .write(&key("r_e"), token(5000), &Lifecycle::default().claim())
        .await
        .unwrap();
    assert_eq!(written.previous_fence, Some(token(1000)));

    // A fraction (never written by this library) counts as the next whole number, which is
    // how the claim's `fence <= token` treats it: 4.5 admits 5 and refuses 4.
    put(&client, &table, record_item("r_f", &[("fence", n("4.5"))])).await;
    let err = store
        .write(&key("r_f"), token(4), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(5)),
        "{err:?}"
    );
    // A holder-only write needs the fence to equal its token, which no fraction does: refused,
    // nothing written.
    let before = get(&client, &table, ("id", "r_f")).await;
    assert!(
        store
            .write(&key("r_f"), token(5), &FencedWrite::holder_only())
            .await
            .is_err()
    );
    assert_eq!(get(&client, &table, ("id", "r_f")).await, before);
    let written = store
        .write(&key("r_f"), token(5), &FencedWrite::claim())
        .await
        .unwrap();
    assert_eq!(written.previous_fence, Some(token(5)));

    // Out of range or not a Number: refused by the condition, nothing written.
    for (id, fence) in [
        ("r_neg", n("-3")),
        ("r_big", n("9223372036854775808")),
        ("r_text", s("7")),
    ] {
        put(&client, &table, record_item(id, &[("fence", fence)])).await;
        let before = get(&client, &table, ("id", id)).await;
        for write in [FencedWrite::claim(), FencedWrite::holder_only()] {
            let err = store
                .write(&key(id), token(5000), &write)
                .await
                .unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{id}: {err:?}");
            assert_eq!(get(&client, &table, ("id", id)).await, before, "{id}");
        }
    }
}

#[tokio::test]
async fn a_counter_that_is_negative_or_a_fraction_is_never_counted_on_from() {
    let client = common::client();
    let lease = common::lease(&client).await;
    let table = lease.token_source().table().to_owned();
    let ttl = Ttl::from_secs(30).unwrap();
    for (resource, counter) in [
        ("settle:neg", "-3"),
        ("settle:half", "1.5"),
        ("settle:big", "1e19"),
    ] {
        let resource = ResourceName::new(resource).unwrap();
        put(
            &client,
            &table,
            Item::from([
                ("resource".to_owned(), s(resource.as_str())),
                ("token".to_owned(), n(counter)),
            ]),
        )
        .await;
        let before = get(&client, &table, ("resource", resource.as_str())).await;
        let errors = [
            lease.token_source().next(&resource).await.unwrap_err(),
            lease
                .token_source()
                .advance_to(&resource, token(40))
                .await
                .unwrap_err(),
            lease.token_source().current(&resource).await.unwrap_err(),
            lease.try_acquire(&resource, ttl).await.unwrap_err(),
        ];
        for err in errors {
            assert!(matches!(err, Error::Corrupt { .. }), "{counter}: {err:?}");
            assert!(err.to_string().contains("is not a fencing token"), "{err}");
        }
        let after = get(&client, &table, ("resource", resource.as_str())).await;
        assert_eq!(after, before, "{counter}: written over");
        assert!(
            !after.unwrap().contains_key("owner"),
            "no owner left without a guard"
        );
    }
}

#[tokio::test]
async fn a_lease_item_with_an_owner_and_no_readable_expiry_is_reported_corrupt() {
    let client = common::client();
    let lease = common::lease(&client).await;
    let table = lease.token_source().table().to_owned();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    put(
        &client,
        &table,
        Item::from([
            ("resource".to_owned(), s(resource.as_str())),
            ("token".to_owned(), n("33")),
            ("owner".to_owned(), s("someone")),
            ("expires_at_ms".to_owned(), s("tomorrow")),
        ]),
    )
    .await;
    let before = get(&client, &table, ("resource", resource.as_str())).await;
    let ttl = Ttl::from_secs(30).unwrap();
    for err in [
        lease.try_acquire(&resource, ttl).await.unwrap_err(),
        lease.status(&resource).await.unwrap_err(),
    ] {
        assert!(
            err.to_string().contains("no expiry that is a Number"),
            "{err}"
        );
    }
    assert_eq!(
        get(&client, &table, ("resource", resource.as_str())).await,
        before
    );
}

/// The client a team builds, with the SDK's retries left on (its default) and the answers of
/// chosen requests lost after the service applied them.
fn client_losing_answers() -> (Client, LoseAnswers) {
    let faults = LoseAnswers::default();
    let config = aws_sdk_dynamodb::Config::builder()
        .interceptor(faults.clone())
        .retry_config(
            aws_sdk_dynamodb::config::retry::RetryConfig::standard().with_max_attempts(3),
        );
    (common::client_with(config), faults)
}

#[tokio::test]
async fn an_acquisition_whose_answer_was_lost_is_granted_not_reported_busy() {
    let (client, faults) = client_losing_answers();
    let lease = common::lease(&client).await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    // The table's identity and binding are read first (the source binds its counters to
    // them: a token of another resource reads both), so that the answer lost below is the
    // acquisition's.
    let other = ResourceName::new("settle:m_0001").unwrap();
    lease.token_source().next(&other).await.unwrap();

    faults.arm(1);
    let guard = lease
        .try_acquire(&resource, ttl)
        .await
        .unwrap()
        .expect("granted");
    assert_eq!(faults.lost(), 1);
    let status = lease.status(&resource).await.unwrap().expect("held");
    assert_eq!(
        status.owner,
        guard.owner().to_string(),
        "held by the guard's owner"
    );
    assert_eq!(status.token, Some(guard.token()));

    // Release whose answer is lost: settled as released, and the lease is free.
    faults.arm(1);
    lease.release(guard).await.unwrap();
    assert!(lease.status(&resource).await.unwrap().is_none());

    // The next acquisition, with two answers lost in a row, still gets a higher token.
    faults.arm(2);
    let next = lease
        .try_acquire(&resource, ttl)
        .await
        .unwrap()
        .expect("granted");
    assert!(next.token() > status.token.unwrap());
    assert_eq!(
        lease.status(&resource).await.unwrap().unwrap().owner,
        next.owner().to_string()
    );
}

#[tokio::test]
async fn a_token_whose_answer_was_lost_is_never_handed_out_twice() {
    let (client, faults) = client_losing_answers();
    let tokens = fencing_dynamodb::DynamoTokenSource::new(
        client.clone(),
        fencing_testkit::unique_name("tokens"),
    )
    .unwrap();
    tokens.create_if_missing().await.unwrap();
    let other = fencing_dynamodb::DynamoTokenSource::new(common::client(), tokens.table()).unwrap();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let mut issued = Vec::new();
    for round in 0..6 {
        faults.arm(round % 2);
        issued.push(tokens.next(&resource).await.unwrap());
        // Another process issues between, so this one's memory of the counter is stale.
        issued.push(other.next(&resource).await.unwrap());
    }
    let mut distinct = issued.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), issued.len(), "issued twice: {issued:?}");
    assert!(faults.lost() >= 3);
    assert_eq!(
        tokens.current(&resource).await.unwrap(),
        issued.iter().max().copied()
    );
}

#[tokio::test]
async fn a_store_built_from_the_same_client_keeps_its_retries_off_too() {
    let (client, faults) = client_losing_answers();
    let lease: DynamoLease = common::lease(&client).await;
    let store = DynamoStore::new(client.clone(), common::table(&client).await);
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let guard = lease
        .try_acquire(&resource, Ttl::from_secs(30).unwrap())
        .await
        .unwrap()
        .unwrap();
    let holder = guard.holder();
    faults.arm(1);
    let written = holder
        .write(
            &store,
            &key("ledger_1"),
            &FencedWrite::claim().set_payload(b"84300".to_vec()),
        )
        .await
        .unwrap();
    assert_eq!(written.record.fence, Some(guard.token()));
}

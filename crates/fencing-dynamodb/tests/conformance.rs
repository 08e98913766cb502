//! The shared conformance suite against DynamoDB (the moto emulator), each test on tables of
//! its own, as the concrete types and as `Box`/`Arc<dyn …>`.

mod common;

use std::sync::Arc;

use fencing_core::{FencedStore, Lease, TokenSource};
use fencing_dynamodb::{DynamoFenceFloor, DynamoTokenSource};
use fencing_testkit::Fencing;
use fencing_testkit::conformance::*;

/// A fresh token table.
async fn tokens() -> DynamoTokenSource {
    let tokens =
        DynamoTokenSource::new(common::client(), fencing_testkit::unique_name("tokens")).unwrap();
    tokens.create_if_missing().await.unwrap();
    tokens
}

/// One test per guarantee and form, each on tables of its own.
mod concrete {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: common::store().await,
        caps: common::caps(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: tokens().await,
        caps: common::caps(),
    }
    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: common::lease(&common::client()).await,
        caps: common::caps(),
    }
}

/// A team's existing table whose partition key is `pk`, for leases and tokens.
async fn team_table() -> String {
    let name = fencing_testkit::unique_name("team");
    fencing_dynamodb::DynamoTable::new(&name)
        .unwrap()
        .with_key_attribute("pk")
        .unwrap()
        .create_if_missing(&common::client())
        .await
        .unwrap();
    name
}

/// Counters in a team's table under its own key name, bound (`create_if_missing` adds the
/// table's binding item to a table that exists).
async fn team_counters() -> DynamoTokenSource {
    let source = DynamoTokenSource::new(common::client(), team_table().await)
        .unwrap()
        .with_key_attribute("pk")
        .unwrap();
    source.create_if_missing().await.unwrap();
    source
}

/// The token and lease guarantees with the items in a team's table under its own key name.
mod own_key {
    use super::*;

    fencing_testkit::token_source_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: team_counters().await,
        caps: common::caps(),
    }
    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: fencing_dynamodb::DynamoLease::new(
            common::client(),
            team_counters().await.table(),
        )
        .unwrap()
        .with_key_attribute("pk")
        .unwrap(),
        caps: common::caps(),
    }
}

/// A team's table made by its own tooling issues no token until the source adds the table's
/// binding: a counter it lacks could otherwise start below tokens a restored-away table issued.
#[tokio::test]
async fn a_table_without_its_binding_issues_nothing_until_create_if_missing_adds_it() {
    let source = DynamoTokenSource::new(common::client(), team_table().await)
        .unwrap()
        .with_key_attribute("pk")
        .unwrap();
    let r = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    let err = source.next(&r).await.unwrap_err();
    assert!(err.to_string().contains("create_if_missing"), "{err}");
    assert_eq!(source.current(&r).await.unwrap(), None, "nothing written");
    source.create_if_missing().await.unwrap();
    assert_eq!(source.next(&r).await.unwrap().get(), 1);
}

/// The store guarantees on a table keyed as teams key theirs: Binary partition, Number sort
/// key, reserved-word attribute names.
mod composite_key {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: common::composite_store().await,
        caps: common::composite_caps(),
    }
}

mod as_dyn {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Arc::new(common::store().await) as Arc<dyn FencedStore>,
        caps: common::caps(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Box::new(tokens().await) as Box<dyn TokenSource>,
        caps: common::caps(),
    }
    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Box::new(common::lease(&common::client()).await) as Box<dyn Lease>,
        caps: common::caps(),
    }
}

#[tokio::test]
async fn paused_holder_is_fenced_by_the_item() {
    let client = common::client();
    let lease = common::lease(&client).await;
    paused_holder_is_fenced(&lease, &common::store().await, common::caps()).await;
}

/// A durable counter loses nothing: the schedules run with nothing lost, and must still never
/// see a token issued twice.
#[tokio::test]
async fn no_token_is_reissued() {
    let lease = common::lease(&common::client()).await;
    no_token_is_reissued_after_counter_loss(
        &lease,
        &common::store().await,
        common::caps(),
        async || {},
    )
    .await;
}

/// A lease table restored from an old backup (here: its items deleted) is a counter that went
/// backwards: detected at the first refused claim, repaired, and seeded from the table's floor.
#[tokio::test]
async fn token_regression_is_detected_and_repaired_from_the_table() {
    let client = common::client();
    let lease = common::lease(&client).await;
    let store = common::store().await;
    let floor = DynamoFenceFloor::new(client.clone(), store.table().clone());
    let leases = lease.token_source().table().to_owned();
    token_regression_is_detected(&lease, &store, &floor, common::caps(), async || {
        let items = client.scan().table_name(&leases).send().await.unwrap();
        for item in items.items() {
            let resource = item.get("resource").cloned().unwrap();
            client
                .delete_item()
                .table_name(&leases)
                .key("resource", resource)
                .send()
                .await
                .unwrap();
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_increments_are_exact() {
    let client = common::client();
    let report = fenced_increments(
        Arc::new(common::lease(&client).await),
        Arc::new(common::store().await),
        common::caps(),
        3,
        4,
        Fencing::On,
        17,
    )
    .await;
    assert_eq!(report.total, report.expected, "{report:?}");
}

//! The shared conformance suite against real PostgreSQL, each run in its own schema.

mod common;

use std::sync::Arc;

use common::Schema;
use fencing_core::{Error, FencedStore, FencingToken, Lease, ResourceName, TokenSource, Ttl};
use fencing_postgres::{PgFenceFloor, PgLease, PgQualifiedName, PgTokenSource};
use fencing_testkit::Fencing;
use fencing_testkit::conformance::*;

/// The schema's token table, created.
async fn created_tokens(schema: &Schema) -> PgTokenSource {
    let tokens = schema.tokens();
    tokens.create_if_missing().await.unwrap();
    tokens
}

/// One test per guarantee and form, each in a schema of its own.
mod concrete {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let schema = Schema::new().await; }
        subject: schema.store(),
        caps: Capabilities::real_server(),
        teardown: { schema.drop_schema().await; }
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        setup: { let schema = Schema::new().await; }
        subject: created_tokens(&schema).await,
        caps: Capabilities::real_server(),
        teardown: { schema.drop_schema().await; }
    }
    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let schema = Schema::new().await; }
        subject: schema.lease().await,
        caps: Capabilities::real_server(),
        teardown: { schema.drop_schema().await; }
    }
}

mod as_dyn {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let schema = Schema::new().await; }
        subject: Box::new(schema.store()) as Box<dyn FencedStore>,
        caps: Capabilities::real_server(),
        teardown: { schema.drop_schema().await; }
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        setup: { let schema = Schema::new().await; }
        subject: Arc::new(created_tokens(&schema).await) as Arc<dyn TokenSource>,
        caps: Capabilities::real_server(),
        teardown: { schema.drop_schema().await; }
    }
    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let schema = Schema::new().await; }
        subject: Box::new(schema.lease().await) as Box<dyn Lease>,
        caps: Capabilities::real_server(),
        teardown: { schema.drop_schema().await; }
    }
}

#[tokio::test]
async fn paused_holder_is_fenced_by_the_row() {
    let schema = Schema::new().await;
    let lease = schema.lease().await;
    paused_holder_is_fenced(&lease, &schema.store(), Capabilities::real_server()).await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn token_regression_is_detected_and_repaired_from_max_fence() {
    let schema = Schema::new().await;
    let lease = schema.lease().await;
    let store = schema.store();
    let floor = PgFenceFloor::new(schema.pool.clone(), &schema.table);
    // The counters deleted by hand (not the table's binding row): a same-history loss the
    // binding cannot see, which the stores' fences must catch.
    let lose = format!(
        "DELETE FROM \"{}\".tokens WHERE resource <> ''",
        schema.name
    );
    token_regression_is_detected(
        &lease,
        &store,
        &floor,
        Capabilities::real_server(),
        async || schema.execute(lose).await,
    )
    .await;
    schema.drop_schema().await;
}

/// A durable counter loses nothing: the schedules run with nothing lost between them, and
/// must still never see a token issued twice.
#[tokio::test]
async fn no_token_is_reissued() {
    let schema = Schema::new().await;
    let lease = schema.lease().await;
    no_token_is_reissued_after_counter_loss(
        &lease,
        &schema.store(),
        Capabilities::real_server(),
        async || {},
    )
    .await;
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_increments_are_exact() {
    let schema = Schema::new().await;
    let report = fenced_increments(
        Arc::new(schema.lease().await),
        Arc::new(schema.store()),
        Capabilities::real_server(),
        4,
        5,
        Fencing::On,
        11,
    )
    .await;
    assert_eq!(report.total, report.expected, "{report:?}");
    schema.drop_schema().await;
}

#[tokio::test]
async fn an_acquisition_at_an_exhausted_counter_is_an_error_and_leaves_the_lease_free() {
    let schema = Schema::new().await;
    let lease = schema.lease().await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_secs(5).unwrap();
    let first = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    lease.release(first).await.unwrap();
    lease
        .token_source()
        .advance_to(&resource, FencingToken::MAX)
        .await
        .unwrap();
    let err = lease.try_acquire(&resource, ttl).await.unwrap_err();
    assert!(matches!(err, Error::TokenExhausted { .. }), "{err:?}");
    assert!(lease.status(&resource).await.unwrap().is_none());
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_token_source_and_a_lease_name_their_tables_in_their_errors() {
    let schema = Schema::new().await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let err = schema.tokens().next(&resource).await.unwrap_err();
    assert!(
        matches!(&err, Error::Misconfigured { store, .. } if *store == format!("postgres:{}.tokens", schema.name)),
        "{err:?}"
    );
    assert!(err.to_string().contains("create_if_missing"), "{err}");
    let lease = PgLease::new(
        PgQualifiedName::new(&schema.name, "leases").unwrap(),
        schema.tokens(),
    );
    let err = lease
        .try_acquire(&resource, Ttl::from_secs(5).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Misconfigured { store, .. } if *store == format!("postgres:{}.leases", schema.name)),
        "{err:?}"
    );
    schema.drop_schema().await;
}

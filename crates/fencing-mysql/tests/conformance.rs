//! The shared conformance suite against a real MariaDB (or MySQL), each run in a database of
//! its own.

mod common;

use std::sync::Arc;

use common::Database;
use fencing_core::{Error, FencedStore, FencingToken, Lease, ResourceName, TokenSource, Ttl};
use fencing_mysql::{MySqlLease, MySqlQualifiedName, MySqlTokenSource};
use fencing_testkit::Fencing;
use fencing_testkit::conformance::*;

/// The database's token table, created.
async fn created_tokens(database: &Database) -> MySqlTokenSource {
    let tokens = database.tokens();
    tokens.create_if_missing().await.unwrap();
    tokens
}

/// One test per guarantee and form, each in a database of its own.
mod concrete {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let database = Database::new().await; }
        subject: database.store(),
        caps: Capabilities::real_server(),
        teardown: { database.drop_database().await; }
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        setup: { let database = Database::new().await; }
        subject: created_tokens(&database).await,
        caps: Capabilities::real_server(),
        teardown: { database.drop_database().await; }
    }
    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let database = Database::new().await; }
        subject: database.lease().await,
        caps: Capabilities::real_server(),
        teardown: { database.drop_database().await; }
    }
}

mod as_dyn {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let database = Database::new().await; }
        subject: Box::new(database.store()) as Box<dyn FencedStore>,
        caps: Capabilities::real_server(),
        teardown: { database.drop_database().await; }
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        setup: { let database = Database::new().await; }
        subject: Arc::new(created_tokens(&database).await) as Arc<dyn TokenSource>,
        caps: Capabilities::real_server(),
        teardown: { database.drop_database().await; }
    }
    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let database = Database::new().await; }
        subject: Box::new(database.lease().await) as Box<dyn Lease>,
        caps: Capabilities::real_server(),
        teardown: { database.drop_database().await; }
    }
}

#[tokio::test]
async fn paused_holder_is_fenced_by_the_row() {
    let database = Database::new().await;
    let lease = database.lease().await;
    paused_holder_is_fenced(&lease, &database.store(), Capabilities::real_server()).await;
    database.drop_database().await;
}

/// A durable counter loses nothing: the schedules run with nothing lost between them, and
/// must still never see a token issued twice.
#[tokio::test]
async fn no_token_is_reissued() {
    let database = Database::new().await;
    let lease = database.lease().await;
    no_token_is_reissued_after_counter_loss(
        &lease,
        &database.store(),
        Capabilities::real_server(),
        async || {},
    )
    .await;
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_increments_are_exact() {
    let database = Database::new().await;
    let report = fenced_increments(
        Arc::new(database.lease().await),
        Arc::new(database.store()),
        Capabilities::real_server(),
        4,
        5,
        Fencing::On,
        11,
    )
    .await;
    assert_eq!(report.total, report.expected, "{report:?}");
    database.drop_database().await;
}

#[tokio::test]
async fn an_acquisition_at_an_exhausted_counter_is_an_error_and_leaves_the_lease_free() {
    let database = Database::new().await;
    let lease = database.lease().await;
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
    database.drop_database().await;
}

#[tokio::test]
async fn a_token_source_and_a_lease_name_their_tables_in_their_errors() {
    let database = Database::new().await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let err = database.tokens().next(&resource).await.unwrap_err();
    assert!(
        matches!(&err, Error::Misconfigured { store, .. } if *store == format!("mysql:{}.tokens", database.name)),
        "{err:?}"
    );
    let lease = MySqlLease::new(
        MySqlQualifiedName::new(&database.name, "leases").unwrap(),
        database.tokens(),
    );
    let err = lease
        .try_acquire(&resource, Ttl::from_secs(5).unwrap())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Misconfigured { store, .. } if *store == format!("mysql:{}.leases", database.name)),
        "{err:?}"
    );
    database.drop_database().await;
}

//! Faults that need a container: the database frozen (`docker pause`) under a holder's write,
//! past its lease's TTL, the worked example's "slow hop to the database".

use std::time::Duration;

use fencing_core::adapter::StoreWrites;
use fencing_core::{
    Error, FencedStore, FencedWrite, FencingToken, Lease, Lifecycle, MemoryLease, RecordKey,
    ResourceName, Ttl,
};
use fencing_postgres::{PgStore, PgTable};
use fencing_test_support::services::TestContainer;
use sqlx::postgres::PgPoolOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: .ci/run runs it with FENCING_TEST_SERVICES=containers"]
async fn a_write_stuck_in_a_paused_database_past_the_ttl_cannot_overwrite_the_new_holder() {
    let database = TestContainer::postgres().expect("a PostgreSQL container");
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&database.url())
        .await
        .unwrap();
    let table = PgTable::new("public", "refund")
        .and_then(|t| t.with_payload_column("payload"))
        .unwrap();
    table.create_if_missing(&pool).await.unwrap();
    let store = PgStore::new(pool, table);
    let lifecycle = Lifecycle::default();
    let key = RecordKey::new("r_815").unwrap();
    let create = FencedWrite::claim().set_state(lifecycle.pending().clone());
    store.write(&key, FencingToken::MIN, &create).await.unwrap();

    let lease = MemoryLease::new();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_secs(1).unwrap();
    let a = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    store
        .write(&key, a.token(), &lifecycle.claim())
        .await
        .unwrap();

    database.pause();
    let confirm_a = tokio::spawn({
        let (store, key, confirm, token) =
            (store.clone(), key.clone(), lifecycle.confirm(), a.token());
        async move { store.write(&key, token, &confirm).await }
    });
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let b = lease
        .try_acquire(&resource, ttl)
        .await
        .unwrap()
        .expect("A's lease has expired while its write hangs");
    let claim_b = tokio::spawn({
        let (store, key, claim, token) = (store.clone(), key.clone(), lifecycle.claim(), b.token());
        async move { store.write(&key, token, &claim).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    database.unpause();
    let (a_result, b_result) = (confirm_a.await.unwrap(), claim_b.await.unwrap());

    // Whichever write the database applies first decides; the fence (or the state) refuses
    // the other. Never both: a stale confirm cannot land after the new holder's claim.
    match (&a_result, &b_result) {
        (Ok(_), Err(Error::StateMismatch { found, .. })) => {
            assert_eq!(
                found.as_deref(),
                Some("sent"),
                "A confirmed first: B finds it sent"
            );
        }
        (Err(Error::Fenced { found, .. }), Ok(takeover)) => {
            assert_eq!(
                found.token(),
                Some(b.token()),
                "B claimed first: A meets B's fence"
            );
            assert_eq!(takeover.previous_fence, Some(a.token()));
        }
        other => panic!("exactly one write may land: {other:?}"),
    }
    let row = store.read(&key).await.unwrap().unwrap();
    let winner = if a_result.is_ok() {
        a.token()
    } else {
        b.token()
    };
    assert_eq!(row.fence, Some(winner));
}

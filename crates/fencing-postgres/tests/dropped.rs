//! The adapter's own writes dropped at each point where they waited on PostgreSQL
//! (`fencing_testkit::cancellation::drop_at_every_yield`): a write in the caller's
//! transaction and a group written together. The trait's writes and the lease are swept by
//! the conformance suite on every backend.

mod common;

use std::time::Duration;

use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{FencedStore, FencedWrite, FencingToken, Holder, Lifecycle, Record, RecordKey};
use fencing_postgres::PgStore;
use fencing_test_support::services;
use fencing_testkit::cancellation::drop_at_every_yield;
use fencing_testkit::conformance::{make_pending, report_sweep, settled_by_a_resend};
use fencing_testkit::unique_name;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, Postgres, Transaction};
use tokio::sync::Mutex;

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

async fn record(store: &PgStore, key: &RecordKey) -> Record {
    store.read(key).await.unwrap().expect("the record")
}

/// A `write_in` dropped inside the caller's transaction, which the caller then commits (the
/// case where the dropped statement can count): the record is as before or claimed, and the
/// holder's resend settles which. Rolled back, nothing of it stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_in_dropped_inside_the_callers_transaction_is_applied_or_not() {
    let schema = common::Schema::new().await;
    let store = schema.store();
    let (source, resource) = fencing_testkit::issued_up_to(7).await;
    let holder = Holder::new(&resource, token(7), &source);
    let claim = Lifecycle::default().claim();
    for commit in [true, false] {
        let sweep = drop_at_every_yield(
            async || {
                let key = RecordKey::new(unique_name("in-tx")).unwrap();
                make_pending(&store, &key).await;
                let before = record(&store, &key).await;
                let tx: Transaction<'static, Postgres> = schema.pool.begin().await.unwrap();
                (key, before, Mutex::new(Some(tx)))
            },
            async |(key, _, tx)| {
                let mut tx = tx.lock().await;
                let tx = tx.as_mut().expect("the transaction");
                store.write_in(tx, &holder, key, &claim).await
            },
            async |(key, before, tx), output| {
                let tx = tx.lock().await.take().expect("the transaction");
                if commit {
                    tx.commit().await.unwrap();
                    settled_by_a_resend(&store, key, token(7), &claim, before, output).await;
                } else {
                    tx.rollback().await.unwrap();
                    assert_eq!(&record(&store, key).await, before, "rolled back");
                }
            },
        )
        .await;
        report_sweep(
            if commit {
                "write_in, committed"
            } else {
                "write_in, rolled back"
            },
            sweep,
        );
    }
    schema.drop_schema().await;
}

/// A group written together, dropped at any point: every record of it is claimed or none is
/// (one statement), and the holder's resend claims them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_written_together_and_dropped_is_applied_whole_or_not_at_all() {
    let schema = common::Schema::new().await;
    let store = schema.store();
    let (source, resource) = fencing_testkit::issued_up_to(7).await;
    let holder = Holder::new(&resource, token(7), &source);
    let lifecycle = Lifecycle::default();
    let claim = lifecycle.claim();
    let sweep = drop_at_every_yield(
        async || {
            let keys: Vec<RecordKey> = (0..3)
                .map(|i| RecordKey::new(unique_name(&format!("group-{i}"))).unwrap())
                .collect();
            for key in &keys {
                make_pending(&store, key).await;
            }
            keys
        },
        async |keys| store.write_together(&holder, keys, &claim).await,
        async |keys, output| {
            if let Some(ended) = output {
                ended.unwrap();
            }
            // One snapshot for the whole group: a dropped commit may still land mid-check.
            let mut snapshot = schema.pool.begin().await.unwrap();
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                .execute(&mut *snapshot)
                .await
                .unwrap();
            let mut claimed = 0;
            for key in keys {
                let record = store.read_in(&mut snapshot, key).await.unwrap().unwrap();
                claimed += usize::from(record.state.as_ref() == Some(lifecycle.in_flight()));
            }
            snapshot.commit().await.unwrap();
            assert!(
                claimed == 0 || claimed == keys.len(),
                "{claimed} of the group claimed"
            );
            store.write_together(&holder, keys, &claim).await.unwrap();
            for key in keys {
                let record = record(&store, key).await;
                assert_eq!(record.fence, Some(token(7)), "{record:?}");
            }
        },
    )
    .await;
    report_sweep("write_together", sweep);
    schema.drop_schema().await;
}

/// A request dropped while PostgreSQL is still working on it closes its connection instead of
/// returning it to the pool, where the next request would find the session in whatever state
/// the dropped one left (sqlx 0.9.0's `begin` dropped at the wrong moment leaves it inside a
/// transaction that never commits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_while_the_server_works_on_it_closes_its_connection() {
    let schema = common::Schema::new().await;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&services::postgres_url())
        .await
        .unwrap();
    let store = PgStore::new(pool.clone(), schema.table.clone());
    let key = RecordKey::new("r_815").unwrap();
    make_pending(&store, &key).await;
    let backend = async || -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let before = backend().await;

    // Another session holds the row, so the claim waits on the server until it is dropped.
    let mut holder = schema.pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM {} WHERE id = 'r_815' FOR UPDATE",
        schema.table.name()
    )))
    .execute(&mut *holder)
    .await
    .unwrap();
    let waited = tokio::time::timeout(
        Duration::from_millis(300),
        store.write(&key, token(7), &FencedWrite::claim()),
    )
    .await;
    assert!(
        waited.is_err(),
        "the claim did not wait on the row: {waited:?}"
    );
    holder.rollback().await.unwrap();
    assert_ne!(
        backend().await,
        before,
        "the dropped request's connection went back to the pool"
    );
    pool.close().await;
    schema.drop_schema().await;
}

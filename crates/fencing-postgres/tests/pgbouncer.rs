//! Behind PgBouncer in transaction pooling mode, where consecutive transactions of one client
//! connection may run on different server connections and named prepared statements collide.

mod common;

use common::Schema;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FencedStore, FencingToken, Holder, Lease, Lifecycle, RecordKey, ResourceName,
};
use fencing_postgres::{PgFenceFloor, PgLease, PgQualifiedName, PgStore, PgTokenSource};
use fencing_test_support::services::{self, PgBouncer};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

/// The port of the tests' PostgreSQL.
fn postgres_port() -> u16 {
    let url = services::postgres_url();
    url.rsplit_once('@')
        .and_then(|(_, host)| host.split('/').next())
        .and_then(|host| host.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(5432)
}

/// A PgBouncer sharing one server connection among all its clients, in front of the tests'
/// PostgreSQL, and a pool of four client connections through it.
async fn behind_pgbouncer() -> (PgBouncer, PgPool) {
    let bouncer = PgBouncer::start(postgres_port(), 1);
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .min_connections(4)
        .connect(&bouncer.url("test"))
        .await
        .unwrap();
    (bouncer, pool)
}

/// Claims and confirms `n` records with one token from four client connections at once.
async fn settle(store: &PgStore, n: usize, token: FencingToken) -> Result<(), Error> {
    let lifecycle = Lifecycle::default();
    let create = fencing_core::FencedWrite::claim().set_state(lifecycle.pending().clone());
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let (store, lifecycle, create) = (store.clone(), lifecycle.clone(), create.clone());
        tasks.spawn(async move {
            let k = key(&format!("r_{i:03}"));
            store.write(&k, token, &create).await?;
            store.write(&k, token, &lifecycle.claim()).await?;
            store.write(&k, token, &lifecycle.confirm()).await.map(drop)
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("no panic")?;
    }
    Ok(())
}

#[tokio::test]
async fn without_named_prepared_statements_fenced_writes_work_behind_transaction_pooling() {
    let schema = Schema::new().await;
    let (_bouncer, pool) = behind_pgbouncer().await;

    // The store as it is by default prepares named statements on whichever server connection
    // its transaction lands on, and collides with another client's.
    let named = PgStore::new(pool.clone(), schema.table.clone());
    let err = settle(&named, 16, token(5)).await.unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    assert!(
        err.to_string().contains("for_transaction_pooling()"),
        "{err}"
    );

    // A pool of its own: sqlx reuses a statement its connection cached, named or not.
    pool.close().await;
    let (_bouncer, pool) = behind_pgbouncer().await;
    let unnamed = PgStore::new(pool.clone(), schema.table.clone()).for_transaction_pooling();
    settle(&unnamed, 40, token(7)).await.unwrap();
    let read = unnamed.read(&key("r_039")).await.unwrap().unwrap();
    assert_eq!(read.fence, Some(token(7)));
    assert_eq!(read.state.as_ref(), Some(Lifecycle::default().done()));

    // A stale token is still refused behind the pooler, and write_many works there too.
    let err = unnamed
        .write(&key("r_001"), token(6), &Lifecycle::default().claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    let (source, resource) = fencing_testkit::issued_up_to(8).await;
    let holder = Holder::new(&resource, token(8), &source);
    let keys: Vec<_> = (0..40).map(|i| key(&format!("r_{i:03}"))).collect();
    let again = unnamed
        .write_together(&holder, &keys, &fencing_core::FencedWrite::claim())
        .await
        .unwrap();
    assert_eq!(again.written.len(), 40);
    schema.drop_schema().await;
}

#[tokio::test]
async fn server_connections_terminated_under_the_pooler_lose_no_write_and_double_none() {
    let schema = Schema::new().await;
    let (bouncer, pool) = behind_pgbouncer().await;
    let store = PgStore::new(pool.clone(), schema.table.clone()).for_transaction_pooling();
    let lifecycle = Lifecycle::default();
    let create = fencing_core::FencedWrite::claim().set_state(lifecycle.pending().clone());
    let (source, resource) = fencing_testkit::issued_up_to(9).await;
    let holder = Holder::new(&resource, token(9), &source);
    let mut terminated = 0;
    for i in 0..12 {
        let k = key(&format!("r_{i:03}"));
        holder.write(&store, &k, &create).await.unwrap();
        holder.write(&store, &k, &lifecycle.claim()).await.unwrap();
        // Between the claim and the confirm, the server connection under the pooler dies.
        let killed: Vec<bool> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '{}'",
            bouncer.application_name()
        )))
        .fetch_all(&schema.pool)
        .await
        .unwrap();
        terminated += killed.len();
        let confirmed = holder.write(&store, &k, &lifecycle.confirm()).await;
        match confirmed {
            Ok(_) => {}
            // A request that failed before it was sent is safe to send again.
            Err(err) if !err.is_rejection() => {
                holder
                    .write(&store, &k, &lifecycle.confirm())
                    .await
                    .unwrap();
            }
            Err(err) => panic!("{k:?}: {err}"),
        }
    }
    assert!(
        terminated >= 6,
        "the pooler's server connections were terminated: {terminated}"
    );
    let rows: Vec<(i64, Option<String>)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT fence, state FROM {} ORDER BY id",
        schema.table.name()
    )))
    .fetch_all(&schema.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 12);
    assert!(
        rows.iter()
            .all(|(f, s)| *f == 9 && s.as_deref() == Some("sent")),
        "{rows:?}"
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn the_lease_token_source_and_floor_work_behind_transaction_pooling_too() {
    let schema = Schema::new().await;
    let (_bouncer, pool) = behind_pgbouncer().await;
    let tokens = PgTokenSource::new(
        pool.clone(),
        PgQualifiedName::new(&schema.name, "tokens").unwrap(),
    )
    .for_transaction_pooling();
    let lease = PgLease::new(
        PgQualifiedName::new(&schema.name, "leases").unwrap(),
        tokens,
    );
    lease.create_if_missing().await.unwrap();
    let floor = PgFenceFloor::new(pool.clone(), &schema.table).for_transaction_pooling();
    let store = PgStore::new(pool.clone(), schema.table.clone()).for_transaction_pooling();

    // Four clients at once on one server connection, each taking its own resource's lease,
    // writing under it, and handing it back.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..4 {
        let (lease, store) = (lease.clone(), store.clone());
        tasks.spawn(async move {
            let resource = ResourceName::new(format!("settle:m_{i}")).unwrap();
            let ttl = fencing_core::Ttl::from_secs(30).unwrap();
            for _ in 0..5 {
                let mut guard = lease.try_acquire(&resource, ttl).await?.expect("free");
                lease.extend(&mut guard, ttl).await?;
                let status = lease.status(&resource).await?.expect("held");
                assert_eq!(status.token, Some(guard.token()));
                store
                    .write(
                        &key(&format!("r_{i}")),
                        guard.token(),
                        &fencing_core::FencedWrite::claim(),
                    )
                    .await?;
                lease.release(guard).await?;
            }
            Ok::<_, Error>(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("no panic").unwrap();
    }
    let resource = ResourceName::new("settle:m_0").unwrap();
    let issued = lease.token_source().current(&resource).await.unwrap();
    assert_eq!(issued, Some(token(5)));
    let highest = fencing_core::FenceFloor::max_fence(&floor, &resource)
        .await
        .unwrap();
    assert_eq!(highest, Some(token(5)), "the four resources' rows reach 5");
    schema.drop_schema().await;
}

/// Two workers behind a PgBouncer with two server connections, each in a transaction of its
/// own whose first fenced write is the store's first: the store learns the table's shape on
/// the caller's transaction, so neither waits for a third server connection that never
/// frees (PgBouncer would hold each for its `query_wait_timeout`, 120 s).
#[tokio::test]
async fn two_workers_in_transactions_on_two_server_connections_never_wait_for_a_third() {
    let schema = Schema::new().await;
    let bouncer = PgBouncer::start(postgres_port(), 2);
    let (source, resource) = fencing_testkit::issued_up_to(9).await;
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(2));
    let worker = |i: usize| {
        let (table, barrier, url) = (schema.table.clone(), barrier.clone(), bouncer.url("test"));
        let (source, resource) = (&source, &resource);
        async move {
            let pool = PgPoolOptions::new()
                .max_connections(4)
                .connect(&url)
                .await
                .unwrap();
            let store = PgStore::new(pool.clone(), table).for_transaction_pooling();
            let mut tx = pool.begin().await.unwrap();
            sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
            // Both transactions now hold a server connection each: there is no third.
            barrier.wait().await;
            let holder = Holder::new(resource, token(9), source);
            let k = key(&format!("r_{i}"));
            store
                .write_in(&mut tx, &holder, &k, fencing_core::FencedWrite::claim())
                .await?;
            tx.commit().await.map_err(|e| store.sql_failure(e))?;
            pool.close().await;
            Ok::<_, Error>(())
        }
    };
    let (first, second) = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        tokio::join!(worker(0), worker(1))
    })
    .await
    .expect("neither worker waits for a third server connection");
    first.unwrap();
    second.unwrap();
    drop(bouncer);
    schema.drop_schema().await;
}

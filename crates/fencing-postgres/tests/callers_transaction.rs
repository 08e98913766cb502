//! Writes in the caller's transaction use that transaction's connection and nothing else, and
//! a pipeline confirms each record together with the caller's own writes in one transaction.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Schema;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    BoxError, EffectOutcome, Error, FencedBatch, FencedStore, FencedWrite, Holder, Lease,
    Lifecycle, MemoryLease, Record, RecordKey, RecordWrites, ResourceName, Result, SideEffect, Ttl,
    Written, async_trait,
};
use fencing_postgres::PgStore;
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool, Row};

fn key(n: usize) -> RecordKey {
    RecordKey::new(format!("r_{n:03}")).unwrap()
}

/// A pool of one connection, which gives up waiting for a second after a second.
async fn pool_of_one() -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(1))
        .connect(&fencing_test_support::services::postgres_url())
        .await
        .unwrap()
}

/// A refusal in the caller's transaction (`write_in`, `write_together_in`) is explained by the
/// holder's source only if that source can answer at once: a `PgTokenSource` on the pool whose
/// one connection the transaction holds leaves it a plain refusal rather than wait for that
/// connection (for as long as the pool's acquire timeout, here a minute). With the connection
/// free again, the same refusal is explained: the fence it meets is above every token issued.
#[tokio::test]
async fn a_refused_write_in_the_callers_transaction_waits_for_no_second_connection() {
    let schema = Schema::new().await;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(60))
        .connect(&fencing_test_support::services::postgres_url())
        .await
        .unwrap();
    let tokens = fencing_postgres::PgTokenSource::new(
        pool.clone(),
        fencing_postgres::PgQualifiedName::new(&schema.name, "tokens").unwrap(),
    );
    tokens.create_if_missing().await.unwrap();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let token = fencing_core::TokenSource::next(&tokens, &resource)
        .await
        .unwrap();
    let store = PgStore::new(pool.clone(), schema.table.clone());
    let above = fencing_core::FencingToken::new(token.get() + 10).unwrap();
    store
        .write(&key(1), above, &FencedWrite::claim())
        .await
        .unwrap();
    let holder = Holder::new(&resource, token, &tokens);
    let mut tx = pool.begin().await.unwrap();
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        store.write_in(&mut tx, &holder, &key(1), &FencedWrite::claim()),
    )
    .await
    .expect("answered without waiting for the pool's one connection")
    .unwrap_err();
    assert!(matches!(refused, Error::Fenced { .. }), "{refused:?}");
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        store.write_together_in(&mut tx, &holder, &[key(1)], FencedWrite::claim()),
    )
    .await
    .expect("a group answered without waiting for the pool's one connection")
    .unwrap_err();
    assert!(matches!(refused, Error::Fenced { .. }), "{refused:?}");
    drop(tx);
    let explained = holder
        .write(&store, &key(1), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(explained, Error::TokenRegression { .. }),
        "{explained:?}"
    );
    pool.close().await;
    schema.drop_schema().await;
}

async fn pending(store: &PgStore, keys: &[RecordKey]) {
    let lifecycle = Lifecycle::default();
    let create = FencedWrite::claim().set_state(lifecycle.pending().clone());
    for key in keys {
        store
            .write(key, fencing_core::FencingToken::MIN, &create)
            .await
            .unwrap();
    }
}

/// The store's first write is inside the caller's transaction, on a pool whose one
/// connection that transaction holds: the table's shape is learnt on the same connection.
#[tokio::test]
async fn a_first_write_in_the_callers_transaction_needs_no_second_connection() {
    let schema = Schema::new().await;
    let pool = pool_of_one().await;
    let store = PgStore::new(pool.clone(), schema.table.clone());
    let (source, resource) = fencing_testkit::issued_up_to(5).await;
    let holder = Holder::new(
        &resource,
        fencing_core::FencingToken::new(5).unwrap(),
        &source,
    );
    let mut tx = pool.begin().await.unwrap();
    let written = store
        .write_in(&mut tx, &holder, &key(1), &FencedWrite::claim())
        .await
        .expect("no second connection is asked for");
    assert_eq!(written.record.fence, Some(holder.token()));
    let read = store.read_in(&mut tx, &key(1)).await.unwrap().unwrap();
    assert_eq!(read.fence, Some(holder.token()));
    tx.commit().await.unwrap();
    // And a fresh store's first read and write_together on the caller's connection too.
    let fresh = PgStore::new(pool.clone(), schema.table.clone());
    let mut conn = pool.acquire().await.unwrap();
    assert!(fresh.read_in(&mut conn, &key(2)).await.unwrap().is_none());
    let fresh = PgStore::new(pool.clone(), schema.table.clone());
    let together = fresh
        .write_together_in(&mut conn, &holder, &[key(1)], FencedWrite::claim())
        .await
        .unwrap();
    assert_eq!(together.keys(), vec![key(1)]);
    drop(conn);
    pool.close().await;
    schema.drop_schema().await;
}

/// A gateway that answers at once with a receipt per key.
struct Gateway;

#[async_trait]
impl SideEffect for Gateway {
    type Receipt = String;

    async fn lookup(&self, _: &RecordKey) -> Result<Option<String>, BoxError> {
        Ok(None)
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<String, BoxError> {
        Ok(format!("re_{}", key.as_str()))
    }
}

/// Each record's confirm and its ledger entry in one transaction of the caller's.
struct ConfirmWithLedger<'a> {
    store: &'a PgStore,
    ledger: String,
    lifecycle: &'a Lifecycle,
}

#[async_trait]
impl RecordWrites<String> for ConfirmWithLedger<'_> {
    async fn claim(&self, holder: &Holder, key: &RecordKey) -> Result<Written> {
        holder.write(self.store, key, &self.lifecycle.claim()).await
    }

    async fn confirm(&self, holder: &Holder, key: &RecordKey, receipt: &String) -> Result<Written> {
        let mut tx = self
            .store
            .pool()
            .begin()
            .await
            .map_err(|e| self.store.sql_failure(e))?;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (record, receipt) VALUES ($1, $2)",
            self.ledger
        )))
        .bind(key.as_str())
        .bind(receipt)
        .execute(&mut *tx)
        .await
        .map_err(|e| self.store.sql_failure(e))?;
        let written = self
            .store
            .write_in(&mut tx, holder, key, &self.lifecycle.confirm())
            .await?;
        tx.commit().await.map_err(|e| self.store.sql_failure(e))?;
        Ok(written)
    }
}

/// A pipeline whose confirms each commit with a ledger entry: every record settled has its
/// entry; a stale holder's confirm is refused and its entry rolled back with it.
#[tokio::test]
async fn a_pipeline_confirms_each_record_with_the_callers_writes_in_one_transaction() {
    let schema = Schema::new().await;
    let store = schema.store();
    let ledger = format!("\"{}\".ledger", schema.name);
    schema
        .execute(format!(
            "CREATE TABLE {ledger} (record text PRIMARY KEY, receipt text NOT NULL)"
        ))
        .await;
    let keys: Vec<RecordKey> = (1..=40).map(key).collect();
    pending(&store, &keys).await;
    let lifecycle = Lifecycle::default();
    let lease = Arc::new(MemoryLease::new());
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let writes = ConfirmWithLedger {
        store: &store,
        ledger: ledger.clone(),
        lifecycle: &lifecycle,
    };
    let guard = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    let stores: [Arc<dyn FencedStore>; 1] = [Arc::new(store.clone())];
    let batch = FencedBatch::new(lease.clone(), guard, stores).unwrap();
    let settled = batch
        .holder()
        .pipeline(&store, &lifecycle, &Gateway)
        .concurrency(8)
        .writes(&writes)
        .run(keys[..30].to_vec())
        .await;
    let outcomes = settled.into_result().unwrap();
    assert_eq!(outcomes.len(), 30);
    assert!(
        outcomes
            .iter()
            .all(|(_, o)| matches!(o, EffectOutcome::Performed(_)))
    );

    // A newer holder claims r_031 behind the batch's back; the batch's confirm of it (after
    // its own claim and effect) is refused, and its ledger entry goes with it.
    let stale = batch.holder();
    stale
        .write(&store, &key(31), &lifecycle.claim())
        .await
        .unwrap();
    let newer = lease.try_acquire(&resource, ttl).await.unwrap();
    assert!(newer.is_none(), "still held");
    lease.release(batch.guard().clone()).await.unwrap();
    let newer = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    newer
        .holder()
        .write(&store, &key(31), &lifecycle.claim())
        .await
        .unwrap();
    let err = writes
        .confirm(&stale, &key(31), &"re_r_031".to_owned())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    let entries: Vec<String> = sqlx::query(AssertSqlSafe(format!(
        "SELECT record FROM {ledger} ORDER BY record"
    )))
    .fetch_all(&schema.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| row.get(0))
    .collect();
    let settled_keys: Vec<String> = keys[..30].iter().map(|k| k.as_str().to_owned()).collect();
    assert_eq!(
        entries, settled_keys,
        "one entry per confirmed record, none for r_031"
    );
    drop(batch);
    schema.drop_schema().await;
}

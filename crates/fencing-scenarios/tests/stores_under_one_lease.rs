//! One lease, real stores that each check their own fence: refunds in PostgreSQL, a ledger in
//! DynamoDB, receipts in S3 or in an Azure container. A stale holder refused by one store aborts
//! its batch, and nothing more reaches any store.

use std::sync::Arc;
use std::time::Duration;

use fencing::dynamodb::{DynamoStore, DynamoTable};
use fencing::object_store::ObjectStoreStore;
use fencing::postgres::{PgEpochSource, PgLease, PgQualifiedName, PgStore, PgTable, PgTokenSource};
use fencing::redis::RedisLease;
use fencing::{
    Error, FencedBatch, FencedStore, FencedWrite, FencingToken, Lease, Lifecycle, RecordKey,
    ResourceName, Ttl,
};
use fencing_core::adapter::StoreWrites;
use fencing_test_support::{aws, object_stores, services};
use fencing_testkit::unique_name;
use object_store::path::Path as ObjectPath;
use sqlx::AssertSqlSafe;

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn dynamodb() -> aws_sdk_dynamodb::Client {
    aws::dynamodb_client(aws_sdk_dynamodb::Config::builder())
}

fn s3() -> aws_sdk_s3::Client {
    aws::s3_client(aws_sdk_s3::Config::builder())
}

/// The refunds table in a schema of this test's own.
struct Refunds {
    pool: sqlx::PgPool,
    schema: String,
    store: Arc<PgStore>,
}

impl Refunds {
    async fn in_a_fresh_schema() -> Self {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect(&services::postgres_url())
            .await
            .unwrap();
        let schema = unique_name("stores").replace('-', "_");
        let table = PgTable::new(&schema, "refund")
            .and_then(|t| t.with_payload_column("payload"))
            .unwrap();
        table.create_if_missing(&pool).await.unwrap();
        let store = Arc::new(PgStore::new(pool.clone(), table));
        Refunds {
            pool,
            schema,
            store,
        }
    }
}

/// A ledger in a DynamoDB table of this test's own.
async fn fresh_ledger() -> DynamoStore {
    let client = dynamodb();
    let table = DynamoTable::new(unique_name("ledger")).unwrap();
    table.create_if_missing(&client).await.unwrap();
    DynamoStore::new(client, table)
}

async fn drop_schema(pool: &sqlx::PgPool, schema: &str) {
    sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE")))
        .execute(pool)
        .await
        .unwrap();
}

/// A claims refund r_1 and its entry r_1 in `other`, then stalls past its TTL; B takes over,
/// and takes the entry over. A wakes: `other` refuses its write, and its batch sends nothing
/// more to either store (r_2 stays as it was in both).
async fn a_stale_holder_refused_by(
    other: Arc<dyn FencedStore>,
    lease: Arc<dyn Lease>,
    refunds: Arc<PgStore>,
    ttl: Ttl,
) {
    let resource = ResourceName::new(unique_name("settle:m_4471")).unwrap();
    let lifecycle = Lifecycle::default();
    let pending = FencedWrite::claim().set_state(lifecycle.pending().clone());
    for k in ["r_1", "r_2"] {
        refunds
            .write(&key(k), FencingToken::MIN, &pending)
            .await
            .unwrap();
    }
    let refunds_dyn: Arc<dyn FencedStore> = refunds.clone();
    let stores = || [refunds_dyn.clone(), other.clone()];
    let other_name = other.name().to_owned();

    let a = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    let a_token = a.token();
    let batch_a = FencedBatch::new(lease.clone(), a, stores()).unwrap();
    batch_a
        .holder()
        .write(&*refunds, &key("r_1"), &lifecycle.claim())
        .await
        .unwrap();
    batch_a
        .holder()
        .write(&*other, &key("r_1"), &FencedWrite::claim())
        .await
        .unwrap();
    tokio::time::sleep(ttl.duration() * 3).await;

    let b = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    assert!(b.token() > a_token);
    let batch_b = FencedBatch::new(lease.clone(), b, stores()).unwrap();
    batch_b
        .holder()
        .write(&*other, &key("r_1"), &FencedWrite::claim())
        .await
        .unwrap();

    let err = batch_a
        .holder()
        .write(
            &*other,
            &key("r_1"),
            &FencedWrite::holder_only().set_payload(b"7025".to_vec()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, .. } if *store == other_name),
        "{err:?}"
    );
    for store in [&refunds_dyn, &other] {
        let err = batch_a
            .holder()
            .write(&**store, &key("r_2"), &lifecycle.claim())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    }
    let r_2 = refunds.read(&key("r_2")).await.unwrap().unwrap();
    assert_eq!(r_2.fence, Some(FencingToken::MIN), "r_2 untouched");
    assert_eq!(
        other.read(&key("r_2")).await.unwrap(),
        None,
        "never written"
    );
    let entry = other.read(&key("r_1")).await.unwrap().unwrap();
    assert!(entry.payload.is_empty(), "A's refused payload is not there");
    assert!(batch_a.finish().await.is_err());
    batch_b.finish().await.unwrap();
}

/// The ledger in DynamoDB, the lease on Redis with its epochs in PostgreSQL (a Redis restart
/// could not reissue a token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_refused_by_dynamodb_sends_nothing_more_to_either_store() {
    let Refunds {
        pool,
        schema,
        store: refunds,
    } = Refunds::in_a_fresh_schema().await;
    let epochs = PgEpochSource::new(
        pool.clone(),
        PgQualifiedName::new(&schema, "epochs").unwrap(),
    );
    epochs.create_if_missing().await.unwrap();
    let redis = redis::Client::open(services::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lease: Arc<dyn Lease> = Arc::new(RedisLease::new(redis, Arc::new(epochs)));
    let ledger = Arc::new(fresh_ledger().await);
    a_stale_holder_refused_by(ledger, lease, refunds, Ttl::from_millis(400).unwrap()).await;
    drop_schema(&pool, &schema).await;
}

/// Receipts in an Azure container (through `object_store`, on Azurite), the lease in
/// PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_refused_by_an_azure_container_sends_nothing_more_to_either_store() {
    let Refunds {
        pool,
        schema,
        store: refunds,
    } = Refunds::in_a_fresh_schema().await;
    let tokens = PgTokenSource::new(
        pool.clone(),
        PgQualifiedName::new(&schema, "tokens").unwrap(),
    );
    tokens.create_if_missing().await.unwrap();
    let pg_lease = PgLease::new(PgQualifiedName::new(&schema, "leases").unwrap(), tokens);
    pg_lease.create_if_missing().await.unwrap();
    let receipts = ObjectStoreStore::new(
        object_stores::azurite_container(),
        ObjectPath::from("m_4471"),
    )
    .named("receipts")
    .unwrap();
    let ttl = Ttl::from_millis(400).unwrap();
    a_stale_holder_refused_by(Arc::new(receipts), Arc::new(pg_lease), refunds, ttl).await;
    drop_schema(&pool, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_in_s3_aborts_the_batch_and_nothing_more_is_sent() {
    use fencing::s3::{S3Bucket, S3Store};

    let Refunds {
        pool,
        schema,
        store: refunds,
    } = Refunds::in_a_fresh_schema().await;
    let s3 = s3();
    let bucket = unique_name("receipts");
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let receipts_of = || S3Store::new(s3.clone(), S3Bucket::new(&bucket, "m_4471/").unwrap());
    let receipts = Arc::new(receipts_of());

    let lease: Arc<dyn Lease> = Arc::new(fencing::MemoryLease::new());
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_millis(300).unwrap();
    let pending = FencedWrite::claim().set_state(Lifecycle::default().pending().clone());
    refunds
        .write(&key("r_2"), FencingToken::MIN, &pending)
        .await
        .unwrap();
    let stores = || -> [Arc<dyn FencedStore>; 2] { [refunds.clone(), receipts.clone()] };
    let receipts_name = receipts.name().to_owned();

    let a = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    let batch_a = FencedBatch::new(lease.clone(), a, stores()).unwrap();
    let receipt = FencedWrite::claim().set_payload(b"r_1: 70.25 EUR".to_vec());
    batch_a
        .holder()
        .write(&*receipts, &key("r_1"), &receipt)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;

    // B, with a store of its own, takes the receipt over with a byte-identical body.
    let b = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    let b_receipts = receipts_of();
    b_receipts
        .write(&key("r_1"), b.token(), &receipt)
        .await
        .unwrap();

    let err = batch_a
        .holder()
        .write(&*receipts, &key("r_1"), &receipt)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, .. } if *store == receipts_name),
        "{err:?}"
    );
    let err = batch_a
        .holder()
        .write(&*refunds, &key("r_2"), &Lifecycle::default().claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    let r_2 = refunds.read(&key("r_2")).await.unwrap().unwrap();
    assert_eq!(
        r_2.fence,
        Some(FencingToken::MIN),
        "nothing more sent to PostgreSQL"
    );
    let r_1 = receipts.read(&key("r_1")).await.unwrap().unwrap();
    assert_eq!(
        r_1.fence,
        Some(b.token()),
        "the receipt's fence did not go down"
    );

    drop_schema(&pool, &schema).await;
}

/// A payout's effect across stores: the gateway call (idempotent on the refund id), then the
/// ledger entry in DynamoDB and the receipt in S3, each written through the batch, so each
/// carries the batch's token to its own fence.
struct Payout<'a> {
    batch: &'a FencedBatch,
    ledger: &'a DynamoStore,
    receipts: &'a fencing::s3::S3Store,
    sent: &'a std::sync::Mutex<std::collections::HashMap<RecordKey, u32>>,
    /// This worker stalls this long before its call for this refund.
    pause: Option<(RecordKey, Duration)>,
}

#[fencing::async_trait]
impl fencing::SideEffect for Payout<'_> {
    type Receipt = ();

    async fn lookup(&self, key: &RecordKey) -> Result<Option<()>, fencing::BoxError> {
        Ok(self.sent.lock().unwrap().contains_key(key).then_some(()))
    }

    async fn perform(&self, key: &RecordKey, _: &fencing::Record) -> Result<(), fencing::BoxError> {
        if let Some((at, pause)) = &self.pause
            && at == key
        {
            tokio::time::sleep(*pause).await;
        }
        *self.sent.lock().unwrap().entry(key.clone()).or_default() += 1;
        let entry = FencedWrite::claim().set_payload(self.batch.token().to_string().into_bytes());
        self.batch.holder().write(self.ledger, key, &entry).await?;
        self.batch
            .holder()
            .write(self.receipts, key, &entry)
            .await?;
        Ok(())
    }
}

/// The pipeline over three stores: A settles refunds 16 at a time and stalls past its TTL in
/// the call for r_10; B takes over, looks up what A left in flight, pays r_10 and writes its
/// ledger entry and receipt; A wakes, and its late ledger entry is refused by DynamoDB's own
/// fence, so neither its receipt nor its confirm is written. Every refund is paid once (the
/// stalled one asked for twice, paid once by its idempotency key), and every ledger entry and
/// receipt exists under a holder's token; r_10's carry B's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipeline_across_three_stores_stops_a_stale_holder_at_its_first_refusal() {
    use fencing::s3::{S3Bucket, S3Store};

    let Refunds {
        pool,
        schema,
        store: refunds,
    } = Refunds::in_a_fresh_schema().await;
    let ledger = Arc::new(fresh_ledger().await);
    let s3 = s3();
    let bucket = unique_name("receipts");
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let receipts = Arc::new(S3Store::new(s3, S3Bucket::new(&bucket, "m_4471/").unwrap()));
    let keys: Vec<RecordKey> = (1..=20).map(|n| key(&format!("r_{n:02}"))).collect();
    let lifecycle = Lifecycle::default();
    let pending = FencedWrite::claim().set_state(lifecycle.pending().clone());
    for k in &keys {
        refunds.write(k, FencingToken::MIN, &pending).await.unwrap();
    }
    let stores =
        || -> [Arc<dyn FencedStore>; 3] { [refunds.clone(), ledger.clone(), receipts.clone()] };
    let lease: Arc<dyn Lease> = Arc::new(fencing::MemoryLease::new());
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_secs(3).unwrap();
    let sent = std::sync::Mutex::new(std::collections::HashMap::new());
    let stalled = key("r_10");

    let a = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    let a_token = a.token();
    let batch_a = FencedBatch::new(lease.clone(), a, stores()).unwrap();
    let a_payout = Payout {
        batch: &batch_a,
        ledger: &ledger,
        receipts: &receipts,
        sent: &sent,
        pause: Some((stalled.clone(), Duration::from_secs(7))),
    };
    let a_run = batch_a
        .holder()
        .pipeline(&*refunds, &lifecycle, &a_payout)
        .concurrency(16)
        .run(keys.clone());
    let b_run = async {
        // B is handed the job once A's lease has run out.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let b = lease
            .try_acquire(&resource, ttl)
            .await
            .unwrap()
            .expect("A's lease expired");
        let b_token = b.token();
        let batch_b = FencedBatch::new(lease.clone(), b, stores()).unwrap();
        let b_payout = Payout {
            batch: &batch_b,
            ledger: &ledger,
            receipts: &receipts,
            sent: &sent,
            pause: None,
        };
        let settled = batch_b
            .holder()
            .pipeline(&*refunds, &lifecycle, &b_payout)
            .concurrency(16)
            .run(keys.clone())
            .await
            .into_result()
            .unwrap();
        batch_b.finish().await.unwrap();
        (b_token, settled)
    };
    let (a_settled, (b_token, b_settled)) = tokio::join!(a_run, b_run);
    assert!(b_token > a_token);

    let err = a_settled.error.expect("A is stopped");
    let aborted = batch_a.aborted_by().expect("a fence refused A");
    // As planned, DynamoDB refuses A's late ledger entry for r_10; on a machine slow enough
    // that A had not confirmed everything else within its TTL, a confirm B got to first is
    // refused earlier. Either way a fence stopped A.
    let as_planned = matches!(&err, Error::Effect { record, .. } if *record == stalled)
        && aborted == (ledger.name().to_owned(), stalled.clone());
    assert!(as_planned || err.is_rejection(), "{err:?}, {aborted:?}");
    let _ = batch_a.finish().await;
    assert_eq!(b_settled.len(), 20, "B settles every refund, done or not");

    let sent = sent.into_inner().unwrap();
    for k in &keys {
        let refund = refunds.read(k).await.unwrap().unwrap();
        assert_eq!(refund.state.as_ref(), Some(lifecycle.done()), "{k:?}");
        for store in [&*ledger as &dyn FencedStore, &*receipts] {
            let record = store.read(k).await.unwrap();
            let record = record.unwrap_or_else(|| panic!("{k:?} missing in {}", store.name()));
            let by = record.fence.unwrap();
            assert!(by == a_token || by == b_token, "{k:?} in {}", store.name());
            assert_eq!(record.payload, by.to_string().into_bytes());
            if *k == stalled {
                assert_eq!(by, b_token, "A's late write over B's in {}", store.name());
            }
        }
        // Asked for twice only where both holders had it in flight: planned, r_10 alone.
        let asked = sent[k];
        let twice_allowed = *k == stalled || !as_planned;
        assert!(
            asked == 1 || (asked == 2 && twice_allowed),
            "{k:?} asked {asked} times"
        );
    }
    let r_10 = refunds.read(&stalled).await.unwrap().unwrap();
    assert_eq!(r_10.fence, Some(b_token));
    drop_schema(&pool, &schema).await;
}

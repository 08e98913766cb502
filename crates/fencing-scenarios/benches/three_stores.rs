//! A settlement across three stores, row by row against pipelined, in the same run: each
//! refund claimed and confirmed in PostgreSQL, its ledger entry written to DynamoDB and its
//! receipt to S3 inside the payout, every write fenced. Twice: on the servers the tests use
//! (S3 on moto; DynamoDB on moto, or on DynamoDB Local with
//! `FENCING_DYNAMODB_SERVER=dynamodb-local`), then with a latency model in place of the two
//! AWS stores (in-memory stores that answer each request after a fixed network delay, any
//! number at once, as the services do), which shows what the pipeline gains where the
//! emulators cannot answer concurrently.
//!
//! ```text
//! cargo bench -p fencing-scenarios --bench three_stores
//! FENCING_DYNAMODB_SERVER=dynamodb-local cargo bench -p fencing-scenarios --bench three_stores
//! ```
//!
//! Each round times both variants once, in rotating order, over the same refunds; the medians
//! of the rounds are reported with their ratio to row by row. Nothing here asserts a time:
//! the figures go to docs/benchmarks.md.

use std::time::{Duration, Instant};

use fencing::dynamodb::{DynamoStore, DynamoTable};
use fencing::postgres::{PgStore, PgTable};
use fencing::s3::{S3Bucket, S3Store};
use fencing::{
    BoxError, FencedStore, FencedWrite, FencingToken, Holder, Lifecycle, MemoryStore,
    MemoryTokenSource, Record, RecordKey, ResourceName, Result, SideEffect, TokenSource, Written,
    async_trait,
};
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_test_support::{aws, bench, services};
use sqlx::AssertSqlSafe;

const REFUNDS: usize = 200;
const ROUNDS: usize = 5;
/// The latency model's delay per request: a service in the same region, across a network.
const NETWORK: Duration = Duration::from_millis(10);

/// The payout: an instant gateway call, then the ledger entry and the receipt, each a claim
/// under the holder's token in its own store.
struct Payout<'a, L, R> {
    holder: Holder,
    ledger: &'a L,
    receipts: &'a R,
}

/// A store whose every request takes [`NETWORK`] before it is answered, any number at once.
#[derive(Debug)]
struct Remote(MemoryStore);

#[async_trait]
impl FencedStore for Remote {
    fn name(&self) -> &str {
        self.0.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        tokio::time::sleep(NETWORK).await;
        self.0.read(key).await
    }
}

#[async_trait]
impl StoreWrites for Remote {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        tokio::time::sleep(NETWORK).await;
        self.0.write(key, token, write).await
    }
}

#[async_trait]
impl<L: FencedStore, R: FencedStore> SideEffect for Payout<'_, L, R> {
    type Receipt = ();

    async fn lookup(&self, _: &RecordKey) -> Result<Option<()>, BoxError> {
        Ok(None)
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<(), BoxError> {
        let entry = FencedWrite::claim().set_payload(format!("{key}: 70.25 EUR").into_bytes());
        self.holder.write(self.ledger, key, &entry).await?;
        self.holder.write(self.receipts, key, &entry).await?;
        Ok(())
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let url = services::postgres_url();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&url)
        .await
        .expect("connect");
    let schema = fencing_testkit::unique_name("bench").replace('-', "_");
    let table = PgTable::new(&schema, "refund")
        .and_then(|t| t.with_payload_column("payload"))
        .unwrap();
    table.create_if_missing(&pool).await.unwrap();
    let refunds = PgStore::new(pool.clone(), table);
    let keys = bench::pending_records(&refunds, REFUNDS).await;

    let dynamodb = aws::dynamodb_client(aws_sdk_dynamodb::Config::builder());
    let ledger_table = DynamoTable::new(fencing_testkit::unique_name("ledger")).unwrap();
    ledger_table.create_if_missing(&dynamodb).await.unwrap();
    let ledger = DynamoStore::new(dynamodb, ledger_table);
    let s3 = aws::s3_client(aws_sdk_s3::Config::builder());
    let bucket = fencing_testkit::unique_name("receipts");
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let receipts = S3Store::new(s3, S3Bucket::new(&bucket, "m_4471/").unwrap());

    println!(
        "PostgreSQL at {url}, DynamoDB at {}, S3 at {}; {REFUNDS} refunds, {ROUNDS} rounds, \
         median per round\n",
        services::dynamodb_endpoint(),
        services::aws_endpoint()
    );
    let settle = Settle {
        pool: &pool,
        schema: &schema,
        refunds: &refunds,
        keys: &keys,
        source: MemoryTokenSource::new(),
    };
    bench::report(&settle.compare(&ledger, &receipts).await, REFUNDS, "refund");
    println!(
        "\nThe latency model: the ledger and the receipts in memory, {NETWORK:?} a request:\n"
    );
    let (model_ledger, model_receipts) = (
        Remote(MemoryStore::new("ledger")),
        Remote(MemoryStore::new("receipts")),
    );
    bench::report(
        &settle.compare(&model_ledger, &model_receipts).await,
        REFUNDS,
        "refund",
    );
    let sample = ledger
        .read(&keys[0])
        .await
        .unwrap()
        .expect("a ledger entry");
    assert!(sample.fence > Some(FencingToken::MIN));
    sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE")))
        .execute(&pool)
        .await
        .unwrap();
}

/// The settlement of the refunds in PostgreSQL, the payout writing to two other stores.
struct Settle<'a> {
    pool: &'a sqlx::PgPool,
    schema: &'a str,
    refunds: &'a PgStore,
    keys: &'a [RecordKey],
    source: MemoryTokenSource,
}

impl Settle<'_> {
    /// Row by row against pipelined, each round from pending refunds under a new token.
    async fn compare<L: FencedStore, R: FencedStore>(
        &self,
        ledger: &L,
        receipts: &R,
    ) -> Vec<(&'static str, Duration)> {
        let lifecycle = Lifecycle::default();
        let resource = ResourceName::new("settle:m_4471").unwrap();
        bench::compare(
            &[
                "row by row (Holder::run_effect per refund)",
                "pipelined (32 in flight, groups of 32)",
            ],
            ROUNDS,
            async |variant, _| {
                let reset = format!("UPDATE \"{}\".refund SET state = 'pending'", self.schema);
                sqlx::raw_sql(AssertSqlSafe(reset))
                    .execute(self.pool)
                    .await
                    .unwrap();
                let token = self.source.next(&resource).await.unwrap();
                let holder = Holder::new(&resource, token, &self.source);
                let payout = Payout {
                    holder: holder.clone(),
                    ledger,
                    receipts,
                };
                let start = Instant::now();
                if variant.starts_with("row by row") {
                    for key in self.keys {
                        holder
                            .run_effect(self.refunds, key, &lifecycle, &payout)
                            .await
                            .unwrap();
                    }
                } else {
                    let settled = holder
                        .pipeline(self.refunds, &lifecycle, &payout)
                        .concurrency(32)
                        .group_size(32)
                        .run(self.keys.iter().cloned())
                        .await;
                    assert_eq!(settled.into_result().unwrap().len(), REFUNDS);
                }
                start.elapsed()
            },
        )
        .await
    }
}

//! A settlement across three stores, row by row against pipelined, in the same run: each
//! refund claimed and confirmed in PostgreSQL, its ledger entry written to DynamoDB and its
//! receipt to S3 (both on the emulator the tests use) inside the payout, every write fenced.
//!
//! ```text
//! cargo bench -p fencing-scenarios --bench three_stores
//! ```
//!
//! Each round times both variants once, in rotating order, over the same refunds; the medians
//! of the rounds are reported with their ratio to row by row. Nothing here asserts a time:
//! the figures go to docs/benchmarks.md.

use std::time::Instant;

use fencing::dynamodb::{DynamoStore, DynamoTable};
use fencing::postgres::{PgStore, PgTable};
use fencing::s3::{S3Bucket, S3Store};
use fencing::{
    BoxError, Fence, FencedStore, FencedWrite, FencingToken, Lifecycle, MemoryTokenSource, Record,
    RecordKey, ResourceName, SideEffect, TokenSource, async_trait,
};
use fencing_test_support::{aws, bench, services};
use sqlx::AssertSqlSafe;

const REFUNDS: usize = 200;
const ROUNDS: usize = 5;

/// The payout: an instant gateway call, then the ledger entry and the receipt, each a claim
/// under the fence's token in its own store.
struct Payout<'a> {
    fence: Fence<'a>,
    ledger: &'a DynamoStore,
    receipts: &'a S3Store,
}

#[async_trait]
impl SideEffect for Payout<'_> {
    type Receipt = ();

    async fn lookup(&self, _: &RecordKey) -> Result<Option<()>, BoxError> {
        Ok(None)
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<(), BoxError> {
        let entry = FencedWrite::claim().set_payload(format!("{key}: 70.25 EUR").into_bytes());
        self.fence.write(self.ledger, key, &entry).await?;
        self.fence.write(self.receipts, key, &entry).await?;
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
    let table = PgTable::refunds(&schema).unwrap();
    table.create_if_missing(&pool).await.unwrap();
    let refunds = PgStore::new(pool.clone(), table);
    let keys = bench::pending_records(&refunds, REFUNDS).await;

    let dynamodb = aws::dynamodb_client(aws_sdk_dynamodb::Config::builder());
    let ledger_table = DynamoTable::new(fencing_testkit::unique_name("ledger")).unwrap();
    ledger_table.create(&dynamodb).await.unwrap();
    let ledger = DynamoStore::new(dynamodb, ledger_table);
    let s3 = aws::s3_client(aws_sdk_s3::Config::builder());
    let bucket = fencing_testkit::unique_name("receipts");
    s3.create_bucket().bucket(&bucket).send().await.unwrap();
    let receipts = S3Store::new(s3, S3Bucket::new(&bucket, "m_4471/").unwrap());

    let lifecycle = Lifecycle::default();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let source = MemoryTokenSource::new();
    println!(
        "PostgreSQL at {url}, the AWS emulator at {}; {REFUNDS} refunds, {ROUNDS} rounds, median per round\n",
        services::aws_endpoint()
    );
    let results = bench::compare(
        &[
            "row by row (Fence::run_effect per refund)",
            "pipelined (32 in flight, groups of 32)",
        ],
        ROUNDS,
        async |variant, _| {
            let reset = format!("UPDATE \"{schema}\".refund SET state = 'pending'");
            sqlx::raw_sql(AssertSqlSafe(reset))
                .execute(&pool)
                .await
                .unwrap();
            let token = source.next(&resource).await.unwrap();
            let fence = Fence::new(&resource, token, &source);
            let payout = Payout {
                fence,
                ledger: &ledger,
                receipts: &receipts,
            };
            let start = Instant::now();
            if variant.starts_with("row by row") {
                for key in &keys {
                    fence
                        .run_effect(&refunds, key, &lifecycle, &payout)
                        .await
                        .unwrap();
                }
            } else {
                let settled = fence
                    .pipeline(&refunds, &lifecycle, &payout)
                    .concurrency(32)
                    .group_size(32)
                    .run(keys.clone())
                    .await;
                assert_eq!(settled.into_result().unwrap().len(), REFUNDS);
            }
            start.elapsed()
        },
    )
    .await;
    bench::report(&results, REFUNDS, "refund");
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

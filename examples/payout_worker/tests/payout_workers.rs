//! Two payout workers on a payments team's own schema (the example's worker, as it is), one
//! stalled past its TTL in the middle of a gateway call, the whole process stopped, renewal
//! included. The tables are read back with plain SQL: every payout paid once, its ledger entry
//! posted once, the stalled worker refused with its transaction rolled back.

#[path = "../src/worker.rs"]
#[allow(unreachable_pub)]
mod worker;

use std::sync::Arc;
use std::time::Duration;

use fencing::postgres::{PgQualifiedName, PgTokenSource};
use fencing::prelude::*;
use fencing_test_support::services;
use fencing_testkit::unique_name;
use sqlx::AssertSqlSafe;

const PAYOUTS: i64 = 30;

async fn redis_lease(pool: &sqlx::PgPool, schema: &str) -> Arc<dyn Lease> {
    let epochs = PgTokenSource::new(
        pool.clone(),
        PgQualifiedName::new(schema, "epochs").unwrap(),
    );
    epochs.create_if_missing().await.unwrap();
    let redis = redis::Client::open(services::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    Arc::new(RedisLease::new(redis, Arc::new(epochs)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stalled_past_its_ttl_is_refused_and_every_payout_is_paid_once() {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(6)
        .connect(&services::postgres_url())
        .await
        .unwrap();
    let schema = unique_name("payouts").replace('-', "_");
    worker::create_tables(&pool, &schema).await.unwrap();
    let table = worker::payouts_table(&schema).unwrap();
    sqlx::raw_sql(AssertSqlSafe(table.migration_sql()))
        .execute(&pool)
        .await
        .unwrap();
    worker::queue_payouts(&pool, &schema, "m_4471", PAYOUTS, 7025)
        .await
        .unwrap();
    let merchant = unique_name("m_4471");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "UPDATE \"{schema}\".payouts SET merchant = '{merchant}'"
    )))
    .execute(&pool)
    .await
    .unwrap();
    // One payout was cancelled before the runs: both leave it alone and go on.
    sqlx::raw_sql(AssertSqlSafe(format!(
        "UPDATE \"{schema}\".payouts SET status = 'cancelled' \
         WHERE id = (SELECT id FROM \"{schema}\".payouts ORDER BY created_at DESC, id DESC LIMIT 1)"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let gateway = Arc::new(worker::Gateway::default());
    let ttl = Ttl::from_millis(1500).unwrap();
    // A stalls on its 10th gateway call, after the gateway created the transfer and before
    // its answer returns, for twice its TTL: its renewal stalls with it.
    gateway.stall_on_call(10, Duration::from_secs(3));

    // A runs on a thread and runtime of its own, with a pool of its own, as a process of its
    // own would (sqlx connections belong to the runtime that made them).
    let a = std::thread::spawn({
        let (schema, merchant, gateway) = (schema.clone(), merchant.clone(), gateway.clone());
        move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    let pool = sqlx::PgPool::connect(&services::postgres_url())
                        .await
                        .unwrap();
                    let lease = redis_lease(&pool, &schema).await;
                    worker::run(&pool, &schema, lease, &merchant, ttl, &gateway).await
                })
        }
    });
    // B starts once A is stalled holding the lease (its 10th transfer is made), waits for the
    // lease to expire, and takes over.
    let started = std::time::Instant::now();
    while gateway.journal().transfers.len() < 10 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "A never reached its 10th gateway call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let lease = redis_lease(&pool, &schema).await;
    let b = worker::run(&pool, &schema, lease, &merchant, ttl, &gateway)
        .await
        .unwrap();
    let a = a.join().unwrap();

    let err = a.unwrap_err();
    assert!(
        matches!(err, Error::Fenced { .. }),
        "A must be refused: {err:?}"
    );
    assert_eq!(b.recovered, 1, "B found A's stalled transfer by its key");
    assert_eq!(b.paid + b.recovered, (PAYOUTS - 10) as u32, "{b:?}");
    assert_eq!(b.skipped, 1, "the cancelled payout");

    let (paid, fenced_by_b, entries, distinct, cents): (i64, i64, i64, i64, i64) =
        sqlx::query_as(AssertSqlSafe(format!(
            "SELECT (SELECT count(*) FROM \"{schema}\".payouts WHERE status = 'paid' \
               AND paid_at IS NOT NULL AND gateway_ref IS NOT NULL), \
             (SELECT count(*) FROM \"{schema}\".payouts WHERE fence = $1), \
             (SELECT count(*) FROM \"{schema}_Billing\".\"LedgerEntries\"), \
             (SELECT count(DISTINCT payout_id) FROM \"{schema}_Billing\".\"LedgerEntries\"), \
             (SELECT COALESCE(sum(amount_cents), 0)::int8 FROM \"{schema}_Billing\".\"LedgerEntries\")"
        )))
        .bind(b.token.unwrap().as_i64())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(paid, PAYOUTS - 1, "every payout paid but the cancelled one");
    let (cancelled_fence,): (i64,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT fence FROM \"{schema}\".payouts WHERE status = 'cancelled'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(cancelled_fence, 0, "the cancelled payout was never claimed");
    assert_eq!(
        fenced_by_b,
        PAYOUTS - 10,
        "B claimed every payout A had not confirmed, and only those"
    );
    assert_eq!(
        (entries, distinct),
        (PAYOUTS - 1, PAYOUTS - 1),
        "one ledger entry each"
    );
    assert_eq!(cents, (PAYOUTS - 1) * 7025);
    let (transfers, repeated_calls) = {
        let journal = gateway.journal();
        (journal.transfers.len(), journal.repeated_calls)
    };
    assert_eq!(transfers, (PAYOUTS - 1) as usize, "one transfer per payout");
    assert_eq!(repeated_calls, 0, "nothing sent twice");

    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE; DROP SCHEMA \"{schema}_Billing\" CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
}

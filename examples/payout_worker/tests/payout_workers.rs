//! Two payout workers on a payments team's own schema (the example's worker, as it is), one
//! stalled past its TTL in the middle of a gateway call, the whole process stopped, renewal
//! included, with the ledger in PostgreSQL and then on DynamoDB and S3. Every store is read
//! back without the library (plain SQL, raw `GetItem`/`Scan`, raw `GetObject` parsed as
//! JSON): every payout paid once, its ledger entry posted once, the stalled worker refused
//! in every store.

#[path = "../src/payouts.rs"]
#[allow(unreachable_pub)]
mod payouts;
#[path = "../src/worker.rs"]
#[allow(unreachable_pub)]
mod worker;

use std::collections::HashMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use fencing::prelude::*;
use fencing::{Error, FencedWrite, FoundFence, Result};
use fencing_core::adapter::HolderExt;
use fencing_test_support::{aws, services};
use fencing_testkit::unique_name;
use payouts::{MySqlPayouts, PayoutsDb, PgPayouts};
use sqlx::AssertSqlSafe;

const PAYOUTS: i64 = 30;

async fn redis_lease(payouts: &dyn PayoutsDb) -> Arc<dyn Lease> {
    let redis = redis::Client::open(services::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    Arc::new(RedisLease::new(redis, payouts.epochs().await.unwrap()))
}

async fn pool() -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(6)
        .connect(&services::postgres_url())
        .await
        .unwrap()
}

async fn mysql_pool() -> sqlx::MySqlPool {
    sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(6)
        .connect(&services::mysql_url())
        .await
        .unwrap()
}

/// Where the team's payouts live: a schema of this test's own in PostgreSQL, or a database of
/// its own in MySQL.
#[derive(Clone)]
enum PayoutsAt {
    Postgres(String),
    MySql(String),
}

impl PayoutsAt {
    /// The payouts, through a pool of the caller's own (connections belong to the runtime
    /// that made them).
    async fn payouts(&self) -> Box<dyn PayoutsDb> {
        match self {
            PayoutsAt::Postgres(schema) => Box::new(PgPayouts::new(pool().await, schema).unwrap()),
            PayoutsAt::MySql(database) => {
                Box::new(MySqlPayouts::new(mysql_pool().await, database).unwrap())
            }
        }
    }
}

/// The team's tables with `PAYOUTS` payouts for a merchant of this test's own, fitted for
/// fencing by the migration, the last payout cancelled before the runs: (where, merchant).
async fn queued_payouts(mysql: bool) -> (PayoutsAt, String) {
    let name = unique_name("payouts").replace('-', "_");
    let at = if mysql {
        PayoutsAt::MySql(name)
    } else {
        PayoutsAt::Postgres(name)
    };
    let payouts = at.payouts().await;
    payouts.create_tables().await.unwrap();
    payouts.migrate().await.unwrap();
    let merchant = unique_name("m_4471");
    payouts.queue(&merchant, PAYOUTS, 7025).await.unwrap();
    // Both runs leave the cancelled payout alone and go on.
    match &at {
        PayoutsAt::Postgres(schema) => {
            sqlx::raw_sql(AssertSqlSafe(format!(
                "UPDATE \"{schema}\".payouts SET status = 'cancelled' WHERE id = \
                 (SELECT id FROM \"{schema}\".payouts ORDER BY created_at DESC, id DESC LIMIT 1)"
            )))
            .execute(&pool().await)
            .await
            .unwrap();
        }
        PayoutsAt::MySql(database) => {
            sqlx::raw_sql(AssertSqlSafe(format!(
                "UPDATE `{database}`.payouts SET status = 'cancelled' \
                 ORDER BY created_at DESC, id DESC LIMIT 1"
            )))
            .execute(&mysql_pool().await)
            .await
            .unwrap();
        }
    }
    (at, merchant)
}

/// How the ledger is reached, for a worker that builds its own clients.
#[derive(Clone)]
enum LedgerAt {
    InDatabase,
    Aws { table: String, bucket: String },
}

impl LedgerAt {
    async fn ledger(&self) -> worker::Ledger {
        match self {
            LedgerAt::InDatabase => worker::Ledger::InDatabase,
            LedgerAt::Aws { table, bucket } => worker::Ledger::on_aws(
                aws::dynamodb_client(aws_sdk_dynamodb::Config::builder()),
                aws::s3_client(aws_sdk_s3::Config::builder()),
                table,
                bucket,
            )
            .await
            .unwrap(),
        }
    }
}

/// A: a worker on a thread and runtime of its own, with a pool and clients of its own, as a
/// process of its own would (connections belong to the runtime that made them). It stalls on
/// its 10th gateway call, after the gateway created the transfer and before its answer
/// returns, until `gateway.wake()` (at most a minute): its renewal stalls with it.
fn stalled_worker(
    at: &PayoutsAt,
    merchant: &str,
    gateway: &Arc<worker::Gateway>,
    ledger: &LedgerAt,
    ttl: Ttl,
) -> JoinHandle<Result<worker::Run>> {
    gateway.stall_on_call(10, Duration::from_secs(60));
    let (at, merchant, gateway, ledger) = (
        at.clone(),
        merchant.to_owned(),
        gateway.clone(),
        ledger.clone(),
    );
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let payouts = at.payouts().await;
                let lease = redis_lease(&*payouts).await;
                let ledger = ledger.ledger().await;
                worker::run(&*payouts, lease, &merchant, ttl, &gateway, &ledger).await
            })
    })
}

/// Waits until A is stalled holding the lease (its 10th transfer made).
async fn until_stalled(gateway: &worker::Gateway) {
    let started = std::time::Instant::now();
    while gateway.journal().transfers.len() < 10 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "A never reached its 10th gateway call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Checks B's run and the gateway: A made ten transfers before it stalled and confirmed
/// `a_confirmed` of them (its confirms go out side by side with its transfers); B found the
/// rest of A's ten by their keys and paid everything else, each transferred once.
fn check_runs(b: &worker::Run, gateway: &worker::Gateway, a_confirmed: i64) {
    assert!(
        a_confirmed <= 9,
        "A confirmed {a_confirmed} before it stalled"
    );
    assert_eq!(
        i64::from(b.recovered),
        10 - a_confirmed,
        "B found A's unconfirmed transfers by their keys"
    );
    assert_eq!(
        i64::from(b.paid + b.recovered),
        PAYOUTS - 1 - a_confirmed,
        "{b:?}"
    );
    assert_eq!(b.skipped, 1, "the cancelled payout");
    let journal = gateway.journal();
    assert_eq!(
        journal.transfers.len(),
        (PAYOUTS - 1) as usize,
        "one transfer per payout"
    );
    assert_eq!(journal.repeated_calls, 0, "nothing sent twice");
}

impl PayoutsAt {
    /// The payouts table by plain SQL: `(paid with a time and reference, claimed by `token`,
    /// the cancelled one's fence)`.
    async fn audit(&self, token: FencingToken) -> (i64, i64, i64) {
        match self {
            PayoutsAt::Postgres(schema) => sqlx::query_as(AssertSqlSafe(format!(
                "SELECT (SELECT count(*) FROM \"{schema}\".payouts WHERE status = 'paid' \
                   AND paid_at IS NOT NULL AND gateway_ref IS NOT NULL), \
                 (SELECT count(*) FROM \"{schema}\".payouts WHERE fence = $1), \
                 (SELECT fence FROM \"{schema}\".payouts WHERE status = 'cancelled')"
            )))
            .bind(token.as_i64())
            .fetch_one(&pool().await)
            .await
            .unwrap(),
            PayoutsAt::MySql(database) => sqlx::query_as(AssertSqlSafe(format!(
                "SELECT (SELECT COUNT(*) FROM `{database}`.payouts WHERE status = 'paid' \
                   AND paid_at IS NOT NULL AND gateway_ref IS NOT NULL), \
                 (SELECT COUNT(*) FROM `{database}`.payouts WHERE fence = ?), \
                 (SELECT COALESCE(fence, 0) FROM `{database}`.payouts \
                   WHERE status = 'cancelled')"
            )))
            .bind(token.as_i64())
            .fetch_one(&mysql_pool().await)
            .await
            .unwrap(),
        }
    }

    /// The ledger table by plain SQL: `(entries, distinct payouts, cents)`.
    async fn ledger_entries(&self) -> (i64, i64, i64) {
        match self {
            PayoutsAt::Postgres(schema) => sqlx::query_as(AssertSqlSafe(format!(
                "SELECT count(*), count(DISTINCT payout_id), \
                 COALESCE(sum(amount_cents), 0)::int8 FROM \"{schema}_Billing\".\"LedgerEntries\""
            )))
            .fetch_one(&pool().await)
            .await
            .unwrap(),
            PayoutsAt::MySql(database) => sqlx::query_as(AssertSqlSafe(format!(
                "SELECT COUNT(*), COUNT(DISTINCT payout_id), \
                 CAST(COALESCE(SUM(amount_cents), 0) AS SIGNED) FROM `{database}`.ledger_entries"
            )))
            .fetch_one(&mysql_pool().await)
            .await
            .unwrap(),
        }
    }

    async fn drop(&self) {
        match self {
            PayoutsAt::Postgres(schema) => {
                sqlx::raw_sql(AssertSqlSafe(format!(
                    "DROP SCHEMA \"{schema}\" CASCADE; DROP SCHEMA \"{schema}_Billing\" CASCADE"
                )))
                .execute(&pool().await)
                .await
                .unwrap();
            }
            PayoutsAt::MySql(database) => {
                sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE `{database}`")))
                    .execute(&mysql_pool().await)
                    .await
                    .unwrap();
            }
        }
    }
}

/// Two workers with the ledger in the payouts' own database: A stalls in its 10th gateway
/// call holding the lease, B takes over once A's TTL has run out, then A wakes. A is refused
/// (its own clock, or the payouts table's fence), every payout is paid once with one ledger
/// entry, A's stalled confirm rolled back with its entry.
async fn a_stalled_worker_is_refused_with_the_ledger_in_the_database(mysql: bool) {
    let (at, merchant) = queued_payouts(mysql).await;
    let gateway = Arc::new(worker::Gateway::default());
    let ttl = Ttl::from_millis(1500).unwrap();
    let a = stalled_worker(&at, &merchant, &gateway, &LedgerAt::InDatabase, ttl);
    // B starts once A is stalled, waits for the lease to expire, and takes over; A wakes
    // once B is done.
    until_stalled(&gateway).await;
    let payouts = at.payouts().await;
    let lease = redis_lease(&*payouts).await;
    let b = worker::run(
        &*payouts,
        lease,
        &merchant,
        ttl,
        &gateway,
        &worker::Ledger::InDatabase,
    )
    .await
    .unwrap();
    gateway.wake();
    // Woken, A sees by its own clock that its lease is over and starts nothing more; the
    // confirm of its stalled payout is refused where B wrote (B confirmed it, below).
    let err = a.join().unwrap().unwrap_err();
    assert!(
        matches!(&err, Error::LeaseLost { .. })
            || matches!(&err, Error::Fenced { store, .. } if store == "payouts"),
        "A must stop: {err:?}"
    );

    let (paid, fenced_by_b, cancelled_fence) = at.audit(b.token.unwrap()).await;
    assert_eq!(paid, PAYOUTS - 1, "every payout paid but the cancelled one");
    assert_eq!(cancelled_fence, 0, "the cancelled payout was never claimed");
    // B claimed every payout A had not confirmed, and only those.
    let a_confirmed = paid - fenced_by_b;
    check_runs(&b, &gateway, a_confirmed);
    let (entries, distinct, cents) = at.ledger_entries().await;
    assert_eq!(
        (entries, distinct),
        (PAYOUTS - 1, PAYOUTS - 1),
        "one ledger entry each, A's stalled one rolled back"
    );
    assert_eq!(cents, (PAYOUTS - 1) * 7025);
    // What the binary prints at the end says the same.
    assert_eq!(payouts.counts().await.unwrap(), (PAYOUTS - 1, PAYOUTS - 1));
    at.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stalled_past_its_ttl_is_refused_and_every_payout_is_paid_once() {
    a_stalled_worker_is_refused_with_the_ledger_in_the_database(false).await;
}

/// The same worker, unchanged, on MySQL or MariaDB: `BINARY(16)` uuid keys, its epochs there
/// too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mysql_a_worker_stalled_past_its_ttl_is_refused_and_every_payout_is_paid_once() {
    a_stalled_worker_is_refused_with_the_ledger_in_the_database(true).await;
}

/// A number attribute of a raw item.
fn number(item: &HashMap<String, AttributeValue>, name: &str) -> i64 {
    item[name].as_n().unwrap().parse().unwrap()
}

/// A string attribute of a raw item.
fn string<'a>(item: &'a HashMap<String, AttributeValue>, name: &str) -> &'a str {
    item[name].as_s().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_three_stores_a_stalled_worker_is_refused_by_each_and_paid_means_all_three_written() {
    let pool = pool().await;
    let (at, merchant) = queued_payouts(false).await;
    let PayoutsAt::Postgres(schema) = at.clone() else {
        unreachable!("PostgreSQL")
    };
    let ledger_at = LedgerAt::Aws {
        table: unique_name("ledger"),
        bucket: unique_name("receipts"),
    };
    // Created here, so that A and B each find them.
    let ledger = ledger_at.ledger().await;
    let worker::Ledger::Aws { entries, receipts } = &ledger else {
        unreachable!("an AWS ledger")
    };
    let gateway = Arc::new(worker::Gateway::default());
    let ttl = Ttl::from_millis(1500).unwrap();
    let a = stalled_worker(&at, &merchant, &gateway, &ledger_at, ttl);
    until_stalled(&gateway).await;
    let payouts = at.payouts().await;
    let lease = redis_lease(&*payouts).await;
    // Nobody but A has acquired yet: the highest token issued is A's.
    let resource = worker::resource(&merchant).unwrap();
    let a_token = lease
        .token_source()
        .current(&resource)
        .await
        .unwrap()
        .expect("A's token");
    let b = worker::run(&*payouts, lease.clone(), &merchant, ttl, &gateway, &ledger)
        .await
        .unwrap();
    gateway.wake();
    let stalled = {
        let journal = gateway.journal();
        let (key, _) = journal
            .transfers
            .iter()
            .find(|(_, (reference, _))| reference == "po_00010")
            .unwrap();
        RecordKey::new(key.as_str()).unwrap()
    };
    // A, woken, sees its lease over and starts nothing more; its stalled payout's confirm
    // writes the ledger item first, which B has written since under its own token, so
    // DynamoDB refuses A, and A never reaches the receipt or the payout's confirm.
    let err = a.join().unwrap().unwrap_err();
    let entry_key = worker::Ledger::entry_key(entries, &merchant, &stalled).unwrap();
    assert!(
        matches!(&err, Error::LeaseLost { .. })
            || matches!(&err, Error::Fenced { store, record, .. } if store == "ledger" && *record == entry_key),
        "A must stop: {err:?}"
    );
    let b_token = b.token.unwrap();
    let (paid, fenced_by_b, cancelled_fence) = at.audit(b_token).await;
    let a_confirmed = paid - fenced_by_b;
    check_runs(&b, &gateway, a_confirmed);

    // The ledger by raw Scan: one item per paid payout, A's nine under A's token.
    let items = entries
        .client()
        .scan()
        .table_name(entries.table().name())
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .items
        .unwrap();
    assert_eq!(
        items.len(),
        (PAYOUTS - 1) as usize,
        "one ledger item per payout"
    );
    let by_a: Vec<_> = items
        .iter()
        .filter(|i| number(i, "fence") != b_token.as_i64())
        .collect();
    assert_eq!(
        by_a.len() as i64,
        a_confirmed,
        "A's items are those of the payouts it confirmed before it stalled"
    );
    assert!(by_a.iter().all(|i| number(i, "fence") == a_token.as_i64()));
    assert!(a_token < b_token);

    // A's token, presented to the other two stores on the stalled payout, is refused by each.
    let a_fence = Holder::new(&resource, a_token, &lease.token_source());
    let late_receipt = FencedWrite::claim().set_payload(r#"{"payout_id":"late"}"#);
    let receipt_key = worker::Ledger::receipt_key(&merchant, &stalled).unwrap();
    let err = a_fence
        .write(&**receipts, &receipt_key, &late_receipt)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, found: FoundFence::Fence(f), .. } if store == "receipts" && *f == b_token),
        "S3 must refuse A's token: {err:?}"
    );
    let payouts = PgStore::new(pool.clone(), PgPayouts::table(&schema).unwrap());
    let err = a_fence
        .write(&payouts, &stalled, &payouts::lifecycle().confirm())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { found: FoundFence::Fence(f), .. } if *f == b_token),
        "PostgreSQL must refuse A's token: {err:?}"
    );

    // Every paid payout, by plain SQL, has its ledger item (raw GetItem by the team's key
    // names) and its receipt (raw GetObject, parsed as JSON by serde alone), each naming the
    // same transfer, under the token of the worker that confirmed it.
    let rows: Vec<(String, String, i64)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT id::text, gateway_ref, fence FROM \"{schema}\".payouts WHERE status = 'paid'"
    )))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), (PAYOUTS - 1) as usize);
    for (id, reference, fence) in &rows {
        let item = entries
            .client()
            .get_item()
            .table_name(entries.table().name())
            .key("merchant", AttributeValue::S(merchant.clone()))
            .key("payout_id", AttributeValue::S(id.clone()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        assert_eq!(string(&item, "status"), "posted");
        assert_eq!(string(&item, "gateway_ref"), reference);
        assert_eq!(number(&item, "amount_cents"), 7025);
        assert_eq!(number(&item, "fence"), *fence, "payout {id}");
        let object = receipts
            .client()
            .get_object()
            .bucket(receipts.bucket().bucket())
            .key(format!("receipts/{merchant}/{id}"))
            .send()
            .await
            .unwrap();
        let body = object.body.collect().await.unwrap().into_bytes();
        let receipt: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(receipt["payout_id"], id.as_str());
        assert_eq!(receipt["merchant"], merchant.as_str());
        assert_eq!(receipt["amount_cents"], 7025);
        assert_eq!(receipt["gateway_ref"], reference.as_str());
        assert_eq!(receipt["_fence"], *fence, "payout {id}");
        assert_eq!(receipt["_state"], "issued");
    }
    let stalled_fence = rows
        .iter()
        .find(|(id, _, _)| id == stalled.as_str())
        .map(|(_, _, fence)| *fence);
    assert_eq!(
        stalled_fence,
        Some(b_token.as_i64()),
        "B confirmed the stalled payout"
    );
    assert_eq!(paid, PAYOUTS - 1);
    assert_eq!(fenced_by_b, PAYOUTS - 1 - a_confirmed);
    assert_eq!(cancelled_fence, 0);
    let (pg_entries,): (i64,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{schema}_Billing\".\"LedgerEntries\""
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(pg_entries, 0, "the ledger lives in DynamoDB");
    at.drop().await;
}

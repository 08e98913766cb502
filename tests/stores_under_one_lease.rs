//! One Redis lease, two real stores that each check their own fence: refunds in PostgreSQL and
//! a ledger in DynamoDB. A stale holder is refused by DynamoDB, its batch aborts, and nothing
//! more reaches either store.
#![cfg(all(feature = "postgres", feature = "redis", feature = "dynamodb"))]

use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
use fencing::dynamodb::{DynamoStore, DynamoTable};
use fencing::postgres::{PgStore, PgTable, PgTokenSource, QualifiedName};
use fencing::redis::RedisLease;
use fencing::{
    Error, FencedBatch, FencedStore, FencedWrite, FencingToken, Lease, Lifecycle, RecordKey,
    ResourceName, Ttl,
};
use fencing_test_support::services;
use fencing_testkit::unique_name;
use sqlx::AssertSqlSafe;

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn dynamodb() -> aws_sdk_dynamodb::Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(services::aws_endpoint())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .http_client(http)
            .build(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_refused_by_dynamodb_sends_nothing_more_to_either_store() {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&services::postgres_url())
        .await
        .unwrap();
    let schema = unique_name("stores").replace('-', "_");
    let refunds_table = PgTable::refunds(&schema).unwrap();
    refunds_table.create_if_missing(&pool).await.unwrap();
    let refunds = Arc::new(PgStore::new(pool.clone(), refunds_table));
    let client = dynamodb();
    let ledger_table = DynamoTable::new(unique_name("ledger")).unwrap();
    ledger_table.create(&client).await.unwrap();
    let ledger = Arc::new(DynamoStore::new(client, ledger_table));

    // The lease on Redis, its epochs in PostgreSQL: a Redis restart could not reissue a token.
    let epochs = PgTokenSource::new(pool.clone(), QualifiedName::new(&schema, "epochs").unwrap());
    epochs.create_if_missing().await.unwrap();
    let redis = redis::Client::open(services::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lease: Arc<dyn Lease> = Arc::new(RedisLease::new(redis, Arc::new(epochs)));
    let resource = ResourceName::new(unique_name("settle:m_4471")).unwrap();
    let ttl = Ttl::from_millis(400).unwrap();
    let lifecycle = Lifecycle::default();
    let pending = FencedWrite::claim().set_state(lifecycle.pending().clone());
    for k in ["r_1", "r_2"] {
        refunds
            .write(&key(k), FencingToken::MIN, &pending)
            .await
            .unwrap();
    }
    let stores = || -> [Arc<dyn FencedStore>; 2] { [refunds.clone(), ledger.clone()] };
    let (refunds_name, ledger_name) = (refunds.name().to_owned(), ledger.name().to_owned());

    // A claims r_1 and its ledger entry, then stalls past its TTL.
    let a = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    let a_token = a.token();
    let batch_a = FencedBatch::new(lease.clone(), a, stores()).unwrap();
    batch_a
        .write(&refunds_name, &key("r_1"), &lifecycle.claim())
        .await
        .unwrap();
    batch_a
        .write(&ledger_name, &key("l_1"), &FencedWrite::claim())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;

    // B takes over, and takes over A's ledger entry.
    let b = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    assert!(b.token() > a_token);
    let batch_b = FencedBatch::new(lease.clone(), b, stores()).unwrap();
    batch_b
        .write(&ledger_name, &key("l_1"), &FencedWrite::claim())
        .await
        .unwrap();

    // A wakes: DynamoDB refuses its ledger write, and the batch sends nothing more anywhere.
    let err = batch_a
        .write(
            &ledger_name,
            &key("l_1"),
            &FencedWrite::holder_only().set_payload(b"7025".to_vec()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, .. } if *store == ledger_name),
        "{err:?}"
    );
    for (store, k) in [(&refunds_name, "r_2"), (&ledger_name, "l_2")] {
        let err = batch_a
            .write(store, &key(k), &lifecycle.claim())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    }
    let r_2 = refunds.read(&key("r_2")).await.unwrap().unwrap();
    assert_eq!(r_2.fence, Some(FencingToken::MIN), "r_2 untouched");
    assert_eq!(
        ledger.read(&key("l_2")).await.unwrap(),
        None,
        "l_2 never written"
    );
    let l_1 = ledger.read(&key("l_1")).await.unwrap().unwrap();
    assert!(l_1.payload.is_empty(), "A's refused payload is not there");
    assert!(batch_a.finish().await.is_err());
    batch_b.finish().await.unwrap();

    sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE")))
        .execute(&pool)
        .await
        .unwrap();
}

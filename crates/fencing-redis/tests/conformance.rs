//! The shared conformance suite against real Redis: a multiplexed connection, a
//! `ConnectionManager`, and `Box<dyn …>` of the lease.

use std::sync::Arc;

use fencing_core::{FencedStore, Lease, MemoryStore, MemoryTokenSource, TokenSource};
use fencing_redis::{RedisKeys, RedisLease, RedisTokenSource};
use fencing_test_support::services;
use fencing_testkit::conformance::*;
use fencing_testkit::{Fencing, unique_name};
use redis::aio::{ConnectionManager, MultiplexedConnection};

async fn multiplexed() -> MultiplexedConnection {
    let url = services::redis_url();
    redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to Redis at {url}: {e}"))
}

async fn manager() -> ConnectionManager {
    let url = services::redis_url();
    ConnectionManager::new(redis::Client::open(url.as_str()).unwrap())
        .await
        .unwrap_or_else(|e| panic!("connect to Redis at {url}: {e}"))
}

/// Keys of this test only, so tests sharing a server never meet: `<run>:lock:` and
/// `<run>:fence:`.
fn keys_of(run: &str) -> RedisKeys {
    RedisKeys::new(format!("{run}:lock:"), format!("{run}:fence:")).unwrap()
}

fn keys() -> RedisKeys {
    keys_of(&unique_name("t"))
}

/// The durable epoch source: it outlives whatever this test does to Redis.
fn epochs() -> Arc<dyn TokenSource> {
    Arc::new(MemoryTokenSource::new())
}

/// Deletes every key of this test's run, as a restart without persistence does to them.
async fn lose_keys_of(conn: &MultiplexedConnection, run: &str) {
    let mut conn = conn.clone();
    let found: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{run}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!found.is_empty(), "no key under {run}:");
    let _: () = redis::cmd("DEL")
        .arg(found)
        .query_async(&mut conn)
        .await
        .unwrap();
}

/// One test per guarantee and form, each under keys of its own.
mod multiplexed_connection {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: RedisLease::new(multiplexed().await, epochs()).with_keys(keys()),
        caps: Capabilities::real_server().without_braces(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        subject: RedisTokenSource::new(multiplexed().await, epochs()).with_keys(keys()),
        caps: Capabilities::real_server(),
    }
}

mod connection_manager {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: RedisLease::new(manager().await, epochs()).with_keys(keys()),
        caps: Capabilities::real_server().without_braces(),
    }
}

mod as_dyn {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Box::new(RedisLease::new(multiplexed().await, epochs()).with_keys(keys()))
            as Box<dyn Lease>,
        caps: Capabilities::real_server().without_braces(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        subject: Arc::new(RedisTokenSource::new(multiplexed().await, epochs()).with_keys(keys()))
            as Arc<dyn TokenSource>,
        caps: Capabilities::real_server(),
    }
}

/// Counters that start again at 1 when Redis loses them still rise while they last.
mod reissuing {
    use super::*;

    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        subject: RedisTokenSource::may_reissue_tokens(multiplexed().await).with_keys(keys()),
        caps: Capabilities::real_server(),
    }
}

#[tokio::test]
async fn paused_holder_is_fenced_by_the_store() {
    let lease = RedisLease::new(multiplexed().await, epochs()).with_keys(keys());
    let store = MemoryStore::new("refunds");
    paused_holder_is_fenced(&lease, &store, Capabilities::real_server().without_braces()).await;
}

#[tokio::test]
async fn token_regression_is_detected_and_repaired() {
    let run = unique_name("t");
    let lease = RedisLease::may_reissue_tokens(multiplexed().await).with_keys(keys_of(&run));
    let store = MemoryStore::new("refunds");
    let conn = multiplexed().await;
    token_regression_is_detected(
        &lease,
        &store,
        &store,
        Capabilities::real_server().without_braces(),
        async || lose_keys_of(&conn, &run).await,
    )
    .await;
}

#[tokio::test]
async fn no_token_is_reissued_after_the_counter_is_lost() {
    let run = unique_name("t");
    let conn = multiplexed().await;
    let lease = RedisLease::new(conn.clone(), epochs()).with_keys(keys_of(&run));
    let store = MemoryStore::new("refunds");
    no_token_is_reissued_after_counter_loss(
        &lease,
        &store,
        Capabilities::real_server().without_braces(),
        async || lose_keys_of(&conn, &run).await,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_increments_are_exact() {
    let lease = RedisLease::new(multiplexed().await, epochs()).with_keys(keys());
    let store: Arc<dyn FencedStore> = Arc::new(MemoryStore::new("counter"));
    let report = fenced_increments(
        Arc::new(lease),
        store,
        Capabilities::real_server().without_braces(),
        4,
        5,
        Fencing::On,
        3,
    )
    .await;
    assert_eq!(report.total, report.expected, "{report:?}");
}

//! The shared conformance suite against real Redis: a multiplexed connection, a
//! `ConnectionManager`, and `Box<dyn …>` of the lease.

use std::sync::Arc;

use fencing_core::{
    EpochSource, FencedStore, Lease, MemoryEpochSource, MemoryStore, ResourceName, TokenSource,
};
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
fn epochs() -> Arc<dyn EpochSource> {
    Arc::new(MemoryEpochSource::new())
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

#[tokio::test]
async fn a_used_up_epoch_is_followed_by_one_the_durable_source_opened() {
    let run = unique_name("t");
    let keys = keys_of(&run);
    let mut conn = multiplexed().await;
    let epochs = Arc::new(MemoryEpochSource::new());
    let source = RedisTokenSource::new(conn.clone(), epochs.clone()).with_keys(keys.clone());
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let first = source.next(&resource).await.unwrap();
    let epoch = first.get() >> 32;
    assert_eq!(
        epochs.current(&resource).await.unwrap().map(|e| e.get()),
        Some(epoch)
    );

    // The counter at its epoch's last token: one more INCR would step into the next epoch
    // without the durable source knowing it was opened.
    let last_of_epoch = (epoch << 32) | 0xFFFF_FFFF;
    let _: () = redis::cmd("SET")
        .arg(keys.token_key(&resource).unwrap())
        .arg(last_of_epoch.to_string())
        .query_async(&mut conn)
        .await
        .unwrap();
    let next = source.next(&resource).await.unwrap();
    assert!(next.get() > last_of_epoch, "{next:?}");
    assert_eq!(
        epochs.current(&resource).await.unwrap().map(|e| e.get()),
        Some(next.get() >> 32),
        "the token {next:?} is in an epoch the durable source did not open"
    );
}

#[tokio::test]
async fn a_source_and_a_lease_show_their_keys_and_describe_themselves() {
    let keys = keys();
    let conn = multiplexed().await;
    let source = RedisTokenSource::new(conn.clone(), epochs()).with_keys(keys.clone());
    assert_eq!(source.keys(), &keys);
    assert!(
        format!("{source:?}").starts_with("RedisTokenSource {"),
        "{source:?}"
    );
    let lease = RedisLease::new(conn, epochs()).with_keys(keys.clone());
    assert_eq!(lease.token_source().keys(), &keys);
    let shown = format!("{lease:?}");
    assert!(
        shown.starts_with("RedisLease { tokens: RedisTokenSource {"),
        "{shown}"
    );
}

#[tokio::test]
async fn the_acquire_script_is_in_the_servers_cache_under_the_hash_the_lease_gives() {
    let mut conn = multiplexed().await;
    let lease = RedisLease::new(conn.clone(), epochs()).with_keys(keys());
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let guard = lease
        .try_acquire(&resource, fencing_core::Ttl::from_secs(5).unwrap())
        .await
        .unwrap()
        .expect("free");
    let hash = lease.acquire_script_hash();
    assert_eq!(hash.len(), 40, "{hash:?} is not a SHA1");
    let cached: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(hash)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(cached, [true]);
    lease.release(guard).await.unwrap();
}

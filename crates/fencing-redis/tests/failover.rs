//! Failovers and restores of the deployments teams run, on real servers started here: a
//! Sentinel-managed primary whose replica is promoted behind the counter, a Redis restarted
//! from an older snapshot, a replica given by mistake, a server that hides its identity. The
//! counter is bound to the server history that established it; on any other, epoch-prefixed
//! tokens open a new epoch from the durable source first, so no token is issued twice.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::{
    Error, Fence, FencedStore, FencedWrite, FencingToken, Lease, LeaseGuard, Lifecycle,
    MemoryStore, MemoryTokenSource, RecordKey, ResourceName, TokenSource, Ttl,
};
use fencing_redis::{RedisKeys, RedisLease, SentinelConnection};
use fencing_test_support::services::{RedisSentinels, RedisServer, redis_cli};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelServerType};

/// The durable epoch source, outside every Redis these tests fail over or restore.
fn epochs() -> Arc<dyn TokenSource> {
    Arc::new(MemoryTokenSource::new())
}

fn resource() -> ResourceName {
    ResourceName::new("settle:m_4471").unwrap()
}

fn ttl() -> Ttl {
    Ttl::from_secs(2).unwrap()
}

async fn multiplexed(server: &RedisServer) -> MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Acquires `resource` through failures and a lease still held, for up to 30 s.
async fn acquire_through<C>(lease: &RedisLease<C>) -> LeaseGuard
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let started = std::time::Instant::now();
    loop {
        match lease.try_acquire(&resource(), ttl()).await {
            Ok(Some(guard)) => return guard,
            Ok(None) | Err(_) if started.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => panic!("no acquisition after 30 s: {other:?}"),
        }
    }
}

/// Waits until `replica` has every write of its primary.
fn caught_up(primary: &RedisServer) {
    let acked = redis_cli(primary.port(), &["WAIT", "1", "5000"]).unwrap_or_default();
    assert_eq!(acked.trim(), "1", "the replica acknowledged the writes");
}

/// The failover the issue reproduced: counter replicated, replica stopped and its link dropped
/// (a stop alone is not enough: the kernel buffers the stream and the replica catches up on
/// waking), tokens issued on the primary only, primary killed, replica resumed and promoted by
/// the sentinels. Holder A's token was issued on the lost history and A has written nothing;
/// holder B acquires through Sentinel and must get a token above every token issued before,
/// and A's claim and confirm are refused where B wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_promoted_behind_the_counter_never_reissues_a_token() {
    let primary = RedisServer::start(&[]);
    let port = primary.port().to_string();
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &port]);
    let sentinels = RedisSentinels::start(primary.port(), 3, 2, "fencing");
    sentinels
        .wait_for_replicas(1, Duration::from_secs(30))
        .unwrap();
    let epochs = epochs();
    let direct = RedisLease::new(multiplexed(&primary).await, epochs.clone());
    // A `String`, which both forms of `build` take (its argument's type depends on the
    // redis crate's TLS features).
    let service: String = sentinels.service().into();
    let sentinel_client =
        SentinelClient::build(sentinels.urls(), service, None, SentinelServerType::Master).unwrap();
    let through_sentinel = RedisLease::new(SentinelConnection::new(sentinel_client, 0), epochs);

    let mut issued = BTreeSet::new();
    for _ in 0..5 {
        let guard = acquire_through(&through_sentinel).await;
        issued.insert(guard.token());
        through_sentinel.release(guard).await.unwrap();
    }
    caught_up(&primary);
    replica.pause();
    redis_cli(primary.port(), &["CLIENT", "KILL", "TYPE", "replica"]).unwrap();
    // Tokens the replica never receives; A keeps the last and writes nothing.
    let mut a = None;
    for _ in 0..2 {
        if let Some(held) = a.take() {
            direct.release(held).await.unwrap();
        }
        let guard = acquire_through(&direct).await;
        issued.insert(guard.token());
        a = Some(guard);
    }
    let a = a.unwrap();
    assert_eq!(
        issued.len(),
        7,
        "no token twice before the failover: {issued:?}"
    );
    primary.kill();
    replica.resume();
    sentinels
        .wait_for_primary(|p| p == Some(replica.port()), Duration::from_secs(60))
        .unwrap();

    // An operator sees the counter bound to the lost history before anyone acquires. (The
    // first request meets the dead primary's connection and fails; the next follows the
    // sentinels.)
    let mut history = through_sentinel.tokens().history(&resource()).await;
    for _ in 0..50 {
        if history.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        history = through_sentinel.tokens().history(&resource()).await;
    }
    let history = history.unwrap();
    assert!(history.moved(), "{history:?}");
    let b = acquire_through(&through_sentinel).await;
    let history = through_sentinel
        .tokens()
        .history(&resource())
        .await
        .unwrap();
    assert!(!history.moved(), "rebound by the acquisition: {history:?}");
    assert!(
        b.token() > *issued.last().unwrap(),
        "token {} after the failover is not above every token issued before, {issued:?}",
        b.token()
    );
    assert!(issued.insert(b.token()), "issued twice: {}", b.token());
    // Tokens go on rising on the new primary without another epoch.
    through_sentinel.release(b.clone()).await.unwrap();
    let c = acquire_through(&through_sentinel).await;
    assert_eq!(c.token().get(), b.token().get() + 1);
    assert!(issued.insert(c.token()));

    // Where the new holder wrote, the holder of the lost history is refused.
    let store = MemoryStore::new("refunds");
    let lifecycle = Lifecycle::default();
    let key = RecordKey::new("r_815").unwrap();
    store
        .write(
            &key,
            FencingToken::MIN,
            &FencedWrite::claim().set_state(lifecycle.pending().clone()),
        )
        .await
        .unwrap();
    Fence::of_guard(&c, through_sentinel.token_source())
        .write(&store, &key, &lifecycle.claim())
        .await
        .unwrap();
    let r = resource();
    let stale = Fence::new(&r, a.token(), through_sentinel.token_source());
    for write in [lifecycle.claim(), lifecycle.confirm()] {
        let err = stale.write(&store, &key, &write).await.unwrap_err();
        assert!(err.is_rejection(), "{:?}: {err:?}", write.check());
    }
}

/// A Redis restarted from a snapshot taken before its last tokens were issued: the counter
/// is present but behind, bound to the process that wrote it; the next token opens a new
/// epoch above every token issued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_from_an_older_snapshot_never_reissues_a_token() {
    let mut server = RedisServer::start(&[]);
    let epochs = epochs();
    let lease = RedisLease::new(multiplexed(&server).await, epochs.clone());
    let mut issued = BTreeSet::new();
    let first = acquire_through(&lease).await;
    issued.insert(first.token());
    lease.release(first).await.unwrap();
    redis_cli(server.port(), &["SAVE"]).unwrap();
    for _ in 0..3 {
        let guard = acquire_through(&lease).await;
        issued.insert(guard.token());
        lease.release(guard).await.unwrap();
    }
    // Killed, then started on the snapshot.
    server.restart();
    let counter = RedisKeys::default().counter_key(&resource()).unwrap();
    let restored = redis_cli(server.port(), &["GET", &counter]).unwrap();
    assert_eq!(
        restored.trim(),
        issued.first().unwrap().to_string(),
        "the snapshot's counter is back"
    );
    let lease = RedisLease::new(multiplexed(&server).await, epochs);
    let next = acquire_through(&lease).await;
    assert!(
        next.token() > *issued.last().unwrap(),
        "token {} after the restore is not above {issued:?}",
        next.token()
    );
}

/// A connection to a replica given by mistake, and a server that will not tell a script its
/// identity (INFO renamed away, as some managed services do): each is a typed error saying
/// what to do, and nothing is issued or locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn where_the_history_cannot_be_read_nothing_is_issued() {
    let primary = RedisServer::start(&[]);
    let port = primary.port().to_string();
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &port]);
    let hidden = RedisServer::start(&["--rename-command", "INFO", ""]);
    let lock = RedisKeys::default().lock_key(&resource()).unwrap();
    for (server, says) in [(&replica, "replica"), (&hidden, "INFO")] {
        let lease = RedisLease::new(multiplexed(server).await, epochs());
        let err = lease.try_acquire(&resource(), ttl()).await.unwrap_err();
        assert!(matches!(err, Error::Backend { .. }), "{err:?}");
        assert!(err.to_string().contains(says), "{err}");
        assert!(
            lease.token_source().next(&resource()).await.is_err(),
            "nor through the token source"
        );
        let locked = redis_cli(server.port(), &["EXISTS", &lock]).unwrap();
        assert_eq!(locked.trim(), "0", "nothing locked");
    }
    // The weaker mode, chosen by name, needs no identity.
    let lease = RedisLease::may_reissue_tokens(multiplexed(&hidden).await);
    assert!(
        lease
            .try_acquire(&resource(), ttl())
            .await
            .unwrap()
            .is_some()
    );
}

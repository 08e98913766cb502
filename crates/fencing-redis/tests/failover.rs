//! Failovers and restores of the deployments teams run, on real servers started here: a
//! Sentinel-managed primary whose replica is promoted behind the counter, a Redis restarted
//! from an older snapshot, a replica given by mistake, a server that hides its identity. The
//! counter is bound to the server history that established it; on any other, epoch-prefixed
//! tokens open a new epoch from the durable source first, so no token is issued twice.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencing_core::{
    EpochSource, Failure, Lease, LeaseGuard, MemoryEpochSource, ResourceName, TokenSource, Ttl,
};
use fencing_redis::{RedisKeys, RedisLease, RedisSentinelConnection, RedisTokenSource};
use fencing_test_support::services::{RedisSentinels, RedisServer, redis_cli};
use fencing_testkit::conformance::{
    Capabilities, ServedFromBehind, a_counter_served_from_behind_never_reissues,
    a_lease_served_from_behind_never_reissues, acquire_through_failures, assert_fails,
    through_failures,
};
use redis::aio::{ConnectionManager, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelServerType};

/// The durable epoch source, outside every Redis these tests fail over or restore.
fn epochs() -> Arc<dyn EpochSource> {
    Arc::new(MemoryEpochSource::new())
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

/// Acquires `resource` through failures and a lease still held.
async fn acquire_through(lease: &dyn Lease) -> LeaseGuard {
    acquire_through_failures(lease, &resource(), ttl()).await
}

/// Waits until the replica has every write of its primary. Asked again while it is still in
/// its first sync (which on a loaded machine can outlast one `WAIT`), for up to a minute.
fn caught_up(primary: &RedisServer) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let acked = redis_cli(primary.port(), &["WAIT", "1", "2000"]).unwrap_or_default();
        if acked.trim() == "1" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replica acknowledged no write in a minute (last answer {acked:?})"
        );
    }
}

/// The failover the issue reproduced, seen by an operator: tokens issued through Sentinel, the
/// replica lagging, more issued on the primary alone, the primary killed and the replica
/// promoted. Before anyone acquires, the counter's history shows it bound to the lost
/// server; the next acquisition rebinds it above every token issued before, and tokens go on
/// by one from there without another epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_the_counter_bound_to_the_lost_primary_until_the_next_acquisition() {
    let mut failover = SentinelFailover::start();
    let through_sentinel = RedisLease::new(failover.connection(), epochs());
    let mut issued = BTreeSet::new();
    let mut take_and_release = async || {
        let guard = acquire_through(&through_sentinel).await;
        issued.insert(guard.token());
        through_sentinel.release(guard).await.unwrap();
    };
    for _ in 0..3 {
        take_and_release().await;
    }
    failover.keep_a_copy().await;
    for _ in 0..2 {
        take_and_release().await;
    }
    assert_eq!(issued.len(), 5, "{issued:?}");
    failover.serve_the_copy().await;

    // The first request meets the dead primary's connection and fails; the next follows the
    // sentinels.
    let history =
        through_failures(async || through_sentinel.token_source().history(&resource()).await).await;
    assert!(history.moved(), "{history:?}");
    let b = acquire_through(&through_sentinel).await;
    let history = through_sentinel
        .token_source()
        .history(&resource())
        .await
        .unwrap();
    assert!(!history.moved(), "rebound by the acquisition: {history:?}");
    assert!(
        b.token() > *issued.last().unwrap(),
        "token {} after the failover is not above every token issued before, {issued:?}",
        b.token()
    );
    through_sentinel.release(b.clone()).await.unwrap();
    let c = acquire_through(&through_sentinel).await;
    assert_eq!(c.token().get(), b.token().get() + 1);
}

/// A Redis restarted from a snapshot: the copy is a `SAVE`, the event a kill and a start on
/// it, at the same port.
struct RestartFromSnapshot(RedisServer);

#[async_trait]
impl ServedFromBehind for RestartFromSnapshot {
    async fn keep_a_copy(&mut self) {
        redis_cli(self.0.port(), &["SAVE"]).unwrap();
    }

    async fn serve_the_copy(&mut self) {
        self.0.restart();
    }
}

/// A Sentinel-managed primary and its replica: the copy is the replica, stopped once caught
/// up and its link dropped (a stop alone is not enough: the kernel buffers the stream and the
/// replica catches up on waking); the event the primary killed and the replica promoted by
/// the sentinels.
struct SentinelFailover {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: RedisSentinels,
}

impl SentinelFailover {
    fn start() -> Self {
        let primary = RedisServer::start(&[]);
        let port = primary.port().to_string();
        let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &port]);
        let sentinels = RedisSentinels::start(primary.port(), 3, 2, "fencing");
        sentinels
            .wait_for_replicas(1, Duration::from_secs(30))
            .unwrap();
        SentinelFailover {
            primary,
            replica,
            sentinels,
        }
    }

    /// A connection that follows the sentinels to whichever server is the primary.
    fn connection(&self) -> RedisSentinelConnection {
        // A `String`, which both forms of `build` take (its argument's type depends on the
        // redis crate's TLS features).
        let service: String = self.sentinels.service().into();
        let client = SentinelClient::build(
            self.sentinels.urls(),
            service,
            None,
            SentinelServerType::Master,
        )
        .unwrap();
        RedisSentinelConnection::new(client, 0)
    }
}

#[async_trait]
impl ServedFromBehind for SentinelFailover {
    async fn keep_a_copy(&mut self) {
        caught_up(&self.primary);
        self.replica.pause();
        redis_cli(self.primary.port(), &["CLIENT", "KILL", "TYPE", "replica"]).unwrap();
    }

    async fn serve_the_copy(&mut self) {
        self.primary.kill();
        self.replica.resume();
        let promoted = self.replica.port();
        self.sentinels
            .wait_for_primary(|p| p == Some(promoted), Duration::from_secs(60))
            .unwrap();
    }
}

async fn managed(server: &RedisServer) -> ConnectionManager {
    ConnectionManager::new(redis::Client::open(server.url()).unwrap())
        .await
        .unwrap()
}

/// The shared guarantee on a Redis restarted from an older snapshot, for the token source and
/// the lease; and, as the control, the weaker mode chosen by name reissues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_from_an_older_snapshot_never_reissues_a_token() {
    let mut restart = RestartFromSnapshot(RedisServer::start(&[]));
    let source = RedisTokenSource::new(managed(&restart.0).await, epochs());
    a_counter_served_from_behind_never_reissues(&source, &mut restart).await;

    let mut restart = RestartFromSnapshot(RedisServer::start(&[]));
    let lease = RedisLease::new(managed(&restart.0).await, epochs());
    a_lease_served_from_behind_never_reissues(&lease, &mut restart, Capabilities::real_server())
        .await;

    let mut restart = RestartFromSnapshot(RedisServer::start(&[]));
    let unchecked = RedisTokenSource::may_reissue_tokens(managed(&restart.0).await);
    assert_fails(async move {
        a_counter_served_from_behind_never_reissues(&unchecked, &mut restart).await
    })
    .await;
}

/// The shared guarantee through Sentinel, for the token source and the lease; the control as
/// above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_promoted_by_sentinel_serves_no_token_twice_to_the_shared_suite() {
    let mut failover = SentinelFailover::start();
    let source = RedisTokenSource::new(failover.connection(), epochs());
    a_counter_served_from_behind_never_reissues(&source, &mut failover).await;

    let mut failover = SentinelFailover::start();
    let lease = RedisLease::new(failover.connection(), epochs());
    a_lease_served_from_behind_never_reissues(&lease, &mut failover, Capabilities::real_server())
        .await;

    let mut failover = SentinelFailover::start();
    let unchecked = RedisTokenSource::may_reissue_tokens(failover.connection());
    assert_fails(async move {
        a_counter_served_from_behind_never_reissues(&unchecked, &mut failover).await
    })
    .await;
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
    for (server, says, meaning) in [
        (&replica, "replica", Failure::Unavailable),
        (&hidden, "INFO", Failure::NotSupported),
    ] {
        let lease = RedisLease::new(multiplexed(server).await, epochs());
        let err = lease.try_acquire(&resource(), ttl()).await.unwrap_err();
        assert_eq!(err.failure(), Some(meaning), "{err:?}");
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

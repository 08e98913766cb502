//! The library's default lease, Redis with its epochs in PostgreSQL or in MariaDB, when
//! sixteen workers find one loss of the counter at once, again and again, and when the epochs'
//! database fails over to a replica that missed the last epochs: one epoch per loss, and no
//! token issued twice or below one issued before it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fencing::mysql::{MySqlEpochSource, MySqlQualifiedName};
use fencing::postgres::{PgEpochSource, PgQualifiedName};
use fencing::redis::RedisLease;
use fencing::{EpochSource, FencingToken, Lease, ResourceName, Ttl, async_trait};
use fencing_test_support::relay::Relay;
use fencing_test_support::services::{LocalMariaDb, LocalPostgres, RedisServer};
use redis::aio::ConnectionManager;
use sqlx::{MySqlPool, PgPool};

const WORKERS: usize = 16;

/// Where a Redis lease's epochs live, and what a failover does to them.
#[async_trait]
trait EpochsDeployment: Send {
    /// An epoch source on the deployment as it now answers.
    fn epochs(&self) -> Arc<dyn EpochSource>;
    /// From now on the replica misses what the primary writes.
    async fn lag(&mut self);
    /// The primary dies; the replica is promoted and answers at the deployment's address.
    async fn fail_over(&mut self);
}

/// PostgreSQL: a primary and its streaming standby, promoted at the primary's port.
struct Postgres {
    primary: LocalPostgres,
    standby: LocalPostgres,
    pool: PgPool,
}

impl Postgres {
    async fn start() -> Self {
        let primary = LocalPostgres::primary();
        let pool = PgPool::connect(&primary.url("test")).await.unwrap();
        let deployment = Postgres {
            standby: LocalPostgres::standby_of(&primary),
            primary,
            pool,
        };
        deployment.pg_epochs().create_if_missing().await.unwrap();
        deployment
    }

    fn pg_epochs(&self) -> PgEpochSource {
        PgEpochSource::new(
            self.pool.clone(),
            PgQualifiedName::new("public", "epochs").unwrap(),
        )
    }
}

#[async_trait]
impl EpochsDeployment for Postgres {
    fn epochs(&self) -> Arc<dyn EpochSource> {
        Arc::new(self.pg_epochs())
    }

    async fn lag(&mut self) {
        self.standby
            .catch_up_with(&self.primary, Duration::from_secs(30))
            .unwrap();
        self.standby.kill();
    }

    async fn fail_over(&mut self) {
        self.pool.close().await;
        self.primary.kill();
        self.standby.take_over_port_of(&self.primary);
        self.standby.start();
        self.standby.promote();
        self.pool = PgPool::connect(&self.standby.url("test")).await.unwrap();
    }
}

/// MariaDB: a primary and its asynchronous replica behind the deployment's address.
struct MariaDb {
    primary: LocalMariaDb,
    replica: LocalMariaDb,
    relay: Relay,
    pool: MySqlPool,
}

impl MariaDb {
    async fn start() -> Self {
        let primary = LocalMariaDb::primary();
        let replica = LocalMariaDb::replica_of(&primary);
        let relay = Relay::start(primary.port()).unwrap();
        let url = format!("mysql://root@127.0.0.1:{}/test", relay.port());
        let deployment = MariaDb {
            pool: MySqlPool::connect(&url).await.unwrap(),
            primary,
            replica,
            relay,
        };
        deployment.mysql_epochs().create_if_missing().await.unwrap();
        deployment
    }

    fn mysql_epochs(&self) -> MySqlEpochSource {
        MySqlEpochSource::new(
            self.pool.clone(),
            MySqlQualifiedName::new("test", "epochs").unwrap(),
        )
    }
}

#[async_trait]
impl EpochsDeployment for MariaDb {
    fn epochs(&self) -> Arc<dyn EpochSource> {
        Arc::new(self.mysql_epochs())
    }

    async fn lag(&mut self) {
        self.replica
            .catch_up_with(&self.primary, Duration::from_secs(30))
            .unwrap();
        self.replica.stop_replicating();
    }

    async fn fail_over(&mut self) {
        self.primary.kill();
        self.replica.promote();
        self.relay.move_to(self.replica.port());
    }
}

/// Sixteen workers, each with a lease of its own on one Redis, acquire the resource at once,
/// each until it gets it (and releases it at once). Returns the tokens issued.
async fn race(
    redis: &ConnectionManager,
    epochs: &dyn Fn() -> Arc<dyn EpochSource>,
    r: &ResourceName,
) -> Vec<FencingToken> {
    let ttl = Ttl::from_millis(500).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WORKERS {
        let lease = RedisLease::new(redis.clone(), epochs());
        let r = r.clone();
        tasks.spawn(async move {
            for _ in 0..2000 {
                match lease.try_acquire(&r, ttl).await {
                    Ok(Some(guard)) => {
                        let token = guard.token();
                        lease.release(guard).await.unwrap();
                        return token;
                    }
                    // Held by another worker, or Redis (or the epochs) still coming back.
                    Ok(None) | Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
            panic!("never acquired {r}");
        });
    }
    tasks.join_all().await
}

/// The epoch of a token.
fn epoch(token: FencingToken) -> u64 {
    token.get() >> 32
}

/// Redis restarted again and again under sixteen workers: one epoch per loss; then the
/// epochs' database fails over to a replica that missed the last two epochs and a resource's
/// first: every token after is above every token before, none issued twice.
async fn one_epoch_per_loss_and_nothing_reissued_across_a_failover(
    deployment: &mut dyn EpochsDeployment,
) {
    let mut redis_server = RedisServer::start(&[]);
    let client = redis::Client::open(redis_server.url()).unwrap();
    let redis = ConnectionManager::new(client).await.unwrap();
    let r = ResourceName::new("settle:m_4471").unwrap();

    let mut issued: Vec<FencingToken> = Vec::new();
    let mut check = |round: &str, tokens: Vec<FencingToken>| {
        let highest = issued.iter().max().copied();
        for token in &tokens {
            assert!(
                highest.is_none_or(|h| *token > h),
                "{round}: {token} is not above {highest:?}, issued before"
            );
        }
        let epochs: BTreeSet<u64> = tokens.iter().map(|t| epoch(*t)).collect();
        issued.extend(tokens);
        let distinct: BTreeSet<_> = issued.iter().collect();
        assert_eq!(
            distinct.len(),
            issued.len(),
            "{round}: a token issued twice"
        );
        epochs
    };
    // Each restart of Redis loses the counter: every worker finds the loss, one epoch opens.
    let epochs = || deployment.epochs();
    let first = race(&redis, &epochs, &r).await;
    assert_eq!(
        check("first", first).len(),
        1,
        "one epoch for the first loss"
    );
    for restart in 1..=2 {
        redis_server.restart();
        let tokens = race(&redis, &epochs, &r).await;
        let opened = check(&format!("restart {restart}"), tokens);
        assert_eq!(
            opened.len(),
            1,
            "restart {restart}: one epoch, got {opened:?}"
        );
    }
    let before_lag = deployment.epochs().current(&r).await.unwrap().unwrap();
    assert_eq!(before_lag.get(), 3, "three losses, three epochs");

    // The replica stops receiving, two more losses open two epochs on the primary alone, and
    // a resource first used now has its epochs' row on the primary alone.
    deployment.lag().await;
    let epochs = || deployment.epochs();
    for restart in 3..=4 {
        redis_server.restart();
        let tokens = race(&redis, &epochs, &r).await;
        check(&format!("restart {restart}, lost with the primary"), tokens);
    }
    let fresh = ResourceName::new("settle:m_9000").unwrap();
    let fresh_before = race(&redis, &epochs, &fresh).await;
    deployment.fail_over().await;
    let epochs = || deployment.epochs();
    // Each further loss opens an epoch above every one the lost primary opened.
    for restart in 5..=6 {
        redis_server.restart();
        let tokens = race(&redis, &epochs, &r).await;
        let opened = check(&format!("restart {restart}, after the failover"), tokens);
        assert_eq!(
            opened.len(),
            1,
            "restart {restart}: one epoch, got {opened:?}"
        );
    }
    // The fresh resource's counter is gone with the last restart, its epochs' row with the
    // primary: its next epoch still lies above the one the lost primary opened.
    let highest = fresh_before.iter().max().copied().unwrap();
    for token in race(&redis, &epochs, &fresh).await {
        assert!(
            token > highest,
            "{fresh}: {token} after the failover is not above {highest}, issued before"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_workers_open_one_epoch_per_loss_and_a_failover_of_the_epochs_reissues_nothing() {
    let mut deployment = Postgres::start().await;
    one_epoch_per_loss_and_nothing_reissued_across_a_failover(&mut deployment).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_epochs_in_mariadb_one_epoch_per_loss_and_a_failover_reissues_nothing() {
    let mut deployment = MariaDb::start().await;
    one_epoch_per_loss_and_nothing_reissued_across_a_failover(&mut deployment).await;
}

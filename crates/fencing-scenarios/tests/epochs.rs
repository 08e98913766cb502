//! The library's default lease, Redis with its epochs in PostgreSQL, when sixteen workers find
//! one loss of the counter at once, again and again, and when the epochs' database fails over
//! to a standby that missed the last epochs: one epoch per loss, and no token issued twice or
//! below one issued before it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fencing::postgres::{PgEpochSource, PgQualifiedName};
use fencing::redis::RedisLease;
use fencing::{EpochSource, FencingToken, Lease, ResourceName, Ttl};
use fencing_test_support::services::{LocalPostgres, RedisServer};
use redis::aio::ConnectionManager;
use sqlx::PgPool;

const WORKERS: usize = 16;

fn epochs(pool: &PgPool) -> PgEpochSource {
    PgEpochSource::new(
        pool.clone(),
        PgQualifiedName::new("public", "epochs").unwrap(),
    )
}

async fn pool(server: &LocalPostgres) -> PgPool {
    PgPool::connect(&server.url("test")).await.unwrap()
}

/// Sixteen workers, each with a lease of its own on one Redis, acquire the resource at once,
/// each until it gets it (and releases it at once). Returns the tokens issued.
async fn race(redis: &ConnectionManager, pool: &PgPool, r: &ResourceName) -> Vec<FencingToken> {
    let ttl = Ttl::from_millis(500).unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WORKERS {
        let lease = RedisLease::new(redis.clone(), Arc::new(epochs(pool)));
        let r = r.clone();
        tasks.spawn(async move {
            for _ in 0..2000 {
                match lease.try_acquire(&r, ttl).await {
                    Ok(Some(guard)) => {
                        let token = guard.token();
                        lease.release(guard).await.unwrap();
                        return token;
                    }
                    // Held by another worker, or Redis still coming back.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_workers_open_one_epoch_per_loss_and_a_failover_of_the_epochs_reissues_nothing() {
    let mut primary_server = LocalPostgres::primary();
    let primary = pool(&primary_server).await;
    epochs(&primary).create_if_missing().await.unwrap();
    let mut standby = LocalPostgres::standby_of(&primary_server);
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
    let first = race(&redis, &primary, &r).await;
    assert_eq!(
        check("first", first).len(),
        1,
        "one epoch for the first loss"
    );
    for restart in 1..=2 {
        redis_server.restart();
        let tokens = race(&redis, &primary, &r).await;
        let opened = check(&format!("restart {restart}"), tokens);
        assert_eq!(
            opened.len(),
            1,
            "restart {restart}: one epoch, got {opened:?}"
        );
    }
    let before_lag = epochs(&primary).current(&r).await.unwrap().unwrap();
    assert_eq!(before_lag.get(), 3, "three losses, three epochs");

    // The epochs' database: the standby stops receiving, two more losses open two epochs on
    // the primary alone, the primary dies and the standby is promoted.
    standby
        .catch_up_with(&primary_server, Duration::from_secs(30))
        .unwrap();
    standby.kill();
    for restart in 3..=4 {
        redis_server.restart();
        let tokens = race(&redis, &primary, &r).await;
        check(&format!("restart {restart}, lost with the primary"), tokens);
    }
    // A resource first used now: its epochs' row exists on the primary alone.
    let fresh = ResourceName::new("settle:m_9000").unwrap();
    let fresh_before = race(&redis, &primary, &fresh).await;
    primary.close().await;
    primary_server.kill();
    standby.take_over_port_of(&primary_server);
    standby.start();
    standby.promote();
    let promoted = pool(&standby).await;
    // Each further loss opens an epoch above every one the lost primary opened.
    for restart in 5..=6 {
        redis_server.restart();
        let tokens = race(&redis, &promoted, &r).await;
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
    for token in race(&redis, &promoted, &fresh).await {
        assert!(
            token > highest,
            "{fresh}: {token} after the failover is not above {highest}, issued before"
        );
    }
}

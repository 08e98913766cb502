//! Redis Cluster for real: three masters started by the test, joined with
//! `redis-cli --cluster create`, and the lease and token source used through the async
//! cluster connection with resources spread over every node.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::epoch::EPOCH_BITS;
use fencing_core::{EpochSource, Lease, MemoryEpochSource, ResourceName, Ttl};
use fencing_redis::{RedisLease, RedisTokenSource};
use fencing_test_support::services::RedisServer;
use fencing_testkit::conformance::*;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

struct Cluster {
    nodes: Vec<RedisServer>,
}

impl Cluster {
    fn start() -> Self {
        Self::with_replicas(0)
    }

    /// Three masters, each with `replicas` replicas.
    fn with_replicas(replicas: usize) -> Self {
        let nodes: Vec<_> = (0..3 * (1 + replicas))
            .map(|_| {
                RedisServer::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
        let addresses: Vec<_> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let created = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_until_ok();
        cluster
    }

    fn wait_until_ok(&self) {
        for _ in 0..250 {
            if self.nodes.iter().all(|n| {
                self.cli(n, &["CLUSTER", "INFO"])
                    .contains("cluster_state:ok")
            }) {
                return;
            }
            std::thread::sleep(Duration::from_millis(40));
        }
        panic!("the cluster did not reach cluster_state:ok");
    }

    fn cli(&self, node: &RedisServer, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &node.port().to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The node with `port`.
    fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|n| n.port() == port)
            .expect("a node")
    }

    /// The ports of the master serving `key` and of its replica, once every node sees the
    /// replica (it joins a moment after the cluster is ok).
    fn master_and_replica_of(&self, key: &str) -> (u16, u16) {
        for _ in 0..250 {
            if let Some(found) = self.find_master_and_replica(key) {
                return found;
            }
            std::thread::sleep(Duration::from_millis(40));
        }
        panic!("no replica of the master serving {key}");
    }

    fn find_master_and_replica(&self, key: &str) -> Option<(u16, u16)> {
        let node = &self.nodes[0];
        let slot: u16 = self
            .cli(node, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .unwrap();
        let nodes = self.cli(node, &["CLUSTER", "NODES"]);
        let port = |line: &str| -> u16 {
            let address = line.split(' ').nth(1).unwrap();
            address.split(['@', ':']).nth(1).unwrap().parse().unwrap()
        };
        let master = nodes.lines().find(|line| {
            line.contains("master")
                && line.split(' ').skip(8).any(|range| {
                    let (from, to) = range.split_once('-').unwrap_or((range, range));
                    let (from, to): (u16, u16) = (from.parse().unwrap(), to.parse().unwrap());
                    (from..=to).contains(&slot)
                })
        })?;
        let master_id = master.split(' ').next().unwrap();
        let replica = nodes
            .lines()
            .find(|line| line.split(' ').nth(3) == Some(master_id))?;
        Some((port(master), port(replica)))
    }
}

async fn connect(cluster: &Cluster) -> ClusterConnection {
    ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

fn epochs() -> Arc<dyn EpochSource> {
    Arc::new(MemoryEpochSource::new())
}

/// Every guarantee on a cluster of its own.
mod conformance {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let cluster = Cluster::start(); }
        subject: RedisLease::new(connect(&cluster).await, epochs()),
        caps: Capabilities::real_server().without_braces(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        setup: { let cluster = Cluster::start(); }
        subject: RedisTokenSource::new(connect(&cluster).await, epochs()),
        caps: Capabilities::real_server().without_braces(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_spread_over_every_master() {
    let cluster = Cluster::start();
    let lease = RedisLease::new(connect(&cluster).await, epochs());
    let ttl = Ttl::from_secs(30).unwrap();
    let mut guards = Vec::new();
    for merchant in 0..60 {
        let resource = ResourceName::new(format!("settle:m_{merchant}")).unwrap();
        let guard = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        // Each resource's first acquisition opens its first epoch.
        assert_eq!(guard.token().get(), (1 << EPOCH_BITS) + 1, "{resource:?}");
        assert!(lease.try_acquire(&resource, ttl).await.unwrap().is_none());
        guards.push(guard);
    }
    for node in &cluster.nodes {
        let keys: usize = cluster.cli(node, &["DBSIZE"]).trim().parse().unwrap();
        assert!(
            keys > 0,
            "node {} holds no lease: keys did not spread",
            node.port()
        );
    }
    for guard in guards {
        lease.release(guard).await.unwrap();
    }
}

/// A master whose replica lags (stopped, its link dropped), tokens issued on the master only,
/// the master killed and the replica promoted (`CLUSTER FAILOVER TAKEOVER`): through the
/// cluster connection, which follows the slot to its new master, the next token is above every
/// token issued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_promoted_by_the_cluster_behind_the_counter_never_reissues_a_token() {
    let cluster = Cluster::with_replicas(1);
    let lease = RedisLease::new(connect(&cluster).await, epochs());
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_millis(500).unwrap();
    let counter = fencing_redis::RedisKeys::default()
        .token_key(&resource)
        .unwrap();
    let (master, replica) = cluster.master_and_replica_of(&counter);
    for _ in 0..500 {
        let link = cluster.cli(cluster.node(replica), &["INFO", "replication"]);
        if link.contains("master_link_status:up") {
            break;
        }
        std::thread::sleep(Duration::from_millis(40));
    }
    let mut issued = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let guard = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        issued.insert(guard.token());
        lease.release(guard).await.unwrap();
    }
    let acked = cluster.cli(cluster.node(master), &["WAIT", "1", "5000"]);
    assert_eq!(acked.trim(), "1", "the replica has the first tokens");
    cluster.node(replica).pause();
    cluster.cli(cluster.node(master), &["CLIENT", "KILL", "TYPE", "replica"]);
    for _ in 0..2 {
        let guard = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
        issued.insert(guard.token());
        lease.release(guard).await.unwrap();
    }
    cluster.node(master).kill();
    cluster.node(replica).resume();
    let took = cluster.cli(cluster.node(replica), &["CLUSTER", "FAILOVER", "TAKEOVER"]);
    assert_eq!(took.trim(), "OK", "{took}");
    let started = std::time::Instant::now();
    let next = loop {
        match lease.try_acquire(&resource, ttl).await {
            Ok(Some(guard)) => break guard.token(),
            other => {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "no acquisition after the failover: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert!(
        next > *issued.last().unwrap(),
        "token {next} after the failover is not above {issued:?}"
    );
}

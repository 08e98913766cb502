//! Redis Cluster for real: three masters started by the test, joined with
//! `redis-cli --cluster create`, and the lease and token source used through the async
//! cluster connection with resources spread over every node.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::epoch::EPOCH_BITS;
use fencing_core::{Lease, MemoryTokenSource, ResourceName, TokenSource, Ttl};
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
        let nodes: Vec<_> = (0..3)
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
            .args(["--cluster-replicas", "0", "--cluster-yes"])
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
}

async fn connect(cluster: &Cluster) -> ClusterConnection {
    ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap()
}

fn epochs() -> Arc<dyn TokenSource> {
    Arc::new(MemoryTokenSource::new())
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

//! The etcd lease's acquire-with-token against bare etcd transactions, and next to the Redis
//! lease, on servers of the bench's own, in the same run.
//!
//! ```text
//! cargo bench -p fencing-etcd --bench etcd
//! ```
//!
//! * sequential, one client, on a three-member cluster: `EtcdLease::try_acquire` against a
//!   bare `Txn` put-if-absent, and against what etcd's own lock does (a lease grant, then the
//!   put-if-absent bound to it); medians of rotating rounds, ratios to the bare `Txn`;
//! * acquisitions per second at 1 and 50 concurrent clients, the etcd lease next to
//!   `RedisLease` on a redis-server of the bench's own.
//!
//! Every acquisition is of a resource of its own. Nothing here asserts a time: the figures
//! go to docs/benchmarks.md.

use std::sync::Arc;
use std::time::Instant;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use fencing_core::{Lease, ResourceName, Ttl};
use fencing_etcd::{EtcdKeys, EtcdLease};
use fencing_redis::RedisLease;
use fencing_test_support::bench;
use fencing_test_support::services::{EtcdCluster, RedisServer};

const ACQUISITIONS: usize = 500;
const ROUNDS: usize = 7;
const CONCURRENT_TOTAL: usize = 5_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let cluster = EtcdCluster::start(3);
    let client = Client::connect(cluster.endpoints(), None).await.unwrap();
    let lease = EtcdLease::new(client.clone()).with_keys(keys("lease"));
    let ttl = Ttl::from_secs(30).unwrap();

    println!(
        "etcd, three members on loopback, {ACQUISITIONS} acquisitions of distinct resources per round, {ROUNDS} rounds\n"
    );
    let variants = [
        "bare Txn put-if-absent",
        "lease grant + Txn put-if-absent bound to it (etcd's own lock)",
        "the same, its Txn also comparing and putting a second key (the lease's token key)",
        "EtcdLease::try_acquire (with its token)",
    ];
    let results = bench::compare(&variants, ROUNDS, async |variant, round| {
        let names: Vec<String> = (0..ACQUISITIONS)
            .map(|n| format!("b{round}:{}:{n}", variant.len()))
            .collect();
        let mut client = client.clone();
        let start = Instant::now();
        match variant {
            "bare Txn put-if-absent" => {
                for name in &names {
                    put_if_absent(&mut client, name, None).await;
                }
            }
            "lease grant + Txn put-if-absent bound to it (etcd's own lock)" => {
                for name in &names {
                    let granted = client.lease_grant(30, None).await.unwrap();
                    put_if_absent(&mut client, name, Some(granted.id())).await;
                }
            }
            "the same, its Txn also comparing and putting a second key (the lease's token key)" => {
                for name in &names {
                    let granted = client.lease_grant(30, None).await.unwrap();
                    put_if_absent_with_second_key(&mut client, name, granted.id()).await;
                }
            }
            _ => {
                for name in &names {
                    let r = ResourceName::new(name.as_str()).unwrap();
                    lease.try_acquire(&r, ttl).await.unwrap().expect("free");
                }
            }
        }
        start.elapsed()
    })
    .await;
    bench::report(&results, ACQUISITIONS, "acquisition");

    let redis = RedisServer::start(&[]);
    let conn = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let redis_lease: Arc<dyn Lease> = Arc::new(RedisLease::may_reissue_tokens(conn));
    let etcd_lease: Arc<dyn Lease> = Arc::new(EtcdLease::new(client).with_keys(keys("rate")));
    println!("\n| clients | EtcdLease acquisitions/s | RedisLease acquisitions/s |");
    println!("| ---: | ---: | ---: |");
    for clients in [1, 50] {
        let etcd = rate(&etcd_lease, clients, ttl).await;
        let redis = rate(&redis_lease, clients, ttl).await;
        println!("| {clients} | {etcd:.0} | {redis:.0} |");
    }
}

fn keys(run: &str) -> EtcdKeys {
    let run = fencing_testkit::unique_name(run);
    EtcdKeys::new(format!("{run}/lock/"), format!("{run}/token/")).unwrap()
}

async fn put_if_absent(client: &mut Client, name: &str, lease: Option<i64>) {
    let options = lease.map(|id| PutOptions::new().with_lease(id));
    let txn = Txn::new()
        .when([Compare::create_revision(name, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(name, "owner", options)]);
    assert!(
        client.txn(txn).await.unwrap().succeeded(),
        "{name} was free"
    );
}

/// [`put_if_absent`] bound to `lease` that also requires a second key absent and puts it,
/// unbound: the shape of the lease's own transaction (its lock key and its token key), so
/// the cost of the second key is measured apart from the library's.
async fn put_if_absent_with_second_key(client: &mut Client, name: &str, lease: i64) {
    let second = format!("{name}/token");
    let txn = Txn::new()
        .when([
            Compare::create_revision(name, CompareOp::Equal, 0),
            Compare::create_revision(second.as_str(), CompareOp::Equal, 0),
        ])
        .and_then([
            TxnOp::put(name, "owner", Some(PutOptions::new().with_lease(lease))),
            TxnOp::put(second.as_str(), "1", None),
        ]);
    assert!(
        client.txn(txn).await.unwrap().succeeded(),
        "{name} was free"
    );
}

/// Acquisitions per second of distinct resources by `clients` tasks side by side.
async fn rate(lease: &Arc<dyn Lease>, clients: usize, ttl: Ttl) -> f64 {
    let per_client = CONCURRENT_TOTAL / clients;
    let run = fencing_testkit::unique_name("rate");
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (lease, run) = (lease.clone(), run.clone());
        tasks.spawn(async move {
            for n in 0..per_client {
                let r = ResourceName::new(format!("{run}:{c}:{n}")).unwrap();
                lease.try_acquire(&r, ttl).await.unwrap().expect("free");
            }
        });
    }
    tasks.join_all().await;
    (per_client * clients) as f64 / start.elapsed().as_secs_f64()
}

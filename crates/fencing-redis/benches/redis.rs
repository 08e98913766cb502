//! The lease's acquire-with-token against the alternatives, on one redis-server of the
//! bench's own, in the same run.
//!
//! ```text
//! cargo bench -p fencing-redis --bench redis
//! ```
//!
//! * sequential, one client: our one-script acquire + token, the textbook two commands
//!   (`SET NX PX` then `INCR`), and `rslock`'s acquire (no token); medians of rotating
//!   rounds, ratios to the two commands;
//! * throughput at 1 and 50 concurrent clients, next to `redis-benchmark`'s raw `EVALSHA` of
//!   the same script on the same server.
//!
//! Nothing here asserts a time: the figures go to docs/benchmarks.md.

use std::process::Command;
use std::time::{Duration, Instant};

use fencing_core::{Lease, ResourceName, Ttl};
use fencing_redis::RedisLease;
use fencing_test_support::services::RedisServer;
use redis::aio::MultiplexedConnection;

const ACQUISITIONS: usize = 3000;
const ROUNDS: usize = 7;
const CONCURRENT_TOTAL: usize = 20_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let server = RedisServer::start(&[]);
    let client = redis::Client::open(server.url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    // Each acquisition is of a new resource: with epochs every one would open an epoch (a
    // second round trip and a durable write), which is the rare path. The rows compare the
    // common path, an existing counter, so the lease counts without epochs here.
    let lease = RedisLease::may_reissue_tokens(conn.clone());
    let rslock = rslock::LockManager::new(vec![server.url()]);
    let ttl = Ttl::from_secs(10).unwrap();

    println!(
        "redis-server 127.0.0.1:{}, {ACQUISITIONS} acquisitions of distinct resources per round, {ROUNDS} rounds\n",
        server.port()
    );
    let variants = [
        "SET NX PX + INCR (two commands)",
        "RedisLease::try_acquire (one script)",
        "rslock LockManager::lock (no token)",
    ];
    let mut times = vec![Vec::new(); variants.len()];
    for round in 0..ROUNDS {
        for offset in 0..variants.len() {
            let i = (round + offset) % variants.len();
            let names: Vec<String> = (0..ACQUISITIONS)
                .map(|n| format!("b{round}v{i}:{n}"))
                .collect();
            let start = Instant::now();
            match i {
                0 => two_commands(conn.clone(), &names, ttl).await,
                1 => {
                    for name in &names {
                        let r = ResourceName::new(name.as_str()).unwrap();
                        lease.try_acquire(&r, ttl).await.unwrap().expect("free");
                    }
                }
                _ => {
                    for name in &names {
                        rslock
                            .lock(name.as_bytes(), ttl.duration())
                            .await
                            .expect("free");
                    }
                }
            }
            times[i].push(start.elapsed());
        }
    }
    let medians: Vec<Duration> = times
        .into_iter()
        .map(|mut t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect();
    println!("| variant | median per acquisition | ratio to two commands |");
    println!("| --- | ---: | ---: |");
    for (name, median) in variants.iter().zip(&medians) {
        println!(
            "| {name} | {:.1} µs | {:.3}× |",
            median.as_secs_f64() * 1e6 / ACQUISITIONS as f64,
            median.as_secs_f64() / medians[0].as_secs_f64()
        );
    }

    println!("\n| clients | RedisLease acquisitions/s | redis-benchmark EVALSHA/s (same script) |");
    println!("| ---: | ---: | ---: |");
    for clients in [1, 50] {
        let ours = concurrent(&client, clients, ttl).await;
        let raw = redis_benchmark(&server, lease.acquire_script_hash(), clients);
        println!("| {clients} | {ours:.0} | {raw} |");
    }
}

async fn two_commands(mut conn: MultiplexedConnection, names: &[String], ttl: Ttl) {
    for name in names {
        let set: Option<String> = redis::cmd("SET")
            .arg(format!("lock:{{{name}}}"))
            .arg("owner")
            .arg("NX")
            .arg("PX")
            .arg(ttl.as_millis())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(set.is_some());
        let _: i64 = redis::cmd("INCR")
            .arg(format!("fence:{{{name}}}"))
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

/// Acquisitions per second with `clients` connections, each acquiring its own resources.
async fn concurrent(client: &redis::Client, clients: usize, ttl: Ttl) -> f64 {
    let mut leases = Vec::new();
    for _ in 0..clients {
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        leases.push(RedisLease::may_reissue_tokens(conn));
    }
    let each = CONCURRENT_TOTAL / clients;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (c, lease) in leases.into_iter().enumerate() {
        tasks.spawn(async move {
            for n in 0..each {
                let r = ResourceName::new(format!("c{clients}:{c}:{n}")).unwrap();
                lease.try_acquire(&r, ttl).await.unwrap().expect("free");
            }
        });
    }
    tasks.join_all().await;
    (each * clients) as f64 / start.elapsed().as_secs_f64()
}

/// `redis-benchmark`'s rate for EVALSHA of the acquire script on random keys.
fn redis_benchmark(server: &RedisServer, sha: &str, clients: usize) -> String {
    let out = Command::new("redis-benchmark")
        .args(["-p", &server.port().to_string(), "-c", &clients.to_string()])
        .args(["-n", &CONCURRENT_TOTAL.to_string(), "-r", "100000000", "-q"])
        .args([
            "EVALSHA",
            sha,
            "2",
            "lock:{__rand_int__}",
            "fence:{__rand_int__}",
            "owner",
            "10000",
            "0",
        ])
        .output();
    match out {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            // "-q" prints "<command>: <rate> requests per second, p50=…".
            text.split(" requests per second")
                .next()
                .filter(|_| text.contains(" requests per second"))
                .and_then(|head| head.split_whitespace().last())
                .map(str::to_owned)
                .unwrap_or_else(|| format!("unreadable: {text:?}"))
        }
        Err(e) => format!("redis-benchmark did not run: {e}"),
    }
}

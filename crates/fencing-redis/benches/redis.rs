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
//!   the same script on the same server;
//! * the identity check's cost: the default lease (counters bound to the server history)
//!   against the same script without the check, on existing counters, paired round by round.
//!
//! Nothing here asserts a time: the figures go to docs/benchmarks.md.

use std::process::Command;
use std::time::Instant;

use fencing_core::{Lease, ResourceName, Ttl};
use fencing_redis::RedisLease;
use fencing_test_support::bench;
use fencing_test_support::services::RedisServer;
use redis::aio::MultiplexedConnection;

const ACQUISITIONS: usize = 3000;
const ROUNDS: usize = 7;
const CONCURRENT_TOTAL: usize = 20_000;
const IDENTITY_ITEMS: usize = 2000;

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
    let results = bench::compare(&variants, ROUNDS, async |variant, round| {
        let names: Vec<String> = (0..ACQUISITIONS)
            .map(|n| format!("b{round}:{}:{n}", variant.len()))
            .collect();
        let start = Instant::now();
        match variant {
            "SET NX PX + INCR (two commands)" => two_commands(conn.clone(), &names, ttl).await,
            "RedisLease::try_acquire (one script)" => {
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
        start.elapsed()
    })
    .await;
    bench::report(&results, ACQUISITIONS, "acquisition");

    identity_check(&lease, &conn, ttl).await;
    throughput(&server, &client, &lease, &conn, ttl).await;
}

/// The identity check's cost: the default lease (epochs, the counter bound to the server
/// history, INFO read inside the script) against the same script without it, each on counters
/// that exist and are bound (established untimed first), alternating acquisition by
/// acquisition, the ratio paired round by round.
async fn identity_check(
    lease: &RedisLease<MultiplexedConnection>,
    conn: &MultiplexedConnection,
    ttl: Ttl,
) {
    println!(
        "\nOn existing counters, alternating acquisition by acquisition ({IDENTITY_ITEMS} per round, {ROUNDS} rounds):\n"
    );
    let epochs: std::sync::Arc<dyn fencing_core::EpochSource> =
        std::sync::Arc::new(fencing_core::MemoryEpochSource::new());
    let checked = RedisLease::new(conn.clone(), epochs);
    let identity = [
        "RedisLease::may_reissue_tokens (no identity check)",
        "RedisLease::new (identity check)",
    ];
    let rounds = bench::compare_per_item(
        &identity,
        ROUNDS,
        IDENTITY_ITEMS,
        async |variant, round, item| {
            let r = ResourceName::new(format!("i{round}:{}:{item}", variant.len())).unwrap();
            let lease: &dyn Lease = if variant == identity[0] {
                lease
            } else {
                &checked
            };
            let first = lease.try_acquire(&r, ttl).await.unwrap().expect("free");
            lease.release(first).await.unwrap();
            let start = Instant::now();
            let guard = lease.try_acquire(&r, ttl).await.unwrap().expect("free");
            let elapsed = start.elapsed();
            lease.release(guard).await.unwrap();
            elapsed
        },
    )
    .await;
    bench::report_paired_ratios(&rounds);
}

/// Acquisitions a second from 1 and 50 clients, beside `redis-benchmark` sending the same
/// script.
async fn throughput(
    server: &RedisServer,
    client: &redis::Client,
    lease: &RedisLease<MultiplexedConnection>,
    conn: &MultiplexedConnection,
    ttl: Ttl,
) {
    println!("\n| clients | RedisLease acquisitions/s | redis-benchmark EVALSHA/s (same script) |");
    println!("| ---: | ---: | ---: |");
    let sha = lease.acquire_script_hash();
    // The command redis-benchmark sends, once through the client first: a script whose
    // arguments changed fails here rather than in every one of its requests.
    let mut check = conn.clone();
    let token: i64 = redis::cmd(&acquire_command(sha, "check")[0])
        .arg(&acquire_command(sha, "check")[1..])
        .query_async(&mut check)
        .await
        .expect("the acquire script takes the benchmark's arguments");
    assert_eq!(token, 1, "a fresh counter's first token");
    for clients in [1, 50] {
        let ours = concurrent(client, clients, ttl).await;
        let raw = redis_benchmark(server, &acquire_command(sha, "{__rand_int__}"), clients);
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

/// EVALSHA of the acquire script for the resource `name`: the lease and counter keys, an
/// owner, the TTL in milliseconds, the re-establish mode of a lease without epochs, and no
/// floor.
fn acquire_command(sha: &str, name: &str) -> Vec<String> {
    [
        "EVALSHA",
        sha,
        "2",
        &format!("lock:{{{name}}}"),
        &format!("fence:{{{name}}}"),
        "owner",
        "10000",
        "0",
        "",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// `redis-benchmark`'s rate for `command` on random keys.
fn redis_benchmark(server: &RedisServer, command: &[String], clients: usize) -> String {
    let out = Command::new("redis-benchmark")
        .args(["-p", &server.port().to_string(), "-c", &clients.to_string()])
        .args(["-n", &CONCURRENT_TOTAL.to_string(), "-r", "100000000", "-q"])
        .args(command)
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

//! The ceilings the scale figures are read against, measured by each store's own tool on the
//! same servers: `pgbench` running grouped updates of the refunds table, and
//! `redis-benchmark` running the Redis lease's own acquisition script, captured from the
//! server as the library sends it.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_core::{Lease, ResourceName, Ttl};
use fencing_harness::merchants::{self, Work};
use fencing_harness::plan::LeaseKind;
use fencing_harness::stores::{self, Clients, LeaseServer, RunNames};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::Services;
use fencing_harness::servers::redis_connection;

/// Resources the Redis acquisitions spread over.
pub(crate) const RESOURCES: u32 = 10_000;
/// Clients acquiring at once, each on a connection of its own, as `redis-benchmark -c`.
pub(crate) const CLIENTS: u32 = 50;
/// Acquisitions per measure.
const ACQUISITIONS: u32 = 200_000;
/// Refunds per grouped statement of the pgbench script (the pipeline's default group).
pub(crate) const GROUP: u32 = 32;

/// What the stores' own tools measured.
#[derive(Debug)]
pub(crate) struct Ceilings {
    /// pgbench's transactions per second, each one grouped update of [`GROUP`] refunds, per
    /// number of clients.
    pub(crate) pgbench: Result<Vec<(u32, f64)>, String>,
    /// Redis acquisitions: the library's and redis-benchmark's.
    pub(crate) redis: Result<RedisCeiling, String>,
}

/// The Redis lease's acquisitions per second across [`RESOURCES`] resources at [`CLIENTS`]
/// clients, through the library and through `redis-benchmark` sending the same script.
#[derive(Debug)]
pub(crate) struct RedisCeiling {
    pub(crate) library_per_second: f64,
    /// Of the library's: how many acquired (the rest found the resource held).
    pub(crate) acquired: u64,
    pub(crate) benchmark_per_second: f64,
}

/// Measures both ceilings.
pub(crate) async fn measure(services: &Services) -> Ceilings {
    let clients = Clients::connect(
        &services.database_url,
        "scale_ceiling",
        &services.moto.endpoint(),
    )
    .await;
    let clients = match clients {
        Ok(clients) => clients,
        Err(err) => {
            let why = format!("cannot connect to PostgreSQL: {err}");
            return Ceilings {
                pgbench: Err(why.clone()),
                redis: Err(why),
            };
        }
    };
    Ceilings {
        pgbench: pgbench(services, &clients).await,
        redis: redis(services, &clients).await,
    }
}

/// pgbench at 4, 8 and 16 clients, for 15 s each, over a table of 100 merchants × 1,200
/// refunds made as a case makes it (trigger included).
async fn pgbench(services: &Services, clients: &Clients) -> Result<Vec<(u32, f64)>, String> {
    let names = RunNames::fresh(0);
    let work = Work {
        merchants: 100,
        refunds_each: 1200,
    };
    merchants::create(&names, &clients.pool, work)
        .await
        .map_err(|e| format!("cannot create the refunds: {e}"))?;
    let script = std::env::temp_dir().join(format!("{}.pgbench", names.id()));
    std::fs::write(
        &script,
        format!(
            "\\set m random(1, {merchants})\n\\set r random(1, {last})\n\
             UPDATE \"{schema}\".refunds SET fence = fence + 1 WHERE id = ANY(ARRAY(\
             SELECT format('m_%s_r_%s', lpad(:m::text, 4, '0'), lpad(g::text, 6, '0')) \
             FROM generate_series(:r, :r + {span}) AS g));\n",
            merchants = work.merchants,
            last = work.refunds_each - GROUP + 1,
            span = GROUP - 1,
            schema = names.schema(),
        ),
    )
    .map_err(|e| format!("cannot write the pgbench script: {e}"))?;
    let mut measured = Vec::new();
    for clients_n in [4u32, 8, 16] {
        let output = Command::new("pgbench")
            .args([
                "-n",
                "-j",
                "2",
                "-T",
                "15",
                "-c",
                &clients_n.to_string(),
                "-f",
            ])
            .arg(&script)
            .arg(&services.database_url)
            .output()
            .await
            .map_err(|e| format!("cannot run pgbench: {e}"))?;
        let text = String::from_utf8_lossy(&output.stdout);
        let tps = text
            .lines()
            .find_map(|l| l.strip_prefix("tps = "))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| {
                format!(
                    "pgbench said: {text}{}",
                    String::from_utf8_lossy(&output.stderr)
                )
            })?;
        measured.push((clients_n, tps));
    }
    let _ = std::fs::remove_file(&script);
    let _ = stores::drop_schema(&names, &clients.pool).await;
    Ok(measured)
}

/// The resource numbered `n`, named as `redis-benchmark` names its `__rand_int__`: twelve
/// digits.
fn numbered(n: u32) -> ResourceName {
    ResourceName::new(format!("{n:012}")).expect("digits are a valid name")
}

/// Resource number of `client`'s `round`, spread evenly and reproducibly over [`RESOURCES`]
/// (splitmix64).
fn scattered(client: u32, round: u32) -> u32 {
    let mut z = (u64::from(client) << 32 | u64::from(round)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) % u64::from(RESOURCES)) as u32
}

/// The library's acquisitions, then redis-benchmark's with the script the library sent.
async fn redis(services: &Services, clients: &Clients) -> Result<RedisCeiling, String> {
    let names = RunNames::fresh(0);
    stores::create_lease_tables(&names, clients, LeaseKind::Redis)
        .await
        .map_err(|e| format!("cannot create the epochs table: {e}"))?;
    let url = services.redis.url();
    let mut leases = Vec::new();
    for _ in 0..CLIENTS {
        let conn = redis_connection(Some(&url)).await?;
        let server = Some(LeaseServer::Redis(conn));
        leases.push(
            stores::lease(LeaseKind::Redis, &names, clients, server, true)
                .map_err(|e| e.to_string())?,
        );
    }
    let ttl = Ttl::from_millis(10).map_err(|e| e.to_string())?;
    // Every resource's counter established first: the steady state is what is compared.
    acquire_all(
        &leases,
        ttl,
        |client, i| (i % CLIENTS == client).then(|| numbered(i)),
        RESOURCES,
    )
    .await?;
    let command = captured_acquisition(services.redis.port(), &*leases[0], ttl).await?;
    let started = Instant::now();
    let acquired = acquire_all(
        &leases,
        ttl,
        |client, round| Some(numbered(scattered(client, round))),
        ACQUISITIONS / CLIENTS,
    )
    .await?;
    let library_per_second = f64::from(ACQUISITIONS) / started.elapsed().as_secs_f64();
    let benchmark_per_second = redis_benchmark(services.redis.port(), &command).await?;
    Ok(RedisCeiling {
        library_per_second,
        acquired,
        benchmark_per_second,
    })
}

/// Each client (its own lease, on its own connection) tries `rounds` acquisitions of the
/// resources `pick(client, round)` names; returns how many acquired.
async fn acquire_all(
    leases: &[Arc<dyn Lease>],
    ttl: Ttl,
    pick: impl Fn(u32, u32) -> Option<ResourceName> + Copy + Send + 'static,
    rounds: u32,
) -> Result<u64, String> {
    let tasks: Vec<_> = leases
        .iter()
        .zip(0u32..)
        .map(|(lease, client)| {
            let lease = lease.clone();
            tokio::spawn(async move {
                let mut acquired = 0u64;
                for round in 0..rounds {
                    if let Some(resource) = pick(client, round) {
                        let got = lease
                            .try_acquire(&resource, ttl)
                            .await
                            .map_err(|e| e.to_string())?;
                        acquired += u64::from(got.is_some());
                    }
                }
                Ok::<u64, String>(acquired)
            })
        })
        .collect();
    let mut acquired = 0;
    for task in tasks {
        acquired += task.await.map_err(|e| e.to_string())??;
    }
    Ok(acquired)
}

/// The command one acquisition of resource 42 sends, as the server's `MONITOR` shows it, with
/// the resource's name made `__rand_int__`.
async fn captured_acquisition(
    port: u16,
    lease: &dyn Lease,
    ttl: Ttl,
) -> Result<Vec<String>, String> {
    let mut monitor = Command::new("redis-cli")
        .args(["-p", &port.to_string(), "monitor"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run redis-cli: {e}"))?;
    let mut lines = BufReader::new(monitor.stdout.take().ok_or("redis-cli's output")?).lines();
    let _ok = lines.next_line().await.map_err(|e| e.to_string())?;
    let resource = numbered(42);
    tokio::time::sleep(Duration::from_millis(50)).await;
    lease
        .try_acquire(&resource, ttl)
        .await
        .map_err(|e| e.to_string())?;
    let found = tokio::time::timeout(Duration::from_secs(5), async {
        while let Ok(Some(line)) = lines.next_line().await {
            let words = monitor_words(&line);
            if words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("evalsha"))
            {
                return Some(words);
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .ok_or("MONITOR showed no EVALSHA for an acquisition")?;
    let name = resource.as_str();
    Ok(found
        .into_iter()
        .map(|w| w.replace(name, "__rand_int__"))
        .collect())
}

/// The quoted words of a `MONITOR` line (`<time> [<db> <client>] "CMD" "arg" ...`), unescaped.
fn monitor_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut word = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => word.push('\n'),
                    Some('r') => word.push('\r'),
                    Some('t') => word.push('\t'),
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        word.push(char::from(u8::from_str_radix(&hex, 16).unwrap_or(b'?')));
                    }
                    Some(other) => word.push(other),
                    None => {}
                },
                other => word.push(other),
            }
        }
        words.push(word);
    }
    words
}

/// redis-benchmark's requests per second for `command` at [`CLIENTS`] clients over
/// [`RESOURCES`] random resources.
async fn redis_benchmark(port: u16, command: &[String]) -> Result<f64, String> {
    let output = Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-c", &CLIENTS.to_string()])
        .args([
            "-n",
            &ACQUISITIONS.to_string(),
            "-r",
            &RESOURCES.to_string(),
            "--csv",
        ])
        .args(command)
        .output()
        .await
        .map_err(|e| format!("cannot run redis-benchmark: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .last()
        .and_then(|line| line.split(',').nth(1))
        .and_then(|rps| rps.trim_matches('"').parse().ok())
        .ok_or_else(|| {
            format!(
                "redis-benchmark said: {text}{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_monitor_line_gives_its_command_word_by_word() {
        let line = r#"1733489.123456 [0 127.0.0.1:5] "EVALSHA" "ab12" "2" "r:lock:000000000042" "say \"hi\"\\" "\x41""#;
        assert_eq!(
            monitor_words(line),
            [
                "EVALSHA",
                "ab12",
                "2",
                "r:lock:000000000042",
                "say \"hi\"\\",
                "A"
            ]
        );
    }
}

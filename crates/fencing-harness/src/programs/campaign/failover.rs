//! The Redis a failover strikes: a primary, one replica and three sentinels of the run's own,
//! deployed as operators deploy them, and the failover that leaves the promoted replica behind
//! the counter.

use std::time::{Duration, Instant};

use fencing_test_support::services::{RedisSentinels, RedisServer, redis_cli};

/// The name the sentinels monitor the primary under.
const SERVICE: &str = "settlement";

/// How long the replica may lag before the primary is killed anyway: Sentinel promotes no
/// replica whose link has been down longer than ten times `down-after-milliseconds` (1 s).
pub(crate) const LONGEST_LAG: Duration = Duration::from_secs(7);

/// A primary, its replica and three sentinels (quorum two).
pub(crate) struct SentinelRedis {
    primary: RedisServer,
    replica: RedisServer,
    sentinels: RedisSentinels,
}

impl SentinelRedis {
    /// Starts them, and waits until every sentinel knows the replica it can promote.
    pub(crate) fn start() -> Result<Self, String> {
        // No delay before a replica's first full sync (Redis waits 5 s by default for more
        // replicas to share it).
        let primary = RedisServer::start(&["--repl-diskless-sync-delay", "0"]);
        let replica =
            RedisServer::start(&["--replicaof", "127.0.0.1", &primary.port().to_string()]);
        wait_for_link(&replica)?;
        let sentinels = RedisSentinels::start(primary.port(), 3, 2, SERVICE);
        sentinels.wait_for_replicas(1, Duration::from_secs(30))?;
        Ok(SentinelRedis {
            primary,
            replica,
            sentinels,
        })
    }

    /// The worker's arguments that reach the primary through the sentinels.
    pub(crate) fn worker_args(&self) -> [String; 4] {
        [
            "--redis-sentinels".to_owned(),
            self.sentinels.urls().join(","),
            "--redis-service".to_owned(),
            SERVICE.to_owned(),
        ]
    }

    /// Makes the replica fall behind from now on: it has every write so far, then it is
    /// stopped and the primary drops its link (a stop alone is not enough: the kernel would
    /// buffer the stream and the replica catch up on waking).
    pub(crate) fn lag_replica(&self) -> Result<(), String> {
        let acked = redis_cli(self.primary.port(), &["WAIT", "1", "5000"]).unwrap_or_default();
        if acked.trim() != "1" {
            return Err(format!(
                "the replica did not acknowledge the writes ({acked:?})"
            ));
        }
        self.replica.pause();
        redis_cli(self.primary.port(), &["CLIENT", "KILL", "TYPE", "replica"])
            .ok_or("the primary did not drop its replica")?;
        Ok(())
    }

    /// Kills the primary, lets the replica go on and waits until every sentinel names it the
    /// primary; returns how long that took.
    pub(crate) fn fail_over(&self) -> Result<Duration, String> {
        let started = Instant::now();
        self.primary.kill();
        self.replica.resume();
        self.sentinels.wait_for_primary(
            |port| port == Some(self.replica.port()),
            Duration::from_secs(60),
        )?;
        Ok(started.elapsed())
    }
}

/// Waits until `replica` has synced with its primary and follows its stream.
fn wait_for_link(replica: &RedisServer) -> Result<(), String> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let info = redis_cli(replica.port(), &["INFO", "replication"]).unwrap_or_default();
        if info.lines().any(|l| l.trim() == "master_link_status:up") {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("the replica did not sync with its primary within 30 s".to_owned())
}

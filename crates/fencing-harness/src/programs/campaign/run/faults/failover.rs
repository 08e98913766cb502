//! The deployments a failover strikes, each the run's own and deployed as operators deploy
//! them: Redis as a primary, one replica and three sentinels; PostgreSQL as a primary and an
//! asynchronous standby behind a relay. The failover leaves the promoted server behind the
//! counters.

use std::time::{Duration, Instant};

use fencing_harness::plan::{FaultKind, RunPlan};
use fencing_harness::stores::{self, RunNames};
use fencing_test_support::services::{LocalPostgres, RedisSentinels, RedisServer, redis_cli};

use fencing_test_support::relay::Relay;

use super::super::{FailoverTiming, RunError, Watch};

/// The name the sentinels monitor the primary under.
const SERVICE: &str = "settlement";

/// How long the replica may lag before the primary is killed anyway: Sentinel promotes no
/// replica whose link has been down longer than ten times `down-after-milliseconds` (1 s).
pub(crate) const LONGEST_LAG: Duration = Duration::from_secs(7);

/// A deployment a failover strikes.
pub(crate) enum Failover {
    Redis(SentinelRedis),
    Postgres(StandbyPostgres),
}

impl Failover {
    /// The deployment `kind` strikes, started.
    pub(crate) async fn start(kind: FaultKind) -> Result<Self, String> {
        match kind {
            FaultKind::PgFailover => Ok(Failover::Postgres(StandbyPostgres::start().await?)),
            _ => Ok(Failover::Redis(tokio::task::block_in_place(
                SentinelRedis::start,
            )?)),
        }
    }

    /// The fault it stands for.
    pub(crate) fn kind(&self) -> FaultKind {
        match self {
            Failover::Redis(_) => FaultKind::RedisFailover,
            Failover::Postgres(_) => FaultKind::PgFailover,
        }
    }

    /// The server, in a picture's words.
    pub(crate) fn server(&self) -> &'static str {
        match self {
            Failover::Redis(_) => "Redis",
            Failover::Postgres(_) => "PostgreSQL",
        }
    }

    /// The server that lags and is promoted.
    pub(crate) fn follower(&self) -> &'static str {
        match self {
            Failover::Redis(_) => "replica",
            Failover::Postgres(_) => "standby",
        }
    }

    /// The worker's arguments that reach it.
    pub(crate) fn worker_args(&self) -> Vec<String> {
        match self {
            Failover::Redis(redis) => redis.worker_args().to_vec(),
            Failover::Postgres(postgres) => postgres.worker_args().to_vec(),
        }
    }

    /// Makes the standby (or replica) fall behind from now on.
    pub(crate) fn lag(&mut self) -> Result<(), String> {
        match self {
            Failover::Redis(redis) => redis.lag_replica(),
            Failover::Postgres(postgres) => postgres.lag_standby(),
        }
    }

    /// Kills the primary and promotes the server that lags; returns how long the promotion
    /// took.
    pub(crate) fn fail_over(&mut self) -> Result<Duration, String> {
        match self {
            Failover::Redis(redis) => redis.fail_over(),
            Failover::Postgres(postgres) => postgres.fail_over(),
        }
    }
}

/// A primary and its asynchronous streaming standby (the machine's PostgreSQL 15), reached
/// through a relay that the failover moves to the standby.
pub(crate) struct StandbyPostgres {
    primary: LocalPostgres,
    standby: LocalPostgres,
    relay: Relay,
}

impl StandbyPostgres {
    async fn start() -> Result<Self, String> {
        let (primary, standby) = tokio::task::block_in_place(|| {
            let primary = LocalPostgres::primary();
            let standby = LocalPostgres::standby_of(&primary);
            (primary, standby)
        });
        let relay =
            Relay::start(primary.port()).map_err(|e| format!("cannot start the relay: {e}"))?;
        Ok(StandbyPostgres {
            primary,
            standby,
            relay,
        })
    }

    /// The lease's database, through the relay.
    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/test", self.relay.port())
    }

    fn worker_args(&self) -> [String; 2] {
        ["--lease-database-url".to_owned(), self.url()]
    }

    /// Stops the standby once it has replayed everything the primary wrote.
    fn lag_standby(&mut self) -> Result<(), String> {
        self.standby
            .catch_up_with(&self.primary, Duration::from_secs(5))?;
        self.standby.kill();
        Ok(())
    }

    /// Kills the primary, starts the standby, promotes it and moves the relay to it.
    fn fail_over(&mut self) -> Result<Duration, String> {
        let started = Instant::now();
        self.primary.kill();
        self.standby.start();
        self.standby.promote();
        self.relay.move_to(self.standby.port());
        Ok(started.elapsed())
    }
}

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

/// What a run fails over is the run's own: Redis behind Sentinel, or the PostgreSQL lease's
/// primary and standby (its lease table made there).
pub(in crate::programs::campaign::run) async fn start_failover(
    plan: &RunPlan,
    names: &RunNames,
) -> Result<Option<Failover>, RunError> {
    let Some(fault) = plan
        .faults
        .iter()
        .find(|f| matches!(f.kind, FaultKind::RedisFailover | FaultKind::PgFailover))
    else {
        return Ok(None);
    };
    let failover = Failover::start(fault.kind).await?;
    if let Failover::Postgres(postgres) = &failover {
        let pool = sqlx::PgPool::connect(&postgres.url()).await?;
        stores::create_pg_lease(names, &pool).await?;
        pool.close().await;
    }
    Ok(Some(failover))
}

impl Watch<'_> {
    /// Kills `holder` while the follower is made to lag, so that the lease changes hands on
    /// the primary alone; the failover follows that hand-over ([`Self::fail_over_when_due`],
    /// counted then). Killed first: its lease lasts a TTL more, time enough to make the
    /// follower lag before anyone else can acquire.
    pub(super) fn start_lag(
        &mut self,
        holder: Option<(String, u32)>,
        at: Duration,
    ) -> Result<(), RunError> {
        let Some((name, _)) = holder.filter(|_| self.failover.is_some()) else {
            return Ok(());
        };
        self.kill_and_replace(&name, at)?;
        let deployment = self.failover.as_mut().expect("checked above");
        tokio::task::block_in_place(|| deployment.lag())?;
        let what = format!("{} {}", deployment.server(), deployment.follower());
        self.picture
            .service_fault(at, &format!("{what} made to lag"));
        self.lagging = Some((Instant::now(), false));
        Ok(())
    }

    /// Fails over once the lagging replica's lease changed hands, or it lagged as long as it
    /// may.
    pub(in crate::programs::campaign::run) fn fail_over_when_due(
        &mut self,
    ) -> Result<(), RunError> {
        let (Some((since, handed_over)), Some(deployment)) = (self.lagging, &mut self.failover)
        else {
            return Ok(());
        };
        if !handed_over && since.elapsed() < LONGEST_LAG {
            return Ok(());
        }
        self.lagging = None;
        let killed_at = Instant::now();
        let took = tokio::task::block_in_place(|| deployment.fail_over())?;
        self.failovers.push(FailoverTiming {
            kind: deployment.kind(),
            promoted: took,
            first_token: None,
            fresh_resource: self.plan.fails_over_a_fresh_resource(),
        });
        self.awaiting_token = Some(killed_at);
        self.picture.service_fault(
            self.started.elapsed(),
            &format!(
                "{} primary killed{}; the lagging {} promoted in {} ms",
                deployment.server(),
                if handed_over {
                    " after a hand-over"
                } else {
                    ""
                },
                deployment.follower(),
                took.as_millis()
            ),
        );
        *self.injected.entry(deployment.kind()).or_default() += 1;
        Ok(())
    }
}

//! What one run does, drawn from its seed: the lease kind, the size, and which faults strike
//! when. The same seed gives the same plan, so any run can be replayed.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The lease (and token source) the workers of a run use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum)]
pub enum LeaseKind {
    /// `RedisLease`, its epochs in PostgreSQL.
    Redis,
    /// `PgLease`, tokens from a PostgreSQL counter.
    Postgres,
    /// `DynamoLease`, tokens from a DynamoDB counter.
    Dynamodb,
    /// `EtcdLease` on a three-member cluster, tokens from its revisions.
    Etcd,
    /// `MySqlLease`, tokens from a MySQL (MariaDB) counter, in a database of the run's own.
    Mysql,
}

impl LeaseKind {
    /// Every kind, in the order seeds rotate through them.
    pub const ALL: [LeaseKind; 5] = [
        LeaseKind::Redis,
        LeaseKind::Postgres,
        LeaseKind::Dynamodb,
        LeaseKind::Etcd,
        LeaseKind::Mysql,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            LeaseKind::Redis => "redis",
            LeaseKind::Postgres => "postgres",
            LeaseKind::Dynamodb => "dynamodb",
            LeaseKind::Etcd => "etcd",
            LeaseKind::Mysql => "mysql",
        }
    }

    /// Where a run on this lease keeps the team's tables (its refunds and its job's row):
    /// MariaDB on the MySQL lease, as a team whose tables all live in MySQL has them,
    /// PostgreSQL on every other.
    pub fn team_database(self) -> TeamDatabase {
        match self {
            LeaseKind::Mysql => TeamDatabase::Mysql,
            _ => TeamDatabase::Postgres,
        }
    }
}

/// The SQL server a run keeps the team's tables on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TeamDatabase {
    /// PostgreSQL: the run's schema.
    Postgres,
    /// MariaDB (MySQL): the run's database, beside the MySQL lease's tables.
    Mysql,
}

/// A fault the campaign injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// SIGSTOP the worker that wrote last, past the TTL, then SIGCONT it.
    Stall,
    /// SIGKILL a worker after its gateway call for a given refund, before the confirm.
    KillAfterCall,
    /// Restart Redis (nothing persisted): lease and counters are gone.
    RedisRestart,
    /// `pg_terminate_backend` every PostgreSQL connection of the run's workers.
    PgTerminate,
    /// `KILL CONNECTION` every MySQL connection of the run's workers (a run on the MySQL
    /// lease, whose refunds are in MariaDB): a write in flight is rolled back or not, and the
    /// worker cannot tell which.
    MysqlKill,
    /// `docker pause` a store's container past the TTL, then unpause it (containers mode).
    ContainerPause,
    /// SIGKILL the etcd cluster's leader, restart it on its data once the pause has passed.
    EtcdLeaderKill,
    /// Redis behind Sentinel: the replica is made to lag, the holder is killed so that the
    /// lease changes hands on the primary alone, then the primary is killed and the sentinels
    /// promote the replica, whose counter is behind the tokens already issued.
    RedisFailover,
    /// The PostgreSQL lease on a primary and an asynchronous standby of the run's own,
    /// reached through a relay (as a virtual address): the standby is stopped once it has
    /// every write, the holder is killed so that the lease changes hands on the primary
    /// alone, then the primary is killed, the standby started and promoted, and the relay
    /// moved to it. Its counters are behind the tokens already issued.
    PgFailover,
    /// The worker that wrote last cut off from PostgreSQL past the TTL, through a relay of
    /// its own that holds every packet both ways (nothing refused, nothing answered), then
    /// healed: what it sent meanwhile arrives late, after a newer holder may have written.
    PgPartition,
    /// The worker that wrote last cut off from Redis (its lease and counters) past the TTL,
    /// the same way: it cannot renew, so the lease passes to the other worker, while its
    /// PostgreSQL writes go on.
    RedisPartition,
    /// The worker that wrote last cut off from the AWS emulator (the queue, the DynamoDB
    /// ledger, the S3 receipts, and the DynamoDB lease and counters) past the TTL, the same
    /// way: it cannot extend the message's visibility, so the job is delivered again.
    AwsPartition,
    /// The worker that wrote last cut off from one member of the etcd cluster (a minority)
    /// past the TTL, the same way: its client must reach the other two.
    EtcdPartition,
    /// The worker that wrote last cut off from MySQL (the MySQL lease and its counters) past
    /// the TTL, the same way: it cannot renew, so the lease passes to the other worker, while
    /// its PostgreSQL writes go on.
    MysqlPartition,
    /// The holder's wall clock (as the process reads it: libfaketime) set back by the
    /// fault's pause, one and a half to two TTLs, for as long, then put right: a lease judged
    /// by its holder's clock (DynamoDB's) is renewed into the past meanwhile.
    ClockBehind,
    /// The wall clocks of the workers waiting for the lease set ahead by the fault's pause,
    /// for as long, then put right: a lease judged by its taker's clock (DynamoDB's) looks
    /// expired to them while its holder still renews it.
    ClockAhead,
}

impl FaultKind {
    /// Whether it is a failover to a lagging follower.
    pub fn is_failover(self) -> bool {
        matches!(self, FaultKind::RedisFailover | FaultKind::PgFailover)
    }

    /// Every kind, in report order.
    pub const ALL: [FaultKind; 16] = [
        FaultKind::Stall,
        FaultKind::KillAfterCall,
        FaultKind::RedisRestart,
        FaultKind::PgTerminate,
        FaultKind::MysqlKill,
        FaultKind::ContainerPause,
        FaultKind::EtcdLeaderKill,
        FaultKind::RedisFailover,
        FaultKind::PgFailover,
        FaultKind::PgPartition,
        FaultKind::RedisPartition,
        FaultKind::AwsPartition,
        FaultKind::EtcdPartition,
        FaultKind::MysqlPartition,
        FaultKind::ClockBehind,
        FaultKind::ClockAhead,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Stall => "SIGSTOP past the TTL",
            FaultKind::KillAfterCall => "SIGKILL between call and confirm",
            FaultKind::RedisRestart => "Redis restart, nothing persisted",
            FaultKind::PgTerminate => "pg_terminate_backend",
            FaultKind::MysqlKill => "KILL of the workers' MySQL connections",
            FaultKind::ContainerPause => "store container paused past the TTL",
            FaultKind::EtcdLeaderKill => "etcd leader SIGKILL",
            FaultKind::RedisFailover => "Redis failover to a lagging replica",
            FaultKind::PgFailover => "PostgreSQL failover to a lagging standby",
            FaultKind::PgPartition => "worker cut off from PostgreSQL past the TTL",
            FaultKind::RedisPartition => "worker cut off from Redis past the TTL",
            FaultKind::AwsPartition => "worker cut off from the AWS emulator past the TTL",
            FaultKind::EtcdPartition => "worker cut off from one etcd member past the TTL",
            FaultKind::MysqlPartition => "worker cut off from MySQL past the TTL",
            FaultKind::ClockBehind => "holder's clock set behind by 1.5-2 TTLs",
            FaultKind::ClockAhead => "waiting workers' clocks set ahead by 1.5-2 TTLs",
        }
    }
}

/// A store whose container a [`FaultKind::ContainerPause`] freezes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PausedStore {
    /// PostgreSQL: refunds (and, for those leases, leases and counters).
    Postgres,
    /// The AWS emulator: the DynamoDB ledger and the S3 receipts.
    Aws,
}

/// One fault of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// What it does.
    pub kind: FaultKind,
    /// It strikes once this many refunds are filed (for [`FaultKind::KillAfterCall`]: the
    /// refund, by index from 0, after whose gateway call the worker is killed; for a failover,
    /// 0: the follower lags from before the run's first acquisition, so the resource's
    /// counter is first written during the lag and the promoted server has none).
    pub at: usize,
    /// How long a stall or pause lasts (for an etcd leader kill: how long the member stays
    /// down).
    pub pause: Duration,
    /// Which container a [`FaultKind::ContainerPause`] freezes.
    pub store: PausedStore,
}

/// How a run is protected: fully, or switched off in part as one of the controls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protection {
    /// Fences, and Redis counters bound to the server's history.
    Full,
    /// Fences off: every write presents one token (the control).
    FencesOff,
    /// Fences on, the Redis counter not bound to the server's history (the failover's
    /// control).
    CounterUnbound,
    /// Fences on, and a seeded bug in the lease: one token issued twice (the history
    /// checker's control).
    TokenReissued,
}

impl Protection {
    /// Every kind, in report order.
    pub const ALL: [Protection; 4] = [
        Protection::Full,
        Protection::FencesOff,
        Protection::CounterUnbound,
        Protection::TokenReissued,
    ];

    /// Its word in file names: `on`, `off` or `unchecked`.
    pub fn word(self) -> &'static str {
        match self {
            Protection::Full => "on",
            Protection::FencesOff => "off",
            Protection::CounterUnbound => "unchecked",
            Protection::TokenReissued => "reissued",
        }
    }

    /// Its name in reports.
    pub fn label(self) -> &'static str {
        match self {
            Protection::Full => "fences on",
            Protection::FencesOff => "fences off",
            Protection::CounterUnbound => "counter unbound",
            Protection::TokenReissued => "token reissued",
        }
    }
}

/// Sizes shared by every run of a campaign.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    /// Refunds per run, each 70.25 EUR.
    pub refunds: usize,
    /// The lease TTL.
    pub ttl: Duration,
}

/// The worked example's figures: 1,200 refunds (84,300.00 EUR), a 30 s TTL.
pub const WORKED_EXAMPLE: Sizing = Sizing {
    refunds: 1200,
    ttl: Duration::from_secs(30),
};

/// The amount of every refund: 1,200 of them make the 84,300.00 EUR settlement.
pub const REFUND_CENTS: i64 = 7025;

/// One run, as its seed decides it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPlan {
    /// The seed everything below comes from.
    pub seed: u64,
    /// Whether writes carry the lease's token (`false`: every write presents one token).
    pub fences: bool,
    /// Whether the Redis lease binds its counter to the server's history (`false`:
    /// `RedisLease::may_reissue_tokens`, the control of [`FaultKind::RedisFailover`]).
    pub counter_binding: bool,
    /// Whether the workers' lease hands an acquisition the token of the one before it, on
    /// every even token (`fencing_simulation::SubstitutedLease::reissuing`): the
    /// history checker's seeded bug, never in a real run.
    pub reissues_tokens: bool,
    /// The lease the workers use: seeds rotate through [`LeaseKind::ALL`].
    pub lease: LeaseKind,
    /// Sizes.
    pub sizing: Sizing,
    /// The faults, in the order they strike.
    pub faults: Vec<Fault>,
    /// Refunds each worker keeps in flight (1: one after another; more: the batch's
    /// pipeline). Not drawn from the seed: a campaign setting.
    pub concurrency: usize,
}

/// What a run's servers are, as its seed drew them: which faults can strike it.
struct Deployment {
    lease: LeaseKind,
    /// The Redis lease behind Sentinel (failed over), not on one server (restarted).
    behind_sentinel: bool,
    /// The PostgreSQL lease on a primary and a standby (failed over).
    with_standby: bool,
    /// The stores in containers (paused).
    containers: bool,
}

impl Deployment {
    /// Whether a fault of `kind` can strike a run so deployed.
    fn suffers(&self, kind: FaultKind) -> bool {
        let lease = self.lease;
        match kind {
            FaultKind::RedisRestart | FaultKind::RedisPartition => {
                lease == LeaseKind::Redis && !self.behind_sentinel
            }
            FaultKind::RedisFailover => self.behind_sentinel,
            FaultKind::PgFailover => self.with_standby,
            FaultKind::EtcdLeaderKill | FaultKind::EtcdPartition => lease == LeaseKind::Etcd,
            FaultKind::MysqlPartition | FaultKind::MysqlKill => lease == LeaseKind::Mysql,
            // A run whose team tables are in MySQL has nothing of its own in PostgreSQL.
            FaultKind::PgTerminate | FaultKind::PgPartition => {
                lease.team_database() == TeamDatabase::Postgres
            }
            FaultKind::ContainerPause => self.containers,
            _ => true,
        }
    }
}

impl RunPlan {
    /// The plan of `seed` on the lease the seed rotates to ([`LeaseKind::ALL`]): see
    /// [`Self::on_lease`].
    pub fn from_seed(seed: u64, fences: bool, sizing: Sizing, containers: bool) -> Self {
        let lease = LeaseKind::ALL[(seed % LeaseKind::ALL.len() as u64) as usize];
        Self::on_lease(seed, lease, fences, sizing, containers)
    }

    /// The plan of `seed` on `lease`. Every eligible fault kind strikes with probability one
    /// half, at least one always. A run on the Redis lease runs either on one server, restarted
    /// in the run and cut off from a worker by a partition, or behind Sentinel, failed over in
    /// the run (one half each); half the runs on the PostgreSQL lease keep it on a primary with
    /// a standby, failed over in the run; a run on the etcd lease always has its leader killed,
    /// and one on the MySQL lease a worker cut off from MySQL (its refunds and job row are in
    /// MariaDB: no PostgreSQL fault strikes it, a `KILL` of its MySQL connections may);
    /// a container pause strikes only where `containers` says the stores run in containers.
    /// Runs without fences always include a stall: it is the fault a fence is for.
    pub fn on_lease(
        seed: u64,
        lease: LeaseKind,
        fences: bool,
        sizing: Sizing,
        containers: bool,
    ) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let deployment = Deployment {
            lease,
            behind_sentinel: lease == LeaseKind::Redis && rng.random_bool(0.5),
            with_standby: lease == LeaseKind::Postgres && rng.random_bool(0.5),
            containers,
        };
        let n = sizing.refunds.max(10);
        let mut faults = Vec::new();
        for kind in FaultKind::ALL {
            let eligible = deployment.suffers(kind);
            let always = matches!(
                kind,
                FaultKind::RedisRestart
                    | FaultKind::RedisFailover
                    | FaultKind::RedisPartition
                    | FaultKind::PgFailover
                    | FaultKind::EtcdLeaderKill
                    | FaultKind::MysqlPartition
            ) || (kind == FaultKind::Stall && !fences);
            let drawn = rng.random_bool(0.5);
            if eligible && (always || drawn) {
                let ttl_ms = sizing.ttl.as_millis() as u64;
                faults.push(Fault {
                    kind,
                    at: rng.random_range(n / 10..=n / 2),
                    pause: Duration::from_millis(ttl_ms + rng.random_range(ttl_ms / 2..=ttl_ms)),
                    store: if rng.random_bool(0.5)
                        && lease.team_database() == TeamDatabase::Postgres
                    {
                        PausedStore::Postgres
                    } else {
                        PausedStore::Aws
                    },
                });
            }
        }
        if faults.is_empty() {
            let ttl_ms = sizing.ttl.as_millis() as u64;
            faults.push(Fault {
                kind: FaultKind::Stall,
                at: rng.random_range(n / 10..=n / 2),
                pause: Duration::from_millis(ttl_ms * 3 / 2),
                store: PausedStore::Postgres,
            });
        }
        // Half the failovers strike a resource first used during the lag (drawn apart, so the
        // other faults of a seed stay as they were).
        let fresh = StdRng::seed_from_u64(seed ^ 0xf4e5_4c0a).random_bool(0.5);
        for fault in &mut faults {
            if fresh && fault.kind.is_failover() {
                fault.at = 0;
            }
        }
        faults.sort_by_key(|f| f.at);
        RunPlan {
            seed,
            fences,
            counter_binding: true,
            reissues_tokens: false,
            lease,
            sizing,
            faults,
            concurrency: 1,
        }
    }

    /// The control of the failover: the first plan from `seed` on the Redis lease behind
    /// Sentinel, with fences on and the counter not bound to the server's history, so the
    /// promoted replica issues again a token issued before. The campaign must find it.
    pub fn unchecked_failover(seed: u64, sizing: Sizing) -> Self {
        let plan = Self::first_with(seed, LeaseKind::Redis, FaultKind::RedisFailover, sizing);
        RunPlan {
            counter_binding: false,
            ..plan
        }
    }

    /// The history checker's control: the first plan from `seed` on the PostgreSQL lease with
    /// a stall past the TTL (so the lease passes from one holder to the next), its lease
    /// reissuing tokens. Only the history checker can see that two acquisitions were handed
    /// one token; the campaign must find it.
    pub fn reissued_token(seed: u64, sizing: Sizing) -> Self {
        let plan = Self::first_with(seed, LeaseKind::Postgres, FaultKind::Stall, sizing);
        RunPlan {
            reissues_tokens: true,
            ..plan
        }
    }

    /// The first fenced plan from `seed` on `lease` that has a fault of `kind` (one plan in
    /// two or more has each kind a control needs).
    fn first_with(seed: u64, lease: LeaseKind, kind: FaultKind, sizing: Sizing) -> Self {
        (seed..)
            .map(|seed| Self::on_lease(seed, lease, true, sizing, false))
            .find(|plan| plan.has(kind))
            .expect("some seed draws the fault")
    }

    /// How the run is protected.
    pub fn protection(&self) -> Protection {
        match (self.fences, self.counter_binding, self.reissues_tokens) {
            (false, _, _) => Protection::FencesOff,
            (true, false, _) => Protection::CounterUnbound,
            (true, true, true) => Protection::TokenReissued,
            (true, true, false) => Protection::Full,
        }
    }

    /// Whether the plan's failover strikes a resource first used during the lag (its follower
    /// lags from before the first acquisition).
    pub fn fails_over_a_fresh_resource(&self) -> bool {
        self.faults
            .iter()
            .any(|f| f.kind.is_failover() && f.at == 0)
    }

    /// Whether a fault of `kind` is planned.
    pub fn has(&self, kind: FaultKind) -> bool {
        self.faults.iter().any(|f| f.kind == kind)
    }

    /// This plan with each worker keeping `concurrency` refunds in flight.
    pub fn with_concurrency(self, concurrency: usize) -> Self {
        RunPlan {
            concurrency,
            ..self
        }
    }

    /// The worked example at its full figures (1,200 refunds, a 30 s TTL): the plan of `seed`,
    /// with the holder stalled once refund r_0815 is reached, for one and a half TTLs (its
    /// renewal stops with it, so the lease passes to the other worker), whatever else the seed
    /// adds.
    pub fn worked_example(seed: u64, containers: bool) -> Self {
        let mut plan = Self::from_seed(seed, true, WORKED_EXAMPLE, containers);
        plan.faults.retain(|f| f.kind != FaultKind::Stall);
        plan.faults.push(Fault {
            kind: FaultKind::Stall,
            at: 814,
            pause: WORKED_EXAMPLE.ttl * 3 / 2,
            store: PausedStore::Postgres,
        });
        plan.faults.sort_by_key(|f| f.at);
        plan
    }

    /// The refund key at `index` (from 0): `r_0001`, `r_0002`, ...
    pub fn refund_key(index: usize) -> String {
        format!("r_{:04}", index + 1)
    }

    /// The total the run settles, in cents.
    pub fn total_cents(&self) -> i64 {
        self.sizing.refunds as i64 * REFUND_CENTS
    }
}

impl fmt::Display for RunPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} ({} lease, fences {}, {} refunds, TTL {} ms)",
            self.seed,
            self.lease.name(),
            if self.fences { "on" } else { "off" },
            self.sizing.refunds,
            self.sizing.ttl.as_millis()
        )?;
        if self.concurrency > 1 {
            write!(f, " [pipelined, {} in flight]", self.concurrency)?;
        }
        if !self.counter_binding {
            f.write_str(" [counter unbound]")?;
        }
        if self.reissues_tokens {
            f.write_str(" [token reissued]")?;
        }
        f.write_str(":")?;
        for fault in &self.faults {
            match fault.kind {
                FaultKind::KillAfterCall => write!(
                    f,
                    " [{} at {}]",
                    fault.kind.name(),
                    Self::refund_key(fault.at)
                )?,
                FaultKind::Stall
                | FaultKind::ContainerPause
                | FaultKind::EtcdLeaderKill
                | FaultKind::ClockBehind
                | FaultKind::ClockAhead => write!(
                    f,
                    " [{} after {} filed, {} ms{}]",
                    fault.kind.name(),
                    fault.at,
                    fault.pause.as_millis(),
                    match (fault.kind, fault.store) {
                        (FaultKind::ContainerPause, PausedStore::Postgres) => ", PostgreSQL",
                        (FaultKind::ContainerPause, PausedStore::Aws) => ", the AWS emulator",
                        _ => "",
                    }
                )?,
                _ => write!(f, " [{} after {} filed]", fault.kind.name(), fault.at)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizing() -> Sizing {
        Sizing {
            refunds: 100,
            ttl: Duration::from_millis(1000),
        }
    }

    #[test]
    fn failovers_strike_fresh_resources_and_kept_ones() {
        let failing_over: Vec<RunPlan> = (0..200)
            .map(|seed| RunPlan::from_seed(seed, true, sizing(), false))
            .filter(|plan| plan.faults.iter().any(|f| f.kind.is_failover()))
            .collect();
        let fresh = failing_over
            .iter()
            .filter(|plan| plan.fails_over_a_fresh_resource())
            .count();
        assert!(
            fresh > 0 && fresh < failing_over.len(),
            "{fresh} of {}",
            failing_over.len()
        );
    }

    /// A run whose team tables are in MariaDB has nothing of its own in PostgreSQL: no fault
    /// strikes PostgreSQL there, and a container pause falls on the AWS emulator.
    #[test]
    fn runs_on_the_mysql_lease_suffer_mysql_faults_and_none_of_postgresql() {
        let plans: Vec<RunPlan> = (0..200)
            .map(|seed| RunPlan::on_lease(seed, LeaseKind::Mysql, true, sizing(), true))
            .collect();
        for plan in &plans {
            assert!(plan.has(FaultKind::MysqlPartition), "{plan}");
            assert!(
                plan.faults.iter().all(|f| !matches!(
                    (f.kind, f.store),
                    (FaultKind::PgTerminate | FaultKind::PgPartition, _)
                        | (FaultKind::ContainerPause, PausedStore::Postgres)
                )),
                "{plan}"
            );
        }
        let killed = plans.iter().filter(|p| p.has(FaultKind::MysqlKill)).count();
        assert!(killed > 0 && killed < plans.len(), "{killed} of 200");
    }

    #[test]
    fn a_seed_gives_one_plan() {
        for seed in 0..50 {
            let plan = RunPlan::from_seed(seed, true, sizing(), false);
            assert_eq!(plan, RunPlan::from_seed(seed, true, sizing(), false));
            assert!(!plan.faults.is_empty());
            // A failover of a fresh resource lags from the start (0).
            assert!(
                plan.faults
                    .iter()
                    .all(|f| (10..=50).contains(&f.at) || (f.kind.is_failover() && f.at == 0))
            );
            assert!(plan.faults.iter().all(|f| f.pause > sizing().ttl));
            let restarts = plan
                .faults
                .iter()
                .any(|f| f.kind == FaultKind::RedisRestart);
            assert_eq!(
                restarts || plan.has(FaultKind::RedisFailover),
                plan.lease == LeaseKind::Redis
            );
            assert!(
                !(restarts && plan.has(FaultKind::RedisFailover)),
                "one Redis deployment a run"
            );
            assert!(!plan.has(FaultKind::PgFailover) || plan.lease == LeaseKind::Postgres);
            assert!(!plan.has(FaultKind::EtcdPartition) || plan.lease == LeaseKind::Etcd);
            assert_eq!(
                plan.has(FaultKind::MysqlPartition),
                plan.lease == LeaseKind::Mysql
            );
            assert!(!plan.has(FaultKind::MysqlKill) || plan.lease == LeaseKind::Mysql);
            assert_eq!(
                plan.lease.team_database() == TeamDatabase::Mysql,
                plan.lease == LeaseKind::Mysql
            );
            assert_eq!(
                plan.faults
                    .iter()
                    .any(|f| f.kind == FaultKind::EtcdLeaderKill),
                plan.lease == LeaseKind::Etcd
            );
            assert!(
                plan.faults
                    .iter()
                    .all(|f| f.kind != FaultKind::ContainerPause)
            );
        }
    }

    #[test]
    fn half_the_redis_runs_fail_over_and_the_control_binds_no_counter() {
        let redis: Vec<RunPlan> = (0..200)
            .map(|seed| RunPlan::on_lease(seed, LeaseKind::Redis, true, sizing(), false))
            .collect();
        let failing_over = redis
            .iter()
            .filter(|p| p.has(FaultKind::RedisFailover))
            .count();
        assert!((70..=130).contains(&failing_over), "{failing_over} of 200");
        let postgres_failing_over = (0..200)
            .map(|seed| RunPlan::on_lease(seed, LeaseKind::Postgres, true, sizing(), false))
            .filter(|p| p.has(FaultKind::PgFailover))
            .count();
        assert!(
            (70..=130).contains(&postgres_failing_over),
            "{postgres_failing_over} of 200"
        );
        assert!(redis.iter().all(|p| p.counter_binding));
        let control = RunPlan::unchecked_failover(0, sizing());
        assert!(
            control.has(FaultKind::RedisFailover) && control.fences && !control.counter_binding
        );
        assert_eq!(control.lease, LeaseKind::Redis);
        assert_eq!(
            RunPlan::unchecked_failover(control.seed, sizing()),
            control,
            "replayed from its own seed"
        );
        assert!(control.to_string().contains("counter unbound"));
        assert_eq!(control.protection(), Protection::CounterUnbound);
    }

    #[test]
    fn the_history_checkers_control_stalls_on_the_postgres_lease_with_a_token_reissued() {
        let control = RunPlan::reissued_token(0, sizing());
        assert!(control.has(FaultKind::Stall) && control.fences && control.counter_binding);
        assert_eq!(control.lease, LeaseKind::Postgres);
        assert_eq!(control.protection(), Protection::TokenReissued);
        assert_eq!(RunPlan::reissued_token(control.seed, sizing()), control);
        assert!(control.to_string().contains("token reissued"));
        let single_redis = (0..40)
            .map(|seed| RunPlan::on_lease(seed, LeaseKind::Redis, true, sizing(), false))
            .filter(|p| !p.has(FaultKind::RedisFailover));
        for plan in single_redis {
            assert!(plan.has(FaultKind::RedisPartition), "{plan}");
        }
    }

    #[test]
    fn runs_without_fences_always_stall_and_seeds_rotate_the_lease() {
        for seed in 0..30 {
            let plan = RunPlan::from_seed(seed, false, sizing(), true);
            assert!(plan.faults.iter().any(|f| f.kind == FaultKind::Stall));
            assert_eq!(
                plan.lease,
                LeaseKind::ALL[(seed % LeaseKind::ALL.len() as u64) as usize]
            );
        }
        assert_eq!(RunPlan::refund_key(814), "r_0815");
        let example = RunPlan::worked_example(7, false);
        assert_eq!(example.sizing, WORKED_EXAMPLE);
        assert_eq!(example.total_cents(), 8_430_000);
        let stalls: Vec<_> = example
            .faults
            .iter()
            .filter(|f| f.kind == FaultKind::Stall)
            .collect();
        assert_eq!(stalls.len(), 1);
        assert_eq!(
            (stalls[0].at, stalls[0].pause),
            (814, Duration::from_secs(45))
        );
    }
}

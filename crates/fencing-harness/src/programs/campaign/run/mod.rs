//! One run: its stores, its gateway and workers as processes, its faults (`faults`, one room
//! per family), its audit.

mod faults;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fencing_harness::audit::{self, AuditReport, WorkerReports};
use fencing_harness::plan::{Fault, FaultKind, RunPlan, TeamDatabase};
use fencing_harness::signal;
use fencing_harness::stores::{self, Clients, RunNames};
use fencing_test_support::relay::Relay;
use fencing_test_support::services::{EtcdCluster, MotoServer, RedisServer, TestContainer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use super::picture::RunPicture;
use faults::{Failover, FakedClock, LONGEST_LAG, Link, start_failover, wait_until_stopped};

/// Where the services of a campaign are.
pub(crate) struct Services {
    pub(crate) database_url: String,
    /// MySQL or MariaDB, for the MySQL lease.
    pub(crate) mysql_url: String,
    pub(crate) aws_endpoint: String,
    /// Redis of the campaign's own, so that it can be restarted.
    pub(crate) redis: RedisServer,
    /// A three-member etcd cluster of the campaign's own, so that its leader can be killed.
    pub(crate) etcd: EtcdCluster,
    /// The AWS emulator of the campaign's own outside containers mode, held so that it
    /// serves until the campaign ends.
    pub(crate) _moto: Option<MotoServer>,
    /// The containers of PostgreSQL and the AWS emulator, in containers mode.
    pub(crate) containers: Option<(TestContainer, TestContainer)>,
    /// This executable, whose `worker` and `gateway` commands the runs start.
    pub(crate) program: PathBuf,
}

/// What one run came to.
#[derive(Debug)]
pub(crate) struct RunResult {
    pub(crate) plan: RunPlan,
    pub(crate) id: String,
    pub(crate) injected: BTreeMap<FaultKind, usize>,
    pub(crate) audit: AuditReport,
    /// How many times the job's message was received (1: never redelivered).
    pub(crate) deliveries: usize,
    /// The writes whose answer a worker lost, and how each ended.
    pub(crate) unknown_outcomes: UnknownOutcomes,
    pub(crate) wall: Duration,
    /// When it ended.
    pub(crate) ended: Instant,
    /// Problems of the run itself (a worker that failed, a run past its deadline).
    pub(crate) incidents: Vec<String>,
    /// Each failover the run made, timed.
    pub(crate) failovers: Vec<FailoverTiming>,
    pub(crate) dir: PathBuf,
    /// What the campaign saw of the run, to be drawn.
    pub(crate) picture: RunPicture,
    /// How long each hand-over of the lease took, from the history.
    pub(crate) handovers: Vec<Duration>,
}

impl RunResult {
    /// Draws the run's picture into `file`.
    pub(crate) fn draw(&self, file: &Path) -> Result<(), RunError> {
        fencing_timeline::Picture::draw(self.picture.timeline())?.save(file)?;
        Ok(())
    }

    /// Whether the run passed: its audit found nothing and nothing went wrong with the run.
    pub(crate) fn passed(&self) -> bool {
        self.audit.violations.is_empty() && self.incidents.is_empty()
    }
}

/// Writes whose answer a worker lost (an attempt sent, its outcome never seen), and how each
/// ended, as the workers' `unknown` and `settled` lines say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UnknownOutcomes {
    /// Writes with an attempt whose outcome was lost.
    pub(crate) unknown: usize,
    /// Settled as applied: the retry landed, or found that the lost attempt had.
    pub(crate) applied: usize,
    /// Settled as refused: a newer holder's fence (or the record's state) by then.
    pub(crate) refused: usize,
    /// Returned ambiguous to the worker: the library gave up knowing.
    pub(crate) still_unknown: usize,
}

impl UnknownOutcomes {
    /// Counts a worker's `line`, if it is about a write's unknown outcome.
    fn record(&mut self, line: &str) {
        if line.starts_with("unknown ") {
            self.unknown += 1;
        } else if line.starts_with("settled ") {
            match line.rsplit_once(": ").map(|(_, how)| how) {
                Some("applied") => self.applied += 1,
                Some("still unknown") => self.still_unknown += 1,
                _ => self.refused += 1,
            }
        }
    }

    /// The sum of both.
    pub(crate) fn add(&mut self, other: &UnknownOutcomes) {
        self.unknown += other.unknown;
        self.applied += other.applied;
        self.refused += other.refused;
        self.still_unknown += other.still_unknown;
    }
}

/// A failover as the campaign saw it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FailoverTiming {
    /// Which.
    pub(crate) kind: FaultKind,
    /// From the primary's kill until the server that lagged took writes (every sentinel named
    /// the replica; the standby was promoted and the relay moved to it).
    pub(crate) promoted: Duration,
    /// From the primary's kill until a worker reported the first token issued after it (the
    /// promotion, the killed holder's lease running out on the replica, the new epoch).
    pub(crate) first_token: Option<Duration>,
    /// Whether the resource was first used during the lag: the promoted server had no
    /// counter for it at all.
    pub(crate) fresh_resource: bool,
}

enum Event {
    Line(String, String),
    Exited(String, Option<i32>),
    /// The replica has lagged as long as it may: the failover is due.
    LagEnded,
}

struct Worker {
    pid: u32,
    killed: bool,
    /// Its own ways to the servers a run cuts a worker off from.
    relays: Vec<(Link, Arc<Relay>)>,
    /// Its wall clock, in a run with clock faults.
    clock: Option<Arc<FakedClock>>,
}

type RunError = Box<dyn std::error::Error + Send + Sync>;

/// Runs `plan`, keeping its logs in `dir`.
pub(crate) async fn run(
    plan: &RunPlan,
    services: &mut Services,
    dir: &Path,
) -> Result<RunResult, RunError> {
    let started = Instant::now();
    std::fs::create_dir_all(dir)?;
    let names = RunNames::fresh(plan.seed);
    let clients = connect(plan, services).await?;
    stores::create(&names, &clients, plan, true).await?;

    let journal = dir.join("journal.jsonl");
    let (gateway, gateway_addr) = start_gateway(&services.program, &journal).await?;
    let (events, mut inbox) = mpsc::unbounded_channel();
    let failover = start_failover(plan, &names).await?;
    let spawner = Spawner {
        lease_args: lease_args(services, failover.as_ref()),
        services,
        plan,
        names: &names,
        gateway: gateway_addr,
        dir,
        events,
        next: 0,
    };
    let mut watch = Watch::start(plan, &clients, &names, spawner, failover, started, dir)?;
    while !watch.workers.is_empty() {
        match watch.next_event(&mut inbox).await {
            Some(Event::Line(name, line)) => watch.on_line(name, line).await?,
            Some(Event::Exited(name, code)) => watch.on_exit(&name, code),
            Some(Event::LagEnded) => {}
            None => break,
        }
        watch.fail_over_when_due()?;
        watch.strike_due_faults().await?;
    }
    let Watch {
        failover,
        injected,
        incidents,
        failovers,
        deliveries,
        unknown_outcomes,
        reported,
        picture,
        ..
    } = watch;
    drop(gateway);
    drop(failover);
    let handovers = reported.history.handovers();
    let audit = audit::audit(&names, plan, &clients, &journal, &reported).await?;
    let result = RunResult {
        plan: plan.clone(),
        id: names.id().to_owned(),
        injected,
        audit,
        deliveries,
        unknown_outcomes,
        wall: started.elapsed(),
        ended: Instant::now(),
        incidents,
        failovers,
        dir: dir.to_owned(),
        picture,
        handovers,
    };
    if result.passed() {
        drop_stores(&names, &clients, plan).await?;
    } else {
        // Kept with the run's logs: what went wrong, in time.
        result.draw(&dir.join("timeline.svg"))?;
    }
    Ok(result)
}

/// The campaign's clients for a run of `plan`: PostgreSQL and the AWS emulator, and MySQL where
/// the run keeps the team's tables there.
async fn connect(plan: &RunPlan, services: &Services) -> Result<Clients, RunError> {
    let clients = Clients::connect(
        &services.database_url,
        "harness_campaign",
        &services.aws_endpoint,
    )
    .await?;
    Ok(match plan.lease.team_database() {
        TeamDatabase::Mysql => clients.with_mysql(&services.mysql_url, None).await?,
        TeamDatabase::Postgres => clients,
    })
}

/// Drops what a passed run kept: its schema, its AWS resources, its MySQL database.
async fn drop_stores(names: &RunNames, clients: &Clients, plan: &RunPlan) -> Result<(), RunError> {
    stores::drop_schema(names, &clients.pool).await?;
    stores::drop_aws(names, clients, plan.lease).await?;
    if let Some(pool) = &clients.mysql {
        stores::drop_mysql_database(names, pool).await?;
    }
    Ok(())
}

/// How a worker reaches the servers of the run's lease: the campaign's Redis, unless the run
/// fails Redis over behind sentinels of its own, and the failover's servers.
fn lease_args(services: &Services, failover: Option<&Failover>) -> Vec<String> {
    let mut args = match failover {
        Some(Failover::Redis(_)) => Vec::new(),
        _ => vec!["--redis-url".to_owned(), services.redis.url()],
    };
    args.extend(["--mysql-url".to_owned(), services.mysql_url.clone()]);
    args.extend(failover.into_iter().flat_map(Failover::worker_args));
    args
}

/// A run under way, as the campaign watches it: its workers, the faults still to strike, and
/// what it has seen so far.
struct Watch<'a> {
    plan: &'a RunPlan,
    clients: &'a Clients,
    names: &'a RunNames,
    spawner: Spawner<'a>,
    workers: HashMap<String, Worker>,
    failover: Option<Failover>,
    started: Instant,
    deadline: Instant,
    /// The refund after whose gateway call a worker is killed, if the plan says so.
    kill_target: Option<String>,
    /// The faults not struck yet, in order.
    pending: Vec<Fault>,
    injected: BTreeMap<FaultKind, usize>,
    incidents: Vec<String>,
    filed: usize,
    deliveries: usize,
    unknown_outcomes: UnknownOutcomes,
    reported: WorkerReports,
    /// The holder, as far as the campaign can tell: the last to acquire or file.
    last_writer: Option<String>,
    /// Since when the replica lags, until the failover; whether the lease changed hands then.
    lagging: Option<(Instant, bool)>,
    failovers: Vec<FailoverTiming>,
    /// When the primary was killed, until the first token after it.
    awaiting_token: Option<Instant>,
    log: std::fs::File,
    picture: RunPicture,
}

impl<'a> Watch<'a> {
    /// Starts the run's two workers.
    fn start(
        plan: &'a RunPlan,
        clients: &'a Clients,
        names: &'a RunNames,
        mut spawner: Spawner<'a>,
        failover: Option<Failover>,
        started: Instant,
        dir: &Path,
    ) -> Result<Self, RunError> {
        let kill_target = plan
            .faults
            .iter()
            .find(|f| f.kind == FaultKind::KillAfterCall)
            .map(|f| RunPlan::refund_key(f.at));
        let mut picture = RunPicture::new(plan);
        let mut failover = failover;
        // A failover of a fresh resource: the follower lags before any worker starts, so the
        // resource's counter is written on the primary alone from its first acquisition.
        let lagging = match failover.as_mut() {
            Some(deployment) if plan.fails_over_a_fresh_resource() => {
                tokio::task::block_in_place(|| deployment.lag())?;
                let what = format!("{} {}", deployment.server(), deployment.follower());
                picture.service_fault(
                    started.elapsed(),
                    &format!("{what} made to lag before the resource's first acquisition"),
                );
                Some((Instant::now(), false))
            }
            _ => None,
        };
        let mut workers = HashMap::new();
        for _ in 0..2 {
            let (name, worker) = spawner.spawn(kill_target.as_deref())?;
            workers.insert(name, worker);
        }
        Ok(Watch {
            plan,
            clients,
            names,
            spawner,
            workers,
            failover,
            started,
            deadline: started + run_budget(plan),
            kill_target,
            pending: plan
                .faults
                .iter()
                .filter(|f| f.kind != FaultKind::KillAfterCall)
                .filter(|f| lagging.is_none() || !f.kind.is_failover())
                .cloned()
                .collect(),
            injected: BTreeMap::new(),
            incidents: Vec::new(),
            filed: 0,
            deliveries: 0,
            unknown_outcomes: UnknownOutcomes::default(),
            reported: WorkerReports::default(),
            last_writer: None,
            lagging,
            failovers: Vec::new(),
            awaiting_token: None,
            log: std::fs::File::create(dir.join("events.log"))?,
            picture,
        })
    }

    /// The next event, or the end of a lag; `None` when the workers' output ended, or past
    /// the run's deadline (the workers then killed, an incident noted).
    async fn next_event(&mut self, inbox: &mut mpsc::UnboundedReceiver<Event>) -> Option<Event> {
        let wake = self.lagging.map_or(self.deadline, |(since, _)| {
            (since + LONGEST_LAG).min(self.deadline)
        });
        match tokio::time::timeout_at(wake.into(), inbox.recv()).await {
            Ok(event) => event,
            Err(_) if Instant::now() < self.deadline => Some(Event::LagEnded),
            Err(_) => {
                self.incidents.push(format!(
                    "past its deadline of {} s with {} filed: workers killed",
                    run_budget(self.plan).as_secs(),
                    self.filed
                ));
                for worker in self.workers.values() {
                    signal("KILL", worker.pid);
                }
                None
            }
        }
    }

    /// A line of worker `name`'s output: logged, drawn, counted; the kill after a call
    /// struck when it names the target.
    async fn on_line(&mut self, name: String, line: String) -> Result<(), RunError> {
        use std::io::Write;
        let elapsed = self.started.elapsed();
        writeln!(self.log, "{:>7} {name}: {line}", elapsed.as_millis())?;
        self.picture.line(elapsed, &name, &line);
        if line.starts_with("filed ") {
            self.filed += 1;
        }
        if line.starts_with("received ") {
            self.deliveries += 1;
        }
        self.unknown_outcomes.record(&line);
        self.reported.record(&line);
        if line.starts_with("acquired ") {
            if let Some(killed_at) = self.awaiting_token.take()
                && let Some(failover) = self.failovers.last_mut()
            {
                failover.first_token = Some(killed_at.elapsed());
            }
            if let Some((_, handed_over)) = &mut self.lagging {
                *handed_over = true;
            }
        }
        if line.starts_with("filed ") || line.starts_with("acquired ") {
            self.last_writer = Some(name.clone());
        }
        if let Some(key) = line.strip_prefix("called ")
            && Some(key) == self.kill_target.as_deref()
            && let Some(worker) = self.workers.get(&name)
            && !worker.killed
        {
            // The worker stops itself right after this line; kill it there.
            wait_until_stopped(worker.pid).await;
            self.kill_and_replace(&name, self.started.elapsed())?;
            *self.injected.entry(FaultKind::KillAfterCall).or_default() += 1;
        }
        Ok(())
    }

    /// Worker `name` exited: an incident unless it was killed or exited cleanly.
    fn on_exit(&mut self, name: &str, code: Option<i32>) {
        self.picture.exited(self.started.elapsed(), name);
        if let Some(worker) = self.workers.remove(name)
            && !worker.killed
            && code != Some(0)
        {
            self.incidents
                .push(format!("worker {name} exited with {code:?}"));
        }
    }
}

/// Generous: a healthy run takes a fraction of it.
fn run_budget(plan: &RunPlan) -> Duration {
    let pauses: Duration = plan.faults.iter().map(|f| f.pause).sum();
    Duration::from_millis(plan.sizing.refunds as u64 * 150)
        + pauses
        + plan.sizing.ttl * 10
        + Duration::from_secs(60)
}

struct Spawner<'a> {
    services: &'a mut Services,
    plan: &'a RunPlan,
    names: &'a RunNames,
    gateway: String,
    dir: &'a Path,
    events: mpsc::UnboundedSender<Event>,
    /// How a worker reaches the servers of the run's lease.
    lease_args: Vec<String>,
    next: u8,
}

impl Spawner<'_> {
    /// Starts the next worker (A, B, C, ...), its output turned into events.
    fn spawn(&mut self, stop_after_call: Option<&str>) -> Result<(String, Worker), RunError> {
        let name = char::from(b'A' + self.next % 26).to_string();
        self.next += 1;
        let mut relays = Vec::new();
        let routes = self.routes(&mut relays)?;
        let mut command = Command::new(&self.services.program);
        command
            .arg("worker")
            .args(["--name", &name, "--run", self.names.id()])
            .args(["--lease", self.plan.lease.name()])
            .args(["--ttl-ms", &self.plan.sizing.ttl.as_millis().to_string()])
            .args(["--fences", switch(self.plan.fences)])
            .args(routes)
            .args(["--counter-binding", switch(self.plan.counter_binding)])
            .args(["--reissue-tokens", switch(self.plan.reissues_tokens)])
            .args(["--gateway", &self.gateway])
            .args(["--concurrency", &self.plan.concurrency.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(
                self.dir.join(format!("{name}.stderr")),
            )?)
            .kill_on_drop(true);
        if let Some(key) = stop_after_call {
            command.args(["--stop-after-call", key]);
        }
        let clock = [FaultKind::ClockBehind, FaultKind::ClockAhead]
            .into_iter()
            .any(|kind| self.plan.has(kind))
            .then(|| FakedClock::start(&mut command, self.dir, &name).map(Arc::new))
            .transpose()?;
        let mut child: Child = command.spawn()?;
        let pid = child.id().ok_or("a worker that exited at once")?;
        let stdout = child.stdout.take().ok_or("no worker stdout")?;
        let events = self.events.clone();
        let worker_name = name.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = events.send(Event::Line(worker_name.clone(), line));
            }
            let code = child.wait().await.ok().and_then(|s| s.code());
            let _ = events.send(Event::Exited(worker_name, code));
        });
        Ok((
            name,
            Worker {
                pid,
                killed: false,
                relays,
                clock,
            },
        ))
    }

    /// How a new worker reaches each server, as its command line says: directly, or, in a run
    /// that cuts a worker off from one, through a relay of its own (added to `relays`).
    fn routes(&self, relays: &mut Vec<(Link, Arc<Relay>)>) -> Result<Vec<String>, RunError> {
        let services = &self.services;
        let redis_url = services.redis.url();
        let redis_relayed = self.relayed(Link::Redis, &redis_url, relays)?;
        let mysql_relayed = self.relayed(Link::Mysql, &services.mysql_url, relays)?;
        let mut etcd = services.etcd.endpoints();
        etcd[0] = self.relayed(Link::Etcd, &etcd[0], relays)?;
        let mut routes = vec![
            "--database-url".to_owned(),
            self.relayed(Link::Postgres, &services.database_url, relays)?,
            "--aws-endpoint".to_owned(),
            self.relayed(Link::Aws, &services.aws_endpoint, relays)?,
            "--etcd-endpoints".to_owned(),
            etcd.join(","),
        ];
        routes.extend(self.lease_args.iter().map(|arg| {
            if *arg == redis_url {
                redis_relayed.clone()
            } else if *arg == services.mysql_url {
                mysql_relayed.clone()
            } else {
                arg.clone()
            }
        }));
        Ok(routes)
    }

    /// Where a new worker reaches the server at `url` (on `127.0.0.1:<port>`): directly, or,
    /// in a run that cuts a worker off from it, through a relay of its own (added to `relays`).
    fn relayed(
        &self,
        link: Link,
        url: &str,
        relays: &mut Vec<(Link, Arc<Relay>)>,
    ) -> Result<String, RunError> {
        if !self.plan.has(link.fault()) {
            return Ok(url.to_owned());
        }
        let port = url
            .split_once("127.0.0.1:")
            .map(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|port| port?.parse::<u16>().ok())
            .ok_or_else(|| format!("cannot route {url} through a relay: no 127.0.0.1:<port>"))?;
        let relay = Relay::start(port)?;
        let relayed = url.replacen(
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{}", relay.port()),
            1,
        );
        relays.push((link, Arc::new(relay)));
        Ok(relayed)
    }
}

/// A switch as the worker's command line takes it.
fn switch(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

async fn start_gateway(program: &Path, journal: &Path) -> Result<(Child, String), RunError> {
    let mut child = Command::new(program)
        .args(["gateway", "--journal"])
        .arg(journal)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no gateway stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .map_err(|_| "the gateway did not start within 10 s")??
        .ok_or("the gateway exited before listening")?;
    let addr = line
        .strip_prefix("listening ")
        .ok_or_else(|| format!("the gateway said {line:?}"))?
        .to_owned();
    Ok((child, addr))
}

//! One case of the settlement at scale: its stores made, its processes run (and faulted),
//! its audit and its measures.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencing_harness::merchants::{self, ScaleAudit, Work};
use fencing_harness::plan::LeaseKind;
use fencing_harness::queue::JobQueue;
use fencing_harness::stores::{self, Clients, RunNames};
use sqlx::AssertSqlSafe;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::{Args, Services};

/// What one case runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Case {
    pub(crate) work: Work,
    pub(crate) workers: u16,
    pub(crate) lease: LeaseKind,
    /// How long the gateway takes per call.
    pub(crate) latency_ms: u64,
    /// One worker stopped past its TTL (then resumed) and another killed (and replaced)
    /// mid-run.
    pub(crate) faults: bool,
}

impl Case {
    /// `<merchants>x<refunds>[,w<workers>][,<lease>][,<n>ms][,faults]`.
    pub(crate) fn parse(text: &str) -> Result<Case, String> {
        let mut parts = text.split(',');
        let work = parts.next().and_then(parse_work).ok_or_else(|| {
            format!("{text:?}: the work is <merchants>x<refunds>, at most 9999x999999")
        })?;
        let mut case = Case {
            work,
            workers: 1,
            lease: LeaseKind::Redis,
            latency_ms: 0,
            faults: false,
        };
        for part in parts {
            let workers = part.strip_prefix('w').and_then(|n| n.parse().ok());
            let latency = part.strip_suffix("ms").and_then(|n| n.parse().ok());
            match (part, workers, latency) {
                (_, Some(w @ 1..=32), _) => case.workers = w,
                (_, _, Some(ms @ 0..=1000)) => case.latency_ms = ms,
                ("faults", _, _) => case.faults = true,
                ("redis", _, _) => case.lease = LeaseKind::Redis,
                ("postgres", _, _) => case.lease = LeaseKind::Postgres,
                ("etcd", _, _) => case.lease = LeaseKind::Etcd,
                _ => {
                    return Err(format!(
                        "{text:?}: {part:?} is none of w<1..=32>, <0..=1000>ms, faults, redis, postgres, etcd"
                    ));
                }
            }
        }
        if case.faults && case.workers < 2 {
            return Err(format!("{text:?}: faults need at least two workers (w2)"));
        }
        Ok(case)
    }

    /// The cases docs/benchmarks.md reports: the work grown a hundredfold at the same
    /// workers, workers from 1 to 8 on the same work (with a gateway answering at once, and
    /// one taking 20 ms a call), one long merchant grown tenfold, the other leases, and the
    /// faults.
    pub(crate) fn docs_suite() -> Vec<Case> {
        [
            "10x1200,w4",
            "1000x1200,w4",
            "100x1200,w1",
            "100x1200,w2",
            "100x1200,w4",
            "100x1200,w8",
            "1x12000,w1",
            "1x120000,w1",
            "100x1200,w4,postgres",
            "100x1200,w4,etcd",
            "100x1200,w1,20ms",
            "100x1200,w2,20ms",
            "100x1200,w4,20ms",
            "100x1200,w4,faults",
        ]
        .into_iter()
        .map(|text| Case::parse(text).expect("the suite's cases parse"))
        .collect()
    }
}

fn parse_work(text: &str) -> Option<Work> {
    let (merchants, refunds_each) = text.split_once('x')?;
    let work = Work {
        merchants: merchants.parse().ok()?,
        refunds_each: refunds_each.parse().ok()?,
    };
    work.is_valid().then_some(work)
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{},w{},{}",
            self.work.merchants,
            self.work.refunds_each,
            self.workers,
            self.lease.name()
        )?;
        if self.latency_ms > 0 {
            write!(f, ",{}ms", self.latency_ms)?;
        }
        if self.faults {
            write!(f, ",faults")?;
        }
        Ok(())
    }
}

/// What a worker process said and how it ended.
#[derive(Clone, Debug, Default)]
pub(crate) struct WorkerLog {
    pub(crate) name: String,
    /// Each acquisition: the merchant and its token.
    pub(crate) acquired: Vec<(String, u64)>,
    /// Merchants it settled and deleted the message of.
    pub(crate) settled: Vec<String>,
    /// Merchants it stopped on, and why (a refused stale holder says so here): its
    /// `stopped <merchant>: <why>` lines.
    pub(crate) stopped: Vec<String>,
    /// Its CPU time and peak memory, once it finished.
    pub(crate) usage: Option<merchants::Usage>,
    /// The refund it paused after, and its token then (`paused <merchant> after <refund> token
    /// <t>`).
    pub(crate) paused: Option<(String, u64)>,
    /// Whether it was resumed after its pause.
    pub(crate) resumed: bool,
    /// Whether it was killed on purpose.
    pub(crate) killed: bool,
    /// Its exit, as a word.
    pub(crate) exit: String,
}

/// What one case came to.
#[derive(Debug)]
pub(crate) struct CaseResult {
    pub(crate) case: Case,
    pub(crate) wall: Duration,
    pub(crate) workers: Vec<WorkerLog>,
    /// PostgreSQL's committed transactions during the run (its statistics, every database).
    pub(crate) commits: u64,
    /// The machine's CPU busy during the run, as a share of all its cores.
    pub(crate) machine_busy: f64,
    /// The CPU time of PostgreSQL's processes during the run.
    pub(crate) postgres_cpu: Duration,
    /// The gateway's CPU time.
    pub(crate) gateway_cpu: Duration,
    pub(crate) audit: Result<ScaleAudit, String>,
    /// Tokens handed to two acquisitions of one merchant.
    pub(crate) tokens_twice: u64,
    /// What went wrong with the run itself.
    pub(crate) trouble: Vec<String>,
}

impl CaseResult {
    /// Refunds settled per second of wall time.
    pub(crate) fn refunds_per_second(&self) -> f64 {
        self.case.work.refunds() as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Wall time per refund.
    pub(crate) fn wall_per_refund(&self) -> Duration {
        self.wall.div_f64(self.case.work.refunds() as f64)
    }

    /// The workers' CPU time per refund (those that finished).
    pub(crate) fn cpu_per_refund(&self) -> Duration {
        let cpu: Duration = self
            .workers
            .iter()
            .filter_map(|w| w.usage)
            .map(|u| u.cpu)
            .sum();
        self.per_refund(cpu)
    }

    /// `total` spread over the case's refunds.
    pub(crate) fn per_refund(&self, total: Duration) -> Duration {
        total.div_f64(self.case.work.refunds() as f64)
    }

    /// The highest peak memory of a worker that finished, in KiB.
    pub(crate) fn peak_rss_kib(&self) -> u64 {
        let peaks = self.workers.iter().filter_map(|w| w.usage);
        peaks.map(|u| u.peak_rss_kib).max().unwrap_or(0)
    }

    /// Acquisitions beyond one per merchant: redeliveries after a fault.
    pub(crate) fn takeovers(&self) -> u64 {
        let acquired: usize = self.workers.iter().map(|w| w.acquired.len()).sum();
        (acquired as u64).saturating_sub(self.case.work.merchants.into())
    }

    /// Stops of a worker on a merchant (a stale holder refused, a killed one's never said).
    pub(crate) fn stops(&self) -> u64 {
        self.workers.iter().map(|w| w.stopped.len() as u64).sum()
    }

    /// Every problem: the audit's violations, tokens issued twice, trouble with the run.
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = match &self.audit {
            Ok(audit) => audit.violations(),
            Err(err) => vec![format!("the audit failed: {err}")],
        };
        if self.tokens_twice > 0 {
            problems.push(format!("{} tokens issued twice", self.tokens_twice));
        }
        problems.extend(self.trouble.iter().cloned());
        problems
    }

    /// Whether the case passed.
    pub(crate) fn passed(&self) -> bool {
        self.problems().is_empty()
    }
}

/// Runs `case` on `services`.
pub(crate) async fn run(case: &Case, args: &Args, services: &Services) -> CaseResult {
    let mut result = CaseResult {
        case: *case,
        wall: Duration::ZERO,
        workers: Vec::new(),
        commits: 0,
        machine_busy: 0.0,
        postgres_cpu: Duration::ZERO,
        gateway_cpu: Duration::ZERO,
        audit: Err("not run".into()),
        tokens_twice: 0,
        trouble: Vec::new(),
    };
    let names = RunNames::fresh(u64::from(case.workers));
    let logs = args.logs.join(names.id());
    let prepared = prepare(case, &names, services, &logs).await;
    let (clients, gateway) = match prepared {
        Ok(prepared) => prepared,
        Err(why) => {
            result
                .trouble
                .push(format!("cannot set the case up: {why}"));
            return result;
        }
    };
    let before = Snapshot::take(&clients.pool).await;
    let mut run = Running {
        case,
        args,
        services,
        names: &names,
        gateway: gateway.addr.clone(),
        logs: logs.clone(),
        workers: Vec::new(),
        started: Instant::now(),
    };
    if let Err(why) = run.run_to_end(&clients).await {
        result.trouble.push(why);
    }
    result.wall = run.started.elapsed();
    let after = Snapshot::take(&clients.pool).await;
    result.commits = after.commits.saturating_sub(before.commits);
    result.machine_busy = after.busy_since(&before);
    result.postgres_cpu = after.postgres.saturating_sub(before.postgres);
    result.gateway_cpu = gateway.pid.map_or(Duration::ZERO, |pid| {
        merchants::usage_of(&pid.to_string()).cpu
    });
    drop(gateway);
    result.workers = run.logs();
    result.tokens_twice = tokens_twice(&result.workers);
    for worker in result
        .workers
        .iter()
        .filter(|w| !w.killed && w.exit != "exit status: 0")
    {
        result
            .trouble
            .push(format!("worker {} ended with {}", worker.name, worker.exit));
    }
    result.audit = merchants::audit(
        &names,
        &clients.pool,
        case.work,
        &logs.join("journal.jsonl"),
    )
    .await
    .map_err(|err| err.to_string());
    if result.passed() {
        clean_up(&names, &clients, &logs).await;
    }
    result
}

/// The gateway process of a case.
struct Gateway {
    addr: String,
    pid: Option<u32>,
    _child: Child,
}

/// Creates the case's refunds, lease tables and queue (one message per merchant), and starts
/// its gateway.
async fn prepare(
    case: &Case,
    names: &RunNames,
    services: &Services,
    logs: &Path,
) -> Result<(Clients, Gateway), String> {
    std::fs::create_dir_all(logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let clients = Clients::connect(&services.database_url, "scale", &services.moto.endpoint())
        .await
        .map_err(|e| format!("cannot connect to PostgreSQL: {e}"))?;
    merchants::create(names, &clients.pool, case.work)
        .await
        .map_err(|e| format!("cannot create the refunds: {e}"))?;
    stores::create_lease_tables(names, &clients, case.lease)
        .await
        .map_err(|e| format!("cannot create the lease's tables: {e}"))?;
    let queue = JobQueue::create_empty(clients.sqs.clone(), &names.job_queue())
        .await
        .map_err(|e| format!("cannot create the queue: {e}"))?;
    for n in 1..=case.work.merchants {
        queue
            .send(&merchants::merchant(n))
            .await
            .map_err(|e| format!("cannot queue merchant {n}: {e}"))?;
    }
    let gateway = start_gateway(
        &services.program,
        &logs.join("journal.jsonl"),
        case.latency_ms,
    )
    .await?;
    Ok((clients, gateway))
}

async fn start_gateway(program: &Path, journal: &Path, latency_ms: u64) -> Result<Gateway, String> {
    let mut child = Command::new(program)
        .arg("gateway")
        .arg("--journal")
        .arg(journal)
        .arg("--latency-ms")
        .arg(latency_ms.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the gateway: {e}"))?;
    let stdout = child.stdout.take().ok_or("the gateway's output")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = lines.next_line().await.ok().flatten().unwrap_or_default();
    let addr = first
        .strip_prefix("listening ")
        .ok_or_else(|| format!("the gateway said {first:?}"))?
        .to_owned();
    Ok(Gateway {
        addr,
        pid: child.id(),
        _child: child,
    })
}

/// A worker process and what it says.
struct WorkerProcess {
    child: Child,
    pid: u32,
    log: Arc<Mutex<WorkerLog>>,
}

/// A case under way.
struct Running<'a> {
    case: &'a Case,
    args: &'a Args,
    services: &'a Services,
    names: &'a RunNames,
    gateway: String,
    logs: PathBuf,
    workers: Vec<WorkerProcess>,
    /// When its first worker started: the wall time and the fault log count from here.
    started: Instant,
}

/// The faults of a case, in order: the first two workers each stop themselves right after
/// their gateway refund of a quarter of a merchant's (`--pause-after-refunds`), with the rest
/// of a merchant still ahead of them, and the other workers start only once both hold a
/// merchant. The first to pause stays stopped past its TTL, the second is killed (and
/// replaced). The stopped one is resumed once another holder has claimed the refund it paused
/// after, so its confirm of that refund is certain to be refused: the faults' effects come
/// from where they strike, not from when, however quick the machine.
#[derive(Clone, Debug, PartialEq, Eq)]
enum FaultStage {
    /// Waiting for a worker to pause: the first becomes `stalled`, the second is killed.
    Pausing {
        stalled: Option<Paused>,
    },
    Stalled {
        stalled: Paused,
        /// Resumed then even if no one claimed its refund (a trouble of the run: the case fails).
        at_latest: Instant,
    },
    Done,
}

/// A worker stopped right after the gateway made a refund, before its confirm.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Paused {
    worker: usize,
    refund: String,
    token: u64,
}

impl Running<'_> {
    /// Starts the workers, injects the case's faults, and waits for every worker to end.
    async fn run_to_end(&mut self, clients: &Clients) -> Result<(), String> {
        let refunds = self.case.work.refunds();
        let deadline = Instant::now() + Duration::from_secs(120 + refunds / 200);
        let mut stage = if self.case.faults {
            self.start_faulted_workers(deadline).await?;
            FaultStage::Pausing { stalled: None }
        } else {
            FaultStage::Done
        };
        for i in self.workers.len()..usize::from(self.case.workers) {
            self.spawn(format!("w{i}"), None)?;
        }
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            stage = self.fault(stage, clients).await?;
            if self.all_exited() {
                return match stage {
                    FaultStage::Done => Ok(()),
                    unfinished => Err(format!(
                        "the workers ended before the faults were done: {unfinished:?}"
                    )),
                };
            }
            if Instant::now() > deadline {
                for worker in &mut self.workers {
                    let _ = worker.child.start_kill();
                }
                return Err("the run passed its deadline; its workers were killed".into());
            }
        }
    }

    /// Starts the two workers the faults strike, each to stop itself after a quarter of a
    /// merchant's refunds, and returns once both hold a merchant: started with the others,
    /// one could find the queue emptied before it took any.
    async fn start_faulted_workers(&mut self, deadline: Instant) -> Result<(), String> {
        // Right after a refund, its confirm at least is ahead; a quarter in, most of a merchant.
        let quarter = (u64::from(self.case.work.refunds_each) / 4).max(1);
        for i in 0..2 {
            self.spawn(format!("w{i}"), Some(quarter))?;
        }
        loop {
            let holding = |worker: &WorkerProcess| {
                let log = worker.log.lock().expect("never poisoned");
                !log.acquired.is_empty()
            };
            if self.workers.iter().all(holding) {
                return Ok(());
            }
            if self.all_exited() || Instant::now() > deadline {
                return Err("the faulted workers never both took a merchant".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn fault(&mut self, stage: FaultStage, clients: &Clients) -> Result<FaultStage, String> {
        Ok(match stage {
            FaultStage::Pausing { stalled } => self.pausing(stalled)?,
            FaultStage::Stalled { stalled, at_latest } => {
                self.stalled(stalled, at_latest, clients).await?
            }
            FaultStage::Done => FaultStage::Done,
        })
    }

    /// The first worker to pause stays stopped; the second is killed and replaced.
    fn pausing(&mut self, mut stalled: Option<Paused>) -> Result<FaultStage, String> {
        if stalled.is_none() {
            stalled = self.newly_paused(None);
            if let Some(first) = &stalled {
                self.record_fault(&format!(
                    "w{} paused after {} (token {}): it stays stopped",
                    first.worker, first.refund, first.token
                ));
            }
        }
        let spared = stalled.as_ref().map(|p| p.worker);
        Ok(match (stalled, self.newly_paused(spared)) {
            (Some(stalled), Some(second)) => {
                self.kill_and_replace(&second)?;
                // Its messages come back after a visibility timeout; a worker then needs a
                // moment to be free for one.
                let ttl = Duration::from_millis(self.args.ttl_ms);
                FaultStage::Stalled {
                    stalled,
                    at_latest: Instant::now() + 4 * ttl + Duration::from_secs(30),
                }
            }
            (Some(stalled), None) if !self.any_live_but(stalled.worker) => {
                self.resume(stalled.worker, "no other worker left to kill");
                return Err(format!(
                    "every worker but w{} ended before a second one paused",
                    stalled.worker
                ));
            }
            (stalled, _) => FaultStage::Pausing { stalled },
        })
    }

    /// Resumes the stopped worker once another holder has claimed the refund it paused after.
    async fn stalled(
        &mut self,
        stalled: Paused,
        at_latest: Instant,
        clients: &Clients,
    ) -> Result<FaultStage, String> {
        let fence = fence_of(clients, self.names, &stalled.refund).await?;
        if fence <= stalled.token && Instant::now() < at_latest {
            return Ok(FaultStage::Stalled { stalled, at_latest });
        }
        self.resume(
            stalled.worker,
            &format!("{} holds fence {fence}", stalled.refund),
        );
        if fence <= stalled.token {
            return Err(format!(
                "no worker claimed {} while w{} was stopped",
                stalled.refund, stalled.worker
            ));
        }
        Ok(FaultStage::Done)
    }

    /// Kills `paused` and starts a worker in its place.
    fn kill_and_replace(&mut self, paused: &Paused) -> Result<(), String> {
        fencing_harness::signal("KILL", self.workers[paused.worker].pid);
        self.workers[paused.worker]
            .log
            .lock()
            .expect("never poisoned")
            .killed = true;
        let replacement = format!("w{}", self.workers.len());
        self.record_fault(&format!(
            "killed w{} paused after {}; {replacement} started",
            paused.worker, paused.refund
        ));
        self.spawn(replacement, None)
    }

    /// Whether a worker other than `spared` is still running.
    fn any_live_but(&mut self, spared: usize) -> bool {
        let mut workers = self.workers.iter_mut().enumerate();
        workers.any(|(i, worker)| i != spared && matches!(worker.child.try_wait(), Ok(None)))
    }

    /// A worker other than `spared` that paused and has not been dealt with.
    fn newly_paused(&self, spared: Option<usize>) -> Option<Paused> {
        self.workers
            .iter()
            .enumerate()
            .find_map(|(worker, process)| {
                let log = process.log.lock().expect("never poisoned");
                let (refund, token) = log.paused.clone()?;
                (Some(worker) != spared && !log.killed && !log.resumed).then_some(Paused {
                    worker,
                    refund,
                    token,
                })
            })
    }

    fn resume(&mut self, worker: usize, why: &str) {
        fencing_harness::signal("CONT", self.workers[worker].pid);
        let mut log = self.workers[worker].log.lock().expect("never poisoned");
        log.resumed = true;
        drop(log);
        self.record_fault(&format!("resumed w{worker}: {why}"));
    }

    /// Appends `what` to the case's `faults.log`, after the milliseconds since the run began.
    fn record_fault(&self, what: &str) {
        use std::io::Write as _;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.logs.join("faults.log"));
        if let Ok(mut file) = file {
            let _ = writeln!(file, "{} ms: {what}", self.started.elapsed().as_millis());
        }
    }

    fn all_exited(&mut self) -> bool {
        self.workers
            .iter_mut()
            .all(|worker| match worker.child.try_wait() {
                Ok(Some(status)) => {
                    worker.log.lock().expect("never poisoned").exit = status.to_string();
                    true
                }
                Ok(None) => false,
                Err(_) => true,
            })
    }

    /// Starts the worker `name`, to stop itself after `pause_after_refunds` if given.
    fn spawn(&mut self, name: String, pause_after_refunds: Option<u64>) -> Result<(), String> {
        let (args, services) = (self.args, self.services);
        let stderr = std::fs::File::create(self.logs.join(format!("{name}.stderr")))
            .map_err(|e| format!("cannot open {name}'s log: {e}"))?;
        let mut command = Command::new(&services.program);
        command
            .arg("scale-worker")
            .args([
                "--name",
                &name,
                "--run",
                self.names.id(),
                "--lease",
                self.case.lease.name(),
            ])
            .args(["--ttl-ms", &args.ttl_ms.to_string()])
            .args(["--database-url", &services.database_url])
            .args(["--redis-url", &services.redis.url()])
            .args(["--aws-endpoint", &services.moto.endpoint()])
            .args(["--gateway", &self.gateway])
            .args(["--merchants-at-once", &args.merchants_at_once.to_string()])
            .args(["--concurrency", &args.concurrency.to_string()]);
        if let Some(etcd) = &services.etcd {
            command.args(["--etcd-endpoints", &etcd.endpoints().join(",")]);
        }
        if let Some(refunds) = pause_after_refunds {
            command.args(["--pause-after-refunds", &refunds.to_string()]);
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start worker {name}: {e}"))?;
        let pid = child.id().ok_or("a worker without a pid")?;
        let log = Arc::new(Mutex::new(WorkerLog {
            name,
            ..WorkerLog::default()
        }));
        let stdout = child.stdout.take().ok_or("a worker's output")?;
        let said = std::fs::File::create(
            self.logs
                .join(format!("{}.log", log.lock().expect("never poisoned").name)),
        )
        .map_err(|e| format!("cannot open a worker's log: {e}"))?;
        tokio::spawn(read_worker(stdout, log.clone(), said));
        self.workers.push(WorkerProcess { child, pid, log });
        Ok(())
    }

    fn logs(&self) -> Vec<WorkerLog> {
        let logs = self.workers.iter();
        logs.map(|w| w.log.lock().expect("never poisoned").clone())
            .collect()
    }
}

/// Reads a worker's lines into its log, and writes them to `said`.
async fn read_worker(
    stdout: tokio::process::ChildStdout,
    log: Arc<Mutex<WorkerLog>>,
    mut said: std::fs::File,
) {
    use std::io::Write as _;
    let mut lines = BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let _ = writeln!(said, "{line}");
        let words: Vec<&str> = line.split_whitespace().collect();
        let mut log = log.lock().expect("never poisoned");
        match words.as_slice() {
            ["acquired", merchant, "token", token] => {
                log.acquired
                    .push(((*merchant).to_owned(), token.parse().unwrap_or(0)));
            }
            ["settled", merchant, ..] => log.settled.push((*merchant).to_owned()),
            ["stopped", ..] => log.stopped.push(line.clone()),
            ["paused", _, "after", refund, "token", token] => {
                log.paused = Some(((*refund).to_owned(), token.parse().unwrap_or(0)));
            }
            ["done", "cpu_ms", cpu, "peak_rss_kib", rss] => {
                log.usage = Some(merchants::Usage {
                    cpu: Duration::from_millis(cpu.parse().unwrap_or(0)),
                    peak_rss_kib: rss.parse().unwrap_or(0),
                });
            }
            _ => {}
        }
    }
}

/// Tokens handed to more than one acquisition of the same merchant.
fn tokens_twice(workers: &[WorkerLog]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let acquired = workers.iter().flat_map(|w| w.acquired.iter());
    acquired.filter(|pair| !seen.insert(*pair)).count() as u64
}

/// The fence refund `id` holds now.
async fn fence_of(clients: &Clients, names: &RunNames, id: &str) -> Result<u64, String> {
    let fence: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT fence FROM \"{}\".refunds WHERE id = $1",
        names.schema()
    )))
    .bind(id)
    .fetch_one(&clients.pool)
    .await
    .map_err(|e| format!("cannot read {id}'s fence: {e}"))?;
    Ok(fence.try_into().unwrap_or(0))
}

/// PostgreSQL's commits and the machine's CPU ticks at one moment.
struct Snapshot {
    commits: u64,
    postgres: Duration,
    busy_ticks: u64,
    all_ticks: u64,
}

impl Snapshot {
    async fn take(pool: &sqlx::PgPool) -> Snapshot {
        // Each backend's statistics reach the view within a second of its commits.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let commits: i64 =
            sqlx::query_scalar("SELECT sum(xact_commit)::bigint FROM pg_stat_database")
                .fetch_one(pool)
                .await
                .unwrap_or(0);
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|n| n.parse().ok())
            .collect();
        let all_ticks: u64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
        Snapshot {
            commits: commits.try_into().unwrap_or(0),
            postgres: merchants::cpu_of_command("postgres"),
            busy_ticks: all_ticks.saturating_sub(idle),
            all_ticks,
        }
    }

    /// The share of all cores busy between `before` and this.
    fn busy_since(&self, before: &Snapshot) -> f64 {
        let all = self.all_ticks.saturating_sub(before.all_ticks).max(1);
        self.busy_ticks.saturating_sub(before.busy_ticks) as f64 / all as f64
    }
}

/// Drops a passed case's schema, queue and gateway journal (a failed one's stay for a look;
/// the workers' logs stay in any case).
async fn clean_up(names: &RunNames, clients: &Clients, logs: &Path) {
    let _ = std::fs::remove_file(logs.join("journal.jsonl"));
    let _ = stores::drop_schema(names, &clients.pool).await;
    if let Ok(queue) = clients.job_queue(names).await {
        let _ = queue.delete_queue().await;
    }
}

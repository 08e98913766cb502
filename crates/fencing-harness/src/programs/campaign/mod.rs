//! `fencing-harness campaign`: runs the settlement many times as real processes under real faults, audits
//! every run from the stores, and prints (and optionally writes) the results.
//!
//! Exit codes: 0 when every run with fences on passed its audit and, if there were runs with
//! fences off, at least one of them showed violations; 1 otherwise; 2 when the services
//! could not be set up; 130 when interrupted.

mod gallery;
mod picture;
mod report;
mod run;
mod soak;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fencing_harness::audit::Check;
use fencing_harness::plan::{LeaseKind, Protection, RunPlan, Sizing};
use fencing_test_support::services::{
    self, EtcdCluster, MotoServer, RedisServer, ServiceMode, TestContainer,
};
use indicatif::{ProgressBar, ProgressStyle};

use run::{RunResult, Services};

/// Runs the refund settlement under real faults and audits every run.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Runs with fences on.
    #[arg(long, default_value_t = 50)]
    fenced: u64,
    /// Runs with fences off (the control).
    #[arg(long, default_value_t = 10)]
    unfenced: u64,
    /// Runs on the Redis lease behind Sentinel, failed over, with the counter not bound to
    /// the server's history (the failover's control: it must find a token issued twice).
    #[arg(long, default_value_t = 2)]
    unchecked: u64,
    /// Runs on the PostgreSQL lease with a seeded bug that hands one token to two
    /// acquisitions (the history checker's control: its history check must find it).
    #[arg(long, default_value_t = 1)]
    reissued: u64,
    /// Runs on these leases only (comma-separated), rotating through them with the seed,
    /// instead of through every lease.
    #[arg(long, value_enum, value_delimiter = ',')]
    lease: Vec<LeaseKind>,
    /// Refunds per run.
    #[arg(long, default_value_t = 200)]
    refunds: usize,
    /// The lease TTL in milliseconds.
    #[arg(long, default_value_t = 1500)]
    ttl_ms: u64,
    /// Runs of the worked example at its full figures (1,200 refunds, a 30 s TTL, the holder
    /// stalled at r_0815 past its TTL), with fences on, after the others.
    #[arg(long, default_value_t = 1)]
    full: u64,
    /// The seed of the first run; run i has seed FIRST_SEED + i (fenced runs first).
    #[arg(long, default_value_t = 1000)]
    first_seed: u64,
    /// Runs this one seed only (with --fences), instead of a campaign.
    #[arg(long)]
    replay: Option<u64>,
    /// With --replay: whether the run has fences.
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    fences: String,
    /// With --replay: `off` replays one of the failover's controls (--unchecked).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    counter_binding: String,
    /// With --replay: the run is one of the worked example's (--full).
    #[arg(long)]
    worked_example: bool,
    /// Refunds each worker keeps in flight: 1 settles one after another, more runs the
    /// batch's pipeline (the pipelined campaign writes docs/reliability-pipelined.md).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
    /// Writes the results as Markdown here (the full campaign writes docs/reliability.md).
    #[arg(long)]
    report: Option<PathBuf>,
    /// Where each run keeps its logs (kept for runs that fail their audit).
    #[arg(long, default_value = "target/harness")]
    logs: PathBuf,
    /// Keeps every run's logs, not only those of runs that failed.
    #[arg(long)]
    keep_logs: bool,
    /// Instead of a campaign, a soak: fenced runs back to back for this many minutes on one
    /// set of services, every process's memory and open files and the PostgreSQL
    /// connections sampled every 10 s (with --report, writes docs/soak.md's figures).
    #[arg(long, conflicts_with = "replay", value_parser = clap::value_parser!(u64).range(1..=1440))]
    soak_minutes: Option<u64>,
}

/// Runs the campaign (or one replayed run) and reports.
pub(crate) async fn main(args: Args) -> ExitCode {
    let sizing = Sizing {
        refunds: args.refunds,
        ttl: Duration::from_millis(args.ttl_ms),
    };
    if args.refunds == 0 || args.refunds > 9999 || args.ttl_ms < 200 {
        eprintln!("campaign: --refunds must be 1..=9999 and --ttl-ms at least 200");
        return ExitCode::from(2);
    }
    let containers = ServiceMode::from_env() == ServiceMode::Containers;
    let plans = plans(&args, sizing, containers);
    let mut services = match tokio::task::block_in_place(|| start_services(containers)) {
        Ok(services) => services,
        Err(why) => {
            eprintln!("campaign: {why}");
            return ExitCode::from(2);
        }
    };
    let current = Arc::new(Mutex::new(String::from("before the first run")));
    let started = Instant::now();
    let soak = match args.soak_minutes {
        Some(minutes) => match sqlx::PgPool::connect(&services.database_url).await {
            Ok(pool) => Some((
                started + Duration::from_secs(minutes * 60),
                soak::Sampler::start(pool, started),
            )),
            Err(err) => {
                eprintln!("campaign: cannot connect to PostgreSQL to sample it: {err}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let schedule = match &soak {
        Some((deadline, _)) => {
            Schedule::Until(*deadline, Box::new(soak_plans(&args, sizing, containers)))
        }
        None => Schedule::These(&plans),
    };
    let campaign = run_all(schedule, &mut services, &args, current.clone());
    let (results, all_ran) = tokio::select! {
        results = campaign => results,
        _ = tokio::signal::ctrl_c() => {
            eprintln!(
                "\ncampaign: interrupted during {}; its workers, gateway and servers are being stopped",
                current.lock().expect("never poisoned")
            );
            return ExitCode::from(130);
        }
    };
    let wall = started.elapsed();
    println!("\n{}", report::summary(&results));
    println!("wall time {:.0} s", wall.as_secs_f64());
    let steady = soak.map(|(_, sampler)| soak_verdict(sampler, &results, started, wall));
    let drawn = match draw_pictures(&args, &results) {
        Ok(drawn) => drawn,
        Err(why) => {
            eprintln!("campaign: {why}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = &args.report {
        let table = steady.as_ref().map(|(table, _)| table.as_str());
        if let Err(err) = write_report(path, &results, table, wall, containers, &drawn) {
            eprintln!("campaign: cannot write {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
        println!("results written to {}", path.display());
    }
    let steady = steady.is_none_or(|(_, steady)| steady);
    if passed(&args, &results) && all_ran && !results.is_empty() && steady {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The soak's table of samples (printed) and whether its figures held steady.
fn soak_verdict(
    sampler: soak::Sampler,
    results: &[RunResult],
    started: Instant,
    wall: Duration,
) -> (String, bool) {
    let finished: Vec<soak::Finished> = results
        .iter()
        .map(|r| soak::Finished {
            at: r.ended.duration_since(started),
            refunds: r.audit.sent,
        })
        .collect();
    let (table, steady) = soak::report(&sampler.finish(), &finished, wall);
    println!("\n{table}");
    (table, steady)
}

/// The runs to make, in order: the fenced runs, the controls with fences off, the failover's
/// controls with the counter unbound, the history checker's with a token reissued, and the
/// worked example's full runs; or the one replayed.
fn plans(args: &Args, sizing: Sizing, containers: bool) -> Vec<RunPlan> {
    let plan_of = |seed, fences| plan_of(args, seed, fences, sizing, containers);
    let plans: Vec<RunPlan> = match args.replay {
        Some(seed) if args.counter_binding == "off" => {
            vec![RunPlan::unchecked_failover(seed, sizing)]
        }
        Some(seed) => vec![plan_of(seed, args.fences != "off")],
        None if args.soak_minutes.is_some() => Vec::new(),
        None => {
            let mut seeds = args.first_seed..;
            let mut plans: Vec<RunPlan> = Vec::new();
            plans.extend((0..args.fenced).map(|_| plan_of(seeds.next().unwrap_or_default(), true)));
            plans.extend(
                (0..args.unfenced).map(|_| plan_of(seeds.next().unwrap_or_default(), false)),
            );
            // Each control of the failover from the next seed after the last one's.
            let mut next = seeds.next().unwrap_or_default();
            for _ in 0..args.unchecked {
                let plan = RunPlan::unchecked_failover(next, sizing);
                next = plan.seed + 1;
                plans.push(plan);
            }
            for _ in 0..args.reissued {
                let plan = RunPlan::reissued_token(next, sizing);
                next = plan.seed + 1;
                plans.push(plan);
            }
            plans.extend((0..args.full).map(|i| RunPlan::worked_example(next + i, containers)));
            plans
        }
    };
    let concurrency = args.concurrency.into();
    plans
        .into_iter()
        .map(|plan| plan.with_concurrency(concurrency))
        .collect()
}

/// A soak's runs: fenced, one seed after another, without end.
fn soak_plans(
    args: &Args,
    sizing: Sizing,
    containers: bool,
) -> impl Iterator<Item = RunPlan> + Send + '_ {
    let concurrency = args.concurrency.into();
    (args.first_seed..).map(move |seed| {
        plan_of(args, seed, true, sizing, containers).with_concurrency(concurrency)
    })
}

/// The plan of `seed`: its lease drawn by the seed, or taken from `--lease` in turn.
fn plan_of(args: &Args, seed: u64, fences: bool, sizing: Sizing, containers: bool) -> RunPlan {
    match args.lease.len() {
        0 => RunPlan::from_seed(seed, fences, sizing, containers),
        n => {
            let lease = args.lease[(seed % n as u64) as usize];
            RunPlan::on_lease(seed, lease, fences, sizing, containers)
        }
    }
}

/// The sample run's picture and those of the runs that failed: beside the report, or with
/// the logs.
fn draw_pictures(args: &Args, results: &[RunResult]) -> Result<Vec<gallery::Drawn>, String> {
    let (folder, link_base) = match &args.report {
        Some(path) => {
            let stem = path.file_stem().map_or_else(
                || "campaign".to_owned(),
                |s| s.to_string_lossy().into_owned(),
            );
            let dir = path.parent().unwrap_or(std::path::Path::new(""));
            (dir.join("pictures").join(&stem), format!("pictures/{stem}"))
        }
        None => (args.logs.join("pictures"), "pictures".to_owned()),
    };
    let drawn = gallery::draw_campaign(results, &folder, &link_base)?;
    for d in &drawn {
        println!(
            "picture of seed {} ({}): {}",
            d.seed,
            if d.passed { "the sample run" } else { "failed" },
            folder
                .join(d.link.rsplit('/').next().unwrap_or_default())
                .display()
        );
    }
    Ok(drawn)
}

/// Writes the campaign's report (a soak's, given its `soak_table`) to `path`, with the
/// command that reproduces it.
fn write_report(
    path: &std::path::Path,
    results: &[RunResult],
    soak_table: Option<&str>,
    wall: Duration,
    containers: bool,
    drawn: &[gallery::Drawn],
) -> std::io::Result<()> {
    let command = std::env::args()
        .map(|a| if a.contains(' ') { format!("'{a}'") } else { a })
        .collect::<Vec<_>>()
        .join(" ");
    let runner = if containers {
        "FENCING_TEST_SERVICES=containers cargo run -p fencing-harness --"
    } else {
        "cargo run -p fencing-harness --"
    };
    let command = command.replacen(&std::env::args().next().unwrap_or_default(), runner, 1);
    let document = match soak_table {
        Some(table) => report::soak_document(results, table, &command, wall, drawn),
        None => report::document(results, &command, wall, containers, drawn),
    };
    std::fs::write(path, document)
}

/// The fenced runs found nothing, and each kind of control caught something (or it proves
/// nothing), unless one run was replayed.
fn passed(args: &Args, results: &[RunResult]) -> bool {
    let fenced_clean = results
        .iter()
        .filter(|r| r.plan.protection() == Protection::Full)
        .all(|r| r.audit.violations.is_empty() && r.incidents.is_empty());
    let caught = |control: Protection, by: &dyn Fn(Check) -> bool| {
        let runs: Vec<_> = results
            .iter()
            .filter(|r| r.plan.protection() == control)
            .collect();
        runs.is_empty()
            || args.replay.is_some()
            || runs
                .iter()
                .any(|r| r.audit.violations.iter().any(|v| by(v.check)))
    };
    fenced_clean
        && caught(Protection::FencesOff, &|_| true)
        && caught(Protection::CounterUnbound, &|_| true)
        && caught(Protection::TokenReissued, &Check::is_history)
}

/// Which runs to make: these, or one after another from a list without end until a deadline
/// (a soak).
enum Schedule<'a> {
    These(&'a [RunPlan]),
    Until(Instant, Box<dyn Iterator<Item = RunPlan> + Send + 'a>),
}

/// Makes the runs of `schedule`; also says whether every one could run (a run that could not
/// ends the campaign).
async fn run_all(
    schedule: Schedule<'_>,
    services: &mut Services,
    args: &Args,
    current: Arc<Mutex<String>>,
) -> (Vec<RunResult>, bool) {
    let (plans, deadline, bar, of): (Box<dyn Iterator<Item = RunPlan> + Send>, _, _, _) =
        match schedule {
            Schedule::These(plans) => (
                Box::new(plans.iter().cloned()),
                None,
                ProgressBar::new(plans.len() as u64),
                plans.len().to_string(),
            ),
            Schedule::Until(deadline, plans) => (
                plans,
                Some(deadline),
                ProgressBar::new_spinner(),
                "a soak".to_owned(),
            ),
        };
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} runs, {elapsed} {msg}")
            .expect("a valid template"),
    );
    let mut results = Vec::new();
    for (i, plan) in plans.enumerate() {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        *current.lock().expect("never poisoned") = format!("run {} of {of} ({plan})", i + 1);
        say(&bar, format!("run {}: {plan}", i + 1));
        bar.set_message(format!("seed {}", plan.seed));
        let dir = args
            .logs
            .join(format!("seed-{}-{}", plan.seed, plan.protection().word()));
        match run::run(&plan, services, &dir).await {
            Ok(result) => {
                say(&bar, format!("  {}", report::run_line(&result)));
                for violation in result.audit.violations.iter().take(3) {
                    say(&bar, format!("    {violation}"));
                }
                if result.audit.violations.is_empty()
                    && result.incidents.is_empty()
                    && !args.keep_logs
                {
                    let _ = std::fs::remove_dir_all(&result.dir);
                } else {
                    say(
                        &bar,
                        format!(
                            "    logs and timeline.svg kept in {} (run {})",
                            result.dir.display(),
                            result.id
                        ),
                    );
                }
                results.push(result);
            }
            Err(err) => {
                say(
                    &bar,
                    format!("  run {} (seed {}) could not run: {err}", i + 1, plan.seed),
                );
                bar.finish_and_clear();
                return (results, false);
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    (results, true)
}

/// Prints above the bar, or plainly where there is no terminal to draw it on.
fn say(bar: &ProgressBar, line: String) {
    bar.suspend(|| println!("{line}"));
}

/// PostgreSQL as the tests find it, the AWS emulator of the campaign's own (in containers
/// of its own in containers mode, so that it can pause them), MySQL as the tests find it
/// (the MySQL lease's), and a Redis and a three-member etcd cluster of its own. The emulator is never one found running: only one
/// that answers a request at a time makes conditional writes atomic as on AWS, and without
/// that two workers can be granted one DynamoDB lease with one token.
fn start_services(containers: bool) -> Result<Services, String> {
    let program = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let redis = RedisServer::start(&[]);
    let etcd = EtcdCluster::start(3);
    let (database_url, aws_endpoint, containers, moto) = if containers {
        let postgres = TestContainer::postgres()?;
        let moto = TestContainer::moto()?;
        (postgres.url(), moto.url(), Some((postgres, moto)), None)
    } else {
        let moto = MotoServer::start();
        let endpoint = moto.endpoint();
        (services::postgres_url(), endpoint, None, Some(moto))
    };
    Ok(Services {
        database_url,
        // The machine's, or one of the mode's own (a container in containers mode).
        mysql_url: services::mysql_url(),
        aws_endpoint,
        redis,
        etcd,
        _moto: moto,
        containers,
        program,
    })
}

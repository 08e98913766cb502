//! `fencing-harness scale`: the settlement at scale. Each case creates M merchants × R refunds
//! in PostgreSQL and one queue message per merchant, starts the gateway and W worker
//! processes (`scale-worker`, each settling several merchants at once through the pipeline
//! under the merchants' leases), optionally stops one worker past its TTL and kills another
//! mid-run, waits for the queue to empty, audits the run by set queries and measures it:
//! refunds per second, CPU and peak memory per worker, PostgreSQL's commits, the machine's
//! CPU. `--suite docs` runs the cases docs/benchmarks.md reports, with the store's own tools
//! (`pgbench`, `redis-benchmark`) as ceilings, and writes the section and its plot.
//!
//! Exit codes: 0 when every case passed its audit; 1 otherwise; 2 when the services could not
//! be set up or the arguments are wrong.

mod case;
mod ceiling;
mod figures;

use std::path::PathBuf;
use std::process::ExitCode;

use fencing_harness::plan::LeaseKind;
use fencing_test_support::services::{self, EtcdCluster, MotoServer, RedisServer};

pub(crate) use case::Case;

/// Runs the settlement at scale and measures it.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The cases to run, each `<merchants>x<refunds>[,w<workers>][,<lease>][,<n>ms][,faults]`
    /// (say `1000x1200,w4`: 1,000 merchants of 1,200 refunds, 4 workers, the Redis lease, a
    /// gateway answering at once, no faults).
    #[arg(long = "case", value_parser = Case::parse)]
    cases: Vec<Case>,
    /// `docs`: the cases of docs/benchmarks.md's scale section, and the ceilings.
    #[arg(long, value_parser = ["docs"])]
    suite: Option<String>,
    /// Merchants each worker settles at once.
    #[arg(long, default_value_t = 2)]
    merchants_at_once: u16,
    /// Refunds in flight per merchant (the pipeline's concurrency).
    #[arg(long, default_value_t = 16)]
    concurrency: u16,
    /// The lease TTL in milliseconds.
    #[arg(long, default_value_t = 4000)]
    ttl_ms: u64,
    /// Writes the results as Markdown here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// Where each case keeps its gateway journal and worker logs.
    #[arg(long, default_value = "target/harness-scale")]
    logs: PathBuf,
}

/// The servers every case shares.
pub(crate) struct Services {
    pub(crate) database_url: String,
    pub(crate) redis: RedisServer,
    /// Started for the first case on the etcd lease.
    pub(crate) etcd: Option<EtcdCluster>,
    pub(crate) moto: MotoServer,
    /// This executable, whose `scale-worker` and `gateway` commands a case starts.
    pub(crate) program: PathBuf,
}

/// Runs the cases and reports.
pub(crate) async fn main(args: Args) -> ExitCode {
    let cases = match (&args.suite, args.cases.is_empty()) {
        (Some(_), true) => Case::docs_suite(),
        (None, false) => args.cases.clone(),
        _ => {
            eprintln!("scale: give either --suite docs or one or more --case");
            return ExitCode::from(2);
        }
    };
    let mut services = match tokio::task::block_in_place(start_services) {
        Ok(services) => services,
        Err(why) => {
            eprintln!("scale: {why}");
            return ExitCode::from(2);
        }
    };
    let ceilings = match &args.suite {
        Some(_) => {
            let ceilings = ceiling::measure(&services).await;
            println!("scale: ceilings {ceilings:?}");
            Some(ceilings)
        }
        None => None,
    };
    let mut results = Vec::new();
    for case in &cases {
        if case.lease == LeaseKind::Etcd && services.etcd.is_none() {
            services.etcd = Some(tokio::task::block_in_place(|| EtcdCluster::start(1)));
        }
        println!("scale: {case}");
        let result = case::run(case, &args, &services).await;
        println!("{}", figures::line(&result));
        results.push(result);
    }
    if let Some(path) = &args.report {
        if let Err(why) = figures::write(path, &args, &results, ceilings.as_ref()) {
            eprintln!("scale: cannot write {}: {why}", path.display());
            return ExitCode::FAILURE;
        }
        println!("results written to {}", path.display());
    }
    let failed: Vec<_> = results.iter().filter(|r| !r.passed()).collect();
    for result in &failed {
        eprintln!(
            "scale: {} FAILED: {}",
            result.case,
            result.problems().join("; ")
        );
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn start_services() -> Result<Services, String> {
    let program = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    Ok(Services {
        database_url: services::postgres_url(),
        redis: RedisServer::start(&[]),
        etcd: None,
        moto: MotoServer::start(),
        program,
    })
}

//! `fencing-harness`: the settlement's programs in one executable, so that one build gives
//! the campaign its workers and gateway. Each runs as its own process.

mod programs;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The refund settlement as real processes under real faults.
#[derive(Debug, Parser)]
#[command(name = "fencing-harness")]
struct Cli {
    #[command(subcommand)]
    program: Program,
}

#[derive(Debug, Subcommand)]
enum Program {
    /// Runs many settlements under faults, audits each, reports (see docs/reliability.md).
    Campaign(programs::campaign::Args),
    /// One settlement worker (started by the campaign).
    Worker(programs::worker::Args),
    /// The payment gateway simulator (started by the campaign and the scale runs).
    Gateway(programs::gateway::Args),
    /// Settles many merchants with many workers, audits, measures (see docs/benchmarks.md).
    Scale(programs::scale::Args),
    /// One worker of the settlement at scale (started by `scale`).
    ScaleWorker(programs::scale_worker::Args),
}

fn main() -> ExitCode {
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    };
    match Cli::parse().program {
        Program::Campaign(args) => runtime().block_on(programs::campaign::main(args)),
        Program::Worker(args) => runtime().block_on(programs::worker::main(args)),
        Program::Gateway(args) => programs::gateway::main(args),
        Program::Scale(args) => runtime().block_on(programs::scale::main(args)),
        Program::ScaleWorker(args) => runtime().block_on(programs::scale_worker::main(args)),
    }
}

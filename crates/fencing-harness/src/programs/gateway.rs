//! `fencing-harness gateway`: the payment gateway simulator as its own process. It prints `listening
//! <addr>` once it accepts calls, and appends every call to the journal it is given.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use fencing_harness::payments::Gateway;

/// Serves refunds by idempotency key and journals every call.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where to write the journal (one JSON object per call).
    #[arg(long)]
    journal: PathBuf,
    /// The address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// How long each call takes before it takes effect, in milliseconds (a real gateway's
    /// round trip; calls overlap).
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
}

/// Serves until the process ends.
pub(crate) fn main(args: Args) -> ExitCode {
    fencing_harness::exit_with_parent();
    let started = TcpListener::bind(&args.listen).and_then(|listener| {
        let gateway = Gateway::new(&args.journal)?;
        println!("listening {}", listener.local_addr()?);
        gateway.serve(listener, Duration::from_millis(args.latency_ms))
    });
    match started {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("gateway: {err}");
            ExitCode::FAILURE
        }
    }
}

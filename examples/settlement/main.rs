//! The worked example (docs/protocol.md): merchant m_4471's settlement of 1,200 refunds, worker A stalled
//! at r_815 past its 30-second lease, worker B taking over with token 34, A's stale confirm
//! refused. The job (examples/settlement_job) is the library's lease, holder and pipeline; the world around it
//! (the queue, the stalls, the gateway, the in-memory stores) is simulated in virtual time, so
//! 45 seconds pass in an instant.
//!
//! ```text
//! cargo run --example settlement                    # fences on: nothing sent twice
//! cargo run --example settlement -- --no-fence      # every write presents the same token
//! cargo run --example settlement -- --no-fence --gateway-ignores-keys
//! cargo run --example settlement -- --concurrency 32   # pipelined: 32 refunds in flight
//! RUST_LOG=fencing=info cargo run --example settlement   # and the library's events
//! cargo run --example settlement -- --timeline run.svg   # and a picture of the run
//! ```

use fencing_simulation::Fencing;
use fencing_simulation::settlement::{self, GatewayMode, SettlementConfig, SettlementReport};
use fencing_timeline::Picture;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The settlement's amounts are counted in `u64` cents here and printed by the one formatter.
fn euros(cents: u64) -> String {
    settlement::euros(i64::try_from(cents).expect("a settlement's amount fits in i64"))
}

/// What the command line asked for.
struct Options {
    fencing: Fencing,
    gateway: GatewayMode,
    concurrency: usize,
    picture_file: Option<String>,
}

fn main() {
    log_library_events();
    let Some(options) = options() else {
        return;
    };
    let config = SettlementConfig::worked_example(options.fencing, options.gateway)
        .with_concurrency(options.concurrency);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a tokio runtime");
    let report = runtime.block_on(settlement::run(&config, settlement_job::Settle));
    if let Some(file) = &options.picture_file {
        let drawn = Picture::draw(&fencing_timeline::settlement(&config, &report))
            .map_err(|e| e.to_string())
            .and_then(|picture| picture.save(file).map_err(|e| e.to_string()));
        if let Err(err) = drawn {
            eprintln!("cannot write the run's picture to {file}: {err}");
            std::process::exit(1);
        }
    }
    print_setting(&config, &options);
    for line in report.timeline() {
        println!("{line}");
    }
    print_tally(&report);
}

/// The library's events (docs/operating.md), on stderr: RUST_LOG=fencing=info or =debug.
fn log_library_events() {
    if let Ok(directives) = std::env::var("RUST_LOG") {
        let targets: Targets = directives.parse().unwrap_or_else(|e| {
            eprintln!("RUST_LOG={directives:?} is not a list of TARGET=LEVEL: {e}");
            std::process::exit(2);
        });
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .finish()
            .with(targets)
            .init();
    }
}

/// The options on the command line; `None` after printing the usage. A bad argument exits 2.
fn options() -> Option<Options> {
    let mut options = Options {
        fencing: Fencing::On,
        gateway: GatewayMode::Idempotent,
        concurrency: 1,
        picture_file: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--no-fence" => options.fencing = Fencing::Off,
            "--gateway-ignores-keys" => options.gateway = GatewayMode::IgnoresKeys,
            "--concurrency" => {
                options.concurrency = match args.next().map(|n| n.parse::<usize>()) {
                    Some(Ok(n)) if n >= 1 => n,
                    _ => {
                        eprintln!("--concurrency takes a whole number of at least 1");
                        std::process::exit(2);
                    }
                }
            }
            "--timeline" => match args.next() {
                Some(file) if !file.starts_with("--") => options.picture_file = Some(file),
                _ => {
                    eprintln!("--timeline takes the file to write the run's picture (SVG) to");
                    std::process::exit(2);
                }
            },
            "-h" | "--help" => {
                println!(
                    "usage: settlement [--no-fence] [--gateway-ignores-keys] [--concurrency N] [--timeline FILE.svg]"
                );
                return None;
            }
            other => {
                eprintln!("unknown argument {other:?}; try --help");
                std::process::exit(2);
            }
        }
    }
    Some(options)
}

/// The settlement, the lease and what the run was set to do.
fn print_setting(config: &SettlementConfig, options: &Options) {
    println!(
        "Settlement of merchant {} — {} refunds of {}, lease lock:{} with TTL {} s",
        config.merchant,
        config.refunds,
        euros(config.cents_each),
        config.resource(),
        config.ttl.duration().as_secs(),
    );
    println!(
        "refunds in flight per worker: {}",
        match options.concurrency {
            1 => "1 (one by one)".to_owned(),
            n => format!("{n} (pipelined)"),
        }
    );
    println!(
        "fences: {}, gateway: {}\n",
        match options.fencing {
            Fencing::On => "on (each write presents its holder's token)",
            Fencing::Off => "OFF (every write presents the same token)",
        },
        match options.gateway {
            GatewayMode::Idempotent => "idempotent on the refund id",
            GatewayMode::IgnoresKeys => "IGNORES idempotency keys",
        }
    );
}

/// The audit's tally, and whether any guarantee was broken.
fn print_tally(report: &SettlementReport) {
    let a = &report.audit;
    println!("\nTally");
    println!("  refunds recorded as sent          {:>6}", a.rows_sent);
    println!(
        "  EUR recorded as sent              {:>12}",
        euros(a.cents_recorded)
    );
    println!(
        "  EUR paid out by the gateway       {:>12}",
        euros(a.gateway.cents_paid)
    );
    println!("  gateway refund calls              {:>6}", a.gateway.calls);
    println!(
        "  refunds the gateway created       {:>6}",
        a.gateway.refunds_created
    );
    println!(
        "  calls for a refund already made   {:>6}",
        a.calls_for_existing_refund
    );
    println!(
        "  refunds paid twice                {:>6}",
        a.gateway.keys_paid_twice
    );
    println!(
        "  gateway lookups before takeover   {:>6}",
        a.gateway.lookups
    );
    println!("  takeovers of a row in flight      {:>6}", a.takeovers);
    println!(
        "  stale writes rejected             {:>6}",
        a.stale_writes_rejected
    );
    println!(
        "  stale writes accepted             {:>6}",
        a.stale_writes_accepted
    );
    let violations = a.violations();
    if violations.is_empty() {
        println!("\nNo guarantee broken: one refund per row, no stale write accepted.");
    } else {
        println!("\nBroken: {}.", violations.join("; "));
    }
}

//! `fencing`: the operator's command for a deployment of the `fencing` library.
//!
//! ```text
//! fencing lease status settle:m_4471 --lease redis
//! fencing token current settle:m_4471 --tokens postgres
//! fencing token advance settle:m_4471 --tokens postgres --to 40
//! fencing seed settle:m_4471 --tokens postgres --from postgres:public.refund --from dynamodb:ledger
//! fencing probe postgres:public.refund dynamodb:ledger s3:receipts/m_4471/
//! ```
//!
//! Exit codes: 0 done (a probe: every store refused the stale token); 1 a probe found a store
//! that did not behave as a fenced store; 2 bad usage (errors on stderr); 3 a store or
//! service failed or was unreachable (a probe: a store failed without misbehaving). Every error is one sentence saying what to do; `--json` prints one JSON object
//! per command on stdout instead of a table.
//!
//! The binary is [`run`] on the process's arguments; [`check_usage`] is what it checks before
//! it connects to anything, for tests and tools that want the verdict without the run.

mod commands;
mod connect;
mod output;
mod spec;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use fencing_core::{FencingToken, RecordKey, ResourceName};

use crate::connect::Settings;
use crate::output::Failure;

/// Operate a `fencing` deployment: who holds a lease, where a counter stands, the repair after
/// a lost counter, and a self-test that every store refuses a stale token.
#[derive(Debug, Parser)]
#[command(name = "fencing", version, about)]
struct Cli {
    /// Print one JSON object instead of a table.
    #[arg(long, global = true)]
    json: bool,

    #[command(flatten)]
    settings: Settings,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Leases.
    Lease {
        #[command(subcommand)]
        command: LeaseCommand,
    },
    /// Token counters.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Raise a counter above the highest fence found in the given stores (the repair after a
    /// counter was lost or restored from an old snapshot).
    Seed {
        /// The resource whose counter to raise, e.g. settle:m_4471.
        resource: String,
        /// Where the counter lives.
        #[arg(long, value_enum)]
        tokens: Backend,
        /// A store whose fences to read (repeat):
        /// postgres:SCHEMA.TABLE[:fence=COLUMN,where=COLUMN=VALUE] (where=: only the rows of
        /// this resource, in a table several resources share),
        /// dynamodb:TABLE[:fence=ATTRIBUTE], s3:BUCKET[/PREFIX][:codec=json].
        #[arg(long = "from", required = true, num_args = 1..)]
        from: Vec<String>,
    },
    /// Check that each store refuses a stale token: on a probe record, write with token N,
    /// then check that N-1 is refused and N+1 accepted.
    Probe {
        /// The stores to check: postgres:SCHEMA.TABLE[:key=COLUMN,fence=COLUMN,state=COLUMN],
        /// dynamodb:TABLE[:key=ATTRIBUTE,sort=ATTRIBUTE[/S|N|B],fence=ATTRIBUTE,state=ATTRIBUTE],
        /// s3:BUCKET[/PREFIX][:codec=json] (the probe object is deleted after),
        /// object-store:URL (az://, gs://, s3://; its conditional writes are checked first).
        #[arg(required = true)]
        stores: Vec<String>,
        /// The key of the probe record each store gets (created if missing, left in place but
        /// on S3; on a DynamoDB table with a sort key, a key without the separator names both
        /// parts).
        #[arg(long, default_value = "fencing-probe")]
        key: String,
    },
}

#[derive(Debug, Subcommand)]
enum LeaseCommand {
    /// Who holds a lease, with which token, for how much longer.
    Status {
        /// The resource, e.g. settle:m_4471.
        resource: String,
        /// The kind of lease.
        #[arg(long, value_enum)]
        lease: Backend,
    },
}

#[derive(Debug, Subcommand)]
enum TokenCommand {
    /// The highest token issued for a resource.
    Current {
        /// The resource, e.g. settle:m_4471.
        resource: String,
        /// Where the counter lives.
        #[arg(long, value_enum)]
        tokens: Backend,
    },
    /// Raise a counter to at least N (never lowers it).
    Advance {
        /// The resource, e.g. settle:m_4471.
        resource: String,
        /// Where the counter lives.
        #[arg(long, value_enum)]
        tokens: Backend,
        /// The value to raise it to, in canonical decimal (no sign, no leading zero).
        #[arg(long, value_parser = parse_token)]
        to: FencingToken,
    },
}

/// A token as the library writes one: canonical decimal only, through `FencingToken`'s own
/// parser (`033`, `+33` and `3.3e1` are refused, not read as 33).
fn parse_token(text: &str) -> Result<FencingToken, String> {
    text.parse::<FencingToken>().map_err(|e| e.to_string())
}

/// Where a lease or a counter lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    /// Redis (REDIS_URL, or REDIS_SENTINELS and REDIS_SERVICE).
    Redis,
    /// PostgreSQL (DATABASE_URL).
    Postgres,
    /// MySQL or MariaDB (MYSQL_URL).
    Mysql,
    /// DynamoDB (the AWS environment variables).
    Dynamodb,
    /// etcd (ETCD_ENDPOINTS).
    Etcd,
}

/// Runs `fencing` on the command line `args` (the program's name first) and returns its exit
/// code. Bad usage of the arguments themselves prints clap's message and exits the process
/// with code 2 (`--help` and `--version` print and exit with 0), as any clap program does.
pub fn run(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let cli = Cli::parse_from(args);
    // `rediss://` needs a process-wide TLS provider; one installed already (by the program
    // embedding this) is kept.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            return output::fail(cli.json, &Failure::service(format!("cannot start: {err}")));
        }
    };
    let done = runtime.block_on(async {
        match cli.command {
            Command::Lease {
                command: LeaseCommand::Status { resource, lease },
            } => commands::lease_status(&cli.settings, &resource, lease).await,
            Command::Token {
                command: TokenCommand::Current { resource, tokens },
            } => commands::token_current(&cli.settings, &resource, tokens).await,
            Command::Token {
                command:
                    TokenCommand::Advance {
                        resource,
                        tokens,
                        to,
                    },
            } => commands::token_advance(&cli.settings, &resource, tokens, to).await,
            Command::Seed {
                resource,
                tokens,
                from,
            } => commands::seed(&cli.settings, &resource, tokens, &from).await,
            Command::Probe { stores, key } => commands::probe(&cli.settings, &stores, &key).await,
        }
    });
    match done {
        Ok(report) => output::print(cli.json, &report),
        Err(failure) => output::fail(cli.json, &failure),
    }
}

/// Checks the command line `args` (the program's name first) as `fencing` does before it
/// connects to anything: the arguments, the resource name, the probe key and every store
/// named (its kind, place and options). `Ok` means the command would go on to connect;
/// `Err` is the message it would print (clap's own for the arguments, `--help` included).
pub fn check_usage(args: impl IntoIterator<Item = OsString>) -> Result<(), String> {
    let cli = Cli::try_parse_from(args).map_err(|e| e.to_string())?;
    let invalid = |e: fencing_core::InvalidInput| e.to_string();
    let stores: &[String] = match &cli.command {
        Command::Lease {
            command: LeaseCommand::Status { resource, .. },
        }
        | Command::Token {
            command: TokenCommand::Current { resource, .. } | TokenCommand::Advance { resource, .. },
        } => {
            ResourceName::new(resource.as_str()).map_err(invalid)?;
            &[]
        }
        Command::Seed { resource, from, .. } => {
            ResourceName::new(resource.as_str()).map_err(invalid)?;
            from
        }
        Command::Probe { stores, key } => {
            RecordKey::new(key.as_str()).map_err(invalid)?;
            stores
        }
    };
    spec::parse_all(stores).map_err(|failure| failure.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(args: &[&str]) -> Result<(), String> {
        check_usage(
            std::iter::once("fencing")
                .chain(args.iter().copied())
                .map(OsString::from),
        )
    }

    #[test]
    fn usage_is_checked_without_connecting_and_each_refusal_says_why() {
        check(&["probe", "postgres:public.refund", "s3:receipts/m_4471/"]).unwrap();
        check(&[
            "token",
            "advance",
            "settle:m_4471",
            "--tokens",
            "postgres",
            "--to",
            "40",
        ])
        .unwrap();
        let refused = |args: &[&str], says: &str| {
            let message = check(args).unwrap_err();
            assert!(message.contains(says), "{args:?}: {message}");
        };
        refused(&["probe", "cassandra:x"], "unknown kind of store");
        refused(&["probe", "mysql:x"], "DATABASE.TABLE");
        refused(&["probe", "postgres:refund"], "SCHEMA.TABLE");
        refused(&["probe", "s3:receipts", "--key", ""], "empty");
        refused(&["lease", "status", "", "--lease", "redis"], "empty");
        refused(
            &[
                "seed",
                "settle:m_4471",
                "--tokens",
                "etcd",
                "--from",
                "s3:b:x",
            ],
            "not NAME=VALUE",
        );
        refused(
            &["token", "advance", "r", "--tokens", "redis", "--to", "033"],
            "033",
        );
        refused(&["--help"], "Usage");
    }
}

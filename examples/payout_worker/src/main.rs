//! A payout worker on a payments team's own schema: uuid keys, a status column, columns of
//! their own set with the confirm, a ledger entry in the same transaction, a Redis lease
//! renewed while it runs, and its epochs kept in the team's database: PostgreSQL, or MySQL
//! and MariaDB (a `mysql://` URL).
//!
//! ```text
//! cargo run -p payout-worker
//! DATABASE_URL=postgres://… REDIS_URL=redis://… cargo run -p payout-worker
//! DATABASE_URL=mysql://root@127.0.0.1:3306/test cargo run -p payout-worker
//! AWS_ENDPOINT_URL=http://127.0.0.1:5000 cargo run -p payout-worker
//! ```
//!
//! It creates the tables if missing (as they were before fencing: in a schema `payout_demo`
//! on PostgreSQL, a database `payout_demo` on MySQL), fits the payouts table for fencing with
//! the SQL a migration tool would run, queues 25 payouts for merchant m_4471 and runs one
//! worker over them.
//!
//! With `AWS_ENDPOINT_URL` set (an emulator such as moto, or a service endpoint), each
//! payout's ledger entry goes to the DynamoDB table `payout_demo_ledger` and its receipt to
//! the S3 bucket `payout-demo-receipts` (both created if missing), written under the lease's
//! token before the payout's confirm. Credentials come from `AWS_ACCESS_KEY_ID` and
//! `AWS_SECRET_ACCESS_KEY` (`test`/`test` if unset, as an emulator takes), the region from
//! `AWS_REGION` (`us-east-1`). A worker on the service would build its clients with
//! `aws-config` instead (the guide shows both).
//!
//! To watch a paused worker refused, run one that stalls (the whole process, renewal
//! included) on its fifth gateway call for 40 s, and, once its 10 s lease has run out,
//! another in a second terminal:
//!
//! ```text
//! cargo run -p payout-worker -- --ttl-secs 10 --stall-on-call 5 --stall-secs 40
//! cargo run -p payout-worker -- --ttl-secs 10 --queue 0
//! ```

mod payouts;
mod worker;

use std::sync::Arc;

use fencing::prelude::*;

use crate::payouts::{MySqlPayouts, PayoutsDb, PgPayouts};

/// The schema (PostgreSQL) or database (MySQL) of the team's tables.
const SCHEMA: &str = "payout_demo";

struct Options {
    queue: i64,
    ttl_secs: u64,
    stall: Option<(usize, u64)>,
}

fn options() -> Result<Options, String> {
    let mut options = Options {
        queue: 25,
        ttl_secs: 30,
        stall: None,
    };
    let (mut stall_on, mut stall_secs) = (None, 40);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or(format!("{name} takes a whole number"))
        };
        match flag.as_str() {
            "--queue" => options.queue = value("--queue")? as i64,
            "--ttl-secs" => options.ttl_secs = value("--ttl-secs")?,
            "--stall-on-call" => stall_on = Some(value("--stall-on-call")? as usize),
            "--stall-secs" => stall_secs = value("--stall-secs")?,
            other => {
                return Err(format!(
                    "unknown argument {other:?}; takes --queue N, --ttl-secs S, \
                     --stall-on-call N, --stall-secs S"
                ));
            }
        }
    }
    options.stall = stall_on.map(|n| (n, stall_secs));
    Ok(options)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    let options = options().unwrap_or_else(|why| {
        eprintln!("{why}");
        std::process::exit(2)
    });
    let database_url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let redis_url =
        std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
    let payouts: Box<dyn PayoutsDb> = if database_url.starts_with("mysql:") {
        let pool = sqlx::MySqlPool::connect(&database_url).await?;
        Box::new(MySqlPayouts::new(pool, SCHEMA)?)
    } else {
        let pool = sqlx::PgPool::connect(&database_url).await?;
        Box::new(PgPayouts::new(pool, SCHEMA)?)
    };

    payouts.create_tables().await?;
    println!("-- the migration fencing asks for (run by a migration tool, or here):");
    println!("{}", payouts.migration_sql());
    payouts.migrate().await?;
    payouts.queue("m_4471", options.queue, 7025).await?;

    // Tokens from Redis, prefixed with epochs from the team's database: a Redis that loses
    // its counter cannot issue a token twice.
    let redis = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await?;
    let lease: Arc<dyn Lease> = Arc::new(RedisLease::new(redis, payouts.epochs().await?));

    let ledger = match std::env::var("AWS_ENDPOINT_URL") {
        Ok(endpoint) => {
            let (dynamodb, s3) = aws_clients(&endpoint);
            worker::Ledger::on_aws(dynamodb, s3, "payout_demo_ledger", "payout-demo-receipts")
                .await?
        }
        Err(_) => worker::Ledger::InDatabase,
    };

    let gateway = worker::Gateway::default();
    if let Some((call, secs)) = options.stall {
        gateway.stall_on_call(call, std::time::Duration::from_secs(secs));
    }
    let ttl = Ttl::from_secs(options.ttl_secs)?;
    let run = worker::run(&*payouts, lease, "m_4471", ttl, &gateway, &ledger).await?;
    println!("{run}");
    let (paid, entries) = payouts.counts().await?;
    println!("payouts paid in all: {paid}; ledger entries in the database in all: {entries}");
    if let worker::Ledger::Aws { entries, .. } = &ledger {
        let items = entries
            .client()
            .scan()
            .table_name(entries.table().name())
            .select(aws_sdk_dynamodb::types::Select::Count)
            .send()
            .await?
            .count();
        println!("ledger items in DynamoDB in all: {items}");
    }
    Ok(())
}

/// DynamoDB and S3 clients on `endpoint`: static credentials, rustls with ring (it speaks
/// plain HTTP to a local emulator too), S3 addressed path-style (an emulator has no virtual
/// hosts). The adapters turn the SDK's retries off in their copies: `Holder` resends a write
/// whose answer was lost, with the same token, and recognises its own earlier success.
fn aws_clients(endpoint: &str) -> (aws_sdk_dynamodb::Client, aws_sdk_s3::Client) {
    use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
    let variable = |name: &str, default: &str| std::env::var(name).unwrap_or(default.to_owned());
    let credentials = aws_credential_types::Credentials::new(
        variable("AWS_ACCESS_KEY_ID", "test"),
        variable("AWS_SECRET_ACCESS_KEY", "test"),
        None,
        None,
        "payout-worker",
    );
    let region = variable("AWS_REGION", "us-east-1");
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https();
    let dynamodb = aws_sdk_dynamodb::Config::builder()
        .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_sdk_dynamodb::config::Region::new(region.clone()))
        .credentials_provider(credentials.clone())
        .http_client(http.clone())
        .build();
    let s3 = aws_sdk_s3::Config::builder()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(aws_sdk_s3::config::Region::new(region))
        .credentials_provider(credentials)
        .http_client(http)
        .force_path_style(true)
        .build();
    (
        aws_sdk_dynamodb::Client::from_conf(dynamodb),
        aws_sdk_s3::Client::from_conf(s3),
    )
}

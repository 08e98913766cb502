//! `fencing-harness worker`: the refund settlement as one process. It receives the job from
//! the run's SQS queue (keeping the message invisible while it works), takes the merchant's
//! lease, takes the job's row, claims each refund in PostgreSQL, sends it to the gateway (the
//! refund id as idempotency key), confirms it, posts its ledger entry in DynamoDB and its
//! receipt in S3, and marks it filed; once every refund is filed it marks the job finished and
//! deletes the message. Every one of those writes carries the lease's fencing token: the
//! job's row is taken first, so a holder that stalled past its TTL can no more mark the job
//! finished (and delete a message another worker is working on) than write a refund. It exits
//! when the queue is empty and the job finished. With `--concurrency N` it keeps N refunds in
//! flight through the batch's pipeline.
//!
//! It reports on standard output, one line per step (`received <message>`, `acquired <holder>
//! token <token>`, `claimed <id>`, `called <id>`, `filed <id>`, `ended`, `deleted <message> by
//! <holder>`, `done`), which is what the campaign watches to time its faults, count deletions
//! and check that no token was issued twice, plus a
//! line for each of the library's refusals, take-overs and look-ups (`library_events`), which
//! the campaign draws in the run's picture. It
//! does not consult its lease renewal before writing: that check narrows the window without
//! closing it, and the harness measures what the fences do alone.

mod library_events;
mod settle;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::{
    FencedBatch, FencedStore, Lease, LeaseGuard, LeaseRenewal, MismatchPolicy, RecordKey, Ttl,
};
use fencing_harness::history;
use fencing_harness::plan::{LeaseKind, TeamDatabase};
use fencing_harness::queue::{self, JobMessage, JobQueue, VisibilityKeeper};
use fencing_harness::servers::{WorkerOf, etcd_client, redis_connection};
use fencing_harness::stores::{self, Clients, LeaseServer, RunNames, RunStores};
use fencing_redis::RedisSentinelConnection;
use fencing_simulation::SubstitutedLease;

/// Settles merchant m_4471's refunds of one harness run.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    of: WorkerOf,
    /// `off`: every write presents one token (the control; never in production).
    #[arg(long, value_enum, default_value = "on")]
    fences: Switch,
    /// A PostgreSQL of the lease's own (the PostgreSQL lease only; unless given, the lease
    /// lives in `--database-url`).
    #[arg(long)]
    lease_database_url: Option<String>,
    /// MySQL or MariaDB (the MySQL lease, and the refunds and job's row of a run on it).
    #[arg(long)]
    mysql_url: Option<String>,
    /// Redis (the Redis lease on one server).
    #[arg(long, conflicts_with = "redis_sentinels")]
    redis_url: Option<String>,
    /// The sentinels' URLs, comma-separated (the Redis lease behind Sentinel).
    #[arg(long, value_delimiter = ',', requires = "redis_service")]
    redis_sentinels: Vec<String>,
    /// The name the sentinels monitor the primary under.
    #[arg(long)]
    redis_service: Option<String>,
    /// `off`: the Redis lease's counter is not bound to the server's history, so a replica
    /// promoted behind it issues tokens again (the failover's control; never in production).
    #[arg(long, value_enum, default_value = "on")]
    counter_binding: Switch,
    /// `on`: the lease hands each acquisition issued an even token the token below it, so one
    /// token goes to two acquisitions (the history checker's seeded bug; never in production).
    #[arg(long, value_enum, default_value = "off")]
    reissue_tokens: Switch,
    /// Refunds in flight at once: 1 settles one after another, more runs the batch's
    /// pipeline.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
    /// Stop this process (SIGSTOP) right after the gateway answers for this refund, before
    /// the confirm: the campaign then kills it there.
    #[arg(long)]
    stop_after_call: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Switch {
    On,
    Off,
}

/// Exit code when a store or the lease is not fit to run on: nothing was written.
const UNFIT: u8 = 2;

/// Runs the worker until every refund is filed.
pub(crate) async fn main(args: Args) -> ExitCode {
    fencing_harness::exit_with_parent();
    let events = library_events::LibraryEvents::printed();
    {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        tracing_subscriber::registry().with(events.clone()).init();
    }
    let worker = match Worker::connect(&args).await {
        Ok(worker) => worker,
        Err(why) => return unfit(why),
    };
    let mut acquisitions = 0u32;
    loop {
        let Some(message) = worker.receive().await else {
            println!("done");
            return ExitCode::SUCCESS;
        };
        println!("received {} (receive {})", message.id, message.receives);
        let _keeper = VisibilityKeeper::start(
            worker.queue.clone(),
            message.clone(),
            worker.visibility,
            worker.ttl.duration() / 3,
        );
        if worker.finished_before(&message).await {
            continue;
        }
        acquisitions += 1;
        let holder = format!("{}#{acquisitions}", args.of.name);
        let guard = worker.acquire(&holder).await;
        events.holder_is(&holder);
        println!("acquired {holder} token {}", guard.token());
        // The job may have been finished while this worker waited for the lease: its message
        // came back to the queue (a visibility extension lost, say) while the finisher still
        // held it. Finishing it again would overwrite who finished it.
        if worker.finished_before(&message).await {
            let _ = worker.lease.release(guard).await;
            continue;
        }
        let lease = &worker.lease;
        let renewal = LeaseRenewal::start(lease.clone(), guard.clone(), worker.ttl.duration() / 3);
        let stores = &worker.stores;
        let batch_stores: [Arc<dyn FencedStore>; 4] = [
            stores.job.store(),
            stores.refunds.store(),
            stores.ledger.clone(),
            stores.receipts.clone(),
        ];
        let batch = match FencedBatch::new(lease.clone(), guard, batch_stores) {
            Ok(batch) => batch.with_mismatch_policy(MismatchPolicy::Skip),
            Err(err) => return unfit(err.to_string()),
        };
        let finished = worker
            .settlement
            .run_job(&batch, &holder, args.concurrency.into())
            .await;
        renewal.stop();
        let released = batch.finish().await;
        match (finished, released) {
            (Ok(Some(filed)), released) => {
                println!("ended {holder}: {filed} filed, job finished, {released:?}");
                delete(&worker.queue, &message, &holder).await;
            }
            (Ok(None), released) => println!("ended {holder}: refunds left, {released:?}"),
            (Err(err), _) => println!("ended {holder}: {err}"),
        }
    }
}

/// What a worker holds across deliveries of the job.
struct Worker {
    name: String,
    stores: RunStores,
    lease: Arc<dyn Lease>,
    resource: fencing_core::ResourceName,
    ttl: Ttl,
    settlement: settle::Settlement,
    queue: JobQueue,
    /// How long a received message stays invisible, in whole seconds (SQS's unit).
    visibility: i32,
}

impl Worker {
    /// Connects to every server the run uses and checks the stores; an error says what is
    /// unfit.
    async fn connect(args: &Args) -> Result<Worker, String> {
        let names = RunNames::new(&args.of.run);
        let application_name = format!("harness_{}_{}", names.id(), args.of.name);
        let mut clients = Clients::connect(
            &args.of.database_url,
            &application_name,
            &args.of.aws_endpoint,
        )
        .await
        .map_err(|err| format!("cannot connect to PostgreSQL: {err}"))?;
        if args.of.lease.team_database() == TeamDatabase::Mysql {
            let url = args
                .mysql_url
                .as_deref()
                .ok_or("a run on the MySQL lease needs --mysql-url")?;
            clients = clients
                .with_mysql(url, Some(names.mysql_database()))
                .await
                .map_err(|err| format!("cannot connect to MySQL: {err}"))?;
        }
        let stores =
            RunStores::new(&names, &clients, args.of.lease).map_err(|err| err.to_string())?;
        let server = lease_server(args, &application_name).await?;
        preflight(&stores).await?;
        let counter_binding = args.counter_binding == Switch::On;
        let lease = stores::lease(args.of.lease, &names, &clients, server, counter_binding)
            .map_err(|err| err.to_string())?;
        let lease: Arc<dyn Lease> = match (args.fences, args.reissue_tokens) {
            (Switch::Off, _) => Arc::new(SubstitutedLease::one_token(lease)),
            (Switch::On, Switch::On) => Arc::new(SubstitutedLease::reissuing(lease)),
            (Switch::On, Switch::Off) => lease,
        };
        let ttl = Ttl::from_millis(args.of.ttl_ms).map_err(|err| err.to_string())?;
        let queue = clients
            .job_queue(&names)
            .await
            .map_err(|err| format!("no job queue for run {}: {err}", names.id()))?;
        Ok(Worker {
            name: args.of.name.clone(),
            settlement: settle::Settlement {
                stores: stores.clone(),
                gateway: args.of.gateway.clone(),
                stop_after_call: args.stop_after_call.clone(),
                // An attempt unanswered for a TTL is dropped and sent again, so a partition
                // (1.5 to 2 TTLs) still leaves a write whose outcome is unknown to its holder.
                // Not shorter: with 8 refunds in flight per worker, the AWS emulator (one
                // request at a time) answers in up to a second on a busy 2-core machine, and a
                // shorter limit ended jobs that were only waiting (2 of 2 CI runs, 2026-12-07).
                request_timeout: ttl.duration(),
            },
            stores,
            lease,
            resource: names.resource(),
            visibility: queue::visibility_for(ttl.duration()),
            ttl,
            queue,
        })
    }

    /// The job's next delivery, waiting for one; `None` once the queue is empty and the job
    /// finished.
    async fn receive(&self) -> Option<JobMessage> {
        loop {
            match self.queue.receive(self.visibility).await {
                Ok(Some(message)) => return Some(message),
                Ok(None) => {
                    match self.settlement.job_finished_by().await {
                        Ok(Some(_)) => return None,
                        Ok(None) => {}
                        Err(err) => println!("failed reading the job: {err}"),
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(err) => {
                    println!("failed receiving: {err}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// True when `message` needs no work: an earlier holder finished the job and did not live
    /// to delete its message (deleted now), or the job could not be read (it comes back).
    async fn finished_before(&self, message: &JobMessage) -> bool {
        match self.settlement.job_finished_by().await {
            Ok(Some(finisher)) => {
                let by = format!("{}, finished by {finisher}", self.name);
                delete(&self.queue, message, &by).await;
                true
            }
            Ok(None) => false,
            Err(err) => {
                println!("failed reading the job: {err}");
                true
            }
        }
    }

    /// The merchant's lease, waiting while another holds it, for `holder`; the acquisition
    /// that got it is said as an `op` line (crate::history).
    async fn acquire(&self, holder: &str) -> LeaseGuard {
        loop {
            let invoked = history::now();
            match self.lease.try_acquire(&self.resource, self.ttl).await {
                Ok(Some(guard)) => {
                    let ended = history::now();
                    println!(
                        "op acquire {invoked} {ended} {holder} token {}",
                        guard.token()
                    );
                    return guard;
                }
                Ok(None) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(err) => {
                    println!("failed acquiring: {err}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
}

/// The server the run's lease lives on, connected (none for a lease in the run's own
/// PostgreSQL or MySQL, or in DynamoDB).
async fn lease_server(args: &Args, application_name: &str) -> Result<Option<LeaseServer>, String> {
    Ok(match args.of.lease {
        LeaseKind::Redis if !args.redis_sentinels.is_empty() => {
            let redis = sentinel_connection(&args.redis_sentinels, args.redis_service.as_deref())?;
            Some(LeaseServer::RedisSentinel(redis))
        }
        LeaseKind::Redis => Some(LeaseServer::Redis(
            redis_connection(args.redis_url.as_deref()).await?,
        )),
        LeaseKind::Etcd => Some(LeaseServer::Etcd(Box::new(
            etcd_client(&args.of.etcd_endpoints).await?,
        ))),
        LeaseKind::Postgres => match &args.lease_database_url {
            Some(url) => Some(LeaseServer::Postgres(
                lease_database(url, application_name)
                    .await
                    .map_err(|err| format!("cannot connect to the lease's PostgreSQL: {err}"))?,
            )),
            None => None,
        },
        // In the run's database: the clients' pool.
        LeaseKind::Dynamodb | LeaseKind::Mysql => None,
    })
}

/// Deletes the job's message, saying so (`by` names who, for the audit). A failure leaves it
/// to come back to the queue, where whoever receives it next finds the job finished.
async fn delete(queue: &JobQueue, message: &JobMessage, by: &str) {
    match queue.delete(message).await {
        Ok(()) => println!("deleted {} by {by}", message.id),
        Err(err) => println!("failed deleting {}: {err}", message.id),
    }
}

/// Checks every store before anything is written: the refunds table has the columns the
/// fence needs (the library inspects it on first use), the ledger table and the receipts
/// bucket exist.
async fn preflight(stores: &RunStores) -> Result<(), String> {
    let probe = RecordKey::new("preflight").expect("a valid key");
    let checks: [Arc<dyn FencedStore>; 4] = [
        stores.job.store(),
        stores.refunds.store(),
        stores.ledger.clone(),
        stores.receipts.clone(),
    ];
    for store in checks {
        store
            .read(&probe)
            .await
            .map_err(|err| format!("store {} is not fit for fenced writes: {err}", store.name()))?;
    }
    Ok(())
}

/// A pool of the lease's own PostgreSQL, whose requests give up after two seconds rather than
/// wait for a server that is gone (a failover moves it).
async fn lease_database(url: &str, application_name: &str) -> Result<sqlx::PgPool, sqlx::Error> {
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(2))
        .connect_with(options.application_name(application_name))
        .await
}

/// A connection to the primary the sentinels name, found again after a failover.
fn sentinel_connection(
    sentinels: &[String],
    service: Option<&str>,
) -> Result<RedisSentinelConnection, String> {
    let service = service.ok_or("the Redis lease behind Sentinel needs --redis-service")?;
    RedisSentinelConnection::to_service(sentinels, service)
        .map_err(|e| format!("sentinels {}: {e}", sentinels.join(",")))
}

fn unfit(why: String) -> ExitCode {
    eprintln!("fencing-harness worker: {why}; nothing was written");
    ExitCode::from(UNFIT)
}

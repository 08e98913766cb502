//! `fencing-harness scale-worker`: one worker process of the settlement at scale. It settles
//! several merchants at once, each received from the run's queue as one message: it takes
//! the merchant's lease, then settles the merchant's unsent refunds a page at a time through
//! the batch's pipeline (claims and confirms grouped, gateway calls side by side), and deletes
//! the message once none is left unsent. It exits when the queue is empty.
//!
//! Memory is bounded by a page and the pipeline's window, never by the merchant's refunds:
//! the pipeline holds the keys it is given, so it is given a page at a time.
//!
//! It reports on standard output, one line per merchant (`acquired <merchant> token <t>`,
//! `settled <merchant> <n>`, `stopped <merchant>: <why>`) and, last, `done cpu_ms <n>
//! peak_rss_kib <n>` (its own CPU time and high-water resident memory), which the scale
//! command reads.
//!
//! With `--pause-after-refunds N` it stops itself (SIGSTOP) right after the gateway's N-th
//! refund, before that refund's confirm: it says `paused <merchant> after <refund> token <t>`
//! first. The scale command's faults strike there, so their effects are certain: a worker
//! killed there leaves a refund its successor must look up, one resumed once its successor
//! has claimed that refund is refused on its confirm. N below a merchant's refunds leaves
//! the worker work ahead of it whatever the machine's speed.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fencing_core::{
    FencedBatch, FencedStore, Lease, LeaseGuard, LeaseRenewal, Lifecycle, RecordKey, Ttl,
};
use fencing_harness::merchants;
use fencing_harness::payments::GatewayCall;
use fencing_harness::plan::LeaseKind;
use fencing_harness::queue::{self, JobMessage, JobQueue, VisibilityKeeper};
use fencing_harness::servers::{WorkerOf, etcd_client, redis_connection};
use fencing_harness::stores::{self, Clients, LeaseServer, RunNames};
use fencing_postgres::{PgStore, PgTable};
use sqlx::{AssertSqlSafe, PgPool, Row};

/// Settles merchants of one scale run, as many at once as told.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    of: WorkerOf,
    /// Redis (the Redis lease).
    #[arg(long)]
    redis_url: Option<String>,
    /// Merchants settled at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    merchants_at_once: u16,
    /// Refunds in flight at once per merchant (the pipeline's concurrency).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
    /// Refunds listed, and given to the pipeline, at a time.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    page: u32,
    /// Stop this process (SIGSTOP) right after the gateway's N-th refund of this worker,
    /// before its confirm.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pause_after_refunds: Option<u64>,
}

/// Exit code when a store or the lease is not fit to run on: nothing was written.
const UNFIT: u8 = 2;

/// Settles merchants until the queue is empty.
pub(crate) async fn main(args: Args) -> ExitCode {
    fencing_harness::exit_with_parent();
    let worker = match Worker::connect(&args).await {
        Ok(worker) => Arc::new(worker),
        Err(why) => {
            eprintln!("fencing-harness scale-worker: {why}; nothing was written");
            return ExitCode::from(UNFIT);
        }
    };
    let tasks: Vec<_> = (0..args.merchants_at_once)
        .map(|_| tokio::spawn(worker.clone().settle_until_empty()))
        .collect();
    for task in tasks {
        if let Err(err) = task.await {
            eprintln!("fencing-harness scale-worker: a task failed: {err}");
            return ExitCode::FAILURE;
        }
    }
    let usage = merchants::own_usage();
    println!(
        "done cpu_ms {} peak_rss_kib {}",
        usage.cpu.as_millis(),
        usage.peak_rss_kib
    );
    ExitCode::SUCCESS
}

/// What a worker settles with.
struct Worker {
    name: String,
    pool: PgPool,
    refunds: Arc<PgStore>,
    lease: Arc<dyn Lease>,
    ttl: Ttl,
    queue: JobQueue,
    /// How long a received message stays invisible, in whole seconds.
    visibility: i32,
    gateway: String,
    concurrency: usize,
    page: i64,
    /// The gateway refund after which this process stops itself, if any.
    pause_after_refunds: Option<u64>,
    /// Gateway refunds made so far.
    refunds_made: AtomicU64,
}

/// One page of a merchant's unsent refunds: their keys and amounts.
struct Page {
    keys: Vec<RecordKey>,
    amounts: HashMap<RecordKey, i64>,
}

impl Worker {
    async fn connect(args: &Args) -> Result<Worker, String> {
        let names = RunNames::new(&args.of.run);
        let application_name = format!("scale_{}_{}", names.id(), args.of.name);
        // Each merchant's pipeline has a claim and a confirm group under way at most.
        let connections = u32::from(args.merchants_at_once) * 2 + 1;
        let clients = Clients::connect_with(
            &args.of.database_url,
            &application_name,
            &args.of.aws_endpoint,
            connections,
        )
        .await
        .map_err(|err| format!("cannot connect to PostgreSQL: {err}"))?;
        let server = match args.of.lease {
            LeaseKind::Redis => Some(LeaseServer::Redis(
                redis_connection(args.redis_url.as_deref()).await?,
            )),
            LeaseKind::Etcd => Some(LeaseServer::Etcd(Box::new(
                etcd_client(&args.of.etcd_endpoints).await?,
            ))),
            LeaseKind::Postgres | LeaseKind::Dynamodb | LeaseKind::Mysql => None,
        };
        let lease = stores::lease(args.of.lease, &names, &clients, server, true)
            .map_err(|err| err.to_string())?;
        let table = PgTable::new(names.schema(), "refunds").map_err(|err| err.to_string())?;
        let refunds = PgStore::new(clients.pool.clone(), table)
            .named("refunds")
            .map_err(|err| err.to_string())?;
        let probe = RecordKey::new("preflight").expect("a valid key");
        refunds
            .read(&probe)
            .await
            .map_err(|err| format!("the refunds table is not fit for fenced writes: {err}"))?;
        let ttl = Ttl::from_millis(args.of.ttl_ms).map_err(|err| err.to_string())?;
        let queue = clients
            .job_queue(&names)
            .await
            .map_err(|err| format!("no queue for run {}: {err}", names.id()))?;
        Ok(Worker {
            name: args.of.name.clone(),
            pool: clients.pool,
            refunds: Arc::new(refunds),
            lease,
            visibility: queue::visibility_for(ttl.duration()),
            ttl,
            queue,
            gateway: args.of.gateway.clone(),
            concurrency: args.concurrency.into(),
            page: args.page.into(),
            pause_after_refunds: args.pause_after_refunds,
            refunds_made: AtomicU64::new(0),
        })
    }

    /// Receives merchants and settles each, until the queue has nothing left, visible or in
    /// flight.
    async fn settle_until_empty(self: Arc<Self>) {
        loop {
            match self.queue.receive(self.visibility).await {
                Ok(Some(message)) => self.settle_merchant(&message).await,
                Ok(None) => match self.queue.depth().await {
                    Ok(depth) if depth.visible == 0 && depth.in_flight == 0 => return,
                    _ => tokio::time::sleep(Duration::from_millis(100)).await,
                },
                Err(err) => {
                    println!("failed receiving: {err}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// Settles the merchant `message` names, deleting the message once none of its refunds is
    /// left unsent; says what came of it.
    async fn settle_merchant(&self, message: &JobMessage) {
        let merchant = message.body.as_str();
        let _keeper = VisibilityKeeper::start(
            self.queue.clone(),
            message.clone(),
            self.visibility,
            self.ttl.duration() / 3,
        );
        match self.settle(merchant).await {
            Ok(settled) => match self.queue.delete(message).await {
                Ok(()) => println!("settled {merchant} {settled}"),
                Err(err) => println!("stopped {merchant}: cannot delete its message: {err}"),
            },
            Err(why) => println!("stopped {merchant}: {why}"),
        }
    }

    /// Settles `merchant` under its lease; returns how many refunds it found unsent, once
    /// none is left.
    async fn settle(&self, merchant: &str) -> Result<u64, String> {
        let unsent = self.unsent(merchant).await?;
        if unsent == 0 {
            return Ok(0);
        }
        let resource = merchants::settlement_of(merchant).map_err(|err| err.to_string())?;
        let guard = self.acquire(&resource).await;
        let guard_token = guard.token();
        println!("acquired {merchant} token {guard_token}");
        let holder_name = format!("{}@{guard_token}", self.name);
        let renewal =
            LeaseRenewal::start(self.lease.clone(), guard.clone(), self.ttl.duration() / 3);
        let stores: [Arc<dyn FencedStore>; 1] = [self.refunds.clone()];
        let batch =
            FencedBatch::new(self.lease.clone(), guard, stores).map_err(|e| e.to_string())?;
        let settled = self
            .settle_pages(&batch, merchant, &holder_name, guard_token)
            .await;
        renewal.stop();
        // A release refused because the lease already ended is no failure: the fences kept
        // every write to this holder's tenure.
        let _ = batch.finish().await;
        settled?;
        match self.unsent(merchant).await? {
            0 => Ok(unsent),
            left => Err(format!("{left} refunds left unsent")),
        }
    }

    /// Every unsent refund of `merchant`, a page at a time through the batch's pipeline.
    async fn settle_pages(
        &self,
        batch: &FencedBatch,
        merchant: &str,
        by: &str,
        token: fencing_core::FencingToken,
    ) -> Result<(), String> {
        let lifecycle = Lifecycle::default();
        let after_perform = |key: &RecordKey| {
            let made = self.refunds_made.fetch_add(1, Ordering::SeqCst) + 1;
            if Some(made) == self.pause_after_refunds {
                println!("paused {merchant} after {key} token {token}");
                fencing_harness::stop_this_process();
            }
        };
        let mut after = String::new();
        loop {
            let page = self.next_page(merchant, &after).await?;
            let Some(last) = page.keys.last() else {
                return Ok(());
            };
            after = last.as_str().to_owned();
            let call = GatewayCall {
                addr: &self.gateway,
                by,
                amounts: &page.amounts,
                after_perform: &after_perform,
            };
            batch
                .holder()
                .pipeline(&*self.refunds, &lifecycle, &call)
                .concurrency(self.concurrency)
                .run(page.keys)
                .await
                .into_result()
                .map_err(|err| err.to_string())?;
        }
    }

    /// The merchant's lease, waiting while another holds it.
    async fn acquire(&self, resource: &fencing_core::ResourceName) -> LeaseGuard {
        loop {
            match self.lease.try_acquire(resource, self.ttl).await {
                Ok(Some(guard)) => return guard,
                Ok(None) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(err) => {
                    println!("failed acquiring {resource}: {err}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// How many of `merchant`'s refunds are not sent.
    async fn unsent(&self, merchant: &str) -> Result<u64, String> {
        let count: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT count(*) FROM {} WHERE merchant = $1 AND state <> 'sent'",
            self.refunds.table().name()
        )))
        .bind(merchant)
        .fetch_one(&self.pool)
        .await
        .map_err(|err| format!("cannot count {merchant}'s refunds: {err}"))?;
        Ok(count.try_into().unwrap_or(0))
    }

    /// The next page of `merchant`'s unsent refunds after key `after`, in key order.
    async fn next_page(&self, merchant: &str, after: &str) -> Result<Page, String> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT id, amount_cents FROM {} WHERE merchant = $1 AND id > $2 AND state <> 'sent' \
             ORDER BY id LIMIT $3",
            self.refunds.table().name()
        )))
        .bind(merchant)
        .bind(after)
        .bind(self.page)
        .fetch_all(&self.pool)
        .await
        .map_err(|err| format!("cannot list {merchant}'s refunds: {err}"))?;
        let mut page = Page {
            keys: Vec::with_capacity(rows.len()),
            amounts: HashMap::with_capacity(rows.len()),
        };
        for row in rows {
            let key = RecordKey::new(row.get::<String, _>(0)).map_err(|err| err.to_string())?;
            page.amounts.insert(key.clone(), row.get(1));
            page.keys.push(key);
        }
        Ok(page)
    }
}

//! The worked example's settlement, runnable: merchant `m_4471`, 1,200 refunds of 70.25 EUR, workers
//! that pause, a gateway with or without idempotency keys, and an audit of what went wrong.
//! The job the workers run is the caller's [`Job`].
//!
//! Run it in a paused tokio runtime (`start_paused = true`, current thread): the 8-second pause
//! and the 30-second TTL then pass in virtual time, and every run of one configuration gives
//! the same journal.

mod gateway;
mod journal;
mod timeline;
mod worker;

pub use gateway::{CallResult, Gateway, GatewayMode, GatewayTally};
pub use journal::{Acquisition, Event, What};
pub use worker::{Delivery, Job};

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fencing_core::{
    FenceCheck, FencedStore, FencedWrite, FencingToken, Lease, Lifecycle, MemoryLease, MemoryStore,
    RecordKey, ResourceName, RetryPolicy, State, Ttl,
};

use crate::Fencing;
use journal::Journal;
use worker::{Shared, work};

/// A stall of a worker just before its gateway call for one refund.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pause {
    /// The refund whose call is due.
    pub before_call_for: RecordKey,
    /// How long the worker stalls.
    pub length: Duration,
    /// After `length`, the worker stays stalled until another worker's claim of the refund
    /// has been accepted: a take-over made certain however slow the machine, for a run in
    /// real time whose assertion needs one (a stale write refused). A run in which nobody
    /// else claims the refund then never ends.
    pub until_taken_over: bool,
}

/// One worker: when it is handed the job, how it retries the lease, where it stalls.
#[derive(Clone, Debug)]
pub struct WorkerPlan {
    /// Its name in the journal.
    pub name: String,
    /// When the queue hands it the job.
    pub starts_at: Duration,
    /// How it retries a busy lease.
    pub retry: RetryPolicy,
    /// Stalls, each taken once.
    pub pauses: Vec<Pause>,
    /// How many times the job is handed to it again after its batch is aborted or it finds
    /// the lease busy.
    pub redeliveries: u32,
}

/// A whole run.
#[derive(Clone, Debug)]
pub struct SettlementConfig {
    /// The merchant; the lease is on `settle:<merchant>`.
    pub merchant: String,
    /// How many refunds, named `r_001`, `r_002`, ….
    pub refunds: usize,
    /// Each refund's amount in cents.
    pub cents_each: u64,
    /// The lease TTL.
    pub ttl: Ttl,
    /// The first token issued (the counter is seeded just below it).
    pub first_token: FencingToken,
    /// How long each gateway call takes.
    pub gateway_latency: Duration,
    /// How the gateway treats a repeated idempotency key.
    pub gateway: GatewayMode,
    /// Whether writes present their own tokens.
    pub fencing: Fencing,
    /// The workers.
    pub workers: Vec<WorkerPlan>,
    /// How many refunds a worker's job may have in flight at once ([`Delivery::concurrency`]);
    /// 1 is one by one.
    pub concurrency: usize,
}

/// The refund id of the `n`th refund (from 1): `r_001`, …, `r_815`, …, `r_1200`.
pub fn refund_key(n: usize) -> RecordKey {
    RecordKey::new(format!("r_{n:03}")).expect("valid key")
}

impl SettlementConfig {
    /// The worked example (docs/protocol.md): A takes token 33 at 0 s, claims r_815 at 26 s and stalls 8 s before
    /// its gateway call; the lease expires at 30 s; B is handed the job at 31 s.
    pub fn worked_example(fencing: Fencing, gateway: GatewayMode) -> Self {
        let second = Duration::from_secs(1);
        SettlementConfig {
            merchant: "m_4471".into(),
            refunds: 1200,
            cents_each: 7025,
            ttl: Ttl::from_secs(30).expect("valid TTL"),
            first_token: FencingToken::new(33).expect("valid token"),
            // 814 refunds of 32 ms each: A claims r_815 at 26.048 s.
            gateway_latency: Duration::from_millis(32),
            gateway,
            fencing,
            workers: vec![
                WorkerPlan {
                    name: "A".into(),
                    starts_at: Duration::ZERO,
                    retry: RetryPolicy::once(),
                    pauses: vec![Pause {
                        before_call_for: refund_key(815),
                        length: 8 * second,
                        until_taken_over: false,
                    }],
                    redeliveries: 0,
                },
                WorkerPlan {
                    name: "B".into(),
                    starts_at: 31 * second,
                    retry: RetryPolicy::new(60, second, second).expect("valid policy"),
                    pauses: Vec::new(),
                    redeliveries: 0,
                },
            ],
            concurrency: 1,
        }
    }

    /// The same run with `concurrency` refunds in flight per worker.
    pub fn with_concurrency(self, concurrency: usize) -> Self {
        SettlementConfig {
            concurrency,
            ..self
        }
    }

    /// The lease's resource name.
    pub fn resource(&self) -> ResourceName {
        ResourceName::new(format!("settle:{}", self.merchant)).expect("valid resource name")
    }
}

/// Runs `config`, each worker's deliveries running `job`, on the in-memory lease and store,
/// to the end, and audits it.
pub async fn run(config: &SettlementConfig, job: impl Job + 'static) -> SettlementReport {
    run_on(
        config,
        job,
        Arc::new(MemoryLease::new()),
        Arc::new(MemoryStore::new("refunds")),
    )
    .await
}

/// Runs `config`, each worker's deliveries running `job`, with `lease` and the refunds in
/// `store` (which must not hold the run's refund keys yet), to the end, and audits it.
///
/// The rows are created through the store's own claim, with token 1 and state `pending`; the
/// lease's counter is raised so that the first worker gets `config.first_token`.
pub async fn run_on(
    config: &SettlementConfig,
    job: impl Job + 'static,
    lease: Arc<dyn Lease>,
    store: Arc<dyn FencedStore>,
) -> SettlementReport {
    let resource = config.resource();
    if let Ok(floor) = FencingToken::new(config.first_token.get() - 1) {
        lease
            .token_source()
            .advance_to(&resource, floor)
            .await
            .expect("seed the token counter");
    }
    let lifecycle = Lifecycle::default();
    let keys: Vec<_> = (1..=config.refunds).map(refund_key).collect();
    let create = FencedWrite::claim()
        .set_state(lifecycle.pending().clone())
        .set_payload(config.cents_each.to_string());
    for key in &keys {
        let created = store
            .write(key, FencingToken::MIN, &create)
            .await
            .expect("create the refund rows");
        assert!(created.created, "{key} already existed in the store");
    }
    let shared = Arc::new(Shared {
        resource,
        ttl: config.ttl,
        fencing: config.fencing,
        concurrency: config.concurrency,
        lifecycle,
        keys,
        lease,
        store,
        gateway: Gateway::new(config.gateway, config.gateway_latency),
        journal: Journal::new(),
        started_past_deadline: AtomicU64::new(0),
    });
    let job: Arc<dyn Job> = Arc::new(job);
    let mut workers = tokio::task::JoinSet::new();
    for plan in &config.workers {
        workers.spawn(work(shared.clone(), plan.clone(), job.clone()));
    }
    workers.join_all().await;
    let shared = Arc::into_inner(shared).expect("every worker has ended");
    SettlementReport::audit(shared, config.cents_each).await
}

/// Counts drawn from a run's journal, gateway and store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Rows the store records as sent.
    pub rows_sent: u64,
    /// Rows not sent at the end.
    pub rows_unsent: u64,
    /// Cents the store records as sent.
    pub cents_recorded: u64,
    /// What the gateway saw.
    pub gateway: GatewayTally,
    /// Refund calls for a key that already had a refund (returned or paid again).
    pub calls_for_existing_refund: u64,
    /// Claims that took a record in flight over from another holder.
    pub takeovers: u64,
    /// Writes by a holder after a newer holder had claimed the record, refused by the store.
    pub stale_writes_rejected: u64,
    /// Writes by a holder after a newer holder had claimed the record, accepted by the store.
    pub stale_writes_accepted: u64,
    /// Accepted confirms by a holder that was not the record's current claimer.
    pub confirms_by_non_claimer: u64,
    /// Rows with more than one refund created, or sent without one.
    pub rows_not_refunded_once: u64,
    /// Gateway calls and look-ups a worker started after its lease's local deadline had
    /// passed. Not a safety violation (the fence and the idempotency key keep those
    /// harmless), but work a fenced worker never starts: it checks its deadline first.
    pub effects_started_past_deadline: u64,
}

impl Audit {
    /// Every broken guarantee, as sentences; empty when the run was safe.
    ///
    /// With an idempotent gateway, a safe run has no stale write accepted, no confirm by a
    /// non-claimer, every sent row refunded exactly once, and no more calls for an existing
    /// refund than takeovers (only a call already in flight at a pause may repeat).
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut check = |broken: bool, what: String| {
            if broken {
                found.push(what);
            }
        };
        check(
            self.stale_writes_accepted > 0,
            format!("{} stale writes accepted", self.stale_writes_accepted),
        );
        check(
            self.confirms_by_non_claimer > 0,
            format!("{} confirms by a non-claimer", self.confirms_by_non_claimer),
        );
        check(
            self.rows_not_refunded_once > 0,
            format!(
                "{} rows not refunded exactly once",
                self.rows_not_refunded_once
            ),
        );
        check(
            self.calls_for_existing_refund > self.takeovers,
            format!(
                "{} calls for existing refunds but only {} takeovers",
                self.calls_for_existing_refund, self.takeovers
            ),
        );
        found
    }
}

/// A run's journal and audit.
#[derive(Clone, Debug)]
pub struct SettlementReport {
    /// Everything that happened, in order.
    pub events: Vec<Event>,
    /// The counts.
    pub audit: Audit,
}

impl SettlementReport {
    async fn audit(shared: Shared, cents_each: u64) -> Self {
        let done: &State = shared.lifecycle.done();
        let mut audit = Audit {
            gateway: shared.gateway.tally(),
            effects_started_past_deadline: shared.started_past_deadline.load(Ordering::SeqCst),
            ..Audit::default()
        };
        for key in &shared.keys {
            let record = shared
                .store
                .read(key)
                .await
                .expect("read back a refund row");
            let sent = record.and_then(|r| r.state).as_ref() == Some(done);
            let refunds = shared.gateway.refunds_for(key);
            if sent {
                audit.rows_sent += 1;
                audit.cents_recorded += cents_each;
            } else {
                audit.rows_unsent += 1;
            }
            audit.rows_not_refunded_once += u64::from(refunds > 1 || (sent && refunds == 0));
        }
        let events = shared.journal.into_events();
        for event in &events {
            match &event.what {
                What::Called { result, .. } => {
                    audit.calls_for_existing_refund += u64::from(*result != CallResult::Created);
                }
                What::Accepted {
                    check,
                    took_over_from,
                    stale,
                    by_non_claimer,
                    ..
                } => {
                    audit.takeovers += u64::from(took_over_from.is_some());
                    audit.stale_writes_accepted += u64::from(*stale);
                    audit.confirms_by_non_claimer +=
                        u64::from(*check == FenceCheck::HolderOnly && *by_non_claimer);
                }
                What::Refused { stale, .. } => audit.stale_writes_rejected += u64::from(*stale),
                _ => {}
            }
        }
        SettlementReport { events, audit }
    }
}

/// An amount as the settlement reports it: `84,300.00 EUR`.
pub fn euros(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let cents = cents.unsigned_abs();
    let whole = (cents / 100).to_string();
    let mut grouped = String::new();
    for (i, digit) in whole.chars().enumerate() {
        if i > 0 && (whole.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    format!("{sign}{grouped}.{:02} EUR", cents % 100)
}

#[cfg(test)]
mod tests {
    use super::euros;

    #[test]
    fn euros_are_grouped_by_thousands() {
        assert_eq!(euros(8_430_000), "84,300.00 EUR");
        assert_eq!(euros(7025), "70.25 EUR");
        assert_eq!(euros(100_000_005), "1,000,000.05 EUR");
        assert_eq!(euros(-7025), "-70.25 EUR");
    }
}

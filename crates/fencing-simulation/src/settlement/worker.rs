use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fencing_core::adapter::StoreWrites;
use fencing_core::{
    BoxError, EffectOutcome, Error, FenceCheck, FencedStore, FencedWrite, FencingToken, Lease,
    LeaseGuard, LeaseStatus, Lifecycle, Record, RecordKey, ResourceName, Result, RetryPolicy,
    SideEffect, TokenSource, Ttl, Written,
};

use super::gateway::Gateway;
use super::journal::{Acquisition, Journal, What};
use super::{Pause, WorkerPlan};
use crate::{Fencing, SubstitutedLease};

/// What every worker of one run shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) resource: ResourceName,
    pub(crate) ttl: Ttl,
    pub(crate) fencing: Fencing,
    pub(crate) concurrency: usize,
    pub(crate) lifecycle: Lifecycle,
    pub(crate) keys: Vec<RecordKey>,
    pub(crate) lease: Arc<dyn Lease>,
    pub(crate) store: Arc<dyn FencedStore>,
    pub(crate) gateway: Gateway,
    pub(crate) journal: Journal,
    /// Effects (calls and look-ups) started by a holder whose guard had ended locally.
    pub(crate) started_past_deadline: AtomicU64,
}

/// The settlement job, as the caller writes it with the library: the simulation hands it to
/// the workers (each delivery one call of [`Job::run`]) and watches everything it does
/// through the lease, the store and the gateway of the [`Delivery`].
#[async_trait]
pub trait Job: Send + Sync {
    /// One delivery of the job: take the lease, settle [`Delivery::refunds`], release.
    ///
    /// An error ends the delivery: [`Error::LeaseBusy`] as the lease staying busy, any other
    /// as the batch abandoned at the record the error names (or the first). The queue hands
    /// the job to the worker again as often as its plan's `redeliveries` allow; `Ok` ends
    /// the worker.
    async fn run(&self, delivery: &Delivery) -> Result<()>;
}

/// What a job is handed on one delivery: the lease, the refunds and the gateway, each one the
/// simulation watches, and the settlement's settings.
pub struct Delivery {
    worker: Arc<Worker>,
    lease: Arc<dyn Lease>,
    retry: RetryPolicy,
}

impl Delivery {
    /// The lease. With [`Fencing::Off`] (the control), its guards all carry token 1 and never
    /// end locally, as a lease without a fencing token would.
    pub fn lease(&self) -> &dyn Lease {
        &*self.lease
    }

    /// The resource the lease is taken on: `settle:<merchant>`.
    pub fn resource(&self) -> &ResourceName {
        &self.worker.shared.resource
    }

    /// The lease's TTL.
    pub fn ttl(&self) -> Ttl {
        self.worker.shared.ttl
    }

    /// How this worker retries a busy lease.
    pub fn retry(&self) -> &RetryPolicy {
        &self.retry
    }

    /// The refunds to settle, in order.
    pub fn refunds(&self) -> &[RecordKey] {
        &self.worker.shared.keys
    }

    /// The store the refunds' rows live in.
    pub fn store(&self) -> &dyn FencedStore {
        &*self.worker
    }

    /// The states a refund's row goes through.
    pub fn lifecycle(&self) -> &Lifecycle {
        &self.worker.shared.lifecycle
    }

    /// The payment gateway, as this worker calls it: a refund per record, idempotent on the
    /// record's key when the run's gateway is.
    pub fn gateway(&self) -> &dyn SideEffect<Receipt = ()> {
        &*self.worker
    }

    /// How many refunds the job may have in flight at once (1: one by one).
    pub fn concurrency(&self) -> usize {
        self.worker.shared.concurrency
    }

    /// Tells the journal how a refund was settled.
    pub fn settled(&self, key: &RecordKey, outcome: &EffectOutcome<()>) {
        let key = key.clone();
        let what = match outcome {
            EffectOutcome::AlreadyDone => What::Skipped { key },
            EffectOutcome::Performed(()) => What::Sent { key },
            EffectOutcome::Recovered(()) => What::Recovered { key },
        };
        self.worker.record(what);
    }
}

/// One worker as the simulation watches it: its name, its current acquisition, its stalls.
#[derive(Debug)]
struct Worker {
    shared: Arc<Shared>,
    name: String,
    /// The acquisition the worker holds (or held last) and the real guard it was given.
    tenure: Mutex<Option<(Acquisition, LeaseGuard)>>,
    /// Stalls, each taken once.
    pauses: Mutex<Vec<Pause>>,
}

impl Worker {
    fn record(&self, what: What) {
        self.shared.journal.record(&self.name, what);
    }

    fn acquisition(&self) -> Acquisition {
        let tenure = self.tenure.lock().expect("never poisoned");
        let (acquisition, _) = tenure.as_ref().expect("a write comes after an acquisition");
        acquisition.clone()
    }

    /// Counts an effect that starts after the holder's deadline.
    fn starting(&self) {
        let tenure = self.tenure.lock().expect("never poisoned");
        if tenure.as_ref().is_some_and(|(_, g)| g.has_ended_locally()) {
            self.shared
                .started_past_deadline
                .fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// Runs one worker's plan: wait for its start, then run the job once per delivery.
pub(crate) async fn work(shared: Arc<Shared>, plan: WorkerPlan, job: Arc<dyn Job>) {
    tokio::time::sleep(plan.starts_at).await;
    let worker = Arc::new(Worker {
        shared: shared.clone(),
        name: plan.name,
        tenure: Mutex::new(None),
        pauses: Mutex::new(plan.pauses),
    });
    let observed: Arc<dyn Lease> = Arc::new(ObservedLease(worker.clone()));
    let lease: Arc<dyn Lease> = match shared.fencing {
        Fencing::On => observed,
        Fencing::Off => Arc::new(SubstitutedLease::one_token(observed)),
    };
    let delivery = Delivery {
        worker: worker.clone(),
        lease,
        retry: plan.retry,
    };
    for _ in 0..=plan.redeliveries {
        let what = match job.run(&delivery).await {
            Ok(()) => {
                worker.record(What::Finished);
                return;
            }
            Err(Error::LeaseBusy { .. }) => What::Busy,
            Err(err) => What::Aborted {
                key: stopped_at(&err).unwrap_or_else(|| shared.keys[0].clone()),
                reason: err.to_string(),
            },
        };
        worker.record(what);
    }
}

/// The record whose write or effect stopped a batch.
fn stopped_at(err: &Error) -> Option<RecordKey> {
    match err {
        Error::Effect { record, .. } => Some(record.clone()),
        other => other.rejected_at().map(|(_, record)| record.clone()),
    }
}

/// The run's lease as one worker sees it: every acquisition and release journaled.
#[derive(Debug)]
struct ObservedLease(Arc<Worker>);

#[async_trait]
impl Lease for ObservedLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let worker = &self.0;
        let granted = worker.shared.lease.try_acquire(resource, ttl).await?;
        if let Some(guard) = &granted {
            let acquisition = worker.shared.journal.acquired(&worker.name, guard.token());
            *worker.tenure.lock().expect("never poisoned") = Some((acquisition, guard.clone()));
        }
        Ok(granted)
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        self.0.shared.lease.extend(guard, ttl).await?;
        if let Some((_, held)) = self.0.tenure.lock().expect("never poisoned").as_mut() {
            *held = guard.clone();
        }
        Ok(())
    }

    /// Journals the release; a holder whose lease ended is refused (`held: false`).
    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        let released = self.0.shared.lease.release(guard).await;
        let held = released.is_ok();
        self.0.record(What::Released { held });
        released
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        self.0.shared.lease.status(resource).await
    }

    fn token_source(&self) -> std::sync::Arc<dyn TokenSource> {
        self.0.shared.lease.token_source()
    }
}

/// The refund store as one worker sees it: every write journaled with whether it was stale.
#[async_trait]
impl FencedStore for Worker {
    fn name(&self) -> &str {
        self.shared.store.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.shared.store.read(key).await
    }
}

#[async_trait]
impl StoreWrites for Worker {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        let acquisition = self.acquisition();
        let journal = &self.shared.journal;
        let claimer = journal.claimer(key);
        let stale = claimer
            .as_ref()
            .is_some_and(|c| c.epoch > acquisition.epoch);
        let result = self.shared.store.write(key, token, write).await;
        let what = match &result {
            Ok(written) => {
                let claim = write.check() == FenceCheck::Claim;
                let in_flight =
                    written.previous_state.as_ref() == Some(self.shared.lifecycle.in_flight());
                let took_over_from = claimer
                    .as_ref()
                    .filter(|c| claim && in_flight && c.epoch != acquisition.epoch)
                    .map(|c| c.epoch);
                let by_non_claimer = !claim && claimer.as_ref() != Some(&acquisition);
                if claim {
                    journal.claimed(key, &acquisition);
                }
                What::Accepted {
                    store: self.name().to_owned(),
                    key: key.clone(),
                    check: write.check(),
                    token,
                    took_over_from,
                    stale,
                    by_non_claimer,
                }
            }
            Err(Error::StateMismatch {
                found: Some(found), ..
            }) if found == self.shared.lifecycle.done() => {
                return result;
            }
            Err(err) => What::Refused {
                store: self.name().to_owned(),
                key: key.clone(),
                check: write.check(),
                token,
                reason: err.to_string(),
                met: met(err),
                stale,
            },
        };
        self.record(what);
        result
    }
}

/// What a refused write met, in a few words.
fn met(err: &Error) -> String {
    match err {
        Error::Fenced { found, .. } => found.to_string(),
        Error::TokenRegression { found, .. } => {
            format!("fence is {found}, above every token issued")
        }
        Error::StateMismatch { found, .. } => format!(
            "state is {}",
            found.as_ref().map_or("unset", |s| s.as_str())
        ),
        other => other.to_string(),
    }
}

/// The gateway as one worker calls it, stalling where the worker's plan says.
#[async_trait]
impl SideEffect for Worker {
    type Receipt = ();

    async fn lookup(&self, key: &RecordKey) -> Result<Option<()>, BoxError> {
        self.starting();
        let found = self.shared.gateway.find(key).await;
        self.record(What::LookedUp {
            key: key.clone(),
            found,
        });
        Ok(found.then_some(()))
    }

    async fn perform(&self, key: &RecordKey, record: &Record) -> Result<(), BoxError> {
        self.starting();
        let pause = {
            let mut pauses = self.pauses.lock().expect("never poisoned");
            let due = pauses.iter().position(|p| p.before_call_for == *key);
            due.map(|i| pauses.remove(i))
        };
        if let Some(pause) = pause {
            let length = pause.length;
            self.record(What::Paused {
                key: key.clone(),
                length,
            });
            tokio::time::sleep(length).await;
            if pause.until_taken_over {
                self.shared
                    .journal
                    .until_claimed_by_another(key, &self.name)
                    .await;
            }
            self.record(What::Resumed { key: key.clone() });
        }
        let cents = std::str::from_utf8(&record.payload)?.parse()?;
        let result = self.shared.gateway.refund(key, cents).await;
        self.record(What::Called {
            key: key.clone(),
            result,
        });
        Ok(())
    }
}

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fencing_core::{
    BoxError, EffectOutcome, Error, FenceCheck, FencedStore, FencedWrite, FencingToken, Holder,
    Lease, LeaseGuard, Lifecycle, Record, RecordKey, ResourceName, Result, SideEffect, Ttl,
    Written, acquire,
};

use super::gateway::Gateway;
use super::journal::{Acquisition, Journal, What};
use super::{Pause, WorkerPlan};
use crate::Fencing;

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

/// Runs one worker's plan: wait for its start, then take the job once per delivery.
pub(crate) async fn work(shared: Arc<Shared>, plan: WorkerPlan) {
    tokio::time::sleep(plan.starts_at).await;
    let pauses = Mutex::new(plan.pauses);
    for _ in 0..=plan.redeliveries {
        let guard = match acquire(&*shared.lease, &shared.resource, shared.ttl, &plan.retry).await {
            Ok(guard) => guard,
            Err(Error::LeaseBusy { .. }) => {
                shared.journal.record(&plan.name, What::Busy);
                continue;
            }
            Err(err) => panic!("the lease failed: {err}"),
        };
        let acquisition = shared.journal.acquired(&plan.name, guard.token());
        let finished = run_batch(&shared, &acquisition, &guard, &pauses).await;
        // A holder whose lease ended is refused here; only the current owner can release.
        let held = shared.lease.release(guard).await.is_ok();
        shared.journal.record(&plan.name, What::Released { held });
        if finished {
            shared.journal.record(&plan.name, What::Finished);
            return;
        }
    }
}

/// One delivery of the job: every refund in order, stopping at the first rejection.
///
/// Fenced, the worker presents its guard's token and its helpers start no effect past the
/// guard's local deadline; unfenced (the control), every write presents one token and nothing
/// looks at the deadline, as in a job that only takes a lease.
async fn run_batch(
    shared: &Shared,
    acquisition: &Acquisition,
    guard: &LeaseGuard,
    pauses: &Mutex<Vec<Pause>>,
) -> bool {
    let holder = match shared.fencing {
        Fencing::On => guard.holder(),
        Fencing::Off => Holder::new(
            &shared.resource,
            shared.fencing.token_for(guard),
            &**guard.token_source(),
        ),
    };
    let store = ObservedStore {
        shared,
        acquisition,
    };
    let gateway = WorkerGateway {
        shared,
        worker: &acquisition.worker,
        guard,
        pauses,
    };
    if shared.concurrency > 1 {
        let settled = holder
            .pipeline(&store, &shared.lifecycle, &gateway)
            .concurrency(shared.concurrency)
            .group_size(shared.concurrency)
            .window(2 * shared.concurrency)
            .run(shared.keys.iter().cloned())
            .await;
        for (key, outcome) in settled.outcomes {
            shared
                .journal
                .record(&acquisition.worker, settled_as(key, outcome));
        }
        return match settled.error {
            None => true,
            Some(err) => {
                let key = stopped_at(&err).unwrap_or_else(|| shared.keys[0].clone());
                aborted(shared, acquisition, key, &err);
                false
            }
        };
    }
    for key in &shared.keys {
        let outcome = holder
            .run_effect(&store, key, &shared.lifecycle, &gateway)
            .await;
        match outcome {
            Ok(outcome) => shared
                .journal
                .record(&acquisition.worker, settled_as(key.clone(), outcome)),
            Err(err) => {
                aborted(shared, acquisition, key.clone(), &err);
                return false;
            }
        }
    }
    true
}

fn settled_as(key: RecordKey, outcome: EffectOutcome<()>) -> What {
    match outcome {
        EffectOutcome::AlreadyDone => What::Skipped { key },
        EffectOutcome::Performed(()) => What::Sent { key },
        EffectOutcome::Recovered(()) => What::Recovered { key },
    }
}

/// The record whose write or effect stopped a pipeline.
fn stopped_at(err: &Error) -> Option<RecordKey> {
    match err {
        Error::Effect { record, .. } => Some(record.clone()),
        other => other.rejected_at().map(|(_, record)| record.clone()),
    }
}

fn aborted(shared: &Shared, acquisition: &Acquisition, key: RecordKey, err: &Error) {
    let reason = err.to_string();
    shared
        .journal
        .record(&acquisition.worker, What::Aborted { key, reason });
}

/// The refund store as one holder sees it: every write journaled with whether it was stale.
#[derive(Debug)]
struct ObservedStore<'a> {
    shared: &'a Shared,
    acquisition: &'a Acquisition,
}

#[async_trait]
impl FencedStore for ObservedStore<'_> {
    fn name(&self) -> &str {
        self.shared.store.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.shared.store.read(key).await
    }

    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        let journal = &self.shared.journal;
        let claimer = journal.claimer(key);
        let stale = claimer
            .as_ref()
            .is_some_and(|c| c.epoch > self.acquisition.epoch);
        let result = self.shared.store.write(key, token, write).await;
        let what = match &result {
            Ok(written) => {
                let claim = write.check() == FenceCheck::Claim;
                let in_flight =
                    written.previous_state.as_ref() == Some(self.shared.lifecycle.in_flight());
                let took_over_from = claimer
                    .as_ref()
                    .filter(|c| claim && in_flight && c.epoch != self.acquisition.epoch)
                    .map(|c| c.epoch);
                let by_non_claimer = !claim && claimer.as_ref() != Some(self.acquisition);
                if claim {
                    journal.claimed(key, self.acquisition);
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
        journal.record(&self.acquisition.worker, what);
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
struct WorkerGateway<'a> {
    shared: &'a Shared,
    worker: &'a str,
    guard: &'a LeaseGuard,
    pauses: &'a Mutex<Vec<Pause>>,
}

impl WorkerGateway<'_> {
    /// Counts an effect that starts after the holder's deadline.
    fn starting(&self) {
        if self.guard.has_ended_locally() {
            self.shared
                .started_past_deadline
                .fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[async_trait]
impl SideEffect for WorkerGateway<'_> {
    type Receipt = ();

    async fn lookup(&self, key: &RecordKey) -> Result<Option<()>, BoxError> {
        self.starting();
        let found = self.shared.gateway.find(key).await;
        self.shared.journal.record(
            self.worker,
            What::LookedUp {
                key: key.clone(),
                found,
            },
        );
        Ok(found.then_some(()))
    }

    async fn perform(&self, key: &RecordKey, record: &Record) -> Result<(), BoxError> {
        self.starting();
        let pause = {
            let mut pauses = self.pauses.lock().unwrap();
            let due = pauses.iter().position(|p| p.before_call_for == *key);
            due.map(|i| pauses.remove(i))
        };
        if let Some(pause) = pause {
            let journal = &self.shared.journal;
            let length = pause.length;
            journal.record(
                self.worker,
                What::Paused {
                    key: key.clone(),
                    length,
                },
            );
            tokio::time::sleep(length).await;
            journal.record(self.worker, What::Resumed { key: key.clone() });
        }
        let cents = std::str::from_utf8(&record.payload)?.parse()?;
        let result = self.shared.gateway.refund(key, cents).await;
        self.shared.journal.record(
            self.worker,
            What::Called {
                key: key.clone(),
                result,
            },
        );
        Ok(())
    }
}

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use fencing_core::{FenceCheck, FencingToken, RecordKey};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::gateway::CallResult;

/// Which worker, in which of its acquisitions: acquisitions are numbered in the order the
/// lease granted them, across all workers, so a higher epoch is a newer holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Acquisition {
    /// The worker's name.
    pub worker: String,
    /// The acquisition's place in the order of grants, from 1.
    pub epoch: u64,
}

/// Something that happened in a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// The worker acquired the lease.
    Acquired {
        /// The token issued with it.
        token: FencingToken,
    },
    /// The worker gave up acquiring: another holder kept the lease.
    Busy,
    /// The store accepted a write.
    Accepted {
        /// The store that accepted it.
        store: String,
        /// The record.
        key: RecordKey,
        /// Claim or holder-only.
        check: FenceCheck,
        /// The token presented.
        token: FencingToken,
        /// For a claim of a record in flight under another holder: that holder's epoch.
        took_over_from: Option<u64>,
        /// A newer holder had claimed the record before this write: the fence should refuse.
        stale: bool,
        /// For a holder-only write: the record's claimer was another holder.
        by_non_claimer: bool,
    },
    /// The store refused a write.
    Refused {
        /// The store that refused it.
        store: String,
        /// The record.
        key: RecordKey,
        /// Claim or holder-only.
        check: FenceCheck,
        /// The token presented.
        token: FencingToken,
        /// The store's reason, as the error says it.
        reason: String,
        /// What the write met, in a few words: `fence 34`, `state sent`.
        met: String,
        /// A newer holder had claimed the record before this write.
        stale: bool,
    },
    /// The worker stalled before a gateway call.
    Paused {
        /// The record whose call was due.
        key: RecordKey,
        /// How long.
        length: Duration,
    },
    /// The worker woke up from a pause.
    Resumed {
        /// The record whose call was due.
        key: RecordKey,
    },
    /// The worker asked the gateway whether a refund exists.
    LookedUp {
        /// The record.
        key: RecordKey,
        /// Whether one did.
        found: bool,
    },
    /// The worker called the gateway to refund.
    Called {
        /// The record.
        key: RecordKey,
        /// What the gateway did.
        result: CallResult,
    },
    /// A refund was completed (claimed, sent, confirmed) by this worker.
    Sent {
        /// The record.
        key: RecordKey,
    },
    /// A record in flight was confirmed by this worker after the gateway showed its refund
    /// already made: nothing was paid.
    Recovered {
        /// The record.
        key: RecordKey,
    },
    /// A record was already sent; the worker skipped it.
    Skipped {
        /// The record.
        key: RecordKey,
    },
    /// The worker abandoned its batch.
    Aborted {
        /// The record it stopped at.
        key: RecordKey,
        /// Why.
        reason: String,
    },
    /// The worker released the lease, or tried to: `held` is false when it had lost it
    /// already (expired, or another holder's).
    Released {
        /// Whether the release found the lease still this worker's.
        held: bool,
    },
    /// The worker finished its batch.
    Finished,
}

/// One line of the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Time since the run started.
    pub at: Duration,
    /// Who.
    pub worker: String,
    /// What.
    pub what: What,
}

#[derive(Debug)]
struct Book {
    events: Vec<Event>,
    epochs: u64,
    claimers: HashMap<RecordKey, Acquisition>,
}

/// Everything that happened in a run, with the per-record claimers that decide staleness.
#[derive(Debug)]
pub(crate) struct Journal {
    start: Instant,
    book: Mutex<Book>,
    /// Woken on every accepted claim.
    claims: Notify,
}

impl Journal {
    pub(crate) fn new() -> Self {
        Journal {
            start: Instant::now(),
            book: Mutex::new(Book {
                events: Vec::new(),
                epochs: 0,
                claimers: HashMap::new(),
            }),
            claims: Notify::new(),
        }
    }

    pub(crate) fn record(&self, worker: &str, what: What) {
        let at = self.start.elapsed();
        let worker = worker.to_owned();
        self.book
            .lock()
            .unwrap()
            .events
            .push(Event { at, worker, what });
    }

    pub(crate) fn acquired(&self, worker: &str, token: FencingToken) -> Acquisition {
        let epoch = {
            let mut book = self.book.lock().unwrap();
            book.epochs += 1;
            book.epochs
        };
        self.record(worker, What::Acquired { token });
        Acquisition {
            worker: worker.to_owned(),
            epoch,
        }
    }

    /// The record's current claimer, read before a write.
    pub(crate) fn claimer(&self, key: &RecordKey) -> Option<Acquisition> {
        self.book.lock().unwrap().claimers.get(key).cloned()
    }

    pub(crate) fn claimed(&self, key: &RecordKey, by: &Acquisition) {
        self.book
            .lock()
            .unwrap()
            .claimers
            .insert(key.clone(), by.clone());
        self.claims.notify_waiters();
    }

    /// Returns once a worker other than `worker` is the record's claimer.
    pub(crate) async fn until_claimed_by_another(&self, key: &RecordKey, worker: &str) {
        loop {
            let claimed = self.claims.notified();
            tokio::pin!(claimed);
            // Registered before the look, so that a claim between the two still wakes it.
            claimed.as_mut().enable();
            if self.claimer(key).is_some_and(|c| c.worker != worker) {
                return;
            }
            claimed.await;
        }
    }

    pub(crate) fn into_events(self) -> Vec<Event> {
        self.book.into_inner().unwrap().events
    }
}

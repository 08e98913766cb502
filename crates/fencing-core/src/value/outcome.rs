//! How records and batches ended, beyond success: a record left alone, a batch finished.
//!
//! Values only, below the telemetry that reports them and the batch that produces them.

use crate::value::error::Error;
use crate::value::name::{RecordKey, State};

/// A record a batch left alone under [`crate::MismatchPolicy::Skip`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedRecord {
    /// The store that refused the write.
    pub store: String,
    /// The record.
    pub record: RecordKey,
    /// Why it was left alone.
    pub mismatch: Mismatch,
}

/// Why a record was skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// The record does not exist ([`Error::NotFound`]).
    Missing,
    /// The record is in a state the write does not start from ([`Error::StateMismatch`]).
    State {
        /// The state found, `None` when the record has none.
        found: Option<State>,
        /// The states the write required.
        expected: Vec<State>,
    },
}

impl SkippedRecord {
    /// The skipped record of a refusal, if it is a missing record or an unexpected state.
    pub fn of(refusal: &Error) -> Option<Self> {
        let (store, record, mismatch) = match refusal {
            Error::NotFound { store, record } => (store, record, Mismatch::Missing),
            Error::StateMismatch {
                store,
                record,
                found,
                expected,
                ..
            } => (
                store,
                record,
                Mismatch::State {
                    found: found.clone(),
                    expected: expected.clone(),
                },
            ),
            _ => return None,
        };
        Some(SkippedRecord {
            store: store.clone(),
            record: record.clone(),
            mismatch,
        })
    }
}

/// How a batch ended: every write it made was accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finished {
    /// The lease was still this holder's and is now released.
    Released,
    /// The lease had already expired (the batch outlived its TTL without renewal, or a newer
    /// holder took it) when the batch finished. Every write was still accepted by its store's
    /// fence, so the work stands; only the release had nothing left to release.
    LeaseLost,
}

//! What a batch's holder notes on every write it makes: the first rejection, which aborts the
//! batch, and the records its mismatch policy leaves alone.

use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::contract::store::{FencedStore, RecordOutcomes, StoreIdentity};
use crate::telemetry;
use crate::value::error::{Error, Result};
use crate::value::input::{InputKind, InvalidInput};
use crate::value::name::{RecordKey, ResourceName};
use crate::value::outcome::SkippedRecord;
use crate::value::token::FencingToken;

/// What a record that is missing, or in a state a write does not start from, does to a batch.
///
/// Neither is a sign of a newer holder: the fence is checked before the state, so a record
/// that a newer holder claimed is refused as [`Error::Fenced`] (or [`Error::TokenRegression`]),
/// and those always abort the batch whatever the policy. Nor is a record found where the
/// write's work is already done ([`crate::FencedWrite::already_done_in`]): the policy does not
/// apply to it, and the batch goes on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MismatchPolicy {
    /// Abort the batch, as for a fence refusal.
    #[default]
    Abort,
    /// Leave the record alone, report it ([`crate::FencedBatch::skipped`]) and go on.
    Skip,
}

/// A batch's stores and what its writes met, shared by every fence the batch hands out.
#[derive(Debug)]
pub(crate) struct Latch {
    /// The batch's stores: their names and identities.
    stores: Vec<(String, StoreIdentity)>,
    policy: Mutex<MismatchPolicy>,
    /// The rejection that aborted the batch.
    aborted: Mutex<Option<Error>>,
    skipped: Mutex<Vec<SkippedRecord>>,
}

impl Latch {
    /// A latch over `stores`, not aborted, nothing skipped.
    pub(crate) fn new<'s>(
        stores: impl IntoIterator<Item = &'s dyn FencedStore>,
        policy: MismatchPolicy,
    ) -> Self {
        let stores = stores
            .into_iter()
            .map(|store| (store.name().to_owned(), store.identity()))
            .collect();
        Latch {
            stores,
            policy: Mutex::new(policy),
            aborted: Mutex::new(None),
            skipped: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn set_policy(&self, policy: MismatchPolicy) {
        *lock(&self.policy) = policy;
    }

    /// Why nothing may be sent to the store named `name` of `identity`: the batch aborted
    /// ([`Error::BatchAborted`]), or the store is not one of the batch's
    /// ([`Error::InvalidInput`]), which a store of the same name made apart is not.
    pub(crate) fn admit(&self, name: &str, identity: &StoreIdentity) -> Result<()> {
        if let Some(abort) = self.abort() {
            return Err(abort);
        }
        if self
            .stores
            .iter()
            .any(|(n, id)| n == name && id == identity)
        {
            return Ok(());
        }
        let detail = if self.stores.iter().any(|(n, _)| n == name) {
            format!(
                "store {name:?} is not the one this batch was built with, only of the same name \
                 (a store made apart, not a clone of the batch's): write through the batch's own"
            )
        } else {
            format!("no store named {name:?} in this batch")
        };
        Err(InvalidInput::new(InputKind::StoreSet, detail).into())
    }

    /// [`Error::BatchAborted`] with the rejection that aborted the batch, if one did.
    pub(crate) fn abort(&self) -> Option<Error> {
        let cause = lock(&self.aborted).as_ref()?.rejection_copy()?;
        let (store, record) = cause.rejected_at()?;
        Some(Error::BatchAborted {
            store: store.to_owned(),
            record: record.clone(),
            cause: Box::new(cause),
        })
    }

    /// The store and record whose rejection aborted the batch, if one did.
    pub(crate) fn aborted_by(&self) -> Option<(String, RecordKey)> {
        let aborted = lock(&self.aborted);
        let (store, record) = aborted.as_ref()?.rejected_at()?;
        Some((store.to_owned(), record.clone()))
    }

    /// The records left alone under [`MismatchPolicy::Skip`], in the order met.
    pub(crate) fn skipped(&self) -> Vec<SkippedRecord> {
        lock(&self.skipped).clone()
    }

    /// Notes what a write under `token` came back with (its error, or the refusals among the
    /// records it applied), except the refusals that say a record's work is `already_done`,
    /// and returns it as it is: a skipped record's error is still the caller's to see.
    pub(crate) fn note<T: RecordOutcomes>(
        &self,
        resource: &ResourceName,
        token: FencingToken,
        result: Result<T>,
        already_done: impl Fn(&Error) -> bool,
    ) -> Result<T> {
        let refusals = match &result {
            Err(err) => vec![err],
            Ok(done) => done.refusals(),
        };
        for refusal in refusals.into_iter().filter(|err| !already_done(err)) {
            self.note_one(resource, token, refusal);
        }
        result
    }

    /// Notes `err`, and returns it unless the policy left its record alone.
    pub(crate) fn note_error(
        &self,
        resource: &ResourceName,
        token: FencingToken,
        err: Error,
    ) -> Option<Error> {
        (!self.note_one(resource, token, &err)).then_some(err)
    }

    /// Notes `err`; true when the policy left its record alone. A record is reported skipped
    /// once however many times its error is noted (a confirm of the caller's that wrote
    /// through the batch's holder, then returned its error to the batch's effect helper).
    pub(crate) fn note_one(
        &self,
        resource: &ResourceName,
        token: FencingToken,
        err: &Error,
    ) -> bool {
        match SkippedRecord::of(err) {
            Some(skipped) if *lock(&self.policy) == MismatchPolicy::Skip => {
                let mut all = lock(&self.skipped);
                if !all.contains(&skipped) {
                    telemetry::batch_skipped(token, &skipped);
                    all.push(skipped);
                }
                return true;
            }
            _ => {}
        }
        if let Some((store, record)) = err.rejected_at() {
            let mut aborted = lock(&self.aborted);
            if aborted.is_none() {
                telemetry::batch_aborted(resource, token, store, record);
                *aborted = err.rejection_copy();
            }
        }
        false
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

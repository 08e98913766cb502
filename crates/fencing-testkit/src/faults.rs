//! Test doubles, once: a fault-injecting store for every test that needs a lost answer or a
//! lost request, and a recording side effect for every test that needs a gateway.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use fencing_core::adapter::StoreWrites;
use fencing_core::{
    BoxError, Error, FenceCheck, FencedStore, FencedWrite, FencingToken, Record, RecordKey, Result,
    SideEffect, Written,
};

/// What goes wrong with one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The store applies the write, then the answer is lost: the caller sees
    /// [`Error::Ambiguous`], as after a connection dropped after the commit.
    LoseAnswer,
    /// The request is lost before the store sees it: nothing is applied, and the caller sees
    /// [`Error::Ambiguous`], as after a timeout on a request that never arrived.
    LoseRequest,
}

/// Wraps any [`FencedStore`] and injects [`Fault`]s into the writes it is told to, in order.
/// Reads pass through untouched.
///
/// ```
/// # use fencing_core::*;
/// # use fencing_core::adapter::StoreWrites;
/// # use fencing_testkit::faults::{Fault, FaultyStore};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = FaultyStore::new(MemoryStore::new("refunds"));
/// store.inject(Some(FenceCheck::Claim), Fault::LoseAnswer);
/// let key = RecordKey::new("r_815").unwrap();
/// let err = store.write(&key, FencingToken::MIN, &FencedWrite::claim()).await.unwrap_err();
/// assert!(err.is_ambiguous());
/// assert!(store.read(&key).await.unwrap().is_some(), "the write was applied");
/// # }
/// ```
#[derive(Debug)]
pub struct FaultyStore<S> {
    inner: S,
    planned: Mutex<VecDeque<(Option<FenceCheck>, Fault)>>,
    injected: AtomicU32,
}

impl<S: FencedStore> FaultyStore<S> {
    /// `inner`, with no fault planned yet.
    pub fn new(inner: S) -> Self {
        FaultyStore {
            inner,
            planned: Mutex::default(),
            injected: AtomicU32::new(0),
        }
    }

    /// Plans `fault` for the next write of kind `check` (`None`: of any kind). Planned faults
    /// are injected in the order they were planned.
    pub fn inject(&self, check: Option<FenceCheck>, fault: Fault) {
        self.plan().push_back((check, fault));
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u32 {
        self.injected.load(Ordering::SeqCst)
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn plan(&self) -> std::sync::MutexGuard<'_, VecDeque<(Option<FenceCheck>, Fault)>> {
        self.planned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take_fault(&self, check: FenceCheck) -> Option<Fault> {
        let mut plan = self.plan();
        let i = plan
            .iter()
            .position(|(c, _)| c.is_none_or(|c| c == check))?;
        self.injected.fetch_add(1, Ordering::SeqCst);
        plan.remove(i).map(|(_, fault)| fault)
    }

    fn lost(&self, what: &str) -> Error {
        Error::Ambiguous {
            store: self.inner.name().to_owned(),
            source: format!("injected fault: {what}").into(),
        }
    }
}

#[async_trait]
impl<S: FencedStore> FencedStore for FaultyStore<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.inner.read(key).await
    }
}

#[async_trait]
impl<S: FencedStore> StoreWrites for FaultyStore<S> {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        match self.take_fault(write.check()) {
            None => self.inner.write(key, token, write).await,
            Some(Fault::LoseRequest) => Err(self.lost("request lost before the store saw it")),
            Some(Fault::LoseAnswer) => {
                // Applied or refused, the caller never learns which.
                let _ = self.inner.write(key, token, write).await;
                Err(self.lost("answer lost after the store applied the write"))
            }
        }
    }

    /// A planned fault strikes the whole request: the inner store's own write of many
    /// records (one statement, a transaction) is what the fault loses.
    async fn write_many(
        &self,
        keys: &[RecordKey],
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        match self.take_fault(write.check()) {
            None => self.inner.write_many(keys, token, write).await,
            Some(Fault::LoseRequest) => Err(self.lost("request lost before the store saw it")),
            Some(Fault::LoseAnswer) => {
                let _ = self.inner.write_many(keys, token, write).await;
                Err(self.lost("answer lost after the store applied the writes"))
            }
        }
    }
}

/// A side effect that records every call and, like a payment gateway that honours
/// idempotency keys, performs each key at most once: a second `perform` of a key returns the
/// first receipt. It can be told to fail its next `perform`.
///
/// The receipt is the effect's sequence number: 1 for the first key performed, 2 for the next.
#[derive(Debug, Default)]
pub struct RecordingEffect {
    recorded: Mutex<Recorded>,
    fail_next: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default)]
struct Recorded {
    performed: Vec<RecordKey>,
    perform_calls: u32,
    lookups: u32,
}

impl RecordingEffect {
    /// An effect that has performed nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the next `perform` fail (a gateway timeout) without performing anything.
    pub fn fail_next(&self) {
        self.fail_next.store(true, Ordering::SeqCst);
    }

    /// Records `key` as performed, as if another process had performed it.
    pub fn performed_elsewhere(&self, key: &RecordKey) -> u32 {
        self.record(key)
    }

    /// The keys performed, in order, each once.
    pub fn performed(&self) -> Vec<RecordKey> {
        self.lock().performed.clone()
    }

    /// How many times `perform` was called (a key called twice counts twice).
    pub fn perform_calls(&self) -> u32 {
        self.lock().perform_calls
    }

    /// How many times `lookup` was called.
    pub fn lookups(&self) -> u32 {
        self.lock().lookups
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.recorded
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn receipt(recorded: &Recorded, key: &RecordKey) -> Option<u32> {
        let position = recorded.performed.iter().position(|k| k == key)?;
        u32::try_from(position + 1).ok()
    }

    fn record(&self, key: &RecordKey) -> u32 {
        let mut recorded = self.lock();
        if let Some(receipt) = Self::receipt(&recorded, key) {
            return receipt;
        }
        recorded.performed.push(key.clone());
        u32::try_from(recorded.performed.len()).unwrap_or(u32::MAX)
    }
}

#[async_trait]
impl SideEffect for RecordingEffect {
    type Receipt = u32;

    async fn lookup(&self, idempotency_key: &RecordKey) -> Result<Option<u32>, BoxError> {
        let mut recorded = self.lock();
        recorded.lookups += 1;
        Ok(Self::receipt(&recorded, idempotency_key))
    }

    async fn perform(&self, idempotency_key: &RecordKey, _: &Record) -> Result<u32, BoxError> {
        self.lock().perform_calls += 1;
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Err("injected fault: the effect failed".into());
        }
        Ok(self.record(idempotency_key))
    }
}

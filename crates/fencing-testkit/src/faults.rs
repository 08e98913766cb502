//! One fault-injecting store for every test that needs a lost answer or a lost request.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use fencing_core::{
    Error, FenceCheck, FencedStore, FencedWrite, FencingToken, Record, RecordKey, Result, Written,
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
}

//! One lease, one token, several stores: each store checks its own fence.

use std::sync::{Arc, Mutex, PoisonError};

use crate::effect::{EffectOutcome, Lifecycle, SideEffect};
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::guard::LeaseGuard;
use crate::input::{InputKind, InvalidInput};
use crate::lease::Lease;
use crate::name::RecordKey;
use crate::store::{FencedStore, FencedWrite, Written};
use crate::token::FencingToken;

/// A batch of fenced writes under one lease acquisition, across several stores.
///
/// Every write presents the guard's token to the store it touches, so each store carries its
/// own fence: a write to a store outside the batch would be unprotected however careful the
/// others are. The first rejection from any store aborts the batch: later writes are refused
/// before anything is sent, with [`Error::BatchAborted`] naming the store that refused.
///
/// ```
/// # use std::sync::Arc;
/// # use fencing_core::*;
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<()> {
/// let lease = Arc::new(MemoryLease::new());
/// let refunds: Arc<dyn FencedStore> = Arc::new(MemoryStore::new("refunds"));
/// let ledger: Arc<dyn FencedStore> = Arc::new(MemoryStore::new("ledger"));
/// let resource = ResourceName::new("settle:m_4471")?;
/// let guard = lease.try_acquire(&resource, Ttl::from_secs(30)?).await?.expect("free");
/// let batch = FencedBatch::new(lease, guard, [refunds, ledger])?;
/// batch.write("ledger", &RecordKey::new("m_4471")?, &FencedWrite::claim()).await?;
/// batch.finish().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FencedBatch {
    lease: Arc<dyn Lease>,
    guard: LeaseGuard,
    stores: Vec<Arc<dyn FencedStore>>,
    aborted: Mutex<Option<(String, RecordKey)>>,
}

impl FencedBatch {
    /// A batch under `guard` (acquired from `lease`) over `stores`, whose names must differ.
    pub fn new(
        lease: Arc<dyn Lease>,
        guard: LeaseGuard,
        stores: impl IntoIterator<Item = Arc<dyn FencedStore>>,
    ) -> Result<Self, InvalidInput> {
        let stores: Vec<_> = stores.into_iter().collect();
        for (i, store) in stores.iter().enumerate() {
            if stores[..i].iter().any(|s| s.name() == store.name()) {
                return Err(InvalidInput::new(
                    InputKind::StoreSet,
                    format!("store {:?} appears twice in one batch", store.name()),
                ));
            }
        }
        Ok(FencedBatch {
            lease,
            guard,
            stores,
            aborted: Mutex::new(None),
        })
    }

    /// The token every write in this batch presents.
    pub fn token(&self) -> FencingToken {
        self.guard.token()
    }

    /// The lease acquisition this batch runs under.
    pub fn guard(&self) -> &LeaseGuard {
        &self.guard
    }

    /// The store and record whose rejection aborted the batch, if one did.
    pub fn aborted_by(&self) -> Option<(String, RecordKey)> {
        self.aborted_slot().clone()
    }

    /// One fenced write to the store named `store`.
    pub async fn write(
        &self,
        store: &str,
        key: &RecordKey,
        write: &FencedWrite,
    ) -> Result<Written> {
        let target = self.writable(store)?;
        let result = self.fence().write(&**target, key, write).await;
        self.note(result)
    }

    /// [`Fence::run_effect`] on the store named `store`, under this batch's token.
    pub async fn run_effect<E: SideEffect + ?Sized>(
        &self,
        store: &str,
        key: &RecordKey,
        lifecycle: &Lifecycle,
        effect: &E,
    ) -> Result<EffectOutcome<E::Receipt>> {
        let target = self.writable(store)?;
        let result = self
            .fence()
            .run_effect(&**target, key, lifecycle, effect)
            .await;
        self.note(result)
    }

    /// Ends the batch. A batch that was not aborted releases its lease (an error says the
    /// lease had already ended). An aborted batch releases nothing: the lease now belongs to
    /// a newer holder, and the abort is returned again.
    pub async fn finish(self) -> Result<()> {
        if let Some((store, record)) = self.aborted_by() {
            return Err(Error::BatchAborted { store, record });
        }
        self.lease.release(self.guard).await
    }

    fn fence(&self) -> Fence<'_> {
        Fence::of_guard(&self.guard, self.lease.token_source())
    }

    fn writable(&self, name: &str) -> Result<&Arc<dyn FencedStore>> {
        if let Some((store, record)) = self.aborted_by() {
            return Err(Error::BatchAborted { store, record });
        }
        self.stores
            .iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| {
                InvalidInput::new(
                    InputKind::StoreSet,
                    format!("no store named {name:?} in this batch"),
                )
                .into()
            })
    }

    fn note<T>(&self, result: Result<T>) -> Result<T> {
        if let Some((store, record)) = result.as_ref().err().and_then(Error::rejected_at) {
            self.aborted_slot()
                .get_or_insert_with(|| (store.to_owned(), record.clone()));
        }
        result
    }

    fn aborted_slot(&self) -> std::sync::MutexGuard<'_, Option<(String, RecordKey)>> {
        self.aborted.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

//! One lease, one token, several stores: each store checks its own fence.

use std::sync::Arc;

use crate::contract::guard::LeaseGuard;
use crate::contract::lease::Lease;
use crate::contract::store::{FencedStore, FencedWrite, Written};
use crate::holder::latch::{Latch, MismatchPolicy};
use crate::holder::retry::{RetryPolicy, acquire};
use crate::holder::write::Holder;
use crate::telemetry;
use crate::value::error::{Error, Result};
use crate::value::input::{InputKind, InvalidInput};
use crate::value::name::{RecordKey, ResourceName};
use crate::value::outcome::{Finished, SkippedRecord};
use crate::value::token::FencingToken;
use crate::value::ttl::Ttl;

/// A batch of fenced writes under one lease acquisition, across several stores.
///
/// Every write presents the guard's token to the store it touches, so each store carries its
/// own fence: a write to a store outside the batch would be unprotected however careful the
/// others are. A fence refusal from any store aborts the batch: later writes are refused
/// before anything is sent, with [`Error::BatchAborted`] naming the store that refused. A
/// record that is missing or in an unexpected state aborts it too, unless the batch was built
/// with [`MismatchPolicy::Skip`]; a record found already done (in the state a write names with
/// [`crate::FencedWrite::already_done_in`], as a [`crate::Lifecycle`]'s claim does) is neither.
///
/// The lease is released by [`FencedBatch::finish`] (aborted or not; release is owner-only, so
/// it never touches a newer holder's lease), and, for a batch dropped without finishing while
/// its tokio runtime goes on running (an early `?` in a task, a caught panic), by a task
/// spawned on that runtime. A batch dropped **as the runtime shuts down** (a `?` out of
/// `#[tokio::main]`) is not released: no runtime is left to run the release on, and the lease
/// ends at its TTL. [`FencedBatch::scope`] acquires, runs and finishes in one call, releasing
/// on every path its body takes; use it, or await `finish` on every path out of `main`.
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
/// let batch = FencedBatch::new(lease, guard, [refunds.clone(), ledger.clone()])?;
/// batch.holder().write(&*ledger, &RecordKey::new("m_4471")?, &FencedWrite::claim()).await?;
/// assert_eq!(batch.finish().await?, Finished::Released);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct FencedBatch {
    lease: Arc<dyn Lease>,
    guard: Option<LeaseGuard>,
    /// The batch's stores, its policy, and what its fence met; shared by its holders.
    latch: Arc<Latch>,
}

impl FencedBatch {
    /// A batch under `guard` (acquired from `lease`) over `stores`, whose names must differ.
    ///
    /// On a bad store set the guard's lease is released (in a task on the current tokio
    /// runtime) before the error returns, so the next holder does not wait out the TTL.
    pub fn new(
        lease: Arc<dyn Lease>,
        guard: LeaseGuard,
        stores: impl IntoIterator<Item = Arc<dyn FencedStore>>,
    ) -> Result<Self, InvalidInput> {
        let stores: Vec<_> = stores.into_iter().collect();
        match check_store_set(&stores) {
            Ok(()) => Ok(FencedBatch {
                lease,
                guard: Some(guard),
                latch: Arc::new(Latch::new(
                    stores.iter().map(|s| &**s),
                    MismatchPolicy::default(),
                )),
            }),
            Err(err) => {
                release_in_background(lease, guard);
                Err(err)
            }
        }
    }

    /// A batch to be run in one call: [`BatchScope::run`] acquires `resource` on `lease` for
    /// `ttl`, runs its body on a batch over `stores` and finishes the batch on every path the
    /// body takes, releasing the lease. Waiting for a busy lease follows
    /// [`RetryPolicy::default`] and mismatches abort, unless [`BatchScope::retry`] and
    /// [`BatchScope::mismatch_policy`] say otherwise.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use fencing_core::*;
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<()> {
    /// let lease = Arc::new(MemoryLease::new());
    /// let refunds: Arc<dyn FencedStore> = Arc::new(MemoryStore::new("refunds"));
    /// let resource = ResourceName::new("settle:m_4471")?;
    /// let token = FencedBatch::scope(lease.clone(), &resource, Ttl::from_secs(30)?, [refunds.clone()])
    ///     .mismatch_policy(MismatchPolicy::Skip)
    ///     .run(async |batch| {
    ///         batch.holder().write(&*refunds, &RecordKey::new("r_1")?, &FencedWrite::claim()).await?;
    ///         Ok(batch.token())
    ///     })
    ///     .await?;
    /// // Released: the next acquisition does not wait.
    /// assert!(lease.try_acquire(&resource, Ttl::from_secs(30)?).await?.is_some());
    /// # let _ = token; Ok(()) }
    /// ```
    pub fn scope<'r>(
        lease: Arc<dyn Lease>,
        resource: &'r ResourceName,
        ttl: Ttl,
        stores: impl IntoIterator<Item = Arc<dyn FencedStore>>,
    ) -> BatchScope<'r> {
        BatchScope {
            lease,
            resource,
            ttl,
            stores: stores.into_iter().collect(),
            retry: RetryPolicy::default(),
            policy: MismatchPolicy::default(),
        }
    }

    /// The same batch, treating missing records and unexpected states as `policy` says (its
    /// holders too, those made before included).
    pub fn with_mismatch_policy(self, policy: MismatchPolicy) -> Self {
        self.latch.set_policy(policy);
        self
    }

    /// The token every write in this batch presents.
    pub fn token(&self) -> FencingToken {
        self.guard().token()
    }

    /// The lease acquisition this batch runs under.
    pub fn guard(&self) -> &LeaseGuard {
        self.guard
            .as_ref()
            .expect("the guard is only taken by finish or drop")
    }

    /// The store and record whose rejection aborted the batch, if one did.
    pub fn aborted_by(&self) -> Option<(String, RecordKey)> {
        self.latch.aborted_by()
    }

    /// The records left alone under [`MismatchPolicy::Skip`], in the order met.
    pub fn skipped(&self) -> Vec<SkippedRecord> {
        self.latch.skipped()
    }

    /// The fence every write of this batch presents, and the one handle the batch writes
    /// with: [`Holder::write`], [`Holder::write_many`], [`Holder::run_effect`],
    /// [`Holder::run_effect_then`], [`Holder::pipeline`], and an adapter's own fenced
    /// methods taking it (a write in the caller's transaction, a store's batch write).
    ///
    /// Every write through it is the batch's: it is refused unsent once the batch has
    /// aborted ([`Error::BatchAborted`]) or when its store is not one of the batch's
    /// ([`Error::InvalidInput`]: a store of the same name made apart is not, a clone is;
    /// [`FencedStore::identity`]), and its first rejection aborts the batch, except a missing
    /// record or an unexpected state under [`MismatchPolicy::Skip`], which is still returned
    /// as its error and recorded in [`Self::skipped`], and a record found already done
    /// ([`crate::FencedWrite::already_done_in`]), returned as its error and neither aborting nor
    /// skipped.
    ///
    /// The holder is the batch's for as long as it lives, moved into a task or kept in a
    /// struct: once the batch has finished, its writes are still sent with the batch's token
    /// and still noted, but nothing reads the notes.
    pub fn holder(&self) -> Holder {
        self.guard().holder().latched(self.latch.clone())
    }

    /// [`Self::holder`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `FencedBatch::holder()`")]
    #[doc(hidden)]
    pub fn fence(&self) -> Holder {
        self.holder()
    }

    /// A write through the batch's holder, as 0.1 spelled it.
    #[deprecated(
        since = "0.2.0",
        note = "write through the holder: `batch.holder().write(…)`"
    )]
    #[doc(hidden)]
    pub async fn write<S: FencedStore + ?Sized>(
        &self,
        store: &S,
        key: &RecordKey,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.holder().write(store, key, write).await
    }

    /// Ends the batch and releases its lease, whether or not it aborted (the release is
    /// owner-only: it never touches a newer holder's lease).
    ///
    /// A batch that was not aborted is [`Finished`], even if its lease had expired: every
    /// write it made was accepted by a fence. An aborted batch returns its abort again.
    pub async fn finish(mut self) -> Result<Finished> {
        let guard = self
            .guard
            .take()
            .expect("the guard is only taken by finish or drop");
        let (resource, token) = (guard.resource().clone(), guard.token());
        let released = self.lease.release(guard).await;
        let finished = match (self.latch.abort(), released) {
            (Some(abort), _) => Err(abort),
            (None, Ok(())) => Ok(Finished::Released),
            (None, Err(Error::LeaseLost { .. })) => Ok(Finished::LeaseLost),
            (None, Err(err)) => Err(err),
        };
        telemetry::batch_finished(&resource, token, finished.as_ref().copied());
        finished
    }
}

/// A batch that acquires, runs and finishes in one call ([`FencedBatch::scope`]).
#[derive(Debug)]
#[must_use = "a scope does nothing until it is run"]
pub struct BatchScope<'r> {
    lease: Arc<dyn Lease>,
    resource: &'r ResourceName,
    ttl: Ttl,
    stores: Vec<Arc<dyn FencedStore>>,
    retry: RetryPolicy,
    policy: MismatchPolicy,
}

impl BatchScope<'_> {
    /// Waits for a busy lease as `retry` says.
    pub fn retry(self, retry: RetryPolicy) -> Self {
        BatchScope { retry, ..self }
    }

    /// Treats missing records and unexpected states as `policy` says.
    pub fn mismatch_policy(self, policy: MismatchPolicy) -> Self {
        BatchScope { policy, ..self }
    }

    /// Acquires, runs `body` on the batch and finishes it on every path, releasing the lease.
    /// Returns what `body` returned; a batch whose lease expired before the release is not an
    /// error ([`Finished::LeaseLost`]), and a bad store set is refused before
    /// acquiring.
    pub async fn run<T>(self, body: impl AsyncFnOnce(&FencedBatch) -> Result<T>) -> Result<T> {
        check_store_set(&self.stores)?;
        let guard = acquire(&*self.lease, self.resource, self.ttl, &self.retry).await?;
        let batch =
            FencedBatch::new(self.lease, guard, self.stores)?.with_mismatch_policy(self.policy);
        let outcome = body(&batch).await;
        let finished = batch.finish().await;
        match (outcome, finished) {
            (Err(err), _) => Err(err),
            (Ok(_), Err(err)) => Err(err),
            (Ok(value), Ok(_)) => Ok(value),
        }
    }
}

impl Drop for FencedBatch {
    /// A batch dropped without [`FencedBatch::finish`] releases its lease in the background.
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            release_in_background(self.lease.clone(), guard);
        }
    }
}

fn check_store_set(stores: &[Arc<dyn FencedStore>]) -> Result<(), InvalidInput> {
    for (i, store) in stores.iter().enumerate() {
        if stores[..i].iter().any(|s| s.name() == store.name()) {
            return Err(InvalidInput::new(
                InputKind::StoreSet,
                format!("store {:?} appears twice in one batch", store.name()),
            ));
        }
    }
    Ok(())
}

/// Releases `guard` from a task on the current tokio runtime; outside a runtime there is
/// nothing to run it on, and the lease ends at its TTL.
fn release_in_background(lease: Arc<dyn Lease>, guard: LeaseGuard) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            // Owner-only: fails harmlessly when the lease already moved on.
            let _ = lease.release(guard).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::store::{FencedWrite, StoreWrites};
    use crate::memory::MemoryStore;

    use crate::memory::MemoryLease;

    fn resource() -> ResourceName {
        ResourceName::new("settle:m_4471").unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_scope_waits_for_a_busy_lease_as_its_retry_says() {
        let lease = Arc::new(MemoryLease::new());
        let ttl = Ttl::from_secs(60).unwrap();
        let _holder = lease.try_acquire(&resource(), ttl).await.unwrap().unwrap();
        let r = resource();
        let err = FencedBatch::scope(lease, &r, ttl, Vec::<Arc<dyn FencedStore>>::new())
            .retry(RetryPolicy::once())
            .run(async |_| Ok(()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::LeaseBusy { attempts: 1, .. }),
            "{err:?}"
        );
    }

    /// A record found where the write's work is already done ([`FencedWrite::already_done_in`],
    /// set by a lifecycle's claim) neither aborts the batch nor is skipped, written alone or
    /// among others; the same record claimed by a write that names no done state aborts it.
    #[tokio::test(start_paused = true)]
    async fn a_batch_goes_on_past_a_record_already_done() {
        let refunds = Arc::new(MemoryStore::new("refunds"));
        let lifecycle = crate::Lifecycle::default();
        let (sent, pending) = (
            RecordKey::new("r_1").unwrap(),
            RecordKey::new("r_2").unwrap(),
        );
        let in_state = |state: &crate::State| FencedWrite::claim().set_state(state.clone());
        refunds
            .write(&sent, FencingToken::MIN, &in_state(lifecycle.done()))
            .await
            .unwrap();
        refunds
            .write(&pending, FencingToken::MIN, &in_state(lifecycle.pending()))
            .await
            .unwrap();
        let lease = Arc::new(MemoryLease::new());
        let ttl = Ttl::from_secs(60).unwrap();
        let guard = lease.try_acquire(&resource(), ttl).await.unwrap().unwrap();
        let stores: [Arc<dyn FencedStore>; 1] = [refunds.clone()];
        let batch = FencedBatch::new(lease, guard, stores).unwrap();
        let holder = batch.holder();

        let err = holder
            .write(&*refunds, &sent, &lifecycle.claim())
            .await
            .unwrap_err();
        assert!(lifecycle.is_done(&err), "{err:?}");
        let each = holder
            .write_many(
                &*refunds,
                &[sent.clone(), pending.clone()],
                &lifecycle.claim(),
            )
            .await
            .unwrap();
        assert!(each[0].as_ref().is_err_and(|err| lifecycle.is_done(err)));
        assert!(each[1].is_ok(), "{:?}", each[1]);
        assert_eq!(batch.aborted_by(), None);
        assert!(batch.skipped().is_empty());

        let claim_naming_no_done_state = FencedWrite::claim()
            .when_state_in([lifecycle.pending().clone(), lifecycle.in_flight().clone()])
            .set_state(lifecycle.in_flight().clone());
        assert!(
            holder
                .write(&*refunds, &sent, &claim_naming_no_done_state)
                .await
                .is_err()
        );
        assert_eq!(batch.aborted_by(), Some(("refunds".to_owned(), sent)));
        let err = batch.finish().await.unwrap_err();
        assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_scope_skips_mismatches_when_told_to() {
        let refunds: Arc<dyn FencedStore> = Arc::new(MemoryStore::new("refunds"));
        let ttl = Ttl::from_secs(60).unwrap();
        let r = resource();
        let missing = RecordKey::new("r_815").unwrap();
        let present = RecordKey::new("r_816").unwrap();
        let confirm = FencedWrite::holder_only();
        let run = async |policy| {
            let lease = Arc::new(MemoryLease::new());
            FencedBatch::scope(lease, &r, ttl, [refunds.clone()])
                .mismatch_policy(policy)
                .run(async |batch| {
                    let holder = batch.holder();
                    holder
                        .write(&*refunds, &present, &FencedWrite::claim())
                        .await?;
                    assert!(holder.write(&*refunds, &missing, &confirm).await.is_err());
                    holder.write(&*refunds, &present, &confirm).await?;
                    Ok(batch.skipped().len())
                })
                .await
        };
        assert_eq!(run(MismatchPolicy::Skip).await.unwrap(), 1);
        let err = run(MismatchPolicy::Abort).await.unwrap_err();
        assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    }
}

//! Dropping an operation at each of its await points in turn.
//!
//! Tokio cancels a future by dropping it: a `select!` whose other branch won, a timeout, a
//! shutdown. What the future had done by then stays done, and what it had not yet done never
//! happens. To check that every operation leaves the stores in a state the protocol can
//! produce whatever point it is dropped at, every call the operation makes into a store, a
//! lease, a token source or a side effect goes through [`Parked`], which passes two
//! [`Steps`]: one before the call (dropped there, the call never happened) and one after its
//! answer (dropped there, the call happened and its caller never saw the answer).
//! [`drop_at_every_step`] runs the operation once to completion to count its steps, then once
//! per step, dropping it there, and hands each dropped run to the caller's check.
//!
//! An adapter's own await points are inside its driver (a pool, a socket, an HTTP client),
//! where no wrapper reaches. [`drop_at_every_yield`] finds them from outside: it counts the
//! times the operation returned `Pending` (each one an await point where it waited on the
//! server), then drops a fresh run at each of those yields in turn. The conformance suite runs
//! it on every backend's writes and leases.
//!
//! ```
//! # use std::sync::Arc;
//! # use fencing_core::*;
//! # use fencing_core::adapter::StoreWrites;
//! # use fencing_testkit::cancellation::{Parked, Steps, drop_at_every_step};
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let key = RecordKey::new("r_815").unwrap();
//! let steps = drop_at_every_step(
//!     async |steps| Parked::new(MemoryStore::new("refunds"), steps),
//!     async |store| store.write(&key, FencingToken::MIN, &FencedWrite::claim()).await,
//!     async |store, dropped_at| {
//!         // Dropped before the write was sent (step 1) or after it applied (step 2).
//!         let record = store.inner().read(&key).await.unwrap();
//!         assert_eq!(record.is_some(), dropped_at == 2);
//!     },
//! )
//! .await;
//! assert_eq!(steps, 2);
//! # }
//! ```

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use async_trait::async_trait;
use fencing_core::adapter::{NewObject, PutOutcome, StoreWrites, StoredObject, VersionedStore};
use fencing_core::{
    BoxError, FencedStore, FencedWrite, FencingToken, Lease, LeaseGuard, LeaseStatus, Record,
    RecordKey, ResourceName, Result, SideEffect, TokenSource, Ttl, Written,
};
use tokio::sync::Notify;

/// The await points an operation has passed, and the one it is to be dropped at. Shared by
/// every [`Parked`] of one run.
#[derive(Default)]
pub struct Steps {
    passed: AtomicUsize,
    drop_at: AtomicUsize,
    reached: Notify,
    names: Mutex<Vec<String>>,
}

impl fmt::Debug for Steps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Steps")
            .field("passed", &self.passed())
            .field("drop_at", &self.drop_at.load(Ordering::SeqCst))
            .finish()
    }
}

impl Steps {
    /// Steps that never stop the operation.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Stops the operation at the `nth` step from now (counting from 1): that step never
    /// returns, so [`Self::run`] drops the operation there. Steps a world passed while it was
    /// set up are behind it.
    pub fn drop_at(&self, nth: usize) {
        self.drop_at.store(self.passed() + nth, Ordering::SeqCst);
    }

    /// How many steps were reached so far.
    pub fn passed(&self) -> usize {
        self.passed.load(Ordering::SeqCst)
    }

    /// The name of each step reached so far, in order (`"before write"`, `"after write"`, …).
    pub fn names(&self) -> Vec<String> {
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// One await point: returns at once, unless it is the step to drop at, which never
    /// returns.
    pub async fn step(&self, name: &str) {
        self.names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(name.to_owned());
        let nth = self.passed.fetch_add(1, Ordering::SeqCst) + 1;
        if nth == self.drop_at.load(Ordering::SeqCst) {
            self.reached.notify_one();
            std::future::pending::<()>().await;
        }
    }

    /// Runs `operation` until it ends (`Some`) or reaches the step to drop at, where it is
    /// dropped (`None`).
    pub async fn run<T>(&self, operation: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            biased;
            output = operation => Some(output),
            () = self.reached.notified() => None,
        }
    }
}

/// Runs `operation` on a fresh world from `world` once to completion, counting its steps (not
/// those the world's setup passed), then once per step on a fresh world each, dropping it at
/// that step, and calls `check` with that world and the step it was dropped at. Returns the
/// number of steps.
///
/// # Panics
///
/// When a run meant to be dropped at a step ends first (the operation took another path than
/// the counted run: the scenario is not deterministic), or when `check` panics.
pub async fn drop_at_every_step<W, T>(
    world: impl AsyncFn(Arc<Steps>) -> W,
    operation: impl AsyncFn(&W) -> T,
    check: impl AsyncFn(&W, usize),
) -> usize {
    let counted = Steps::new();
    let whole = world(counted.clone()).await;
    let set_up = counted.passed();
    operation(&whole).await;
    let count = counted.passed() - set_up;
    for nth in 1..=count {
        let steps = Steps::new();
        let world = world(steps.clone()).await;
        steps.drop_at(nth);
        let ended = steps.run(operation(&world)).await.is_some();
        assert!(
            !ended,
            "the run meant to be dropped at step {nth} of {count} ended first, after {:?}",
            steps.names()
        );
        check(&world, nth).await;
    }
    count
}

/// How a [`drop_at_every_yield`] sweep went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sweep {
    /// The times the counted run yielded: the await points it waited at.
    pub yields: usize,
    /// How many of those yields a run was dropped at.
    pub dropped: usize,
}

/// Fresh runs tried per yield before the sweep gives that yield up: over real I/O a run may
/// end before its `nth` yield, where the server answered sooner than in the counted run (each
/// such run is checked as one that ended).
const ATTEMPTS_PER_YIELD: usize = 5;

/// Polls `operation` until it ends (`Some`) or until it has returned `Pending` `drop_at`
/// times, where it is dropped (`None`); returns that with the times it yielded.
pub async fn run_to_yield<T>(
    operation: impl Future<Output = T>,
    drop_at: usize,
) -> (Option<T>, usize) {
    let mut operation = pin!(operation);
    let mut yields = 0;
    let output = poll_fn(|cx| match operation.as_mut().poll(cx) {
        Poll::Ready(output) => Poll::Ready(Some(output)),
        Poll::Pending => {
            yields += 1;
            if yields == drop_at {
                Poll::Ready(None)
            } else {
                Poll::Pending
            }
        }
    })
    .await;
    (output, yields)
}

/// Runs `operation` on a fresh world from `world` to completion, counting the times it yields,
/// then on a fresh world per yield, dropping it at that yield (a run that ends first is tried
/// again, a few times). `check` sees every world after its run, with the operation's output
/// where it ended (always, for the counted run).
///
/// # Panics
///
/// When `check` panics.
pub async fn drop_at_every_yield<W, T>(
    world: impl AsyncFn() -> W,
    operation: impl AsyncFn(&W) -> T,
    check: impl AsyncFn(&W, Option<T>),
) -> Sweep {
    let whole = world().await;
    let (output, yields) = run_to_yield(operation(&whole), usize::MAX).await;
    check(&whole, output).await;
    let mut dropped = 0;
    for nth in 1..=yields {
        for _ in 0..ATTEMPTS_PER_YIELD {
            let world = world().await;
            let (output, _) = run_to_yield(operation(&world), nth).await;
            let was_dropped = output.is_none();
            check(&world, output).await;
            if was_dropped {
                dropped += 1;
                break;
            }
        }
    }
    Sweep { yields, dropped }
}

/// A store, lease, token source, side effect or versioned store whose every call passes a
/// step before it is made and one after its answer.
#[derive(Clone, Debug)]
pub struct Parked<T> {
    inner: T,
    steps: Arc<Steps>,
}

impl<T> Parked<T> {
    /// `inner`, its calls passing `steps`.
    pub fn new(inner: T, steps: Arc<Steps>) -> Self {
        Parked { inner, steps }
    }

    /// The wrapped value, whose calls pass no step: for checks.
    pub fn inner(&self) -> &T {
        &self.inner
    }

    /// The steps its calls pass.
    pub fn steps(&self) -> &Arc<Steps> {
        &self.steps
    }

    async fn around<R>(&self, call: &str, made: impl Future<Output = R>) -> R {
        self.steps.step(&format!("before {call}")).await;
        let answer = made.await;
        self.steps.step(&format!("after {call}")).await;
        answer
    }
}

#[async_trait]
impl<S: FencedStore> FencedStore for Parked<S> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.around("read", self.inner.read(key)).await
    }
}

#[async_trait]
impl<S: FencedStore> StoreWrites for Parked<S> {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.around("write", self.inner.write(key, token, write))
            .await
    }

    async fn write_many(
        &self,
        keys: &[RecordKey],
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        self.around("write_many", self.inner.write_many(keys, token, write))
            .await
    }
}

#[async_trait]
impl<L: Lease> Lease for Parked<L> {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        self.around("try_acquire", self.inner.try_acquire(resource, ttl))
            .await
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        self.around("extend", self.inner.extend(guard, ttl)).await
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        self.around("release", self.inner.release(guard)).await
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        self.around("status", self.inner.status(resource)).await
    }

    fn token_source(&self) -> std::sync::Arc<dyn TokenSource> {
        self.inner.token_source()
    }
}

#[async_trait]
impl<S: TokenSource> TokenSource for Parked<S> {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        self.around("next", self.inner.next(resource)).await
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        self.around("current", self.inner.current(resource)).await
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        at_least: FencingToken,
    ) -> Result<FencingToken> {
        self.around("advance_to", self.inner.advance_to(resource, at_least))
            .await
    }
}

#[async_trait]
impl<E: SideEffect> SideEffect for Parked<E> {
    type Receipt = E::Receipt;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<E::Receipt>, BoxError> {
        self.around("lookup", self.inner.lookup(key)).await
    }

    async fn perform(&self, key: &RecordKey, record: &Record) -> Result<E::Receipt, BoxError> {
        self.around("perform", self.inner.perform(key, record))
            .await
    }
}

#[async_trait]
impl<S: VersionedStore> VersionedStore for Parked<S> {
    type Version = S::Version;

    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<S::Version>>> {
        self.around("get", self.inner.get(key)).await
    }

    async fn put(
        &self,
        key: &RecordKey,
        object: NewObject<'_>,
        expected: Option<&S::Version>,
    ) -> Result<PutOutcome<S::Version>> {
        self.around("put", self.inner.put(key, object, expected))
            .await
    }
}

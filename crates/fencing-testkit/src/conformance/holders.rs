//! Guarantees of a lease and a store together: what a holder that outlives its lease can and cannot do.

use std::sync::Arc;

use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    BoxError, Error, FenceFloor, FencedStore, FencedWrite, FencingToken, Holder, Lease, Lifecycle,
    MemoryStore, Record, RecordKey, RecordWrites, RetryPolicy, SideEffect, State, Written, acquire,
    async_trait, seed_from_floors,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Capabilities, OneAtATime, make_pending, must_acquire, resource};
use crate::Fencing;

/// What [`fenced_increments`] counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IncrementReport {
    /// `workers × increments`: what the counter must read if no update was lost.
    pub expected: u64,
    /// What the counter reads.
    pub total: u64,
    /// Writes the store refused (stale holders).
    pub rejected: u64,
}

/// `workers` tasks each add 1 to one counter record `increments` times, each increment a
/// claim (which returns the current value) then a holder-only write of the value plus one,
/// under its own lease acquisition, about one in five pausing past the TTL in between.
/// With fences on the total is exact; with fences off (every write presents the same token)
/// updates are lost.
pub async fn fenced_increments<L, S>(
    lease: Arc<L>,
    store: Arc<S>,
    caps: Capabilities,
    workers: u64,
    increments: u64,
    fencing: Fencing,
    seed: u64,
) -> IncrementReport
where
    L: Lease + 'static,
    S: FencedStore + ?Sized + 'static,
{
    let run = Increments {
        caps,
        workers,
        increments,
        fencing,
        seed,
    };
    if caps.serialises_concurrent_writes {
        run.on(lease, store).await
    } else {
        let lease = Arc::new(OneAtATime::new(lease));
        run.on(lease, Arc::new(OneAtATime::new(store))).await
    }
}

/// The parameters of one [`fenced_increments`] run.
#[derive(Clone, Copy)]
struct Increments {
    caps: Capabilities,
    workers: u64,
    increments: u64,
    fencing: Fencing,
    seed: u64,
}

impl Increments {
    async fn on<L, S>(self, lease: Arc<L>, store: Arc<S>) -> IncrementReport
    where
        L: Lease + 'static,
        S: FencedStore + ?Sized + 'static,
    {
        let Increments {
            caps,
            workers,
            increments,
            fencing,
            seed,
        } = self;
        let r = resource("increments");
        let k = caps.key("counter");
        let step = caps.short_ttl.duration() / 10;
        let patient = RetryPolicy::new(10_000, step, step).unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for worker in 0..workers {
            let (lease, store, r, k) = (lease.clone(), store.clone(), r.clone(), k.clone());
            let mut rng = StdRng::seed_from_u64(seed ^ worker.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            tasks.spawn(async move {
                let mut rejected = 0;
                let mut done = 0;
                while done < increments {
                    let guard = acquire(&*lease, &r, caps.short_ttl, &patient)
                        .await
                        .unwrap();
                    let token = fencing.token_for(&guard);
                    let holder = Holder::new(&r, token, guard.token_source());
                    // Claim before reading: a new holder's claim raises the fence at once, so a
                    // paused holder's write below is refused even if the new holder has not
                    // written yet. Reading first and writing with a claim loses updates.
                    let outcome = match holder.write(&*store, &k, &FencedWrite::claim()).await {
                        Ok(claimed) => {
                            let current = counter(&claimed.record.payload);
                            if rng.random_bool(0.2) {
                                tokio::time::sleep(caps.past_expiry()).await;
                            }
                            let write =
                                FencedWrite::holder_only().set_payload((current + 1).to_string());
                            holder.write(&*store, &k, &write).await
                        }
                        Err(err) => Err(err),
                    };
                    match outcome {
                        Ok(_) => done += 1,
                        Err(err) if err.is_rejection() => rejected += 1,
                        Err(err) => panic!("increment failed: {err}"),
                    }
                    // A stale holder's release is refused; that is expected and harmless.
                    let _ = lease.release(guard).await;
                }
                rejected
            });
        }
        let rejected = tasks.join_all().await.into_iter().sum();
        let total = store
            .read(&k)
            .await
            .unwrap()
            .map_or(0, |rec| counter(&rec.payload));
        IncrementReport {
            expected: workers * increments,
            total,
            rejected,
        }
    }
}

/// The counter's value: an empty payload (a record just created) is zero.
fn counter(payload: &[u8]) -> u64 {
    if payload.is_empty() {
        return 0;
    }
    std::str::from_utf8(payload)
        .ok()
        .and_then(|text| text.parse().ok())
        .expect("the counter payload is a decimal number")
}

/// A holder that pauses past its TTL is refused by the store on its claim and its confirm,
/// while the new holder's writes go through.
pub async fn paused_holder_is_fenced<L, S>(lease: &L, store: &S, caps: Capabilities)
where
    L: Lease + ?Sized,
    S: FencedStore + ?Sized,
{
    let lifecycle = fencing_core::Lifecycle::default();
    let r = resource("paused");
    let k = caps.key("r_815");
    make_pending(store, &k).await;
    let a = must_acquire(lease, &r, caps.short_ttl).await;
    let holder_a = a.holder();
    holder_a.write(store, &k, &lifecycle.claim()).await.unwrap();

    tokio::time::sleep(caps.past_expiry()).await;
    let b = must_acquire(lease, &r, caps.short_ttl).await;
    let holder_b = b.holder();
    let takeover = holder_b.write(store, &k, &lifecycle.claim()).await.unwrap();
    assert_eq!(takeover.previous_fence, Some(a.token()));
    assert_eq!(
        takeover.previous_state.as_ref(),
        Some(lifecycle.in_flight())
    );

    for write in [lifecycle.confirm(), lifecycle.claim()] {
        let err = holder_a.write(store, &k, &write).await.unwrap_err();
        assert!(
            matches!(err, Error::Fenced { found: fencing_core::FoundFence::Fence(f), .. } if f == b.token()),
            "stale {:?}: {err:?}",
            write.check()
        );
    }
    holder_b
        .write(store, &k, &lifecycle.confirm())
        .await
        .unwrap();
    lease.release(b).await.unwrap();
}

/// After the token source loses its counters, the next holder's claim is refused as a
/// [`Error::TokenRegression`] (not a plain stale refusal); seeding from the store's
/// `MAX(fence)` restores progress and the next holder's claim goes through.
pub async fn token_regression_is_detected<L, S>(
    lease: &L,
    store: &S,
    floor: &dyn FenceFloor,
    caps: Capabilities,
    lose_counters: impl AsyncFnOnce(),
) where
    L: Lease + ?Sized,
    S: FencedStore + ?Sized,
{
    let r = resource("regression");
    let k = caps.key("fenced-row");
    let mut highest = None;
    for _ in 0..5 {
        let guard = must_acquire(lease, &r, caps.held_ttl()).await;
        guard
            .holder()
            .write(store, &k, &FencedWrite::claim())
            .await
            .unwrap();
        highest = Some(guard.token());
        lease.release(guard).await.unwrap();
    }
    lose_counters().await;

    let reborn = must_acquire(lease, &r, caps.short_ttl).await;
    assert!(
        Some(reborn.token()) < highest,
        "the counter must have gone back"
    );
    let err = reborn
        .holder()
        .write(store, &k, &FencedWrite::claim())
        .await
        .unwrap_err();
    match err {
        Error::TokenRegression {
            found,
            presented,
            highest_issued,
            ..
        } => {
            assert_eq!(Some(found), highest);
            assert_eq!(presented, reborn.token());
            assert!(highest_issued < Some(found));
        }
        other => panic!("expected TokenRegression, got {other:?}"),
    }
    lease.release(reborn).await.unwrap();

    // The refusal raised the source past the fence it found: the next holder makes progress
    // without an operator.
    let next = must_acquire(lease, &r, caps.held_ttl()).await;
    assert!(
        Some(next.token()) > highest,
        "after a detected regression the source must be above {highest:?}, issued {}",
        next.token()
    );
    next.holder()
        .write(store, &k, &FencedWrite::claim())
        .await
        .unwrap();
    lease.release(next).await.unwrap();

    let floor_found = seed_from_floors(&*lease.token_source(), &r, &[floor])
        .await
        .unwrap();
    assert!(
        floor_found > highest,
        "the floor now holds the repaired fence"
    );
    let repaired = must_acquire(lease, &r, caps.held_ttl()).await;
    assert!(Some(repaired.token()) > floor_found);
    repaired
        .holder()
        .write(store, &k, &FencedWrite::claim())
        .await
        .unwrap();
    lease.release(repaired).await.unwrap();
}

/// After the token source loses its counters, no token is issued twice: every token issued
/// afterwards is above every token issued before, including the token of a holder that has
/// not written anything yet (no store's `MAX(fence)` could reveal it).
///
/// Three schedules. A claims a record and stalls; the counters are lost; B acquires and must
/// get a token above A's, so that B's takeover fences A's confirm out. Then B stalls without
/// writing; the counters are lost again; C must get a token above B's. Then C stalls without
/// writing, the counters are lost once more, and the stale A is refused by B's fence — a
/// refusal above everything the empty counter knows, which the fence reports as a regression
/// and repairs — and D must still get a token above C's.
pub async fn no_token_is_reissued_after_counter_loss<L, S>(
    lease: &L,
    store: &S,
    caps: Capabilities,
    lose_counters: impl AsyncFn(),
) where
    L: Lease + ?Sized,
    S: FencedStore + ?Sized,
{
    let lifecycle = fencing_core::Lifecycle::default();
    let r = resource("reissue");
    let k = caps.key("r_1");
    make_pending(store, &k).await;
    let a = must_acquire(lease, &r, caps.short_ttl).await;
    let holder_a = a.holder();
    holder_a.write(store, &k, &lifecycle.claim()).await.unwrap();

    lose_counters().await;
    tokio::time::sleep(caps.past_expiry()).await;
    let b = must_acquire(lease, &r, caps.short_ttl).await;
    assert!(
        b.token() > a.token(),
        "token {} issued after the loss is not above {} issued before",
        b.token(),
        a.token()
    );
    let holder_b = b.holder();
    holder_b.write(store, &k, &lifecycle.claim()).await.unwrap();
    let err = holder_a
        .write(store, &k, &lifecycle.confirm())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Fenced { .. }),
        "A's stale confirm: {err:?}"
    );

    // B holds its token and has written nothing more; the counters are lost again.
    lose_counters().await;
    tokio::time::sleep(caps.past_expiry()).await;
    let c = must_acquire(lease, &r, caps.short_ttl).await;
    assert!(
        c.token() > b.token(),
        "token {} issued after the second loss is not above {}, held by a holder that had not \
         written",
        c.token(),
        b.token()
    );

    // C holds its token and has written nothing; the counters are lost again; then the stale
    // A writes and is refused by B's fence. That refusal must not repair the counter to B's
    // fence: D's token must still be above C's.
    lose_counters().await;
    let err = holder_a
        .write(store, &k, &lifecycle.confirm())
        .await
        .unwrap_err();
    assert!(err.is_rejection(), "A's stale confirm: {err:?}");
    tokio::time::sleep(caps.past_expiry()).await;
    let d = must_acquire(lease, &r, caps.held_ttl()).await;
    assert!(
        d.token() > c.token(),
        "token {} issued after a stale refusal is not above {}, held by a holder that had not \
         written",
        d.token(),
        c.token()
    );
    lease.release(d).await.unwrap();
}

/// A refusal whose fence lies above every token the lease's source has issued (a counter
/// that went backwards, or a lease switched to a source that never counted this high) is an
/// [`Error::TokenRegression`] on every path a write can take: one write, a group of claims, a
/// group of confirms, a pipeline's grouped claims and a pipeline's own claims side by side.
/// A group is judged as a whole: the repair made for one of its refusals (the source raised
/// past the fence found) does not turn the next, lower one into a "newer holder".
pub async fn a_regression_is_one_on_every_write_path<L: Lease + ?Sized>(
    lease: &L,
    caps: Capabilities,
) {
    let store = MemoryStore::new("refunds");
    let lifecycle = Lifecycle::default();
    let r = resource("regression-paths");
    let guard = must_acquire(lease, &r, caps.short_ttl).await;
    let holder = guard.holder();
    let is_regression = |err: &Error| matches!(err, Error::TokenRegression { .. });

    let single = fenced_above(&store, 1, &[3], lifecycle.pending()).await;
    let err = holder
        .write(&store, &single[0], &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(is_regression(&err), "one write: {err:?}");

    for (level, write, state) in [
        (2, lifecycle.claim(), lifecycle.pending()),
        (3, lifecycle.confirm(), lifecycle.in_flight()),
    ] {
        let keys = fenced_above(&store, level, &[5, 9, 1], state).await;
        let answers = holder.write_many(&store, &keys, &write).await.unwrap();
        for (key, answer) in keys.iter().zip(answers) {
            let err = answer.unwrap_err();
            assert!(
                is_regression(&err),
                "{:?} of {key:?} in a group: {err:?}",
                write.check()
            );
        }
    }

    let keys = fenced_above(&store, 4, &[5, 9, 1], lifecycle.pending()).await;
    let settled = holder
        .pipeline(&store, &lifecycle, &NeverCalled)
        .run(keys)
        .await;
    let err = settled.error.expect("refused");
    assert!(is_regression(&err), "a pipeline's claims: {err:?}");

    let keys = fenced_above(&store, 5, &[5, 9, 1, 7, 3, 8], lifecycle.pending()).await;
    let own = ClaimsOneByOne {
        store: &store,
        lifecycle: &lifecycle,
    };
    let settled = holder
        .pipeline(&store, &lifecycle, &NeverCalled)
        .writes(&own)
        .run(keys)
        .await;
    let err = settled.error.expect("refused");
    assert!(is_regression(&err), "a pipeline's own claims: {err:?}");
    let _ = lease.release(guard).await;
}

/// Records at fences `level · 2^50 + offset`, far above any token issued, in `state`.
async fn fenced_above(
    store: &MemoryStore,
    level: u64,
    offsets: &[u64],
    state: &State,
) -> Vec<RecordKey> {
    let mut keys = Vec::new();
    for offset in offsets {
        let key = RecordKey::new(format!("r_{level}_{offset}")).unwrap();
        let fence = FencingToken::new((level << 50) + offset).unwrap();
        store
            .write(&key, fence, &FencedWrite::claim().set_state(state.clone()))
            .await
            .unwrap();
        keys.push(key);
    }
    keys
}

/// A side effect a refused pipeline must never reach.
struct NeverCalled;

#[async_trait]
impl SideEffect for NeverCalled {
    type Receipt = ();

    async fn lookup(&self, key: &RecordKey) -> Result<Option<()>, BoxError> {
        panic!("looked up {key:?} after a refusal")
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<(), BoxError> {
        panic!("performed {key:?} after a refusal")
    }
}

/// A pipeline's own claims, one request per record, side by side.
struct ClaimsOneByOne<'a> {
    store: &'a MemoryStore,
    lifecycle: &'a Lifecycle,
}

#[async_trait]
impl RecordWrites<()> for ClaimsOneByOne<'_> {
    async fn claim(&self, holder: &Holder, key: &RecordKey) -> fencing_core::Result<Written> {
        holder.write(self.store, key, &self.lifecycle.claim()).await
    }

    async fn confirm(
        &self,
        holder: &Holder,
        key: &RecordKey,
        (): &(),
    ) -> fencing_core::Result<Written> {
        holder
            .write(self.store, key, &self.lifecycle.confirm())
            .await
    }
}

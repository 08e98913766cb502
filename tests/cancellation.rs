//! Every public operation that writes or acquires, dropped at each of its await points in
//! turn (`fencing_testkit::cancellation`): each call into a store, lease, token source or side
//! effect is two points, before the call and after its answer. After each drop the records
//! are in a state the protocol can produce, the next call settles what happened (the effect
//! never performed twice), and no lease stays held beyond its TTL by an owner whose guard is
//! gone. docs/reliability.md says what a dropped future means for each operation.

use std::sync::Arc;
use std::time::Duration;

use fencing::{
    FenceCheck, FencedBatch, FencedStore, FencedWrite, FencingToken, Holder, Lease, LeaseGuard,
    Lifecycle, MemoryLease, MemoryStore, MemoryTokenSource, Record, RecordKey, ResourceName,
    RetryPolicy, SideEffect, TokenSource, Ttl,
};
use fencing_core::adapter::{CasStore, HolderExt, MemoryVersionedStore, StoreWrites};
use fencing_testkit::cancellation::{Parked, Steps, drop_at_every_step};
use fencing_testkit::faults::{Fault, FaultyStore, RecordingEffect};

const TTL: Duration = Duration::from_secs(30);

fn resource() -> ResourceName {
    ResourceName::new("settle:m_4471").unwrap()
}

fn keys(count: usize) -> Vec<RecordKey> {
    (0..count)
        .map(|i| RecordKey::new(format!("r_{}", 815 + i)).unwrap())
        .collect()
}

/// Refunds waiting in a store, a token source, a gateway and a lease, every call of each
/// passing the run's steps; `plain` is the same store passing none, for checks and the runs
/// that settle.
struct World<S = MemoryStore> {
    plain: Arc<S>,
    store: Arc<Parked<Arc<S>>>,
    source: Parked<MemoryTokenSource>,
    gateway: Parked<RecordingEffect>,
    lease: Arc<Parked<MemoryLease>>,
    keys: Vec<RecordKey>,
    lifecycle: Lifecycle,
    resource: ResourceName,
}

impl World {
    async fn new(steps: Arc<Steps>, refunds: usize) -> Self {
        World::over(MemoryStore::new("refunds"), steps, refunds).await
    }
}

impl<S: FencedStore> World<S> {
    /// Refunds in `store`, created pending by a claim of token 1 that every token issued in
    /// the world (from 2) outranks.
    async fn over(store: S, steps: Arc<Steps>, refunds: usize) -> Self {
        let lifecycle = Lifecycle::default();
        let keys = keys(refunds);
        let pending = FencedWrite::claim().set_state(lifecycle.pending().clone());
        for key in &keys {
            store.write(key, FencingToken::MIN, &pending).await.unwrap();
        }
        let source = MemoryTokenSource::new();
        source
            .advance_to(&resource(), FencingToken::MIN)
            .await
            .unwrap();
        let lease = MemoryLease::new();
        lease
            .token_source()
            .advance_to(&resource(), FencingToken::MIN)
            .await
            .unwrap();
        let plain = Arc::new(store);
        World {
            store: Arc::new(Parked::new(plain.clone(), steps.clone())),
            plain,
            source: Parked::new(source, steps.clone()),
            gateway: Parked::new(RecordingEffect::new(), steps.clone()),
            lease: Arc::new(Parked::new(lease, steps)),
            keys,
            lifecycle,
            resource: resource(),
        }
    }

    fn holder(&self, token: u64) -> Holder {
        Holder::new(&self.resource, token_of(token), &self.source)
    }

    async fn records(&self) -> Vec<Record> {
        let mut records = Vec::new();
        for key in &self.keys {
            records.push(self.plain.read(key).await.unwrap().unwrap());
        }
        records
    }

    /// Every record pending under the seed's fence, in flight under one of `tokens`, or done
    /// under one of them; a record in flight or done has had its effect at most once, and a
    /// done one exactly once.
    async fn check_reachable(&self, tokens: &[u64]) {
        let fences: Vec<_> = tokens.iter().map(|t| Some(token_of(*t))).collect();
        let performed = self.gateway.inner().performed();
        for record in self.records().await {
            let state = record.state.as_ref().unwrap();
            let times = performed.iter().filter(|k| **k == record.key).count();
            if state == self.lifecycle.pending() {
                assert_eq!(record.fence, Some(FencingToken::MIN), "{record:?}");
                assert_eq!(times, 0, "an effect for an unclaimed record: {record:?}");
            } else {
                assert!(fences.contains(&record.fence), "{record:?}");
                if state == self.lifecycle.done() {
                    assert_eq!(times, 1, "done without its effect: {record:?}");
                } else {
                    assert_eq!(state, self.lifecycle.in_flight(), "{record:?}");
                }
            }
        }
    }

    /// Every record done, each effect performed by exactly one call.
    async fn check_settled(&self) {
        for record in self.records().await {
            assert_eq!(
                record.state.as_ref(),
                Some(self.lifecycle.done()),
                "{record:?}"
            );
        }
        let gateway = self.gateway.inner();
        assert_eq!(gateway.performed().len(), self.keys.len());
        assert_eq!(
            gateway.perform_calls() as usize,
            self.keys.len(),
            "an effect performed twice"
        );
    }

    /// Nobody holds the lease once a TTL has passed: a guard dropped with the operation left
    /// no holder behind for longer than that.
    async fn check_lease_ends(&self) {
        tokio::time::sleep(TTL + Duration::from_millis(1)).await;
        let status = self.lease.inner().status(&self.resource).await.unwrap();
        assert_eq!(status, None);
    }

    /// The batch every batch test runs: each refund through the effect helper.
    async fn batch(
        &self,
        lease: Arc<dyn Lease>,
        store: Arc<dyn FencedStore>,
        gateway: &dyn SideEffect<Receipt = u32>,
    ) -> fencing::Result<FencingToken> {
        FencedBatch::scope(lease, &self.resource, ttl(), [store.clone()])
            .retry(RetryPolicy::once())
            .run(async |batch| {
                for key in &self.keys {
                    batch
                        .holder()
                        .run_effect(&store, key, &self.lifecycle, gateway)
                        .await?;
                }
                Ok(batch.token())
            })
            .await
    }
}

fn token_of(token: u64) -> FencingToken {
    FencingToken::new(token).unwrap()
}

fn ttl() -> Ttl {
    Ttl::new(TTL).unwrap()
}

/// `Holder::write` of the write `of` makes for the one refund of each world from `world`,
/// dropped at each step; then the same holder sends it again, which must leave the refund in
/// the state the write sets. Returns the number of steps.
async fn drop_a_write_everywhere<S: FencedStore>(
    world: impl AsyncFn(Arc<Steps>) -> World<S>,
    of: impl Fn(&Lifecycle) -> FencedWrite,
) -> usize {
    drop_at_every_step(
        world,
        async |world| {
            let holder = world.holder(2);
            let write = of(&world.lifecycle);
            holder.write(&*world.store, &world.keys[0], &write).await
        },
        async |world, _| {
            world.check_reachable(&[2]).await;
            let holder = world.holder(2);
            let write = of(&world.lifecycle);
            let written = holder.write(&*world.plain, &world.keys[0], &write).await;
            let state = written.unwrap().record.state;
            assert_eq!(state.as_ref(), write.new_state());
        },
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn a_claim_dropped_anywhere_is_settled_by_the_same_holders_next_claim() {
    let world = async |steps| World::new(steps, 1).await;
    let steps = drop_a_write_everywhere(world, Lifecycle::claim).await;
    assert_eq!(steps, 2);
}

/// A write whose answer is lost is resent by `Holder`, and the refusal the resend earns is read
/// back: every one of those points dropped too.
#[tokio::test(start_paused = true)]
async fn a_confirm_whose_answer_was_lost_dropped_during_its_retry_is_still_settled() {
    let world = async |steps: Arc<Steps>| {
        let store = FaultyStore::new(MemoryStore::new("refunds"));
        let world = World::over(store, steps, 1).await;
        let claim = world.lifecycle.claim();
        world
            .plain
            .write(&world.keys[0], token_of(2), &claim)
            .await
            .unwrap();
        world.gateway.inner().performed_elsewhere(&world.keys[0]);
        // The confirm applies and its answer is lost; the resend is refused (the record is
        // done already), and the holder reads the record back to recognise its own write.
        world
            .plain
            .inject(Some(FenceCheck::HolderOnly), Fault::LoseAnswer);
        world
    };
    let steps = drop_a_write_everywhere(world, Lifecycle::confirm).await;
    // A send, a resend, a read back.
    assert_eq!(steps, 6);
}

/// `Holder::run_effect` on the one refund of each world from `world`, dropped at each step;
/// then the same holder runs it again. Returns the number of steps.
async fn drop_the_effect_helper_everywhere<S: FencedStore>(
    world: impl AsyncFn(Arc<Steps>) -> World<S>,
) -> usize {
    drop_at_every_step(
        world,
        async |world| {
            let holder = world.holder(2);
            let gateway = &world.gateway;
            holder
                .run_effect(&*world.store, &world.keys[0], &world.lifecycle, gateway)
                .await
        },
        async |world, _| {
            world.check_reachable(&[2]).await;
            let holder = world.holder(2);
            let gateway = world.gateway.inner();
            holder
                .run_effect(&*world.plain, &world.keys[0], &world.lifecycle, gateway)
                .await
                .unwrap();
            world.check_settled().await;
        },
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn the_effect_helper_dropped_anywhere_never_sends_a_refund_twice() {
    let steps = drop_the_effect_helper_everywhere(async |steps| World::new(steps, 1).await).await;
    // Claim, perform, confirm.
    assert_eq!(steps, 6);
}

/// A batch (acquisition, three refunds' claims, effects and confirms, the release) dropped at
/// each point; then a new holder runs the same batch.
#[tokio::test(start_paused = true)]
async fn a_batch_dropped_anywhere_leaves_no_lease_behind_and_the_next_holder_finishes_it() {
    let steps = drop_at_every_step(
        async |steps| World::new(steps, 3).await,
        async |world| {
            world
                .batch(world.lease.clone(), world.store.clone(), &world.gateway)
                .await
        },
        async |world, _| {
            world.check_reachable(&[2]).await;
            world.check_lease_ends().await;
            let lease = Arc::new(world.lease.inner().clone());
            let issued = lease.token_source().current(&world.resource).await.unwrap();
            let gateway = world.gateway.inner();
            let token = world
                .batch(lease, world.plain.clone(), gateway)
                .await
                .unwrap();
            assert!(Some(token) > issued, "the next holder's token is new");
            world.check_settled().await;
        },
    )
    .await;
    // Acquire, three times claim, perform and confirm, release.
    assert_eq!(steps, 2 + 3 * 6 + 2);
}

#[tokio::test(start_paused = true)]
async fn a_pipeline_dropped_anywhere_is_finished_by_the_same_holder() {
    let steps = drop_at_every_step(
        async |steps| World::new(steps, 5).await,
        async |world| {
            world
                .holder(2)
                .pipeline(&*world.store, &world.lifecycle, &world.gateway)
                .concurrency(2)
                .group_size(2)
                .run(world.keys.clone())
                .await
                .into_result()
        },
        async |world, _| {
            world.check_reachable(&[2]).await;
            let settled = world
                .holder(2)
                .pipeline(&*world.plain, &world.lifecycle, world.gateway.inner())
                .run(world.keys.clone())
                .await;
            assert_eq!(settled.into_result().unwrap().len(), world.keys.len());
            world.check_settled().await;
        },
    )
    .await;
    // Three claims of two, two and one records, five effects, three confirms.
    assert_eq!(steps, 22);
}

/// The compare-and-swap store every object store adapter is built on, dropped between its
/// read and its conditional put, and after the put applied and before it remembered the
/// version.
#[tokio::test(start_paused = true)]
async fn a_compare_and_swap_write_dropped_anywhere_is_settled_by_a_fresh_read() {
    let steps = drop_the_effect_helper_everywhere(async |steps: Arc<Steps>| {
        let versions = Parked::new(MemoryVersionedStore::new("receipts"), steps.clone());
        World::over(CasStore::new(versions), steps, 1).await
    })
    .await;
    // The claim and the confirm each a write and a conditional put (the version remembered
    // from the setup's write, so no read), the effect between them.
    assert_eq!(steps, 10);
}

#[tokio::test(start_paused = true)]
async fn an_acquisition_dropped_anywhere_leaves_no_holder_beyond_its_ttl() {
    let steps = drop_at_every_step(
        async |steps| World::new(steps, 0).await,
        async |world| {
            fencing::acquire(&*world.lease, &world.resource, ttl(), &RetryPolicy::once()).await
        },
        async |world, _| {
            world.check_lease_ends().await;
            let lease = world.lease.inner();
            let issued = lease.token_source().current(&world.resource).await.unwrap();
            let guard = lease.try_acquire(&world.resource, ttl()).await.unwrap();
            let guard = guard.expect("free once the TTL passed");
            assert!(Some(guard.token()) > issued, "no token issued twice");
        },
    )
    .await;
    assert_eq!(steps, 2);
}

/// A guard held by the world, for the extension and release tests.
async fn held(world: &World) -> tokio::sync::Mutex<Option<LeaseGuard>> {
    let guard = world
        .lease
        .inner()
        .try_acquire(&world.resource, ttl())
        .await;
    tokio::sync::Mutex::new(guard.unwrap())
}

#[tokio::test(start_paused = true)]
async fn an_extension_dropped_anywhere_is_settled_by_the_next_extension() {
    let steps = drop_at_every_step(
        async |steps| {
            let world = World::new(steps, 0).await;
            let guard = held(&world).await;
            (world, guard)
        },
        async |(world, guard)| {
            tokio::time::sleep(TTL / 2).await;
            let mut guard = guard.lock().await;
            world.lease.extend(guard.as_mut().unwrap(), ttl()).await
        },
        async |(world, guard), _| {
            let mut guard = guard.lock().await;
            let guard = guard.as_mut().unwrap();
            world.lease.inner().extend(guard, ttl()).await.unwrap();
            let status = world
                .lease
                .inner()
                .status(&world.resource)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(status.owner, guard.owner().as_str());
            assert_eq!(status.time_left, TTL);
        },
    )
    .await;
    assert_eq!(steps, 2);
}

#[tokio::test(start_paused = true)]
async fn a_release_dropped_anywhere_leaves_no_holder_beyond_its_ttl() {
    let steps = drop_at_every_step(
        async |steps| {
            let world = World::new(steps, 0).await;
            let guard = held(&world).await;
            (world, guard)
        },
        async |(world, guard)| {
            let guard = guard.lock().await.take().unwrap();
            world.lease.release(guard).await
        },
        async |(world, guard), dropped_at| {
            assert!(
                guard.lock().await.is_none(),
                "the guard went with the release"
            );
            let status = world.lease.inner().status(&world.resource).await.unwrap();
            assert_eq!(
                status.is_some(),
                dropped_at == 1,
                "released once the call was made"
            );
            world.check_lease_ends().await;
        },
    )
    .await;
    assert_eq!(steps, 2);
}

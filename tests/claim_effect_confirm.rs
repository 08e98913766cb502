//! The claim → side effect → confirm helper under lost answers, failed effects and takeovers.
//! The testkit's `FaultyStore` wraps a real in-memory store: it applies the write, then reports
//! the outcome as unknown, as a connection dropped after the commit would.

use std::sync::Arc;

use fencing::{
    EffectOutcome, Error, FenceCheck, FencedBatch, FencedStore, FencedWrite, FencingToken, Holder,
    InputKind, Lease, Lifecycle, MemoryLease, MemoryStore, MemoryTokenSource, RecordKey,
    ResourceName, Result, State, TokenSource,
};
use fencing_core::adapter::HolderExt;
use fencing_testkit::faults::{Fault, FaultyStore, RecordingEffect};

struct Case {
    store: FaultyStore<MemoryStore>,
    source: MemoryTokenSource,
    resource: ResourceName,
    key: RecordKey,
    lifecycle: Lifecycle,
}

impl Case {
    fn new(lose: Vec<FenceCheck>) -> Self {
        let lifecycle = Lifecycle::default();
        let inner = MemoryStore::new("refunds");
        let key = RecordKey::new("r_815").unwrap();
        inner.insert_unfenced(
            key.clone(),
            Some(lifecycle.pending().clone()),
            b"7025".to_vec(),
        );
        let store = FaultyStore::new(inner);
        for check in lose {
            store.inject(Some(check), Fault::LoseAnswer);
        }
        Case {
            store,
            source: MemoryTokenSource::new(),
            resource: ResourceName::new("settle:m_4471").unwrap(),
            key,
            lifecycle,
        }
    }

    async fn run(&self, gateway: &RecordingEffect) -> Result<EffectOutcome<u32>> {
        let token = self.source.next(&self.resource).await.unwrap();
        Holder::new(&self.resource, token, &self.source)
            .run_effect(&self.store, &self.key, &self.lifecycle, gateway)
            .await
    }

    async fn state(&self) -> Option<State> {
        self.store.read(&self.key).await.unwrap().unwrap().state
    }

    /// The case's resource acquired on `lease` for 30 s.
    async fn acquire(&self, lease: &MemoryLease) -> fencing::LeaseGuard {
        let ttl = fencing::Ttl::from_secs(30).unwrap();
        lease
            .try_acquire(&self.resource, ttl)
            .await
            .unwrap()
            .unwrap()
    }

    /// Asserts the record is left in flight under `token`, for the next holder to look up.
    async fn assert_in_flight_under(&self, token: FencingToken) {
        let record = self.store.read(&self.key).await.unwrap().unwrap();
        assert_eq!(record.state.as_ref(), Some(self.lifecycle.in_flight()));
        assert_eq!(record.fence, Some(token));
    }
}

#[tokio::test]
async fn a_lost_answer_to_the_claim_is_retried_with_the_same_token() {
    let case = Case::new(vec![FenceCheck::Claim]);
    let gateway = RecordingEffect::new();
    let outcome = case.run(&gateway).await.unwrap();
    // The retry found the row in flight under its own token and looked before paying.
    assert_eq!(outcome, EffectOutcome::Performed(1));
    assert_eq!(gateway.perform_calls(), 1);
    assert_eq!(case.state().await.as_ref(), Some(case.lifecycle.done()));
}

#[tokio::test]
async fn a_lost_answer_to_the_confirm_is_recognised_as_our_own_confirm() {
    let case = Case::new(vec![FenceCheck::HolderOnly]);
    let gateway = RecordingEffect::new();
    assert_eq!(
        case.run(&gateway).await.unwrap(),
        EffectOutcome::Performed(1)
    );
    assert_eq!(case.state().await.as_ref(), Some(case.lifecycle.done()));
}

#[tokio::test]
async fn a_failed_effect_leaves_the_row_in_flight_and_the_next_holder_looks_first() {
    let case = Case::new(Vec::new());
    let gateway = RecordingEffect::new();
    gateway.fail_next();
    let err = case.run(&gateway).await.unwrap_err();
    assert!(matches!(err, Error::Effect { .. }), "{err:?}");
    assert_eq!(
        case.state().await.as_ref(),
        Some(case.lifecycle.in_flight())
    );

    let outcome = case.run(&gateway).await.unwrap();
    assert_eq!(outcome, EffectOutcome::Performed(1));

    // A row left in flight after the effect did happen is recovered, not paid again.
    let case = Case::new(Vec::new());
    let token = case.source.next(&case.resource).await.unwrap();
    Holder::new(&case.resource, token, &case.source)
        .write(&case.store, &case.key, &case.lifecycle.claim())
        .await
        .unwrap();
    let paid_elsewhere = RecordingEffect::new();
    paid_elsewhere.performed_elsewhere(&case.key);
    assert_eq!(
        case.run(&paid_elsewhere).await.unwrap(),
        EffectOutcome::Recovered(1)
    );
    assert_eq!(paid_elsewhere.perform_calls(), 0, "not paid again");
}

#[tokio::test]
async fn a_refusal_is_never_retried() {
    let case = Case::new(Vec::new());
    case.source
        .advance_to(&case.resource, FencingToken::new(10).unwrap())
        .await
        .unwrap();
    case.run(&RecordingEffect::new()).await.unwrap();
    let stale = FencingToken::new(5).unwrap();
    let err = Holder::new(&case.resource, stale, &case.source)
        .write(&case.store, &case.key, &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Fenced { .. }),
        "below the source's counter: stale, {err:?}"
    );

    case.source.forget_all();
    let err = Holder::new(&case.resource, stale, &case.source)
        .write(&case.store, &case.key, &FencedWrite::claim())
        .await
        .unwrap_err();
    let Error::TokenRegression {
        highest_issued: None,
        found,
        ..
    } = err
    else {
        panic!("above anything issued: regression, {err:?}");
    };
    assert_eq!(
        case.source.current(&case.resource).await.unwrap(),
        Some(found),
        "the regression raised the source to the fence it found"
    );
    let next = case.source.next(&case.resource).await.unwrap();
    Holder::new(&case.resource, next, &case.source)
        .write(&case.store, &case.key, &FencedWrite::claim())
        .await
        .expect("the next holder makes progress without an operator");
}

#[tokio::test]
async fn a_batch_does_not_abort_on_its_own_write_whose_answer_was_lost() {
    let lease = Arc::new(MemoryLease::new());
    let store = Arc::new(FaultyStore::new(MemoryStore::new("refunds")));
    let lifecycle = Lifecycle::default();
    let key = RecordKey::new("r_815").unwrap();
    store
        .inner()
        .insert_unfenced(key.clone(), Some(lifecycle.pending().clone()), Vec::new());
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let guard = lease
        .try_acquire(&resource, fencing::Ttl::from_secs(30).unwrap())
        .await
        .unwrap()
        .unwrap();
    let batch = FencedBatch::new(lease, guard, [store.clone() as Arc<dyn FencedStore>]).unwrap();
    for write in [lifecycle.claim(), lifecycle.confirm()] {
        store.inject(Some(write.check()), Fault::LoseAnswer);
        batch.holder().write(&*store, &key, &write).await.unwrap();
    }
    assert_eq!(store.injected(), 2);
    assert_eq!(batch.aborted_by(), None);
    batch.finish().await.unwrap();
}

#[test]
fn bad_input_is_typed_and_caught_before_any_write() {
    let state = |s| State::new(s).unwrap();
    let err = Lifecycle::new(state("pending"), state("pending"), state("sent")).unwrap_err();
    assert_eq!(err.kind(), InputKind::State);
    assert_eq!(FencingToken::new(0).unwrap_err().kind(), InputKind::Token);
    assert_eq!(
        FencingToken::from_i64(-34).unwrap_err().kind(),
        InputKind::Token
    );
    assert_eq!(
        FencingToken::new(i64::MAX as u64 + 1).unwrap_err().kind(),
        InputKind::Token
    );
    assert_eq!(
        ResourceName::new("").unwrap_err().kind(),
        InputKind::ResourceName
    );
    assert_eq!(
        ResourceName::new("x".repeat(201)).unwrap_err().kind(),
        InputKind::ResourceName
    );
    assert_eq!(
        fencing::Ttl::from_millis(0).unwrap_err().kind(),
        InputKind::Ttl
    );
    assert_eq!(
        RecordKey::new("r\u{0}815").unwrap_err().kind(),
        InputKind::RecordKey
    );
    let err: Error = FencingToken::new(0).unwrap_err().into();
    assert!(!err.is_rejection() && !err.is_ambiguous());
}

/// A holder whose lease has ended by its own clock (a process stopped past its TTL, woken with
/// no newer holder yet) still has its claim accepted by the fence, but starts no effect: the
/// record stays in flight under its token for the next holder to look up.
#[tokio::test(start_paused = true)]
async fn no_effect_starts_once_the_lease_has_ended_locally() {
    let case = Case::new(Vec::new());
    let lease = MemoryLease::new();
    let guard = case.acquire(&lease).await;
    tokio::time::sleep(std::time::Duration::from_secs(31)).await;
    let gateway = RecordingEffect::new();
    let err = guard
        .holder()
        .run_effect(&case.store, &case.key, &case.lifecycle, &gateway)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert_eq!(gateway.perform_calls(), 0);
    case.assert_in_flight_under(guard.token()).await;
}

/// A look-up that outlasts the lease: the effect a take-over would perform after it must not
/// start once the deadline has passed, since the holder can no longer tell that it is the
/// only one sending.
#[tokio::test(start_paused = true)]
async fn a_take_over_whose_look_up_outlasts_the_lease_performs_nothing() {
    let case = Case::new(Vec::new());
    let lease = MemoryLease::new();
    let stale = case.acquire(&lease).await;
    stale
        .holder()
        .write(&case.store, &case.key, &case.lifecycle.claim())
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(31)).await;
    let guard = case.acquire(&lease).await;
    let gateway = SlowLookup {
        recorded: RecordingEffect::new(),
        takes: std::time::Duration::from_secs(31),
    };
    let err = guard
        .holder()
        .run_effect(&case.store, &case.key, &case.lifecycle, &gateway)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert_eq!(gateway.recorded.lookups(), 1);
    assert_eq!(gateway.recorded.perform_calls(), 0);
    case.assert_in_flight_under(guard.token()).await;
}

/// A gateway whose look-ups take `takes` and find nothing (its performs are recorded).
struct SlowLookup {
    recorded: RecordingEffect,
    takes: std::time::Duration,
}

#[fencing::prelude::async_trait]
impl fencing::SideEffect for SlowLookup {
    type Receipt = u32;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<u32>, fencing::BoxError> {
        tokio::time::sleep(self.takes).await;
        self.recorded.lookup(key).await
    }

    async fn perform(
        &self,
        key: &RecordKey,
        record: &fencing::Record,
    ) -> Result<u32, fencing::BoxError> {
        self.recorded.perform(key, record).await
    }
}

/// A guard's holder checks a refusal against the counter its token came from: a fence on the
/// record above everything the lease issued is reported as a counter that went backwards (not
/// as a newer holder), and the lease's own counter is raised past it, so its next acquisition
/// is accepted.
#[tokio::test]
async fn a_guards_holder_repairs_the_counter_of_the_lease_that_issued_it() {
    let case = Case::new(Vec::new());
    let lease = MemoryLease::new();
    let ttl = fencing::Ttl::from_secs(30).unwrap();
    let above = FencingToken::new(1_000).unwrap();
    let elsewhere = MemoryTokenSource::new();
    Holder::new(&case.resource, above, &elsewhere)
        .write(&case.store, &case.key, &case.lifecycle.claim())
        .await
        .unwrap();

    let guard = lease
        .try_acquire(&case.resource, ttl)
        .await
        .unwrap()
        .unwrap();
    let err = guard
        .holder()
        .write(&case.store, &case.key, &case.lifecycle.claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TokenRegression { .. }), "{err:?}");
    let issued = lease.token_source().current(&case.resource).await.unwrap();
    assert!(
        issued >= Some(above),
        "the lease's counter was raised: {issued:?}"
    );
    lease.release(guard).await.unwrap();

    let next = lease
        .try_acquire(&case.resource, ttl)
        .await
        .unwrap()
        .unwrap();
    next.holder()
        .write(&case.store, &case.key, &case.lifecycle.claim())
        .await
        .unwrap();
    assert!(next.token() > above);
}

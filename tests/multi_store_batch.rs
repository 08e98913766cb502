//! One lease, one token, several stores: each store checks its own fence, and the first
//! refusal stops the batch before it sends anything more.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::StoreWrites;
use fencing_testkit::faults::RecordingEffect;

use fencing::{
    EffectOutcome, EffectStart, Error, FenceFloor, FencedBatch, FencedStore, FencedWrite, Finished,
    InputKind, Lease, Lifecycle, MemoryLease, MemoryStore, Mismatch, MismatchPolicy, RecordKey,
    ResourceName, RetryPolicy, TokenSource, Ttl,
};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

struct Setup {
    lease: Arc<MemoryLease>,
    refunds: MemoryStore,
    ledger: MemoryStore,
    resource: ResourceName,
    ttl: Ttl,
}

impl Setup {
    fn new() -> Self {
        Setup {
            lease: Arc::new(MemoryLease::new()),
            refunds: MemoryStore::new("refunds"),
            ledger: MemoryStore::new("ledger"),
            resource: ResourceName::new("settle:m_4471").unwrap(),
            ttl: Ttl::from_secs(30).unwrap(),
        }
    }

    async fn batch(&self) -> FencedBatch {
        let guard = self
            .lease
            .try_acquire(&self.resource, self.ttl)
            .await
            .unwrap()
            .expect("lease free");
        let stores: [Arc<dyn FencedStore>; 2] = [
            Arc::new(self.refunds.clone()),
            Arc::new(self.ledger.clone()),
        ];
        FencedBatch::new(self.lease.clone(), guard, stores).unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusal_in_one_store_aborts_the_batch_in_every_store() {
    let setup = Setup::new();
    let a = setup.batch().await;
    a.holder()
        .write(&setup.ledger, &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap();

    tokio::time::sleep(Duration::from_secs(31)).await;
    let b = setup.batch().await;
    b.holder()
        .write(&setup.ledger, &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap();

    // B has not touched the refunds store, so its fence cannot yet refuse A there:
    a.holder()
        .write(&setup.refunds, &key("r_815"), &FencedWrite::claim())
        .await
        .unwrap();
    // … but the ledger can, and its refusal names it.
    let err = a
        .holder()
        .write(&setup.ledger, &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, .. } if store == "ledger"),
        "{err:?}"
    );
    assert_eq!(a.aborted_by(), Some(("ledger".to_owned(), key("m_4471"))));

    let before = setup.refunds.records();
    let err = a
        .holder()
        .write(&setup.refunds, &key("r_816"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::BatchAborted { store, .. } if store == "ledger"),
        "{err:?}"
    );
    assert_eq!(
        setup.refunds.records(),
        before,
        "nothing is sent after an abort"
    );

    let err = a.finish().await.unwrap_err();
    assert!(
        matches!(&err, Error::BatchAborted { cause, .. } if matches!(**cause, Error::Fenced { .. })),
        "the abort keeps the refusal that caused it: {err:?}"
    );
    assert!(
        setup
            .lease
            .try_acquire(&setup.resource, setup.ttl)
            .await
            .unwrap()
            .is_none(),
        "an aborted batch must not release the new holder's lease"
    );
    b.finish().await.unwrap();
    assert!(
        setup
            .lease
            .try_acquire(&setup.resource, setup.ttl)
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn batch_runs_effects_and_seeds_from_every_store() {
    let setup = Setup::new();
    let lifecycle = Lifecycle::default();
    setup.refunds.insert_unfenced(
        key("r_001"),
        Some(lifecycle.pending().clone()),
        b"7025".to_vec(),
    );
    let batch = setup.batch().await;
    let effect = RecordingEffect::new();
    let outcome = batch
        .holder()
        .run_effect(&setup.refunds, &key("r_001"), &lifecycle, &effect)
        .await
        .unwrap();
    assert_eq!(outcome, EffectOutcome::Performed(1));
    let again = batch
        .holder()
        .run_effect(&setup.refunds, &key("r_001"), &lifecycle, &effect)
        .await
        .unwrap();
    assert_eq!(again, EffectOutcome::AlreadyDone);
    batch
        .holder()
        .write(&setup.ledger, &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap();
    let token = batch.token();
    batch.finish().await.unwrap();

    // The lease's own `MemoryTokenSource` (the `Arc` itself answers `Lease::token_source`).
    let tokens = (*setup.lease).token_source();
    tokens.forget_all();
    let floors: [&dyn FenceFloor; 2] = [&setup.refunds, &setup.ledger];
    let floor = fencing::seed_from_floors(tokens, &setup.resource, &floors)
        .await
        .unwrap();
    assert_eq!(floor, Some(token));
    assert_eq!(tokens.current(&setup.resource).await.unwrap(), Some(token));
}

#[tokio::test]
async fn the_same_store_twice_or_an_unknown_store_is_bad_input() {
    let setup = Setup::new();
    let guard = setup
        .lease
        .try_acquire(&setup.resource, setup.ttl)
        .await
        .unwrap()
        .unwrap();
    let twice: [Arc<dyn FencedStore>; 2] = [
        Arc::new(setup.refunds.clone()),
        Arc::new(MemoryStore::new("refunds")),
    ];
    let err = FencedBatch::new(setup.lease.clone(), guard, twice).unwrap_err();
    assert_eq!(err.kind(), InputKind::StoreSet);

    let setup = Setup::new();
    let batch = setup.batch().await;
    let err = batch
        .holder()
        .write(
            &MemoryStore::new("nowhere"),
            &key("r_001"),
            &FencedWrite::claim(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(ref e) if e.kind() == InputKind::StoreSet));
    assert_eq!(batch.aborted_by(), None, "bad input is not a refusal");
    assert!(setup.refunds.records().is_empty());
}

fn pending_refunds(setup: &Setup, keys: &[&str]) {
    for k in keys {
        setup.refunds.insert_unfenced(
            key(k),
            Some(Lifecycle::default().pending().clone()),
            b"7025".to_vec(),
        );
    }
}

#[tokio::test(start_paused = true)]
async fn under_the_skip_policy_a_cancelled_or_missing_record_is_reported_and_the_batch_goes_on() {
    let setup = Setup::new();
    let lifecycle = Lifecycle::default();
    pending_refunds(&setup, &["r_001", "r_003"]);
    setup.refunds.insert_unfenced(
        key("r_002"),
        Some(fencing::State::new("cancelled").unwrap()),
        Vec::new(),
    );
    let batch = setup
        .batch()
        .await
        .with_mismatch_policy(MismatchPolicy::Skip);
    let effect = RecordingEffect::new();
    let mut outcomes = Vec::new();
    for k in ["r_001", "r_002", "r_404", "r_003"] {
        outcomes.push(
            batch
                .holder()
                .run_effect(&setup.refunds, &key(k), &lifecycle, &effect)
                .await,
        );
    }
    assert_eq!(outcomes[0].as_ref().unwrap(), &EffectOutcome::Performed(1));
    // Left alone: returned as their mismatch, as a write's would be, without aborting.
    assert!(
        matches!(&outcomes[1], Err(Error::StateMismatch { record, .. }) if record == &key("r_002"))
    );
    assert!(matches!(&outcomes[2], Err(Error::NotFound { record, .. }) if record == &key("r_404")));
    assert!(outcomes[1].as_ref().unwrap_err().is_mismatch());
    assert_eq!(outcomes[3].as_ref().unwrap(), &EffectOutcome::Performed(2));
    assert_eq!(batch.aborted_by(), None);
    let skipped = batch.skipped();
    assert_eq!(skipped.len(), 2);
    assert_eq!(
        skipped[0].mismatch,
        Mismatch::State {
            found: Some(fencing::State::new("cancelled").unwrap()),
            expected: vec![lifecycle.pending().clone(), lifecycle.in_flight().clone()],
        }
    );
    assert_eq!(effect.performed(), vec![key("r_001"), key("r_003")]);
    assert_eq!(batch.finish().await.unwrap(), Finished::Released);
}

#[tokio::test(start_paused = true)]
async fn under_the_skip_policy_a_fence_refusal_still_aborts() {
    let setup = Setup::new();
    pending_refunds(&setup, &["r_815", "r_816"]);
    let lifecycle = Lifecycle::default();
    let a = setup
        .batch()
        .await
        .with_mismatch_policy(MismatchPolicy::Skip);
    tokio::time::sleep(Duration::from_secs(31)).await;
    let b = setup.batch().await;
    let effect = RecordingEffect::new();
    b.holder()
        .run_effect(&setup.refunds, &key("r_815"), &lifecycle, &effect)
        .await
        .unwrap();
    let err = a
        .holder()
        .run_effect(&setup.refunds, &key("r_815"), &lifecycle, &effect)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    let err = a
        .holder()
        .run_effect(&setup.refunds, &key("r_816"), &lifecycle, &effect)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    assert!(a.skipped().is_empty());
    assert_eq!(effect.perform_calls(), 1);
}

async fn is_free(setup: &Setup) -> bool {
    match setup
        .lease
        .try_acquire(&setup.resource, setup.ttl)
        .await
        .unwrap()
    {
        Some(guard) => {
            setup.lease.release(guard).await.unwrap();
            true
        }
        None => false,
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_aborted_by_a_state_mismatch_still_releases_its_lease() {
    let setup = Setup::new();
    setup.refunds.insert_unfenced(
        key("r_002"),
        Some(fencing::State::new("cancelled").unwrap()),
        Vec::new(),
    );
    let batch = setup.batch().await;
    let err = batch
        .holder()
        .run_effect(
            &setup.refunds,
            &key("r_002"),
            &Lifecycle::default(),
            &RecordingEffect::new(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StateMismatch { .. }), "{err:?}");
    assert!(matches!(
        batch.finish().await,
        Err(Error::BatchAborted { .. })
    ));
    assert!(is_free(&setup).await, "the next worker must not wait a TTL");
}

#[tokio::test(start_paused = true)]
async fn a_batch_dropped_without_finishing_or_refused_at_construction_releases_its_lease() {
    let setup = Setup::new();
    let batch = setup.batch().await;
    drop(batch);
    tokio::task::yield_now().await;
    assert!(is_free(&setup).await, "dropped batch");

    let guard = setup
        .lease
        .try_acquire(&setup.resource, setup.ttl)
        .await
        .unwrap()
        .unwrap();
    let twice: [Arc<dyn FencedStore>; 2] = [
        Arc::new(setup.refunds.clone()),
        Arc::new(MemoryStore::new("refunds")),
    ];
    FencedBatch::new(setup.lease.clone(), guard, twice).unwrap_err();
    tokio::task::yield_now().await;
    assert!(is_free(&setup).await, "batch refused at construction");
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_outlived_its_ttl_without_a_newer_holder_finishes_late_not_lost() {
    let setup = Setup::new();
    pending_refunds(&setup, &["r_001"]);
    let batch = setup.batch().await;
    batch
        .holder()
        .run_effect(
            &setup.refunds,
            &key("r_001"),
            &Lifecycle::default(),
            &RecordingEffect::new(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(batch.finish().await.unwrap(), Finished::LeaseLost);
}

#[tokio::test(start_paused = true)]
async fn a_scope_releases_on_error_and_refuses_a_bad_store_set_before_acquiring() {
    let setup = Setup::new();
    let refunds: Arc<dyn FencedStore> = Arc::new(setup.refunds.clone());
    let err = FencedBatch::scope(
        setup.lease.clone(),
        &setup.resource,
        setup.ttl,
        [refunds.clone()],
    )
    .run(async |batch| {
        batch
            .holder()
            .write(&refunds, &key("r_404"), &FencedWrite::holder_only())
            .await
    })
    .await
    .unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    assert!(is_free(&setup).await);

    let before = setup
        .lease
        .token_source()
        .current(&setup.resource)
        .await
        .unwrap();
    let err = FencedBatch::scope(
        setup.lease.clone(),
        &setup.resource,
        setup.ttl,
        [refunds.clone(), refunds.clone()],
    )
    .run(async |_| Ok(()))
    .await
    .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(ref e) if e.kind() == InputKind::StoreSet));
    assert_eq!(
        setup
            .lease
            .token_source()
            .current(&setup.resource)
            .await
            .unwrap(),
        before,
        "nothing acquired"
    );
}

/// A batch knows its stores by identity, not by name alone: a clone of one of them (the
/// same records) is that store, and a store made apart under the same name is not.
#[tokio::test(start_paused = true)]
async fn a_store_made_apart_under_a_batch_stores_name_is_refused_and_a_clone_admitted() {
    let setup = Setup::new();
    let batch = setup.batch().await;
    let namesake = MemoryStore::new("refunds");
    let err = batch
        .holder()
        .write(&namesake, &key("r_001"), &FencedWrite::claim())
        .await
        .unwrap_err();
    match &err {
        Error::InvalidInput(e) => {
            assert_eq!(e.kind(), InputKind::StoreSet);
            assert!(e.detail().contains("only of the same name"), "{err}");
        }
        other => panic!("expected a store outside the batch, got {other:?}"),
    }
    assert!(namesake.records().is_empty(), "nothing sent to it");
    let err = batch
        .holder()
        .write_many(&namesake, &[key("r_002")], &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(ref e) if e.kind() == InputKind::StoreSet));
    assert_eq!(batch.aborted_by(), None, "bad input is not a refusal");

    let clone = setup.refunds.clone();
    batch
        .holder()
        .write(&clone, &key("r_001"), &FencedWrite::claim())
        .await
        .unwrap();
    assert_eq!(
        setup.refunds.records().len(),
        1,
        "the clone wrote the batch's records"
    );
}

#[tokio::test(start_paused = true)]
async fn a_write_through_the_batchs_fence_is_the_batchs() {
    let setup = Setup::new();
    let refunds: Arc<dyn FencedStore> = Arc::new(setup.refunds.clone());
    let elsewhere: Arc<dyn FencedStore> = Arc::new(MemoryStore::new("elsewhere"));
    let a = setup.batch().await;
    a.holder()
        .write(&refunds, &key("r_1"), &FencedWrite::claim())
        .await
        .unwrap();
    let err = a
        .holder()
        .write(&elsewhere, &key("r_1"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(ref e) if e.kind() == InputKind::StoreSet));

    tokio::time::sleep(Duration::from_secs(31)).await;
    let b = setup.batch().await;
    b.holder()
        .write(&refunds, &key("r_1"), &FencedWrite::claim())
        .await
        .unwrap();
    let err = a
        .holder()
        .write(&*refunds, &key("r_1"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    assert_eq!(a.aborted_by(), Some(("refunds".to_owned(), key("r_1"))));
}

#[tokio::test(start_paused = true)]
async fn an_effect_on_an_earlier_claim_looks_up_only_records_in_flight_before_it() {
    let setup = Setup::new();
    let lifecycle = Lifecycle::default();
    pending_refunds(&setup, &["r_001"]);
    setup.refunds.insert_unfenced(
        key("r_002"),
        Some(lifecycle.in_flight().clone()),
        Vec::new(),
    );
    let batch = setup.batch().await;
    let effect = RecordingEffect::new();
    let mut claims = Vec::new();
    for k in ["r_001", "r_002"] {
        claims.push(
            batch
                .holder()
                .write(&setup.refunds, &key(k), &lifecycle.claim())
                .await
                .unwrap(),
        );
    }
    let confirmed = std::sync::Mutex::new(Vec::new());
    for claimed in &claims {
        batch
            .holder()
            .run_effect_then(
                &setup.refunds,
                EffectStart::Claimed(claimed),
                &lifecycle,
                &effect,
                async |receipt: &u32| {
                    confirmed.lock().unwrap().push(*receipt);
                    batch
                        .holder()
                        .write(&setup.refunds, &claimed.record.key, &lifecycle.confirm())
                        .await
                        .map(drop)
                },
            )
            .await
            .unwrap();
    }
    assert_eq!(
        effect.lookups(),
        1,
        "only r_002 was in flight before the claim"
    );
    assert_eq!(*confirmed.lock().unwrap(), vec![1, 2]);
    let done = setup.refunds.records();
    assert!(
        done.iter()
            .all(|r| r.state.as_ref() == Some(lifecycle.done()))
    );

    // A claim that did not leave the record in flight is refused before any call.
    let plain = batch
        .holder()
        .write(&setup.refunds, &key("r_003"), &FencedWrite::claim())
        .await
        .unwrap();
    let err = batch
        .holder()
        .run_effect_then(
            &setup.refunds,
            EffectStart::Claimed(&plain),
            &lifecycle,
            &effect,
            async |_: &u32| Ok(()),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert_eq!(effect.perform_calls(), 2);
}

/// The steps for one refund across two stores, each idempotent: the refund's effect and
/// confirm (done already: nothing sent), then its ledger entry (a claim that creates it or
/// writes the same state again under the newer fence).
async fn refund_and_post(
    setup: &Setup,
    batch: &FencedBatch,
    key: &RecordKey,
    effect: &RecordingEffect,
) {
    batch
        .holder()
        .run_effect(&setup.refunds, key, &Lifecycle::default(), effect)
        .await
        .unwrap();
    let posted = FencedWrite::claim().set_state(fencing::State::new("posted").unwrap());
    batch
        .holder()
        .write(&setup.ledger, key, &posted)
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_crash_between_two_stores_is_completed_by_the_next_holder_without_a_second_effect() {
    let setup = Setup::new();
    pending_refunds(&setup, &["r_815"]);
    let effect = RecordingEffect::new();

    // A confirms the refund in one store and dies before the ledger entry in the other: the
    // two stores are not one transaction, so for now the refund is sent and not posted.
    let a = setup.batch().await;
    a.holder()
        .run_effect(
            &setup.refunds,
            &key("r_815"),
            &Lifecycle::default(),
            &effect,
        )
        .await
        .unwrap();
    drop(a);
    assert!(setup.ledger.records().is_empty());

    // The next holder runs the same steps: the refund is already done, the entry is written.
    tokio::task::yield_now().await;
    let b = setup.batch().await;
    refund_and_post(&setup, &b, &key("r_815"), &effect).await;
    let entry = setup.ledger.records().pop().expect("the ledger entry");
    assert_eq!(entry.fence, Some(b.token()));
    assert_eq!(entry.state, Some(fencing::State::new("posted").unwrap()));
    assert_eq!(effect.perform_calls(), 1, "the refund was not sent again");
    b.finish().await.unwrap();
}

/// A batch dropped while its runtime shuts down (a `?` out of `#[tokio::main]`) has no runtime
/// left to release on: the lease stays until its TTL, as the docs say. `scope` (or awaiting
/// `finish` on every path) releases before the runtime ends.
#[test]
fn a_batch_dropped_as_its_runtime_shuts_down_keeps_the_lease_a_scope_does_not() {
    let lease = Arc::new(MemoryLease::new());
    let refunds: Arc<dyn FencedStore> = Arc::new(MemoryStore::new("refunds"));
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let is_free = || {
        runtime().block_on(async {
            match lease.try_acquire(&resource, ttl).await.unwrap() {
                Some(guard) => {
                    lease.release(guard).await.unwrap();
                    true
                }
                None => false,
            }
        })
    };

    // `main` returns early with `?`: the batch is dropped as the runtime ends.
    let main = runtime().block_on(async {
        let guard = lease.try_acquire(&resource, ttl).await?.expect("free");
        let _batch = FencedBatch::new(lease.clone(), guard, [refunds.clone()])?;
        Err::<(), Error>(Error::InvalidInput(fencing::InvalidInput::new(
            fencing::InputKind::RecordKey,
            "an early return",
        )))
    });
    assert!(main.is_err());
    assert!(!is_free(), "no runtime was left to run the release on");

    // The same early return inside `scope`: released before `main` ends.
    let lease = Arc::new(MemoryLease::new());
    let scoped = runtime().block_on(
        FencedBatch::scope(lease.clone(), &resource, ttl, [refunds.clone()])
            .retry(RetryPolicy::once())
            .run(async |_| {
                Err::<(), Error>(Error::InvalidInput(fencing::InvalidInput::new(
                    fencing::InputKind::RecordKey,
                    "an early return",
                )))
            }),
    );
    assert!(scoped.is_err());
    let free = runtime().block_on(async { lease.try_acquire(&resource, ttl).await.unwrap() });
    assert!(free.is_some(), "scoped released on the early return");
}

/// A batch aborted by a counter that went backwards says so when it finishes: its abort
/// carries the regression, which a newer holder's refusal would not be.
#[tokio::test(start_paused = true)]
async fn an_abort_by_a_token_regression_is_told_from_a_newer_holder() {
    let setup = Setup::new();
    let above = fencing::FencingToken::new(1_000).unwrap();
    setup
        .ledger
        .write(&key("m_4471"), above, &FencedWrite::claim())
        .await
        .unwrap();
    let batch = setup.batch().await;
    let err = batch
        .holder()
        .write(&setup.ledger, &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TokenRegression { .. }), "{err:?}");
    let err = batch
        .holder()
        .write(&setup.refunds, &key("r_815"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::BatchAborted { cause, .. } if matches!(**cause, Error::TokenRegression { .. })),
        "{err:?}"
    );
    let err = batch.finish().await.unwrap_err();
    assert!(
        matches!(&err, Error::BatchAborted { store, cause, .. }
            if store == "ledger" && matches!(**cause, Error::TokenRegression { found, .. } if found == above)),
        "{err:?}"
    );
    let source = std::error::Error::source(&err).map(ToString::to_string);
    assert!(
        source
            .as_deref()
            .is_some_and(|text| text.contains("token regression")),
        "the regression is the abort's source: {source:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_adapters_own_write_and_a_grouped_write_through_the_batchs_fence_abort_it() {
    use fencing_core::adapter::HolderExt;
    let setup = Setup::new();
    pending_refunds(&setup, &["r_1", "r_2", "r_3"]);
    let a = setup.batch().await;
    a.holder()
        .write_many(
            &setup.refunds,
            &[key("r_1"), key("r_2")],
            &FencedWrite::claim(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(31)).await;
    let b = setup.batch().await;
    b.holder()
        .write(&setup.refunds, &key("r_2"), &FencedWrite::claim())
        .await
        .unwrap();

    // A grouped write: one record refused among accepted ones aborts the batch.
    let each = a
        .holder()
        .write_many(
            &setup.refunds,
            &[key("r_3"), key("r_2")],
            &FencedWrite::claim(),
        )
        .await
        .unwrap();
    assert!(each[0].is_ok(), "{:?}", each[0]);
    assert!(
        matches!(each[1], Err(Error::Fenced { .. })),
        "{:?}",
        each[1]
    );
    assert_eq!(a.aborted_by(), Some(("refunds".to_owned(), key("r_2"))));

    // An adapter's own request under the batch's holder is refused unsent once it aborted.
    let sent = std::sync::atomic::AtomicBool::new(false);
    let err = a
        .holder()
        .run_write(
            &setup.ledger,
            &[&key("m_4471")],
            &fencing::FencedWrite::claim(),
            async || {
                sent.store(true, std::sync::atomic::Ordering::SeqCst);
                Ok(())
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    assert!(
        !sent.load(std::sync::atomic::Ordering::SeqCst),
        "nothing sent"
    );

    // In a batch not aborted, an adapter's refused request aborts it like a write.
    let c = b;
    let refusal = Error::Fenced {
        store: "ledger".to_owned(),
        record: key("m_4471"),
        presented: c.token(),
        found: fencing::FoundFence::Fence(c.token().next().unwrap()),
    };
    let mut refusals = vec![refusal];
    let err = c
        .holder()
        .run_write(
            &setup.ledger,
            &[&key("m_4471")],
            &fencing::FencedWrite::claim(),
            async || Err::<(), _>(refusals.pop().expect("sent once")),
        )
        .await
        .unwrap_err();
    // Above every token issued: explained as a regression, and still the batch's abort.
    assert!(matches!(err, Error::TokenRegression { .. }), "{err:?}");
    assert_eq!(c.aborted_by(), Some(("ledger".to_owned(), key("m_4471"))));
}

#[tokio::test(start_paused = true)]
async fn a_record_skipped_in_a_callers_confirm_is_reported_once() {
    let setup = Setup::new();
    pending_refunds(&setup, &["r_1"]);
    let batch = setup
        .batch()
        .await
        .with_mismatch_policy(MismatchPolicy::Skip);
    let lifecycle = Lifecycle::default();
    let effect = RecordingEffect::default();
    let holder = batch.holder();
    // The caller's confirm requires a state the record is not in: its write through the
    // batch's fence notes the skip, and so does the effect helper it returns the error to.
    let confirm = async |_: &_| {
        holder
            .write(
                &setup.refunds,
                &key("r_1"),
                &FencedWrite::holder_only().when_state_in([lifecycle.done().clone()]),
            )
            .await
            .map(drop)
    };
    let err = holder
        .run_effect_then(
            &setup.refunds,
            EffectStart::Claim(&key("r_1")),
            &lifecycle,
            &effect,
            confirm,
        )
        .await
        .unwrap_err();
    assert!(err.is_mismatch(), "{err:?}");
    assert_eq!(batch.skipped().len(), 1, "{:?}", batch.skipped());
    assert_eq!(batch.aborted_by(), None);
    assert_eq!(batch.finish().await.unwrap(), Finished::Released);
}

#[tokio::test(start_paused = true)]
async fn an_aborted_batchs_effects_and_pipelines_start_nothing() {
    let setup = Setup::new();
    pending_refunds(&setup, &["r_1", "r_2", "r_3"]);
    let a = setup.batch().await;
    a.holder()
        .write(&setup.ledger, &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(31)).await;
    let b = setup.batch().await;
    b.holder()
        .write(&setup.ledger, &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap();
    let refused = a
        .holder()
        .write(&setup.ledger, &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::Fenced { .. }), "{refused:?}");

    let lifecycle = Lifecycle::default();
    let effect = RecordingEffect::default();
    let err = a
        .holder()
        .run_effect(&setup.refunds, &key("r_1"), &lifecycle, &effect)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    let settled = a
        .holder()
        .pipeline(&setup.refunds, &lifecycle, &effect)
        .run([key("r_2"), key("r_3")])
        .await;
    assert!(
        matches!(settled.error, Some(Error::BatchAborted { .. })),
        "{:?}",
        settled.error
    );
    assert!(settled.outcomes.is_empty());
    assert_eq!(
        effect.perform_calls() + effect.lookups(),
        0,
        "no effect started"
    );
    let untouched = setup.refunds.records();
    assert!(
        untouched.iter().all(|r| r.fence.is_none()),
        "nothing claimed: {untouched:?}"
    );
}

//! One lease, one token, several stores: each store checks its own fence, and the first
//! refusal stops the batch before it sends anything more.

use std::sync::Arc;
use std::time::Duration;

use fencing_testkit::faults::RecordingEffect;

use fencing::{
    EffectOutcome, Error, FenceFloor, FencedBatch, FencedStore, FencedWrite, InputKind, Lease,
    Lifecycle, MemoryLease, MemoryStore, RecordKey, ResourceName, TokenSource, Ttl,
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
    a.write("ledger", &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap();

    tokio::time::sleep(Duration::from_secs(31)).await;
    let b = setup.batch().await;
    b.write("ledger", &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap();

    // B has not touched the refunds store, so its fence cannot yet refuse A there:
    a.write("refunds", &key("r_815"), &FencedWrite::claim())
        .await
        .unwrap();
    // … but the ledger can, and its refusal names it.
    let err = a
        .write("ledger", &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, .. } if store == "ledger"),
        "{err:?}"
    );
    assert_eq!(a.aborted_by(), Some(("ledger".to_owned(), key("m_4471"))));

    let before = setup.refunds.records();
    let err = a
        .write("refunds", &key("r_816"), &FencedWrite::claim())
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
    assert!(matches!(err, Error::BatchAborted { .. }));
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
        .run_effect("refunds", &key("r_001"), &lifecycle, &effect)
        .await
        .unwrap();
    assert_eq!(outcome, EffectOutcome::Performed(1));
    let again = batch
        .run_effect("refunds", &key("r_001"), &lifecycle, &effect)
        .await
        .unwrap();
    assert_eq!(again, EffectOutcome::AlreadyDone);
    batch
        .write("ledger", &key("m_4471"), &FencedWrite::claim())
        .await
        .unwrap();
    let token = batch.token();
    batch.finish().await.unwrap();

    let tokens = setup.lease.tokens();
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
        .write("nowhere", &key("r_001"), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(ref e) if e.kind() == InputKind::StoreSet));
    assert_eq!(batch.aborted_by(), None, "bad input is not a refusal");
    assert!(setup.refunds.records().is_empty());
}

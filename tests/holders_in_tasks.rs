//! A worker that settles several merchants at once gives each merchant's holder to a task of
//! its own: a holder owns its guard and its batch's notes, so the task borrows nothing from
//! the batch, and what the task meets is still the batch's.

use std::sync::Arc;

use fencing::{
    Error, FencedBatch, FencedStore, FencedWrite, FencingToken, Finished, Lease, Lifecycle,
    MemoryLease, MemoryStore, RecordKey, ResourceName, Ttl,
};
use fencing_core::adapter::StoreWrites;
use fencing_testkit::faults::RecordingEffect;

const MERCHANTS: [&str; 3] = ["m_4471", "m_4472", "m_4473"];
const REFUNDS: usize = 40;

fn refunds_of(merchant: &str) -> Vec<RecordKey> {
    (1..=REFUNDS)
        .map(|n| RecordKey::new(format!("{merchant}_r_{n:03}")).unwrap())
        .collect()
}

async fn batch_for(
    lease: &Arc<MemoryLease>,
    merchant: &str,
    store: &Arc<MemoryStore>,
) -> FencedBatch {
    let resource = ResourceName::new(format!("settle:{merchant}")).unwrap();
    let guard = lease
        .try_acquire(&resource, Ttl::from_secs(30).unwrap())
        .await
        .unwrap()
        .expect("a fresh lease is free");
    let stores: [Arc<dyn FencedStore>; 1] = [store.clone()];
    FencedBatch::new(lease.clone(), guard, stores).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_merchants_holder_settles_in_a_task_of_its_own() {
    let lease = Arc::new(MemoryLease::new());
    let refunds = Arc::new(MemoryStore::new("refunds"));
    let lifecycle = Lifecycle::default();
    let gateway = Arc::new(RecordingEffect::new());
    let mut batches = Vec::new();
    let mut tasks = tokio::task::JoinSet::new();
    for merchant in MERCHANTS {
        let keys = refunds_of(merchant);
        for key in &keys {
            refunds.insert_unfenced(key.clone(), Some(lifecycle.pending().clone()), Vec::new());
        }
        let batch = batch_for(&lease, merchant, &refunds).await;
        let holder = batch.holder();
        let (store, lifecycle, gateway) = (refunds.clone(), lifecycle.clone(), gateway.clone());
        tasks.spawn(async move {
            let settled = holder
                .pipeline(&*store, &lifecycle, &*gateway)
                .concurrency(4)
                .run(keys)
                .await;
            (holder.token(), settled.into_result().map(|done| done.len()))
        });
        batches.push(batch);
    }
    while let Some(joined) = tasks.join_next().await {
        let (token, settled) = joined.unwrap();
        assert_eq!(settled.unwrap(), REFUNDS, "the batch of token {token}");
    }
    assert_eq!(gateway.perform_calls() as usize, REFUNDS * MERCHANTS.len());
    for record in refunds.records() {
        assert_eq!(
            record.state.as_ref(),
            Some(lifecycle.done()),
            "{:?}",
            record.key
        );
    }
    for batch in batches {
        assert_eq!(batch.finish().await.unwrap(), Finished::Released);
    }
}

/// A refusal met in the task aborts the batch the holder came from: the batch refuses its own
/// next write unsent, and its finish reports the abort.
#[tokio::test]
async fn a_refusal_met_in_a_task_aborts_the_batch_the_holder_came_from() {
    let lease = Arc::new(MemoryLease::new());
    let refunds = Arc::new(MemoryStore::new("refunds"));
    let batch = batch_for(&lease, "m_4471", &refunds).await;
    let taken = RecordKey::new("r_815").unwrap();
    let newer = FencingToken::new(batch.token().get() + 1).unwrap();
    refunds
        .write(&taken, newer, &FencedWrite::claim())
        .await
        .unwrap();

    let holder = batch.holder();
    let store = refunds.clone();
    let refused = tokio::spawn(async move {
        holder
            .write(
                &*store,
                &RecordKey::new("r_815").unwrap(),
                &FencedWrite::claim(),
            )
            .await
    })
    .await
    .unwrap()
    .unwrap_err();
    assert!(refused.is_rejection(), "{refused:?}");
    assert_eq!(batch.aborted_by(), Some(("refunds".to_owned(), taken)));
    let err = batch
        .holder()
        .write(
            &*refunds,
            &RecordKey::new("r_816").unwrap(),
            &FencedWrite::claim(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    assert!(matches!(
        batch.finish().await,
        Err(Error::BatchAborted { .. })
    ));
}

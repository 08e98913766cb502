//! The conformance suite against the in-memory implementations, each three ways: as the
//! concrete type, as `Box<dyn …>` and as `Arc<dyn …>`, through the same generic bounds, one
//! test per guarantee and form.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::{
    CasStore, JsonCodec, MemoryVersionedStore, TokioClock, VersionedStore,
};
use fencing_core::{
    EpochSource, FencedStore, Holder, Lease, MemoryEpochSource, MemoryLease, MemoryStore,
    MemoryTokenSource, RecordKey, ResourceName, TokenSource,
};
use fencing_testkit::Fencing;
use fencing_testkit::conformance::*;

/// Each form in a module of its own: a failure names the form and the guarantee.
mod concrete {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(start_paused = true)]
        subject: MemoryLease::new(),
        caps: Capabilities::in_memory(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        subject: MemoryTokenSource::new(),
        caps: Capabilities::in_memory(),
    }
    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: MemoryStore::new("concrete"),
        caps: Capabilities::in_memory(),
    }
}

mod boxed {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(start_paused = true)]
        subject: Box::new(MemoryLease::new()) as Box<dyn Lease>,
        caps: Capabilities::in_memory(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        subject: Box::new(MemoryTokenSource::new()) as Box<dyn TokenSource>,
        caps: Capabilities::in_memory(),
    }
    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Box::new(MemoryStore::new("boxed")) as Box<dyn FencedStore>,
        caps: Capabilities::in_memory(),
    }
}

mod shared {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(start_paused = true)]
        subject: Arc::new(MemoryLease::new()) as Arc<dyn Lease>,
        caps: Capabilities::in_memory(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        subject: Arc::new(MemoryTokenSource::new()) as Arc<dyn TokenSource>,
        caps: Capabilities::in_memory(),
    }
    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Arc::new(MemoryStore::new("shared")) as Arc<dyn FencedStore>,
        caps: Capabilities::in_memory(),
    }
}

/// The compare-and-swap loop every object store shares, over the in-memory versioned store.
mod compare_and_swap {
    use super::*;

    fencing_testkit::store_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: CasStore::new(MemoryVersionedStore::new("objects")),
        caps: Capabilities::in_memory(),
    }

    #[tokio::test]
    async fn a_delete_leaves_a_tombstone_that_keeps_the_fence_in_either_codec() {
        let objects = MemoryVersionedStore::new("objects");
        for json in [false, true] {
            let handle = || match json {
                true => CasStore::new(objects.clone()).with_codec(JsonCodec::new()),
                false => CasStore::new(objects.clone()),
            };
            let (store, stale) = (handle(), handle());
            fencing_testkit::conformance::a_delete_leaves_a_tombstone_that_keeps_the_fence(
                &store,
                &stale,
                async |store: &CasStore<_>, holder: &Holder, key: &RecordKey| {
                    store.delete(key, holder.token()).await
                },
                async |key| objects.get(key).await.unwrap().unwrap().body,
            )
            .await;
            objects.remove(&RecordKey::new("r_815").unwrap());
        }
    }
}

/// A lease whose counters take a new epoch from a durable source when they are lost.
mod with_epochs {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(start_paused = true)]
        subject: lease_with_epochs(),
        caps: Capabilities::in_memory(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test]
        subject: lease_with_epochs().token_source().clone(),
        caps: Capabilities::in_memory(),
    }
}

#[tokio::test]
async fn racing_claims_serialise_one_request_at_a_time_where_the_backend_does_not() {
    let caps = Capabilities {
        serialises_concurrent_writes: false,
        ..Capabilities::in_memory()
    };
    racing_claims_serialise(Arc::new(MemoryStore::new("one-by-one")), caps).await;
}

/// A lease whose counters take a new epoch from a durable source when they are lost.
fn lease_with_epochs() -> MemoryLease {
    let epochs: Arc<dyn EpochSource> = Arc::new(MemoryEpochSource::new());
    MemoryLease::with_parts(Arc::new(TokioClock), MemoryTokenSource::with_epochs(epochs))
}

/// Sixteen callers that find one lost counter at once open one epoch between them, loss
/// after loss: the callers name the loss alike, and the epochs open one epoch per name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_that_find_one_loss_at_once_open_one_epoch() {
    let epochs = Arc::new(MemoryEpochSource::new());
    let tokens = MemoryTokenSource::with_epochs(epochs.clone());
    let r = ResourceName::new("settle:m_4471").unwrap();
    let mut issued = std::collections::BTreeSet::new();
    for loss in 1..=3 {
        tokens.forget_all();
        let mut callers = tokio::task::JoinSet::new();
        for _ in 0..16 {
            let (tokens, r) = (tokens.clone(), r.clone());
            callers.spawn(async move { tokens.next(&r).await.unwrap() });
        }
        for token in callers.join_all().await {
            assert!(issued.insert(token), "{token} issued twice");
            assert_eq!(token.get() >> 32, loss, "loss {loss}: {token}");
        }
        assert_eq!(epochs.current(&r).await.unwrap().unwrap().get(), loss);
    }
}

#[tokio::test(start_paused = true)]
async fn no_token_is_reissued_after_the_counters_are_lost() {
    let caps = Capabilities::in_memory();
    let lease = lease_with_epochs();
    let store = MemoryStore::new("refunds");
    let tokens = lease.token_source().clone();
    no_token_is_reissued_after_counter_loss(&lease, &store, caps, async || tokens.forget_all())
        .await;
}

/// The same schedules find the reissue where counters restart at 1: the check can fail.
#[test]
fn without_epochs_the_reissue_schedule_finds_a_token_issued_twice() {
    let run = std::thread::spawn(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let lease = MemoryLease::new();
            let store = MemoryStore::new("refunds");
            let tokens = lease.token_source().clone();
            no_token_is_reissued_after_counter_loss(
                &lease,
                &store,
                Capabilities::in_memory(),
                async || tokens.forget_all(),
            )
            .await;
        });
    });
    assert!(
        run.join().is_err(),
        "the schedule must find the reissued token"
    );
}

#[tokio::test(start_paused = true)]
async fn paused_holder_is_fenced_three_ways() {
    let caps = Capabilities::in_memory();
    let lease = MemoryLease::new();
    let store = MemoryStore::new("refunds");
    paused_holder_is_fenced(&lease, &store, caps).await;
    let boxed: (Box<dyn Lease>, Box<dyn FencedStore>) =
        (Box::new(lease.clone()), Box::new(store.clone()));
    paused_holder_is_fenced(&boxed.0, &boxed.1, caps).await;
    let shared: (Arc<dyn Lease>, Arc<dyn FencedStore>) = (Arc::new(lease), Arc::new(store));
    paused_holder_is_fenced(&shared.0, &shared.1, caps).await;
}

#[tokio::test(start_paused = true)]
async fn token_regression_is_detected_and_repaired() {
    let caps = Capabilities::in_memory();
    let lease = MemoryLease::new();
    let store = MemoryStore::new("refunds");
    let tokens = lease.token_source().clone();
    token_regression_is_detected(&lease, &store, &store, caps, async || tokens.forget_all()).await;
}

/// 8 workers × 20 increments on fresh in-memory stores, in virtual time.
async fn increments(fencing: Fencing, seed: u64) -> IncrementReport {
    fenced_increments(
        Arc::new(MemoryLease::new()),
        Arc::new(MemoryStore::new("counter")),
        Capabilities::in_memory(),
        8,
        20,
        fencing,
        seed,
    )
    .await
}

#[tokio::test(start_paused = true)]
async fn fenced_increments_are_exact_in_virtual_time() {
    for seed in 0..20 {
        let report = increments(Fencing::On, seed).await;
        assert_eq!(report.total, report.expected, "seed {seed}: {report:?}");
        assert!(report.rejected > 0, "seed {seed}: no holder was ever stale");
    }
}

#[tokio::test(start_paused = true)]
async fn without_fences_the_same_increments_lose_updates() {
    let mut lost = 0;
    for seed in 0..20 {
        let report = increments(Fencing::Off, seed).await;
        assert_eq!(
            report.rejected, 0,
            "nothing can refuse a write without fences"
        );
        lost += report.expected - report.total;
    }
    assert!(lost > 0, "the checker must see lost updates without fences");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_increments_are_exact_across_threads_in_real_time() {
    let caps = Capabilities {
        expiry_slack: Duration::from_millis(20),
        ..Capabilities::real_server()
    };
    let shared_lease: Arc<dyn Lease> = Arc::new(MemoryLease::new());
    let report = fenced_increments(
        Arc::new(shared_lease),
        Arc::new(MemoryStore::new("counter")),
        caps,
        4,
        5,
        Fencing::On,
        7,
    )
    .await;
    assert_eq!(report.total, report.expected, "{report:?}");
}

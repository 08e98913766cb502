use fencing_core::{
    Error, FenceCheck, FencedStore, FencedWrite, FencingToken, FoundFence, Lifecycle, RecordKey,
    State,
};

use super::{hostile_names, key};

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn state(name: &str) -> State {
    State::new(name).unwrap()
}

/// Every [`FencedStore`] guarantee that a single writer can check.
pub async fn store_suite<S: FencedStore + ?Sized>(store: &S) {
    claim_creates_a_missing_record(store).await;
    stale_claim_is_rejected(store).await;
    same_token_reclaim_is_idempotent(store).await;
    confirm_by_a_non_claimer_is_rejected(store).await;
    state_preconditions_are_enforced(store).await;
    fence_is_checked_before_state(store).await;
    payload_round_trips_bytes(store).await;
    hostile_keys_are_distinct(store).await;
}

async fn must_claim<S: FencedStore + ?Sized>(store: &S, key: &RecordKey, t: u64) {
    store
        .write(key, token(t), &FencedWrite::claim())
        .await
        .unwrap_or_else(|err| panic!("claim of {key:?} with {t}: {err}"));
}

/// A claim without a state condition creates a missing record with the token as its fence.
pub async fn claim_creates_a_missing_record<S: FencedStore + ?Sized>(store: &S) {
    let k = key("create");
    assert_eq!(store.read(&k).await.unwrap(), None);
    let write = FencedWrite::claim()
        .set_state(state("pending"))
        .set_payload(b"70.25".to_vec());
    let written = store.write(&k, token(7), &write).await.unwrap();
    assert!(written.created);
    assert_eq!(written.previous_fence, None);
    let record = store.read(&k).await.unwrap().expect("created");
    assert_eq!(record, written.record);
    assert_eq!(record.fence, Some(token(7)));
    assert_eq!(record.state, Some(state("pending")));
    assert_eq!(record.payload, b"70.25");
}

/// A claim with a lower token than the fence is refused, names the fence, changes nothing.
pub async fn stale_claim_is_rejected<S: FencedStore + ?Sized>(store: &S) {
    let k = key("stale");
    must_claim(store, &k, 34).await;
    let before = store.read(&k).await.unwrap();
    let write = FencedWrite::claim().set_state(state("sending"));
    let err = store.write(&k, token(33), &write).await.unwrap_err();
    match &err {
        Error::Fenced {
            store: name,
            record,
            presented,
            found,
        } => {
            assert_eq!(name, store.name());
            assert_eq!(record, &k);
            assert_eq!(*presented, token(33));
            assert_eq!(*found, FoundFence::Fence(token(34)));
        }
        other => panic!("expected Fenced, got {other:?}"),
    }
    assert!(err.is_rejection() && !err.is_ambiguous());
    assert_eq!(
        store.read(&k).await.unwrap(),
        before,
        "a refusal changes nothing"
    );
}

/// Claiming again with the same token (an ambiguous write retried) is accepted; a higher
/// token takes over.
pub async fn same_token_reclaim_is_idempotent<S: FencedStore + ?Sized>(store: &S) {
    let k = key("reclaim");
    let write = FencedWrite::claim().set_state(state("sending"));
    store.write(&k, token(5), &write).await.unwrap();
    let again = store.write(&k, token(5), &write).await.unwrap();
    assert_eq!(again.previous_fence, Some(token(5)));
    assert_eq!(again.previous_state, Some(state("sending")));
    let takeover = store.write(&k, token(6), &write).await.unwrap();
    assert_eq!(takeover.previous_fence, Some(token(5)));
    assert_eq!(store.read(&k).await.unwrap().unwrap().fence, Some(token(6)));
}

/// A holder-only write is accepted only with exactly the fence's token, and keeps the fence.
pub async fn confirm_by_a_non_claimer_is_rejected<S: FencedStore + ?Sized>(store: &S) {
    let k = key("confirm");
    let lifecycle = Lifecycle::default();
    store
        .write(
            &k,
            token(10),
            &FencedWrite::claim().set_state(lifecycle.pending().clone()),
        )
        .await
        .unwrap();
    store
        .write(&k, token(33), &lifecycle.claim())
        .await
        .unwrap();
    store
        .write(&k, token(34), &lifecycle.claim())
        .await
        .unwrap();
    for stale_or_unclaimed in [33, 35] {
        let err = store
            .write(&k, token(stale_or_unclaimed), &lifecycle.confirm())
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(34)),
            "confirm with {stale_or_unclaimed}: {err:?}"
        );
    }
    let confirmed = store
        .write(&k, token(34), &lifecycle.confirm())
        .await
        .unwrap();
    assert_eq!(confirmed.record.fence, Some(token(34)));
    assert_eq!(confirmed.record.state.as_ref(), Some(lifecycle.done()));
    assert_eq!(lifecycle.confirm().check(), FenceCheck::HolderOnly);
}

/// State conditions hold in the same step as the fence; missing records are not invented.
pub async fn state_preconditions_are_enforced<S: FencedStore + ?Sized>(store: &S) {
    let lifecycle = Lifecycle::default();
    let k = key("state");
    store
        .write(
            &k,
            token(3),
            &FencedWrite::claim().set_state(lifecycle.done().clone()),
        )
        .await
        .unwrap();
    let before = store.read(&k).await.unwrap();
    let err = store
        .write(&k, token(4), &lifecycle.claim())
        .await
        .unwrap_err();
    match &err {
        Error::StateMismatch {
            found, expected, ..
        } => {
            assert_eq!(found.as_deref(), Some("sent"));
            assert_eq!(expected, &["pending", "sending"]);
        }
        other => panic!("expected StateMismatch, got {other:?}"),
    }
    assert_eq!(store.read(&k).await.unwrap(), before, "fence must not move");

    let missing = key("missing");
    for write in [
        lifecycle.claim(),
        lifecycle.confirm(),
        FencedWrite::holder_only(),
    ] {
        let err = store.write(&missing, token(4), &write).await.unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    }
    assert_eq!(store.read(&missing).await.unwrap(), None);
}

/// A stale writer is told it is stale even when the state would also refuse it.
pub async fn fence_is_checked_before_state<S: FencedStore + ?Sized>(store: &S) {
    let lifecycle = Lifecycle::default();
    let k = key("order");
    store
        .write(
            &k,
            token(9),
            &FencedWrite::claim().set_state(lifecycle.done().clone()),
        )
        .await
        .unwrap();
    let err = store
        .write(&k, token(8), &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
}

/// Payloads are bytes, NUL and invalid UTF-8 included; a write without a payload keeps it.
pub async fn payload_round_trips_bytes<S: FencedStore + ?Sized>(store: &S) {
    let k = key("payload");
    let bytes = vec![0u8, 255, 0x80, b'\'', b'"', 0, 10];
    store
        .write(
            &k,
            token(1),
            &FencedWrite::claim().set_payload(bytes.clone()),
        )
        .await
        .unwrap();
    store
        .write(&k, token(2), &FencedWrite::claim().set_state(state("x")))
        .await
        .unwrap();
    assert_eq!(store.read(&k).await.unwrap().unwrap().payload, bytes);
}

/// Keys full of quotes, SQL, braces and look-alikes are stored independently.
pub async fn hostile_keys_are_distinct<S: FencedStore + ?Sized>(store: &S) {
    let names = hostile_names();
    for (i, name) in names.iter().enumerate() {
        let k = RecordKey::new(name.clone()).unwrap();
        must_claim(store, &k, i as u64 + 1).await;
    }
    for (i, name) in names.iter().enumerate() {
        let k = RecordKey::new(name.clone()).unwrap();
        let record = store.read(&k).await.unwrap().expect("stored");
        assert_eq!(record.key, k);
        assert_eq!(record.fence, Some(token(i as u64 + 1)), "{name:?}");
    }
}

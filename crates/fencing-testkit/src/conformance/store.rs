use std::sync::Arc;

use fencing_core::adapter::HolderExt;
use fencing_core::{
    Error, FenceCheck, FencedStore, FencedWrite, FencingToken, FoundFence, Holder, Lifecycle,
    MemoryTokenSource, RecordKey, State, TokenSource,
};
use rand::SeedableRng;
use rand::seq::SliceRandom;

use super::{Capabilities, OneAtATime, hostile_names, make_pending, resource};
use crate::faults::{Fault, FaultyStore};

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn state(name: &str) -> State {
    State::new(name).unwrap()
}

async fn must_claim<S: FencedStore + ?Sized>(store: &S, key: &RecordKey, t: u64) {
    store
        .write(key, token(t), &FencedWrite::claim())
        .await
        .unwrap_or_else(|err| panic!("claim of {key:?} with {t}: {err}"));
}

/// A claim without a state condition creates a missing record with the token as its fence.
pub async fn claim_creates_a_missing_record<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
) {
    let k = caps.key("create");
    assert_eq!(store.read(&k).await.unwrap(), None);
    let write = FencedWrite::claim()
        .set_state(state("pending"))
        .set_payload(caps.payload(b"70.25"));
    let written = store.write(&k, token(7), &write).await.unwrap();
    assert!(written.created);
    assert_eq!(written.previous_fence, None);
    let record = store.read(&k).await.unwrap().expect("created");
    assert_eq!(record, written.record);
    assert_eq!(record.fence, Some(token(7)));
    assert_eq!(record.state, Some(state("pending")));
    assert_eq!(record.payload, caps.payload(b"70.25"));
}

/// A claim with a lower token than the fence is refused, names the fence, changes nothing.
pub async fn stale_claim_is_rejected<S: FencedStore + ?Sized>(store: &S, caps: Capabilities) {
    let k = caps.key("stale");
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
pub async fn same_token_reclaim_is_idempotent<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
) {
    let k = caps.key("reclaim");
    let write = FencedWrite::claim().set_state(state("sending"));
    store.write(&k, token(5), &write).await.unwrap();
    let again = store.write(&k, token(5), &write).await.unwrap();
    assert_eq!(again.previous_fence, Some(token(5)));
    assert_eq!(again.previous_state, Some(state("sending")));
    let takeover = store.write(&k, token(6), &write).await.unwrap();
    assert_eq!(takeover.previous_fence, Some(token(5)));
    assert_eq!(store.read(&k).await.unwrap().unwrap().fence, Some(token(6)));
}

/// A holder-only write is accepted only with exactly the holder's token, and keeps the fence.
pub async fn confirm_by_a_non_claimer_is_rejected<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
) {
    let k = caps.key("confirm");
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
pub async fn state_preconditions_are_enforced<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
) {
    let lifecycle = Lifecycle::default();
    let k = caps.key("state");
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
            assert_eq!(found.as_ref(), Some(lifecycle.done()));
            assert_eq!(
                expected,
                &[lifecycle.pending().clone(), lifecycle.in_flight().clone()]
            );
        }
        other => panic!("expected StateMismatch, got {other:?}"),
    }
    assert_eq!(store.read(&k).await.unwrap(), before, "fence must not move");

    let missing = caps.key("missing");
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
pub async fn fence_is_checked_before_state<S: FencedStore + ?Sized>(store: &S, caps: Capabilities) {
    let lifecycle = Lifecycle::default();
    let k = caps.key("order");
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
pub async fn payload_round_trips_bytes<S: FencedStore + ?Sized>(store: &S, caps: Capabilities) {
    let k = caps.key("payload");
    let bytes = caps.payload(&[0u8, 255, 0x80, b'\'', b'"', 0, 10]);
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
pub async fn hostile_keys_are_distinct<S: FencedStore + ?Sized>(store: &S, caps: Capabilities) {
    let names = hostile_names();
    for (i, name) in names.iter().enumerate() {
        let k = caps.key_spelled(name);
        must_claim(store, &k, i as u64 + 1).await;
    }
    for (i, name) in names.iter().enumerate() {
        let k = caps.key_spelled(name);
        let record = store.read(&k).await.unwrap().expect("stored");
        assert_eq!(record.key, k);
        assert_eq!(record.fence, Some(token(i as u64 + 1)), "{name:?}");
    }
}

/// The states and payload of a record that every refusal below must leave as it is.
async fn refusal_changes_nothing<S: FencedStore + ?Sized>(
    store: &S,
    k: &RecordKey,
    t: u64,
    write: &FencedWrite,
    expect: fn(&Error) -> bool,
) {
    let before = store.read(k).await.unwrap();
    let err = store.write(k, token(t), write).await.unwrap_err();
    assert!(expect(&err), "{write:?} with {t}: {err:?}");
    assert!(err.is_rejection(), "{err:?}");
    assert_eq!(
        store.read(k).await.unwrap(),
        before,
        "a refused {write:?} with {t} changed the record"
    );
}

/// Every kind of refused write (stale claim, holder-only by a lower or higher token, state
/// mismatch for either kind, a missing record) leaves the record exactly as it was.
pub async fn refused_writes_change_nothing<S: FencedStore + ?Sized>(store: &S, caps: Capabilities) {
    let k = caps.key("refused");
    store
        .write(
            &k,
            token(10),
            &FencedWrite::claim()
                .set_state(state("sending"))
                .set_payload(caps.payload(b"before")),
        )
        .await
        .unwrap();
    let everything = |w: FencedWrite| {
        w.set_state(state("sent"))
            .set_payload(caps.payload(b"after"))
    };
    let fenced = |e: &Error| matches!(e, Error::Fenced { .. });
    let mismatch = |e: &Error| matches!(e, Error::StateMismatch { .. });
    refusal_changes_nothing(store, &k, 9, &everything(FencedWrite::claim()), fenced).await;
    for t in [9, 11] {
        let write = everything(FencedWrite::holder_only());
        refusal_changes_nothing(store, &k, t, &write, fenced).await;
    }
    let wrong_state = |w: FencedWrite| everything(w.when_state_in([state("pending")]));
    refusal_changes_nothing(store, &k, 10, &wrong_state(FencedWrite::claim()), mismatch).await;
    refusal_changes_nothing(store, &k, 11, &wrong_state(FencedWrite::claim()), mismatch).await;
    refusal_changes_nothing(
        store,
        &k,
        10,
        &wrong_state(FencedWrite::holder_only()),
        mismatch,
    )
    .await;
    let missing = caps.key("refused-missing");
    refusal_changes_nothing(
        store,
        &missing,
        10,
        &wrong_state(FencedWrite::claim()),
        |e| matches!(e, Error::NotFound { .. }),
    )
    .await;
}

/// A write whose answer was lost after it applied, or whose request was lost before, is
/// retried by [`Holder::write`] with the same token and reported as applied, for both kinds of
/// write; a retry that finds the record in another state is still refused.
pub async fn retried_writes_are_recognised<S: FencedStore + ?Sized>(store: &S, caps: Capabilities) {
    let faulty = FaultyStore::new(store);
    let r = resource("retried");
    let source = MemoryTokenSource::new();
    source.advance_to(&r, token(1000)).await.unwrap();
    let holder = Holder::new(&r, token(20), &source);
    let lifecycle = Lifecycle::default();
    for fault in [Fault::LoseAnswer, Fault::LoseRequest] {
        let k = caps.key("retried");
        make_pending(store, &k).await;
        faulty.inject(Some(FenceCheck::Claim), fault);
        let claimed = holder.write(&faulty, &k, &lifecycle.claim()).await;
        let claimed = claimed.unwrap_or_else(|e| panic!("claim after {fault:?}: {e}"));
        assert_eq!(claimed.record.state.as_ref(), Some(lifecycle.in_flight()));

        faulty.inject(Some(FenceCheck::HolderOnly), fault);
        let confirmed = holder.write(&faulty, &k, &lifecycle.confirm()).await;
        let confirmed = confirmed.unwrap_or_else(|e| panic!("confirm after {fault:?}: {e}"));
        assert_eq!(confirmed.record.state.as_ref(), Some(lifecycle.done()));
        assert_eq!(confirmed.record.fence, Some(token(20)));

        faulty.inject(None, fault);
        let payload =
            FencedWrite::holder_only().set_payload(caps.payload(format!("{fault:?}").as_bytes()));
        let written = holder.write(&faulty, &k, &payload).await;
        let written = written.unwrap_or_else(|e| panic!("payload after {fault:?}: {e}"));
        assert_eq!(
            written.record.payload,
            caps.payload(format!("{fault:?}").as_bytes())
        );
        assert_eq!(
            store.read(&k).await.unwrap().unwrap().state.as_ref(),
            Some(lifecycle.done())
        );
    }
    assert_eq!(faulty.injected(), 6);

    // The first attempt never arrived and the record is not in a state this write sets: the
    // retry's refusal stands.
    let k = caps.key("retried-refused");
    make_pending(store, &k).await;
    holder
        .write(store, &k, &FencedWrite::claim())
        .await
        .unwrap();
    faulty.inject(None, Fault::LoseRequest);
    let err = holder
        .write(&faulty, &k, &lifecycle.confirm())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::StateMismatch { found: Some(s), .. } if s == lifecycle.pending()),
        "{err:?}"
    );
}

/// Every claim of `tokens` on `k` at once, each with its token as payload.
async fn race_claims<S: FencedStore + ?Sized + 'static>(
    store: Arc<S>,
    k: &RecordKey,
    tokens: Vec<u64>,
    caps: Capabilities,
) -> Vec<(u64, fencing_core::Result<fencing_core::Written>)> {
    let mut tasks = tokio::task::JoinSet::new();
    for t in tokens {
        let (store, k) = (store.clone(), k.clone());
        let claim = FencedWrite::claim().set_payload(caps.payload(t.to_string().as_bytes()));
        tasks.spawn(async move { (t, store.write(&k, token(t), &claim).await) });
    }
    tasks.join_all().await
}

/// Claims with tokens 1 to 16 racing on one record end as if they ran one after another: the
/// highest token is accepted and its fence and payload stay; every refused claim met a fence
/// above its own token; no accepted claim found a fence above its token.
pub async fn racing_claims_serialise<S: FencedStore + ?Sized + 'static>(
    store: Arc<S>,
    caps: Capabilities,
) {
    let k = caps.key("race");
    let mut tokens: Vec<u64> = (1..=16).collect();
    tokens.shuffle(&mut rand::rngs::StdRng::seed_from_u64(16));
    let outcomes = if caps.serialises_concurrent_writes {
        race_claims(store.clone(), &k, tokens, caps).await
    } else {
        race_claims(Arc::new(OneAtATime::new(store.clone())), &k, tokens, caps).await
    };
    for (t, outcome) in &outcomes {
        match outcome {
            Ok(written) => assert!(
                written.previous_fence.is_none_or(|f| f <= token(*t)),
                "claim {t} accepted over fence {:?}",
                written.previous_fence
            ),
            Err(Error::Fenced {
                found: FoundFence::Fence(found),
                ..
            }) => assert!(*found > token(*t), "claim {t} refused by fence {found}"),
            Err(other) => panic!("claim {t}: {other:?}"),
        }
    }
    let highest_accepted = outcomes
        .iter()
        .filter(|(_, o)| o.is_ok())
        .map(|(t, _)| *t)
        .max();
    assert_eq!(
        highest_accepted,
        Some(16),
        "the highest token is never refused"
    );
    let record = store.read(&k).await.unwrap().expect("claimed");
    assert_eq!(record.fence, Some(token(16)));
    assert_eq!(record.payload, caps.payload(b"16"));
}

/// `write_many` answers each record as a single write of it would: a claim creates a missing
/// record, takes over a lower fence, and is refused by a higher one with that record left
/// unchanged; a holder-only write with a state condition applies where fence and state admit
/// it and is refused (fence, state, missing) where a single write would be. Keys given twice
/// are refused with nothing written; no keys is no writes.
pub async fn many_writes_answer_as_single_writes<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
) {
    let (missing, older, newer) = (
        caps.key("many-new"),
        caps.key("many-older"),
        caps.key("many-newer"),
    );
    let claim = FencedWrite::claim()
        .set_state(state("sending"))
        .set_payload(caps.payload(b"7"));
    claims_answer_one_by_one(store, caps, [&missing, &older, &newer], &claim).await;
    confirms_answer_one_by_one(store, caps, [&missing, &older, &newer]).await;
    let twice = caps.key("many-twice");
    let err = store
        .write_many(&[twice.clone(), twice.clone()], token(7), &claim)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidInput(_)), "{err:?}");
    assert_eq!(store.read(&twice).await.unwrap(), None, "nothing written");
    assert!(
        store
            .write_many(&[], token(7), &claim)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A group claim of a missing record, one under a lower fence (5) and one under a higher (9),
/// with token 7: created, taken over, fenced and left unchanged.
async fn claims_answer_one_by_one<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
    [missing, older, newer]: [&RecordKey; 3],
    claim: &FencedWrite,
) {
    must_claim(store, older, 5).await;
    must_claim(store, newer, 9).await;
    let newer_before = store.read(newer).await.unwrap();
    let keys = [missing.clone(), older.clone(), newer.clone()];
    let claimed = store.write_many(&keys, token(7), claim).await.unwrap();
    assert_eq!(claimed.len(), 3, "one outcome per key: {claimed:?}");
    let created = claimed[0]
        .as_ref()
        .expect("a claim creates a missing record");
    assert!(created.created && created.record.key == *missing);
    let taken = claimed[1]
        .as_ref()
        .expect("a claim takes over a lower fence");
    assert_eq!(taken.previous_fence, Some(token(5)));
    assert_eq!(&taken.record.key, older);
    match &claimed[2] {
        Err(Error::Fenced {
            record, presented, ..
        }) => assert_eq!((record, *presented), (newer, token(7))),
        other => panic!("a claim below fence 9 must be fenced: {other:?}"),
    }
    for (k, outcome) in keys.iter().zip(&claimed).take(2) {
        let record = store.read(k).await.unwrap().expect("written");
        assert_eq!(&record, &outcome.as_ref().unwrap().record);
        assert_eq!(
            (
                record.fence,
                record.state.clone(),
                record.payload.as_slice()
            ),
            (
                Some(token(7)),
                Some(state("sending")),
                &caps.payload(b"7")[..]
            )
        );
    }
    assert_eq!(
        store.read(newer).await.unwrap(),
        newer_before,
        "the refused record is unchanged"
    );
}

/// A group confirm under token 7 after those claims: applied where the claim was, fenced,
/// missing; a second confirm finds the record done.
async fn confirms_answer_one_by_one<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
    [missing, older, newer]: [&RecordKey; 3],
) {
    let absent = caps.key("many-absent");
    let confirm = FencedWrite::holder_only()
        .when_state_in([state("sending")])
        .set_state(state("sent"));
    let keys = [
        missing.clone(),
        newer.clone(),
        absent.clone(),
        older.clone(),
    ];
    let confirmed = store.write_many(&keys, token(7), &confirm).await.unwrap();
    assert_eq!(confirmed.len(), 4, "{confirmed:?}");
    for i in [0, 3] {
        let written = confirmed[i].as_ref().expect("the claimer confirms");
        assert_eq!(written.previous_state, Some(state("sending")));
        assert_eq!(written.record.state, Some(state("sent")));
        assert_eq!(written.record.fence, Some(token(7)));
    }
    assert!(
        matches!(&confirmed[1], Err(Error::Fenced { record, .. }) if record == newer),
        "{:?}",
        confirmed[1]
    );
    assert!(
        matches!(&confirmed[2], Err(Error::NotFound { record, .. }) if record == &absent),
        "{:?}",
        confirmed[2]
    );
    assert_eq!(store.read(&absent).await.unwrap(), None, "nothing created");
    let again = store
        .write_many(&keys[..1], token(7), &confirm)
        .await
        .unwrap();
    assert!(
        matches!(&again[0], Err(Error::StateMismatch { found: Some(s), .. }) if *s == state("sent")),
        "a second confirm finds the record sent: {again:?}"
    );
}

/// A write of many records whose answer was lost after it applied, or whose request was lost
/// before, is sent again by [`Holder::write_many`] and every record reported as applied, for
/// claims and confirms alike; a record a newer holder took in between stays refused.
pub async fn retried_groups_are_recognised<S: FencedStore + ?Sized>(store: &S, caps: Capabilities) {
    let faulty = FaultyStore::new(store);
    let r = resource("retried-group");
    let source = MemoryTokenSource::new();
    source.advance_to(&r, token(1000)).await.unwrap();
    let holder = Holder::new(&r, token(20), &source);
    let lifecycle = Lifecycle::default();
    for fault in [Fault::LoseAnswer, Fault::LoseRequest] {
        let keys: Vec<RecordKey> = (0..5).map(|_| caps.key("retried-group")).collect();
        for k in &keys {
            make_pending(store, k).await;
        }
        faulty.inject(Some(FenceCheck::Claim), fault);
        let claimed = holder
            .write_many(&faulty, &keys, &lifecycle.claim())
            .await
            .unwrap_or_else(|e| panic!("claims after {fault:?}: {e}"));
        for (k, outcome) in keys.iter().zip(&claimed) {
            let written = outcome
                .as_ref()
                .unwrap_or_else(|e| panic!("claim of {k:?} after {fault:?}: {e}"));
            assert_eq!(written.record.state.as_ref(), Some(lifecycle.in_flight()));
        }
        faulty.inject(Some(FenceCheck::HolderOnly), fault);
        let confirmed = holder
            .write_many(&faulty, &keys, &lifecycle.confirm())
            .await
            .unwrap_or_else(|e| panic!("confirms after {fault:?}: {e}"));
        for (k, outcome) in keys.iter().zip(&confirmed) {
            outcome
                .as_ref()
                .unwrap_or_else(|e| panic!("confirm of {k:?} after {fault:?}: {e}"));
            let record = store.read(k).await.unwrap().unwrap();
            assert_eq!(record.state.as_ref(), Some(lifecycle.done()));
            assert_eq!(record.fence, Some(token(20)));
        }
    }
    assert_eq!(faulty.injected(), 4);

    // A newer holder claims one record between the lost answer and the retry: that record
    // is refused by its fence, the others are this holder's.
    let keys: Vec<RecordKey> = (0..3).map(|_| caps.key("retried-taken")).collect();
    for k in &keys {
        make_pending(store, k).await;
    }
    holder
        .write_many(store, &keys, &lifecycle.claim())
        .await
        .unwrap();
    must_claim(store, &keys[1], 21).await;
    faulty.inject(None, Fault::LoseRequest);
    let confirmed = holder
        .write_many(&faulty, &keys, &lifecycle.confirm())
        .await
        .unwrap();
    assert!(
        confirmed[0].is_ok() && confirmed[2].is_ok(),
        "{confirmed:?}"
    );
    assert!(
        matches!(&confirmed[1], Err(Error::Fenced { record, .. }) if record == &keys[1]),
        "{:?}",
        confirmed[1]
    );
    assert_eq!(
        store.read(&keys[1]).await.unwrap().unwrap().fence,
        Some(token(21))
    );
}

/// A group of claims under one token racing single claims of a newer holder on the same
/// records ends as if each record's writes ran one after another: every record ends under
/// the newer fence; each of the group's records was either applied before the newer claim
/// (which then found the group's fence) or refused by the newer fence.
pub async fn a_group_racing_a_newer_holder_serialises<S: FencedStore + ?Sized + 'static>(
    store: Arc<S>,
    caps: Capabilities,
) {
    let store: Arc<dyn FencedStore> = if caps.serialises_concurrent_writes {
        Arc::new(store)
    } else {
        Arc::new(OneAtATime::new(store))
    };
    let keys: Vec<RecordKey> = (0..12).map(|_| caps.key("group-race")).collect();
    for k in &keys {
        make_pending(&*store, k).await;
    }
    let claim = Lifecycle::default().claim();
    let group = {
        let (store, keys, claim) = (store.clone(), keys.clone(), claim.clone());
        tokio::spawn(async move { store.write_many(&keys, token(33), &claim).await })
    };
    let mut newer = tokio::task::JoinSet::new();
    for k in keys.iter().rev() {
        let (store, k, claim) = (store.clone(), k.clone(), claim.clone());
        newer.spawn(async move { (k.clone(), store.write(&k, token(34), &claim).await) });
    }
    let newer = newer.join_all().await;
    let group = group.await.unwrap().unwrap();
    for (k, outcome) in keys.iter().zip(&group) {
        let (_, takeover) = newer.iter().find(|(n, _)| n == k).unwrap();
        let takeover = takeover
            .as_ref()
            .unwrap_or_else(|e| panic!("the newer holder's claim of {k:?}: {e}"));
        match outcome {
            Ok(_) => assert_eq!(
                takeover.previous_fence,
                Some(token(33)),
                "{k:?}: the group's claim applied, so it came first"
            ),
            Err(Error::Fenced { .. }) => assert_ne!(
                takeover.previous_fence,
                Some(token(33)),
                "{k:?}: the group was refused, so the newer claim came first"
            ),
            Err(other) => panic!("{k:?}: {other:?}"),
        }
        let record = store.read(k).await.unwrap().unwrap();
        assert_eq!(
            record.fence,
            Some(token(34)),
            "{k:?} ends under the newer fence"
        );
    }
}

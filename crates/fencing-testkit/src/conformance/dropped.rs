//! What a caller's dropped future leaves behind (a `select!` whose other branch won, a
//! timeout, a shutdown), on each backend's own await points: every guarantee here sweeps an
//! operation with [`drop_at_every_yield`], dropping it at each point it waited on the server.

use fencing_core::{
    Error, FencedStore, FencedWrite, FencingToken, Lease, Lifecycle, Record, RecordKey, Result,
    RetryPolicy, Written, acquire,
};
use tokio::sync::Mutex;

use super::{Capabilities, make_pending, must_acquire, resource};
use crate::cancellation::{Sweep, drop_at_every_yield};

/// The token every write of these sweeps presents.
fn holder() -> FencingToken {
    FencingToken::new(7).expect("a valid token")
}

/// Writes a sweep's figures to the test's output (`--nocapture` shows them). How often a run
/// over real I/O waits depends on the machine's load: under load an answer is often there by
/// the first poll, so the figures vary from run to run and are not asserted.
pub fn report_sweep(operation: &str, sweep: Sweep) {
    eprintln!(
        "{operation}: dropped at {} of {} yields",
        sweep.dropped, sweep.yields
    );
}

/// Checks a run of `write` by `token` on `key` that ended with `output` or was dropped
/// (`None`): the record is `before` or exactly `before` with the write applied, and the holder
/// resending the write settles which: accepted, or refused because it was applied. A dropped
/// request may still be applied after the drop (it was sent, and the server finishes it), so
/// a refusal is judged by the record read after it.
///
/// # Panics
///
/// When any of that does not hold, or the store fails.
pub async fn settled_by_a_resend<S: FencedStore + ?Sized>(
    store: &S,
    key: &RecordKey,
    token: FencingToken,
    write: &FencedWrite,
    before: &Record,
    output: Option<Result<Written>>,
) {
    let applied = write.apply(key, token, Some(before));
    let now = store.read(key).await.unwrap().expect("the record");
    match output {
        Some(ended) => assert_eq!(ended.unwrap().record, now, "an ended write"),
        None => assert!(
            now == *before || now == applied,
            "a dropped write left {now:?}: neither {before:?} nor the write applied"
        ),
    }
    if let Err(refusal) = store.write(key, token, write).await {
        assert!(refusal.is_rejection(), "the resend failed: {refusal}");
    }
    assert_eq!(
        store.read(key).await.unwrap(),
        Some(applied),
        "after the resend"
    );
}

/// A claim dropped at any await point either never reached the record or took it whole, and
/// the claimer's resend is accepted either way.
pub async fn a_dropped_claim_is_applied_or_not<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
) {
    let claim = Lifecycle::default().claim();
    let sweep = drop_at_every_yield(
        async || {
            let key = caps.key("dropped-claim");
            make_pending(store, &key).await;
            let before = store.read(&key).await.unwrap().expect("pending");
            (key, before)
        },
        async |(key, _)| store.write(key, holder(), &claim).await,
        async |(key, before), output| {
            settled_by_a_resend(store, key, holder(), &claim, before, output).await
        },
    )
    .await;
    report_sweep("claim", sweep);
}

/// A confirm (state and payload) dropped at any await point either never reached the record or
/// changed both, and the holder's resend settles it: accepted, or refused as already done.
pub async fn a_dropped_confirm_is_applied_or_not<S: FencedStore + ?Sized>(
    store: &S,
    caps: Capabilities,
) {
    let lifecycle = Lifecycle::default();
    let confirm = lifecycle.confirm().set_payload(caps.payload(b"70.25"));
    let sweep = drop_at_every_yield(
        async || {
            let key = caps.key("dropped-confirm");
            make_pending(store, &key).await;
            let claimed = store
                .write(&key, holder(), &lifecycle.claim())
                .await
                .unwrap();
            (key, claimed.record)
        },
        async |(key, _)| store.write(key, holder(), &confirm).await,
        async |(key, before), output| {
            settled_by_a_resend(store, key, holder(), &confirm, before, output).await;
        },
    )
    .await;
    report_sweep("confirm", sweep);
}

/// A `try_acquire` dropped at any await point leaves the resource free or held by an owner no
/// guard exists for, and then for no longer than the TTL it asked: another owner acquires it
/// once that TTL has passed, with a higher token than any issued before. (The other owner
/// retries rather than trusting one look: a dropped request may still be under way on
/// another of the driver's connections.)
pub async fn a_dropped_acquire_holds_no_longer_than_its_ttl<L: Lease + ?Sized>(
    lease: &L,
    caps: Capabilities,
) {
    let sweep = drop_at_every_yield(
        async || resource("dropped-acquire"),
        async |r| lease.try_acquire(r, caps.short_ttl).await,
        async |r, output| {
            if let Some(ended) = output {
                let guard = ended.unwrap().expect("a free resource is acquired");
                // Only tidying: a short lease may have ended by now on a busy machine.
                match lease.release(guard).await {
                    Ok(()) | Err(Error::LeaseLost { .. }) => {}
                    Err(other) => panic!("releasing the acquired lease: {other:?}"),
                }
                return;
            }
            if let Some(orphan) = lease.status(r).await.unwrap() {
                assert!(
                    orphan.time_left <= caps.short_ttl.duration(),
                    "an orphan holds {r:?} for {:?}",
                    orphan.time_left
                );
            }
            let issued = lease.token_source().current(r).await.unwrap();
            let step = caps.past_expiry() / 4;
            let within_ttl = RetryPolicy::new(12, step, step).unwrap();
            let guard = acquire(lease, r, caps.short_ttl, &within_ttl)
                .await
                .unwrap_or_else(|err| panic!("{r:?} still held a TTL after the drop: {err}"));
            assert!(Some(guard.token()) > issued, "{guard:?} after {issued:?}");
            lease.release(guard).await.unwrap();
        },
    )
    .await;
    report_sweep("try_acquire", sweep);
}

/// An `extend` dropped at any await point leaves the holder its lease: nobody else acquires it,
/// and the holder's next extension and release are accepted.
pub async fn a_dropped_extend_keeps_the_holder<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let sweep = drop_at_every_yield(
        async || {
            let r = resource("dropped-extend");
            Mutex::new(must_acquire(lease, &r, caps.held_ttl()).await)
        },
        async |guard| {
            let mut guard = guard.lock().await;
            lease.extend(&mut guard, caps.held_ttl()).await
        },
        async |guard, output| {
            if let Some(ended) = output {
                ended.unwrap();
            }
            let mut guard = guard.lock().await;
            let rival = lease
                .try_acquire(guard.resource(), caps.short_ttl)
                .await
                .unwrap();
            assert!(rival.is_none(), "{rival:?} beside {guard:?}");
            lease.extend(&mut guard, caps.held_ttl()).await.unwrap();
            lease.release(guard.clone()).await.unwrap();
        },
    )
    .await;
    report_sweep("extend", sweep);
}

/// A `release` dropped at any await point leaves the lease released or still the holder's, and
/// releasing again settles it: accepted, or refused as no longer held; the resource is then free
/// at once.
pub async fn a_dropped_release_leaves_it_releasable<L: Lease + ?Sized>(
    lease: &L,
    caps: Capabilities,
) {
    let sweep = drop_at_every_yield(
        async || {
            let r = resource("dropped-release");
            must_acquire(lease, &r, caps.held_ttl()).await
        },
        async |guard| lease.release(guard.clone()).await,
        async |guard, output| {
            match output {
                Some(ended) => ended.unwrap(),
                None => match lease.release(guard.clone()).await {
                    Ok(()) | Err(Error::LeaseLost { .. }) => {}
                    Err(other) => panic!("releasing again: {other:?}"),
                },
            }
            let next = acquire(
                lease,
                guard.resource(),
                caps.held_ttl(),
                &RetryPolicy::once(),
            )
            .await
            .unwrap_or_else(|err| panic!("{guard:?} is released, yet {err}"));
            lease.release(next).await.unwrap();
        },
    )
    .await;
    report_sweep("release", sweep);
}

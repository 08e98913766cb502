use std::sync::Arc;
use std::time::Instant;

use fencing_core::adapter::{Clock, LeaseGuardExt, TokioClock};
use fencing_core::{
    Error, FencingToken, InputKind, Lease, LeaseGuard, OwnerId, ResourceName, RetryPolicy, Ttl,
    acquire,
};

use super::{Capabilities, OneAtATime, hostile_names, must_acquire, resource};

/// `status` names the holder and its token while the lease is live, and nobody once it is
/// released or expired.
pub async fn status_names_the_live_holder_only<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let r = resource("lease-status");
    assert_eq!(lease.status(&r).await.unwrap(), None, "never held");
    let guard = must_acquire(lease, &r, caps.held_ttl()).await;
    let status = lease.status(&r).await.unwrap().expect("held");
    assert_eq!(status.owner, guard.owner().as_str());
    assert_eq!(status.token, Some(guard.token()));
    assert!(
        status.time_left <= caps.held_ttl().duration() && !status.time_left.is_zero(),
        "time left {:?} of a {:?} lease",
        status.time_left,
        caps.held_ttl().duration()
    );
    lease.release(guard).await.unwrap();
    assert_eq!(lease.status(&r).await.unwrap(), None, "released");
    let guard = must_acquire(lease, &r, caps.short_ttl).await;
    tokio::time::sleep(caps.past_expiry()).await;
    assert_eq!(lease.status(&r).await.unwrap(), None, "expired");
    drop(guard);
}

/// Asserts that `r` is held: another acquisition is refused.
async fn assert_held<L: Lease + ?Sized>(lease: &L, r: &ResourceName, ttl: Ttl, why: &str) {
    let second = lease.try_acquire(r, ttl).await.unwrap();
    assert!(second.is_none(), "{r:?} should be held: {why}");
}

/// While a lease is live, nobody else acquires it.
pub async fn lease_is_exclusive<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let r = resource("lease-exclusive");
    let guard = must_acquire(lease, &r, caps.held_ttl()).await;
    assert_eq!(guard.resource(), &r);
    assert_held(lease, &r, caps.short_ttl, "a live lease is exclusive").await;
    assert_held(lease, &r, Ttl::MAX, "whatever TTL the second asks for").await;
    lease.release(guard).await.unwrap();
}

/// Of many tasks acquiring one free resource at once, exactly one succeeds.
pub async fn concurrent_acquirers_get_one_lease<L: Lease + 'static>(
    lease: Arc<L>,
    caps: Capabilities,
) {
    if caps.serialises_concurrent_writes {
        race_for_one_lease(lease, caps).await;
    } else {
        race_for_one_lease(Arc::new(OneAtATime::new(lease)), caps).await;
    }
}

async fn race_for_one_lease<L: Lease + 'static>(lease: Arc<L>, caps: Capabilities) {
    let r = resource("lease-race");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (lease, r) = (lease.clone(), r.clone());
        tasks.spawn(async move { lease.try_acquire(&r, caps.held_ttl()).await.unwrap() });
    }
    let winners: Vec<_> = tasks.join_all().await.into_iter().flatten().collect();
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    for winner in winners {
        lease.release(winner).await.unwrap();
    }
}

/// After the TTL passes, another owner acquires with a higher token.
pub async fn expiry_allows_takeover_with_higher_token<L: Lease + ?Sized>(
    lease: &L,
    caps: Capabilities,
) {
    let r = resource("lease-expiry");
    let first = must_acquire(lease, &r, caps.short_ttl).await;
    tokio::time::sleep(caps.past_expiry()).await;
    let second = must_acquire(lease, &r, caps.held_ttl()).await;
    assert!(second.token() > first.token());
    assert_ne!(second.owner(), first.owner());
    lease.release(second).await.unwrap();
}

/// A guard whose lease expired, or was never granted, can neither extend nor release, and
/// trying changes nothing for the real holder.
pub async fn non_owner_cannot_extend_or_release<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let r = resource("lease-owner");
    let mut stale = must_acquire(lease, &r, caps.short_ttl).await;
    tokio::time::sleep(caps.past_expiry()).await;
    let holder = must_acquire(lease, &r, caps.held_ttl()).await;

    let err = lease.extend(&mut stale, caps.short_ttl).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    let err = lease.release(stale.clone()).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");

    let forged = LeaseGuard::new(
        r.clone(),
        OwnerId::random(),
        holder.token(),
        caps.short_ttl,
        Instant::now(),
        holder.token_source().clone(),
    );
    let err = lease.release(forged).await.unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");

    assert_held(
        lease,
        &r,
        caps.short_ttl,
        "the holder's lease must survive a non-owner's release",
    )
    .await;
    lease.release(holder).await.unwrap();
}

/// An extension by the owner moves the expiry and the local deadline.
pub async fn extend_keeps_the_lease_past_its_first_ttl<L: Lease + ?Sized>(
    lease: &L,
    caps: Capabilities,
) {
    let r = resource("lease-extend");
    // The first TTL leaves the extension, sent at once, time to land on a busy machine; the
    // extended one outlasts the rest of the test.
    let first = Ttl::new(caps.short_ttl.duration() * 3).unwrap();
    let mut guard = must_acquire(lease, &r, first).await;
    let first_deadline = guard.local_deadline();
    lease.extend(&mut guard, caps.held_ttl()).await.unwrap();
    assert!(guard.local_deadline() > first_deadline);
    assert_eq!(guard.ttl(), caps.held_ttl());
    tokio::time::sleep(first.duration() + caps.expiry_slack).await;
    assert_held(
        lease,
        &r,
        caps.short_ttl,
        "the extended lease must outlive its first TTL",
    )
    .await;
    lease.release(guard).await.unwrap();
}

/// A released resource can be acquired at once, with a higher token.
pub async fn release_frees_the_resource<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let r = resource("lease-release");
    let first = must_acquire(lease, &r, caps.held_ttl()).await;
    let first_token = first.token();
    lease.release(first).await.unwrap();
    let second = must_acquire(lease, &r, caps.held_ttl()).await;
    assert!(second.token() > first_token);
    lease.release(second).await.unwrap();
}

/// Tokens rise with every acquisition and match the lease's token source.
pub async fn tokens_rise_across_acquisitions<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let r = resource("lease-tokens");
    let mut last: Option<FencingToken> = None;
    for _ in 0..10 {
        let guard = must_acquire(lease, &r, caps.held_ttl()).await;
        assert!(Some(guard.token()) > last);
        last = Some(guard.token());
        assert_eq!(lease.token_source().current(&r).await.unwrap(), last);
        lease.release(guard).await.unwrap();
    }
    let floor = FencingToken::new(last.unwrap().get() + 1000).unwrap();
    lease.token_source().advance_to(&r, floor).await.unwrap();
    let guard = must_acquire(lease, &r, caps.held_ttl()).await;
    assert!(guard.token() > floor, "advance_to must reach the lease");
    lease.release(guard).await.unwrap();
}

/// The local deadline is no later than the TTL measured from before the request.
pub async fn local_deadline_is_conservative<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let r = resource("lease-deadline");
    let before = TokioClock.now();
    let guard = must_acquire(lease, &r, caps.held_ttl()).await;
    assert!(guard.local_deadline() <= before + caps.held_ttl().duration());
    assert!(guard.time_left(before) > caps.held_ttl().duration() / 2);
    lease.release(guard).await.unwrap();
}

/// `acquire` with a retry policy waits out a holder that stopped renewing.
pub async fn acquire_retries_until_expiry<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let r = resource("lease-retry");
    // Long enough to be live at the second acquisition on a busy machine, short enough to
    // wait out.
    let stopped = Ttl::new(caps.short_ttl.duration() * 3).unwrap();
    let holder = must_acquire(lease, &r, stopped).await;
    let once = acquire(lease, &r, caps.held_ttl(), &RetryPolicy::once()).await;
    assert!(
        matches!(once, Err(Error::LeaseBusy { attempts: 1, .. })),
        "{once:?}"
    );
    let step = (stopped.duration() + caps.expiry_slack) / 4;
    let patient = RetryPolicy::new(20, step, step).unwrap();
    let guard = acquire(lease, &r, caps.held_ttl(), &patient).await.unwrap();
    assert!(guard.token() > holder.token());
    lease.release(guard).await.unwrap();
}

/// Resource names full of quotes, braces and look-alikes are leased independently; where the
/// backend declares braces unusable, names with braces are refused as invalid input.
pub async fn hostile_resource_names_are_distinct<L: Lease + ?Sized>(lease: &L, caps: Capabilities) {
    let mut guards = Vec::new();
    for name in hostile_names() {
        let r = ResourceName::new(name).unwrap();
        if !caps.braces_in_resource_names && r.contains(['{', '}']) {
            let err = lease.try_acquire(&r, caps.short_ttl).await.unwrap_err();
            assert!(
                matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::ResourceName),
                "{r:?}: {err:?}"
            );
            continue;
        }
        guards.push(must_acquire(lease, &r, caps.held_ttl()).await);
        assert_held(
            lease,
            &r,
            caps.short_ttl,
            "hostile names lease like any other",
        )
        .await;
    }
    for guard in guards {
        lease.release(guard).await.unwrap();
    }
}

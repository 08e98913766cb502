//! The guarantee no failover may break: a counter served from behind never reissues a token.
//!
//! A failover to a lagging replica, a restart from an older snapshot and a restore from an
//! older backup all do one thing to a token source: the server it counts on answers again,
//! at the same address, from a copy of its data taken before the last tokens were issued.
//! Nothing in front of a source can fake that (the copy must be on the server, or the source
//! has nothing to detect), so the suite does not wrap the source: it asks the harness, through
//! [`ServedFromBehind`], to make its own real servers do it, and checks what the source issues
//! after.

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    EpochSource, FencedWrite, FencingToken, Holder, Lease, LeaseGuard, Lifecycle, MemoryStore,
    RecordKey, ResourceName, TokenSource, Ttl,
};

use super::{Capabilities, resource};

/// A deployment that the suite can send back to an older copy of its data, as a failover to
/// a lagging replica (or a restart from a snapshot, a restore from a backup) would. Each
/// backend's harness implements it with servers it started itself; the source under test
/// keeps the same connection settings throughout, as a worker's process would.
#[async_trait]
pub trait ServedFromBehind: Send {
    /// Takes the copy: what is written from now on is lost by [`Self::serve_the_copy`] (for a
    /// replica: it stops receiving; for a snapshot or backup: it is taken now).
    async fn keep_a_copy(&mut self);

    /// The event: from now on the deployment answers at its usual address from the copy,
    /// as the server that replaced the one that issued the last tokens.
    async fn serve_the_copy(&mut self);
}

/// How long the source may keep failing while the deployment comes back (a promotion, a
/// restart): its clients reconnect on their own, as a worker's would.
const PATIENCE: Duration = Duration::from_secs(60);

/// Retries `op` through errors for up to a minute, while a deployment comes back.
pub async fn through_failures<T, E: Debug>(mut op: impl AsyncFnMut() -> Result<T, E>) -> T {
    let started = Instant::now();
    loop {
        match op().await {
            Ok(done) => return done,
            Err(err) if started.elapsed() > PATIENCE => {
                panic!("still failing after {PATIENCE:?}: {err:?}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Acquires `r` through errors, and once whoever holds it lets go, for up to a minute.
pub async fn acquire_through_failures<L: Lease + ?Sized>(
    lease: &L,
    r: &ResourceName,
    ttl: Ttl,
) -> LeaseGuard {
    through_failures(async || match lease.try_acquire(r, ttl).await {
        Ok(Some(guard)) => Ok(guard),
        Ok(None) => Err(format!("{r:?} is held")),
        Err(err) => Err(err.to_string()),
    })
    .await
}

/// Runs `guarantee` and asserts that it failed: the control that shows a deployment really
/// served its copy from behind, run on a source without the check (which must reissue).
///
/// (A task of a `LocalSet`, which holds the panic as a spawned task does, without asking the
/// guarantee's future to be `Send`.)
pub async fn assert_fails(guarantee: impl Future<Output = ()> + 'static) {
    let outcome = tokio::task::LocalSet::new()
        .run_until(async { tokio::task::spawn_local(guarantee).await })
        .await;
    assert!(
        outcome.is_err_and(|e| e.is_panic()),
        "the guarantee held where it must fail: the copy was not served from behind"
    );
}

/// Inserts `token` into `issued`, panicking if it was issued before.
fn once(issued: &mut BTreeSet<FencingToken>, token: FencingToken, when: &str) {
    assert!(
        issued.insert(token),
        "token {token} issued twice ({when}): {issued:?}"
    );
}

/// Tokens issued, the copy kept, more issued, the copy served: the next token is above every
/// token issued before, and the ones after go on rising, none issued twice. For a resource
/// whose counter the copy holds (used before the copy was kept), and for one whose counter the
/// copy lacks altogether (first used after it: on the copy it is missing, not behind).
pub async fn a_counter_served_from_behind_never_reissues<T: TokenSource + ?Sized>(
    source: &T,
    deployment: &mut dyn ServedFromBehind,
) {
    let (kept, fresh) = (resource("tokens-behind"), resource("tokens-missing"));
    let (mut issued_kept, mut issued_fresh) = (BTreeSet::new(), BTreeSet::new());
    for _ in 0..2 {
        let token = source.next(&kept).await.unwrap();
        once(&mut issued_kept, token, "before the copy");
    }
    deployment.keep_a_copy().await;
    for _ in 0..3 {
        let token = source.next(&kept).await.unwrap();
        once(&mut issued_kept, token, "lost with the copy");
        let token = source.next(&fresh).await.unwrap();
        once(
            &mut issued_fresh,
            token,
            "first used after the copy, lost with it",
        );
    }
    deployment.serve_the_copy().await;
    for (r, issued) in [(&kept, &mut issued_kept), (&fresh, &mut issued_fresh)] {
        let highest = *issued.last().expect("tokens issued");
        let first = through_failures(async || source.next(r).await).await;
        assert!(
            first > highest,
            "{r}: token {first} from the copy is not above {highest}, issued before: {issued:?}"
        );
        once(issued, first, "first from the copy");
        let mut last = first;
        for _ in 0..3 {
            let next = source.next(r).await.unwrap();
            assert!(next > last, "{r}: {next} after {last}");
            once(issued, next, "from the copy");
            last = next;
        }
        assert_eq!(source.current(r).await.unwrap(), Some(last));
    }
}

/// The same through a lease: holder A takes its token after the copy was kept and writes
/// nothing; once the copy is served, holder B's token is above every token issued before, and
/// where B wrote, A's claim and confirm are refused. For a resource leased before the copy was
/// kept, and for one first leased after it (whose counter the copy lacks).
pub async fn a_lease_served_from_behind_never_reissues<L: Lease + ?Sized>(
    lease: &L,
    deployment: &mut dyn ServedFromBehind,
    caps: Capabilities,
) {
    let (kept, fresh) = (resource("lease-behind"), resource("lease-missing"));
    let (mut issued_kept, mut issued_fresh) = (BTreeSet::new(), BTreeSet::new());
    // A's leases are short (B may have to wait one out); those released are held until then.
    let acquire = async |r: &ResourceName, ttl| acquire_through_failures(lease, r, ttl).await;
    let take_and_release = async |r: &ResourceName, issued: &mut BTreeSet<FencingToken>, when| {
        let guard = acquire(r, caps.held_ttl()).await;
        once(issued, guard.token(), when);
        lease.release(guard).await.unwrap();
    };
    take_and_release(&kept, &mut issued_kept, "before the copy").await;
    deployment.keep_a_copy().await;
    take_and_release(&kept, &mut issued_kept, "lost with the copy").await;
    let a_kept = acquire(&kept, caps.short_ttl).await;
    once(&mut issued_kept, a_kept.token(), "A's, lost with the copy");
    let a_fresh = acquire(&fresh, caps.short_ttl).await;
    once(
        &mut issued_fresh,
        a_fresh.token(),
        "A's, first lease, lost with the copy",
    );
    deployment.serve_the_copy().await;

    for (r, a, issued) in [
        (&kept, a_kept, &mut issued_kept),
        (&fresh, a_fresh, &mut issued_fresh),
    ] {
        let highest = *issued.last().expect("tokens issued");
        let b = acquire(r, caps.held_ttl()).await;
        assert!(
            b.token() > highest,
            "{r}: B's token {} from the copy is not above {highest}, issued before: {issued:?}",
            b.token()
        );
        once(issued, b.token(), "B's, from the copy");
        b_refuses_a(r, &a, &b).await;
        lease.release(b).await.unwrap();
    }
}

/// The epoch the lost history's copy holds for the resource it kept, in
/// [`an_epoch_source_restored_twice_within_a_second_never_reopens`].
pub const LOST_EPOCH: u64 = 5;

/// A copy of a lost server history restored twice into an epoch source's table, the second
/// time as soon as the first history has handed its epochs out (a primary restarted, then a
/// backup restored within the second): neither history hands out an epoch the other did,
/// for the resource whose row the copy holds, as for one it lacks.
///
/// `restore(kept)` replaces the table's rows with the copy's, as a logical restore into the
/// running server does: the table's binding at its first start (1) and the row of `kept` at
/// epoch [`LOST_EPOCH`], both bound to a server history no server runs and written at one
/// time, the same at each call, taken just before the first. Epochs are raised by one a second
/// ([`fencing_core::RateBound::EPOCHS`]), so two histories raising one row within a second
/// raise it alike: a source that handed a raised epoch out at once would hand it out twice.
pub async fn an_epoch_source_restored_twice_within_a_second_never_reopens<E>(
    source: &E,
    mut restore: impl AsyncFnMut(&ResourceName),
) where
    E: EpochSource + ?Sized,
{
    let (kept, missing) = (resource("epochs-kept"), resource("epochs-missing"));
    // One resource at a time: the second restore must come within the second of the first
    // history's raise of that resource's row (or of the binding it starts from).
    for r in [&kept, &missing] {
        let mut opened = Vec::new();
        for history in ["first", "second"] {
            restore(&kept).await;
            let epoch = source
                .open(r, &format!("after-the-{history}-restore"))
                .await
                .unwrap();
            if r == &kept {
                assert!(
                    epoch.get() > LOST_EPOCH,
                    "{history} history: {epoch} not above the copy's epoch {LOST_EPOCH}"
                );
            }
            opened.push(epoch);
        }
        assert!(
            opened[1] > opened[0],
            "{r}: the second restore opened {}, the first {}",
            opened[1],
            opened[0]
        );
    }
}

/// Where B claimed a record, A's claim and confirm are refused.
async fn b_refuses_a(r: &ResourceName, a: &LeaseGuard, b: &LeaseGuard) {
    let store = MemoryStore::new("refunds");
    let lifecycle = Lifecycle::default();
    let key = RecordKey::new("r_815").expect("valid key");
    store
        .write(
            &key,
            FencingToken::MIN,
            &FencedWrite::claim().set_state(lifecycle.pending().clone()),
        )
        .await
        .unwrap();
    b.holder()
        .write(&store, &key, &lifecycle.claim())
        .await
        .unwrap();
    let stale = Holder::new(r, a.token(), a.token_source());
    for write in [lifecycle.claim(), lifecycle.confirm()] {
        let err = stale.write(&store, &key, &write).await.unwrap_err();
        assert!(err.is_rejection(), "A's {:?}: {err:?}", write.check());
    }
}

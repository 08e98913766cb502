//! The shared conformance suite against a real three-member etcd cluster: the lease and the
//! token source, each as itself, `Box<dyn …>` and `Arc<dyn …>`, and the schedules where the
//! counter is lost; then what a source that remembers token keys must still get right.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, DeleteOptions};
use fencing_core::{FencedStore, Lease, MemoryStore, TokenSource, Ttl};
use fencing_etcd::{EtcdKeys, EtcdLease, EtcdTokenSource};
use fencing_test_support::services;
use fencing_testkit::conformance::*;
use fencing_testkit::{Fencing, unique_name};

async fn client() -> Client {
    let endpoints = services::etcd_endpoints();
    Client::connect(&endpoints, None)
        .await
        .unwrap_or_else(|e| panic!("connect to etcd at {endpoints:?}: {e}"))
}

/// Keys of this test only: `<run>/lock/` and `<run>/token/`.
fn keys_of(run: &str) -> EtcdKeys {
    EtcdKeys::new(format!("{run}/lock/"), format!("{run}/token/")).unwrap()
}

fn keys() -> EtcdKeys {
    keys_of(&unique_name("t"))
}

/// etcd counts leases in whole seconds and its leader revokes expired ones every half second.
fn caps() -> Capabilities {
    Capabilities {
        short_ttl: Ttl::from_secs(1).unwrap(),
        expiry_slack: Duration::from_millis(1500),
        ..Capabilities::real_server()
    }
    .with_revision_tokens()
}

/// Deletes every key of this test's run, tokens and locks alike.
async fn lose_keys_of(run: &str) {
    let deleted = client()
        .await
        .delete(format!("{run}/"), Some(DeleteOptions::new().with_prefix()))
        .await
        .unwrap();
    assert!(deleted.deleted() > 0, "no key under {run}/");
}

mod concrete {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: EtcdLease::new(client().await).with_keys(keys()),
        caps: caps(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: EtcdTokenSource::new(client().await).with_keys(keys()),
        caps: caps(),
    }
}

mod boxed {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Box::new(EtcdLease::new(client().await).with_keys(keys())) as Box<dyn Lease>,
        caps: caps(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Box::new(EtcdTokenSource::new(client().await).with_keys(keys())) as Box<dyn TokenSource>,
        caps: caps(),
    }
}

mod shared {
    use super::*;

    fencing_testkit::lease_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Arc::new(EtcdLease::new(client().await).with_keys(keys())) as Arc<dyn Lease>,
        caps: caps(),
    }
    fencing_testkit::token_source_conformance! {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        subject: Arc::new(EtcdTokenSource::new(client().await).with_keys(keys())) as Arc<dyn TokenSource>,
        caps: caps(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_fenced_by_the_store() {
    let lease = EtcdLease::new(client().await).with_keys(keys());
    let store = MemoryStore::new("refunds");
    paused_holder_is_fenced(&lease, &store, caps()).await;
}

/// Deleting every key of the run (locks and token keys) loses the floors, not the revision:
/// no token is issued twice, whoever held one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_is_reissued_after_the_keys_are_deleted() {
    let run = unique_name("t");
    let lease = EtcdLease::new(client().await).with_keys(keys_of(&run));
    let store = MemoryStore::new("refunds");
    no_token_is_reissued_after_counter_loss(&lease, &store, caps(), async || {
        lose_keys_of(&run).await
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_increments_are_exact() {
    let lease = EtcdLease::new(client().await).with_keys(keys());
    let store: Arc<dyn FencedStore> = Arc::new(MemoryStore::new("counter"));
    let report = fenced_increments(Arc::new(lease), store, caps(), 4, 5, Fencing::On, 3).await;
    assert_eq!(report.total, report.expected, "{report:?}");
}

/// The etcd lease a lock key is bound to, and whether the cluster still has it.
async fn bound_lease(client: &mut Client, lock_key: &str) -> i64 {
    let got = client.get(lock_key, None).await.unwrap();
    got.kvs().first().expect("the lock key").lease()
}

async fn lease_lives(client: &mut Client, lease_id: i64) -> bool {
    client
        .lease_time_to_live(lease_id, None)
        .await
        .is_ok_and(|answer| answer.ttl() > 0)
}

/// An etcd lease the guard no longer needs is revoked at once, not left to its TTL: the one a
/// new TTL moved the lock key off, and the one a release ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_etcd_leases_a_guard_leaves_are_revoked_at_once() {
    let keys = keys();
    let lease = EtcdLease::new(client().await).with_keys(keys.clone());
    let resource = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    let lock_key = keys.lock_key(&resource);
    let mut raw = client().await;
    let mut guard = lease
        .try_acquire(&resource, Ttl::from_secs(30).unwrap())
        .await
        .unwrap()
        .expect("a free lock");
    let first = bound_lease(&mut raw, &lock_key).await;
    assert!(lease_lives(&mut raw, first).await);

    lease
        .extend(&mut guard, Ttl::from_secs(60).unwrap())
        .await
        .unwrap();
    let second = bound_lease(&mut raw, &lock_key).await;
    assert_ne!(first, second, "a new TTL binds the key to a new etcd lease");
    assert!(!lease_lives(&mut raw, first).await, "the old lease revoked");
    assert!(lease_lives(&mut raw, second).await);

    lease.release(guard).await.unwrap();
    assert!(
        !lease_lives(&mut raw, second).await,
        "the released lease revoked"
    );
}

/// A token key whose floor is the largest token there is: the source and the lease both
/// refuse with `TokenExhausted` (never a token, never "held by another"), the lock stays free
/// and the key as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_last_token_the_source_and_the_lease_refuse_and_change_nothing() {
    let keys = keys();
    let resource = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    let token_key = keys.token_key(&resource);
    let mut raw = client().await;
    raw.put(token_key.as_str(), i64::MAX.to_string(), None)
        .await
        .unwrap();
    let before = raw.get(token_key.as_str(), None).await.unwrap().kvs()[0].clone();

    let source = EtcdTokenSource::new(client().await).with_keys(keys.clone());
    let err = source.next(&resource).await.unwrap_err();
    assert!(
        matches!(err, fencing_core::Error::TokenExhausted { .. }),
        "{err:?}"
    );
    let lease = EtcdLease::new(client().await).with_keys(keys.clone());
    for _ in 0..2 {
        let err = lease
            .try_acquire(&resource, Ttl::from_secs(30).unwrap())
            .await
            .unwrap_err();
        assert!(
            matches!(err, fencing_core::Error::TokenExhausted { .. }),
            "{err:?}"
        );
    }
    assert_eq!(
        lease.status(&resource).await.unwrap(),
        None,
        "the lock free"
    );
    let after = raw.get(token_key.as_str(), None).await.unwrap().kvs()[0].clone();
    assert_eq!(
        after.mod_revision(),
        before.mod_revision(),
        "the key unchanged"
    );
}

// Beyond the shared suite: a source starts each compare-and-swap from the token key as it last
// saw it, so what other processes did to the key meanwhile must still decide.

/// Two sources with memories of their own, on one resource: each one's remembered key is out
/// of date after every token the other issues, and no token is issued twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_that_remember_the_key_apart_never_issue_one_token_twice() {
    let keys = keys();
    let a = EtcdTokenSource::new(client().await).with_keys(keys.clone());
    let b = EtcdTokenSource::new(client().await).with_keys(keys);
    let resource = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    let mut issued = Vec::new();
    for _ in 0..10 {
        issued.push(a.next(&resource).await.unwrap());
        issued.push(b.next(&resource).await.unwrap());
    }
    for _ in 0..10 {
        let (x, y) = tokio::join!(a.next(&resource), b.next(&resource));
        issued.extend([x.unwrap(), y.unwrap()]);
    }
    let distinct: std::collections::BTreeSet<_> = issued.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        issued.len(),
        "a token issued twice: {issued:?}"
    );
    assert!(issued[..20].windows(2).all(|w| w[0] < w[1]), "{issued:?}");
}

/// A floor a source remembers is not trusted to keep: once the key is deleted behind it, a
/// lower floor is still written, and the next token rises past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_kept_is_checked_against_the_key_as_it_is() {
    let run = unique_name("t");
    let source = EtcdTokenSource::new(client().await).with_keys(keys_of(&run));
    let resource = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    let high = fencing_core::FencingToken::new(1_000_000_000).unwrap();
    assert_eq!(source.advance_to(&resource, high).await.unwrap(), high);
    lose_keys_of(&run).await;
    let lower = fencing_core::FencingToken::new(500_000_000).unwrap();
    assert_eq!(source.advance_to(&resource, lower).await.unwrap(), lower);
    let fresh = EtcdTokenSource::new(client().await).with_keys(keys_of(&run));
    assert_eq!(fresh.current(&resource).await.unwrap(), Some(lower));
    assert!(source.next(&resource).await.unwrap() > lower);
}

/// A lease whose source last saw the key before another process issued a token acquires
/// above that token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_rises_past_a_token_another_process_issued() {
    let keys = keys();
    let lease = EtcdLease::new(client().await).with_keys(keys.clone());
    let other = EtcdTokenSource::new(client().await).with_keys(keys);
    let resource = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_secs(5).unwrap();
    let first = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    let first_token = first.token();
    lease.release(first).await.unwrap();
    let between = other.next(&resource).await.unwrap();
    assert!(between > first_token);
    let second = lease.try_acquire(&resource, ttl).await.unwrap().unwrap();
    assert!(
        second.token() > between,
        "{} after {between}",
        second.token()
    );
    lease.release(second).await.unwrap();
}

/// A source whose last answer showed a revision above the floor issues the next revision
/// only while the floor is as it saw it: a floor another process raised meanwhile is above
/// the next token it issues.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_raised_by_another_process_is_below_the_next_token() {
    let keys = keys();
    let a = EtcdTokenSource::new(client().await).with_keys(keys.clone());
    let b = EtcdTokenSource::new(client().await).with_keys(keys);
    let resource = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    a.next(&resource).await.unwrap();
    let floor = fencing_core::FencingToken::new(1_000_000_000).unwrap();
    assert_eq!(b.advance_to(&resource, floor).await.unwrap(), floor);
    let next = a.next(&resource).await.unwrap();
    assert!(next > floor, "{next} issued under the floor {floor}");
}

/// Above a floor higher than the cluster's revision each token is the floor plus one, so
/// concurrent issuers must take turns on the key: several of them, each with a memory of its
/// own, still never issue one token twice, and all finish. An issuer's lost rounds are each
/// another issuer's token, so with 4 issuers of 15 tokens none can lose the 64 rounds a token
/// may take; with 8 issuers of 25 one did (a source that just won knows the key exactly and
/// tends to win again), which is why the count stays below the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_issuers_above_a_raised_floor_never_issue_one_token_twice() {
    let keys = keys();
    let resource = fencing_core::ResourceName::new("settle:m_4471").unwrap();
    let floor = fencing_core::FencingToken::new(1_000_000_000).unwrap();
    let first = EtcdTokenSource::new(client().await).with_keys(keys.clone());
    first.advance_to(&resource, floor).await.unwrap();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let source = EtcdTokenSource::new(client().await).with_keys(keys.clone());
        let resource = resource.clone();
        tasks.spawn(async move {
            let mut mine = Vec::new();
            for _ in 0..15 {
                mine.push(source.next(&resource).await.unwrap());
            }
            mine
        });
    }
    let issued: Vec<_> = tasks.join_all().await.into_iter().flatten().collect();
    let distinct: std::collections::BTreeSet<_> = issued.iter().copied().collect();
    assert_eq!(distinct.len(), 60, "a token issued twice: {issued:?}");
    assert!(issued.iter().all(|t| *t > floor), "{issued:?}");
    assert_eq!(
        first.current(&resource).await.unwrap(),
        distinct.last().copied()
    );
}

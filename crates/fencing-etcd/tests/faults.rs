//! The etcd lease under the faults a consensus cluster has, each on a three-member cluster of
//! its own, members as real processes: the leader killed mid-batch, a member stopped past the
//! TTL, quorum lost, the cluster restored from a snapshot with and without raising its
//! revisions (the first also through the shared suite's guarantee that a counter served from
//! behind never reissues).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use fencing_core::adapter::StoreWrites;
use fencing_core::{
    BoxError, EffectOutcome, Error, FencedBatch, FencedStore, FencedWrite, FencingToken, Lease,
    LeaseRenewal, Lifecycle, MemoryStore, Record, RecordKey, ResourceName, SideEffect, TokenSource,
    Ttl, async_trait,
};
use fencing_etcd::{EtcdKeys, EtcdLease, EtcdTokenSource};
use fencing_test_support::services::EtcdCluster;
use fencing_testkit::conformance::{
    Capabilities, ServedFromBehind, a_counter_served_from_behind_never_reissues,
    a_lease_served_from_behind_never_reissues, assert_fails, paused_holder_is_fenced,
    token_regression_is_detected,
};
use fencing_testkit::unique_name;

/// A client of every member, whose requests give up after two seconds and refuse to wait
/// for a leader that is not there.
async fn client(cluster: &EtcdCluster) -> Client {
    let options = ConnectOptions::new()
        .with_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2))
        .with_require_leader(true);
    Client::connect(cluster.endpoints(), Some(options))
        .await
        .unwrap()
}

fn keys() -> EtcdKeys {
    let run = unique_name("f");
    EtcdKeys::new(format!("{run}/lock/"), format!("{run}/token/")).unwrap()
}

fn caps() -> Capabilities {
    Capabilities {
        short_ttl: Ttl::from_secs(1).unwrap(),
        expiry_slack: Duration::from_millis(1500),
        ..Capabilities::real_server()
    }
    .with_revision_tokens()
}

fn resource() -> ResourceName {
    ResourceName::new("settle:m_4471").unwrap()
}

/// Issues tokens as fast as it can until told to stop, keeping each token it got and each
/// error's text.
async fn issue_until(
    source: EtcdTokenSource,
    stop: Arc<AtomicBool>,
) -> (Vec<FencingToken>, Vec<String>) {
    let (mut tokens, mut errors) = (Vec::new(), Vec::new());
    while !stop.load(Ordering::SeqCst) {
        match source.next(&resource()).await {
            Ok(token) => tokens.push(token),
            Err(err @ (Error::Unavailable { .. } | Error::Ambiguous { .. })) => {
                errors.push(err.to_string())
            }
            Err(other) => panic!("an untyped failure: {other:?}"),
        }
    }
    (tokens, errors)
}

/// A gateway that takes 5 ms per refund and pays each idempotency key once.
#[derive(Default)]
struct Gateway {
    paid: std::sync::Mutex<std::collections::HashMap<RecordKey, u32>>,
}

#[async_trait]
impl SideEffect for Gateway {
    type Receipt = u32;

    async fn lookup(&self, key: &RecordKey) -> Result<Option<u32>, BoxError> {
        Ok(self.paid.lock().unwrap().get(key).copied())
    }

    async fn perform(&self, key: &RecordKey, _: &Record) -> Result<u32, BoxError> {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let mut paid = self.paid.lock().unwrap();
        let next = u32::try_from(paid.len()).unwrap() + 1;
        Ok(*paid.entry(key.clone()).or_insert(next))
    }
}

async fn pending_refunds(store: &MemoryStore, count: usize) -> Vec<RecordKey> {
    let pending = FencedWrite::claim().set_state(Lifecycle::default().pending().clone());
    let mut keys = Vec::new();
    for n in 1..=count {
        let key = RecordKey::new(format!("r_{n:04}")).unwrap();
        store
            .write(&key, FencingToken::MIN, &pending)
            .await
            .unwrap();
        keys.push(key);
    }
    keys
}

/// The holder's batch runs on while the leader is SIGKILLed under it: its renewals move to
/// the members left, every refund is settled once, the tokens issued around the kill are all
/// distinct and rising, and afterwards a paused holder is still refused by the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_mid_batch_issues_no_token_twice_and_lets_no_stale_write_in() {
    let mut cluster = EtcdCluster::start(3);
    let keys = keys();
    let lease = Arc::new(EtcdLease::new(client(&cluster).await).with_keys(keys.clone()));
    // Room for two renewals in a row to wait out the client's 2 s request timeout (the
    // client may send the next one to the dead member too) plus an election, with the
    // renewal's safety margin to spare: at 3 s, CI's loaded machine lost the lease this way.
    let ttl = Ttl::from_secs(8).unwrap();
    let store = Arc::new(MemoryStore::new("refunds"));
    let refunds = pending_refunds(&store, 400).await;
    let guard = lease.try_acquire(&resource(), ttl).await.unwrap().unwrap();
    let renewal = LeaseRenewal::start(lease.clone(), guard.clone(), ttl.duration() / 4);
    let batch = FencedBatch::new(
        lease.clone(),
        guard,
        [store.clone() as Arc<dyn FencedStore>],
    )
    .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let issuer = tokio::spawn(issue_until(
        EtcdTokenSource::new(client(&cluster).await).with_keys(keys.clone()),
        stop.clone(),
    ));
    let lifecycle = Lifecycle::default();
    let gateway = Gateway::default();
    let settle = batch
        .holder()
        .pipeline(&*store, &lifecycle, &gateway)
        .concurrency(8)
        .run(refunds.clone());
    let kill = async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let leader = cluster.leader().expect("a leader");
        cluster.kill(leader);
        leader
    };
    let (settled, killed) = tokio::join!(settle, kill);
    // The cluster has elected a new leader from the two members left.
    let new_leader = cluster.wait_for_leader(Duration::from_secs(10)).unwrap();
    assert_ne!(new_leader, killed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let (tokens, errors) = issuer.await.unwrap();

    let outcomes = settled.into_result().unwrap();
    assert_eq!(outcomes.len(), 400);
    assert!(
        outcomes
            .iter()
            .all(|(_, o)| matches!(o, EffectOutcome::Performed(_)))
    );
    assert!(!renewal.is_lost(), "the renewals went on through the kill");
    let held = renewal.stop();
    // The release may go to the killed member: then the lease ends at its TTL.
    match batch.finish().await {
        Ok(_) | Err(Error::Unavailable { .. } | Error::Ambiguous { .. }) => {}
        Err(other) => panic!("{other:?}"),
    }

    assert!(
        tokens.len() > 10,
        "{} tokens, errors {errors:?}",
        tokens.len()
    );
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens not rising: {tokens:?}"
    );
    let distinct: BTreeSet<_> = tokens.iter().collect();
    assert_eq!(distinct.len(), tokens.len());
    // The client still knows the killed member: a request sent there fails, typed.
    let next = acquire_through_failures(&*lease, ttl).await;
    assert!(next.token() > held.token() && Some(&next.token()) > tokens.last());
    through_failures(async || lease.release(next.clone()).await).await;

    paused_holder_is_fenced(&*lease, &MemoryStore::new("after-the-kill"), caps()).await;
    cluster.restart(killed);
}

/// Runs `op` until it answers, letting it fail with a typed request failure (a request that
/// went to a member that does not answer) up to 20 times; any other error fails the test.
async fn through_failures<T>(mut op: impl AsyncFnMut() -> fencing_core::Result<T>) -> T {
    for _ in 0..20 {
        match op().await {
            Ok(answer) => return answer,
            Err(Error::Unavailable { .. } | Error::Ambiguous { .. }) => {}
            Err(other) => panic!("an untyped failure: {other:?}"),
        }
    }
    panic!("no answer in 20 tries")
}

/// Acquires the resource, through typed failures, once whoever holds it lets go (an attempt
/// whose answer was lost may have left its own lock behind, for a TTL at most).
async fn acquire_through_failures(lease: &dyn Lease, ttl: Ttl) -> fencing_core::LeaseGuard {
    loop {
        if let Some(guard) =
            through_failures(async || lease.try_acquire(&resource(), ttl).await).await
        {
            return guard;
        }
    }
}

/// A member stopped (SIGSTOP) past the TTL and resumed: requests it holds fail with typed
/// errors and go elsewhere when tried again; the lease stays exclusive, a holder that paused
/// as long is refused by the store, and the member rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_stopped_past_the_ttl_changes_nothing_a_fence_allows() {
    let cluster = EtcdCluster::start(3);
    let follower = (0..3)
        .find(|&i| Some(i) != cluster.leader())
        .expect("a follower");
    let lease = EtcdLease::new(client(&cluster).await).with_keys(keys());
    let (ttl, lifecycle) = (Ttl::from_secs(1).unwrap(), Lifecycle::default());
    // B holds long enough for the checks below, each of which may wait out a request held
    // by the stopped member (on a loaded machine, all of them together have taken 30 s).
    let long = Ttl::from_secs(60).unwrap();
    let store = MemoryStore::new("refunds");
    let refund = pending_refunds(&store, 1).await.remove(0);
    cluster.pause(follower);

    let a = acquire_through_failures(&lease, ttl).await;
    let fence_a = a.holder();
    fence_a
        .write(&store, &refund, &lifecycle.claim())
        .await
        .unwrap();
    tokio::time::sleep(caps().past_expiry()).await;
    let b = acquire_through_failures(&lease, long).await;
    assert!(b.token() > a.token());
    let fence_b = b.holder();
    fence_b
        .write(&store, &refund, &lifecycle.claim())
        .await
        .unwrap();
    let stale = fence_a
        .write(&store, &refund, &lifecycle.confirm())
        .await
        .unwrap_err();
    assert!(matches!(stale, Error::Fenced { .. }), "{stale:?}");
    let status = through_failures(async || lease.status(&resource()).await).await;
    let held = through_failures(async || lease.try_acquire(&resource(), ttl).await).await;
    // An acquisition that answers after B's lease ran out is the lease working, not a
    // breach: the retries through the stopped member can outlast any TTL.
    let live = std::time::Instant::now() < b.local_deadline();
    assert!(
        held.is_none() || !live,
        "B's lease is exclusive while it lives: B {b:?}, status {status:?}, held {held:?}"
    );

    cluster.resume(follower);
    fence_b
        .write(&store, &refund, &lifecycle.confirm())
        .await
        .unwrap();
    if held.is_none() && std::time::Instant::now() < b.local_deadline() {
        through_failures(async || lease.release(b.clone()).await).await;
    }
}

/// With two of three members stopped there is no quorum: an acquisition fails with a typed
/// error that names the cause, never a token; once they are back, tokens go on rising.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quorum_an_acquisition_fails_with_a_typed_error_and_never_a_token() {
    let cluster = EtcdCluster::start(3);
    let lease = EtcdLease::new(client(&cluster).await).with_keys(keys());
    let ttl = Ttl::from_secs(1).unwrap();
    let before = lease.try_acquire(&resource(), ttl).await.unwrap().unwrap();
    lease.release(before.clone()).await.unwrap();
    let leader = cluster.leader().expect("a leader");
    let stopped: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    for &i in &stopped {
        cluster.pause(i);
    }
    for _ in 0..3 {
        let failed = lease.try_acquire(&resource(), ttl).await;
        match failed {
            Err(err @ (Error::Unavailable { .. } | Error::Ambiguous { .. })) => {
                let text = err.to_string();
                assert!(text.starts_with("etcd"), "{text}");
            }
            other => panic!("without quorum: {other:?}"),
        }
    }
    for &i in &stopped {
        cluster.resume(i);
    }
    cluster.wait_for_leader(Duration::from_secs(10)).unwrap();
    // The members just resumed may still be catching up: their first answers can be typed
    // failures.
    let after = acquire_through_failures(&lease, ttl).await;
    assert!(after.token() > before.token());
    lease.release(after).await.unwrap();
}

/// A cluster restored from a snapshot keeps the snapshot's revisions (etcd 3.4 has no flag to
/// raise them): the next tokens repeat ones already used, the store's fence refuses them as a
/// token regression, and the refusal raises the source's floor past the fence found, so the
/// next holder goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_without_raised_revisions_is_caught_as_a_regression_and_repaired() {
    let mut cluster = EtcdCluster::start(3);
    let keys = keys();
    let snapshot = std::env::temp_dir().join(format!("{}.db", unique_name("etcd-snapshot")));
    cluster.save_snapshot(&snapshot);
    let lease = EtcdLease::new(client(&cluster).await).with_keys(keys);
    let store = MemoryStore::new("refunds");
    let restore = std::sync::Mutex::new(&mut cluster);
    token_regression_is_detected(&lease, &store, &store, caps(), async || {
        restore.lock().unwrap().restore(&snapshot)
    })
    .await;
    let _ = std::fs::remove_file(&snapshot);
}

/// Why an etcd token source cannot tell such a restore: restored with the cluster token it
/// had, the cluster answers with the cluster id, member ids and raft term it had, the token
/// keys come back with the revisions, and the revision itself is behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restored_as_before_answers_as_it_did_with_its_revision_behind() {
    let mut cluster = EtcdCluster::start(3);
    let mut raw = client(&cluster).await;
    raw.put("before", "", None).await.unwrap();
    let snapshot = std::env::temp_dir().join(format!("{}.db", unique_name("etcd-snapshot")));
    cluster.save_snapshot(&snapshot);
    let source = EtcdTokenSource::new(raw.clone()).with_keys(keys());
    let mut issued = Vec::new();
    for _ in 0..3 {
        issued.push(source.next(&resource()).await.unwrap());
    }
    let identity = async |client: &mut Client| {
        let status = client.status().await.unwrap();
        let header = status.header().unwrap();
        let mut members: Vec<u64> = client
            .member_list()
            .await
            .unwrap()
            .members()
            .iter()
            .map(|m| m.id())
            .collect();
        members.sort_unstable();
        (header.cluster_id(), members, header.revision())
    };
    let (cluster_id, members, revision) = identity(&mut raw).await;
    cluster.restore_as_before(&snapshot);
    let _ = std::fs::remove_file(&snapshot);
    let mut raw = client(&cluster).await;
    let (restored_id, restored_members, restored_revision) = identity(&mut raw).await;
    assert_eq!(restored_id, cluster_id);
    assert_eq!(restored_members, members);
    assert!(
        restored_revision < revision,
        "{restored_revision} after {revision}"
    );
    let source = EtcdTokenSource::new(raw).with_keys(source.keys().clone());
    let again = through_failures(async || source.next(&resource()).await).await;
    assert!(
        issued.contains(&again),
        "the restored cluster issues {again} again (issued {issued:?})"
    );
}

/// A cluster and a snapshot of it: the copy is the snapshot; the event the cluster restored
/// from it (under a new cluster token) and, where `raise_revisions`, its revision raised past
/// every revision it had used, as etcd 3.5's `etcdutl snapshot restore --bump-revision` does
/// (3.4 has no such flag: writes raise it here). Without the raise, as 3.4 restores.
struct SnapshotRestore {
    cluster: EtcdCluster,
    snapshot: PathBuf,
    raise_revisions: bool,
}

impl SnapshotRestore {
    fn of(cluster: EtcdCluster, raise_revisions: bool) -> Self {
        let snapshot = std::env::temp_dir().join(format!("{}.db", unique_name("etcd-snapshot")));
        SnapshotRestore {
            cluster,
            snapshot,
            raise_revisions,
        }
    }
}

#[async_trait]
impl ServedFromBehind for SnapshotRestore {
    async fn keep_a_copy(&mut self) {
        self.cluster.save_snapshot(&self.snapshot);
    }

    async fn serve_the_copy(&mut self) {
        let used = bump(&mut client(&self.cluster).await).await;
        self.cluster.restore(&self.snapshot);
        let _ = std::fs::remove_file(&self.snapshot);
        let mut raw = client(&self.cluster).await;
        let restored = bump(&mut raw).await;
        assert!(restored < used, "{restored} after {used}: not behind");
        while self.raise_revisions && bump(&mut raw).await <= used {}
    }
}

/// Writes a key of no meaning, through up to 20 failures (a plain loop: the future must be
/// `Send` for `async_trait`), and returns the revision it made.
async fn bump(raw: &mut Client) -> i64 {
    for _ in 0..20 {
        if let Ok(put) = raw.put("bump", "", None).await {
            return put.header().map(|h| h.revision()).unwrap_or_default();
        }
    }
    panic!("no write in 20 tries")
}

/// The shared guarantee, for `EtcdTokenSource` and `EtcdLease`, on a cluster restored from an
/// older snapshot with its revisions raised; and, as the control, restored as etcd 3.4 does,
/// which reissues (the fences then refuse the stale holder as a regression: the test above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_with_raised_revisions_serves_no_token_twice_to_the_shared_suite() {
    let mut restore = SnapshotRestore::of(EtcdCluster::start(3), true);
    let source = EtcdTokenSource::new(client(&restore.cluster).await).with_keys(keys());
    a_counter_served_from_behind_never_reissues(&source, &mut restore).await;

    let mut restore = SnapshotRestore::of(EtcdCluster::start(3), true);
    let lease = EtcdLease::new(client(&restore.cluster).await).with_keys(keys());
    a_lease_served_from_behind_never_reissues(&lease, &mut restore, caps()).await;

    let mut restore = SnapshotRestore::of(EtcdCluster::start(3), false);
    let source = EtcdTokenSource::new(client(&restore.cluster).await).with_keys(keys());
    assert_fails(async move {
        a_counter_served_from_behind_never_reissues(&source, &mut restore).await
    })
    .await;
}

/// A client with no time limits of its own (the `etcd_client` default) on a cluster without
/// quorum would wait for a leader for ever; the lease's own request time limit bounds every
/// call, and each fails typed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quorum_a_client_without_timeouts_is_bounded_by_the_request_time_limit() {
    let cluster = EtcdCluster::start(3);
    let patient = Client::connect(cluster.endpoints(), None).await.unwrap();
    let limit = Duration::from_secs(2);
    let lease = EtcdLease::new(patient)
        .with_keys(keys())
        .with_request_timeout(limit)
        .unwrap();
    let ttl = Ttl::from_secs(1).unwrap();
    let held = lease.try_acquire(&resource(), ttl).await.unwrap().unwrap();
    let leader = cluster.leader().expect("a leader");
    let stopped: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    for &i in &stopped {
        cluster.pause(i);
    }
    let started = std::time::Instant::now();
    let acquired = lease.try_acquire(&resource(), ttl).await;
    let released = lease.release(held).await;
    let current = lease.token_source().current(&resource()).await;
    let waited = started.elapsed();
    for &i in &stopped {
        cluster.resume(i);
    }
    for outcome in [acquired.map(drop), released, current.map(drop)] {
        match outcome {
            Err(err @ (Error::Unavailable { .. } | Error::Ambiguous { .. })) => {
                assert!(err.to_string().contains("no answer within"), "{err}");
            }
            other => panic!("without quorum: {other:?}"),
        }
    }
    // Each call waits at most its limit per request (an acquisition sends a few).
    assert!(waited < Duration::from_secs(30), "waited {waited:?}");
    assert!(
        EtcdLease::new(client(&cluster).await)
            .with_request_timeout(Duration::ZERO)
            .is_err()
    );
}

//! An acquisition whose answer never reaches the lease: a relay in front of a real etcd member
//! sees the acquisition's transaction go by (it carries the lock key) and, once, cuts the
//! connection it came on, either after the member applied it (the answer withheld) or before
//! the member got it (the request withheld). Whichever happened, the lease must settle it from
//! the lock key as it is: its own lock with the token it was issued, a fresh try, or another
//! holder's lock, held.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use etcd_client::Client;
use fencing_core::{Lease, ResourceName, Ttl};
use fencing_etcd::{EtcdKeys, EtcdLease};
use fencing_test_support::services;
use fencing_testkit::unique_name;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Where the relay cuts the connection the transaction came on.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// The transaction reaches the member; nothing the member sends back reaches the client.
    AfterApplying,
    /// The transaction never reaches the member.
    BeforeSending,
}

/// How long a cut connection stays open, silent, before it closes: long enough for the
/// member to commit what it got, so that "applied" is what the lease has to find.
const SILENCE: Duration = Duration::from_millis(1000);

/// A TCP relay to one member that cuts the first connection carrying `marker`, once.
struct Relay {
    address: SocketAddr,
    cuts: Arc<AtomicUsize>,
}

impl Relay {
    async fn start(member: SocketAddr, marker: Vec<u8>, cut: Cut) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let cuts = Arc::new(AtomicUsize::new(0));
        let armed = Arc::new(AtomicBool::new(true));
        let marker: Arc<[u8]> = marker.into();
        let counted = cuts.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(member).await else {
                    continue;
                };
                let (marker, armed, cuts) = (marker.clone(), armed.clone(), counted.clone());
                tokio::spawn(relay(client, server, marker, cut, armed, cuts));
            }
        });
        Relay { address, cuts }
    }

    fn cuts(&self) -> usize {
        self.cuts.load(Ordering::SeqCst)
    }
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    marker: Arc<[u8]>,
    cut: Cut,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let silenced = Arc::new(AtomicBool::new(false));
    let upward = {
        let silenced = silenced.clone();
        async move {
            let (mut buf, mut seen) = (vec![0u8; 64 * 1024], Vec::new());
            loop {
                let n = from_client.read(&mut buf).await.unwrap_or(0);
                if n == 0 {
                    return;
                }
                seen.extend_from_slice(&buf[..n]);
                let carries = seen.windows(marker.len()).any(|w| w == &marker[..]);
                if carries && armed.swap(false, Ordering::SeqCst) {
                    silenced.store(true, Ordering::SeqCst);
                    cuts.fetch_add(1, Ordering::SeqCst);
                    if let Cut::AfterApplying = cut {
                        let _ = to_server.write_all(&buf[..n]).await;
                    }
                    tokio::time::sleep(SILENCE).await;
                    return;
                }
                // Keep enough to find a marker split across two reads.
                let keep = seen.len().saturating_sub(marker.len());
                seen.drain(..keep);
                if to_server.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    };
    let downward = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from_server.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return;
            }
            if silenced.load(Ordering::SeqCst) {
                continue;
            }
            if to_client.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    // Either direction ending closes both: a cut connection ends when its silence does.
    tokio::select! {
        () = upward => {}
        () = downward => {}
    }
}

async fn member() -> SocketAddr {
    let endpoint = services::etcd_endpoints()[0].clone();
    let host = endpoint.trim_start_matches("http://");
    tokio::net::lookup_host(host).await.unwrap().next().unwrap()
}

/// Acquires through a relay that cuts the acquisition's transaction as `cut` says: the lease
/// comes back held with the token the lock key was issued under, and nobody else gets it.
async fn an_acquisition_cut(cut: Cut) {
    let run = unique_name("lost");
    let keys = EtcdKeys::new(format!("{run}/lock/"), format!("{run}/token/")).unwrap();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let lock_key = keys.lock_key(&resource);
    let relay = Relay::start(member().await, lock_key.clone().into_bytes(), cut).await;
    let through_relay = Client::connect([relay.address.to_string()], None)
        .await
        .unwrap();
    let lease = EtcdLease::new(through_relay).with_keys(keys.clone());

    let guard = lease
        .try_acquire(&resource, Ttl::from_secs(30).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{cut:?}: {e:?}"))
        .unwrap_or_else(|| panic!("{cut:?}: the lock, free but for this lease, found held"));
    assert_eq!(relay.cuts(), 1, "{cut:?}: the transaction was cut");

    let direct = EtcdLease::new(
        Client::connect(services::etcd_endpoints(), None)
            .await
            .unwrap(),
    )
    .with_keys(keys);
    let status = direct.status(&resource).await.unwrap().expect("held");
    assert_eq!(status.owner, guard.owner().as_str(), "{cut:?}");
    assert_eq!(status.token, Some(guard.token()), "{cut:?}");
    let other = direct
        .try_acquire(&resource, Ttl::from_secs(30).unwrap())
        .await
        .unwrap();
    assert!(other.is_none(), "{cut:?}: a second holder");
    lease.release(guard).await.unwrap();
    assert_eq!(direct.status(&resource).await.unwrap(), None, "{cut:?}");
}

/// The acquisition's transaction withheld, and another lease takes the lock while the cut
/// connection is silent: the first lease finds the lock another's and reports it held, never
/// taking the other's lock for its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_lost_while_another_takes_the_lock_finds_it_held() {
    let run = unique_name("lost");
    let keys = EtcdKeys::new(format!("{run}/lock/"), format!("{run}/token/")).unwrap();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let marker = keys.lock_key(&resource).into_bytes();
    let relay = Relay::start(member().await, marker, Cut::BeforeSending).await;
    let through_relay = Client::connect([relay.address.to_string()], None)
        .await
        .unwrap();
    let lease = Arc::new(EtcdLease::new(through_relay).with_keys(keys.clone()));
    let direct = EtcdLease::new(
        Client::connect(services::etcd_endpoints(), None)
            .await
            .unwrap(),
    )
    .with_keys(keys);

    let first = tokio::spawn({
        let (lease, resource) = (lease.clone(), resource.clone());
        async move {
            lease
                .try_acquire(&resource, Ttl::from_secs(30).unwrap())
                .await
        }
    });
    while relay.cuts() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let other = direct
        .try_acquire(&resource, Ttl::from_secs(30).unwrap())
        .await
        .unwrap()
        .expect("the lock, free while the first acquisition is withheld");
    let first = first.await.unwrap().unwrap();
    assert!(first.is_none(), "two holders: {first:?} and {other:?}");
    let status = direct.status(&resource).await.unwrap().expect("held");
    assert_eq!(status.owner, other.owner().as_str());
    direct.release(other).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_applied_whose_answer_is_lost_is_found_held_with_its_token() {
    an_acquisition_cut(Cut::AfterApplying).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_lost_on_its_way_is_tried_again_and_held() {
    an_acquisition_cut(Cut::BeforeSending).await;
}

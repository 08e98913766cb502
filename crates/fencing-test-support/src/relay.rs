//! A TCP relay on a loopback port of its own, between clients and one server, for the tests
//! and the harness's campaign:
//!
//! * a failover moves it from one server to another, as a virtual address or a DNS name moves
//!   to a promoted standby: new connections go to the new server, and every connection open
//!   at the move is cut;
//! * a partition stalls it: nothing crosses in either direction and nothing is refused, as
//!   when the network drops every packet and TCP keeps resending. A request sent during a
//!   partition gets no answer (its outcome is unknown to the client), and reaches the server
//!   once the partition heals, if the client is still connected then.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Connections relayed, each a task copying both ways.
type Links = Arc<Mutex<Vec<JoinHandle<()>>>>;

/// A relay between clients and one server, which the test partitions, heals or moves (the
/// module says how each behaves). Dropped, it stops accepting and cuts every connection.
pub struct Relay {
    port: u16,
    target: Arc<AtomicU16>,
    links: Links,
    /// `true` while partitioned.
    partitioned: watch::Sender<bool>,
    accepting: JoinHandle<()>,
}

impl Relay {
    /// Relays a new loopback port to `127.0.0.1:target` (on the current tokio runtime).
    pub fn start(target: u16) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let port = listener.local_addr()?.port();
        let target = Arc::new(AtomicU16::new(target));
        let links: Links = Arc::default();
        let (partitioned, gate) = watch::channel(false);
        let accepting = tokio::spawn({
            let (target, links) = (target.clone(), links.clone());
            async move {
                while let Ok((inbound, _)) = listener.accept().await {
                    let link = tokio::spawn(link(inbound, target.clone(), gate.clone()));
                    let mut links = links.lock().unwrap_or_else(PoisonError::into_inner);
                    links.retain(|link| !link.is_finished());
                    links.push(link);
                }
            }
        });
        Ok(Relay {
            port,
            target,
            links,
            partitioned,
            accepting,
        })
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends new connections to `127.0.0.1:target` and cuts every connection open now.
    pub fn move_to(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
        for link in self
            .links
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            link.abort();
        }
    }

    /// Stops everything crossing, both ways, on every connection, and holds new ones before
    /// they reach the server, until [`Self::heal`].
    pub fn partition(&self) {
        self.partitioned.send_replace(true);
    }

    /// Lets what was held cross, in order, and everything after it.
    pub fn heal(&self) {
        self.partitioned.send_replace(false);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accepting.abort();
        self.move_to(0);
    }
}

/// One client's connection, to the server the relay points at once no partition holds it.
async fn link(mut inbound: TcpStream, target: Arc<AtomicU16>, gate: watch::Receiver<bool>) {
    if wait_for_heal(&mut gate.clone()).await.is_err() {
        return;
    }
    // A server that is down refuses: the client sees its connection close.
    let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", target.load(Ordering::SeqCst))).await
    else {
        return;
    };
    let (from_client, to_client) = inbound.split();
    let (from_server, to_server) = outbound.split();
    // Either side closing ends the link, as a plain relay does.
    tokio::select! {
        _ = pump(from_client, to_server, gate.clone()) => {}
        _ = pump(from_server, to_client, gate) => {}
    }
}

/// Copies `from` to `to`, holding each chunk read while partitioned until the partition heals.
async fn pump(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    mut gate: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let read = from.read(&mut chunk).await?;
        if read == 0 {
            return to.shutdown().await;
        }
        wait_for_heal(&mut gate)
            .await
            .map_err(std::io::Error::other)?;
        to.write_all(&chunk[..read]).await?;
    }
}

async fn wait_for_heal(gate: &mut watch::Receiver<bool>) -> Result<(), watch::error::RecvError> {
    gate.wait_for(|partitioned| !partitioned).await.map(drop)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::timeout;

    use super::*;

    /// A plain echo server: what it reads, it writes back.
    async fn echo() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut from, mut to) = socket.split();
                    let _ = tokio::io::copy(&mut from, &mut to).await;
                });
            }
        });
        port
    }

    async fn answer(client: &mut TcpStream, wait: Duration) -> Option<Vec<u8>> {
        let mut got = vec![0u8; 64];
        match timeout(wait, client.read(&mut got)).await {
            Ok(Ok(n)) => Some(got[..n].to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_request_sent_during_a_partition_is_answered_only_after_it_heals() {
        let relay = Relay::start(echo().await).unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", relay.port()))
            .await
            .unwrap();
        client.write_all(b"before").await.unwrap();
        assert_eq!(
            answer(&mut client, Duration::from_secs(5)).await.unwrap(),
            b"before"
        );

        relay.partition();
        client.write_all(b"during").await.unwrap();
        assert_eq!(
            answer(&mut client, Duration::from_millis(300)).await,
            None,
            "no answer, no refusal: the outcome is unknown to the client"
        );
        // A connection opened during the partition is held too.
        let mut late = TcpStream::connect(("127.0.0.1", relay.port()))
            .await
            .unwrap();
        late.write_all(b"late").await.unwrap();
        assert_eq!(answer(&mut late, Duration::from_millis(300)).await, None);

        relay.heal();
        assert_eq!(
            answer(&mut client, Duration::from_secs(5)).await.unwrap(),
            b"during",
            "what was held crosses once the partition heals"
        );
        assert_eq!(
            answer(&mut late, Duration::from_secs(5)).await.unwrap(),
            b"late"
        );
    }

    #[tokio::test]
    async fn a_move_cuts_open_connections_and_sends_new_ones_to_the_new_server() {
        let (first, second) = (echo().await, echo().await);
        let relay = Relay::start(first).unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", relay.port()))
            .await
            .unwrap();
        client.write_all(b"one").await.unwrap();
        assert_eq!(
            answer(&mut client, Duration::from_secs(5)).await.unwrap(),
            b"one"
        );
        relay.move_to(second);
        assert_eq!(
            answer(&mut client, Duration::from_secs(5)).await,
            Some(Vec::new()),
            "cut: the client reads the end of its connection"
        );
        let mut again = TcpStream::connect(("127.0.0.1", relay.port()))
            .await
            .unwrap();
        again.write_all(b"two").await.unwrap();
        assert_eq!(
            answer(&mut again, Duration::from_secs(5)).await.unwrap(),
            b"two"
        );
    }
}

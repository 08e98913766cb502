//! A TCP relay on a loopback port of its own that a failover moves from one server to
//! another, as a virtual address or a DNS name moves to a promoted standby: new connections
//! go to the new server, and every connection open at the move is cut.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Connections relayed, each a task copying both ways.
type Links = Arc<Mutex<Vec<JoinHandle<()>>>>;

pub(crate) struct Relay {
    port: u16,
    target: Arc<AtomicU16>,
    links: Links,
    accepting: JoinHandle<()>,
}

impl Relay {
    /// Relays a new loopback port to `127.0.0.1:target`.
    pub(crate) async fn start(target: u16) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let target = Arc::new(AtomicU16::new(target));
        let links: Links = Arc::default();
        let accepting = tokio::spawn({
            let (target, links) = (target.clone(), links.clone());
            async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    let to = target.load(Ordering::SeqCst);
                    let link = tokio::spawn(async move {
                        // A server that is down refuses: the client sees its connection close.
                        if let Ok(mut outbound) = TcpStream::connect(("127.0.0.1", to)).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
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
            accepting,
        })
    }

    /// The port clients connect to.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Sends new connections to `127.0.0.1:target` and cuts every connection open now.
    pub(crate) fn move_to(&self, target: u16) {
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
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accepting.abort();
        self.move_to(0);
    }
}

//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::Error;
use fencing_core::adapter::RequestEffect;

/// The store name etcd failures carry.
pub(crate) const STORE: &str = "etcd";

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum EtcdFailure {
    /// The client or the cluster failed.
    Client(etcd_client::Error),
    /// An answer the requests sent cannot produce (a missing header, a revision below 1).
    Unexpected(String),
}

impl From<etcd_client::Error> for EtcdFailure {
    fn from(err: etcd_client::Error) -> Self {
        EtcdFailure::Client(err)
    }
}

impl EtcdFailure {
    /// The core error for a failed request with this `effect`: a request whose answer may
    /// have been lost (the connection broke, the cluster timed it out, it had no leader to
    /// commit it) is ambiguous when it writes; everything else wrote nothing.
    pub(crate) fn into_error(self, effect: RequestEffect) -> Error {
        match self {
            EtcdFailure::Unexpected(what) => {
                Error::failed_request(STORE, effect, false, what.into())
            }
            EtcdFailure::Client(err) => {
                let answer_lost = answer_may_be_lost(&err);
                Error::failed_request(STORE, effect, answer_lost, Box::new(err))
            }
        }
    }
}

fn answer_may_be_lost(err: &etcd_client::Error) -> bool {
    use etcd_client::Error as E;
    use tonic::Code;
    match err {
        E::TransportError(_) | E::IoError(_) => true,
        // Unavailable: the connection broke mid-request, or the member lost its leader;
        // deadline exceeded: the client gave up waiting; unknown: the server's own timeouts
        // ("etcdserver: request timed out", "leader changed") arrive as this code.
        E::GRpcStatus(status) => matches!(
            status.code(),
            Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled
        ),
        _ => false,
    }
}

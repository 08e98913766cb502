//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::adapter::RequestEffect;
use fencing_core::{BoxError, Error, Failure};

/// The store name etcd failures carry.
pub(crate) const STORE: &str = "etcd";

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum EtcdFailure {
    /// The client or the cluster failed.
    Client(etcd_client::Error),
    /// An answer the requests sent cannot produce (a missing header, a revision below 1).
    Unexpected(String),
    /// A key the library keeps holds what the library never writes; it is left as it is.
    Corrupt(String),
    /// Other writers moved a key under every round the request may take; nothing was written.
    Contended(String),
    /// No answer within the source's request time limit (a cluster without quorum holds a
    /// request until a leader is back, which may be never).
    TimedOut(std::time::Duration),
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
        let (failure, source): (Failure, BoxError) = match self {
            EtcdFailure::Unexpected(what) => (Failure::Unexpected, what.into()),
            EtcdFailure::Corrupt(what) => (Failure::Corrupt, what.into()),
            EtcdFailure::Contended(what) => (Failure::Unavailable, what.into()),
            EtcdFailure::TimedOut(limit) => (
                Failure::AnswerLost,
                format!(
                    "no answer within {limit:?} (is a majority of the cluster's members up and \
                     electing a leader?)"
                )
                .into(),
            ),
            EtcdFailure::Client(err) => (meaning(&err), Box::new(err)),
        };
        Error::failed_request(STORE, effect, failure, source)
    }
}

/// True when the request never left: no connection to the member it was sent to could be
/// made (a member that is down). Sending it again, to another member, is safe whatever it
/// does.
pub(crate) fn never_sent(err: &etcd_client::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = match err {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(transport) => Some(transport),
        etcd_client::Error::IoError(io) => Some(io),
        _ => None,
    };
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return true;
        }
        cause = error.source();
    }
    false
}

/// What a client's error means for the request.
fn meaning(err: &etcd_client::Error) -> Failure {
    use etcd_client::Error as E;
    use tonic::Code;
    if never_sent(err) {
        return Failure::Unavailable;
    }
    match err {
        E::TransportError(_) | E::IoError(_) => Failure::AnswerLost,
        E::GRpcStatus(status) => match status.code() {
            // Unavailable: the connection broke mid-request, or the member lost its leader;
            // deadline exceeded: the client gave up waiting; unknown: the server's own
            // timeouts ("etcdserver: request timed out", "leader changed") arrive as this code.
            Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled => {
                Failure::AnswerLost
            }
            Code::PermissionDenied | Code::Unauthenticated => Failure::PermissionDenied,
            Code::Unimplemented => Failure::NotSupported,
            Code::ResourceExhausted => Failure::Unavailable,
            // The one thing etcd answers "not found" for is a lease: one just granted that the
            // member asked next has not applied yet, or that ran out between the two
            // requests. Nothing was written; the next acquisition grants another.
            Code::NotFound => Failure::Unavailable,
            _ => Failure::Unexpected,
        },
        E::InvalidArgs(_)
        | E::InvalidUri(_)
        | E::InvalidMetadataValue(_)
        | E::EndpointError(_)
        | E::EndpointsNotManaged => Failure::Misconfigured,
        _ => Failure::Unexpected,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> etcd_client::Error {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let mut status = tonic::Status::unavailable("tcp connect error");
        status.set_source(std::sync::Arc::new(io));
        etcd_client::Error::GRpcStatus(status)
    }

    #[test]
    fn a_refused_connection_never_sent_its_request_and_wrote_nothing() {
        assert!(never_sent(&refused()));
        let err = EtcdFailure::from(refused()).into_error(RequestEffect::Writes);
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    }

    #[test]
    fn each_status_the_cluster_answers_has_its_meaning_and_keeps_it_as_the_cause() {
        for (status, meaning) in [
            (
                tonic::Status::permission_denied("no"),
                Failure::PermissionDenied,
            ),
            (
                tonic::Status::unauthenticated("no"),
                Failure::PermissionDenied,
            ),
            (tonic::Status::unimplemented("no"), Failure::NotSupported),
            (
                tonic::Status::resource_exhausted("no"),
                Failure::Unavailable,
            ),
            (tonic::Status::invalid_argument("no"), Failure::Unexpected),
        ] {
            let err = EtcdFailure::from(etcd_client::Error::GRpcStatus(status))
                .into_error(RequestEffect::Writes);
            assert_eq!(err.failure(), Some(meaning), "{err:?}");
            let cause = std::error::Error::source(&err).expect("the client's error");
            assert!(cause.is::<etcd_client::Error>(), "{err:?}");
        }
        let misconfigured = EtcdFailure::from(etcd_client::Error::InvalidArgs("no".into()))
            .into_error(RequestEffect::ReadOnly);
        assert!(matches!(misconfigured, Error::Misconfigured { .. }));
        for (failure, meaning) in [
            (EtcdFailure::Corrupt("x".into()), Failure::Corrupt),
            (EtcdFailure::Contended("x".into()), Failure::Unavailable),
            (EtcdFailure::Unexpected("x".into()), Failure::Unexpected),
        ] {
            assert_eq!(
                failure.into_error(RequestEffect::Writes).failure(),
                Some(meaning)
            );
        }
    }

    /// A connection refused below the client's I/O or its transport never sent anything;
    /// any other I/O failure may have lost a write's answer.
    #[tokio::test]
    async fn an_io_or_transport_failure_is_ambiguous_unless_the_connection_was_refused() {
        let io = |kind| etcd_client::Error::IoError(std::io::Error::from(kind));
        assert!(never_sent(&io(std::io::ErrorKind::ConnectionRefused)));
        let reset = EtcdFailure::from(io(std::io::ErrorKind::ConnectionReset));
        let err = reset.into_error(RequestEffect::Writes);
        assert!(err.is_ambiguous(), "{err:?}");

        // Nothing listens on port 1: a real transport failure, refused.
        let refused = tonic::transport::Endpoint::from_static("http://127.0.0.1:1")
            .connect()
            .await
            .unwrap_err();
        let refused = etcd_client::Error::TransportError(refused);
        assert!(never_sent(&refused), "{refused:?}");
        let err = EtcdFailure::from(refused).into_error(RequestEffect::Writes);
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    }

    #[test]
    fn a_timed_out_write_is_ambiguous_and_a_timed_out_read_is_not() {
        let timed_out = || {
            etcd_client::Error::GRpcStatus(tonic::Status::unknown("etcdserver: request timed out"))
        };
        assert!(!never_sent(&timed_out()));
        let write = EtcdFailure::from(timed_out()).into_error(RequestEffect::Writes);
        assert!(write.is_ambiguous(), "{write:?}");
        let read = EtcdFailure::from(timed_out()).into_error(RequestEffect::ReadOnly);
        assert!(matches!(read, Error::Unavailable { .. }), "{read:?}");
    }
}

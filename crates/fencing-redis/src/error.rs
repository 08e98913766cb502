//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::adapter::{Explained, RequestEffect};
use fencing_core::{BoxError, Error, Failure, ResourceName};
use redis::RedisError;

/// The store name Redis failures carry.
pub(crate) const STORE: &str = "redis";

/// Error codes the scripts return, as the first word of their error reply.
pub(crate) const NOT_INTEGER: &str = "FENCE_NOT_INTEGER";
pub(crate) const EXHAUSTED: &str = "FENCE_EXHAUSTED";
pub(crate) const NO_HISTORY: &str = "FENCE_NO_HISTORY";
pub(crate) const NOT_PRIMARY: &str = "FENCE_NOT_PRIMARY";

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum RedisFailure {
    /// The driver or the server failed.
    Driver(RedisError),
    /// A reply the scripts cannot produce.
    Unexpected(String),
    /// No answer within the request timeout: the request may still arrive and apply.
    TimedOut(std::time::Duration),
}

impl From<RedisError> for RedisFailure {
    fn from(err: RedisError) -> Self {
        RedisFailure::Driver(err)
    }
}

impl RedisFailure {
    /// The core error for a failed request about `resource` with this `effect`.
    pub(crate) fn into_error(self, resource: &ResourceName, effect: RequestEffect) -> Error {
        let (failure, source): (Failure, BoxError) = match self {
            RedisFailure::Unexpected(what) => (Failure::Unexpected, what.into()),
            RedisFailure::TimedOut(waited) => (
                Failure::AnswerLost,
                format!("no answer within the request timeout of {waited:?}").into(),
            ),
            RedisFailure::Driver(err) => match err.code() {
                Some(EXHAUSTED) => {
                    return Error::TokenExhausted {
                        resource: resource.clone(),
                    };
                }
                Some(NOT_INTEGER) => {
                    let why = format!(
                        "the counter key of {resource:?} holds something other than a token: {}",
                        err.detail().unwrap_or_default()
                    );
                    (Failure::Corrupt, Box::new(Explained::new(why, err)))
                }
                Some(NO_HISTORY) => {
                    let why = format!(
                        "no token issued for {resource:?}: the server will not tell a script its \
                         run_id and replication id ({}), so epoch tokens could not tell a \
                         failover to a lagging replica or a restart from an older snapshot from \
                         the history they were issued on. Let scripts call INFO (Redis 7.0 or \
                         later, the command not renamed or disabled), or take tokens from a \
                         durable source (PgLease)",
                        err.detail().unwrap_or_default()
                    );
                    (Failure::NotSupported, Box::new(Explained::new(why, err)))
                }
                Some(NOT_PRIMARY) => {
                    let why = format!(
                        "no token issued for {resource:?}: the connection reaches a replica, \
                         which cannot issue tokens; connect to the primary (through Sentinel or \
                         the cluster to follow a failover)"
                    );
                    (Failure::Unavailable, Box::new(Explained::new(why, err)))
                }
                _ => (meaning(&err), Box::new(err)),
            },
        };
        Error::failed_request(STORE, effect, failure, source)
    }
}

/// What a driver's error means for the request: a failure of the transport after the request
/// may have gone out lost its answer; the server's own refusals say what they are.
fn meaning(err: &RedisError) -> Failure {
    use redis::ServerErrorKind as Server;
    if err.is_connection_refusal() {
        return Failure::Unavailable;
    }
    if err.is_io_error() || err.is_connection_dropped() || err.is_timeout() {
        return Failure::AnswerLost;
    }
    match err.kind() {
        redis::ErrorKind::AuthenticationFailed => Failure::PermissionDenied,
        redis::ErrorKind::InvalidClientConfig
        | redis::ErrorKind::MasterNameNotFoundBySentinel
        | redis::ErrorKind::EmptySentinelList => Failure::Misconfigured,
        redis::ErrorKind::NoValidReplicasFoundBySentinel
        | redis::ErrorKind::ClusterConnectionNotFound => Failure::Unavailable,
        redis::ErrorKind::RESP3NotSupported => Failure::NotSupported,
        redis::ErrorKind::Server(Server::NoPerm) => Failure::PermissionDenied,
        redis::ErrorKind::Server(
            Server::BusyLoading
            | Server::TryAgain
            | Server::ClusterDown
            | Server::MasterDown
            | Server::ReadOnly,
        ) => Failure::Unavailable,
        _ => match err.code() {
            Some("NOAUTH" | "WRONGPASS") => Failure::PermissionDenied,
            Some("WRONGTYPE") => Failure::Corrupt,
            Some("BUSY" | "OOM" | "MISCONF") => Failure::Unavailable,
            _ => Failure::Unexpected,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn resource() -> ResourceName {
        ResourceName::new("settle:m_4471").unwrap()
    }

    /// A script's error reply whose first word is `code`, as the server sends it.
    fn script_error(code: &str) -> RedisError {
        let reply = format!("-{code} the script said why\r\n");
        match redis::parse_redis_value(reply.as_bytes()).unwrap() {
            redis::Value::ServerError(err) => RedisError::from(err),
            other => panic!("{other:?}"),
        }
    }

    fn after_a_write(err: RedisError) -> Error {
        RedisFailure::Driver(err).into_error(&resource(), RequestEffect::Writes)
    }

    #[test]
    fn every_failure_of_the_transport_after_a_write_is_ambiguous() {
        // A dropped connection, a timeout, and an I/O failure that is neither: in each the
        // script may have run.
        for kind in [
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::TimedOut,
            io::ErrorKind::Other,
        ] {
            let err = after_a_write(RedisError::from(io::Error::from(kind)));
            assert!(matches!(err, Error::Ambiguous { .. }), "{kind:?}: {err:?}");
        }
    }

    #[test]
    fn an_answer_from_the_server_is_never_ambiguous_and_has_its_meaning() {
        use redis::ServerErrorKind as Server;
        for (kind, meaning) in [
            (
                redis::ErrorKind::Server(Server::ReadOnly),
                Failure::Unavailable,
            ),
            (
                redis::ErrorKind::Server(Server::BusyLoading),
                Failure::Unavailable,
            ),
            (
                redis::ErrorKind::Server(Server::ClusterDown),
                Failure::Unavailable,
            ),
            (
                redis::ErrorKind::Server(Server::MasterDown),
                Failure::Unavailable,
            ),
            (
                redis::ErrorKind::Server(Server::NoPerm),
                Failure::PermissionDenied,
            ),
            (
                redis::ErrorKind::AuthenticationFailed,
                Failure::PermissionDenied,
            ),
            (
                redis::ErrorKind::InvalidClientConfig,
                Failure::Misconfigured,
            ),
            (
                redis::ErrorKind::Server(Server::NoScript),
                Failure::Unexpected,
            ),
        ] {
            let err = after_a_write(RedisError::from((kind, "the server said no")));
            assert_eq!(err.failure(), Some(meaning), "{kind:?}: {err:?}");
        }
    }

    #[test]
    fn a_refused_connection_sent_nothing() {
        let refused = RedisError::from(io::Error::from(io::ErrorKind::ConnectionRefused));
        let err = after_a_write(refused);
        assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    }

    #[test]
    fn the_scripts_own_refusals_have_their_meanings_and_keep_the_reply() {
        for (code, meaning) in [
            (NOT_INTEGER, Failure::Corrupt),
            (NO_HISTORY, Failure::NotSupported),
            (NOT_PRIMARY, Failure::Unavailable),
        ] {
            let err = after_a_write(script_error(code));
            assert_eq!(err.failure(), Some(meaning), "{code}: {err:?}");
            let explained = std::error::Error::source(&err).expect("the explanation");
            let reply = explained.source().expect("the server's reply beneath");
            assert!(reply.is::<RedisError>(), "{code}: {err:?}");
        }
        assert!(matches!(
            after_a_write(script_error(EXHAUSTED)),
            Error::TokenExhausted { .. }
        ));
    }
}

//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::adapter::RequestEffect;
use fencing_core::{Error, ResourceName};
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
        let err = match self {
            RedisFailure::Unexpected(what) => {
                return Error::failed_request(STORE, effect, false, what.into());
            }
            RedisFailure::TimedOut(waited) => {
                let why = format!("no answer within the request timeout of {waited:?}");
                return Error::failed_request(STORE, effect, true, why.into());
            }
            RedisFailure::Driver(err) => err,
        };
        match err.code() {
            Some(EXHAUSTED) => Error::TokenExhausted {
                resource: resource.clone(),
            },
            Some(NOT_INTEGER) => Error::failed_request(
                STORE,
                effect,
                false,
                format!(
                    "the counter key of {resource:?} holds something other than a token: {}",
                    err.detail().unwrap_or_default()
                )
                .into(),
            ),
            Some(NO_HISTORY) => Error::failed_request(
                STORE,
                effect,
                false,
                format!(
                    "no token issued for {resource:?}: the server will not tell a script its \
                     run_id and replication id ({}), so epoch tokens could not tell a failover \
                     to a lagging replica or a restart from an older snapshot from the history \
                     they were issued on. Let scripts call INFO (Redis 7.0 or later, the \
                     command not renamed or disabled), or take tokens from a durable source \
                     (PgLease)",
                    err.detail().unwrap_or_default()
                )
                .into(),
            ),
            Some(NOT_PRIMARY) => Error::failed_request(
                STORE,
                effect,
                false,
                format!(
                    "no token issued for {resource:?}: the connection reaches a replica, which \
                     cannot issue tokens; connect to the primary (through Sentinel or the \
                     cluster to follow a failover)"
                )
                .into(),
            ),
            _ => {
                let answer_lost =
                    err.is_io_error() || err.is_connection_dropped() || err.is_timeout();
                Error::failed_request(STORE, effect, answer_lost, Box::new(err))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    fn resource() -> ResourceName {
        ResourceName::new("settle:m_4471").unwrap()
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
    fn an_answer_from_the_server_is_never_ambiguous() {
        let reply = RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "READONLY",
        ));
        assert!(matches!(after_a_write(reply), Error::Backend { .. }));
    }
}

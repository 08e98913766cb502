//! This adapter's failures, and how each maps onto the core's meaning-level error.

use fencing_core::adapter::RequestEffect;
use fencing_core::{Error, ResourceName};
use redis::RedisError;

/// The store name Redis failures carry.
pub(crate) const STORE: &str = "redis";

/// Error codes the scripts return, as the first word of their error reply.
pub(crate) const NOT_INTEGER: &str = "FENCE_NOT_INTEGER";
pub(crate) const EXHAUSTED: &str = "FENCE_EXHAUSTED";

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum RedisFailure {
    /// The driver or the server failed.
    Driver(RedisError),
    /// A reply the scripts cannot produce.
    Unexpected(String),
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
            _ => {
                let answer_lost =
                    err.is_io_error() || err.is_connection_dropped() || err.is_timeout();
                Error::failed_request(STORE, effect, answer_lost, Box::new(err))
            }
        }
    }
}

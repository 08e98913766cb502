//! This adapter's failures, and how each maps onto the core's meaning-level error.

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
    /// The core error. `wrote` says whether the failed request could have changed data.
    pub(crate) fn into_error(self, resource: &ResourceName, wrote: bool) -> Error {
        let backend = |source| Error::Backend {
            store: STORE.to_owned(),
            source,
        };
        let err = match self {
            RedisFailure::Unexpected(what) => return backend(what.into()),
            RedisFailure::Driver(err) => err,
        };
        match err.code() {
            Some(EXHAUSTED) => {
                return Error::TokenExhausted {
                    resource: resource.clone(),
                };
            }
            Some(NOT_INTEGER) => {
                return backend(
                    format!(
                        "the counter key of {resource:?} holds something other than a token: {}",
                        err.detail().unwrap_or_default()
                    )
                    .into(),
                );
            }
            _ => {}
        }
        let lost = err.is_io_error() || err.is_connection_dropped() || err.is_timeout();
        if lost && wrote {
            Error::Ambiguous {
                store: STORE.to_owned(),
                source: Box::new(err),
            }
        } else {
            backend(Box::new(err))
        }
    }
}

//! The one way this crate talks to Redis: a connection, the key layout and the compiled
//! scripts, shared by the lease and the token source.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::RequestEffect;
use fencing_core::{ResourceName, Result};
use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Script};

use crate::error::RedisFailure;
use crate::keys::RedisKeys;
use crate::scripts::Scripts;

#[derive(Clone)]
pub(crate) struct RedisClient<C> {
    conn: C,
    keys: RedisKeys,
    scripts: Arc<Scripts>,
    request_timeout: Duration,
}

/// How long one request to Redis waits for its answer unless told otherwise.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisClient<C> {
    pub(crate) fn new(conn: C) -> Self {
        RedisClient {
            conn,
            keys: RedisKeys::default(),
            scripts: Arc::new(Scripts::new()),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    pub(crate) fn with_keys(self, keys: RedisKeys) -> Self {
        RedisClient { keys, ..self }
    }

    pub(crate) fn with_request_timeout(self, request_timeout: Duration) -> Self {
        RedisClient {
            request_timeout,
            ..self
        }
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    pub(crate) fn keys(&self) -> &RedisKeys {
        &self.keys
    }

    pub(crate) fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    /// Runs `script` on `keys` with `args` for `resource`; failures are classified by
    /// `effect`. A request unanswered within the request timeout is given up on (a write's
    /// outcome is then unknown): a connection whose own response timeout is off would
    /// otherwise hold it for as long as the link is black-holed.
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        script: &Script,
        resource: &ResourceName,
        keys: &[&str],
        args: &[&str],
        effect: RequestEffect,
    ) -> Result<T> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        let mut conn = self.conn.clone();
        let answer = tokio::time::timeout(self.request_timeout, invocation.invoke_async(&mut conn))
            .await
            .map_err(|_| {
                RedisFailure::TimedOut(self.request_timeout).into_error(resource, effect)
            })?;
        answer.map_err(|e| RedisFailure::from(e).into_error(resource, effect))
    }
}

//! The lease: `SET NX PX` and `INCR` in one script, owner-only extend and release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::adapter::{Clock, LeaseGuardExt, LeaseRequest, RequestEffect, TokioClock};
use fencing_core::{
    EpochSource, FenceFloor, InvalidInput, Lease, LeaseGuard, LeaseStatus, ResourceName, Result,
    TokenSource, Ttl,
};
use redis::Script;
use redis::aio::ConnectionLike;

use crate::keys::RedisKeys;
use crate::tokens::{LockRequest, RedisTokenSource};

/// A lease on Redis whose acquisition and fencing token take one round trip: one script does
/// `SET lock:{r} <owner> NX PX <ttl>` and `INCR fence:{r}`. Extend and release compare the
/// owner inside a script, so only the holder can do either.
///
/// Its tokens come from a [`RedisTokenSource`]: built with [`Self::new`], tokens are
/// epoch-prefixed and never reissued after Redis loses the counter; see that type for what
/// each deployment guarantees.
#[derive(Clone)]
pub struct RedisLease<C> {
    tokens: Arc<RedisTokenSource<C>>,
}

impl<C> fmt::Debug for RedisLease<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLease")
            .field("tokens", &self.tokens)
            .finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisLease<C> {
    /// Leases through `conn` (a multiplexed connection, a `ConnectionManager` or a cluster
    /// connection), at the default keys, local deadlines on tokio's clock, tokens
    /// epoch-prefixed with epochs from the durable `epochs` ([`RedisTokenSource::new`]).
    pub fn new(conn: C, epochs: Arc<dyn EpochSource>) -> Self {
        Self::from_tokens(RedisTokenSource::new(conn, epochs))
    }

    /// Leases whose counter starts again at 1 when Redis loses it, and so **may reissue a
    /// token** ([`RedisTokenSource::may_reissue_tokens`]).
    pub fn may_reissue_tokens(conn: C) -> Self {
        Self::from_tokens(RedisTokenSource::may_reissue_tokens(conn))
    }

    fn from_tokens(tokens: RedisTokenSource<C>) -> Self {
        RedisLease {
            tokens: Arc::new(tokens),
        }
    }

    /// The same leases at other keys.
    pub fn with_keys(mut self, keys: RedisKeys) -> Self {
        self.tokens = Arc::new(Arc::unwrap_or_clone(self.tokens).with_keys(keys));
        self
    }

    /// The same leases, giving up on a request to Redis after `limit`
    /// ([`RedisTokenSource::with_request_timeout`]): an acquisition, extension or release
    /// through a black-holed link ends with [`fencing_core::Error::Ambiguous`] instead of
    /// waiting for as long as the link is down.
    pub fn with_request_timeout(mut self, limit: Duration) -> Result<Self, InvalidInput> {
        let tokens = Arc::unwrap_or_clone(self.tokens).with_request_timeout(limit)?;
        self.tokens = Arc::new(tokens);
        Ok(self)
    }

    /// The same leases, starting a missing counter above the stores' `floors` (see
    /// [`RedisTokenSource::seeded_from`]).
    pub fn seeded_from(mut self, floors: Vec<Arc<dyn FenceFloor>>) -> Self {
        self.tokens = Arc::new(Arc::unwrap_or_clone(self.tokens).seeded_from(floors));
        self
    }

    /// The token source the tokens come from, as its own type (with the methods of that
    /// store's source); [`Lease::token_source`] gives the same source as a `&dyn TokenSource`
    /// (and is what a `dyn Lease` or an `Arc` of this lease answers).
    pub fn token_source(&self) -> &RedisTokenSource<C> {
        &self.tokens
    }

    /// [`Self::token_source`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `RedisLease::token_source()`")]
    #[doc(hidden)]
    pub fn tokens(&self) -> &RedisTokenSource<C> {
        self.token_source()
    }

    /// The SHA1 the acquire script is sent by (to preload it with `SCRIPT LOAD`, or to drive
    /// it from `redis-benchmark`). Its keys are the lease key, the counter key, the counter's
    /// history key and its opening key ([`RedisKeys`]); its arguments the owner, the TTL in
    /// milliseconds, when to hand the counter back to the client (`0` never, `1` when missing,
    /// `2` when missing, its epoch used up or bound to another server history), a floor and
    /// the opening it was opened for (both empty in the common case), and an opening this
    /// client proposes.
    #[doc(hidden)]
    pub fn acquire_script_hash(&self) -> &str {
        self.tokens.client().scripts().acquire.get_hash()
    }

    async fn owner_script(
        &self,
        script: &Script,
        guard: &LeaseGuard,
        ttl: Option<Ttl>,
    ) -> Result<bool> {
        let resource = guard.resource();
        let client = self.tokens.client();
        let lock = client.keys().lock_key(resource)?;
        let ttl = ttl.map(|ttl| ttl.as_millis().to_string());
        let mut args = vec![guard.owner().as_str()];
        args.extend(ttl.as_deref());
        let done: i64 = client
            .run(script, resource, &[&lock], &args, RequestEffect::Writes)
            .await?;
        Ok(done == 1)
    }
}

#[async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> Lease for RedisLease<C> {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let request = LeaseRequest::new(resource, ttl);
        let lock = LockRequest {
            owner: request.owner(),
            ttl,
        };
        let Some(token) = self.tokens.issue(resource, Some(lock)).await? else {
            return Ok(None);
        };
        Ok(Some(request.granted(token, self.tokens.clone())))
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let requested_at = TokioClock.now();
        let extend = &self.tokens.client().scripts().extend;
        if !self.owner_script(extend, guard, Some(ttl)).await? {
            return Err(guard.lost());
        }
        guard.extended(ttl, requested_at);
        Ok(())
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        let release = &self.tokens.client().scripts().release;
        if !self.owner_script(release, &guard, None).await? {
            return Err(guard.lost());
        }
        Ok(())
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        let client = self.tokens.client();
        let lock = client.keys().lock_key(resource)?;
        let (owner, millis_left): (Option<String>, i64) = client
            .run(
                &client.scripts().status,
                resource,
                &[&lock],
                &[],
                RequestEffect::ReadOnly,
            )
            .await?;
        let Some(owner) = owner.filter(|_| millis_left > 0) else {
            return Ok(None);
        };
        Ok(Some(LeaseStatus {
            owner,
            token: self.tokens.current(resource).await?,
            time_left: Duration::from_millis(millis_left as u64),
        }))
    }

    fn token_source(&self) -> Arc<dyn TokenSource> {
        self.tokens.clone()
    }
}

//! The lease: `SET NX PX` and `INCR` in one script, owner-only extend and release.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::{
    Clock, FenceFloor, Lease, LeaseGuard, OwnerId, ResourceName, Result, TokenSource, TokioClock,
    Ttl,
};
use redis::Script;
use redis::aio::ConnectionLike;

use crate::error::RedisFailure;
use crate::keys::RedisKeys;
use crate::scripts::SEED;
use crate::tokens::{RedisTokenSource, token_from_reply};

/// A lease on Redis whose acquisition and fencing token take one round trip: one script does
/// `SET lock:{r} <owner> NX PX <ttl>` and `INCR fence:{r}`. Extend and release compare the
/// owner inside a script, so only the holder can do either.
#[derive(Clone)]
pub struct RedisLease<C> {
    tokens: RedisTokenSource<C>,
    clock: Arc<dyn Clock>,
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
    /// connection), at the default keys, local deadlines on tokio's clock.
    pub fn new(conn: C) -> Self {
        RedisLease {
            tokens: RedisTokenSource::new(conn),
            clock: Arc::new(TokioClock),
        }
    }

    /// The same leases at other keys.
    pub fn with_keys(mut self, keys: RedisKeys) -> Self {
        self.tokens = self.tokens.with_keys(keys);
        self
    }

    /// The same leases, seeding a missing counter from `floors` (see
    /// [`RedisTokenSource::seeded_from`]).
    pub fn seeded_from(mut self, floors: Vec<Arc<dyn FenceFloor>>) -> Self {
        self.tokens = self.tokens.seeded_from(floors);
        self
    }

    /// The counter the tokens come from.
    pub fn tokens(&self) -> &RedisTokenSource<C> {
        &self.tokens
    }

    /// The SHA1 the acquire script is sent by (to preload it with `SCRIPT LOAD`, or to drive
    /// it from `redis-benchmark`). Its keys are the lease and counter keys; its arguments the
    /// owner, the TTL in milliseconds, and `1` when a missing counter must be seeded.
    pub fn acquire_script_hash(&self) -> &str {
        self.tokens.scripts.acquire.get_hash()
    }

    async fn owner_script(
        &self,
        script: &Script,
        guard: &LeaseGuard,
        ttl: Option<Ttl>,
    ) -> Result<bool> {
        let resource = guard.resource();
        let mut invocation = script.key(self.tokens.keys.lock_key(resource)?);
        invocation.arg(guard.owner().as_str());
        if let Some(ttl) = ttl {
            invocation.arg(ttl.as_millis());
        }
        let mut conn = self.tokens.conn.clone();
        let done: i64 = invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| RedisFailure::from(e).into_error(resource, true))?;
        Ok(done == 1)
    }
}

#[async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> Lease for RedisLease<C> {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let keys = &self.tokens.keys;
        let (lock, counter) = (keys.lock_key(resource)?, keys.counter_key(resource)?);
        let seeded = if self.tokens.is_seeded() { "1" } else { "0" };
        for _ in 0..2 {
            let owner = OwnerId::random();
            let requested_at = self.clock.now();
            let mut conn = self.tokens.conn.clone();
            let reply: Option<String> = self
                .tokens
                .scripts
                .acquire
                .key(&lock)
                .key(&counter)
                .arg(owner.as_str())
                .arg(ttl.as_millis())
                .arg(seeded)
                .invoke_async(&mut conn)
                .await
                .map_err(|e| RedisFailure::from(e).into_error(resource, true))?;
            match reply {
                None => return Ok(None),
                Some(reply) if reply == SEED => self.tokens.seed(resource).await?,
                Some(reply) => {
                    let token = token_from_reply(&reply, resource)?;
                    return Ok(Some(LeaseGuard::new(
                        resource.clone(),
                        owner,
                        token,
                        ttl,
                        requested_at,
                    )));
                }
            }
        }
        Err(
            RedisFailure::Unexpected("the counter stayed unseeded".into())
                .into_error(resource, true),
        )
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let requested_at = self.clock.now();
        if !self
            .owner_script(&self.tokens.scripts.extend, guard, Some(ttl))
            .await?
        {
            return Err(guard.lost());
        }
        guard.extended(ttl, requested_at);
        Ok(())
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        if !self
            .owner_script(&self.tokens.scripts.release, &guard, None)
            .await?
        {
            return Err(guard.lost());
        }
        Ok(())
    }

    fn token_source(&self) -> &dyn TokenSource {
        &self.tokens
    }
}

//! Tokens from a Redis counter, with a floor and seeding from the protected stores.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::{FenceFloor, FencingToken, ResourceName, Result, TokenSource, seed_from_floors};
use redis::Script;
use redis::aio::ConnectionLike;

use crate::error::RedisFailure;
use crate::keys::RedisKeys;
use crate::scripts::{SEED, Scripts};

/// A per-resource `INCR` counter at [`RedisKeys::counter_key`].
///
/// Redis without persistence forgets counters when it restarts, and the next token would then
/// be 1 again. Give the source the stores' floors with [`Self::seeded_from`]: a missing counter
/// is then raised to their `MAX(fence)` before it issues anything, at the cost of one read per
/// restart. Without floors, the core reports such a restart as a token regression at the
/// first refused write.
#[derive(Clone)]
pub struct RedisTokenSource<C> {
    pub(crate) conn: C,
    pub(crate) keys: RedisKeys,
    floors: Vec<Arc<dyn FenceFloor>>,
    pub(crate) scripts: Arc<Scripts>,
}

impl<C> fmt::Debug for RedisTokenSource<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTokenSource")
            .field("keys", &self.keys)
            .field("floors", &self.floors)
            .finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisTokenSource<C> {
    /// Counters reached through `conn` (a multiplexed connection, a `ConnectionManager` or a
    /// cluster connection), at the default keys.
    pub fn new(conn: C) -> Self {
        RedisTokenSource {
            conn,
            keys: RedisKeys::default(),
            floors: Vec::new(),
            scripts: Arc::new(Scripts::new()),
        }
    }

    /// The same source at other keys.
    pub fn with_keys(mut self, keys: RedisKeys) -> Self {
        self.keys = keys;
        self
    }

    /// The same source, seeding a missing counter from `floors` before it issues a token.
    pub fn seeded_from(mut self, floors: Vec<Arc<dyn FenceFloor>>) -> Self {
        self.floors = floors;
        self
    }

    /// The key layout.
    pub fn keys(&self) -> &RedisKeys {
        &self.keys
    }

    pub(crate) fn is_seeded(&self) -> bool {
        !self.floors.is_empty()
    }

    /// Raises a missing counter to the floors' `MAX(fence)`, or starts it at 0 when no store
    /// holds a fence yet.
    pub(crate) async fn seed(&self, resource: &ResourceName) -> Result<()> {
        let floors: Vec<&dyn FenceFloor> = self.floors.iter().map(|f| &**f).collect();
        if seed_from_floors(self, resource, &floors).await?.is_none() {
            let key = self.keys.counter_key(resource)?;
            let mut conn = self.conn.clone();
            redis::cmd("SET")
                .arg(&key)
                .arg(0)
                .arg("NX")
                .query_async::<()>(&mut conn)
                .await
                .map_err(|e| RedisFailure::from(e).into_error(resource, true))?;
        }
        Ok(())
    }

    async fn run(
        &self,
        script: &Script,
        resource: &ResourceName,
        args: &[&str],
        wrote: bool,
    ) -> Result<Option<String>> {
        let key = self.keys.counter_key(resource)?;
        let mut invocation = script.key(key);
        for arg in args {
            invocation.arg(*arg);
        }
        let mut conn = self.conn.clone();
        invocation
            .invoke_async(&mut conn)
            .await
            .map_err(|e| RedisFailure::from(e).into_error(resource, wrote))
    }
}

/// A token from a script's string reply.
pub(crate) fn token_from_reply(reply: &str, resource: &ResourceName) -> Result<FencingToken> {
    reply.parse::<FencingToken>().map_err(|e| {
        RedisFailure::Unexpected(format!("the counter replied {reply:?}: {e}"))
            .into_error(resource, true)
    })
}

#[async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> TokenSource for RedisTokenSource<C> {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        let seeded = if self.is_seeded() { "1" } else { "0" };
        for _ in 0..2 {
            match self
                .run(&self.scripts.next, resource, &[seeded], true)
                .await?
            {
                Some(reply) if reply == SEED => self.seed(resource).await?,
                Some(reply) => return token_from_reply(&reply, resource),
                None => break,
            }
        }
        Err(
            RedisFailure::Unexpected("the counter stayed unseeded".into())
                .into_error(resource, true),
        )
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        match self
            .run(&self.scripts.current, resource, &[], false)
            .await?
        {
            None => Ok(None),
            Some(reply) if reply == "0" => Ok(None),
            Some(reply) => token_from_reply(&reply, resource).map(Some),
        }
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let floor = floor.to_string();
        match self
            .run(&self.scripts.advance, resource, &[&floor], true)
            .await?
        {
            Some(reply) => token_from_reply(&reply, resource),
            None => Err(RedisFailure::Unexpected("advance returned nothing".into())
                .into_error(resource, true)),
        }
    }
}

//! Tokens from a Redis counter: epoch-prefixed by default, so that losing the counter never
//! leads to a token being issued twice.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::adapter::{RequestEffect, epoch};
use fencing_core::{
    CounterHistory, FenceFloor, FencingToken, OwnerId, ResourceName, Result, TokenSource, Ttl,
};
use redis::aio::ConnectionLike;

use crate::client::RedisClient;
use crate::error::RedisFailure;
use crate::keys::RedisKeys;
use crate::scripts::SEED;

/// A per-resource `INCR` counter at [`RedisKeys::token_key`].
///
/// Redis without persistence forgets counters when it restarts; a Redis restored from a
/// snapshot or failed over to a lagging replica can hold a counter behind the tokens already
/// issued. Which of these this source survives depends on how it is built:
///
/// * [`Self::new`] (the default) holds epoch-prefixed tokens ([`fencing_core::adapter::epoch`]): a
///   missing counter takes its next epoch from a durable [`TokenSource`] (e.g. a PostgreSQL
///   row counter), so every token issued after a restart is above every token issued before,
///   even those whose holders never wrote. A counter that is present but maybe behind is
///   caught too: each counter is bound to the server history that established it
///   ([`RedisKeys::history_key`]: the process's `run_id`, new at every start, and its
///   `master_replid`, new at every promotion), read inside the issuing script. On any other
///   history (a failover to a lagging replica, by Sentinel or the Cluster; a restart from an
///   older RDB or AOF; a slot moved to another node) the next token opens a new epoch first.
///   One durable write per resource per failover or restart (a restart that lost nothing pays
///   it too); every other token is one round trip. A server that will not tell a script its
///   identity (INFO renamed or disabled, Redis before 7.0) or that is a replica issues
///   nothing: a typed error says what to do. Not seen: a counter lowered by hand on the same
///   server (an operator's `SET`).
/// * [`Self::may_reissue_tokens`] counts from 1 again after a restart. The fence still refuses
///   a lower token wherever a newer holder wrote, and the core reports it as a regression and
///   repairs the counter, but a token whose holder had not written yet can be issued twice.
///   [`Self::seeded_from`] narrows the window (a missing counter starts above the stores'
///   `MAX(fence)`) without closing it.
#[derive(Clone)]
pub struct RedisTokenSource<C> {
    client: RedisClient<C>,
    epochs: Option<Arc<dyn TokenSource>>,
    floors: Vec<Arc<dyn FenceFloor>>,
}

impl<C> fmt::Debug for RedisTokenSource<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTokenSource")
            .field("epochs", &self.epochs)
            .field("floors", &self.floors)
            .finish_non_exhaustive()
    }
}

/// A lease to take in the same script as the token: its owner and TTL.
pub(crate) struct LockRequest<'a> {
    pub(crate) owner: &'a OwnerId,
    pub(crate) ttl: Ttl,
}

/// How many times a request goes round when the counter must be re-established; two
/// clients that find it missing at once may each need one more.
const REESTABLISH_ROUNDS: usize = 3;

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisTokenSource<C> {
    /// Counters reached through `conn` (a multiplexed connection, a `ConnectionManager` or a
    /// cluster connection), at the default keys, with epochs from the durable `epochs`.
    pub fn new(conn: C, epochs: Arc<dyn TokenSource>) -> Self {
        RedisTokenSource {
            client: RedisClient::new(conn),
            epochs: Some(epochs),
            floors: Vec::new(),
        }
    }

    /// Counters that start again at 1 when Redis loses them, and so **may reissue a token**
    /// whose holder had not written yet. Only for a Redis whose data is never lost, or where
    /// no durable store is at hand and that risk is accepted.
    pub fn may_reissue_tokens(conn: C) -> Self {
        RedisTokenSource {
            client: RedisClient::new(conn),
            epochs: None,
            floors: Vec::new(),
        }
    }

    /// The same source at other keys.
    pub fn with_keys(mut self, keys: RedisKeys) -> Self {
        self.client = self.client.with_keys(keys);
        self
    }

    /// The same source, starting a missing counter above the highest fence `floors` report
    /// (and, with epochs, in an epoch above that fence's).
    pub fn seeded_from(mut self, floors: Vec<Arc<dyn FenceFloor>>) -> Self {
        self.floors = floors;
        self
    }

    /// The server history the counter of `resource` is bound to, and the history of the
    /// server answering (one script, `INFO` inside): where they differ, the next token opens
    /// a new epoch first. A replica, or a server that hides `INFO`, is an error saying so.
    pub async fn history(&self, resource: &ResourceName) -> Result<CounterHistory> {
        let key = self.client.keys().history_key(resource)?;
        let (bound, serving): (Option<String>, String) = self
            .client
            .run(
                &self.client.scripts().history,
                resource,
                &[&key],
                &[],
                RequestEffect::ReadOnly,
            )
            .await?;
        Ok(CounterHistory { bound, serving })
    }

    /// The key layout.
    pub fn keys(&self) -> &RedisKeys {
        self.client.keys()
    }

    pub(crate) fn client(&self) -> &RedisClient<C> {
        &self.client
    }

    /// When the scripts hand a counter back to the client: `2` missing or epoch used up,
    /// `1` missing, `0` never.
    fn reestablish_mode(&self) -> &'static str {
        match (&self.epochs, self.floors.is_empty()) {
            (Some(_), _) => "2",
            (None, false) => "1",
            (None, true) => "0",
        }
    }

    /// Issues the next token for `resource`; with `lock`, takes the lease in the same script
    /// and returns `None` when another owner holds it. One round trip, unless the counter must
    /// be re-established: then the script hands it back, and the request is sent again with
    /// the value to raise it to.
    pub(crate) async fn issue(
        &self,
        resource: &ResourceName,
        lock: Option<LockRequest<'_>>,
    ) -> Result<Option<FencingToken>> {
        let keys = self.client.keys();
        let counter = keys.token_key(resource)?;
        let history = keys.history_key(resource)?;
        let lock_key = keys.lock_key(resource)?;
        let mode = self.reestablish_mode();
        // A floor, and the server history it was opened for.
        let (mut floor, mut opened_for) = (String::new(), String::new());
        for _ in 0..REESTABLISH_ROUNDS {
            let scripts = self.client.scripts();
            let reply: Option<String> = match &lock {
                Some(lock) => {
                    let ttl = lock.ttl.as_millis().to_string();
                    self.client
                        .run(
                            &scripts.acquire,
                            resource,
                            &[&lock_key, &counter, &history],
                            &[lock.owner.as_str(), &ttl, mode, &floor, &opened_for],
                            RequestEffect::Writes,
                        )
                        .await?
                }
                None => {
                    self.client
                        .run(
                            &scripts.next,
                            resource,
                            &[&counter, &history],
                            &[mode, &floor, &opened_for],
                            RequestEffect::Writes,
                        )
                        .await?
                }
            };
            match reply {
                None => return Ok(None),
                Some(reply) => match reply.strip_prefix(SEED) {
                    Some(here) => {
                        opened_for = here.trim_start().to_owned();
                        floor = self.reestablished_at(resource).await?;
                    }
                    None => return token_from_reply(&reply, resource).map(Some),
                },
            }
        }
        Err(
            RedisFailure::Unexpected("the counter kept needing to be re-established".into())
                .into_error(resource, RequestEffect::Writes),
        )
    }

    /// Where a missing (or used-up) counter starts again: at the start of a new epoch above
    /// every floor, or at the highest floor, or at 0 when there is neither.
    async fn reestablished_at(&self, resource: &ResourceName) -> Result<String> {
        let mut floor = None;
        for source in &self.floors {
            floor = floor.max(source.max_fence(resource).await?);
        }
        let target = match &self.epochs {
            Some(epochs) => Some(epoch::open_epoch(&**epochs, resource, floor).await?),
            None => floor,
        };
        Ok(target.map_or_else(|| "0".to_owned(), |t| t.to_string()))
    }

    /// Raises the counter to at least `floor`, atomically; never lowers it. A floor that is a
    /// new epoch, opened while the counter was missing on history `opened_for`, also binds
    /// the counter to that history if it is still missing there.
    async fn raise(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
        opened_for: &str,
    ) -> Result<FencingToken> {
        let keys = self.client.keys();
        let (counter, history) = (keys.token_key(resource)?, keys.history_key(resource)?);
        let reply: Option<String> = self
            .client
            .run(
                &self.client.scripts().advance,
                resource,
                &[&counter, &history],
                &[&floor.to_string(), opened_for],
                RequestEffect::Writes,
            )
            .await?;
        match reply {
            Some(reply) => token_from_reply(&reply, resource),
            None => Err(RedisFailure::Unexpected("advance returned nothing".into())
                .into_error(resource, RequestEffect::Writes)),
        }
    }
}

impl<C: ConnectionLike + Clone + Send + Sync + 'static> RedisTokenSource<C> {
    /// The counter of `resource` (`None` when missing or 0) and, with epochs, the server
    /// history it is read on.
    async fn read(&self, resource: &ResourceName) -> Result<(Option<FencingToken>, String)> {
        let counter = self.client.keys().token_key(resource)?;
        let (reply, here): (Option<String>, String) = self
            .client
            .run(
                &self.client.scripts().current,
                resource,
                &[&counter],
                &[self.reestablish_mode()],
                RequestEffect::ReadOnly,
            )
            .await?;
        let current = match reply.as_deref() {
            None | Some("0") => None,
            Some(reply) => Some(token_from_reply(reply, resource)?),
        };
        Ok((current, here))
    }
}

/// A token from a script's string reply.
fn token_from_reply(reply: &str, resource: &ResourceName) -> Result<FencingToken> {
    reply.parse::<FencingToken>().map_err(|e| {
        RedisFailure::Unexpected(format!("the counter replied {reply:?}: {e}"))
            .into_error(resource, RequestEffect::Writes)
    })
}

#[async_trait]
impl<C: ConnectionLike + Clone + Send + Sync + 'static> TokenSource for RedisTokenSource<C> {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        match self.issue(resource, None).await? {
            Some(token) => Ok(token),
            None => Err(
                RedisFailure::Unexpected("the counter issued nothing".into())
                    .into_error(resource, RequestEffect::Writes),
            ),
        }
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        Ok(self.read(resource).await?.0)
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let (current, here) = match self.epochs {
            Some(_) => self.read(resource).await?,
            None => (None, String::new()),
        };
        let missing = self.epochs.is_some() && current.is_none();
        let target =
            epoch::advance_target(self.epochs.as_deref(), resource, floor, missing).await?;
        let opened_for = if missing { here.as_str() } else { "" };
        self.raise(resource, target, opened_for).await
    }
}

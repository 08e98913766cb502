//! Tokens from a Redis counter: epoch-prefixed by default, so that losing the counter never
//! leads to a token being issued twice.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::adapter::{RequestEffect, check_request_timeout, epoch};
use fencing_core::{
    CounterHistory, EpochSource, FenceFloor, FencingToken, InvalidInput, OwnerId, ResourceName,
    Result, TokenSource, Ttl,
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
///   missing counter takes its next epoch from a durable [`EpochSource`] (e.g. a PostgreSQL
///   `PgEpochSource`), so every token issued after a restart is above every token issued
///   before, even those whose holders never wrote. One loss opens one epoch, however many
///   clients find it at once: the first names it in [`RedisKeys::opening_key`] and every
///   other is handed that name, which the durable source opens one epoch for. A counter that is present but maybe behind is
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
    epochs: Option<Arc<dyn EpochSource>>,
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
    pub fn new(conn: C, epochs: Arc<dyn EpochSource>) -> Self {
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

    /// How long one request waits for its answer unless told otherwise.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = crate::client::DEFAULT_REQUEST_TIMEOUT;

    /// The same source, giving up on a request to Redis after `limit` (at least 1 ms): a write
    /// then reports [`fencing_core::Error::Ambiguous`] (it may still arrive and apply), a read
    /// [`fencing_core::Error::Unavailable`]. The connection's own response timeout applies too,
    /// whichever is shorter. The epoch source's requests are bounded by that source (a
    /// `PgEpochSource` by its pool's).
    pub fn with_request_timeout(mut self, limit: Duration) -> Result<Self, InvalidInput> {
        check_request_timeout(limit)?;
        self.client = self.client.with_request_timeout(limit);
        Ok(self)
    }

    /// How long one request to Redis waits for its answer.
    pub fn request_timeout(&self) -> Duration {
        self.client.request_timeout()
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
        let counter_keys = self.counter_keys(resource)?;
        let lock_key = self.client.keys().lock_key(resource)?;
        let mode = self.reestablish_mode();
        let proposal = OwnerId::random();
        // A floor, and the opening of the loss it was opened for.
        let (mut floor, mut opened_for) = (String::new(), String::new());
        for _ in 0..REESTABLISH_ROUNDS {
            let scripts = self.client.scripts();
            let settle = [mode, &floor, &opened_for, proposal.as_str()];
            let reply: Option<String> = match &lock {
                Some(lock) => {
                    let ttl = lock.ttl.as_millis().to_string();
                    let mut keys = vec![lock_key.as_str()];
                    keys.extend(counter_keys.iter().map(String::as_str));
                    let mut args = vec![lock.owner.as_str(), &ttl];
                    args.extend(settle);
                    self.client
                        .run(
                            &scripts.acquire,
                            resource,
                            &keys,
                            &args,
                            RequestEffect::Writes,
                        )
                        .await?
                }
                None => {
                    let keys = counter_keys.each_ref().map(String::as_str);
                    self.client
                        .run(
                            &scripts.next,
                            resource,
                            &keys,
                            &settle,
                            RequestEffect::Writes,
                        )
                        .await?
                }
            };
            match reply {
                None => return Ok(None),
                Some(reply) => match reply.strip_prefix(SEED) {
                    Some(opening) => {
                        opened_for = opening.trim_start().to_owned();
                        floor = self.reestablished_at(resource, &opened_for).await?;
                    }
                    None => return token_from_reply(&reply, resource).map(Some),
                },
            }
        }
        Err(kept_needing_reestablishing(resource))
    }

    /// The counter's keys a re-establishing script takes: the counter, its history, its
    /// opening.
    fn counter_keys(&self, resource: &ResourceName) -> Result<[String; 3]> {
        let keys = self.client.keys();
        Ok([
            keys.token_key(resource)?,
            keys.history_key(resource)?,
            keys.opening_key(resource)?,
        ])
    }

    /// Where a lost counter starts again: at the start of the epoch of the loss `opening`
    /// above every floor, or at the highest floor, or at 0 when there is neither.
    async fn reestablished_at(&self, resource: &ResourceName, opening: &str) -> Result<String> {
        let mut floor = None;
        for source in &self.floors {
            floor = floor.max(source.max_fence(resource).await?);
        }
        let target = match &self.epochs {
            Some(epochs) => Some(epoch::open_epoch(&**epochs, resource, opening, floor).await?),
            None => floor,
        };
        Ok(target.map_or_else(|| "0".to_owned(), |t| t.to_string()))
    }
}

/// The error after the script asked for the counter to be re-established round after round.
fn kept_needing_reestablishing(resource: &ResourceName) -> fencing_core::Error {
    RedisFailure::Unexpected("the counter kept needing to be re-established".into())
        .into_error(resource, RequestEffect::Writes)
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
        let counter = self.client.keys().token_key(resource)?;
        let reply: Option<String> = self
            .client
            .run(
                &self.client.scripts().current,
                resource,
                &[&counter],
                &[],
                RequestEffect::ReadOnly,
            )
            .await?;
        match reply.as_deref() {
            None | Some("0") => Ok(None),
            Some(reply) => token_from_reply(reply, resource).map(Some),
        }
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let epochs = self.epochs.as_deref();
        epoch::cover_floor(epochs, resource, floor).await?;
        // Without epochs a missing counter is simply set to the floor.
        let mode = if epochs.is_some() { "2" } else { "0" };
        let counter_keys = self.counter_keys(resource)?;
        let keys = counter_keys.each_ref().map(String::as_str);
        let proposal = OwnerId::random();
        let floor_text = floor.to_string();
        let (mut start, mut opened_for) = (String::new(), String::new());
        for _ in 0..REESTABLISH_ROUNDS {
            let args = [&floor_text, mode, &start, &opened_for, proposal.as_str()];
            let reply: Option<String> = self
                .client
                .run(
                    &self.client.scripts().advance,
                    resource,
                    &keys,
                    &args,
                    RequestEffect::Writes,
                )
                .await?;
            let Some(reply) = reply else {
                return Err(RedisFailure::Unexpected("advance returned nothing".into())
                    .into_error(resource, RequestEffect::Writes));
            };
            let (Some(opening), Some(epochs)) = (reply.strip_prefix(SEED), epochs) else {
                return token_from_reply(&reply, resource);
            };
            opened_for = opening.trim_start().to_owned();
            let epoch = epoch::open_epoch(epochs, resource, &opened_for, Some(floor)).await?;
            start = epoch.max(floor).to_string();
        }
        Err(kept_needing_reestablishing(resource))
    }
}

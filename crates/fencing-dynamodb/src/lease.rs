//! A lease item whose acquisition and fencing token take one `UpdateItem`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::adapter::{
    Clock, LeaseGuardExt, LeaseRequest, RequestEffect, TokioClock, contention_pause,
};
use fencing_core::{
    FencingToken, InvalidInput, Lease, LeaseGuard, LeaseStatus, OwnerId, ResourceName, Result,
    TokenSource, Ttl,
};

use crate::error::DynamoFailure;
use crate::expression::number;
use crate::item::{Item, Number};
use crate::tokens::{
    AMBIGUOUS_RETRIES, COUNTER_ROUNDS, Counter, DynamoTokenSource, EXPIRES, Failed, OWNER, bound,
    now_ms, refusals,
};

/// Leases in a table of items `{resource, owner, expires_at_ms, token}`, one per resource.
///
/// One `UpdateItem` acquires: it sets owner and expiry and raises the counter by one, on
/// condition that no owner holds the lease or its expiry has passed and that the counter still
/// holds the value last seen — lease and token in one round trip, like the Redis lease (two
/// when another process raised the counter since: the refusal returns its value). Extend and
/// release are conditioned on the owner. The counter is a [`DynamoTokenSource`] on the same
/// items, and like it never writes over a counter it cannot read.
///
/// Expiry is judged on the writers' clocks (milliseconds since the Unix epoch), not by
/// DynamoDB's TTL deletion, which can lag by days. A writer whose clock runs fast can take
/// over early, one whose clock runs slow late; the fence makes an early takeover safe, since
/// the old holder's writes meet the new holder's higher token.
///
/// The SDK's own retries are off: an acquisition whose answer was lost is sent again as it
/// was, and one that finds its own owner on the item is granted (with the token it set), never
/// reported busy.
#[derive(Clone, Debug)]
pub struct DynamoLease {
    tokens: Arc<DynamoTokenSource>,
}

impl DynamoLease {
    /// Leases in `table`, through a copy of `client` with the SDK's retries off (create the
    /// table with [`Self::create_if_missing`]).
    pub fn new(client: Client, table: impl Into<String>) -> Result<Self, InvalidInput> {
        Ok(DynamoLease {
            tokens: Arc::new(DynamoTokenSource::new(client, table)?),
        })
    }

    /// The same leases in a table whose String partition key is `name`
    /// ([`DynamoTokenSource::with_key_attribute`]).
    pub fn with_key_attribute(self, name: impl Into<String>) -> Result<Self, InvalidInput> {
        Ok(DynamoLease {
            tokens: Arc::new(Arc::unwrap_or_clone(self.tokens).with_key_attribute(name)?),
        })
    }

    /// Creates the lease table (on-demand, the key attribute as a String hash key).
    pub async fn create_if_missing(&self) -> Result<()> {
        self.tokens.create_if_missing().await
    }

    /// [`Self::create_if_missing`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `DynamoLease::create_if_missing()`")]
    #[doc(hidden)]
    pub async fn create_table(&self) -> Result<()> {
        self.create_if_missing().await
    }

    /// The token source the tokens come from, as its own type (with the methods of that
    /// store's source); [`Lease::token_source`] gives the same source as a `&dyn TokenSource`
    /// (and is what a `dyn Lease` or an `Arc` of this lease answers).
    pub fn token_source(&self) -> &DynamoTokenSource {
        &self.tokens
    }

    /// [`Self::token_source`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `DynamoLease::token_source()`")]
    #[doc(hidden)]
    pub fn tokens(&self) -> &DynamoTokenSource {
        self.token_source()
    }

    /// Extends or releases `guard`'s lease: `update` applies only while its owner holds it.
    /// A lost answer is settled by sending it again; a release whose earlier attempt applied
    /// finds the lease gone, which is what it asked for.
    async fn as_owner(&self, guard: &LeaseGuard, update: &str, ttl: Option<Ttl>) -> Result<()> {
        let mut lost = 0;
        loop {
            let now = now_ms();
            let mut request = self
                .tokens
                .update(guard.resource())
                .update_expression(update)
                .condition_expression(
                    "#owner = :owner AND attribute_type(#expires, :type_n) AND #expires > :now",
                )
                .expression_attribute_values(":type_n", AttributeValue::S("N".into()))
                .expression_attribute_names("#owner", OWNER)
                .expression_attribute_names("#expires", EXPIRES)
                .expression_attribute_values(":owner", AttributeValue::S(guard.owner().to_string()))
                .expression_attribute_values(":now", number(now));
            if let Some(ttl) = ttl {
                request =
                    request.expression_attribute_values(":expires", number(now + ttl.as_millis()));
            }
            let err = match request.send().await {
                Ok(_) => return Ok(()),
                Err(err) => err,
            };
            match self.tokens.failed(err) {
                Failed::Refused(_) if lost > 0 && ttl.is_none() => return Ok(()),
                Failed::Refused(_) => return Err(guard.lost()),
                Failed::Error(err) if err.is_ambiguous() && lost < AMBIGUOUS_RETRIES => lost += 1,
                Failed::Error(err) => return Err(err),
            }
        }
    }

    /// Who holds the lease of an item at `now`, if anyone: its owner and expiry. An owner
    /// without a readable expiry is corrupt (the lease could never be taken over).
    fn holder(&self, item: Option<&Item>, now: u64) -> Result<Option<(String, u64)>> {
        let Some(owner) = item.and_then(|item| item.get(OWNER)) else {
            return Ok(None);
        };
        let corrupt = |what: String| {
            DynamoFailure::Corrupt(what).into_error(self.tokens.name(), RequestEffect::ReadOnly)
        };
        let owner = owner
            .as_s()
            .map_err(|_| corrupt(format!("stored lease owner {owner:?} is not a String")))?;
        let expires = item.and_then(|item| item.get(EXPIRES));
        let expires = expires
            .and_then(|e| e.as_n().ok())
            .and_then(|text| Number::parse(text))
            .map(|n| {
                n.ceil()
                    .unwrap_or(if n.is_negative() { 0 } else { u64::MAX })
            })
            .ok_or_else(|| {
                corrupt(format!(
                    "the lease item of owner {owner:?} has no expiry that is a Number: {expires:?}"
                ))
            })?;
        Ok((expires > now).then(|| (owner.clone(), expires)))
    }

    /// The `UpdateItem` that takes the lease of `resource` for `owner` with token `to`: the
    /// counter's compare-and-swap from `expected`, applied only while nobody holds the lease.
    #[allow(clippy::too_many_arguments)]
    fn acquisition(
        &self,
        resource: &ResourceName,
        expected: &Counter,
        to: FencingToken,
        serving: &str,
        owner: &OwnerId,
        ttl: Ttl,
        now: u64,
    ) -> UpdateItemFluentBuilder {
        self.tokens
            .swap(
                resource,
                expected,
                to,
                serving,
                now,
                Some("#owner = :owner, #expires = :expires"),
                Some(
                    "attribute_not_exists(#owner) OR (attribute_type(#expires, :type_n) \
                     AND #expires <= :now)",
                ),
            )
            .expression_attribute_values(":type_n", AttributeValue::S("N".into()))
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#expires", EXPIRES)
            .expression_attribute_values(":owner", AttributeValue::S(owner.to_string()))
            .expression_attribute_values(":expires", number(now + ttl.as_millis()))
            .expression_attribute_values(":now", number(now))
    }
}

#[async_trait]
impl Lease for DynamoLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let request = LeaseRequest::new(resource, ttl);
        let mut expected = self.tokens.last_seen(resource);
        let mut serving = self.tokens.serving(false).await?;
        let mut lowered = false;
        let granted = |token, serving: &str, now| {
            self.tokens.saw(resource, bound(token, serving, now));
            Some(request.clone().granted(token, self.tokens.clone()))
        };
        let mut lost = 0;
        for round in 0..COUNTER_ROUNDS {
            let now = now_ms();
            let start = self.tokens.fresh_start(resource, &serving).await?;
            let to =
                match self
                    .tokens
                    .token_after(resource, &expected, (&serving, start), lowered, now)
                {
                    Ok(to) => to,
                    // Exhausted only if the lease is free: a holder's lease is busy first.
                    Err(exhausted) => {
                        let item = self.tokens.item(resource).await?;
                        return match self.holder(item.as_ref(), now)? {
                            Some(_) => Ok(None),
                            None => Err(exhausted),
                        };
                    }
                };
            let sent = self
                .acquisition(resource, &expected, to, &serving, request.owner(), ttl, now)
                .send()
                .await;
            let err = match sent {
                Ok(_) => return Ok(granted(to, &serving, now)),
                Err(err) => err,
            };
            let found = match self.tokens.failed(err) {
                Failed::Refused(found) => found,
                // Sent again as it was: if the first one applied, the refusal shows this
                // owner on the item.
                Failed::Error(err) if err.is_ambiguous() && lost < AMBIGUOUS_RETRIES => {
                    lost += 1;
                    continue;
                }
                Failed::Error(err) => return Err(err),
            };
            match self.holder(found.as_ref(), now)? {
                // An earlier attempt whose answer was lost applied, with this same `to`.
                Some((holder, _)) if holder == request.owner().to_string() => {
                    return Ok(granted(to, &serving, now));
                }
                Some(_) => return Ok(None),
                None => {}
            }
            let previous = expected;
            (expected, lowered, serving) = self
                .tokens
                .refused_with(resource, &previous, found.as_ref(), serving)
                .await?;
            if expected == previous {
                return Err(DynamoFailure::Inconsistent(
                    "the lease item refused an acquisition its own state admits",
                )
                .into_error(self.tokens.name(), RequestEffect::Writes));
            }
            tokio::time::sleep(contention_pause(refusals(round))).await;
        }
        Err(self.tokens.kept_changing())
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let requested_at = TokioClock.now();
        self.as_owner(guard, "SET #expires = :expires", Some(ttl))
            .await?;
        guard.extended(ttl, requested_at);
        Ok(())
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        self.as_owner(&guard, "REMOVE #owner, #expires", None).await
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        let item = self.tokens.item(resource).await?;
        let now = now_ms();
        let Some((owner, expires)) = self.holder(item.as_ref(), now)? else {
            return Ok(None);
        };
        Ok(Some(LeaseStatus {
            owner,
            token: self.tokens.counter_in(item.as_ref())?,
            time_left: Duration::from_millis(expires - now),
        }))
    }

    fn token_source(&self) -> Arc<dyn TokenSource> {
        self.tokens.clone()
    }
}

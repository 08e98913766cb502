//! A lease item whose acquisition and fencing token take one `UpdateItem`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::{
    Clock, Error, InvalidInput, Lease, LeaseGuard, LeaseStatus, OwnerId, ResourceName, Result,
    TokenSource, TokioClock, Ttl,
};

use crate::expression::number;
use crate::tokens::DynamoTokenSource;

const OWNER: &str = "owner";
const EXPIRES: &str = "expires_at_ms";

/// Leases in a table of items `{resource, owner, expires_at_ms, token}`, one per resource.
///
/// One `UpdateItem` acquires: it sets owner and expiry and `ADD`s the counter, on condition
/// that no owner holds the lease or its expiry has passed, and returns the new token — lease
/// and token in one round trip, like the Redis lease. Extend and release are conditioned on
/// the owner. The counter is a [`DynamoTokenSource`] on the same items.
///
/// Expiry is judged on the writers' clocks (milliseconds since the Unix epoch), not by
/// DynamoDB's TTL deletion, which can lag by days. A writer whose clock runs fast can take
/// over early, one whose clock runs slow late; the fence makes an early takeover safe, since
/// the old holder's writes meet the new holder's higher token.
#[derive(Clone, Debug)]
pub struct DynamoLease {
    tokens: DynamoTokenSource,
}

impl DynamoLease {
    /// Leases in `table`, through `client` (create the table with [`Self::create_table`]).
    pub fn new(client: Client, table: impl Into<String>) -> Result<Self, InvalidInput> {
        Ok(DynamoLease {
            tokens: DynamoTokenSource::new(client, table)?,
        })
    }

    /// Creates the lease table (on-demand, `resource` as a String hash key).
    pub async fn create_table(&self) -> Result<()> {
        self.tokens.create_table().await
    }

    /// The counter the tokens come from.
    pub fn tokens(&self) -> &DynamoTokenSource {
        &self.tokens
    }

    /// Extends or releases `guard`'s lease: `update` applies only while its owner holds it.
    async fn as_owner(&self, guard: &LeaseGuard, update: &str, ttl: Option<Ttl>) -> Result<()> {
        let now = now_ms();
        let mut request = self
            .tokens
            .update(guard.resource())
            .update_expression(update)
            .condition_expression("#owner = :owner AND #expires > :now")
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#expires", EXPIRES)
            .expression_attribute_values(":owner", AttributeValue::S(guard.owner().to_string()))
            .expression_attribute_values(":now", number(now));
        if let Some(ttl) = ttl {
            request =
                request.expression_attribute_values(":expires", number(now + ttl.as_millis()));
        }
        match request.send().await {
            Ok(_) => Ok(()),
            Err(err) => self.tokens.failed(err, |_| Err(guard.lost())),
        }
    }
}

/// Now on this writer's clock, in milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[async_trait]
impl Lease for DynamoLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let owner = OwnerId::random();
        let requested_at = TokioClock.now();
        let now = now_ms();
        let sent = self
            .tokens
            .increment(
                resource,
                Some("#owner = :owner, #expires = :expires"),
                Some("attribute_not_exists(#owner) OR #expires <= :now"),
            )
            .expression_attribute_names("#owner", OWNER)
            .expression_attribute_names("#expires", EXPIRES)
            .expression_attribute_values(":owner", AttributeValue::S(owner.to_string()))
            .expression_attribute_values(":expires", number(now + ttl.as_millis()))
            .expression_attribute_values(":now", number(now))
            .send()
            .await;
        match sent {
            Ok(out) => {
                let token = self.tokens.issued(out.attributes())?;
                Ok(Some(LeaseGuard::new(
                    resource.clone(),
                    owner,
                    token,
                    ttl,
                    requested_at,
                )))
            }
            Err(err) => self.tokens.failed(err, |found| {
                let held = found
                    .and_then(|item| item.get(EXPIRES))
                    .and_then(|expires| expires.as_n().ok())
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .is_some_and(|expires| expires > now)
                    && found.is_some_and(|item| item.contains_key(OWNER));
                let counter = self.tokens.counter_in(found)?;
                if !held && counter == Some(fencing_core::FencingToken::MAX) {
                    return Err(Error::TokenExhausted {
                        resource: resource.clone(),
                    });
                }
                Ok(None)
            }),
        }
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
        let Some(item) = item.as_ref() else {
            return Ok(None);
        };
        let owner = item.get(OWNER).and_then(|o| o.as_s().ok());
        let expires = item
            .get(EXPIRES)
            .and_then(|e| e.as_n().ok())
            .and_then(|ms| ms.parse::<u64>().ok());
        let now = now_ms();
        match (owner, expires) {
            (Some(owner), Some(expires)) if expires > now => Ok(Some(LeaseStatus {
                owner: owner.clone(),
                token: self.tokens.counter_in(Some(item))?,
                time_left: Duration::from_millis(expires - now),
            })),
            _ => Ok(None),
        }
    }

    fn token_source(&self) -> &dyn TokenSource {
        &self.tokens
    }
}

//! A durable token source: one counter item per resource, raised by compare-and-swap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeyType, ReturnValuesOnConditionCheckFailure, ScalarAttributeType,
};
use fencing_core::adapter::RequestEffect;
use fencing_core::{
    Error, FencingToken, InputKind, InvalidInput, ResourceName, Result, TokenSource,
};

use crate::error::{DynamoFailure, classify, without_retries};
use crate::expression::number;
use crate::item::{Fractions, Item, token_from};
use crate::table::{check_attribute, check_table_name, create_table};

/// The partition key of a counter (and lease) item: the resource name.
pub(crate) const RESOURCE: &str = "resource";
/// The counter attribute: the highest token issued for the resource.
pub(crate) const TOKEN: &str = "token";
/// A lease item's holder attribute.
pub(crate) const OWNER: &str = "owner";
/// A lease item's expiry attribute, in milliseconds since the epoch on the writer's clock.
pub(crate) const EXPIRES: &str = "expires_at_ms";

/// How many times a counter update is sent again with the value the service's refusal
/// returned; each round means another writer raised the counter in between.
pub(crate) const COUNTER_ROUNDS: usize = 32;

/// How many times a counter update whose answer was lost is sent again unchanged.
pub(crate) const AMBIGUOUS_RETRIES: u32 = 2;

/// Tokens from a table of counter items `{resource: S, token: N}`.
///
/// `next` is one `UpdateItem` that sets the counter from the value last seen to the one above
/// it, on condition that it still holds exactly that value. The service can compare a Number
/// but cannot tell a whole number from a fraction, so an `ADD` would count on from a counter
/// someone set to `1.5` or `-3`; a swap from an exact whole number read before never writes
/// over such a value: it is refused, and reported as corrupt with nothing written. The value
/// last seen is remembered per resource, so a process that issues tokens in a row needs one
/// round trip each; a stale memory costs one more (the refusal returns the current value).
/// Unlike a Redis counter without persistence, it cannot go backwards.
///
/// The SDK's own retries are off (a copy of the caller's client): an answer that was lost is
/// settled here, by sending the same swap again, which the service refuses if the first one
/// applied and which then counts on from the value it returns. A token lost that way is never
/// handed to anyone.
///
/// A [`crate::DynamoLease`] keeps its counter in the same items, so one table serves both.
#[derive(Clone, Debug)]
pub struct DynamoTokenSource {
    client: Client,
    table: String,
    key_attribute: String,
    name: String,
    seen: Arc<Mutex<HashMap<ResourceName, Option<FencingToken>>>>,
}

/// What a refused or failed counter update stands for.
pub(crate) enum Failed {
    /// The service refused the condition; this is the item as it stood.
    Refused(Option<Item>),
    /// Anything else, mapped to the core's error.
    Error(Error),
}

impl DynamoTokenSource {
    /// Counters in `table`, through a copy of `client` with the SDK's retries off.
    pub fn new(client: Client, table: impl Into<String>) -> Result<Self, InvalidInput> {
        let table = table.into();
        check_table_name(&table)?;
        Ok(DynamoTokenSource {
            client: without_retries(&client),
            name: format!("dynamodb:{table}"),
            table,
            key_attribute: RESOURCE.to_owned(),
            seen: Arc::default(),
        })
    }

    /// The same counters in a table whose String partition key is `name` (`resource` unless
    /// set), e.g. a team's existing table: each resource's item is keyed by its name there.
    /// The item's other attributes are the counter `token` and, for a lease, `owner` and
    /// `expires_at_ms`; the key may be none of them.
    pub fn with_key_attribute(mut self, name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        check_attribute(&name)?;
        if [TOKEN, OWNER, EXPIRES].contains(&name.as_str()) {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!("{name:?} is an attribute the counter or lease item itself holds"),
            ));
        }
        self.key_attribute = name;
        Ok(self)
    }

    /// The counter table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the counter table (on-demand, the key attribute, `resource` unless set, as a
    /// String hash key).
    pub async fn create_table(&self) -> Result<()> {
        let key = [(
            self.key_attribute.as_str(),
            ScalarAttributeType::S,
            KeyType::Hash,
        )];
        create_table(&self.client, &self.table, &key, &self.name).await
    }

    /// The key of the counter (and lease) item of `resource`.
    fn resource_key(&self, resource: &ResourceName) -> Item {
        HashMap::from([(
            self.key_attribute.clone(),
            AttributeValue::S(resource.to_string()),
        )])
    }

    /// The store name in errors, `dynamodb:<table>`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The counter value last seen for `resource` (`None`: none seen, so "no counter yet" is
    /// tried first).
    pub(crate) fn last_seen(&self, resource: &ResourceName) -> Option<FencingToken> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(resource).copied().flatten()
    }

    /// Remembers the counter value of `resource` a request found or set.
    pub(crate) fn saw(&self, resource: &ResourceName, value: Option<FencingToken>) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        // One entry per resource this process touched; bounded for a process that touches
        // an endless stream of them (forgetting only costs a round trip).
        if seen.len() >= 4096 && !seen.contains_key(resource) {
            seen.clear();
        }
        seen.insert(resource.clone(), value);
    }

    /// An `UpdateItem` on the item of `resource`, returning the item as it stood if its
    /// condition fails.
    pub(crate) fn update(&self, resource: &ResourceName) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.resource_key(resource)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// An `UpdateItem` that sets the counter of `resource` to `to` on condition that it holds
    /// exactly `expected` (`None`: no counter, or 0); `also_set` is done in the same update,
    /// `also_require` checked in the same condition.
    pub(crate) fn swap(
        &self,
        resource: &ResourceName,
        expected: Option<FencingToken>,
        to: FencingToken,
        also_set: Option<&str>,
        also_require: Option<&str>,
    ) -> UpdateItemFluentBuilder {
        let update = match also_set {
            Some(set) => format!("SET #token = :to, {set}"),
            None => "SET #token = :to".to_owned(),
        };
        let pin = match expected {
            Some(_) => "#token = :expected",
            None => "(attribute_not_exists(#token) OR #token = :expected)",
        };
        let condition = match also_require {
            Some(required) => format!("({required}) AND {pin}"),
            None => pin.to_owned(),
        };
        self.update(resource)
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#token", TOKEN)
            .expression_attribute_values(":to", number(to))
            .expression_attribute_values(":expected", number(expected.map_or(0, FencingToken::get)))
    }

    /// The item of `resource` (its counter, and its lease where a lease shares the table), read
    /// consistently.
    pub(crate) async fn item(&self, resource: &ResourceName) -> Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.resource_key(resource)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(e, &self.name, RequestEffect::ReadOnly))?;
        Ok(out.item)
    }

    /// The counter of an item returned by a request: a whole number from 0 to `i64::MAX`, or
    /// corrupt.
    pub(crate) fn counter_in(&self, item: Option<&Item>) -> Result<Option<FencingToken>> {
        token_from(
            "counter",
            item.and_then(|item| item.get(TOKEN)),
            Fractions::Refuse,
        )
        .map_err(|e| e.into_error(&self.name, RequestEffect::ReadOnly))
    }

    /// What a failed request stands for: a refused condition with the item as it stood, or
    /// an error.
    pub(crate) fn failed(
        &self,
        err: SdkError<UpdateItemError, aws_sdk_dynamodb::config::http::HttpResponse>,
    ) -> Failed {
        if let SdkError::ServiceError(service) = &err
            && let UpdateItemError::ConditionalCheckFailedException(failed) = service.err()
        {
            return Failed::Refused(failed.item().cloned());
        }
        Failed::Error(classify(err, &self.name, RequestEffect::Writes))
    }

    /// The error for a counter that kept changing under every round.
    pub(crate) fn kept_changing(&self) -> Error {
        DynamoFailure::Inconsistent("the counter kept changing under every update")
            .into_error(&self.name, RequestEffect::Writes)
    }
}

/// The token above `counter`, or [`Error::TokenExhausted`] at `i64::MAX`.
pub(crate) fn above(
    resource: &ResourceName,
    counter: Option<FencingToken>,
) -> Result<FencingToken> {
    match counter {
        None => Ok(FencingToken::MIN),
        Some(counter) => counter.next().ok_or_else(|| Error::TokenExhausted {
            resource: resource.clone(),
        }),
    }
}

/// What a counter swap should do with the value the counter holds.
enum Raise {
    /// Set it to this.
    To(FencingToken),
    /// Leave it: it already stands here.
    Already(FencingToken),
}

impl DynamoTokenSource {
    /// Swaps the counter of `resource` from the value it holds to what `target` says,
    /// starting from `expected` and following the values the service's refusals return. An
    /// answer that was lost is settled by sending the same swap again: refused if the first one
    /// applied, and then the refusal's value is followed.
    async fn raise(
        &self,
        resource: &ResourceName,
        mut expected: Option<FencingToken>,
        target: impl Fn(Option<FencingToken>) -> Result<Raise>,
    ) -> Result<FencingToken> {
        let mut lost = 0;
        for _ in 0..COUNTER_ROUNDS {
            let to = match target(expected)? {
                Raise::To(to) => to,
                Raise::Already(at) => return Ok(at),
            };
            let err = match self.swap(resource, expected, to, None, None).send().await {
                Ok(_) => {
                    self.saw(resource, Some(to));
                    return Ok(to);
                }
                Err(err) => err,
            };
            match self.failed(err) {
                Failed::Refused(found) => {
                    expected = self.counter_in(found.as_ref())?;
                    self.saw(resource, expected);
                }
                Failed::Error(err) if err.is_ambiguous() && lost < AMBIGUOUS_RETRIES => lost += 1,
                Failed::Error(err) => return Err(err),
            }
        }
        Err(self.kept_changing())
    }
}

#[async_trait]
impl TokenSource for DynamoTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        self.raise(resource, self.last_seen(resource), |counter| {
            above(resource, counter).map(Raise::To)
        })
        .await
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let current = self.counter_in(self.item(resource).await?.as_ref())?;
        self.saw(resource, current);
        Ok(current)
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        // Read, not remembered: a counter restored from an old backup is lower than what this
        // process saw, and must be raised.
        let current = self.current(resource).await?;
        self.raise(resource, current, |counter| {
            Ok(match counter.filter(|at| *at >= floor) {
                Some(at) => Raise::Already(at),
                None => Raise::To(floor),
            })
        })
        .await
    }
}

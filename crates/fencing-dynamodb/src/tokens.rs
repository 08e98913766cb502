//! A durable token source: one counter item per resource, incremented by `ADD`.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use fencing_core::{
    Error, FencingToken, InvalidInput, RequestEffect, ResourceName, Result, TokenSource,
};

use crate::error::{DynamoFailure, classify};
use crate::expression::number;
use crate::item::{Item, token_from};
use crate::table::{check_table_name, create_table};

/// The partition key of a counter (and lease) item: the resource name.
pub(crate) const RESOURCE: &str = "resource";
/// The counter attribute: the highest token issued for the resource.
pub(crate) const TOKEN: &str = "token";

/// Tokens from a table of counter items `{resource: S, token: N}`: `next` is one `UpdateItem`
/// that `ADD`s 1 and returns the new value. The service's `ADD` does not stop at `i64::MAX`
/// by itself, so the update is conditioned on the counter being below it, and `next` returns
/// [`Error::TokenExhausted`] there. Unlike a Redis counter without persistence, it cannot go
/// backwards.
///
/// A [`crate::DynamoLease`] keeps its counter in the same items, so one table serves both.
#[derive(Clone, Debug)]
pub struct DynamoTokenSource {
    client: Client,
    table: String,
    name: String,
}

impl DynamoTokenSource {
    /// Counters in `table`, through `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Result<Self, InvalidInput> {
        let table = table.into();
        check_table_name(&table)?;
        Ok(DynamoTokenSource {
            client,
            name: format!("dynamodb:{table}"),
            table,
        })
    }

    /// The counter table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Creates the counter table (on-demand, `resource` as a String hash key).
    pub async fn create_table(&self) -> Result<()> {
        create_table(&self.client, &self.table, RESOURCE, &self.name).await
    }

    /// An `UpdateItem` on the item of `resource`, returning the item as it stood if its
    /// condition fails.
    pub(crate) fn update(&self, resource: &ResourceName) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(resource_key(resource)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// An `UpdateItem` that adds 1 to the counter of `resource` and returns the new value
    /// ([`Self::issued`]), refusing to pass `i64::MAX` or to add to a value that is not a
    /// Number; `also_set` is done in the same update, `also_require` checked in the same
    /// condition.
    pub(crate) fn increment(
        &self,
        resource: &ResourceName,
        also_set: Option<&str>,
        also_require: Option<&str>,
    ) -> UpdateItemFluentBuilder {
        let update = match also_set {
            Some(set) => format!("SET {set} ADD #token :one"),
            None => "ADD #token :one".to_owned(),
        };
        let condition = match also_require {
            Some(required) => format!("({required}) AND {BELOW_MAX}"),
            None => BELOW_MAX.to_owned(),
        };
        self.update(resource)
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#token", TOKEN)
            .expression_attribute_values(":one", number(1))
            .expression_attribute_values(":max", number(i64::MAX))
            .expression_attribute_values(":type_n", AttributeValue::S("N".into()))
            .return_values(ReturnValue::UpdatedNew)
    }

    /// The token an [`Self::increment`] issued, from its answer's attributes.
    pub(crate) fn issued(&self, attributes: Option<&Item>) -> Result<FencingToken> {
        self.counter_in(attributes)?.ok_or_else(|| {
            DynamoFailure::Inconsistent("the increment returned no counter")
                .into_error(&self.name, RequestEffect::Writes)
        })
    }

    /// The item of `resource` (its counter, and its lease where a lease shares the table), read
    /// consistently.
    pub(crate) async fn item(&self, resource: &ResourceName) -> Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(resource_key(resource)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(e, &self.name, RequestEffect::ReadOnly))?;
        Ok(out.item)
    }

    /// The counter of an item returned by a request.
    pub(crate) fn counter_in(&self, item: Option<&Item>) -> Result<Option<FencingToken>> {
        token_from("counter", item.and_then(|item| item.get(TOKEN)))
            .map_err(|e| e.into_error(&self.name, RequestEffect::ReadOnly))
    }

    /// Classifies a failed request; a refused condition is handed to `refused` with the item
    /// as it stood.
    pub(crate) fn failed<T>(
        &self,
        err: SdkError<UpdateItemError, aws_sdk_dynamodb::config::http::HttpResponse>,
        refused: impl FnOnce(Option<&Item>) -> Result<T>,
    ) -> Result<T> {
        if let SdkError::ServiceError(service) = &err
            && let UpdateItemError::ConditionalCheckFailedException(failed) = service.err()
        {
            return refused(failed.item());
        }
        Err(classify(err, &self.name, RequestEffect::Writes))
    }
}

/// The key of the counter (and lease) item of `resource`.
pub(crate) fn resource_key(resource: &ResourceName) -> Item {
    HashMap::from([(RESOURCE.to_owned(), AttributeValue::S(resource.to_string()))])
}

/// The condition that the counter is absent or a Number below `:max` (so `ADD 1` neither
/// fails on a corrupt value nor passes `i64::MAX`).
const BELOW_MAX: &str =
    "(attribute_not_exists(#token) OR (attribute_type(#token, :type_n) AND #token < :max))";

#[async_trait]
impl TokenSource for DynamoTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        match self.increment(resource, None, None).send().await {
            Ok(out) => self.issued(out.attributes()),
            Err(err) => self.failed(err, |found| {
                self.counter_in(found)?;
                Err(Error::TokenExhausted {
                    resource: resource.clone(),
                })
            }),
        }
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        self.counter_in(self.item(resource).await?.as_ref())
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let sent = self
            .update(resource)
            .update_expression("SET #token = :floor")
            .condition_expression(
                "attribute_not_exists(#token) OR (attribute_type(#token, :type_n) AND #token < :floor)",
            )
            .expression_attribute_names("#token", TOKEN)
            .expression_attribute_values(":floor", number(floor))
            .expression_attribute_values(":type_n", AttributeValue::S("N".into()))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(floor),
            // At or above the floor already (or corrupt, which `counter_in` reports).
            Err(err) => self.failed(err, |found| {
                self.counter_in(found)?
                    .filter(|c| *c >= floor)
                    .ok_or_else(|| {
                        DynamoFailure::Inconsistent("the counter refused a floor above it")
                            .into_error(&self.name, RequestEffect::Writes)
                    })
            }),
        }
    }
}

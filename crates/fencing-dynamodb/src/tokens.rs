//! A durable token source: one counter item per resource, raised by compare-and-swap.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeyType, ReturnValuesOnConditionCheckFailure, ScalarAttributeType,
};
use fencing_core::adapter::history::{BoundCounter, binding_here};
use fencing_core::adapter::{RequestEffect, contention_pause};
use fencing_core::{
    CounterHistory, Error, FencingToken, InputKind, InvalidInput, RateBound, ResourceName, Result,
    TokenSource,
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
/// The table that last wrote the counter: its id and creation time, as `DescribeTable` gives
/// them (a table restored from a backup or to a point in time is a new table).
pub(crate) const HISTORY: &str = "history";
/// When the counter was last written, in milliseconds since the epoch on the writer's clock.
pub(crate) const WRITTEN: &str = "written_at_ms";

/// The partition key value of the item that binds the whole table: no [`ResourceName`] holds a
/// control character, and DynamoDB refuses an empty key.
pub(crate) const TABLE_BINDING: &str = "\u{1}table";

/// How long the table's identity, once read, is trusted before it is read again.
const IDENTITY_REFRESH: Duration = Duration::from_secs(60);

/// How many times a counter update is sent again with the value the service's refusal
/// returned; each round means another writer raised the counter in between.
pub(crate) const COUNTER_ROUNDS: usize = 32;

/// The refusals in a row by the end of `round` (counted from 0), for [`contention_pause`].
pub(crate) fn refusals(round: usize) -> u32 {
    u32::try_from(round + 1).unwrap_or(u32::MAX)
}

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
/// Unlike a Redis counter without persistence, it cannot go backwards while its table lives.
///
/// **Restores.** A table restored from a backup or to a point in time is a new table whose
/// counters may be behind the tokens issued since. Each counter is bound to the table that last
/// wrote it (its `TableId` and creation time, read once with `DescribeTable` and again after a
/// minute, [`Self::with_identity_refresh`]) and stamped with the writer's clock; a counter
/// found bound to another table, or lower than this process last saw it, is raised first by
/// [`Self::with_max_rate`] for every second since it was last written, so the next token
/// passes every token the lost table could have issued. That rests on the writers' clocks
/// agreeing to within the seconds a restore takes, and on no counter outrunning the bound.
///
/// A counter the restored table lacks altogether (its resource first used after the backup)
/// is covered by the table's own binding: an item at a reserved key (a control character, which
/// no resource name holds) that [`Self::create_if_missing`] writes, holding the first token a
/// counter new to the table starts at, bound to the table like any counter. Found bound to
/// another table, it is raised first the same way (every counter the lost table created
/// started at the old start after the binding was written), so a counter missing on the
/// restored table starts above every token a lost one issued. It is read once per table
/// identity; a table without it (made by an earlier version, or by a tool of the team's own)
/// issues a new counter nothing until `create_if_missing` has added it.
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
    seen: Arc<Mutex<HashMap<ResourceName, Counter>>>,
    max_rate: RateBound,
    identity: Arc<Mutex<Option<(String, Instant)>>>,
    identity_refresh: Duration,
    /// The first token of a counter new to the table, and the table identity it holds for.
    binding: Arc<Mutex<Option<(String, FencingToken)>>>,
}

/// A counter as an item held it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counter {
    /// The highest token issued; `None`: no counter yet.
    pub(crate) token: Option<FencingToken>,
    /// The table that last wrote it; `None`: not bound (no counter yet, or written by a
    /// version that did not bind counters).
    pub(crate) history: Option<String>,
    /// When it was last written, on the writer's clock.
    pub(crate) written_ms: u64,
}

impl Counter {
    /// Whether it may be behind tokens already issued: bound to a table other than
    /// `serving`, or `lowered` (this process had seen it higher).
    pub(crate) fn may_be_behind(&self, serving: &str, lowered: bool) -> bool {
        lowered || self.history.as_deref().is_some_and(|h| h != serving)
    }
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
            max_rate: RateBound::DEFAULT,
            identity: Arc::default(),
            identity_refresh: IDENTITY_REFRESH,
            binding: Arc::default(),
        })
    }

    /// The same source, raising a counter found bound to another table by `per_second` for
    /// every second since it was last written (1 ..= 2^32; 2^20 unless set).
    pub fn with_max_rate(self, per_second: u64) -> Result<Self, InvalidInput> {
        Ok(DynamoTokenSource {
            max_rate: RateBound::new(per_second)?,
            ..self
        })
    }

    /// The same source, reading the table's identity again once `every` has passed since it
    /// was last read (a minute unless set). A table deleted and restored under its name is
    /// seen at the first request after that, or at once by a process that had seen one of its
    /// counters higher; restores take minutes.
    pub fn with_identity_refresh(self, every: Duration) -> Self {
        DynamoTokenSource {
            identity_refresh: every,
            ..self
        }
    }

    /// The same counters in a table whose String partition key is `name` (`resource` unless
    /// set), e.g. a team's existing table: each resource's item is keyed by its name there.
    /// The item's other attributes are the counter `token` and, for a lease, `owner` and
    /// `expires_at_ms`; the key may be none of them.
    pub fn with_key_attribute(mut self, name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        check_attribute(&name)?;
        if [TOKEN, OWNER, EXPIRES, HISTORY, WRITTEN].contains(&name.as_str()) {
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
    /// String hash key), if missing, with the item that binds the whole table (added to a
    /// table that has none).
    pub async fn create_if_missing(&self) -> Result<()> {
        let key = [(
            self.key_attribute.as_str(),
            ScalarAttributeType::S,
            KeyType::Hash,
        )];
        create_table(&self.client, &self.table, &key, &self.name).await?;
        let serving = self.serving(true).await?;
        let binding = self.swap_item(
            self.item_key(TABLE_BINDING),
            &Counter::default(),
            FencingToken::MIN,
            &serving,
            now_ms(),
        );
        match binding.send().await {
            Ok(_) => Ok(()),
            Err(err) => match self.failed(err) {
                // Bound already.
                Failed::Refused(_) => Ok(()),
                Failed::Error(err) => Err(err),
            },
        }
    }

    /// [`Self::create_if_missing`], as 0.1 named it.
    #[deprecated(
        since = "0.2.0",
        note = "renamed `DynamoTokenSource::create_if_missing()`"
    )]
    #[doc(hidden)]
    pub async fn create_table(&self) -> Result<()> {
        self.create_if_missing().await
    }

    /// The key of the counter (and lease) item of `resource`.
    fn resource_key(&self, resource: &ResourceName) -> Item {
        self.item_key(resource.as_str())
    }

    /// The key of the item named `name`.
    fn item_key(&self, name: &str) -> Item {
        HashMap::from([(
            self.key_attribute.clone(),
            AttributeValue::S(name.to_owned()),
        )])
    }

    /// The first token of a counter new to the table serving now (`serving`): the table
    /// binding's, raised and bound to this table first where it is bound to another. Asked
    /// for `resource`'s next token, which its errors name.
    pub(crate) async fn fresh_start(
        &self,
        resource: &ResourceName,
        serving: &str,
    ) -> Result<FencingToken> {
        if let Some((bound, start)) = &*self.binding.lock().unwrap_or_else(PoisonError::into_inner)
            && bound == serving
        {
            return Ok(*start);
        }
        let key = self.item_key(TABLE_BINDING);
        for round in 0..COUNTER_ROUNDS {
            let binding = self.counter_of(self.item_at(key.clone()).await?.as_ref())?;
            let Some(start) = binding.token else {
                return Err(DynamoFailure::Corrupt(format!(
                    "the table has no binding item (key {TABLE_BINDING:?}), which keeps a counter \
                     it lacks after a restore from starting again below tokens already issued: \
                     run create_if_missing() once (it adds it to an existing table)"
                ))
                .into_error(&self.name, RequestEffect::ReadOnly));
            };
            let now = now_ms();
            let stored = BoundCounter {
                value: start,
                history: binding.history.clone().unwrap_or_default(),
                written_ms: binding.written_ms,
            };
            let here = binding_here(&stored, &serving.to_owned(), now, self.max_rate).ok_or_else(
                || Error::TokenExhausted {
                    resource: resource.clone(),
                },
            )?;
            if here != stored {
                let swap = self.swap_item(key.clone(), &binding, here.value, serving, now);
                if let Err(err) = swap.send().await {
                    match self.failed(err) {
                        Failed::Refused(_) => {
                            tokio::time::sleep(contention_pause(refusals(round))).await;
                            continue;
                        }
                        Failed::Error(err) => return Err(err),
                    }
                }
            }
            let start = here.value;
            *self.binding.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((serving.to_owned(), start));
            return Ok(start);
        }
        Err(self.kept_changing())
    }

    /// The store name in errors, `dynamodb:<table>`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The counter last seen for `resource` (none seen: "no counter yet" is tried first).
    pub(crate) fn last_seen(&self, resource: &ResourceName) -> Counter {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(resource).cloned().unwrap_or_default()
    }

    /// Remembers the counter of `resource` a request found or set.
    pub(crate) fn saw(&self, resource: &ResourceName, value: Counter) {
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
        self.update_at(self.resource_key(resource))
    }

    /// An `UpdateItem` on the item at `key`, as [`Self::update`].
    fn update_at(&self, key: Item) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// The identity of the table serving now, as counters are bound to it: read with
    /// `DescribeTable` when `fresh` or when the one read before is older than the refresh.
    pub(crate) async fn serving(&self, fresh: bool) -> Result<String> {
        {
            let known = self.identity.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some((identity, read_at)) = &*known
                && !fresh
                && read_at.elapsed() < self.identity_refresh
            {
                return Ok(identity.clone());
            }
        }
        let out = self
            .client
            .describe_table()
            .table_name(&self.table)
            .send()
            .await
            .map_err(|e| classify(e, &self.name, RequestEffect::ReadOnly))?;
        let table = out.table();
        let created = table
            .and_then(|t| t.creation_date_time())
            .and_then(|at| at.to_millis().ok());
        let Some(created) = created else {
            return Err(DynamoFailure::Inconsistent(
                "DescribeTable gave the table no creation time to bind its counters to",
            )
            .into_error(&self.name, RequestEffect::ReadOnly));
        };
        let id = table.and_then(|t| t.table_id()).unwrap_or("-");
        let identity = format!("{id}@{created}");
        *self.identity.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((identity.clone(), Instant::now()));
        Ok(identity)
    }

    /// The token to issue after `counter`, which the table `serving` holds: one above it, or
    /// above it raised by the rate bound where it is bound to another table or `lowered` (this
    /// process had seen it higher). [`Error::TokenExhausted`] past `i64::MAX`.
    pub(crate) fn token_after(
        &self,
        resource: &ResourceName,
        counter: &Counter,
        (serving, fresh_start): (&str, FencingToken),
        lowered: bool,
        now_ms: u64,
    ) -> Result<FencingToken> {
        let from = match counter.token {
            Some(token) if counter.may_be_behind(serving, lowered) => Some(
                self.max_rate
                    .raise(token, counter.written_ms, now_ms)
                    .ok_or_else(|| Error::TokenExhausted {
                        resource: resource.clone(),
                    })?,
            ),
            Some(token) => Some(token),
            None => return Ok(fresh_start),
        };
        above(resource, from)
    }

    /// An `UpdateItem` that sets the counter of `resource` to `to`, bound to the table
    /// `serving` and stamped `now_ms`, on condition that the item holds exactly `expected`
    /// (its counter, `None` meaning none or 0, and the table it is bound to); `also_set` is
    /// done in the same update, `also_require` checked in the same condition.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn swap(
        &self,
        resource: &ResourceName,
        expected: &Counter,
        to: FencingToken,
        serving: &str,
        now_ms: u64,
        also_set: Option<&str>,
        also_require: Option<&str>,
    ) -> UpdateItemFluentBuilder {
        let key = self.resource_key(resource);
        self.swap_at(key, expected, to, serving, now_ms, also_set, also_require)
    }

    /// The counter swap of [`Self::swap`] on the item at `key`, with nothing else set or
    /// required.
    fn swap_item(
        &self,
        key: Item,
        expected: &Counter,
        to: FencingToken,
        serving: &str,
        now_ms: u64,
    ) -> UpdateItemFluentBuilder {
        self.swap_at(key, expected, to, serving, now_ms, None, None)
    }

    #[allow(clippy::too_many_arguments)]
    fn swap_at(
        &self,
        key: Item,
        expected: &Counter,
        to: FencingToken,
        serving: &str,
        now_ms: u64,
        also_set: Option<&str>,
        also_require: Option<&str>,
    ) -> UpdateItemFluentBuilder {
        let set = "SET #token = :to, #history = :serving, #written = :now";
        let update = match also_set {
            Some(also) => format!("{set}, {also}"),
            None => set.to_owned(),
        };
        let pin_token = match expected.token {
            Some(_) => "#token = :expected",
            None => "(attribute_not_exists(#token) OR #token = :expected)",
        };
        let pin_history = match expected.history {
            Some(_) => "#history = :bound",
            None => "attribute_not_exists(#history)",
        };
        let condition = match also_require {
            Some(required) => format!("({required}) AND {pin_token} AND {pin_history}"),
            None => format!("{pin_token} AND {pin_history}"),
        };
        let request = self
            .update_at(key)
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#token", TOKEN)
            .expression_attribute_names("#history", HISTORY)
            .expression_attribute_names("#written", WRITTEN)
            .expression_attribute_values(":to", number(to))
            .expression_attribute_values(":serving", AttributeValue::S(serving.to_owned()))
            .expression_attribute_values(":now", number(now_ms))
            .expression_attribute_values(
                ":expected",
                number(expected.token.map_or(0, FencingToken::get)),
            );
        match &expected.history {
            Some(bound) => {
                request.expression_attribute_values(":bound", AttributeValue::S(bound.clone()))
            }
            None => request,
        }
    }

    /// Where the counter of `resource` stands: the table it is bound to and the table
    /// serving now. Where they differ, its next token is raised first.
    pub async fn history(&self, resource: &ResourceName) -> Result<CounterHistory> {
        let serving = self.serving(true).await?;
        let counter = self.counter_of(self.item(resource).await?.as_ref())?;
        Ok(CounterHistory {
            bound: counter.history,
            serving,
        })
    }

    /// The item of `resource` (its counter, and its lease where a lease shares the table), read
    /// consistently.
    pub(crate) async fn item(&self, resource: &ResourceName) -> Result<Option<Item>> {
        self.item_at(self.resource_key(resource)).await
    }

    /// The item at `key`, read consistently.
    async fn item_at(&self, key: Item) -> Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key))
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

    /// The counter of an item with what it is bound to: a binding without a readable time
    /// it was written is corrupt (it could not be raised by the bound).
    pub(crate) fn counter_of(&self, item: Option<&Item>) -> Result<Counter> {
        let token = self.counter_in(item)?;
        let corrupt = |what: String| {
            DynamoFailure::Corrupt(what).into_error(&self.name, RequestEffect::ReadOnly)
        };
        let history = match item.and_then(|item| item.get(HISTORY)) {
            None => None,
            Some(AttributeValue::S(history)) => Some(history.clone()),
            Some(other) => {
                return Err(corrupt(format!(
                    "counter history {other:?} is not a String"
                )));
            }
        };
        let written = item
            .and_then(|item| item.get(WRITTEN))
            .and_then(|w| w.as_n().ok())
            .and_then(|text| text.parse::<u64>().ok());
        let written_ms = match (&history, written) {
            (_, Some(written)) => written,
            (None, None) => 0,
            (Some(_), None) => {
                return Err(corrupt(
                    "a counter bound to a table has no time it was written".to_owned(),
                ));
            }
        };
        Ok(Counter {
            token,
            history,
            written_ms,
        })
    }

    /// Settles what a refused counter update found against what it expected: remembers it,
    /// and reads the table's identity again where the counter went back (a restore this
    /// process has not seen yet); returns the counter, whether it went back, and the table
    /// serving.
    pub(crate) async fn refused_with(
        &self,
        resource: &ResourceName,
        expected: &Counter,
        found: Option<&Item>,
        serving: String,
    ) -> Result<(Counter, bool, String)> {
        let found = self.counter_of(found)?;
        self.saw(resource, found.clone());
        let lowered = found.token < expected.token;
        let serving = if lowered {
            self.serving(true).await?
        } else {
            serving
        };
        Ok((found, lowered, serving))
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
        DynamoFailure::Contended("the counter kept changing under every update")
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

/// Now on this writer's clock, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl DynamoTokenSource {
    /// Swaps the counter of `resource` from the value it holds to what `target` says (given
    /// the counter, the table serving, whether the counter went back, and now), starting from
    /// `expected` and following the counters the service's refusals return. An answer that
    /// was lost is settled by sending the same swap again: refused if the first one applied,
    /// and then the refusal's counter is followed.
    async fn raise(
        &self,
        resource: &ResourceName,
        mut expected: Counter,
        target: impl Fn(&Counter, (&str, FencingToken), bool, u64) -> Result<Raise>,
    ) -> Result<FencingToken> {
        let mut serving = self.serving(false).await?;
        let mut lowered = false;
        let mut lost = 0;
        for round in 0..COUNTER_ROUNDS {
            let now = now_ms();
            let start = self.fresh_start(resource, &serving).await?;
            let to = match target(&expected, (&serving, start), lowered, now)? {
                Raise::To(to) => to,
                Raise::Already(at) => return Ok(at),
            };
            let sent = self
                .swap(resource, &expected, to, &serving, now, None, None)
                .send()
                .await;
            let err = match sent {
                Ok(_) => {
                    self.saw(resource, bound(to, &serving, now));
                    return Ok(to);
                }
                Err(err) => err,
            };
            match self.failed(err) {
                Failed::Refused(found) => {
                    (expected, lowered, serving) = self
                        .refused_with(resource, &expected, found.as_ref(), serving)
                        .await?;
                    tokio::time::sleep(contention_pause(refusals(round))).await;
                }
                Failed::Error(err) if err.is_ambiguous() && lost < AMBIGUOUS_RETRIES => lost += 1,
                Failed::Error(err) => return Err(err),
            }
        }
        Err(self.kept_changing())
    }
}

/// The counter a swap to `to` on table `serving` at `now_ms` leaves.
pub(crate) fn bound(to: FencingToken, serving: &str, now_ms: u64) -> Counter {
    Counter {
        token: Some(to),
        history: Some(serving.to_owned()),
        written_ms: now_ms,
    }
}

#[async_trait]
impl TokenSource for DynamoTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        self.raise(
            resource,
            self.last_seen(resource),
            |counter, serving, lowered, now| {
                self.token_after(resource, counter, serving, lowered, now)
                    .map(Raise::To)
            },
        )
        .await
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let current = self.counter_of(self.item(resource).await?.as_ref())?;
        self.saw(resource, current.clone());
        Ok(current.token)
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        // Read, not remembered: a counter restored from an old backup is lower than what this
        // process saw, and must be raised.
        let current = self.counter_of(self.item(resource).await?.as_ref())?;
        self.saw(resource, current.clone());
        self.raise(resource, current, |counter, serving, lowered, now| {
            // A counter that moved keeps its raise: binding it to this table at the floor
            // alone would forget what the lost table may have issued above it; a counter the
            // table lacks starts no lower than a new one would.
            if counter.may_be_behind(serving.0, lowered) || counter.token.is_none() {
                let raised = self.token_after(resource, counter, serving, lowered, now)?;
                return Ok(Raise::To(raised.max(floor)));
            }
            Ok(match counter.token.filter(|at| *at >= floor) {
                Some(at) => Raise::Already(at),
                None => Raise::To(floor),
            })
        })
        .await
    }
}

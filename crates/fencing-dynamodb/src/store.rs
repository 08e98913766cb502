//! A DynamoDB table as a fenced store: one conditional `UpdateItem` per write, and fenced
//! transactions.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, ReturnValue, ReturnValuesOnConditionCheckFailure,
    TransactWriteItem, Update,
};
use fencing_core::adapter::{
    HolderExt, RequestEffect, StoreIdentity, StoreWrites, check_store_name,
};
use fencing_core::{
    Error, FenceCheck, FencedStore, FencedWrite, FencingToken, Holder, InputKind, InvalidInput,
    Record, RecordKey, Result, Written,
};

use crate::attributes::DynamoWrite;
use crate::error::{DynamoFailure, classify, without_retries};
use crate::expression::{StatePin, WriteExpression, check_item_size};
use crate::table::DynamoTable;

/// The most actions one `TransactWriteItems` takes.
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// The largest `TransactWriteItems` request.
const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;

/// A [`DynamoTable`] through the caller's client: every write is one `UpdateItem` whose
/// condition expression checks the fence and the state, and which returns the item as it
/// stood (`ALL_OLD`) whether it applied or not, so a refusal names the fence it met in the same
/// round trip.
///
/// The SDK's own retries are turned off for fenced writes: a write whose answer is lost comes
/// back as [`Error::Ambiguous`], and [`Holder::write`] sends it again with the same token,
/// recognising its own first attempt if it landed. Left on, the SDK would re-send a write that
/// applied and report its refusal.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    table: DynamoTable,
    name: String,
    identity: StoreIdentity,
}

impl DynamoStore {
    /// The fenced records of `table`, through `client` (built by the caller: any endpoint,
    /// credentials and HTTP stack).
    pub fn new(client: Client, table: DynamoTable) -> Self {
        let name = table.store_name();
        DynamoStore {
            client: without_retries(&client),
            table,
            name,
            identity: StoreIdentity::new(),
        }
    }

    /// The same store under another name in errors and batches (`dynamodb:<table>` unless
    /// renamed), e.g. `ledger`. Any text without control or format characters.
    pub fn named(mut self, name: &str) -> Result<Self, InvalidInput> {
        check_store_name(name)?;
        self.name = name.to_owned();
        Ok(self)
    }

    /// The table.
    pub fn table(&self) -> &DynamoTable {
        &self.table
    }

    /// The store's client: the caller's, with the SDK's retries off (fenced writes are retried
    /// by [`Holder`], with the same token, never by the SDK).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Applies up to [`MAX_TRANSACTION_ITEMS`] fenced writes under `holder`'s token in one
    /// `TransactWriteItems`: all or nothing.
    ///
    /// A refusal is mapped back to the write that caused it, with the fence found, exactly as
    /// a single write reports it (and through `holder`, so a counter that went backwards is a
    /// [`Error::TokenRegression`]); nothing was applied. An empty list, more than 100 writes,
    /// one key twice, or more than DynamoDB's 4 MB are refused before sending. The request's
    /// `ClientRequestToken` is derived from the token and the writes, so a retry after an
    /// ambiguous outcome (done here, as [`Holder::write`] does) is idempotent for the service's
    /// ten-minute window.
    pub async fn transact(
        &self,
        holder: &Holder,
        writes: &[(RecordKey, FencedWrite)],
    ) -> Result<()> {
        let writes: Vec<(RecordKey, DynamoWrite)> = writes
            .iter()
            .map(|(key, write)| (key.clone(), DynamoWrite::from(write)))
            .collect();
        self.transact_with(holder, &writes).await
    }

    /// [`Self::transact`] of writes that also set attributes of the caller's own
    /// ([`DynamoWrite`]), each in its item's `Update` of the one `TransactWriteItems`: a
    /// refusal anywhere sets none of them anywhere.
    pub async fn transact_with(
        &self,
        holder: &Holder,
        writes: &[(RecordKey, DynamoWrite)],
    ) -> Result<()> {
        let token = holder.token();
        let mut pins = vec![StatePin::Absent; writes.len()];
        // Checked once before the first request: a bad list is refused unsent.
        self.transaction_items(token, writes, &pins)?;
        let records: Vec<&RecordKey> = writes.iter().map(|(key, _)| key).collect();
        let standing_for_all = match writes
            .iter()
            .any(|(_, w)| w.write().check() == FenceCheck::Claim)
        {
            true => FencedWrite::claim(),
            false => FencedWrite::holder_only(),
        };
        holder
            .run_write(self, &records, &standing_for_all, async || {
                for _ in 0..PIN_ROUNDS {
                    match self.transact_once(token, writes, &pins).await? {
                        Transacted::Applied => return Ok(()),
                        Transacted::Repin(repinned) => pins = repinned,
                    }
                }
                Err(self.failed(DynamoFailure::Contended(
                    "the items' states kept changing under the transaction",
                )))
            })
            .await
    }

    /// One `TransactWriteItems` of `writes` pinned to `pins`; its request token is derived from
    /// both, so the same request sent again after a lost answer is idempotent.
    async fn transact_once(
        &self,
        token: FencingToken,
        writes: &[(RecordKey, DynamoWrite)],
        pins: &[StatePin],
    ) -> Result<Transacted> {
        let items = self.transaction_items(token, writes, pins)?;
        let sent = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(request_token(&self.name, token, writes, pins))
            .send()
            .await;
        let err = match sent {
            Ok(_) => return Ok(Transacted::Applied),
            Err(err) => err,
        };
        if let SdkError::ServiceError(service) = &err
            && let TransactWriteItemsError::TransactionCanceledException(cancelled) = service.err()
        {
            return self.cancellation(token, writes, pins, cancelled.cancellation_reasons());
        }
        Err(classify(err, &self.name, RequestEffect::Writes))
    }

    fn transaction_items(
        &self,
        token: FencingToken,
        writes: &[(RecordKey, DynamoWrite)],
        pins: &[StatePin],
    ) -> Result<Vec<TransactWriteItem>> {
        if writes.is_empty() || writes.len() > MAX_TRANSACTION_ITEMS {
            return Err(invalid(
                InputKind::RecordKey,
                format!(
                    "a transaction takes 1 to {MAX_TRANSACTION_ITEMS} writes, not {}",
                    writes.len()
                ),
            ));
        }
        let mut distinct = HashSet::with_capacity(writes.len());
        let mut bytes = 0;
        let mut items = Vec::with_capacity(writes.len());
        for ((key, write), pin) in writes.iter().zip(pins) {
            if !distinct.insert(key) {
                return Err(invalid(
                    InputKind::RecordKey,
                    format!("{key:?} appears twice in one transaction"),
                ));
            }
            let (write, attributes) = (write.write(), write.extras());
            check_item_size(&self.table, key, write)?;
            let item_key = self.table.key_item(key)?;
            bytes += key.len() + write.new_payload().map_or(0, <[u8]>::len) + 256;
            let expr = WriteExpression::of(&self.table, token, write, attributes, pin)?;
            let built = |e| self.not_built(e);
            let item = match expr.update {
                Some(update) => TransactWriteItem::builder().update(
                    Update::builder()
                        .table_name(self.table.name())
                        .set_key(Some(item_key))
                        .update_expression(update)
                        .condition_expression(expr.condition)
                        .set_expression_attribute_names(Some(expr.names))
                        .set_expression_attribute_values(Some(expr.values))
                        .return_values_on_condition_check_failure(
                            ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .build()
                        .map_err(built)?,
                ),
                None => TransactWriteItem::builder().condition_check(
                    ConditionCheck::builder()
                        .table_name(self.table.name())
                        .set_key(Some(item_key))
                        .condition_expression(expr.condition)
                        .set_expression_attribute_names(Some(expr.names))
                        .set_expression_attribute_values(Some(expr.values))
                        .return_values_on_condition_check_failure(
                            ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .build()
                        .map_err(built)?,
                ),
            };
            items.push(item.build());
        }
        if bytes > MAX_TRANSACTION_BYTES {
            return Err(invalid(
                InputKind::RecordKey,
                format!(
                    "the transaction would take at least {bytes} bytes, over DynamoDB's limit \
                     of {MAX_TRANSACTION_BYTES}"
                ),
            ));
        }
        Ok(items)
    }

    /// What a cancelled transaction stands for: the refusal of the first write whose condition
    /// failed, decided on the item as it stood; or, where every failed condition was only a
    /// state pin, the pins to send it with again.
    fn cancellation(
        &self,
        token: FencingToken,
        writes: &[(RecordKey, DynamoWrite)],
        pins: &[StatePin],
        reasons: &[aws_sdk_dynamodb::types::CancellationReason],
    ) -> Result<Transacted> {
        let mut repinned = pins.to_vec();
        let mut failed = false;
        for (i, ((key, write), reason)) in writes.iter().zip(reasons).enumerate() {
            if reason.code() != Some("ConditionalCheckFailed") {
                continue;
            }
            failed = true;
            let write = write.write();
            let found = reason
                .item()
                .map(|item| self.table.record_from(key, item))
                .transpose()
                .map_err(|e| self.failed(e))?;
            write.decide(&self.name, key, token, found.as_ref())?;
            repinned[i] = repin(write, &pins[i], found.as_ref()).ok_or_else(|| {
                self.failed(DynamoFailure::Inconsistent(
                    "the transaction refused a write its own item admits",
                ))
            })?;
        }
        if failed {
            return Ok(Transacted::Repin(repinned));
        }
        let codes = reasons
            .iter()
            .map(|r| r.code().unwrap_or("None").to_owned())
            .collect();
        Err(self.failed(DynamoFailure::Cancelled(codes)))
    }

    fn failed(&self, failure: DynamoFailure) -> Error {
        failure.into_error(&self.name, RequestEffect::Writes)
    }

    fn not_built(&self, err: aws_sdk_dynamodb::error::BuildError) -> Error {
        DynamoFailure::NotBuilt(err).into_error(&self.name, RequestEffect::ReadOnly)
    }
}

fn invalid(kind: InputKind, detail: String) -> Error {
    InvalidInput::new(kind, detail).into()
}

/// How one `TransactWriteItems` ended, short of an error.
enum Transacted {
    /// Every write applied.
    Applied,
    /// Nothing applied: some item's state was not the one pinned; send again with these.
    Repin(Vec<StatePin>),
}

/// The `ClientRequestToken` of a transaction: a name-based UUID of the store, the token and
/// every write with its pin, so the same transaction sent again carries the same one.
fn request_token(
    store: &str,
    token: FencingToken,
    writes: &[(RecordKey, DynamoWrite)],
    pins: &[StatePin],
) -> String {
    let mut described = format!("{store}\n{token}\n");
    for ((key, write), pin) in writes.iter().zip(pins) {
        described.push_str(&format!("{key:?} {write:?} {pin:?}\n"));
    }
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, described.as_bytes())
        .hyphenated()
        .to_string()
}

#[async_trait]
impl FencedStore for DynamoStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn identity(&self) -> StoreIdentity {
        self.identity.clone()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.get_item(key)
            .await?
            .map(|item| self.table.record_from(key, &item))
            .transpose()
            .map_err(|e| e.into_error(&self.name, RequestEffect::ReadOnly))
    }
}

#[async_trait]
impl StoreWrites for DynamoStore {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.write_setting(key, token, write, &[]).await
    }
}

impl DynamoStore {
    /// Writes `key` under `holder`'s token as [`Holder::write`] does (a lost answer sent again
    /// and its own earlier success recognised, a refusal explained, the outcome reported),
    /// also setting the write's own attributes in the same `UpdateItem`.
    pub async fn write_with(
        &self,
        holder: &Holder,
        key: &RecordKey,
        write: impl Into<DynamoWrite>,
    ) -> Result<Written> {
        let write = write.into();
        holder
            .write_by(self, key, write.write(), || {
                self.write_setting(key, holder.token(), write.write(), write.extras())
            })
            .await
    }

    /// The record `key` names and the item's other attributes (every attribute but the key,
    /// fence, state and payload), in one strongly consistent `GetItem`.
    pub async fn read_with(
        &self,
        key: &RecordKey,
    ) -> Result<Option<(Record, HashMap<String, AttributeValue>)>> {
        let Some(item) = self.get_item(key).await? else {
            return Ok(None);
        };
        let record = self
            .table
            .record_from(key, &item)
            .map_err(|e| e.into_error(&self.name, RequestEffect::ReadOnly))?;
        let roles = self.table.roles();
        let others = item
            .into_iter()
            .filter(|(name, _)| !roles.iter().any(|(attribute, _)| attribute == name))
            .collect();
        Ok(Some((record, others)))
    }

    /// [`Self::read_with`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `DynamoStore::read_with`")]
    #[doc(hidden)]
    pub async fn read_with_attributes(
        &self,
        key: &RecordKey,
    ) -> Result<Option<(Record, HashMap<String, AttributeValue>)>> {
        self.read_with(key).await
    }

    /// The item `key` names, by a strongly consistent `GetItem`.
    async fn get_item(&self, key: &RecordKey) -> Result<Option<HashMap<String, AttributeValue>>> {
        let item_key = self.table.key_item(key)?;
        let out = self
            .client
            .get_item()
            .table_name(self.table.name())
            .set_key(Some(item_key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(e, &self.name, RequestEffect::ReadOnly))?;
        Ok(out.item)
    }

    /// One fenced `UpdateItem` that also sets `attributes`.
    async fn write_setting(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
        attributes: &[(String, AttributeValue)],
    ) -> Result<Written> {
        check_item_size(&self.table, key, write)?;
        let item_key = self.table.key_item(key)?;
        let mut pin = StatePin::Absent;
        for _ in 0..PIN_ROUNDS {
            let expr = WriteExpression::of(&self.table, token, write, attributes, &pin)?;
            let sent = self
                .client
                .update_item()
                .table_name(self.table.name())
                .set_key(Some(item_key.clone()))
                .condition_expression(expr.condition)
                .set_update_expression(expr.update)
                .set_expression_attribute_names(Some(expr.names))
                .set_expression_attribute_values(Some(expr.values))
                .return_values(ReturnValue::AllOld)
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            let err = match sent {
                Ok(out) => {
                    let previous = out
                        .attributes()
                        .map(|item| self.table.record_from(key, item))
                        .transpose()
                        .map_err(|e| self.failed(e))?;
                    let record = write.apply(key, token, previous.as_ref());
                    return Ok(Written::new(previous.as_ref(), record));
                }
                Err(err) => err,
            };
            let SdkError::ServiceError(service) = &err else {
                return Err(classify(err, &self.name, RequestEffect::Writes));
            };
            let UpdateItemError::ConditionalCheckFailedException(failed) = service.err() else {
                return Err(classify(err, &self.name, RequestEffect::Writes));
            };
            let found = failed
                .item()
                .map(|item| self.table.record_from(key, item))
                .transpose()
                .map_err(|e| self.failed(e))?;
            write.decide(&self.name, key, token, found.as_ref())?;
            pin = repin(write, &pin, found.as_ref()).ok_or_else(|| {
                self.failed(DynamoFailure::Inconsistent(
                    "the condition refused a write its own item admits",
                ))
            })?;
        }
        Err(self.failed(DynamoFailure::Contended(
            "the item's state kept changing under the write",
        )))
    }
}

/// How many times a write without a state condition is pinned anew to a state the service
/// returned, before it gives up (each round means another writer changed the state between).
const PIN_ROUNDS: usize = 8;

/// The pin a write should try next after the service refused it under `pin` and returned
/// `found`, which `decide` admits: the state found, if that is not what was pinned. `None`
/// when the refusal cannot be the pin's (the store and the adapter disagree).
fn repin(write: &FencedWrite, pin: &StatePin, found: Option<&Record>) -> Option<StatePin> {
    if write.required_states().is_some() {
        return None;
    }
    let actual = found
        .and_then(|record| record.state.clone())
        .map_or(StatePin::Absent, StatePin::Is);
    (actual != *pin).then_some(actual)
}

//! A DynamoDB table as a fenced store: one conditional `UpdateItem` per write, and fenced
//! transactions.

use std::collections::HashSet;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    ConditionCheck, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use fencing_core::{
    Error, Fence, FencedStore, FencedWrite, FencingToken, InputKind, InvalidInput, Record,
    RecordKey, RequestEffect, Result, Written, check_store_name,
};

use crate::error::{DynamoFailure, classify};
use crate::expression::{WriteExpression, check_item_size};
use crate::item::{key_of, record_from};
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
/// back as [`Error::Ambiguous`], and [`Fence::write`] sends it again with the same token,
/// recognising its own first attempt if it landed. Left on, the SDK would re-send a write that
/// applied and report its refusal.
#[derive(Clone, Debug)]
pub struct DynamoStore {
    client: Client,
    table: DynamoTable,
    name: String,
}

impl DynamoStore {
    /// The fenced records of `table`, through `client` (built by the caller: any endpoint,
    /// credentials and HTTP stack).
    pub fn new(client: Client, table: DynamoTable) -> Self {
        let name = table.store_name();
        // A copy of the caller's client with the SDK's retries off, made once.
        let without_retries = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        DynamoStore {
            client: Client::from_conf(without_retries),
            table,
            name,
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
    /// by [`Fence`], with the same token, never by the SDK).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Applies up to [`MAX_TRANSACTION_ITEMS`] fenced writes under `fence`'s token in one
    /// `TransactWriteItems`: all or nothing.
    ///
    /// A refusal is mapped back to the write that caused it, with the fence found, exactly as
    /// a single write reports it (and through `fence`, so a counter that went backwards is a
    /// [`Error::TokenRegression`]); nothing was applied. An empty list, more than 100 writes,
    /// one key twice, or more than DynamoDB's 4 MB are refused before sending. The request's
    /// `ClientRequestToken` is derived from the token and the writes, so a retry after an
    /// ambiguous outcome (done here, as [`Fence::write`] does) is idempotent for the service's
    /// ten-minute window.
    pub async fn transact(
        &self,
        fence: &Fence<'_>,
        writes: &[(RecordKey, FencedWrite)],
    ) -> Result<()> {
        let token = fence.token();
        let items = self.transaction_items(token, writes)?;
        let request_token = request_token(&self.name, token, writes);
        let mut retries = 0;
        loop {
            let sent = self
                .client
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .client_request_token(&request_token)
                .send()
                .await;
            let err = match sent {
                Ok(_) => return Ok(()),
                Err(err) => err,
            };
            if let SdkError::ServiceError(service) = &err
                && let TransactWriteItemsError::TransactionCanceledException(cancelled) =
                    service.err()
            {
                let reasons = cancelled.cancellation_reasons();
                let refusal = self.cancellation(token, writes, reasons)?;
                return Err(fence.explain(refusal).await);
            }
            let err = classify(err, &self.name, RequestEffect::Writes);
            if err.is_ambiguous() && retries < fence.ambiguous_retries() {
                retries += 1;
                continue;
            }
            return Err(err);
        }
    }

    fn transaction_items(
        &self,
        token: FencingToken,
        writes: &[(RecordKey, FencedWrite)],
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
        for (key, write) in writes {
            if !distinct.insert(key) {
                return Err(invalid(
                    InputKind::RecordKey,
                    format!("{key:?} appears twice in one transaction"),
                ));
            }
            check_item_size(&self.table, key, write)?;
            bytes += key.len() + write.new_payload().map_or(0, <[u8]>::len) + 256;
            let expr = WriteExpression::of(&self.table, token, write)?;
            let built = |e| self.not_built(e);
            let item = match expr.update {
                Some(update) => TransactWriteItem::builder().update(
                    Update::builder()
                        .table_name(self.table.name())
                        .set_key(Some(key_of(&self.table, key)))
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
                        .set_key(Some(key_of(&self.table, key)))
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

    /// The refusal a cancelled transaction stands for: the first write whose condition failed,
    /// decided on the item as it stood.
    fn cancellation(
        &self,
        token: FencingToken,
        writes: &[(RecordKey, FencedWrite)],
        reasons: &[aws_sdk_dynamodb::types::CancellationReason],
    ) -> Result<Error> {
        for ((key, write), reason) in writes.iter().zip(reasons) {
            if reason.code() != Some("ConditionalCheckFailed") {
                continue;
            }
            let found = reason
                .item()
                .map(|item| record_from(&self.table, key, item))
                .transpose()
                .map_err(|e| self.corrupt(e))?;
            return match write.decide(&self.name, key, token, found.as_ref()) {
                Err(refusal) => Ok(refusal),
                Ok(()) => Err(self.corrupt(DynamoFailure::Inconsistent(
                    "the transaction refused a write its own item admits",
                ))),
            };
        }
        let codes: Vec<_> = reasons.iter().map(|r| r.code().unwrap_or("None")).collect();
        Err(Error::failed_request(
            &self.name,
            RequestEffect::Writes,
            false,
            format!("the transaction was cancelled, nothing applied: {codes:?}").into(),
        ))
    }

    fn corrupt(&self, failure: DynamoFailure) -> Error {
        failure.into_error(&self.name, RequestEffect::Writes)
    }

    fn not_built(&self, err: aws_sdk_dynamodb::error::BuildError) -> Error {
        Error::failed_request(&self.name, RequestEffect::ReadOnly, false, Box::new(err))
    }
}

fn invalid(kind: InputKind, detail: String) -> Error {
    InvalidInput::new(kind, detail).into()
}

/// The `ClientRequestToken` of a transaction: a name-based UUID of the store, the token and
/// every write, so the same transaction sent again carries the same one.
fn request_token(store: &str, token: FencingToken, writes: &[(RecordKey, FencedWrite)]) -> String {
    let mut described = format!("{store}\n{token}\n");
    for (key, write) in writes {
        described.push_str(&format!("{key:?} {write:?}\n"));
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

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        let out = self
            .client
            .get_item()
            .table_name(self.table.name())
            .set_key(Some(key_of(&self.table, key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(e, &self.name, RequestEffect::ReadOnly))?;
        out.item()
            .map(|item| record_from(&self.table, key, item))
            .transpose()
            .map_err(|e| e.into_error(&self.name, RequestEffect::ReadOnly))
    }

    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        check_item_size(&self.table, key, write)?;
        let expr = WriteExpression::of(&self.table, token, write)?;
        let sent = self
            .client
            .update_item()
            .table_name(self.table.name())
            .set_key(Some(key_of(&self.table, key)))
            .condition_expression(expr.condition)
            .set_update_expression(expr.update)
            .set_expression_attribute_names(Some(expr.names))
            .set_expression_attribute_values(Some(expr.values))
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(out) => {
                let previous = out
                    .attributes()
                    .map(|item| record_from(&self.table, key, item))
                    .transpose()
                    .map_err(|e| self.corrupt(e))?;
                let record = write.apply(key, token, previous.as_ref());
                Ok(Written::new(previous.as_ref(), record))
            }
            Err(err) => {
                if let SdkError::ServiceError(service) = &err
                    && let UpdateItemError::ConditionalCheckFailedException(failed) = service.err()
                {
                    let found = failed
                        .item()
                        .map(|item| record_from(&self.table, key, item))
                        .transpose()
                        .map_err(|e| self.corrupt(e))?;
                    write.decide(&self.name, key, token, found.as_ref())?;
                    return Err(self.corrupt(DynamoFailure::Inconsistent(
                        "the condition refused a write its own item admits",
                    )));
                }
                Err(classify(err, &self.name, RequestEffect::Writes))
            }
        }
    }
}

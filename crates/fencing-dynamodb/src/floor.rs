//! The highest fence in a table: the floor a token source must stay above.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use fencing_core::adapter::RequestEffect;
use fencing_core::{FenceFloor, FencingToken, InputKind, InvalidInput, ResourceName, Result};

use crate::error::classify;
use crate::item::{Fractions, token_from};
use crate::key::DynamoKeyType;
use crate::table::DynamoTable;

/// Reports the highest fence in a [`DynamoTable`], or among the items whose key starts with a
/// prefix derived from the resource (e.g. `m_4471/` for `settle:m_4471`).
///
/// **Cost**: a strongly consistent `Scan` of the whole table, projected to the fence (and
/// filtered by key prefix), paginated: every item is read and billed, filtered or not (one
/// read unit per 4 KB of item, doubled for consistency). Run it when seeding a token source
/// after a loss of state, not on a hot path.
#[derive(Clone)]
pub struct DynamoFenceFloor {
    client: Client,
    table: DynamoTable,
    prefix_of: Option<PrefixOf>,
}

/// The key prefix of the items one resource's lease protects.
type PrefixOf = Arc<dyn Fn(&ResourceName) -> String + Send + Sync>;

impl fmt::Debug for DynamoFenceFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamoFenceFloor")
            .field("table", &self.table)
            .field("per_resource", &self.prefix_of.is_some())
            .finish()
    }
}

impl DynamoFenceFloor {
    /// The highest fence in the whole table.
    pub fn new(client: Client, table: DynamoTable) -> Self {
        DynamoFenceFloor {
            client,
            table,
            prefix_of: None,
        }
    }

    /// The highest fence among items whose key begins with `prefix_of(resource)`: the prefix
    /// is matched against the partition key, which must then be a String (on a table with a
    /// sort key, the prefix of the record key's partition part).
    pub fn per_resource(
        client: Client,
        table: DynamoTable,
        prefix_of: impl Fn(&ResourceName) -> String + Send + Sync + 'static,
    ) -> Self {
        DynamoFenceFloor {
            client,
            table,
            prefix_of: Some(Arc::new(prefix_of)),
        }
    }
}

#[async_trait]
impl FenceFloor for DynamoFenceFloor {
    async fn max_fence(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let store = self.table.store_name();
        if self.prefix_of.is_some() && self.table.key_type() != DynamoKeyType::String {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!(
                    "{store}: a key prefix needs a String partition key, not {:?} \
                     (DynamoFenceFloor::new scans the whole table)",
                    self.table.key_type()
                ),
            )
            .into());
        }
        let mut highest = None;
        let mut start = None;
        loop {
            let mut scan = self
                .client
                .scan()
                .table_name(self.table.name())
                .consistent_read(true)
                .projection_expression("#fence")
                .expression_attribute_names("#fence", self.table.fence_attribute())
                .set_exclusive_start_key(start);
            if let Some(prefix_of) = &self.prefix_of {
                scan = scan
                    .filter_expression("begins_with(#key, :prefix)")
                    .expression_attribute_names("#key", self.table.key_attribute())
                    .expression_attribute_values(":prefix", AttributeValue::S(prefix_of(resource)));
            }
            let page = scan
                .send()
                .await
                .map_err(|e| classify(e, &store, RequestEffect::ReadOnly))?;
            for item in page.items() {
                let fence = token_from(
                    "fence",
                    item.get(self.table.fence_attribute()),
                    Fractions::RoundUp,
                )
                .map_err(|e| e.into_error(&store, RequestEffect::ReadOnly))?;
                highest = highest.max(fence);
            }
            match page.last_evaluated_key() {
                Some(last) if !last.is_empty() => start = Some(last.clone()),
                _ => return Ok(highest),
            }
        }
    }
}

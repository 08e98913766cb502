//! `MAX(fence)` over a fenced table: the floor a token source must stay above.

use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::adapter::{FloorFilter, RequestEffect};
use fencing_core::{FenceFloor, FencingToken, InvalidInput, ResourceName, Result};
use sqlx::{AssertSqlSafe, MySqlPool};

use crate::checkout::Checkout;
use crate::ident::MySqlIdent;
use crate::store::fence_from_db;
use crate::table::MySqlTable;

/// Reports `MAX(fence)` over a [`MySqlTable`], or only over the rows one lease protects
/// (e.g. `merchant_id = 'm_4471'`, fixed or derived from the resource name). Seed any token
/// source from it with [`fencing_core::seed_from_floors`].
#[derive(Clone, Debug)]
pub struct MySqlFenceFloor {
    pool: MySqlPool,
    store: String,
    sql: String,
    filter: Option<FloorFilter>,
}

impl MySqlFenceFloor {
    /// The highest fence in the whole table.
    pub fn new(pool: MySqlPool, table: &MySqlTable) -> Self {
        MySqlFenceFloor {
            pool,
            store: table.store_name(),
            sql: format!(
                "SELECT CAST(MAX(COALESCE({}, 0)) AS SIGNED) FROM {}",
                table.fence_column(),
                table.name()
            ),
            filter: None,
        }
    }

    /// The highest fence among rows whose `column` equals `value`, whatever the resource.
    pub fn filtered(
        pool: MySqlPool,
        table: &MySqlTable,
        column: &str,
        value: impl Into<String>,
    ) -> Result<Self, InvalidInput> {
        Self::with_filter(pool, table, column, FloorFilter::Fixed(value.into()))
    }

    /// The highest fence among rows whose `column` equals `value_of(resource)`, e.g. the
    /// merchant id taken from `settle:m_4471`.
    pub fn per_resource(
        pool: MySqlPool,
        table: &MySqlTable,
        column: &str,
        value_of: impl Fn(&ResourceName) -> String + Send + Sync + 'static,
    ) -> Result<Self, InvalidInput> {
        Self::with_filter(
            pool,
            table,
            column,
            FloorFilter::PerResource(Arc::new(value_of)),
        )
    }

    fn with_filter(
        pool: MySqlPool,
        table: &MySqlTable,
        column: &str,
        filter: FloorFilter,
    ) -> Result<Self, InvalidInput> {
        let column = MySqlIdent::new(column)?;
        let mut floor = Self::new(pool, table);
        floor.sql = format!("{} WHERE {column} = ?", floor.sql);
        floor.filter = Some(filter);
        Ok(floor)
    }
}

#[async_trait]
impl FenceFloor for MySqlFenceFloor {
    async fn max_fence(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let query = sqlx::query_scalar(AssertSqlSafe(self.sql.clone()));
        let query = match &self.filter {
            Some(filter) => query.bind(filter.value_for(resource)),
            None => query,
        };
        Checkout::run(&self.pool, async |conn| {
            let max: Option<i64> = query.fetch_one(conn).await?;
            max.map_or(Ok(None), fence_from_db)
        })
        .await
        .map_err(|failure| failure.into_error(&self.store, RequestEffect::ReadOnly))
    }
}

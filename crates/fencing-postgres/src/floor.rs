//! `MAX(fence)` over a fenced table: the floor a token source must stay above.

use async_trait::async_trait;
use fencing_core::{FenceFloor, FencingToken, InvalidInput, Result};
use sqlx::{AssertSqlSafe, PgPool, Row};

use crate::error::PgFailure;
use crate::ident::Ident;
use crate::store::fence_from_db;
use crate::table::FencedTable;

/// Reports `MAX(fence)` over a [`FencedTable`], optionally only over the rows one lease
/// protects (e.g. `merchant_id = 'm_4471'`). Seed any token source from it with
/// [`fencing_core::seed_from_floors`].
#[derive(Clone, Debug)]
pub struct PgFenceFloor {
    pool: PgPool,
    store: String,
    sql: String,
    filter: Option<String>,
}

impl PgFenceFloor {
    /// The highest fence in the whole table.
    pub fn new(pool: PgPool, table: &FencedTable) -> Self {
        PgFenceFloor {
            pool,
            store: table.store_name(),
            sql: table.sql().max_fence.to_string(),
            filter: None,
        }
    }

    /// The highest fence among rows whose `column` equals `value`.
    pub fn filtered(
        pool: PgPool,
        table: &FencedTable,
        column: &str,
        value: impl Into<String>,
    ) -> Result<Self, InvalidInput> {
        let column = Ident::new(column)?;
        let mut floor = Self::new(pool, table);
        floor.sql = format!("{} WHERE {column} = $1", floor.sql);
        floor.filter = Some(value.into());
        Ok(floor)
    }
}

#[async_trait]
impl FenceFloor for PgFenceFloor {
    async fn max_fence(&self) -> Result<Option<FencingToken>> {
        let query = sqlx::query(AssertSqlSafe(self.sql.as_str()));
        let query = match &self.filter {
            Some(value) => query.bind(value.as_str()),
            None => query,
        };
        let decoded = async {
            let row = query.fetch_one(&self.pool).await?;
            let max: Option<i64> = row.try_get(0)?;
            max.map_or(Ok(None), fence_from_db)
        };
        decoded
            .await
            .map_err(|e: PgFailure| e.into_error(&self.store, false))
    }
}

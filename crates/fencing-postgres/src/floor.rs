//! `MAX(fence)` over a fenced table: the floor a token source must stay above.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::adapter::{FloorFilter, RequestEffect};
use fencing_core::{FenceFloor, FencingToken, InvalidInput, ResourceName, Result};
use sqlx::{PgPool, Row};

use crate::decode::fence_from_db;
use crate::ident::PgIdent;
use crate::session::Session;
use crate::table::PgTable;

/// Reports `MAX(fence)` over a [`PgTable`], or only over the rows one lease protects
/// (e.g. `merchant_id = 'm_4471'`, fixed or derived from the resource name). Seed any token
/// source from it with [`fencing_core::seed_from_floors`].
#[derive(Clone)]
pub struct PgFenceFloor {
    pool: PgPool,
    store: String,
    sql: String,
    filter: Option<FloorFilter>,
    session: Session,
}

impl fmt::Debug for PgFenceFloor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgFenceFloor")
            .field("store", &self.store)
            .field("sql", &self.sql)
            .finish_non_exhaustive()
    }
}

impl PgFenceFloor {
    /// The highest fence in the whole table.
    pub fn new(pool: PgPool, table: &PgTable) -> Self {
        PgFenceFloor {
            pool,
            store: table.store_name(),
            sql: format!(
                "SELECT MAX(COALESCE({}, 0)) FROM {}",
                table.fence_column(),
                table.name()
            ),
            filter: None,
            session: Session::default(),
        }
    }

    /// The same floor for a pooler in transaction mode (PgBouncer's `pool_mode =
    /// transaction`): no named prepared statement, each read inside a transaction.
    pub fn for_transaction_pooling(mut self) -> Self {
        self.session = Session::transaction_pooling();
        self
    }

    /// The highest fence among rows whose `column` equals `value`, whatever the resource.
    pub fn filtered(
        pool: PgPool,
        table: &PgTable,
        column: &str,
        value: impl Into<String>,
    ) -> Result<Self, InvalidInput> {
        Self::with_filter(pool, table, column, FloorFilter::Fixed(value.into()))
    }

    /// The highest fence among rows whose `column` equals `value_of(resource)`, e.g. the
    /// merchant id taken from `settle:m_4471`.
    pub fn per_resource(
        pool: PgPool,
        table: &PgTable,
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
        pool: PgPool,
        table: &PgTable,
        column: &str,
        filter: FloorFilter,
    ) -> Result<Self, InvalidInput> {
        let column = PgIdent::new(column)?;
        let mut floor = Self::new(pool, table);
        floor.sql = format!("{} WHERE {column} = $1", floor.sql);
        floor.filter = Some(filter);
        Ok(floor)
    }
}

#[async_trait]
impl FenceFloor for PgFenceFloor {
    async fn max_fence(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let query = self.session.query(self.sql.as_str());
        let query = match &self.filter {
            Some(filter) => query.bind(filter.value_for(resource)),
            None => query,
        };
        self.session
            .on_pool(&self.pool, RequestEffect::ReadOnly, async |conn| {
                let row = query.fetch_one(conn).await?;
                let max: Option<i64> = row.try_get(0)?;
                max.map_or(Ok(None), fence_from_db)
            })
            .await
            .map_err(|(failure, effect)| failure.into_error(&self.store, effect))
    }
}

//! A durable token source: one row per resource in a counter table.

use async_trait::async_trait;
use fencing_core::adapter::RequestEffect;
use fencing_core::{Error, FencingToken, ResourceName, Result, TokenSource};
use sqlx::{PgPool, Row};

use crate::ddl::run_ddl;
use crate::error::PgFailure;
use crate::ident::PgQualifiedName;
use crate::session::Session;

/// Tokens from a table of counters, `(resource TEXT PRIMARY KEY, value BIGINT)`: each `next` is
/// one `INSERT … ON CONFLICT DO UPDATE SET value = value + 1 RETURNING value`. Unlike a Redis
/// counter without persistence, it cannot go backwards.
#[derive(Clone, Debug)]
pub struct PgTokenSource {
    pool: PgPool,
    table: PgQualifiedName,
    store: String,
    next: String,
    current: String,
    advance: String,
    session: Session,
}

impl PgTokenSource {
    /// Counters in `table` (create it with [`Self::create_if_missing`]).
    pub fn new(pool: PgPool, table: PgQualifiedName) -> Self {
        let next = format!(
            "INSERT INTO {table} AS t (resource, value) VALUES ($1, 1) \
             ON CONFLICT (resource) DO UPDATE SET value = t.value + 1 \
             WHERE t.value < {max} RETURNING value",
            max = i64::MAX
        );
        PgTokenSource {
            store: table.store_name(),
            current: format!("SELECT value FROM {table} WHERE resource = $1"),
            advance: format!(
                "INSERT INTO {table} AS t (resource, value) VALUES ($1, $2) \
                 ON CONFLICT (resource) DO UPDATE SET value = GREATEST(t.value, EXCLUDED.value) \
                 RETURNING value"
            ),
            next,
            table,
            pool,
            session: Session::default(),
        }
    }

    /// The same source for a pooler in transaction mode (PgBouncer's `pool_mode =
    /// transaction`): no named prepared statement, each request inside a transaction. A
    /// [`crate::PgLease`] on this source talks the same way.
    pub fn for_transaction_pooling(mut self) -> Self {
        self.session = Session::transaction_pooling();
        self
    }

    pub(crate) fn session(&self) -> Session {
        self.session
    }

    /// The counter table.
    pub fn table(&self) -> &PgQualifiedName {
        &self.table
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates the schema and the counter table, if missing.
    pub async fn create_if_missing(&self) -> Result<()> {
        let ddl = format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; \
             CREATE TABLE IF NOT EXISTS {table} (resource TEXT PRIMARY KEY, \
             value BIGINT NOT NULL CHECK (value > 0))",
            schema = self.table.schema(),
            table = self.table,
        );
        run_ddl(&self.pool, &self.store, ddl).await
    }

    /// Runs one counter statement; `effect` says whether it changes the counter.
    async fn value(
        &self,
        sql: &str,
        resource: &ResourceName,
        floor: Option<i64>,
        effect: RequestEffect,
    ) -> Result<Option<FencingToken>> {
        let query = self.session.query(sql).bind(resource.as_str());
        let query = match floor {
            Some(floor) => query.bind(floor),
            None => query,
        };
        self.session
            .on_pool(&self.pool, effect, async |conn| {
                let Some(row) = query.fetch_optional(conn).await? else {
                    return Ok(None);
                };
                let value: i64 = row.try_get(0)?;
                FencingToken::from_i64(value)
                    .map(Some)
                    .map_err(|e| PgFailure::Corrupt(format!("counter value {value}: {e}")))
            })
            .await
            .map_err(|(failure, effect)| failure.into_error(&self.store, effect))
    }
}

#[async_trait]
impl TokenSource for PgTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        self.value(&self.next, resource, None, RequestEffect::Writes)
            .await?
            .ok_or_else(|| Error::TokenExhausted {
                resource: resource.clone(),
            })
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        self.value(&self.current, resource, None, RequestEffect::ReadOnly)
            .await
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        let value = self
            .value(
                &self.advance,
                resource,
                Some(floor.as_i64()),
                RequestEffect::Writes,
            )
            .await?;
        value.ok_or_else(|| {
            PgFailure::Inconsistent("an upsert returned no row")
                .into_error(&self.store, RequestEffect::Writes)
        })
    }
}

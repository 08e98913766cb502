//! A durable token source: one row per resource in a counter table.

use async_trait::async_trait;
use fencing_core::adapter::RequestEffect;
use fencing_core::{
    CounterHistory, Error, FencingToken, InvalidInput, RateBound, ResourceName, Result, TokenSource,
};
use sqlx::{PgPool, Row};

use crate::ddl::run_ddl;
use crate::error::PgFailure;
use crate::ident::PgQualifiedName;
use crate::session::Session;

/// Tokens from a table of counters, `(resource TEXT PRIMARY KEY, value BIGINT, history TEXT,
/// written_at TIMESTAMPTZ)`: each `next` is one `INSERT … ON CONFLICT DO UPDATE SET value =
/// value + 1 … RETURNING value`.
///
/// **Failovers and restores.** A row is bound to the server history that last wrote it: the
/// timeline (new at every promotion of a standby and at the end of every archive recovery) and
/// the postmaster's start time (new at every start, a restored backup's included), read in the
/// same statement. A counter read on another history may be behind the tokens issued (an
/// asynchronous standby promoted before it received the last increments, a base backup
/// restored), so the statement raises it first by [`Self::with_max_rate`] tokens for every
/// second since the row was last written (one second more for clocks a little apart): every
/// increment lost happened after that write, at most that many a second. One statement
/// still; a failover or restart that lost nothing costs a jump in the numbers, never safety.
/// The bound assumes the clocks of the servers the database moves between agree to within
/// the seconds a failover takes, and that no counter is incremented faster than the rate (a
/// row's increments serialise on its lock: tens of thousands a second at most).
#[derive(Clone, Debug)]
pub struct PgTokenSource {
    pool: PgPool,
    table: PgQualifiedName,
    store: String,
    max_rate: RateBound,
    next: String,
    current: String,
    advance: String,
    session: Session,
}

/// The server history a statement runs on and the time it reads, as one row `h(history, at)`:
/// the timeline of the WAL being written (which fails on a standby: a standby issues nothing)
/// and the postmaster's start time.
const HERE: &str = "(SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) || '/' || \
                    pg_postmaster_start_time()::text AS history, clock_timestamp() AS at) h";

impl PgTokenSource {
    /// The rate bound unless told otherwise: 2^20 tokens a second per resource.
    pub const DEFAULT_MAX_RATE: u64 = RateBound::DEFAULT.per_second();

    /// Counters in `table` (create it with [`Self::create_if_missing`]).
    pub fn new(pool: PgPool, table: PgQualifiedName) -> Self {
        PgTokenSource {
            store: table.store_name(),
            current: format!("SELECT value FROM {table} WHERE resource = $1"),
            advance: format!(
                "INSERT INTO {table} AS t (resource, value, history, written_at) \
                 SELECT $1, $2, h.history, h.at FROM {HERE} \
                 ON CONFLICT (resource) DO UPDATE SET value = GREATEST(t.value, EXCLUDED.value) \
                 RETURNING value"
            ),
            next: String::new(),
            max_rate: RateBound::DEFAULT,
            table,
            pool,
            session: Session::default(),
        }
        .with_statements()
    }

    /// Counters of epochs in `table`, for the tokens of a Redis lease
    /// (`RedisLease::new(conn, Arc::new(PgTokenSource::epochs(pool, table)))`): each number
    /// is an epoch, opened when a Redis counter was lost or moved, at most once a second or so
    /// per resource, so a failover of this database raises them by one a second
    /// ([`Self::with_max_rate`]), and they stay below the 2^31 epochs a Redis token holds.
    pub fn epochs(pool: PgPool, table: PgQualifiedName) -> Self {
        PgTokenSource {
            max_rate: RateBound::EPOCHS,
            ..Self::new(pool, table)
        }
        .with_statements()
    }

    /// The same source, raising a counter found on another server history by `per_second`
    /// for every second since its row was last written (1 ..= 2^32). The epochs of a Redis
    /// lease count 1 ([`Self::epochs`]).
    pub fn with_max_rate(self, per_second: u64) -> Result<Self, InvalidInput> {
        Ok(PgTokenSource {
            max_rate: RateBound::new(per_second)?,
            ..self
        }
        .with_statements())
    }

    fn with_statements(mut self) -> Self {
        self.next = self.increment(&format!("SELECT $1, 1, h.history, h.at FROM {HERE}"));
        self
    }

    /// The upsert that issues the next token of the resource whose row `rows` gives
    /// (`resource, 1, history, at`), raised first where the row is on another history, and
    /// returns it (no row at `i64::MAX`).
    pub(crate) fn increment(&self, rows: &str) -> String {
        format!(
            "INSERT INTO {table} AS t (resource, value, history, written_at) {rows} \
             ON CONFLICT (resource) DO UPDATE SET \
             value = LEAST(t.value::numeric + 1 + CASE \
                 WHEN t.history IS NULL OR t.history = EXCLUDED.history THEN 0 \
                 ELSE {rate}::numeric * (ceil(GREATEST(extract(epoch FROM \
                     EXCLUDED.written_at - t.written_at), 0)) + 1) END, {max})::int8, \
             history = EXCLUDED.history, written_at = EXCLUDED.written_at \
             WHERE t.value < {max} RETURNING value",
            table = self.table,
            rate = self.max_rate.per_second(),
            max = i64::MAX
        )
    }

    /// The server history the counter of `resource` is bound to, and the history of the
    /// server answering: where they differ, the next token is raised first. On a standby, an
    /// error (it issues nothing).
    pub async fn history(&self, resource: &ResourceName) -> Result<CounterHistory> {
        let sql = format!(
            "SELECT (SELECT history FROM {table} WHERE resource = $1), h.history FROM {HERE}",
            table = self.table
        );
        let query = self.session.query(sql).bind(resource.as_str());
        self.session
            .on_pool(&self.pool, RequestEffect::ReadOnly, async |conn| {
                let row = query.fetch_one(conn).await?;
                Ok(CounterHistory {
                    bound: row.try_get(0)?,
                    serving: row.try_get(1)?,
                })
            })
            .await
            .map_err(|(failure, effect)| failure.into_error(&self.store, effect))
    }

    /// HERE, for statements of the lease that join it.
    pub(crate) fn here() -> &'static str {
        HERE
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

    /// Creates the schema and the counter table, if missing; adds the columns that bind a
    /// row to its server history to a table made by an earlier version (its rows are bound at
    /// their next increment).
    pub async fn create_if_missing(&self) -> Result<()> {
        let ddl = format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; \
             CREATE TABLE IF NOT EXISTS {table} (resource TEXT PRIMARY KEY, \
             value BIGINT NOT NULL CHECK (value > 0), history TEXT, written_at TIMESTAMPTZ); \
             ALTER TABLE {table} ADD COLUMN IF NOT EXISTS history TEXT, \
             ADD COLUMN IF NOT EXISTS written_at TIMESTAMPTZ",
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

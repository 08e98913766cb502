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
/// value + 1 … RETURNING value`, committed durably (a session with `synchronous_commit = off`
/// is overruled for that statement: a token is issued only from a commit that survives a
/// crash).
///
/// **Failovers and restores.** A row is bound to the server history that last wrote it: the
/// timeline (new at every promotion of a standby and at the end of every archive recovery) and
/// the postmaster's start time (new at every start, a restored backup's included), read in the
/// same statement. A counter read on another history may be behind the tokens issued (an
/// asynchronous standby promoted before it received the last increments, a base backup
/// restored), so the statement raises it first by [`Self::with_max_rate`] tokens for every
/// second since the row was last written (one second more for clocks a little apart): every
/// increment lost happened after that write, at most that many a second.
///
/// A counter the new history does not have at all (first used during the replication lag,
/// or after the backup was taken) is covered the same way by the table's own binding: the row
/// of the empty resource name, which [`Self::create_if_missing`] writes, holds the first token
/// a counter new to the table starts at and the history it holds on. The first statement on
/// another history raises that start by the rate bound for every second since the binding was
/// last written (every counter the lost history created started at the old start after it),
/// so a counter missing on the new history starts above every token a lost one issued. The
/// start grows with the time between histories, never faster than the bound.
///
/// One statement still; a failover or restart that lost nothing costs a jump in the numbers,
/// never safety. The bound assumes the clocks of the servers the database moves between agree
/// to within the seconds a failover takes, and that no counter is incremented faster than the
/// rate (a row's increments serialise on its lock and a flushed commit: tens of thousands a
/// second at most).
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

/// The server history a statement runs on and the time it reads, as the row of `h(history,
/// at)`: the timeline of the WAL being written (which fails on a standby: a standby issues
/// nothing) and the postmaster's start time. Evaluating it also makes the statement's commit
/// durable where the session turned `synchronous_commit` off.
const HERE: &str = "SELECT substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) || '/' || \
                    pg_postmaster_start_time()::text AS history, clock_timestamp() AS at, \
                    CASE WHEN current_setting('synchronous_commit') = 'off' \
                    THEN set_config('synchronous_commit', 'on', true) END AS durable";

/// The resource name of the row that binds the whole table: no [`ResourceName`] is empty.
const TABLE_BINDING: &str = "''";

/// Whether the row `t` an upsert conflicts with is on the history `EXCLUDED` is written on (a
/// row of an earlier version, bound to none, counts as on it).
pub(crate) const ON_ITS_HISTORY: &str = "(t.history IS NULL OR t.history = EXCLUDED.history)";

impl PgTokenSource {
    /// The rate bound unless told otherwise: 2^20 tokens a second per resource.
    pub const DEFAULT_MAX_RATE: u64 = RateBound::DEFAULT.per_second();

    /// Counters in `table` (create it with [`Self::create_if_missing`]).
    pub fn new(pool: PgPool, table: PgQualifiedName) -> Self {
        PgTokenSource {
            store: table.store_name(),
            current: format!("SELECT value FROM {table} WHERE resource = $1"),
            next: String::new(),
            advance: String::new(),
            max_rate: RateBound::DEFAULT,
            table,
            pool,
            session: Session::default(),
        }
        .with_statements()
    }

    /// The same source, raising a counter found on another server history by `per_second`
    /// for every second since its row was last written (1 ..= 2^32).
    pub fn with_max_rate(self, per_second: u64) -> Result<Self, InvalidInput> {
        Ok(PgTokenSource {
            max_rate: RateBound::new(per_second)?,
            ..self
        }
        .with_statements())
    }

    /// The same source with the rate bound `max_rate`.
    pub(crate) fn with_rate_bound(self, max_rate: RateBound) -> Self {
        PgTokenSource { max_rate, ..self }.with_statements()
    }

    fn with_statements(mut self) -> Self {
        let (preamble, bound) = (self.preamble(), self.bound());
        self.next = format!(
            "WITH {preamble}, issued AS ({increment}) {bound}",
            increment = self.increment("")
        );
        self.advance = format!(
            "WITH {preamble}, issued AS (\
                 INSERT INTO {table} AS t (resource, value, history, written_at) \
                 SELECT $1, LEAST(GREATEST($2::numeric, f.start - 1), {max})::int8, \
                     h.history, h.at FROM h, f \
                 ON CONFLICT (resource) DO UPDATE SET value = GREATEST(t.value, EXCLUDED.value) \
                 RETURNING value) {bound}",
            table = self.table,
            max = i64::MAX
        );
        self
    }

    /// The common table expressions every counter statement starts with: `h`, the history
    /// here ([`HERE`]); `m`, the table's binding row; `f`, the first token of a counter new to
    /// the table (`start`), raised by the rate bound where the binding is on another history
    /// (`moved`); and `bind`, which moves the binding to this history with that start.
    pub(crate) fn preamble(&self) -> String {
        format!(
            "h AS MATERIALIZED ({HERE}), \
             m AS (SELECT value, history, written_at FROM {table} WHERE resource = {TABLE_BINDING}), \
             f AS MATERIALIZED (SELECT CASE WHEN m.history = h.history THEN m.value::numeric \
                 ELSE {raised} END AS start, m.history IS DISTINCT FROM h.history AS moved \
                 FROM h, m), \
             bind AS (UPDATE {table} AS b SET value = LEAST(f.start, {max})::int8, \
                 history = h.history, written_at = h.at FROM f, h \
                 WHERE b.resource = {TABLE_BINDING} AND f.moved \
                 AND b.history IS DISTINCT FROM h.history RETURNING 1)",
            table = self.table,
            raised = self.raised("m.value", "h.at", "m.written_at"),
            max = i64::MAX,
        )
    }

    /// The statement's answer after its `issued` expression: the token (none where the
    /// counter is at `i64::MAX`), and whether the table has its binding.
    fn bound(&self) -> &'static str {
        "SELECT (SELECT value FROM issued), EXISTS (SELECT 1 FROM m)"
    }

    /// `value` raised by the rate bound for the time from `written_at` to `at` (to the
    /// microsecond) and one second more, rounded up to a whole token (numeric), as
    /// [`RateBound::raise`] does.
    fn raised(&self, value: &str, at: &str, written_at: &str) -> String {
        format!(
            "{value}::numeric + ceil({rate}::numeric * \
             (GREATEST(extract(epoch FROM {at} - {written_at}), 0) + 1))",
            rate = self.max_rate.per_second()
        )
    }

    /// The upsert (after [`Self::preamble`]) that issues the next token of the resource `$1`,
    /// where `also_from` (`", free"`: more FROM items) yields a row: one above the counter,
    /// raised first where the row is on another history; a counter new to the table starts at
    /// the table's start. Returns it (no row at `i64::MAX`).
    pub(crate) fn increment(&self, also_from: &str) -> String {
        format!(
            "INSERT INTO {table} AS t (resource, value, history, written_at) \
             SELECT $1, LEAST(f.start, {max})::int8, h.history, h.at FROM h, f{also_from} \
             ON CONFLICT (resource) DO UPDATE SET value = LEAST(t.value::numeric + 1 + \
                 CASE WHEN {own} THEN 0 ELSE {raise} END, {max})::int8, \
             history = EXCLUDED.history, written_at = EXCLUDED.written_at \
             WHERE t.value < {max} RETURNING value",
            table = self.table,
            max = i64::MAX,
            own = ON_ITS_HISTORY,
            raise = self.moved_raise(),
        )
    }

    /// What a row `t` found on another history than `EXCLUDED`'s is raised by (numeric).
    pub(crate) fn moved_raise(&self) -> String {
        self.raised("0", "EXCLUDED.written_at", "t.written_at")
    }

    /// The server history the counter of `resource` is bound to, and the history of the
    /// server answering: where they differ, the next token is raised first. On a standby, an
    /// error (it issues nothing).
    pub async fn history(&self, resource: &ResourceName) -> Result<CounterHistory> {
        let sql = format!(
            "SELECT (SELECT history FROM {table} WHERE resource = $1), h.history FROM ({HERE}) h",
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

    /// Creates the schema and the counter table, if missing, with the row that binds the
    /// whole table to the server history it is on; adds the columns and the row that bind
    /// counters to a table made by an earlier version (its rows are bound at their next
    /// increment, and counters it lacks start at 1 until the table's first new history).
    pub async fn create_if_missing(&self) -> Result<()> {
        let ddl = format!(
            "CREATE SCHEMA IF NOT EXISTS {schema}; \
             CREATE TABLE IF NOT EXISTS {table} (resource TEXT PRIMARY KEY, \
             value BIGINT NOT NULL CHECK (value > 0), history TEXT, written_at TIMESTAMPTZ); \
             ALTER TABLE {table} ADD COLUMN IF NOT EXISTS history TEXT, \
             ADD COLUMN IF NOT EXISTS written_at TIMESTAMPTZ; \
             INSERT INTO {table} (resource, value, history, written_at) \
             SELECT {TABLE_BINDING}, 1, h.history, h.at FROM ({HERE}) h \
             ON CONFLICT (resource) DO NOTHING",
            schema = self.table.schema(),
            table = self.table,
        );
        run_ddl(&self.pool, &self.store, ddl).await
    }

    /// Runs one counter statement; `effect` says whether it changes the counter. A statement
    /// that writes answers the token (none at `i64::MAX`) and whether the table has its
    /// binding; without it, nothing was written and the table must be created again.
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
        let table = &self.table;
        self.session
            .on_pool(&self.pool, effect, async |conn| {
                let Some(row) = query.fetch_optional(conn).await? else {
                    return Ok(None);
                };
                if effect == RequestEffect::Writes && !row.try_get::<bool, _>(1)? {
                    return Err(unbound(table));
                }
                let Some(value) = row.try_get::<Option<i64>, _>(0)? else {
                    return Ok(None);
                };
                decode_token(value).map(Some)
            })
            .await
            .map_err(|(failure, effect)| failure.into_error(&self.store, effect))
    }

    /// The name errors carry.
    pub(crate) fn store(&self) -> &str {
        &self.store
    }
}

/// A counter value read back: a token, or corrupt.
pub(crate) fn decode_token(value: i64) -> Result<FencingToken, PgFailure> {
    FencingToken::from_i64(value)
        .map_err(|e| PgFailure::Corrupt(format!("counter value {value}"), e))
}

/// The failure of a statement on a counter table without its binding row.
pub(crate) fn unbound(table: &PgQualifiedName) -> PgFailure {
    PgFailure::Schema(format!(
        "the counter table {table} has no binding row (resource ''), which keeps a counter \
         it lacks after a failover from starting again below tokens already issued: run \
         create_if_missing() once (it adds it to a table made by an earlier version)"
    ))
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

    /// Asked only when the pool has a connection idle or room to open one: with neither, the
    /// caller's transaction may hold the one it would wait for.
    async fn current_at_once(
        &self,
        resource: &ResourceName,
    ) -> Option<Result<Option<FencingToken>>> {
        let room = self.pool.size() < self.pool.options().get_max_connections();
        if self.pool.num_idle() == 0 && !room {
            return None;
        }
        Some(self.current(resource).await)
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

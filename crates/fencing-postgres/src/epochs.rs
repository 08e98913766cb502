//! A durable source of epochs for the tokens of a Redis lease.

use std::time::Duration;

use async_trait::async_trait;
use fencing_core::adapter::RequestEffect;
use fencing_core::adapter::history::{EpochTry, open_patiently};
use fencing_core::{
    CounterHistory, EpochSource, FencingToken, RateBound, ResourceName, Result, TokenSource,
};
use sqlx::{PgPool, Row};

use crate::ddl::run_ddl;
use crate::ident::PgQualifiedName;
use crate::tokens::{ON_ITS_HISTORY, PgTokenSource, decode_token, unbound};

/// Epochs in a table of counters, for the tokens of a Redis lease
/// (`RedisLease::new(conn, Arc::new(PgEpochSource::new(pool, table)))`): the rows of a
/// [`PgTokenSource`] with the opening each epoch was opened for.
///
/// An epoch is opened when a Redis counter is found lost, once per loss however many clients
/// find it at once (they name the loss alike: [`EpochSource::open`] returns the epoch already
/// opened for that opening), and at most once a second for a resource: an opening that comes
/// sooner waits out the rest of the second (by the database's clock). That is the rate a
/// failover of this database raises the epochs by ([`RateBound::EPOCHS`]): every epoch opened
/// on a lost history lies below the first one opened after it, for a resource whose row the new
/// history kept as for one it lacks. An epoch raised onto a new history (a row found on
/// another, or a row it lacks started from a binding raised onto it less than a second ago)
/// is opened only a second after that raise, so a history that follows within that second (a
/// backup restored just after a restart) raises the row above every epoch this one hands out.
/// The epochs stay far below the 2^31 a Redis token holds (a second of the database's life is
/// at most one epoch).
#[derive(Clone, Debug)]
pub struct PgEpochSource {
    counters: PgTokenSource,
    open: String,
}

impl PgEpochSource {
    /// Epochs in `table` (create it with [`Self::create_if_missing`]).
    pub fn new(pool: PgPool, table: PgQualifiedName) -> Self {
        let counters = PgTokenSource::new(pool, table).with_rate_bound(RateBound::EPOCHS);
        // The core's `epoch_step` in one statement: a row on its own history opens the next
        // epoch a second after the last; a row on another is raised and held (written with no
        // opening); a missing row starts at the binding, once the binding has been on this
        // history for a second (`bind` moves it here all the same). The answer: the epoch
        // opened, whether the table has its binding, the epoch already opened for this
        // opening, how long to wait, and whether the counter is at its end.
        let open = format!(
            "WITH {preamble}, \
             was AS (SELECT value, opened_for, written_at FROM {table} WHERE resource = $1), \
             issued AS (\
                 INSERT INTO {table} AS t (resource, value, history, written_at, opened_for) \
                 SELECT $1, LEAST(f.start, {max})::int8, h.history, h.at, $2 FROM h, f, m \
                 WHERE EXISTS (SELECT 1 FROM was) \
                     OR (NOT f.moved AND (m.written_at IS NULL \
                         OR m.written_at <= h.at - interval '1 second')) \
                 ON CONFLICT (resource) DO UPDATE SET value = LEAST(t.value::numeric + \
                     CASE WHEN {own} THEN 1 ELSE {raise} END, {max})::int8, \
                     history = EXCLUDED.history, written_at = EXCLUDED.written_at, \
                     opened_for = CASE WHEN {own} THEN $2 END \
                 WHERE t.value < {max} AND t.opened_for IS DISTINCT FROM $2 \
                     AND (NOT {own} OR t.written_at IS NULL \
                         OR EXCLUDED.written_at >= t.written_at + interval '1 second') \
                 RETURNING value, opened_for) \
             SELECT (SELECT value FROM issued WHERE opened_for IS NOT NULL), \
                 EXISTS (SELECT 1 FROM m), \
                 (SELECT value FROM was WHERE opened_for = $2), \
                 CASE WHEN EXISTS (SELECT 1 FROM issued) THEN 1000 \
                     WHEN EXISTS (SELECT 1 FROM was) THEN (SELECT ceil(1000 * \
                         (1 - extract(epoch FROM h.at - was.written_at)))::int8 FROM h, was) \
                     ELSE (SELECT CASE WHEN f.moved THEN 1000 ELSE ceil(1000 * \
                         (1 - extract(epoch FROM h.at - m.written_at)))::int8 END \
                         FROM h, f, m) END, \
                 EXISTS (SELECT 1 FROM was WHERE value >= {max})",
            preamble = counters.preamble(),
            table = counters.table(),
            max = i64::MAX,
            own = ON_ITS_HISTORY,
            raise = counters.moved_raise(),
        );
        PgEpochSource { counters, open }
    }

    /// The same source for a pooler in transaction mode (PgBouncer's `pool_mode =
    /// transaction`), as [`PgTokenSource::for_transaction_pooling`].
    pub fn for_transaction_pooling(self) -> Self {
        PgEpochSource {
            counters: self.counters.for_transaction_pooling(),
            ..self
        }
    }

    /// The epoch table.
    pub fn table(&self) -> &PgQualifiedName {
        self.counters.table()
    }

    /// The server history the epochs of `resource` are bound to, and the history of the
    /// server answering, as [`PgTokenSource::history`].
    pub async fn history(&self, resource: &ResourceName) -> Result<CounterHistory> {
        self.counters.history(resource).await
    }

    /// Creates the epoch table, if missing, as [`PgTokenSource::create_if_missing`] does, with
    /// the column of the opening each epoch was opened for.
    pub async fn create_if_missing(&self) -> Result<()> {
        self.counters.create_if_missing().await?;
        let ddl = format!(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS opened_for TEXT",
            self.table()
        );
        run_ddl(self.counters.pool(), self.counters.store(), ddl).await
    }

    /// One try at opening: the epoch, or how long to wait before the next try.
    async fn try_open(&self, resource: &ResourceName, opening: &str) -> Result<EpochTry> {
        let session = self.counters.session();
        let query = session
            .query(self.open.as_str())
            .bind(resource.as_str())
            .bind(opening);
        let table = self.table();
        session
            .on_pool(self.counters.pool(), RequestEffect::Writes, async |conn| {
                let row = query.fetch_one(conn).await?;
                if !row.try_get::<bool, _>(1)? {
                    return Err(unbound(table));
                }
                let opened: Option<i64> = row.try_get(0)?;
                let already: Option<i64> = row.try_get(2)?;
                if let Some(epoch) = opened.or(already) {
                    return Ok(EpochTry::Epoch(decode_token(epoch)?));
                }
                if row.try_get::<bool, _>(4)? {
                    return Ok(EpochTry::Exhausted);
                }
                // Held, too soon, or another opening recorded between this statement's look
                // and its write (no wait read: try again at once).
                let wait_ms = row.try_get::<Option<i64>, _>(3)?.unwrap_or(1);
                Ok(EpochTry::Wait(Duration::from_millis(
                    wait_ms.clamp(1, 1000) as u64,
                )))
            })
            .await
            .map_err(|(failure, effect)| failure.into_error(self.counters.store(), effect))
    }
}

#[async_trait]
impl EpochSource for PgEpochSource {
    async fn open(&self, resource: &ResourceName, opening: &str) -> Result<FencingToken> {
        open_patiently(resource, self.counters.store(), || {
            self.try_open(resource, opening)
        })
        .await
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        self.counters.current(resource).await
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        self.counters.advance_to(resource, floor).await
    }
}

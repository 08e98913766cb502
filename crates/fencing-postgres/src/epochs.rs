//! A durable source of epochs for the tokens of a Redis lease.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencing_core::adapter::RequestEffect;
use fencing_core::{
    CounterHistory, EpochSource, Error, FencingToken, RateBound, ResourceName, Result, TokenSource,
};
use sqlx::{PgPool, Row};

use crate::ddl::run_ddl;
use crate::error::PgFailure;
use crate::ident::PgQualifiedName;
use crate::tokens::{PgTokenSource, decode_token, unbound};

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
/// history kept as for one it lacks. The epochs stay far below the 2^31 a Redis token holds
/// (a second of the database's life is at most one epoch).
#[derive(Clone, Debug)]
pub struct PgEpochSource {
    counters: PgTokenSource,
    open: String,
}

/// How long an opening waits for the second since the last one to pass before it gives up: a
/// clock that went back stops openings for as long as it went back.
const OPENING_PATIENCE: Duration = Duration::from_secs(10);

impl PgEpochSource {
    /// Epochs in `table` (create it with [`Self::create_if_missing`]).
    pub fn new(pool: PgPool, table: PgQualifiedName) -> Self {
        let counters = PgTokenSource::new(pool, table).with_rate_bound(RateBound::EPOCHS);
        let open = format!(
            "WITH {preamble}, issued AS ({opened}), \
             was AS (SELECT value, opened_for, written_at FROM {table} WHERE resource = $1) \
             SELECT (SELECT value FROM issued), EXISTS (SELECT 1 FROM m), \
                 (SELECT value FROM was WHERE opened_for = $2), \
                 (SELECT ceil(1000 * (1 - extract(epoch FROM h.at - was.written_at)))::int8 \
                     FROM h, was)",
            preamble = counters.preamble(),
            opened = counters.upsert(
                "opened_for",
                "FROM h, f",
                &format!("t.value::numeric + 1 + {}", counters.moved_raise()),
                " AND t.opened_for IS DISTINCT FROM EXCLUDED.opened_for \
                 AND (t.history IS DISTINCT FROM EXCLUDED.history OR t.written_at IS NULL \
                 OR EXCLUDED.written_at >= t.written_at + interval '1 second')",
            ),
            table = counters.table(),
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
    async fn try_open(&self, resource: &ResourceName, opening: &str) -> Result<Opened> {
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
                    return Ok(Opened::Epoch(decode_token(epoch)?));
                }
                match row.try_get::<Option<i64>, _>(3)? {
                    Some(wait_ms) if wait_ms > 0 => Ok(Opened::Wait(Duration::from_millis(
                        wait_ms.clamp(1, 1000) as u64,
                    ))),
                    // Not waiting and not opened: the counter is at its end, or another
                    // opening was recorded between this statement's look and its write.
                    _ => Ok(Opened::Wait(Duration::from_millis(1))),
                }
            })
            .await
            .map_err(|(failure, effect)| failure.into_error(self.counters.store(), effect))
    }
}

/// What one try at opening an epoch found.
enum Opened {
    Epoch(FencingToken),
    Wait(Duration),
}

#[async_trait]
impl EpochSource for PgEpochSource {
    async fn open(&self, resource: &ResourceName, opening: &str) -> Result<FencingToken> {
        let started = Instant::now();
        loop {
            match self.try_open(resource, opening).await? {
                Opened::Epoch(epoch) => return Ok(epoch),
                Opened::Wait(_) if self.current(resource).await? == Some(FencingToken::MAX) => {
                    return Err(Error::TokenExhausted {
                        resource: resource.clone(),
                    });
                }
                Opened::Wait(_) if started.elapsed() > OPENING_PATIENCE => {
                    return Err(PgFailure::Inconsistent(
                        "epochs kept being opened less than a second apart by the database's \
                         clock for 10 s: has its clock gone back?",
                    )
                    .into_error(self.counters.store(), RequestEffect::Writes));
                }
                Opened::Wait(pause) => tokio::time::sleep(pause).await,
            }
        }
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

//! A durable token source: one row per resource in a counter table, bound to the server
//! history that last wrote it.

use std::time::Duration;

use async_trait::async_trait;
use fencing_core::adapter::RequestEffect;
use fencing_core::adapter::history::{
    BoundCounter, EpochStep, EpochTry, binding_here, epoch_step, next_token,
};
use fencing_core::{
    CounterHistory, Error, FencingToken, InvalidInput, RateBound, ResourceName, Result, TokenSource,
};
use sqlx::{AssertSqlSafe, MySqlConnection, MySqlPool, Row};

use crate::checkout::Checkout;
use crate::ddl::run_ddl;
use crate::error::MySqlFailure;
use crate::ident::MySqlQualifiedName;

/// The server's clock in milliseconds since the Unix epoch, in SQL.
pub(crate) const NOW_MS: &str = "CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)";

/// The resource name of the row that binds the whole table: no [`ResourceName`] is empty.
const TABLE_BINDING: &str = "";

/// Tokens from a table of counters, `(resource, value, history, written_ms)`: each `next` is
/// one `UPDATE … SET value = LAST_INSERT_ID(value + 1)` where the row is on the history of
/// the server answering (as the connection last read it: a session variable, which a new
/// session, and so every restart, starts without), the value carried back in the statement's
/// own answer.
///
/// **Failovers and restores.** A row is bound to the server history that last wrote it: the
/// server's `server_id` (distinct for every server of a replication topology, so a promoted
/// replica is another history) and a marker drawn at every start of the server, kept in a
/// `MEMORY` table beside the counters (`<table>_start`, empty after every restart, a restored
/// physical backup's included). A counter found on another history may be behind the tokens
/// issued (an asynchronous replica promoted before it applied the last increments, a backup
/// restored, a crash with `innodb_flush_log_at_trx_commit` other than 1), so it is raised
/// first by [`Self::with_max_rate`] tokens for every second since the row was last written,
/// and one more: every increment lost happened after that write, at most that many a second.
///
/// A counter the new history does not have at all (first used during the replication lag,
/// or after the backup was taken) starts at the table's binding: the row of the empty
/// resource name, which [`Self::create_if_missing`] writes, holds the first token a counter
/// new to the table starts at and its history; the first request on another history raises
/// it the same way, so a counter missing there starts above every token a lost one issued.
/// These requests (another history, a missing counter, an exhausted one) are one transaction
/// that locks the binding and the counter and decides by the core's rules
/// ([`fencing_core::adapter::history`]).
///
/// A read-only server (a replica, or one with `read_only` set) issues nothing, even to a user
/// whose privileges pass `read_only`: [`fencing_core::Error::Unavailable`].
///
/// **A logical dump restored** (`mariadb-dump`, `mysqldump`) into a server that has not
/// restarted since the dump was taken brings back rows bound to the history still running,
/// which no statement can tell from current ones without a look at the catalog that would
/// cost more than the increment itself. After such a restore, call
/// [`Self::after_restore`] once (or restart the server) before any token is drawn: every
/// counter is then raised as if found on another history.
#[derive(Clone, Debug)]
pub struct MySqlTokenSource {
    pool: MySqlPool,
    table: MySqlQualifiedName,
    start: MySqlQualifiedName,
    store: String,
    max_rate: RateBound,
    fast: String,
    locked: String,
    /// The counters are epochs: each row also keeps the opening it was opened for.
    epochs: bool,
}

/// A counter and the table's binding as a locked read found them, with the history of the
/// server answering, its time, and the opening an epoch counter was last opened for.
pub(crate) struct Locked {
    pub(crate) counter: Option<BoundCounter<String>>,
    pub(crate) opened_for: Option<String>,
    binding: BoundCounter<String>,
    here: String,
    now_ms: u64,
}

/// What a write of a counter row does with the opening an epoch was opened for.
#[derive(Clone, Copy)]
enum OpenedFor<'a> {
    /// Leaves it as it is (a token counter has none).
    Kept,
    /// Records this opening: the epoch was opened for it.
    Opening(&'a str),
    /// Clears it: the row was raised onto this history and no epoch is opened for it yet.
    Cleared,
}

impl MySqlTokenSource {
    /// The rate bound unless told otherwise: 2^20 tokens a second per resource.
    pub const DEFAULT_MAX_RATE: u64 = RateBound::DEFAULT.per_second();

    /// Counters in `table` (create it with [`Self::create_if_missing`]).
    pub fn new(pool: MySqlPool, table: MySqlQualifiedName) -> Self {
        let start = table.sibling("_start");
        let here = here_sql(&start);
        MySqlTokenSource {
            fast: format!(
                "UPDATE {table} SET value = LAST_INSERT_ID(value + 1), written_ms = {NOW_MS} \
                 WHERE resource = ? AND history = {seen} AND value < {max} \
                 AND @@global.read_only = 0",
                seen = seen_here(&start),
                max = i64::MAX
            ),
            locked: Self::locked_sql(&table, &here, "NULL"),
            store: table.store_name(),
            max_rate: RateBound::DEFAULT,
            epochs: false,
            start,
            table,
            pool,
        }
    }

    /// The same source, raising a counter found on another server history by `per_second`
    /// for every second since its row was last written (1 ..= 2^32).
    pub fn with_max_rate(self, per_second: u64) -> Result<Self, InvalidInput> {
        Ok(MySqlTokenSource {
            max_rate: RateBound::new(per_second)?,
            ..self
        })
    }

    /// The locked read of a counter and the table's binding, with `opened_for` (a column, or
    /// `NULL`).
    fn locked_sql(table: &MySqlQualifiedName, here: &str, opened_for: &str) -> String {
        format!(
            "SELECT resource, value, history, written_ms, {here}, {NOW_MS}, \
             @@global.read_only, {opened_for} FROM {table} \
             WHERE resource IN ('{TABLE_BINDING}', ?) FOR UPDATE"
        )
    }

    /// The same counters as epochs: raised by one a second on another history, each row
    /// keeping the opening its epoch was opened for.
    pub(crate) fn for_epochs(self) -> Self {
        MySqlTokenSource {
            locked: Self::locked_sql(&self.table, &here_sql(&self.start), "opened_for"),
            max_rate: RateBound::EPOCHS,
            epochs: true,
            ..self
        }
    }

    /// The name errors carry.
    pub(crate) fn store(&self) -> &str {
        &self.store
    }

    /// The counter table.
    pub fn table(&self) -> &MySqlQualifiedName {
        &self.table
    }

    pub(crate) fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// Creates the counter table and its start marker, if missing, with the row that binds
    /// the whole table to the server history it is on.
    pub async fn create_if_missing(&self) -> Result<()> {
        let (table, start) = (&self.table, &self.start);
        let opened_for = if self.epochs {
            ", opened_for VARCHAR(255) NULL"
        } else {
            ""
        };
        for ddl in [
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (resource VARBINARY(200) NOT NULL PRIMARY \
                 KEY, value BIGINT NOT NULL CHECK (value > 0), history VARCHAR(100) NOT NULL, \
                 written_ms BIGINT NOT NULL{opened_for}) ENGINE = InnoDB"
            ),
            format!(
                "CREATE TABLE IF NOT EXISTS {start} (id TINYINT NOT NULL PRIMARY KEY, \
                 started CHAR(36) NOT NULL) ENGINE = MEMORY"
            ),
            format!("INSERT IGNORE INTO {start} (id, started) VALUES (1, UUID())"),
            format!(
                "INSERT IGNORE INTO {table} (resource, value, history, written_ms) SELECT \
                 '{TABLE_BINDING}', 1, CONCAT(@@server_id, '/', started), {NOW_MS} \
                 FROM {start} WHERE id = 1"
            ),
        ] {
            run_ddl(&self.pool, &self.store, ddl).await?;
        }
        Ok(())
    }

    /// The server history the counter of `resource` is bound to, and the history of the
    /// server answering (a restarted server draws its marker here).
    pub async fn history(&self, resource: &ResourceName) -> Result<CounterHistory> {
        let read = async |conn: &mut MySqlConnection| -> Result<CounterHistory, MySqlFailure> {
            self.mark_start(conn).await?;
            let row = sqlx::query(AssertSqlSafe(format!(
                "SELECT (SELECT history FROM {table} WHERE resource = ?), \
                 CONCAT(@@server_id, '/', started) FROM {start} WHERE id = 1",
                table = self.table,
                start = self.start
            )))
            .bind(resource.as_str())
            .fetch_one(&mut *conn)
            .await?;
            Ok(CounterHistory {
                bound: row.try_get(0)?,
                serving: row.try_get(1)?,
            })
        };
        Checkout::run(&self.pool, read)
            .await
            .map_err(|failure| failure.into_error(&self.store, RequestEffect::ReadOnly))
    }

    /// Binds every counter of the table, its binding included, to no history, so that the
    /// next token of each is raised as on another history (by the rate bound for the time
    /// since it was last written, and one second more): what a logical dump restored into a
    /// running server needs before its counters issue again. Idempotent; a jump in the
    /// numbers, never a token issued twice.
    pub async fn after_restore(&self) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET history = 'restored' WHERE history <> 'restored'",
            self.table
        );
        run_ddl(&self.pool, &self.store, sql).await
    }

    /// Draws this start's marker where the server has none yet (it restarted), and notes the
    /// history here on the connection ([`seen_here`]) for the one-statement increment.
    async fn mark_start(&self, conn: &mut MySqlConnection) -> Result<(), MySqlFailure> {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "INSERT IGNORE INTO {start} (id, started) VALUES (1, UUID()); \
             SET {seen} = {here}",
            start = self.start,
            seen = seen_here(&self.start),
            here = here_sql(&self.start),
        )))
        .execute(conn)
        .await?;
        Ok(())
    }

    /// The next token of `resource` on `conn`, inside the caller's transaction where it has
    /// one: the one-statement increment where the counter is on this history, else
    /// [`Self::next_locked`]. `None` at `i64::MAX`.
    pub(crate) async fn next_on(
        &self,
        conn: &mut MySqlConnection,
        resource: &ResourceName,
    ) -> Result<Option<FencingToken>, MySqlFailure> {
        match self.next_in_place(conn, resource).await? {
            Some(token) => Ok(Some(token)),
            None => self.next_locked(conn, resource).await,
        }
    }

    /// The one-statement increment: the token, or `None` where the counter is missing, on
    /// another history or exhausted.
    async fn next_in_place(
        &self,
        conn: &mut MySqlConnection,
        resource: &ResourceName,
    ) -> Result<Option<FencingToken>, MySqlFailure> {
        let done = sqlx::query(AssertSqlSafe(self.fast.clone()))
            .bind(resource.as_str())
            .execute(conn)
            .await?;
        match done.rows_affected() {
            1 => decode_token(done.last_insert_id() as i64).map(Some),
            _ => Ok(None),
        }
    }

    /// The next token by the core's rules, the binding and the counter locked (inside a
    /// transaction on `conn`). `None` at `i64::MAX`.
    async fn next_locked(
        &self,
        conn: &mut MySqlConnection,
        resource: &ResourceName,
    ) -> Result<Option<FencingToken>, MySqlFailure> {
        self.mark_start(conn).await?;
        let locked = self.locked(conn, resource).await?;
        self.issue(conn, resource, locked).await
    }

    /// Issues the next value after what `locked` found: the binding moved to this history
    /// where it was on another, the counter raised where it was, started at the binding where
    /// it was missing. `None` at `i64::MAX`.
    async fn issue(
        &self,
        conn: &mut MySqlConnection,
        resource: &ResourceName,
        locked: Locked,
    ) -> Result<Option<FencingToken>, MySqlFailure> {
        let Some(bound) = self.bind_here(conn, &locked).await? else {
            return Ok(None);
        };
        let Locked {
            counter,
            here,
            now_ms,
            ..
        } = locked;
        let Some(token) = next_token(counter.as_ref(), &bound, &here, now_ms, self.max_rate) else {
            return Ok(None);
        };
        let issued = BoundCounter {
            value: token,
            history: here,
            written_ms: now_ms,
        };
        self.put(conn, resource.as_str(), &issued, OpenedFor::Kept)
            .await?;
        Ok(Some(token))
    }

    /// The table's binding on the history `locked` found here ([`binding_here`]), moved
    /// there where it was on another. `None` past `i64::MAX`.
    async fn bind_here(
        &self,
        conn: &mut MySqlConnection,
        locked: &Locked,
    ) -> Result<Option<BoundCounter<String>>, MySqlFailure> {
        let binding = &locked.binding;
        let Some(bound) = binding_here(binding, &locked.here, locked.now_ms, self.max_rate) else {
            return Ok(None);
        };
        if bound != *binding {
            self.put(conn, TABLE_BINDING, &bound, OpenedFor::Kept)
                .await?;
        }
        Ok(Some(bound))
    }

    /// One try at opening an epoch of `resource` for the loss named `opening`, inside a
    /// transaction on `conn`: the epoch already opened for it, or the core's [`epoch_step`]
    /// (a new epoch a second or more after the last; a row raised onto this history, held for
    /// a second; or how long to wait), with the binding moved here where it was on another.
    pub(crate) async fn open_locked(
        &self,
        conn: &mut MySqlConnection,
        resource: &ResourceName,
        opening: &str,
    ) -> Result<EpochTry, MySqlFailure> {
        self.mark_start(conn).await?;
        let locked = self.locked(conn, resource).await?;
        if let Some(last) = &locked.counter
            && locked.opened_for.as_deref() == Some(opening)
        {
            return Ok(EpochTry::Epoch(last.value));
        }
        let Some(bound) = self.bind_here(conn, &locked).await? else {
            return Ok(EpochTry::Exhausted);
        };
        Ok(
            match epoch_step(locked.counter.as_ref(), &bound, &locked.here, locked.now_ms) {
                None => EpochTry::Exhausted,
                Some(EpochStep::Open(opened)) => {
                    self.put(
                        conn,
                        resource.as_str(),
                        &opened,
                        OpenedFor::Opening(opening),
                    )
                    .await?;
                    EpochTry::Epoch(opened.value)
                }
                Some(EpochStep::Hold(held)) => {
                    self.put(conn, resource.as_str(), &held, OpenedFor::Cleared)
                        .await?;
                    EpochTry::Wait(Duration::from_secs(1))
                }
                Some(EpochStep::Wait(millis)) => EpochTry::Wait(Duration::from_millis(millis)),
            },
        )
    }

    /// The counter of `resource` and the table's binding, locked, with the history here and
    /// the server's time.
    async fn locked(
        &self,
        conn: &mut MySqlConnection,
        resource: &ResourceName,
    ) -> Result<Locked, MySqlFailure> {
        let rows = sqlx::query(AssertSqlSafe(self.locked.clone()))
            .bind(resource.as_str())
            .fetch_all(&mut *conn)
            .await?;
        let (mut counter, mut opened_for, mut binding, mut here) = (None, None, None, None);
        for row in &rows {
            let name: Vec<u8> = row.try_get(0)?;
            let value: i64 = row.try_get(1)?;
            let written_ms: i64 = row.try_get(3)?;
            let bound = BoundCounter {
                value: decode_token(value)?,
                history: row.try_get(2)?,
                written_ms: written_ms.max(0) as u64,
            };
            let now_ms: i64 = row.try_get(5)?;
            if row.try_get::<i64, _>(6)? != 0 {
                return Err(MySqlFailure::ReadOnly);
            }
            here = Some((row.try_get::<String, _>(4)?, now_ms.max(0) as u64));
            if name.is_empty() {
                binding = Some(bound);
            } else {
                counter = Some(bound);
                opened_for = row.try_get(7)?;
            }
        }
        let (Some(binding), Some((here, now_ms))) = (binding, here) else {
            return Err(unbound(&self.table));
        };
        Ok(Locked {
            counter,
            opened_for,
            binding,
            here,
            now_ms,
        })
    }

    /// Writes a counter row as `counter` says, with the opening its epoch was opened for as
    /// `opened_for` says.
    async fn put(
        &self,
        conn: &mut MySqlConnection,
        resource: &str,
        counter: &BoundCounter<String>,
        opened_for: OpenedFor<'_>,
    ) -> Result<(), MySqlFailure> {
        let (column, placeholder, set) = match opened_for {
            OpenedFor::Kept => ("", "", ""),
            OpenedFor::Opening(_) | OpenedFor::Cleared => {
                (", opened_for", ", ?", ", opened_for = VALUES(opened_for)")
            }
        };
        let query = sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (resource, value, history, written_ms{column}) \
             VALUES (?, ?, ?, ?{placeholder}) ON DUPLICATE KEY UPDATE value = VALUES(value), \
             history = VALUES(history), written_ms = VALUES(written_ms){set}",
            self.table
        )))
        .bind(resource)
        .bind(counter.value.as_i64())
        .bind(&counter.history)
        .bind(counter.written_ms as i64);
        let query = match opened_for {
            OpenedFor::Kept => query,
            OpenedFor::Opening(opening) => query.bind(Some(opening)),
            OpenedFor::Cleared => query.bind(None::<&str>),
        };
        query.execute(conn).await?;
        Ok(())
    }

    /// Raises the counter of `resource` to at least `floor` on `conn`'s transaction: a
    /// counter the table lacks starts there or at the table's start, whichever is higher.
    async fn advance_on(
        &self,
        conn: &mut MySqlConnection,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken, MySqlFailure> {
        self.mark_start(conn).await?;
        let Locked {
            counter,
            binding,
            here,
            now_ms,
            ..
        } = self.locked(conn, resource).await?;
        let raised = match counter {
            Some(counter) if counter.value >= floor => return Ok(counter.value),
            Some(counter) => BoundCounter {
                value: floor,
                ..counter
            },
            None => {
                let start = binding_here(&binding, &here, now_ms, self.max_rate)
                    .map(|bound| bound.value.get() - 1)
                    .unwrap_or(u64::MAX);
                let value = FencingToken::new(start.max(floor.get()).min(FencingToken::MAX.get()))
                    .map_err(|e| MySqlFailure::Corrupt(format!("counter start {start}"), e))?;
                BoundCounter {
                    value,
                    history: here,
                    written_ms: now_ms,
                }
            }
        };
        self.put(conn, resource.as_str(), &raised, OpenedFor::Kept)
            .await?;
        Ok(raised.value)
    }
}

/// The history of the server answering, as this connection last read it ([`here_sql`]): a
/// user variable of the session, named after the start table. A session does not outlive its
/// server's start (a restart, a restored physical backup and a promoted replica all come with
/// new connections, whose variable is `NULL`), so a counter on the history the variable names
/// is on the history of the server answering; reading it costs the one-statement increment
/// nothing, where the marker's subquery cost it about a fifth. A logical dump restored into
/// the running server keeps its sessions, and its counters are rebound by
/// [`MySqlTokenSource::after_restore`] to no history, which no session's variable names.
fn seen_here(start: &MySqlQualifiedName) -> String {
    let mut hasher = std::hash::DefaultHasher::new();
    std::hash::Hash::hash(&start.to_string(), &mut hasher);
    format!(
        "@`fencing_here_{:016x}`",
        std::hash::Hasher::finish(&hasher)
    )
}

/// The history of the server answering, in SQL: its `server_id` and the marker of its start
/// kept in `start` (`NULL` until the marker is drawn).
fn here_sql(start: &MySqlQualifiedName) -> String {
    format!("CONCAT(@@server_id, '/', (SELECT started FROM {start} WHERE id = 1))")
}

/// A counter value read back: a token, or corrupt.
pub(crate) fn decode_token(value: i64) -> Result<FencingToken, MySqlFailure> {
    FencingToken::from_i64(value)
        .map_err(|e| MySqlFailure::Corrupt(format!("counter value {value}"), e))
}

/// The failure of a request on a counter table without its binding row.
pub(crate) fn unbound(table: &MySqlQualifiedName) -> MySqlFailure {
    MySqlFailure::Schema(format!(
        "the counter table {table} has no binding row (resource ''), which keeps a counter it \
         lacks after a failover from starting again below tokens already issued: run \
         create_if_missing() once"
    ))
}

#[async_trait]
impl TokenSource for MySqlTokenSource {
    async fn next(&self, resource: &ResourceName) -> Result<FencingToken> {
        let draw = async |conn: &mut MySqlConnection| -> Result<_, MySqlFailure> {
            if let Some(token) = self.next_in_place(conn, resource).await? {
                return Ok(Some(token));
            }
            let mut tx = sqlx::Connection::begin(conn).await?;
            let token = self.next_locked(&mut tx, resource).await?;
            tx.commit().await?;
            Ok(token)
        };
        Checkout::run(&self.pool, draw)
            .await
            .map_err(|failure| failure.into_error(&self.store, RequestEffect::Writes))?
            .ok_or_else(|| Error::TokenExhausted {
                resource: resource.clone(),
            })
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        let value: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT value FROM {} WHERE resource = ?",
            self.table
        )))
        .bind(resource.as_str())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| MySqlFailure::from(e).into_error(&self.store, RequestEffect::ReadOnly))?;
        value
            .map(decode_token)
            .transpose()
            .map_err(|failure| failure.into_error(&self.store, RequestEffect::ReadOnly))
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
        let advance = async |conn: &mut MySqlConnection| -> Result<_, MySqlFailure> {
            let mut tx = sqlx::Connection::begin(conn).await?;
            let value = self.advance_on(&mut tx, resource, floor).await?;
            tx.commit().await?;
            Ok(value)
        };
        Checkout::run(&self.pool, advance)
            .await
            .map_err(|failure| failure.into_error(&self.store, RequestEffect::Writes))
    }
}

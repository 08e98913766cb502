//! A Postgres table as a fenced store.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::{
    Error, Fence, FenceCheck, FencedStore, FencedWrite, FencingToken, InputKind, InvalidInput,
    Record, RecordKey, RequestEffect, Result, Written,
};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Acquire, AssertSqlSafe, PgExecutor, PgPool, Postgres, Row};
use tokio::sync::OnceCell;

use crate::decode::{fence_from_db, record_from, state_from_db};
use crate::error::PgFailure;
use crate::table::PgTable;

/// A [`PgTable`] on a pool: every write is one conditional statement that checks the
/// fence and the state in the row it changes.
///
/// The `*_with` methods take the caller's own connection or transaction instead of the pool,
/// so fenced writes can join other work in one transaction.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    table: PgTable,
    name: Arc<str>,
    key_checked: Arc<OnceCell<()>>,
}

/// What [`PgStore::write_many`] did.
#[derive(Debug)]
#[non_exhaustive]
pub struct ManyWritten {
    /// The keys written, in the order given.
    pub written: Vec<RecordKey>,
    /// The keys left alone because the row is missing or outside the required states, each
    /// with the rejection a single write would have had.
    pub skipped: Vec<Error>,
}

/// How many times a write goes round when a row appears between its update and its insert.
const RACE_ROUNDS: usize = 3;

impl PgStore {
    /// The fenced records of `table`, through `pool`.
    pub fn new(pool: PgPool, table: PgTable) -> Self {
        let name = table.store_name().into();
        PgStore {
            pool,
            table,
            name,
            key_checked: Arc::default(),
        }
    }

    /// Checks, once per store (a failure is checked again next time), that a primary key or
    /// unique index covers the key column: on a key that several rows share, one record's
    /// write would change them all. Every write waits for it.
    async fn check_key_is_unique(&self) -> Result<()> {
        self.key_checked
            .get_or_try_init(|| async {
                let table = self.table.name().to_string();
                let key = self.table.key_column();
                let row = sqlx::query(AssertSqlSafe(self.table.sql().key_is_unique.clone()))
                    .bind(&table)
                    .bind(key.as_str())
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))?;
                let decoded = || -> Result<(bool, bool), sqlx::Error> {
                    Ok((row.try_get(0)?, row.try_get(1)?))
                };
                match decoded().map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))? {
                    (false, _) => Err(self.failed(
                        PgFailure::Schema(format!(
                            "table {table} does not exist (PgTable::create_if_missing \
                             creates it)"
                        )),
                        RequestEffect::ReadOnly,
                    )),
                    (true, false) => Err(InvalidInput::new(
                        InputKind::Identifier,
                        format!(
                            "key column {key} of {table} is not unique: no primary key or unique \
                             index covers it alone, so one record's write could change several \
                             rows. Add one: CREATE UNIQUE INDEX ON {table} ({key})"
                        ),
                    )
                    .into()),
                    (true, true) => Ok(()),
                }
            })
            .await
            .map(drop)
    }

    /// The table.
    pub fn table(&self) -> &PgTable {
        &self.table
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Reads one record through `executor`.
    pub async fn read_with<'c, E: PgExecutor<'c>>(
        &self,
        executor: E,
        key: &RecordKey,
    ) -> Result<Option<Record>> {
        let row = sqlx::query(AssertSqlSafe(self.table.sql().read.clone()))
            .bind(key.as_str())
            .fetch_optional(executor)
            .await
            .map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))?;
        row.map(|row| {
            let fence = fence_from_db(row.try_get(0)?)?;
            record_from(key, fence, row.try_get(1), row.try_get(2))
        })
        .transpose()
        .map_err(|e| self.failed(e, RequestEffect::ReadOnly))
    }

    /// Applies one fenced write on the caller's connection or transaction.
    ///
    /// One statement locks the row, checks fence and state, applies the change and returns
    /// what the row held, so a refusal names the fence it met. A claim without a state
    /// condition on a missing row inserts it; the table's other columns need defaults.
    pub async fn write_with<'c, A: Acquire<'c, Database = Postgres>>(
        &self,
        conn: A,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.check_payload(write)?;
        self.check_key_is_unique().await?;
        let mut conn = conn
            .acquire()
            .await
            .map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))?;
        let sql = self.table.sql();
        let statement = match write.check() {
            FenceCheck::Claim => &sql.claim,
            FenceCheck::HolderOnly => &sql.holder_only,
        };
        for _ in 0..RACE_ROUNDS {
            let row = self
                .bind_write(statement, key.as_str(), token, write)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.failed(e.into(), RequestEffect::Writes))?;
            if let Some(row) = row {
                return self.updated(row, key, token, write);
            }
            // No such row: a claim without a state condition creates it; anything else is
            // refused exactly as the contract says.
            write.decide(&self.name, key, token, None)?;
            let inserted = self
                .bind_write(&sql.insert, key.as_str(), token, write)
                .fetch_optional(&mut *conn)
                .await
                .map_err(|e| self.failed(e.into(), RequestEffect::Writes))?;
            if let Some(row) = inserted {
                let record = record_from(key, Some(token), row.try_get(0), row.try_get(1))
                    .map_err(|e| self.failed(e, RequestEffect::Writes))?;
                return Ok(Written::new(None, record));
            }
        }
        Err(self.failed(
            PgFailure::Inconsistent("the row kept appearing and disappearing under the write"),
            RequestEffect::Writes,
        ))
    }

    /// Applies one fenced write to many rows in one transaction on the caller's connection
    /// (a savepoint inside the caller's transaction).
    ///
    /// Rows are locked in key order (so concurrent batches cannot deadlock), decided by the
    /// contract, and the accepted ones changed by one `UPDATE … WHERE key = ANY($1)`. A fence
    /// refusal on any row rolls the whole statement back and is returned through `fence`
    /// (so a counter that went backwards is reported as such). Missing rows and rows outside
    /// the required states are skipped and listed. Missing rows are not created.
    pub async fn write_many_with<'c, A: Acquire<'c, Database = Postgres>>(
        &self,
        conn: A,
        fence: &Fence<'_>,
        keys: &[RecordKey],
        write: &FencedWrite,
    ) -> Result<ManyWritten> {
        self.check_payload(write)?;
        let mut distinct = HashSet::with_capacity(keys.len());
        if let Some(twice) = keys.iter().find(|k| !distinct.insert(*k)) {
            return Err(InvalidInput::new(
                InputKind::RecordKey,
                format!("{twice:?} appears twice in one batch write"),
            )
            .into());
        }
        self.check_key_is_unique().await?;
        let token = fence.token();
        let sql = self.table.sql();
        let mut tx = conn
            .begin()
            .await
            .map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))?;
        let texts: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        let rows = sqlx::query(AssertSqlSafe(sql.lock_many.clone()))
            .bind(&texts)
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))?;
        let mut current = HashMap::with_capacity(rows.len());
        for row in &rows {
            let decoded = || -> Result<(String, Record), PgFailure> {
                let text: String = row.try_get(0)?;
                let key = RecordKey::new(text.clone())
                    .map_err(|e| PgFailure::Corrupt(format!("stored key {text:?}: {e}")))?;
                let fence = fence_from_db(row.try_get(1)?)?;
                Ok((text, record_from(&key, fence, row.try_get(2), Ok(None))?))
            };
            let (text, record) = decoded().map_err(|e| self.failed(e, RequestEffect::ReadOnly))?;
            current.insert(text, record);
        }
        let mut written = Vec::new();
        let mut skipped = Vec::new();
        for key in keys {
            let record = current.get(key.as_str());
            match (write.decide(&self.name, key, token, record), record) {
                (Ok(()), Some(_)) => written.push(key.clone()),
                (Ok(()), None) => skipped.push(Error::NotFound {
                    store: self.name.to_string(),
                    record: key.clone(),
                }),
                (Err(err @ Error::Fenced { .. }), _) => {
                    drop(tx);
                    return Err(fence.explain(err).await);
                }
                (Err(err), _) => skipped.push(err),
            }
        }
        if !written.is_empty() {
            let statement = match write.check() {
                FenceCheck::Claim => &sql.claim_many,
                FenceCheck::HolderOnly => &sql.holder_only_many,
            };
            let texts: Vec<&str> = written.iter().map(|k| k.as_str()).collect();
            let changed = self
                .bind_write(statement, texts, token, write)
                .fetch_all(&mut *tx)
                .await
                .map_err(|e| self.failed(e.into(), RequestEffect::Writes))?;
            if changed.len() != written.len() {
                return Err(self.failed(
                    PgFailure::Inconsistent("locked rows changed under the batch write"),
                    RequestEffect::Writes,
                ));
            }
        }
        tx.commit()
            .await
            .map_err(|e| self.failed(e.into(), RequestEffect::Writes))?;
        Ok(ManyWritten { written, skipped })
    }

    /// [`Self::write_many_with`] on the store's pool.
    pub async fn write_many(
        &self,
        fence: &Fence<'_>,
        keys: &[RecordKey],
        write: &FencedWrite,
    ) -> Result<ManyWritten> {
        self.write_many_with(&self.pool, fence, keys, write).await
    }

    fn bind_write<'q, K>(
        &self,
        sql: &Arc<str>,
        keys: K,
        token: FencingToken,
        write: &'q FencedWrite,
    ) -> Query<'q, Postgres, PgArguments>
    where
        K: 'q + sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres>,
    {
        let required: Option<Vec<&str>> = write
            .required_states()
            .map(|states| states.iter().map(|s| s.as_str()).collect());
        let query = sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(keys)
            .bind(token.as_i64())
            .bind(write.new_state().map(|s| s.as_str()))
            .bind(required);
        match self.table.payload_column() {
            Some(_) => query.bind(write.new_payload()),
            None => query,
        }
    }

    /// Turns the single-row statement's answer into the outcome.
    fn updated(
        &self,
        row: PgRow,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        let matched: i64 = row
            .try_get(5)
            .map_err(|e| self.failed(e.into(), RequestEffect::Writes))?;
        if matched > 1 {
            return Err(self.failed(
                PgFailure::Schema(format!(
                    "{matched} rows of {} have key {key:?}, so nothing was written: the key \
                     column {} must be unique (CREATE UNIQUE INDEX ON {} ({}))",
                    self.table.name(),
                    self.table.key_column(),
                    self.table.name(),
                    self.table.key_column()
                )),
                RequestEffect::Writes,
            ));
        }
        let decode = || -> Result<_, PgFailure> {
            let previous_fence = fence_from_db(row.try_get(0)?)?;
            let previous_state = state_from_db(row.try_get(1)?)?;
            let applied: bool = row.try_get(2)?;
            Ok((previous_fence, previous_state, applied))
        };
        let (previous_fence, previous_state, applied) =
            decode().map_err(|e| self.failed(e, RequestEffect::Writes))?;
        if !applied {
            let found = Record {
                key: key.clone(),
                fence: previous_fence,
                state: previous_state,
                payload: Vec::new(),
            };
            write.decide(&self.name, key, token, Some(&found))?;
            return Err(self.failed(
                PgFailure::Inconsistent("the update refused a write its own row admits"),
                RequestEffect::Writes,
            ));
        }
        let fence = match write.check() {
            FenceCheck::Claim => Some(token),
            FenceCheck::HolderOnly => previous_fence,
        };
        let record = record_from(key, fence, row.try_get(3), row.try_get(4))
            .map_err(|e| self.failed(e, RequestEffect::Writes))?;
        Ok(Written::over(previous_fence, previous_state, record))
    }

    fn check_payload(&self, write: &FencedWrite) -> Result<()> {
        if write.new_payload().is_some() && self.table.payload_column().is_none() {
            return Err(InvalidInput::new(
                InputKind::Identifier,
                format!("{} has no payload column to write a payload to", self.name),
            )
            .into());
        }
        Ok(())
    }

    fn failed(&self, failure: PgFailure, effect: RequestEffect) -> Error {
        failure.into_error(&self.name, effect)
    }
}

#[async_trait]
impl FencedStore for PgStore {
    fn name(&self) -> &str {
        &self.name
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.read_with(&self.pool, key).await
    }

    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.write_with(&self.pool, key, token, write).await
    }
}

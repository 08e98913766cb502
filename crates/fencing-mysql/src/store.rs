//! Fenced writes on a MySQL or MariaDB table: each one a transaction that locks the row,
//! decides by the core's rules and applies.

use async_trait::async_trait;
use fencing_core::adapter::{RequestEffect, StoreIdentity, StoreWrites};
use fencing_core::{
    FencedStore, FencedWrite, FencingToken, InputKind, InvalidInput, Record, RecordKey, Result,
    State, Written,
};
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, MySql, MySqlConnection, MySqlPool, Row};
use tokio::sync::OnceCell;

use std::sync::Arc;

use crate::checkout::Checkout;
use crate::error::{MySqlFailure, is_duplicate, is_rolled_back};
use crate::schema::{self, KeyType, KeyValue};
use crate::table::MySqlTable;

/// How many times a write is sent again after the server rolled it back for a race it lost
/// (a deadlock between two claims creating one record) before the store gives up.
const RACE_ROUNDS: usize = 8;

/// A [`FencedStore`] on a MySQL or MariaDB table ([`MySqlTable`]), on the caller's
/// [`MySqlPool`].
///
/// Each write is one transaction: `SELECT … FOR UPDATE` of the record's row, the core's
/// decision on what it found (so a refusal names the fence or state that refused it and
/// changes nothing), then the `UPDATE` or, for a claim of a record that does not exist yet,
/// the `INSERT`. MySQL has no `UPDATE … RETURNING`, and the lock is what lets a claim report
/// the fence and state it took over. The table's shape is read from `information_schema`
/// before the first request, and a table the store cannot fence (no such column, a key that
/// is not unique or is compared without regard to case) is refused with
/// [`fencing_core::Error::Misconfigured`] before anything is written.
#[derive(Clone, Debug)]
pub struct MySqlStore {
    pool: MySqlPool,
    table: MySqlTable,
    name: String,
    identity: StoreIdentity,
    key_type: Arc<OnceCell<KeyType>>,
    statements: Arc<Statements>,
}

/// The statements that do not depend on the write.
#[derive(Debug)]
struct Statements {
    locked: String,
    read: String,
}

impl MySqlStore {
    /// A store on `table` through `pool` (create the table with
    /// [`MySqlTable::create_if_missing`], or bring your own).
    pub fn new(pool: MySqlPool, table: MySqlTable) -> Self {
        let payload = table
            .payload_column()
            .map_or_else(|| "NULL".to_owned(), ToString::to_string);
        let read = format!(
            "SELECT {fence}, {state}, {payload} FROM {name} WHERE {key} = ? LIMIT 2",
            fence = table.fence_column(),
            state = table.state_column(),
            name = table.name(),
            key = table.key_column(),
        );
        MySqlStore {
            name: table.store_name(),
            identity: StoreIdentity::new(),
            key_type: Arc::default(),
            statements: Arc::new(Statements {
                locked: format!("{read} FOR UPDATE"),
                read,
            }),
            pool,
            table,
        }
    }

    /// The table.
    pub fn table(&self) -> &MySqlTable {
        &self.table
    }

    /// The pool.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The key column's type, read once.
    async fn key_type(&self) -> Result<KeyType> {
        self.key_type
            .get_or_try_init(async || {
                Checkout::run(&self.pool, async |conn| {
                    schema::read(conn, &self.table).await
                })
                .await
            })
            .await
            .copied()
            .map_err(|failure| self.failed(failure, RequestEffect::ReadOnly))
    }

    /// The record of `key` as a statement found it, unless several rows have its key.
    async fn found(
        &self,
        conn: &mut MySqlConnection,
        sql: &str,
        key: &RecordKey,
        value: &KeyValue<'_>,
    ) -> Result<Option<Record>, MySqlFailure> {
        let rows = bind_key(sqlx::query(AssertSqlSafe(sql.to_owned())), value)
            .fetch_all(&mut *conn)
            .await?;
        match rows.as_slice() {
            [] => Ok(None),
            [row] => record_from(row, key).map(Some),
            _ => Err(MySqlFailure::Schema(format!(
                "several rows of {} have key {key:?}, so nothing was written: the key column \
                 {} must be unique (ALTER TABLE {} ADD UNIQUE ({}))",
                self.table.name(),
                self.table.key_column(),
                self.table.name(),
                self.table.key_column()
            ))),
        }
    }

    /// One attempt: lock the row, decide, apply, commit.
    async fn write_once(
        &self,
        key: &RecordKey,
        value: &KeyValue<'_>,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Result<Written>, MySqlFailure> {
        Checkout::run(&self.pool, async |conn| {
            self.write_on(conn, key, value, token, write).await
        })
        .await
    }

    /// [`Self::write_once`] on `conn`.
    async fn write_on(
        &self,
        conn: &mut MySqlConnection,
        key: &RecordKey,
        value: &KeyValue<'_>,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Result<Written>, MySqlFailure> {
        let mut tx = sqlx::Connection::begin(conn).await?;
        let found = self
            .found(&mut tx, &self.statements.locked, key, value)
            .await?;
        if let Err(refusal) = write.decide(&self.name, key, token, found.as_ref()) {
            tx.rollback().await?;
            return Ok(Err(refusal));
        }
        let record = write.apply(key, token, found.as_ref());
        let fence = record.fence.map_or(0, FencingToken::as_i64);
        let state = record.state.as_ref().map(State::as_str);
        let payload = write
            .new_payload()
            .filter(|_| self.table.payload_column().is_some());
        match &found {
            None => {
                let (column, placeholder) = match payload {
                    Some(_) => (
                        format!(", {}", self.table.payload_column().expect("filtered")),
                        ", ?",
                    ),
                    None => (String::new(), ""),
                };
                let sql = format!(
                    "INSERT INTO {name} ({key}, {fence_column}, {state_column}{column}) \
                     VALUES (?, ?, ?{placeholder})",
                    name = self.table.name(),
                    key = self.table.key_column(),
                    fence_column = self.table.fence_column(),
                    state_column = self.table.state_column(),
                );
                let query = bind_key(sqlx::query(AssertSqlSafe(sql)), value)
                    .bind(fence)
                    .bind(state);
                let query = match payload {
                    Some(payload) => query.bind(payload),
                    None => query,
                };
                query.execute(&mut *tx).await?;
            }
            Some(before)
                if before.fence != record.fence
                    || before.state != record.state
                    || payload.is_some() =>
            {
                let payload_set = payload
                    .map(|_| format!(", {} = ?", self.table.payload_column().expect("filtered")))
                    .unwrap_or_default();
                let sql = format!(
                    "UPDATE {name} SET {fence_column} = ?, {state_column} = ?{payload_set} \
                     WHERE {key} = ? LIMIT 1",
                    name = self.table.name(),
                    key = self.table.key_column(),
                    fence_column = self.table.fence_column(),
                    state_column = self.table.state_column(),
                );
                let query = sqlx::query(AssertSqlSafe(sql)).bind(fence).bind(state);
                let query = match payload {
                    Some(payload) => query.bind(payload),
                    None => query,
                };
                bind_key(query, value).execute(&mut *tx).await?;
            }
            // A holder's write that changes nothing: the lock was the check.
            Some(_) => {}
        }
        tx.commit().await?;
        Ok(Ok(Written::new(found.as_ref(), record)))
    }

    fn failed(&self, failure: MySqlFailure, effect: RequestEffect) -> fencing_core::Error {
        failure.into_error(&self.name, effect)
    }
}

/// Binds a key as its column takes it.
fn bind_key<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    value: &KeyValue<'_>,
) -> Query<'q, MySql, MySqlArguments> {
    match value {
        KeyValue::Text(text) => query.bind(text.to_string()),
        KeyValue::Integer(n) => query.bind(*n),
    }
}

/// A record from a row of `fence, state, payload`.
fn record_from(row: &MySqlRow, key: &RecordKey) -> Result<Record, MySqlFailure> {
    let fence: i64 = row.try_get(0)?;
    let fence = match fence {
        0 => None,
        stored => Some(
            FencingToken::from_i64(stored)
                .map_err(|e| MySqlFailure::Corrupt(format!("stored fence {stored}"), e))?,
        ),
    };
    let state = row
        .try_get::<Option<String>, _>(1)?
        .map(|text| {
            State::new(text.clone())
                .map_err(|e| MySqlFailure::Corrupt(format!("stored state {text:?}"), e))
        })
        .transpose()?;
    Ok(Record {
        key: key.clone(),
        fence,
        state,
        payload: row.try_get::<Option<Vec<u8>>, _>(2)?.unwrap_or_default(),
    })
}

#[async_trait]
impl FencedStore for MySqlStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn identity(&self) -> StoreIdentity {
        self.identity.clone()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        let key_type = self.key_type().await?;
        let value = key_type.value(key)?;
        Checkout::run(&self.pool, async |conn| {
            self.found(conn, &self.statements.read, key, &value).await
        })
        .await
        .map_err(|failure| self.failed(failure, RequestEffect::ReadOnly))
    }
}

#[async_trait]
impl StoreWrites for MySqlStore {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        if write.new_payload().is_some() && self.table.payload_column().is_none() {
            return Err(InvalidInput::new(
                InputKind::Write,
                format!(
                    "{} has no payload column to write a payload to \
                     (MySqlTable::with_payload_column names one)",
                    self.name
                ),
            )
            .into());
        }
        let key_type = self.key_type().await?;
        let value = key_type.value(key)?;
        for _ in 0..RACE_ROUNDS {
            match self.write_once(key, &value, token, write).await {
                Err(MySqlFailure::Driver(err)) if is_rolled_back(&err) || is_duplicate(&err) => {
                    continue;
                }
                outcome => {
                    return outcome
                        .map_err(|failure| self.failed(failure, RequestEffect::Writes))?;
                }
            }
        }
        Err(self.failed(
            MySqlFailure::Inconsistent("the row kept being taken by other claims under the write"),
            RequestEffect::Writes,
        ))
    }
}

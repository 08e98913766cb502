//! Fenced writes on a MySQL or MariaDB table: each one a transaction that locks the row,
//! decides by the core's rules and applies.

use async_trait::async_trait;
use fencing_core::adapter::{
    HolderExt, RequestEffect, StoreIdentity, StoreWrites, check_distinct, check_store_name,
};
use fencing_core::{
    FenceCheck, FencedStore, FencedWrite, FencingToken, Holder, InputKind, InvalidInput, Record,
    RecordKey, Result, State, Written,
};
use futures_util::TryStreamExt;
use sqlx::mysql::{MySqlArguments, MySqlRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Either, MySql, MySqlConnection, MySqlPool, Row};
use tokio::sync::OnceCell;

use std::sync::Arc;

use crate::checkout::Checkout;
use crate::columns::{self, MySqlValue, MySqlWrite};
use crate::error::{MySqlFailure, is_duplicate, is_index_gone, is_rolled_back};
use crate::ident::MySqlIdent;
use crate::literal;
use crate::schema::{self, KeyValue, Shape};
use crate::table::MySqlTable;

/// The states a write may require and still go as one statement
/// ([`MySqlStore::write_in_one_statement`]): its answer carries `fence · 8 + the index of the
/// state found` (1 to 7), so fences below 2^60.
const ONE_STATEMENT_STATES: usize = 8;

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
    shape: Arc<OnceCell<Shape>>,
    statements: Arc<Statements>,
}

/// The statements that do not depend on the write.
#[derive(Debug)]
struct Statements {
    /// One record's row: fence, state, payload.
    read: String,
    /// Rows with their key first (as the bytes the server spells it in), before a `WHERE`.
    read_keyed: String,
    refused_in_state: String,
}

impl Statements {
    /// One write as one packet of four statements: `BEGIN`; the locked read of the row (what
    /// the write found); the update under the core's conditions, which applies iff
    /// `FencedWrite::decide` admits what the read found (the fence, then the states) and the
    /// key names one row; `COMMIT`. Values are written into the text as hex literals and
    /// digits, never as SQL, since several statements cannot be prepared as one.
    fn write(
        &self,
        table: &MySqlTable,
        value: &KeyValue<'_>,
        token: FencingToken,
        write: &FencedWrite,
        extras: &[(MySqlIdent, MySqlValue)],
        via: &Via<'_>,
    ) -> String {
        let key_value = value.literal();
        // FOUND_ROWS() is what the locked read found (it reads at most two): the key names one
        // row, or nothing is written.
        let locked_read = self
            .read
            .replace("= ? LIMIT 2", &format!("= {key_value} LIMIT 2"));
        let update = self.update(
            table,
            &format!("{} = {key_value}", table.key_column()),
            token,
            write,
            extras,
        );
        let update = format!("{update} AND FOUND_ROWS() = 1");
        match via {
            Via::Pool => format!("BEGIN; {locked_read} FOR UPDATE; {update} LIMIT 1; COMMIT"),
            // Inside the caller's transaction, or nothing: outside one, the lock would end
            // with the read.
            Via::Caller(_) => format!(
                "SELECT @@in_transaction; {locked_read} FOR UPDATE; \
                 {update} AND @@in_transaction = 1 LIMIT 1"
            ),
        }
    }

    /// The write of many records, up to its commit: `BEGIN`; the locked read of their rows,
    /// key first; the update of every row the core's conditions admit. The caller checks what
    /// the read found (one row per key, as many rows changed as it admits) before it commits.
    fn write_many(
        &self,
        table: &MySqlTable,
        values: &[&KeyValue<'_>],
        token: FencingToken,
        write: &FencedWrite,
    ) -> String {
        let key = table.key_column();
        let listed: Vec<String> = values.iter().map(|value| value.literal()).collect();
        let keys = format!("{key} IN ({})", listed.join(", "));
        let update = self.update(table, &keys, token, write, &[]);
        format!(
            "BEGIN; {read} WHERE {keys} ORDER BY {key} FOR UPDATE; {update}",
            read = self.read_keyed
        )
    }

    /// The one prepared statement of [`MySqlStore::write_in_one_statement`]: the update of the
    /// key's row under the fence and state conditions, answering the row's fence and state
    /// through `LAST_INSERT_ID`. It reads through `unique_index` (`FORCE INDEX`), so once that
    /// index is gone the server refuses the statement (1176) instead of matching twin rows,
    /// and it changes one row at most (`LIMIT 1`). Placeholders: the token (a claim's), the
    /// new state and payload (where set), the key, the token, the required states twice.
    fn one_statement(
        &self,
        table: &MySqlTable,
        unique_index: &MySqlIdent,
        write: &FencedWrite,
    ) -> String {
        let (name, key, fence, state) = (
            table.name(),
            table.key_column(),
            table.fence_column(),
            table.state_column(),
        );
        let (mut sets, fence_condition) = match write.check() {
            FenceCheck::Claim => (format!("{fence} = ?"), format!("{fence} <= ?")),
            FenceCheck::HolderOnly => (format!("{fence} = {fence}"), format!("{fence} = ?")),
        };
        if write.new_state().is_some() {
            sets += &format!(", {state} = ?");
        }
        if let (Some(_), Some(column)) = (write.new_payload(), table.payload_column()) {
            sets += &format!(", {column} = ?");
        }
        let count = write.required_states().map_or(0, <[State]>::len);
        let states = vec!["?"; count].join(", ");
        format!(
            "UPDATE {name} FORCE INDEX ({unique_index}) SET {sets} WHERE {key} = ? \
             AND {fence_condition} AND {fence} >= 0 AND {fence} < {limit} \
             AND {state} IN ({states}) \
             AND LAST_INSERT_ID({fence} * {ONE_STATEMENT_STATES} + FIELD({state}, {states})) \
             LIMIT 1",
            limit = 1i64 << 60,
        )
    }

    /// `UPDATE` of the rows `which` selects, under the core's conditions for `write` under
    /// `token`, setting what it sets and `extras`.
    fn update(
        &self,
        table: &MySqlTable,
        which: &str,
        token: FencingToken,
        write: &FencedWrite,
        extras: &[(MySqlIdent, MySqlValue)],
    ) -> String {
        let (name, fence) = (table.name(), table.fence_column());
        let token = token.as_i64();
        let (set_fence, fence_condition) = match write.check() {
            FenceCheck::Claim => (format!("{fence} = {token}"), format!("{fence} <= {token}")),
            FenceCheck::HolderOnly => (format!("{fence} = {fence}"), format!("{fence} = {token}")),
        };
        let mut sets = set_fence;
        if let Some(state) = write.new_state() {
            sets += &format!(
                ", {} = {}",
                table.state_column(),
                literal::text(state.as_str())
            );
        }
        if let (Some(payload), Some(column)) = (write.new_payload(), table.payload_column()) {
            sets += &format!(", {column} = {}", literal::bytes(payload));
        }
        for (column, value) in extras {
            sets += &format!(", {column} = {}", columns::literal(value));
        }
        // A row whose fence or state this crate could not read back is refused inside the
        // statement, so nothing is written over it (the caller gets an `Error::Corrupt`). A
        // state the write requires is a state name already: only a write that takes any state
        // checks the stored one.
        let state = table.state_column();
        let readable_state = match write.required_states() {
            Some(states) => {
                let listed: Vec<String> =
                    states.iter().map(|s| literal::text(s.as_str())).collect();
                format!("{state} IN ({})", listed.join(", "))
            }
            None => format!(
                "({state} IS NULL OR ({state} <> '' AND OCTET_LENGTH({state}) <= {max} \
                 AND {state} NOT REGEXP {refused}))",
                max = State::MAX_BYTES,
                refused = self.refused_in_state,
            ),
        };
        format!(
            "UPDATE {name} SET {sets} WHERE {which} AND {fence_condition} AND {fence} >= 0 \
             AND {readable_state}"
        )
    }
}

impl MySqlStore {
    /// A store on `table` through `pool` (create the table with
    /// [`MySqlTable::create_if_missing`], or bring your own).
    pub fn new(pool: MySqlPool, table: MySqlTable) -> Self {
        let payload = table
            .payload_column()
            .map_or_else(|| "NULL".to_owned(), ToString::to_string);
        let columns = format!(
            "{fence}, {state}, {payload} FROM {name}",
            fence = table.fence_column(),
            state = table.state_column(),
            name = table.name(),
        );
        let key = table.key_column();
        let read = format!("SELECT {columns} WHERE {key} = ? LIMIT 2");
        let read_keyed = format!("SELECT CAST({key} AS BINARY), {columns}");
        MySqlStore {
            name: table.store_name(),
            identity: StoreIdentity::new(),
            shape: Arc::default(),
            statements: Arc::new(Statements {
                read,
                read_keyed,
                refused_in_state: literal::refused_in_state(),
            }),
            pool,
            table,
        }
    }

    /// The same store under another name in errors and batches (`mysql:database.table`
    /// unless renamed), e.g. `payouts`. Any text without control or format characters.
    pub fn named(mut self, name: &str) -> Result<Self, InvalidInput> {
        check_store_name(name)?;
        self.name = name.into();
        Ok(self)
    }

    /// A [`MySqlWrite`] (a fenced write that may set other columns too) of `key` under
    /// `holder`'s token on the store's pool, with [`Holder::write`]'s rules: an ambiguous
    /// outcome sent again, a refused retry recognised as this holder's own, a refusal
    /// explained. The pool's form of [`Self::write_in`]. A claim of a missing record inserts
    /// it with those columns set.
    pub async fn write_with(
        &self,
        holder: &Holder,
        key: &RecordKey,
        write: impl Into<MySqlWrite>,
    ) -> Result<Written> {
        let write = write.into();
        holder
            .write_by(self, key, write.write(), || {
                self.write_on_pool(key, holder.token(), write.write(), write.extras())
            })
            .await
    }

    /// Applies one fenced write of `key` under `holder`'s token inside the caller's
    /// transaction on `conn` (begun with `pool.begin()` or `conn.begin()`), so that it commits
    /// or rolls back with the caller's own statements (a ledger entry beside a confirm): the
    /// row locked and read, then the conditional update, in one round trip; a claim of a
    /// missing record inserts it (the table's other columns need defaults). `write` is a
    /// [`FencedWrite`] or a [`MySqlWrite`] that also sets other columns.
    ///
    /// It goes through [`HolderExt::run_write_once`]: a refusal is explained and reported as
    /// [`Holder::write`] reports it, and with a batch's holder the batch notes it. An
    /// ambiguous outcome is returned, not retried: the transaction it was part of is gone. A
    /// connection outside a transaction is refused with [`fencing_core::Error::InvalidInput`],
    /// nothing written. (`@@in_transaction`: MariaDB's; MySQL 8 has no such variable and is
    /// not run here.)
    pub async fn write_in(
        &self,
        conn: &mut MySqlConnection,
        holder: &Holder,
        key: &RecordKey,
        write: impl Into<MySqlWrite>,
    ) -> Result<Written> {
        let write = write.into();
        let (fenced, extras) = (write.write(), write.extras());
        let attempt = async {
            let value = self.checked(key, fenced, extras).await?;
            self.write_once(
                Via::Caller(conn),
                key,
                &value,
                holder.token(),
                fenced,
                extras,
            )
            .await
            .map_err(|failure| self.failed(failure, RequestEffect::Writes))?
        };
        holder.run_write_once(self, &[key], fenced, attempt).await
    }

    /// The table.
    pub fn table(&self) -> &MySqlTable {
        &self.table
    }

    /// The pool.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    /// The table's shape, read once.
    async fn shape(&self) -> Result<&Shape> {
        self.shape
            .get_or_try_init(async || {
                Checkout::run(&self.pool, async |conn| {
                    schema::read(conn, &self.table).await
                })
                .await
            })
            .await
            .map_err(|failure| self.failed(failure, RequestEffect::ReadOnly))
    }

    /// `key` as the table takes it, once `write` and its `extras` are checked against the
    /// table: nothing is sent for a write the table cannot take.
    async fn checked<'k>(
        &self,
        key: &'k RecordKey,
        write: &FencedWrite,
        extras: &[(MySqlIdent, MySqlValue)],
    ) -> Result<KeyValue<'k>> {
        self.check_payload(write)?;
        let shape = self.shape().await?;
        shape.check_extras(&self.table, extras.iter().map(|(column, _)| column))?;
        Ok(shape.key_type.value(key)?)
    }

    /// One fenced write on the store's pool, sent again where the server rolled it back for
    /// a race it lost.
    async fn write_on_pool(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
        extras: &[(MySqlIdent, MySqlValue)],
    ) -> Result<Written> {
        let value = self.checked(key, write, extras).await?;
        let unique_index = &self.shape().await?.unique_index;
        if extras.is_empty()
            && let Some(written) = self
                .write_in_one_statement(unique_index, key, &value, token, write)
                .await
                .map_err(|failure| self.failed(failure, RequestEffect::Writes))?
        {
            return Ok(written);
        }
        self.in_race_rounds(|| self.write_once(Via::Pool, key, &value, token, write, extras))
            .await?
    }

    /// The write as one prepared, autocommitted `UPDATE` where what it needs back fits in the
    /// statement's own answer: a write that requires one of a few states, on a table without a
    /// payload column (or setting the payload), whose row's fence and state come back through
    /// `LAST_INSERT_ID(fence · 8 + FIELD(state, …))`. `None` where it does not apply or the
    /// statement changed nothing (no such record, a refusal, a fence too large to carry): the
    /// transaction of [`Self::write_once`] then finds out which, and says so.
    async fn write_in_one_statement(
        &self,
        unique_index: &MySqlIdent,
        key: &RecordKey,
        value: &KeyValue<'_>,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Option<Written>, MySqlFailure> {
        let Some(states) = write.required_states() else {
            return Ok(None);
        };
        let payload_known = self.table.payload_column().is_none() || write.new_payload().is_some();
        if states.is_empty() || states.len() >= ONE_STATEMENT_STATES || !payload_known {
            return Ok(None);
        }
        let sql = self
            .statements
            .one_statement(&self.table, unique_index, write);
        let mut query = sqlx::query(AssertSqlSafe(sql));
        if write.check() == FenceCheck::Claim {
            query = query.bind(token.as_i64());
        }
        if let Some(state) = write.new_state() {
            query = query.bind(state.as_str());
        }
        if let Some(payload) = write.new_payload() {
            query = query.bind(payload);
        }
        query = bind_key(query, value).bind(token.as_i64());
        for state in states.iter().chain(states) {
            query = query.bind(state.as_str());
        }
        let done = match Checkout::run(&self.pool, async |conn| {
            Ok::<_, MySqlFailure>(query.execute(conn).await?)
        })
        .await
        {
            // The key's index is gone: the transaction counts the rows the key names.
            Err(MySqlFailure::Driver(err)) if is_index_gone(&err) => return Ok(None),
            done => done?,
        };
        if done.rows_affected() != 1 {
            return Ok(None);
        }
        let found = done.last_insert_id();
        let state = usize::try_from(found % ONE_STATEMENT_STATES as u64)
            .ok()
            .and_then(|index| states.get(index.checked_sub(1)?));
        let (Some(state), Ok(fence)) = (state, i64::try_from(found / ONE_STATEMENT_STATES as u64))
        else {
            return Err(MySqlFailure::Inconsistent(
                "the update's answer carried no state it requires",
            ));
        };
        let found = Record {
            key: key.clone(),
            fence: fence_from_db(fence)?,
            state: Some(state.clone()),
            payload: Vec::new(),
        };
        if write.decide(&self.name, key, token, Some(&found)).is_err() {
            return Err(MySqlFailure::Inconsistent(
                "the update applied a write its row refuses",
            ));
        }
        let record = write.apply(key, token, Some(&found));
        Ok(Some(Written::new(Some(&found), record)))
    }

    /// `attempt`, sent again where the server rolled it back for a race it lost (a deadlock
    /// between claims creating one record, a row another claim inserted first).
    async fn in_race_rounds<T, Attempt: Future<Output = Result<T, MySqlFailure>>>(
        &self,
        mut attempt: impl FnMut() -> Attempt,
    ) -> Result<T> {
        for _ in 0..RACE_ROUNDS {
            match attempt().await {
                Err(MySqlFailure::Driver(err)) if is_rolled_back(&err) || is_duplicate(&err) => {
                    continue;
                }
                outcome => {
                    return outcome.map_err(|failure| self.failed(failure, RequestEffect::Writes));
                }
            }
        }
        Err(self.failed(
            MySqlFailure::Inconsistent("the rows kept being taken by other claims under the write"),
            RequestEffect::Writes,
        ))
    }

    /// The record of `key` as the read statement finds it, unless several rows have its key.
    async fn found(
        &self,
        conn: &mut MySqlConnection,
        key: &RecordKey,
        value: &KeyValue<'_>,
    ) -> Result<Option<Record>, MySqlFailure> {
        let rows = bind_key(
            sqlx::query(AssertSqlSafe(self.statements.read.clone())),
            value,
        )
        .fetch_all(&mut *conn)
        .await?;
        self.found_in(&rows, key)
    }

    /// One attempt, one round trip for a record that exists: the row locked and read, the
    /// conditional update (and, on the store's pool, the transaction's begin and commit). A
    /// claim of a record that does not exist then inserts it.
    async fn write_once(
        &self,
        mut via: Via<'_>,
        key: &RecordKey,
        value: &KeyValue<'_>,
        token: FencingToken,
        write: &FencedWrite,
        extras: &[(MySqlIdent, MySqlValue)],
    ) -> Result<Result<Written>, MySqlFailure> {
        let sql = self
            .statements
            .write(&self.table, value, token, write, extras, &via);
        let (rows, applied) = match via.reborrow() {
            Via::Pool => {
                let answers =
                    Checkout::run(&self.pool, async |conn| answers(conn, sql).await).await?;
                // BEGIN, the locked read, the update, COMMIT.
                match <[_; 4]>::try_from(answers) {
                    Ok([_, (rows, _), (_, applied), _]) => (rows, applied),
                    Err(_) => return Err(four_answers()),
                }
            }
            Via::Caller(conn) => match <[_; 3]>::try_from(answers(conn, sql).await?) {
                Ok([(in_transaction, _), (rows, _), (_, applied)]) => {
                    let in_transaction: u64 = match in_transaction.first() {
                        Some(row) => row.try_get(0)?,
                        None => return Err(four_answers()),
                    };
                    if in_transaction == 0 {
                        return Ok(Err(outside_a_transaction(&self.name)));
                    }
                    (rows, applied)
                }
                Err(_) => return Err(four_answers()),
            },
        };
        let found = self.found_in(&rows, key)?;
        if let Err(refusal) = write.decide(&self.name, key, token, found.as_ref()) {
            return match applied {
                0 => Ok(Err(refusal)),
                _ => Err(MySqlFailure::Inconsistent(
                    "the update applied a write its row refuses",
                )),
            };
        }
        let record = write.apply(key, token, found.as_ref());
        match (&found, applied) {
            (Some(_), 1) => Ok(Ok(Written::new(found.as_ref(), record))),
            (None, _) => self
                .insert(via, value, &record, extras)
                .await
                .map(|()| Ok(Written::new(None, record))),
            (Some(_), _) => Err(MySqlFailure::Inconsistent(
                "the update refused a write its row admits",
            )),
        }
    }

    /// The record a write's locked read found, unless several rows have its key.
    fn found_in(&self, rows: &[MySqlRow], key: &RecordKey) -> Result<Option<Record>, MySqlFailure> {
        match rows {
            [] => Ok(None),
            [row] => record_from(row, key, 0).map(Some),
            _ => Err(self.not_unique(key)),
        }
    }

    fn not_unique(&self, key: &RecordKey) -> MySqlFailure {
        MySqlFailure::Schema(format!(
            "several rows of {} have key {key:?}, so nothing was written: the key column {} \
             must be unique (ALTER TABLE {} ADD UNIQUE ({}))",
            self.table.name(),
            self.table.key_column(),
            self.table.name(),
            self.table.key_column()
        ))
    }

    /// Creates the record a claim found missing; a row another claim inserted first is a race
    /// lost, and the write is sent again.
    async fn insert(
        &self,
        via: Via<'_>,
        value: &KeyValue<'_>,
        record: &Record,
        extras: &[(MySqlIdent, MySqlValue)],
    ) -> Result<(), MySqlFailure> {
        let sql = self.insert_sql(&[(value, record)], extras);
        let insert = async |conn: &mut MySqlConnection| -> Result<(), MySqlFailure> {
            sqlx::raw_sql(AssertSqlSafe(sql)).execute(conn).await?;
            Ok(())
        };
        match via {
            Via::Pool => Checkout::run(&self.pool, insert).await,
            Via::Caller(conn) => insert(conn).await,
        }
    }

    /// The `INSERT` of `rows` (each key with the record a claim made of it), setting `extras`
    /// in each.
    fn insert_sql(
        &self,
        rows: &[(&KeyValue<'_>, &Record)],
        extras: &[(MySqlIdent, MySqlValue)],
    ) -> String {
        let payload = self.table.payload_column();
        let (mut extra_columns, mut extra_values) = (String::new(), String::new());
        for (column, value) in extras {
            extra_columns += &format!(", {column}");
            extra_values += &format!(", {}", columns::literal(value));
        }
        let values: Vec<String> = rows
            .iter()
            .map(|(value, record)| {
                format!(
                    "({key_value}, {fence_value}, {state_value}{payload_value}{extra_values})",
                    key_value = value.literal(),
                    fence_value = record.fence.map_or(0, FencingToken::as_i64),
                    state_value = record
                        .state
                        .as_ref()
                        .map_or("NULL".to_owned(), |s| literal::text(s.as_str())),
                    payload_value = payload
                        .map(|_| format!(", {}", literal::bytes(&record.payload)))
                        .unwrap_or_default(),
                )
            })
            .collect();
        format!(
            "INSERT INTO {name} ({key}, {fence}, {state}{payload_column}{extra_columns}) \
             VALUES {values}",
            name = self.table.name(),
            key = self.table.key_column(),
            fence = self.table.fence_column(),
            state = self.table.state_column(),
            payload_column = payload.map(|p| format!(", {p}")).unwrap_or_default(),
            values = values.join(", "),
        )
    }

    /// One try at [`StoreWrites::write_many`] on `conn`, for the keys whose values the table
    /// takes: their rows locked and read and every admitted one updated in one round trip, the
    /// missing ones a claim creates inserted, then the commit, once what the read found
    /// agrees with what the update changed. The outcomes in the order of `keys`.
    async fn write_many_once(
        &self,
        conn: &mut MySqlConnection,
        keys: &[(&RecordKey, KeyValue<'_>)],
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>, MySqlFailure> {
        let values: Vec<&KeyValue<'_>> = keys.iter().map(|(_, value)| value).collect();
        let sql = self
            .statements
            .write_many(&self.table, &values, token, write);
        let (rows, applied) = match <[_; 3]>::try_from(answers(conn, sql).await?) {
            Ok([_, (rows, _), (_, applied)]) => (rows, applied),
            Err(_) => return Err(four_answers()),
        };
        let mut found: Vec<Option<Result<Record, MySqlFailure>>> =
            keys.iter().map(|_| None).collect();
        for row in &rows {
            let Some(i) = keys.iter().position(|(_, value)| value.is_in(row, 0)) else {
                return Err(MySqlFailure::Inconsistent(
                    "the locked read returned a row of none of the keys",
                ));
            };
            if found[i].is_some() {
                return Err(self.not_unique(keys[i].0));
            }
            found[i] = Some(record_from(row, keys[i].0, 1));
        }
        let (mut outcomes, mut admitted, mut created) = (Vec::new(), 0, Vec::new());
        for ((key, value), found) in keys.iter().zip(found) {
            let found = match found.transpose() {
                Ok(found) => found,
                Err(unreadable) => {
                    outcomes.push(Err(self.failed(unreadable, RequestEffect::Writes)));
                    continue;
                }
            };
            if let Err(refusal) = write.decide(&self.name, key, token, found.as_ref()) {
                outcomes.push(Err(refusal));
                continue;
            }
            let record = write.apply(key, token, found.as_ref());
            match found {
                Some(_) => admitted += 1,
                None => created.push((value, record.clone())),
            }
            outcomes.push(Ok(Written::new(found.as_ref(), record)));
        }
        if applied != admitted {
            return Err(MySqlFailure::Inconsistent(
                "the update changed other rows than the ones its locked read admits",
            ));
        }
        if !created.is_empty() {
            let rows: Vec<(&KeyValue<'_>, &Record)> = created
                .iter()
                .map(|(value, record)| (*value, record))
                .collect();
            let sql = self.insert_sql(&rows, &[]);
            sqlx::raw_sql(AssertSqlSafe(sql))
                .execute(&mut *conn)
                .await?;
        }
        sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
        Ok(outcomes)
    }

    /// Refuses a payload for a table without a payload column, before anything is sent.
    fn check_payload(&self, write: &FencedWrite) -> Result<(), InvalidInput> {
        if write.new_payload().is_some() && self.table.payload_column().is_none() {
            return Err(InvalidInput::new(
                InputKind::Write,
                format!(
                    "{} has no payload column to write a payload to \
                     (MySqlTable::with_payload_column names one)",
                    self.name
                ),
            ));
        }
        Ok(())
    }

    /// A driver error from a statement of the caller's own, run in one transaction with this
    /// store's writes (a ledger entry beside a confirm), as this store's error: a lost
    /// connection is [`fencing_core::Error::Ambiguous`], anything else the failure of the
    /// store it means ([`fencing_core::Error::failure`]: a missing table is
    /// [`fencing_core::Error::Misconfigured`], a refused grant
    /// [`fencing_core::Error::PermissionDenied`]…), the driver's error kept as its source.
    pub fn sql_failure(&self, err: sqlx::Error) -> fencing_core::Error {
        self.failed(err.into(), RequestEffect::Writes)
    }

    fn failed(&self, failure: MySqlFailure, effect: RequestEffect) -> fencing_core::Error {
        failure.into_error(&self.name, effect)
    }
}

/// Where a request takes its connection ([`fencing_core::adapter::Via`]).
type Via<'a> = fencing_core::adapter::Via<'a, MySqlConnection>;

/// Every statement of a packet sent as text, in order: the rows each returned and the rows it
/// changed (found, for an `UPDATE`: sqlx connects with `CLIENT_FOUND_ROWS`).
async fn answers(
    conn: &mut MySqlConnection,
    sql: String,
) -> Result<Vec<(Vec<MySqlRow>, u64)>, MySqlFailure> {
    let mut answers = sqlx::raw_sql(AssertSqlSafe(sql)).fetch_many(&mut *conn);
    let (mut statements, mut rows) = (Vec::new(), Vec::new());
    while let Some(answer) = answers.try_next().await? {
        match answer {
            Either::Left(done) => {
                statements.push((std::mem::take(&mut rows), done.rows_affected()))
            }
            Either::Right(row) => rows.push(row),
        }
    }
    Ok(statements)
}

fn four_answers() -> MySqlFailure {
    MySqlFailure::Inconsistent("a write's statements did not each answer once")
}

/// The refusal of [`MySqlStore::write_in`] on a connection outside a transaction: nothing
/// was written.
fn outside_a_transaction(store: &str) -> fencing_core::Error {
    InvalidInput::new(
        InputKind::Write,
        format!(
            "{store}: write_in joins the caller's transaction, and the connection is in none: \
             begin one (pool.begin(), conn.begin()) or write through the store's own pool"
        ),
    )
    .into()
}

/// Binds a key as its column takes it.
fn bind_key<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    value: &KeyValue<'_>,
) -> Query<'q, MySql, MySqlArguments> {
    match value {
        KeyValue::Text(text) => query.bind(text.to_string()),
        KeyValue::Bytes(uuid) => query.bind(uuid.to_vec()),
        KeyValue::Integer(n) => query.bind(*n),
    }
}

/// A record from a row's `fence, state, payload`, from its column `first` on.
fn record_from(row: &MySqlRow, key: &RecordKey, first: usize) -> Result<Record, MySqlFailure> {
    let fence: i64 = row.try_get(first)?;
    let fence = fence_from_db(fence)?;
    let state = row
        .try_get::<Option<String>, _>(first + 1)?
        .map(|text| {
            State::new(text.clone())
                .map_err(|e| MySqlFailure::Corrupt(format!("stored state {text:?}"), e))
        })
        .transpose()?;
    Ok(Record {
        key: key.clone(),
        fence,
        state,
        payload: row
            .try_get::<Option<Vec<u8>>, _>(first + 2)?
            .unwrap_or_default(),
    })
}

/// A fence as stored: 0 is "no fence yet", a negative number is corruption.
pub(crate) fn fence_from_db(stored: i64) -> Result<Option<FencingToken>, MySqlFailure> {
    match stored {
        0 => Ok(None),
        stored => FencingToken::from_i64(stored)
            .map(Some)
            .map_err(|e| MySqlFailure::Corrupt(format!("stored fence {stored}"), e)),
    }
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
        let value = self.shape().await?.key_type.value(key)?;
        Checkout::run(&self.pool, async |conn| self.found(conn, key, &value).await)
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
        self.write_on_pool(key, token, write, &[]).await
    }

    /// One round trip for the rows of all `keys` (locked in key order, so concurrent batches
    /// cannot deadlock, and every admitted one updated), an `INSERT` of the missing ones a
    /// claim creates, and the commit. A key the table cannot take is refused on its own.
    async fn write_many(
        &self,
        keys: &[RecordKey],
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        check_distinct(keys)?;
        self.check_payload(write)?;
        let key_type = self.shape().await?.key_type;
        let checked: Vec<Result<KeyValue<'_>, InvalidInput>> =
            keys.iter().map(|key| key_type.value(key)).collect();
        let taken: Vec<(&RecordKey, KeyValue<'_>)> = keys
            .iter()
            .zip(&checked)
            .filter_map(|(key, value)| Some((key, value.as_ref().ok()?.clone())))
            .collect();
        let mut written = Vec::new();
        if !taken.is_empty() {
            written = self
                .in_race_rounds(|| {
                    Checkout::run(&self.pool, async |conn| {
                        self.write_many_once(conn, &taken, token, write).await
                    })
                })
                .await?;
        }
        let mut written = written.into_iter();
        Ok(checked
            .into_iter()
            .map(|value| match value {
                Ok(_) => written.next().expect("an outcome for every key sent"),
                Err(refused) => Err(refused.into()),
            })
            .collect())
    }
}

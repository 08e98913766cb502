//! A Postgres table as a fenced store.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::adapter::{
    HolderExt, RecordOutcomes, RequestEffect, StoreIdentity, StoreWrites, check_distinct,
    check_store_name,
};
use fencing_core::{
    Error, FenceCheck, FencedStore, FencedWrite, FencingToken, Holder, InputKind, InvalidInput,
    Record, RecordKey, Result, Written,
};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Connection, PgConnection, PgPool, Postgres, Row};
use tokio::sync::OnceCell;

use crate::columns::{PgValue, PgWrite};
use crate::decode::{fence_from_db, record_from, state_from_db};
use crate::error::PgFailure;
use crate::schema::{INSPECT, Schema, Unfit};
use crate::session::{Checkout, Session};
use crate::statements::ExtraColumn;
use crate::table::PgTable;

/// A [`PgTable`] on a pool: every write is one conditional statement that checks the
/// fence and the state in the row it changes.
///
/// Before its first write the store reads the table's shape from the catalog once: the
/// columns exist, the key column is unique and of a supported type ([`crate::PgKeyType`]).
/// A failure is reported and checked again next time.
///
/// The `*_in` methods take the caller's own connection or transaction instead of the pool
/// (`&mut *conn` of a pooled connection, `&mut *tx` of a transaction) and use it alone, the
/// table's shape included when it is not known yet; the writes among them take a [`Holder`],
/// so fenced writes join other work in one transaction with a regression still told from a
/// stale holder. They take a plain
/// `&mut PgConnection` (not any `sqlx::Acquire`) so that they can be called from inside an
/// `#[async_trait]` method, such as a pipeline's [`fencing_core::RecordWrites`].
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
    table: PgTable,
    name: Arc<str>,
    schema: Arc<OnceCell<Schema>>,
    session: Session,
    identity: StoreIdentity,
}

/// What [`PgStore::write_together`] did.
#[derive(Debug)]
#[non_exhaustive]
pub struct PgWrittenTogether {
    /// The records written, in the order given, each with what it held before: pass one to
    /// [`fencing_core::EffectStart::Claimed`] to run its effect without claiming it again.
    pub written: Vec<Written>,
    /// The keys left alone because the row is missing or outside the required states, each
    /// with the rejection a single write would have had. A row found where the write's work
    /// is already done is not among them: it is in [`Self::already_done`].
    pub skipped: Vec<Error>,
    /// The keys left alone because the row was found in the state where the write's work is
    /// already done ([`FencedWrite::already_done_in`]; a [`fencing_core::Lifecycle`]'s claim
    /// names its done state), in the order given. Not refusals: a batch goes on past them
    /// whatever its mismatch policy, as [`Holder::run_effect`] reports such a record
    /// [`fencing_core::EffectOutcome::AlreadyDone`].
    pub already_done: Vec<RecordKey>,
    /// What the store answered for each of [`Self::already_done`], as a single write would
    /// have been answered: the events report it as the state it met.
    found_done: Vec<Error>,
}

impl RecordOutcomes for PgWrittenTogether {
    /// Every record the statement left alone, as a single write would have been refused
    /// (those already done included: a batch's holder does not note them).
    fn refusals(&self) -> Vec<&Error> {
        self.skipped.iter().chain(&self.found_done).collect()
    }
}

impl PgWrittenTogether {
    /// The keys written, in the order given.
    pub fn keys(&self) -> Vec<RecordKey> {
        self.written.iter().map(|w| w.record.key.clone()).collect()
    }
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
            schema: Arc::default(),
            session: Session::default(),
            identity: StoreIdentity::new(),
        }
    }

    /// The same store under another name in errors and batches (`postgres:schema.table`
    /// unless renamed), e.g. `payouts`. Any text without control or format characters.
    pub fn named(mut self, name: &str) -> Result<Self, InvalidInput> {
        check_store_name(name)?;
        self.name = name.into();
        Ok(self)
    }

    /// The same store for a pooler in transaction mode (PgBouncer's `pool_mode = transaction`),
    /// which may hand each transaction a different server connection: no named prepared
    /// statement is created, and every request runs inside a transaction (a savepoint inside
    /// the caller's), so its unnamed statement lives and dies on one server connection.
    pub fn for_transaction_pooling(mut self) -> Self {
        self.session = Session::transaction_pooling();
        self
    }

    /// The table.
    pub fn table(&self) -> &PgTable {
        &self.table
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The table's shape, read from the catalog on first use, on the connection `via` names:
    /// a write in the caller's transaction learns it there, never from a second connection
    /// of the pool (which the caller's transaction may be holding the last of).
    async fn schema(&self, via: Via<'_>) -> Result<&Schema> {
        self.schema
            .get_or_try_init(|| async {
                let table = self.table.name();
                let row = self
                    .request(via, RequestEffect::ReadOnly, async |conn| {
                        self.query(INSPECT)
                            .bind(table.to_string())
                            .bind(table.schema().as_str())
                            .bind(self.table.key_column().as_str())
                            .bind(table.name().as_str())
                            .fetch_one(conn)
                            .await
                            .map_err(PgFailure::from)
                    })
                    .await?;
                Schema::from_row(&self.table, &row).map_err(|unfit| match unfit {
                    Unfit::Input(err) => err.into(),
                    Unfit::Schema(failure) => self.failed(failure, RequestEffect::ReadOnly),
                })
            })
            .await
    }

    /// [`Session::run_on`], its failures as this store's errors.
    async fn run_on<T>(
        &self,
        conn: &mut PgConnection,
        effect: RequestEffect,
        op: impl AsyncFnOnce(&mut PgConnection) -> Result<T, PgFailure>,
    ) -> Result<T> {
        self.session
            .run_on(conn, effect, op)
            .await
            .map_err(|(failure, effect)| self.failed(failure, effect))
    }

    /// Runs `op` on the connection `via` names, taken from the pool only now (after the
    /// request's own checks) as a [`Checkout`].
    async fn with_connection<T>(
        &self,
        via: Via<'_>,
        op: impl AsyncFnOnce(&mut PgConnection) -> Result<T>,
    ) -> Result<T> {
        match via {
            Via::Caller(conn) => op(conn).await,
            Via::Pool => Checkout::run(&self.pool, op)
                .await
                .map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))?,
        }
    }

    /// One request on the connection `via` names, as the store's session talks.
    async fn request<T>(
        &self,
        via: Via<'_>,
        effect: RequestEffect,
        op: impl AsyncFnOnce(&mut PgConnection) -> Result<T, PgFailure>,
    ) -> Result<T> {
        self.with_connection(via, async |conn| self.run_on(conn, effect, op).await)
            .await
    }

    fn query(&self, sql: impl Into<String>) -> Query<'static, Postgres, PgArguments> {
        self.session.query(sql)
    }

    /// Reads one record on the caller's connection or transaction.
    pub async fn read_in(
        &self,
        conn: &mut PgConnection,
        key: &RecordKey,
    ) -> Result<Option<Record>> {
        self.read_via(Via::Caller(conn), key).await
    }

    /// [`Self::read_in`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `PgStore::read_in`")]
    #[doc(hidden)]
    pub async fn read_on(
        &self,
        conn: &mut PgConnection,
        key: &RecordKey,
    ) -> Result<Option<Record>> {
        self.read_in(conn, key).await
    }

    async fn read_via(&self, mut via: Via<'_>, key: &RecordKey) -> Result<Option<Record>> {
        let schema = self.schema(via.reborrow()).await?;
        schema.key_type.check(key)?;
        self.request(via, RequestEffect::ReadOnly, async |conn| {
            let row = self
                .query(schema.statements.read())
                .bind(key.as_str())
                .fetch_optional(conn)
                .await?;
            row.map(|row| {
                let fence = fence_from_db(row.try_get(0)?)?;
                record_from(key, fence, row.try_get(1), row.try_get(2))
            })
            .transpose()
        })
        .await
    }

    async fn write_via(
        &self,
        mut via: Via<'_>,
        key: &RecordKey,
        token: FencingToken,
        write: &PgWrite,
    ) -> Result<Written> {
        let schema = self.schema(via.reborrow()).await?;
        schema.key_type.check(key)?;
        let extras = self.check_write(schema, write)?;
        let fenced = write.write();
        let one = schema.statements.write_one(fenced.check(), &extras);
        let insert = schema.statements.insert(&extras);
        self.request(via, RequestEffect::Writes, async |conn| {
            for _ in 0..RACE_ROUNDS {
                let row = self
                    .bind_write(&one, key.as_str(), token, fenced, &extras)
                    .fetch_optional(&mut *conn)
                    .await?;
                if let Some(row) = row {
                    return self.updated(row, key, token, fenced);
                }
                // No row: no such record, or (where the statement answers only when it
                // applied) refused, which the record as it is now explains.
                let found = match schema.statements.explain_one() {
                    Some(explain) => self
                        .query(explain)
                        .bind(key.as_str())
                        .fetch_optional(&mut *conn)
                        .await?
                        .map(|row| self.found(&row, key))
                        .transpose()?,
                    None => None,
                };
                if let Err(refusal) = fenced.decide(&self.name, key, token, found.as_ref()) {
                    return Ok(Err(refusal));
                }
                // A claim without a state condition creates a missing record.
                if found.is_none() {
                    let inserted = self
                        .bind_write(&insert, key.as_str(), token, fenced, &extras)
                        .fetch_optional(&mut *conn)
                        .await?;
                    if let Some(row) = inserted {
                        let record = record_from(key, Some(token), row.try_get(0), row.try_get(1))?;
                        return Ok(Ok(Written::new(None, record)));
                    }
                }
                // The row appeared, or changed since the update to one that admits the write:
                // again.
            }
            Err(PgFailure::Inconsistent(
                "the row kept appearing and disappearing under the write",
            ))
        })
        .await?
    }

    /// A [`PgWrite`] (a fenced write that may set other columns too) of `key` under
    /// `holder`'s token on the store's pool, with [`Holder::write`]'s rules: an ambiguous
    /// outcome sent again, a refused retry recognised as this holder's own, a refusal
    /// explained. The pool's form of [`Self::write_in`].
    pub async fn write_with(
        &self,
        holder: &Holder,
        key: &RecordKey,
        write: impl Into<PgWrite>,
    ) -> Result<Written> {
        let write = write.into();
        holder
            .write_by(self, key, write.write(), || {
                self.write_via(Via::Pool, key, holder.token(), &write)
            })
            .await
    }

    /// Applies one fenced write of `key` under `holder`'s token on the caller's connection or
    /// transaction; `write` is a [`FencedWrite`] or a [`PgWrite`] that also sets other
    /// columns.
    ///
    /// One statement checks fence and state, applies the change and returns what the row
    /// held: on PostgreSQL 18 and later a plain `UPDATE … RETURNING` of the old values (a
    /// refusal is then explained by reading the row); before 18, the row locked and read
    /// first in the same statement, so a refusal names the fence it met. A claim without a
    /// state condition on a missing row inserts it; the table's other columns need defaults.
    ///
    /// It goes through [`HolderExt::run_write_once`]: a refusal is explained (a counter that
    /// went backwards is a regression, not a newer holder) and the outcome reported as
    /// [`Holder::write`] reports it; with a batch's holder ([`fencing_core::FencedBatch::holder`])
    /// the batch notes it. For writes inside the caller's transaction: an ambiguous outcome is
    /// returned, not retried, since the transaction it was part of is gone.
    pub async fn write_in(
        &self,
        conn: &mut PgConnection,
        holder: &Holder,
        key: &RecordKey,
        write: impl Into<PgWrite>,
    ) -> Result<Written> {
        let write = write.into();
        let attempt = self.write_via(Via::Caller(conn), key, holder.token(), &write);
        holder
            .run_write_once(self, &[key], write.write(), attempt)
            .await
    }

    /// Applies one fenced write to many rows in one transaction on the caller's connection
    /// (a savepoint inside the caller's transaction).
    ///
    /// Rows are locked in key order (so concurrent batches cannot deadlock), decided by the
    /// contract, and the accepted ones changed by one `UPDATE … WHERE key = ANY($1)`. A fence
    /// refusal on any row rolls the whole statement back and is returned through `holder`
    /// (so a counter that went backwards is reported as such). Missing rows and rows outside
    /// the required states are skipped and listed. Missing rows are not created.
    ///
    /// Dropped before it ends, it leaves `conn` as sqlx leaves a dropped transaction: 0.9.0
    /// can leave a `BEGIN` that was on its way open on the server, unknown to the connection.
    /// [`Self::write_together`], on the store's own pool, closes such a connection instead of
    /// returning it.
    pub async fn write_together_in(
        &self,
        conn: &mut PgConnection,
        holder: &Holder,
        keys: &[RecordKey],
        write: impl Into<PgWrite>,
    ) -> Result<PgWrittenTogether> {
        self.write_together_via(Via::Caller(conn), holder, keys, &write.into())
            .await
    }

    /// [`Self::write_together_in`], as 0.1 named it.
    #[deprecated(since = "0.2.0", note = "renamed `PgStore::write_together_in`")]
    #[doc(hidden)]
    pub async fn write_together_on(
        &self,
        conn: &mut PgConnection,
        holder: &Holder,
        keys: &[RecordKey],
        write: impl Into<PgWrite>,
    ) -> Result<PgWrittenTogether> {
        self.write_together_in(conn, holder, keys, write).await
    }

    async fn write_together_via(
        &self,
        via: Via<'_>,
        holder: &Holder,
        keys: &[RecordKey],
        write: &PgWrite,
    ) -> Result<PgWrittenTogether> {
        let records: Vec<&RecordKey> = keys.iter().collect();
        let attempt = self.write_together_unobserved(via, holder.token(), keys, write);
        holder
            .run_write_once(self, &records, write.write(), attempt)
            .await
    }

    async fn write_together_unobserved(
        &self,
        mut via: Via<'_>,
        token: FencingToken,
        keys: &[RecordKey],
        write: &PgWrite,
    ) -> Result<PgWrittenTogether> {
        let schema = self.schema(via.reborrow()).await?;
        check_distinct(keys)?;
        for key in keys {
            schema.key_type.check(key)?;
        }
        let extras = self.check_write(schema, write)?;
        let fenced = write.write();
        self.with_connection(via, async |conn| {
            let mut tx = Connection::begin(conn)
                .await
                .map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))?;
            let current = self.lock_records(&mut tx, schema, keys).await?;
            let decided = self.decide_together(fenced, token, keys, &current)?;
            let written = &decided.written;
            if !written.is_empty() {
                let texts: Vec<&str> = written.iter().map(|w| w.record.key.as_str()).collect();
                let changed = self
                    .bind_write(
                        &schema.statements.write_together(fenced.check(), &extras),
                        texts,
                        token,
                        fenced,
                        &extras,
                    )
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
            Ok(decided)
        })
        .await
    }

    /// Locks the rows of `keys` (in key order, so two batches cannot deadlock) and reads the
    /// records they hold, by key.
    async fn lock_records(
        &self,
        conn: &mut PgConnection,
        schema: &Schema,
        keys: &[RecordKey],
    ) -> Result<HashMap<String, Record>> {
        let texts: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        let rows = self
            .query(schema.statements.lock_many())
            .bind(&texts)
            .fetch_all(conn)
            .await
            .map_err(|e| self.failed(e.into(), RequestEffect::ReadOnly))?;
        let decoded = |row: &PgRow| -> Result<(String, Record), PgFailure> {
            let text: String = row.try_get(0)?;
            let key = RecordKey::new(text.clone())
                .map_err(|e| PgFailure::Corrupt(format!("stored key {text:?}"), e))?;
            let fence = fence_from_db(row.try_get(1)?)?;
            Ok((
                text,
                record_from(&key, fence, row.try_get(2), row.try_get(3))?,
            ))
        };
        rows.iter()
            .map(|row| decoded(row).map_err(|e| self.failed(e, RequestEffect::ReadOnly)))
            .collect()
    }

    /// What `write` under `token` does to each of `keys`, given the locked `current` records:
    /// the writes it makes, the records it skips with why, and those already done. A fence
    /// refusal refuses the whole call.
    fn decide_together(
        &self,
        write: &FencedWrite,
        token: FencingToken,
        keys: &[RecordKey],
        current: &HashMap<String, Record>,
    ) -> Result<PgWrittenTogether> {
        let mut decided = PgWrittenTogether {
            written: Vec::new(),
            skipped: Vec::new(),
            already_done: Vec::new(),
            found_done: Vec::new(),
        };
        for key in keys {
            let record = current.get(key.as_str());
            match (write.decide(&self.name, key, token, record), record) {
                (Ok(()), Some(record)) => decided.written.push(Written::new(
                    Some(record),
                    write.apply(key, token, Some(record)),
                )),
                (Ok(()), None) => decided.skipped.push(Error::NotFound {
                    store: self.name.to_string(),
                    record: key.clone(),
                }),
                (Err(err @ Error::Fenced { .. }), _) => return Err(err),
                (Err(err), _) if write.finds_done(&err) => {
                    decided.already_done.push(key.clone());
                    decided.found_done.push(err);
                }
                (Err(err), _) => decided.skipped.push(err),
            }
        }
        Ok(decided)
    }

    /// Why a fenced statement of your own on `key` ([`crate::push_fence_condition`] under
    /// `holder`) changed no row: reads the row and decides `write` (what your statement
    /// meant to do) under the holder's token against it, as this store's own writes decide,
    /// so the answer is the refusal [`Holder::write`] would have had. The fence it met
    /// ([`Error::Fenced`], or [`Error::TokenRegression`] for a fence above every token the
    /// holder's source issued, which raises the source), a missing row ([`Error::NotFound`])
    /// or a state outside the write's ([`Error::StateMismatch`]); a batch's holder notes it.
    /// `Ok(())`: the row as it is now admits the write (it changed after your statement ran):
    /// nothing refused it, and the statement may be sent again.
    pub async fn explain_unapplied(
        &self,
        holder: &Holder,
        key: &RecordKey,
        write: &FencedWrite,
    ) -> Result<()> {
        holder
            .run_write(self, &[key], write, async || {
                let found = self.read(key).await?;
                write.decide(&self.name, key, holder.token(), found.as_ref())
            })
            .await
    }

    /// [`Self::write_together_in`] on the store's pool. (This was `PgStore::write_many`
    /// before `write_many` became [`StoreWrites::write_many`](fencing_core::adapter::StoreWrites::write_many), which answers per record and
    /// takes a bare token: code that calls `write_many(&fence, …)` wants this.)
    pub async fn write_together(
        &self,
        holder: &Holder,
        keys: &[RecordKey],
        write: impl Into<PgWrite>,
    ) -> Result<PgWrittenTogether> {
        self.write_together_via(Via::Pool, holder, keys, &write.into())
            .await
    }

    /// What about a write can be refused before sending, besides its keys: a payload without
    /// a payload column, the extra columns.
    fn check_write<'w>(
        &self,
        schema: &'w Schema,
        write: &'w PgWrite,
    ) -> Result<Vec<ExtraColumn<'w>>> {
        if write.write().new_payload().is_some() && self.table.payload_column().is_none() {
            return Err(InvalidInput::new(
                InputKind::Write,
                format!(
                    "{} has no payload column to write a payload to (PgTable::with_payload_column names one)",
                    self.name
                ),
            )
            .into());
        }
        Ok(schema.extra_columns(write)?)
    }

    fn bind_write<'q, K>(
        &self,
        sql: &str,
        keys: K,
        token: FencingToken,
        write: &'q FencedWrite,
        extras: &[ExtraColumn<'q>],
    ) -> Query<'static, Postgres, PgArguments>
    where
        K: 'q + sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres>,
    {
        let required: Option<Vec<String>> = write
            .required_states()
            .map(|states| states.iter().map(|s| s.as_str().to_owned()).collect());
        let mut query = self
            .query(sql)
            .bind(keys)
            .bind(token.as_i64())
            .bind(write.new_state().map(|s| s.as_str().to_owned()))
            .bind(required)
            .bind(write.new_payload().map(<[u8]>::to_vec));
        for (_, _, value) in extras {
            query = match value {
                PgValue::Text(text) => query.bind(text.clone()),
                PgValue::Int(n) => query.bind(*n),
                PgValue::Bool(b) => query.bind(*b),
                PgValue::Bytes(bytes) => query.bind(bytes.clone()),
                // Written into the statement as SQL (`NULL`, `now()`), not bound.
                PgValue::Null | PgValue::Now => query,
            };
        }
        query
    }

    /// Turns the single-row statement's answer into the outcome.
    fn updated(
        &self,
        row: PgRow,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Result<Written>, PgFailure> {
        let found = self.found(&row, key)?;
        let applied: bool = row.try_get(2)?;
        if !applied {
            return match write.decide(&self.name, key, token, Some(&found)) {
                Err(refusal) => Ok(Err(refusal)),
                Ok(()) => Err(PgFailure::Inconsistent(
                    "the update refused a write its own row admits",
                )),
            };
        }
        let fence = match write.check() {
            FenceCheck::Claim => Some(token),
            FenceCheck::HolderOnly => found.fence,
        };
        let record = record_from(key, fence, row.try_get(3), row.try_get(4))?;
        Ok(Ok(Written::over(found.fence, found.state, record)))
    }

    /// The record as a single-row answer found it before the write (its payload left out),
    /// unless several rows have its key.
    fn found(&self, row: &PgRow, key: &RecordKey) -> Result<Record, PgFailure> {
        let matched: i64 = row.try_get(5)?;
        if matched > 1 {
            return Err(PgFailure::Schema(format!(
                "{matched} rows of {} have key {key:?}, so nothing was written: the key \
                 column {} must be unique (CREATE UNIQUE INDEX ON {} ({}))",
                self.table.name(),
                self.table.key_column(),
                self.table.name(),
                self.table.key_column()
            )));
        }
        Ok(Record {
            key: key.clone(),
            fence: fence_from_db(row.try_get(0)?)?,
            state: state_from_db(row.try_get(1)?)?,
            payload: Vec::new(),
        })
    }

    /// A driver error from a statement of the caller's own, run in one transaction with this
    /// store's writes (a ledger entry beside a confirm), as this store's error: a lost
    /// connection is [`Error::Ambiguous`], anything else the failure of the store it means
    /// ([`Error::failure`]: a missing table is [`Error::Misconfigured`], a refused grant
    /// [`Error::PermissionDenied`]…), the driver's error kept as its source.
    pub fn sql_failure(&self, err: sqlx::Error) -> Error {
        self.failed(err.into(), RequestEffect::Writes)
    }

    fn failed(&self, failure: PgFailure, effect: RequestEffect) -> Error {
        failure.into_error(&self.name, effect)
    }
}

/// Where a request takes its connection ([`fencing_core::adapter::Via`]).
type Via<'a> = fencing_core::adapter::Via<'a, PgConnection>;

#[async_trait]
impl FencedStore for PgStore {
    fn name(&self) -> &str {
        &self.name
    }

    fn identity(&self) -> StoreIdentity {
        self.identity.clone()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.read_via(Via::Pool, key).await
    }
}

#[async_trait]
impl StoreWrites for PgStore {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.write_via(Via::Pool, key, token, &write.into()).await
    }

    /// One statement for the whole group (rows locked in key order, each decided on its
    /// own); a missing record a claim may create is then inserted as a single write would.
    async fn write_many(
        &self,
        keys: &[RecordKey],
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Vec<Result<Written>>> {
        check_distinct(keys)?;
        let schema = self.schema(Via::Pool).await?;
        for key in keys {
            schema.key_type.check(key)?;
        }
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        let sql = schema.statements.write_group(write.check());
        let rows = self
            .request(Via::Pool, RequestEffect::Writes, async |conn| {
                Ok(self
                    .bind_write(sql, &texts, token, write, &[])
                    .fetch_all(conn)
                    .await?)
            })
            .await?;
        let mut found: HashMap<String, PgRow> = HashMap::with_capacity(rows.len());
        for row in rows {
            let given: String = row
                .try_get(6)
                .map_err(|e| self.failed(e.into(), RequestEffect::Writes))?;
            found.insert(given, row);
        }
        let mut outcomes = Vec::with_capacity(keys.len());
        for key in keys {
            let outcome = match found.remove(key.as_str()) {
                Some(row) => self
                    .updated(row, key, token, write)
                    .map_err(|failure| self.failed(failure, RequestEffect::Writes))
                    .and_then(|outcome| outcome),
                None => match write.decide(&self.name, key, token, None) {
                    Err(refusal) => Err(refusal),
                    Ok(()) => self.write(key, token, write).await,
                },
            };
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }
}

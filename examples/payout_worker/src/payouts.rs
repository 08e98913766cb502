//! The team's payouts database, as the worker uses it: PostgreSQL ([`PgPayouts`]) or MySQL
//! and MariaDB ([`MySqlPayouts`]). Each keeps the tables as the team had them before fencing
//! (a `payouts` table keyed by uuid with a `status` column, and a ledger of entries), plus
//! the one change fencing asks for: the `fence` column its table's `migration_sql` prints.

use std::collections::HashMap;
use std::sync::Arc;

use fencing::mysql::MySqlValue;
use fencing::postgres::PgValue;
use fencing::prelude::*;
use fencing::{EpochSource, Error, FencedWrite, Result, State, Written};
use sqlx::{AssertSqlSafe, MySqlPool, PgPool, Row};

/// The claims of one run, sent together: the payouts claimed, and how many were paid already
/// (by another run, between the worker's read and its claim).
pub(crate) struct Claimed {
    /// Each payout claimed, with what it held before (a take-over finds `sending`).
    pub(crate) written: Vec<Written>,
    /// Payouts the claim found paid already.
    pub(crate) already_paid: usize,
}

/// What the worker does in the team's database.
#[async_trait]
pub(crate) trait PayoutsDb: Send + Sync {
    /// The payouts table as a fenced store, named `payouts` in errors and batches.
    fn store(&self) -> Arc<dyn FencedStore>;

    /// Creates the team's tables if missing, as they were before fencing.
    async fn create_tables(&self) -> Result<(), BoxError>;

    /// The migration fencing asks for (a `fence` column and its check), as a migration tool
    /// would run it.
    fn migration_sql(&self) -> String;

    /// Runs [`Self::migration_sql`].
    async fn migrate(&self) -> Result<(), BoxError>;

    /// Queues `count` payouts of `cents` each for `merchant`.
    async fn queue(&self, merchant: &str, count: i64, cents: i64) -> Result<(), BoxError>;

    /// The amount of each payout of `merchant` not yet paid, by payout id: a plain read,
    /// which claims nothing.
    async fn unpaid_amounts(&self, merchant: &str) -> Result<HashMap<RecordKey, i64>>;

    /// Claims every payout of `keys` under `holder`'s token in one round trip.
    async fn claim_all(
        &self,
        holder: &Holder,
        keys: &[RecordKey],
        claim: &FencedWrite,
    ) -> Result<Claimed>;

    /// Marks the payout paid (its time and the gateway's reference) and posts its ledger
    /// entry, in one transaction: a confirm the fence refuses takes the entry with it.
    async fn confirm_with_ledger_entry(
        &self,
        holder: &Holder,
        key: &RecordKey,
        reference: &str,
    ) -> Result<Written>;

    /// Marks the payout paid (its time and the gateway's reference); its ledger is elsewhere.
    async fn confirm(&self, holder: &Holder, key: &RecordKey, reference: &str) -> Result<Written>;

    /// Epochs for a Redis lease, kept in this database: a Redis that loses its counter
    /// cannot issue a token twice.
    async fn epochs(&self) -> Result<Arc<dyn EpochSource>>;

    /// `(payouts paid, ledger entries)`, by plain SQL.
    async fn counts(&self) -> Result<(i64, i64), BoxError>;
}

/// `queued → sending → paid`.
pub(crate) fn lifecycle() -> Lifecycle {
    let state = |s: &str| State::new(s).expect("a state name");
    Lifecycle::new(state("queued"), state("sending"), state("paid")).expect("three states")
}

/// The payouts in PostgreSQL: `"<schema>".payouts` keyed by `uuid`, the ledger in
/// `"<schema>_Billing"."LedgerEntries"` with a `bigserial` key.
pub(crate) struct PgPayouts {
    pool: PgPool,
    schema: String,
    store: Arc<PgStore>,
}

impl PgPayouts {
    /// The payouts in `schema` through `pool`.
    pub(crate) fn new(pool: PgPool, schema: &str) -> Result<Self> {
        let store = PgStore::new(pool.clone(), Self::table(schema)?).named("payouts")?;
        Ok(PgPayouts {
            pool,
            schema: schema.to_owned(),
            store: Arc::new(store),
        })
    }

    /// The payouts table as fencing sees it: key `id` (uuid), state `status`, fence `fence`.
    pub(crate) fn table(schema: &str) -> Result<PgTable> {
        Ok(PgTable::new(schema, "payouts")?.with_state_column("status")?)
    }

    /// The confirm: `paid`, with its time and the gateway's reference.
    fn paid(reference: &str) -> Result<PgWrite> {
        Ok(PgWrite::new(lifecycle().confirm())
            .set("paid_at", PgValue::Now)?
            .set("gateway_ref", reference)?)
    }
}

#[async_trait]
impl PayoutsDb for PgPayouts {
    fn store(&self) -> Arc<dyn FencedStore> {
        self.store.clone()
    }

    async fn create_tables(&self) -> Result<(), BoxError> {
        let schema = &self.schema;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS \"{schema}\"; \
             CREATE TABLE IF NOT EXISTS \"{schema}\".payouts (id uuid PRIMARY KEY, \
               merchant text NOT NULL, amount_cents bigint NOT NULL, \
               status text NOT NULL DEFAULT 'queued', \
               created_at timestamptz NOT NULL DEFAULT clock_timestamp(), \
               paid_at timestamptz, gateway_ref text); \
             CREATE SCHEMA IF NOT EXISTS \"{schema}_Billing\"; \
             CREATE TABLE IF NOT EXISTS \"{schema}_Billing\".\"LedgerEntries\" \
               (id bigserial PRIMARY KEY, payout_id uuid NOT NULL UNIQUE, \
               amount_cents bigint NOT NULL, posted_at timestamptz NOT NULL DEFAULT now())"
        )))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    fn migration_sql(&self) -> String {
        self.store.table().migration_sql()
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        sqlx::raw_sql(AssertSqlSafe(self.migration_sql()))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn queue(&self, merchant: &str, count: i64, cents: i64) -> Result<(), BoxError> {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO \"{}\".payouts (id, merchant, amount_cents) \
             SELECT gen_random_uuid(), $1, $2 FROM generate_series(1, $3)",
            self.schema
        )))
        .bind(merchant)
        .bind(cents)
        .bind(count)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn unpaid_amounts(&self, merchant: &str) -> Result<HashMap<RecordKey, i64>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT id::text, amount_cents FROM \"{}\".payouts \
             WHERE merchant = $1 AND status <> 'paid' ORDER BY created_at, id",
            self.schema
        )))
        .bind(merchant)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.store.sql_failure(e))?;
        amounts(rows.iter().map(|row| (row.get(0), row.get(1))))
    }

    async fn claim_all(
        &self,
        holder: &Holder,
        keys: &[RecordKey],
        claim: &FencedWrite,
    ) -> Result<Claimed> {
        // One statement: the rows locked in key order, each decided on its own.
        let claimed = self.store.write_together(holder, keys, claim).await?;
        Ok(Claimed {
            written: claimed.written,
            already_paid: claimed.already_done.len(),
        })
    }

    async fn confirm_with_ledger_entry(
        &self,
        holder: &Holder,
        key: &RecordKey,
        reference: &str,
    ) -> Result<Written> {
        let store = &self.store;
        let mut tx = self.pool.begin().await.map_err(|e| store.sql_failure(e))?;
        let written = store
            .write_in(&mut tx, holder, key, Self::paid(reference)?)
            .await?;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO \"{schema}_Billing\".\"LedgerEntries\" (payout_id, amount_cents) \
             SELECT id, amount_cents FROM \"{schema}\".payouts WHERE id = $1::uuid",
            schema = self.schema
        )))
        .bind(key.as_str())
        .execute(&mut *tx)
        .await
        .map_err(|e| store.sql_failure(e))?;
        tx.commit().await.map_err(|e| store.sql_failure(e))?;
        Ok(written)
    }

    async fn confirm(&self, holder: &Holder, key: &RecordKey, reference: &str) -> Result<Written> {
        self.store
            .write_with(holder, key, Self::paid(reference)?)
            .await
    }

    async fn epochs(&self) -> Result<Arc<dyn EpochSource>> {
        let epochs = PgEpochSource::new(
            self.pool.clone(),
            PgQualifiedName::new(&self.schema, "epochs")?,
        );
        epochs.create_if_missing().await?;
        Ok(Arc::new(epochs))
    }

    async fn counts(&self) -> Result<(i64, i64), BoxError> {
        let schema = &self.schema;
        Ok(sqlx::query_as(AssertSqlSafe(format!(
            "SELECT (SELECT count(*) FROM \"{schema}\".payouts WHERE status = 'paid'), \
             (SELECT count(*) FROM \"{schema}_Billing\".\"LedgerEntries\")"
        )))
        .fetch_one(&self.pool)
        .await?)
    }
}

/// The payouts in MySQL or MariaDB: `` `<database>`.payouts `` keyed by a uuid in
/// `BINARY(16)` (neither server has a uuid type both share), the ledger in
/// `` `<database>`.ledger_entries `` with an `AUTO_INCREMENT` key.
pub(crate) struct MySqlPayouts {
    pool: MySqlPool,
    database: String,
    store: Arc<MySqlStore>,
}

/// A `BINARY(16)` uuid as text, in SQL both servers take (MariaDB 10.11 has no
/// `BIN_TO_UUID`).
const UUID_TEXT: &str = "LOWER(CONCAT_WS('-', HEX(SUBSTR(id, 1, 4)), HEX(SUBSTR(id, 5, 2)), \
     HEX(SUBSTR(id, 7, 2)), HEX(SUBSTR(id, 9, 2)), HEX(SUBSTR(id, 11, 6))))";

impl MySqlPayouts {
    /// The payouts in `database` through `pool`.
    pub(crate) fn new(pool: MySqlPool, database: &str) -> Result<Self> {
        let store = MySqlStore::new(pool.clone(), Self::table(database)?).named("payouts")?;
        Ok(MySqlPayouts {
            pool,
            database: database.to_owned(),
            store: Arc::new(store),
        })
    }

    /// The payouts table as fencing sees it: key `id` (uuid in `BINARY(16)`), state
    /// `status`, fence `fence`.
    pub(crate) fn table(database: &str) -> Result<MySqlTable> {
        Ok(MySqlTable::new(database, "payouts")?.with_state_column("status")?)
    }

    /// The confirm: `paid`, with its time and the gateway's reference.
    fn paid(reference: &str) -> Result<MySqlWrite> {
        Ok(MySqlWrite::new(lifecycle().confirm())
            .set("paid_at", MySqlValue::Now)?
            .set("gateway_ref", reference)?)
    }
}

#[async_trait]
impl PayoutsDb for MySqlPayouts {
    fn store(&self) -> Arc<dyn FencedStore> {
        self.store.clone()
    }

    async fn create_tables(&self) -> Result<(), BoxError> {
        let database = &self.database;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE DATABASE IF NOT EXISTS `{database}`; \
             CREATE TABLE IF NOT EXISTS `{database}`.payouts (id BINARY(16) PRIMARY KEY, \
               merchant VARCHAR(64) NOT NULL, amount_cents BIGINT NOT NULL, \
               status VARCHAR(16) NOT NULL DEFAULT 'queued', \
               created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), \
               paid_at DATETIME(6) NULL, gateway_ref VARCHAR(64) NULL); \
             CREATE TABLE IF NOT EXISTS `{database}`.ledger_entries \
               (id BIGINT AUTO_INCREMENT PRIMARY KEY, payout_id BINARY(16) NOT NULL UNIQUE, \
               amount_cents BIGINT NOT NULL, \
               posted_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))"
        )))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    fn migration_sql(&self) -> String {
        self.store.table().migration_sql()
    }

    async fn migrate(&self) -> Result<(), BoxError> {
        Ok(self.store.table().add_fence_column(&self.pool).await?)
    }

    async fn queue(&self, merchant: &str, count: i64, cents: i64) -> Result<(), BoxError> {
        // A thousand rows a statement (a statement takes at most 65,535 placeholders), all of
        // them in one transaction: the queue is filled whole or not at all.
        const ROWS: i64 = 1_000;
        let mut tx = self.pool.begin().await?;
        let mut left = count;
        while left > 0 {
            let rows = left.min(ROWS);
            let values = vec!["(UNHEX(REPLACE(UUID(), '-', '')), ?, ?)"; rows as usize].join(", ");
            let mut insert = sqlx::query(AssertSqlSafe(format!(
                "INSERT INTO `{}`.payouts (id, merchant, amount_cents) VALUES {values}",
                self.database
            )));
            for _ in 0..rows {
                insert = insert.bind(merchant).bind(cents);
            }
            insert.execute(&mut *tx).await?;
            left -= rows;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn unpaid_amounts(&self, merchant: &str) -> Result<HashMap<RecordKey, i64>> {
        let rows = sqlx::query(AssertSqlSafe(format!(
            "SELECT {UUID_TEXT}, amount_cents FROM `{}`.payouts \
             WHERE merchant = ? AND status <> 'paid' ORDER BY created_at, id",
            self.database
        )))
        .bind(merchant)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| self.store.sql_failure(e))?;
        amounts(rows.iter().map(|row| (row.get(0), row.get(1))))
    }

    async fn claim_all(
        &self,
        holder: &Holder,
        keys: &[RecordKey],
        claim: &FencedWrite,
    ) -> Result<Claimed> {
        // One round trip: the rows locked in key order, each decided on its own. A payout
        // left alone (cancelled meanwhile) the batch notes under its mismatch policy; one
        // found paid is no refusal; anything else ends the run.
        let outcomes = holder.write_many(&*self.store, keys, claim).await?;
        let mut claimed = Claimed {
            written: Vec::new(),
            already_paid: 0,
        };
        for outcome in outcomes {
            match outcome {
                Ok(written) => claimed.written.push(written),
                Err(err) if claim.finds_done(&err) => claimed.already_paid += 1,
                Err(Error::StateMismatch { .. } | Error::NotFound { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(claimed)
    }

    async fn confirm_with_ledger_entry(
        &self,
        holder: &Holder,
        key: &RecordKey,
        reference: &str,
    ) -> Result<Written> {
        let store = &self.store;
        let mut tx = self.pool.begin().await.map_err(|e| store.sql_failure(e))?;
        let written = store
            .write_in(&mut tx, holder, key, Self::paid(reference)?)
            .await?;
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO `{database}`.ledger_entries (payout_id, amount_cents) \
             SELECT id, amount_cents FROM `{database}`.payouts \
             WHERE id = UNHEX(REPLACE(?, '-', ''))",
            database = self.database
        )))
        .bind(key.as_str())
        .execute(&mut *tx)
        .await
        .map_err(|e| store.sql_failure(e))?;
        tx.commit().await.map_err(|e| store.sql_failure(e))?;
        Ok(written)
    }

    async fn confirm(&self, holder: &Holder, key: &RecordKey, reference: &str) -> Result<Written> {
        self.store
            .write_with(holder, key, Self::paid(reference)?)
            .await
    }

    async fn epochs(&self) -> Result<Arc<dyn EpochSource>> {
        let epochs = MySqlEpochSource::new(
            self.pool.clone(),
            MySqlQualifiedName::new(&self.database, "epochs")?,
        );
        epochs.create_if_missing().await?;
        Ok(Arc::new(epochs))
    }

    async fn counts(&self) -> Result<(i64, i64), BoxError> {
        let database = &self.database;
        Ok(sqlx::query_as(AssertSqlSafe(format!(
            "SELECT (SELECT COUNT(*) FROM `{database}`.payouts WHERE status = 'paid'), \
             (SELECT COUNT(*) FROM `{database}`.ledger_entries)"
        )))
        .fetch_one(&self.pool)
        .await?)
    }
}

/// Amounts by payout id, from `(id as text, cents)` rows.
fn amounts(rows: impl Iterator<Item = (String, i64)>) -> Result<HashMap<RecordKey, i64>> {
    let mut amounts = HashMap::new();
    for (id, cents) in rows {
        amounts.insert(RecordKey::new(id)?, cents);
    }
    Ok(amounts)
}

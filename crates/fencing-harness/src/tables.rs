//! The team's own tables of a run, the refunds and the job's row, on the SQL server the run
//! keeps them on: PostgreSQL, or MariaDB for a run on the MySQL lease (a team whose tables all
//! live in MySQL). The one place where the harness's SQL differs by server: the tables as the
//! team wrote them, with triggers that keep their history (so the audit sees every accepted
//! write, not only the last), the plain reads a worker and the audit make, and the fenced
//! writes through the library's store of that server.

use std::sync::Arc;

use fencing_core::adapter::{Extras, SqlValue};
use fencing_core::{FencedStore, FencedWrite, Holder, RecordKey, Result, WriteWith, Written};
use fencing_mysql::{MySqlQualifiedName, MySqlStore};
use fencing_postgres::{PgQualifiedName, PgStore};
use sqlx::{AssertSqlSafe, Row};

/// The refunds table as the team wrote it, with a fence column or without (a team that forgot
/// its migration), the job's table, and the triggers that keep both histories, in the
/// PostgreSQL schema `schema`.
pub(crate) fn postgres_ddl(schema: &str, with_fence: bool, job: &str) -> String {
    let fence = if with_fence {
        "fence bigint NOT NULL DEFAULT 0 CHECK (fence >= 0),"
    } else {
        ""
    };
    format!(
        "CREATE SCHEMA \"{schema}\";
         CREATE TABLE \"{schema}\".refunds (
             id text PRIMARY KEY, merchant text NOT NULL, amount_cents bigint NOT NULL,
             state text NOT NULL DEFAULT 'pending', {fence}
             claimed_by text, confirmed_by text, gateway_ref text,
             filed boolean NOT NULL DEFAULT false);
         CREATE TABLE \"{schema}\".refund_history (
             seq bigserial PRIMARY KEY, id text NOT NULL, fence bigint, state text NOT NULL,
             claimed_by text, confirmed_by text, filed boolean NOT NULL,
             at timestamptz NOT NULL DEFAULT clock_timestamp());
         CREATE FUNCTION \"{schema}\".keep_history() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO \"{schema}\".refund_history (id, fence, state, claimed_by, confirmed_by, filed)
             VALUES (NEW.id, {fence_value}, NEW.state, NEW.claimed_by, NEW.confirmed_by, NEW.filed);
             RETURN NEW;
         END $$;
         CREATE TRIGGER keep_history AFTER INSERT OR UPDATE ON \"{schema}\".refunds
             FOR EACH ROW EXECUTE FUNCTION \"{schema}\".keep_history();
         CREATE TABLE \"{schema}\".jobs (
             id text PRIMARY KEY, state text NOT NULL DEFAULT 'pending', {fence}
             taken_by text, finished_by text);
         CREATE TABLE \"{schema}\".job_history (
             seq bigserial PRIMARY KEY, fence bigint, taken_by text, finished_by text);
         CREATE FUNCTION \"{schema}\".keep_job_history() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO \"{schema}\".job_history (fence, taken_by, finished_by)
             VALUES ({fence_value}, NEW.taken_by, NEW.finished_by);
             RETURN NEW;
         END $$;
         CREATE TRIGGER keep_job_history AFTER UPDATE ON \"{schema}\".jobs
             FOR EACH ROW EXECUTE FUNCTION \"{schema}\".keep_job_history();
         INSERT INTO \"{schema}\".jobs (id) VALUES ('{job}');",
        fence_value = if with_fence { "NEW.fence" } else { "NULL" },
    )
}

/// The same tables and triggers in the MySQL database `database` (which exists): keys compared
/// byte for byte (a `_bin` collation that does not pad), as a fenced table's keys must be.
pub(crate) fn mysql_ddl(database: &str, with_fence: bool, job: &str) -> String {
    let fence = if with_fence {
        "fence BIGINT NOT NULL DEFAULT 0 CHECK (fence >= 0),"
    } else {
        ""
    };
    let fence_value = if with_fence { "NEW.fence" } else { "NULL" };
    let key = "VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin";
    format!(
        "CREATE TABLE `{database}`.refunds (
             id {key} PRIMARY KEY, merchant VARCHAR(32) NOT NULL, amount_cents BIGINT NOT NULL,
             state VARCHAR(16) NOT NULL DEFAULT 'pending', {fence}
             claimed_by VARCHAR(64), confirmed_by VARCHAR(64), gateway_ref VARCHAR(64),
             filed BOOLEAN NOT NULL DEFAULT FALSE);
         CREATE TABLE `{database}`.refund_history (
             seq BIGINT AUTO_INCREMENT PRIMARY KEY, id {key} NOT NULL, fence BIGINT,
             state VARCHAR(16) NOT NULL, claimed_by VARCHAR(64), confirmed_by VARCHAR(64),
             filed BOOLEAN NOT NULL, at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6));
         CREATE TRIGGER `{database}`.refund_inserted AFTER INSERT ON `{database}`.refunds
             FOR EACH ROW INSERT INTO `{database}`.refund_history
             (id, fence, state, claimed_by, confirmed_by, filed)
             VALUES (NEW.id, {fence_value}, NEW.state, NEW.claimed_by, NEW.confirmed_by, NEW.filed);
         CREATE TRIGGER `{database}`.refund_updated AFTER UPDATE ON `{database}`.refunds
             FOR EACH ROW INSERT INTO `{database}`.refund_history
             (id, fence, state, claimed_by, confirmed_by, filed)
             VALUES (NEW.id, {fence_value}, NEW.state, NEW.claimed_by, NEW.confirmed_by, NEW.filed);
         CREATE TABLE `{database}`.jobs (
             id {key} PRIMARY KEY, state VARCHAR(16) NOT NULL DEFAULT 'pending', {fence}
             taken_by VARCHAR(64), finished_by VARCHAR(64));
         CREATE TABLE `{database}`.job_history (
             seq BIGINT AUTO_INCREMENT PRIMARY KEY, fence BIGINT, taken_by VARCHAR(64),
             finished_by VARCHAR(64));
         CREATE TRIGGER `{database}`.job_updated AFTER UPDATE ON `{database}`.jobs
             FOR EACH ROW INSERT INTO `{database}`.job_history (fence, taken_by, finished_by)
             VALUES ({fence_value}, NEW.taken_by, NEW.finished_by);
         INSERT INTO `{database}`.jobs (id) VALUES ('{job}');"
    )
}

/// A refund not yet filed, as a plain read found it.
#[derive(Clone, Debug)]
pub struct UnfiledRefund {
    /// Its key.
    pub key: RecordKey,
    /// Its amount.
    pub amount_cents: i64,
    /// The gateway's reference, when an earlier holder confirmed it already.
    pub confirmed_reference: Option<String>,
}

/// A refund's row at the end of a run, as the audit reads it.
#[derive(Clone, Debug)]
pub struct RefundRow {
    /// Its key.
    pub id: String,
    /// Its state.
    pub state: String,
    /// Whether its ledger entry and receipt were written and the row marked so.
    pub filed: bool,
    /// Its fence.
    pub fence: i64,
    /// The holder that claimed it last.
    pub claimed_by: Option<String>,
    /// The holder that confirmed it.
    pub confirmed_by: Option<String>,
    /// The gateway's reference its confirm recorded.
    pub gateway_ref: Option<String>,
}

/// One of the team's tables through the library's store of its server.
#[derive(Clone, Debug)]
pub enum TeamTable {
    /// A table in PostgreSQL.
    Postgres(Arc<PgStore>),
    /// A table in MySQL (MariaDB).
    Mysql(Arc<MySqlStore>),
}

/// `$body` with `$store` the table's store and `$p` its server's first placeholder: the
/// statements are the same text on both servers but for it, and the stores' types differ.
macro_rules! on_server {
    ($table:expr, $store:ident, $p:ident => $body:expr) => {
        match $table {
            TeamTable::Postgres($store) => {
                let $p = "$1";
                $body
            }
            TeamTable::Mysql($store) => {
                let $p = "?";
                $body
            }
        }
    };
}

impl TeamTable {
    /// The store, as a batch holds it.
    pub fn store(&self) -> Arc<dyn FencedStore> {
        on_server!(self, store, _p => store.clone())
    }

    /// A fenced write of `key` under `holder` that also sets `columns` of the row in the
    /// same statement.
    pub async fn write_with(
        &self,
        holder: &Holder,
        key: &RecordKey,
        write: FencedWrite,
        columns: &[(&str, SqlValue)],
    ) -> Result<Written> {
        on_server!(self, store, _p => {
            store.write_with(holder, key, with_columns(write, columns)?).await
        })
    }

    /// Claims refund `key` under `holder` unless it is filed, checked under its row lock in
    /// the claim's own transaction; whether it claimed it.
    pub async fn claim_unless_filed(&self, holder: &Holder, key: &RecordKey) -> Result<bool> {
        on_server!(self, store, p => {
            let failed = |e| store.sql_failure(e);
            let mut tx = store.pool().begin().await.map_err(failed)?;
            let filed: bool = sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT filed FROM {} WHERE id = {p} FOR UPDATE",
                store.table().name()
            )))
            .bind(key.as_str())
            .fetch_one(&mut *tx)
            .await
            .map_err(failed)?;
            if filed {
                return Ok(false);
            }
            store.write_in(&mut tx, holder, key, FencedWrite::claim()).await?;
            tx.commit().await.map_err(failed)?;
            Ok(true)
        })
    }

    /// The refunds of `merchant` not filed yet, in key order (a refunds table).
    pub async fn unfiled(&self, merchant: &str) -> Result<Vec<UnfiledRefund>> {
        on_server!(self, store, p => {
            let rows = sqlx::query(AssertSqlSafe(format!(
                "SELECT id, amount_cents, CASE WHEN state = 'sent' THEN gateway_ref END \
                 FROM {} WHERE merchant = {p} AND NOT filed ORDER BY id",
                store.table().name()
            )))
            .bind(merchant)
            .fetch_all(store.pool())
            .await
            .map_err(|e| store.sql_failure(e))?;
            rows.iter()
                .map(|row| {
                    Ok(UnfiledRefund {
                        key: RecordKey::new(row.get::<String, _>(0))?,
                        amount_cents: row.get(1),
                        confirmed_reference: row.get(2),
                    })
                })
                .collect()
        })
    }

    /// How many refunds of `merchant` are not filed yet (a refunds table).
    pub async fn count_unfiled(&self, merchant: &str) -> Result<i64> {
        on_server!(self, store, p => {
            sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT count(*) FROM {} WHERE merchant = {p} AND NOT filed",
                store.table().name()
            )))
            .bind(merchant)
            .fetch_one(store.pool())
            .await
            .map_err(|e| store.sql_failure(e))
        })
    }

    /// Who finished job `job`, once someone has (a jobs table).
    pub async fn finished_by(&self, job: &str) -> Result<Option<String>> {
        on_server!(self, store, p => {
            sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT finished_by FROM {} WHERE id = {p}",
                store.table().name()
            )))
            .bind(job)
            .fetch_one(store.pool())
            .await
            .map_err(|e| store.sql_failure(e))
        })
    }

    /// Every refund's row (a refunds table).
    pub async fn refund_rows(&self) -> Result<Vec<RefundRow>> {
        on_server!(self, store, _p => {
            let rows = sqlx::query(AssertSqlSafe(format!(
                "SELECT id, state, filed, fence, claimed_by, confirmed_by, gateway_ref FROM {}",
                store.table().name()
            )))
            .fetch_all(store.pool())
            .await
            .map_err(|e| store.sql_failure(e))?;
            Ok(rows
                .iter()
                .map(|row| RefundRow {
                    id: row.get(0),
                    state: row.get(1),
                    filed: row.get(2),
                    fence: row.get(3),
                    claimed_by: row.get(4),
                    confirmed_by: row.get(5),
                    gateway_ref: row.get(6),
                })
                .collect())
        })
    }

    /// Every fence the refunds' history holds, by refund in the order written: `(id, fence)`
    /// (a refunds table).
    pub async fn refund_fence_history(&self) -> Result<Vec<(String, i64)>> {
        on_server!(self, store, _p => {
            sqlx::query_as(AssertSqlSafe(format!(
                "SELECT id, fence FROM {}.refund_history WHERE fence IS NOT NULL ORDER BY id, seq",
                store.table().name().namespace()
            )))
            .fetch_all(store.pool())
            .await
            .map_err(|e| store.sql_failure(e))
        })
    }

    /// Every holder the job's history says finished it, each once (a jobs table).
    pub async fn finishers(&self) -> Result<Vec<String>> {
        on_server!(self, store, _p => {
            sqlx::query_scalar(AssertSqlSafe(format!(
                "SELECT DISTINCT finished_by FROM {}.job_history WHERE finished_by IS NOT NULL",
                store.table().name().namespace()
            )))
            .fetch_all(store.pool())
            .await
            .map_err(|e| store.sql_failure(e))
        })
    }
}

/// `write` that also sets `columns`, on the server whose columns `X` names.
fn with_columns<X: Extras<Value = SqlValue>>(
    write: FencedWrite,
    columns: &[(&str, SqlValue)],
) -> std::result::Result<WriteWith<X>, fencing_core::InvalidInput> {
    columns
        .iter()
        .try_fold(WriteWith::new(write), |write, (column, value)| {
            write.set(column, value.clone())
        })
}

/// The schema (PostgreSQL) or database (MySQL) of a qualified name, as a statement spells it:
/// where a table's history tables are.
trait Namespace {
    fn namespace(&self) -> String;
}

impl Namespace for PgQualifiedName {
    fn namespace(&self) -> String {
        self.schema().to_string()
    }
}

impl Namespace for MySqlQualifiedName {
    fn namespace(&self) -> String {
        self.database().to_string()
    }
}

//! A lease on a table, judged by the database's clock, its token drawn in the same
//! transaction.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::adapter::{Clock, LeaseGuardExt, LeaseRequest, RequestEffect, TokioClock};
use fencing_core::{
    Error, FencingToken, Lease, LeaseGuard, LeaseStatus, OwnerId, ResourceName, Result,
    TokenSource, Ttl,
};
use sqlx::{AssertSqlSafe, MySqlConnection, Row};

use crate::checkout::Checkout;
use crate::ddl::run_ddl;
use crate::error::{MySqlFailure, is_duplicate, is_rolled_back};
use crate::ident::MySqlQualifiedName;
use crate::tokens::{MySqlTokenSource, NOW_MS, decode_token};

/// How many times an acquisition is sent again after the server rolled it back for a race
/// it lost (two acquisitions creating one lease row) before it gives up.
const RACE_ROUNDS: usize = 8;

/// Leases in a table `(resource, owner, token, expires_ms)`, expiry judged by the server's
/// clock, so no worker's clock matters. One transaction locks the lease row, checks it is
/// free, draws the next token from a [`MySqlTokenSource`] and records the new holder: a
/// lease whose acquisition fails or is rolled back issued no token.
#[derive(Clone, Debug)]
pub struct MySqlLease {
    tokens: Arc<MySqlTokenSource>,
    /// The name its errors carry: the lease table's, `mysql:database.table`.
    store: String,
    table: MySqlQualifiedName,
}

/// What an acquisition found.
enum Acquired {
    Granted(FencingToken),
    Held,
    Exhausted,
    /// The lease had no row to lock: one was put in, ended, and the lease is asked again.
    NoRow,
}

impl MySqlLease {
    /// Leases in `table`, tokens from `tokens` (create both with [`Self::create_if_missing`]).
    pub fn new(table: MySqlQualifiedName, tokens: MySqlTokenSource) -> Self {
        MySqlLease {
            store: table.store_name(),
            table,
            tokens: Arc::new(tokens),
        }
    }

    /// Creates the lease table and the counter table, if missing.
    pub async fn create_if_missing(&self) -> Result<()> {
        self.tokens.create_if_missing().await?;
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {} (resource VARBINARY(200) NOT NULL PRIMARY KEY, \
             owner VARCHAR(64) NOT NULL, token BIGINT NOT NULL CHECK (token >= 0), expires_ms BIGINT NOT NULL) \
             ENGINE = InnoDB",
            self.table
        );
        run_ddl(self.tokens.pool(), &self.store, ddl).await
    }

    fn failed(&self, failure: MySqlFailure, effect: RequestEffect) -> Error {
        failure.into_error(&self.store, effect)
    }

    /// One attempt at the lease, in one transaction.
    async fn acquire_once(
        &self,
        resource: &ResourceName,
        owner: &OwnerId,
        ttl: Ttl,
    ) -> Result<Acquired, MySqlFailure> {
        Checkout::run(self.tokens.pool(), async |conn| {
            self.acquire_on(conn, resource, owner, ttl).await
        })
        .await
    }

    /// [`Self::acquire_once`] on `conn`.
    async fn acquire_on(
        &self,
        conn: &mut MySqlConnection,
        resource: &ResourceName,
        owner: &OwnerId,
        ttl: Ttl,
    ) -> Result<Acquired, MySqlFailure> {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        let held: Option<i64> = sqlx::query_scalar(AssertSqlSafe(format!(
            "SELECT expires_ms > {NOW_MS} FROM {} WHERE resource = ? FOR UPDATE",
            self.table
        )))
        .bind(resource.as_str())
        .fetch_optional(&mut *tx)
        .await?;
        match held {
            Some(1) => {
                tx.rollback().await?;
                return Ok(Acquired::Held);
            }
            // Locking a row that is not there locks the gap around it, which every other
            // acquisition locks too, and their inserts then deadlock one another: a row
            // already ended is put in first, so that acquisitions queue on its lock instead.
            None => {
                tx.rollback().await?;
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT IGNORE INTO {} (resource, owner, token, expires_ms) \
                     VALUES (?, '', 0, 0)",
                    self.table
                )))
                .bind(resource.as_str())
                .execute(&mut *conn)
                .await?;
                return Ok(Acquired::NoRow);
            }
            Some(_) => {}
        }
        let Some(token) = self.tokens.next_on(&mut tx, resource).await? else {
            tx.rollback().await?;
            return Ok(Acquired::Exhausted);
        };
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {} (resource, owner, token, expires_ms) VALUES (?, ?, ?, {NOW_MS} + ?) \
             ON DUPLICATE KEY UPDATE owner = VALUES(owner), token = VALUES(token), \
             expires_ms = VALUES(expires_ms)",
            self.table
        )))
        .bind(resource.as_str())
        .bind(owner.as_str())
        .bind(token.as_i64())
        .bind(ttl.as_millis() as i64)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Acquired::Granted(token))
    }

    /// Runs a statement that names the guard's lease and its owner, on a live lease; whether
    /// it found it.
    async fn owner_statement(&self, sql: String, guard: &LeaseGuard) -> Result<bool> {
        Checkout::run(self.tokens.pool(), async |conn| {
            owned_row_changed(conn, sql, guard).await
        })
        .await
        .map_err(|failure| self.failed(failure, RequestEffect::Writes))
    }
}

/// Runs `sql` with the guard's resource and owner bound last; whether it changed a row.
async fn owned_row_changed(
    conn: &mut MySqlConnection,
    sql: String,
    guard: &LeaseGuard,
) -> Result<bool, MySqlFailure> {
    let done = sqlx::query(AssertSqlSafe(sql))
        .bind(guard.resource().as_str())
        .bind(guard.owner().as_str())
        .execute(conn)
        .await?;
    Ok(done.rows_affected() == 1)
}

#[async_trait]
impl Lease for MySqlLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let request = LeaseRequest::new(resource, ttl);
        let mut outcome = Err(MySqlFailure::Inconsistent(
            "the lease row kept being taken by other acquisitions",
        ));
        for _ in 0..RACE_ROUNDS {
            outcome = self.acquire_once(resource, request.owner(), ttl).await;
            match &outcome {
                Err(MySqlFailure::Driver(err)) if is_rolled_back(err) || is_duplicate(err) => {}
                Ok(Acquired::NoRow) => {}
                _ => break,
            }
        }
        match outcome.map_err(|failure| self.failed(failure, RequestEffect::Writes))? {
            Acquired::Granted(token) => Ok(Some(request.granted(token, self.tokens.clone()))),
            Acquired::Held => Ok(None),
            Acquired::NoRow => Err(self.failed(
                MySqlFailure::Inconsistent("the lease's row kept disappearing"),
                RequestEffect::Writes,
            )),
            Acquired::Exhausted => Err(Error::TokenExhausted {
                resource: resource.clone(),
            }),
        }
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let requested_at = TokioClock.now();
        // Counted when found though unchanged: sqlx connects with CLIENT_FOUND_ROWS.
        let sql = format!(
            "UPDATE {} SET expires_ms = {NOW_MS} + {ttl} \
             WHERE resource = ? AND owner = ? AND expires_ms > {NOW_MS}",
            self.table,
            ttl = ttl.as_millis()
        );
        if !self.owner_statement(sql, guard).await? {
            return Err(guard.lost());
        }
        guard.extended(ttl, requested_at);
        Ok(())
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        let sql = format!(
            "DELETE FROM {} WHERE resource = ? AND owner = ? AND expires_ms > {NOW_MS}",
            self.table
        );
        if !self.owner_statement(sql, &guard).await? {
            return Err(guard.lost());
        }
        Ok(())
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        let read = async |conn: &mut MySqlConnection| -> Result<_, MySqlFailure> {
            let row = sqlx::query(AssertSqlSafe(format!(
                "SELECT owner, token, expires_ms - {NOW_MS} FROM {} \
                 WHERE resource = ? AND expires_ms > {NOW_MS}",
                self.table
            )))
            .bind(resource.as_str())
            .fetch_optional(conn)
            .await?;
            let Some(row) = row else {
                return Ok(None);
            };
            let millis: i64 = row.try_get(2)?;
            Ok(Some(LeaseStatus {
                owner: row.try_get(0)?,
                token: Some(decode_token(row.try_get(1)?)?),
                time_left: Duration::from_millis(millis.max(0) as u64),
            }))
        };
        Checkout::run(self.tokens.pool(), read)
            .await
            .map_err(|failure| self.failed(failure, RequestEffect::ReadOnly))
    }

    fn token_source(&self) -> Arc<dyn TokenSource> {
        self.tokens.clone()
    }
}

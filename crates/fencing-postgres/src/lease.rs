//! A lease on a table, judged by the database's clock, with its token drawn in the same
//! statement.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::adapter::{Clock, LeaseGuardExt, LeaseRequest, RequestEffect, TokioClock};
use fencing_core::{
    Error, FencingToken, Lease, LeaseGuard, LeaseStatus, ResourceName, Result, TokenSource, Ttl,
};
use sqlx::{PgConnection, Row};

use crate::ddl::run_ddl;
use crate::error::PgFailure;
use crate::ident::PgQualifiedName;
use crate::tokens::{PgTokenSource, unbound};

/// Leases in a table `(resource, owner, token, expires_at)`, expiry judged by `now()` on the
/// server, so no worker's clock matters. One statement checks the lease is free, draws the
/// next token from a [`PgTokenSource`] and records the new holder.
#[derive(Clone, Debug)]
pub struct PgLease {
    tokens: Arc<PgTokenSource>,
    /// The name its errors carry: the lease table's, `postgres:schema.table`.
    store: String,
    table: PgQualifiedName,
    acquire: String,
    extend: String,
    release: String,
    status: String,
}

impl PgLease {
    /// Leases in `table`, tokens from `tokens` (create both with [`Self::create_if_missing`]).
    pub fn new(table: PgQualifiedName, tokens: PgTokenSource) -> Self {
        let acquire = format!(
            "WITH {preamble}, free AS (SELECT 1 WHERE NOT EXISTS \
                 (SELECT 1 FROM {table} WHERE resource = $1 AND expires_at > now())), \
             tok AS ({issue}), \
             granted AS (INSERT INTO {table} AS l (resource, owner, token, expires_at) \
                 SELECT $1, $2, value, now() + $3 * interval '1 millisecond' FROM tok \
                 ON CONFLICT (resource) DO UPDATE SET owner = EXCLUDED.owner, \
                 token = EXCLUDED.token, expires_at = EXCLUDED.expires_at \
                 WHERE l.expires_at <= now() RETURNING token) \
             SELECT EXISTS (SELECT 1 FROM free), EXISTS (SELECT 1 FROM tok), \
                 (SELECT token FROM granted), EXISTS (SELECT 1 FROM m)",
            preamble = tokens.preamble(),
            issue = tokens.increment(", free"),
        );
        PgLease {
            extend: format!(
                "UPDATE {table} SET expires_at = now() + $3 * interval '1 millisecond' \
                 WHERE resource = $1 AND owner = $2 AND expires_at > now()"
            ),
            release: format!(
                "DELETE FROM {table} WHERE resource = $1 AND owner = $2 AND expires_at > now()"
            ),
            status: format!(
                "SELECT owner, token, (EXTRACT(EPOCH FROM (expires_at - now())) * 1000)::int8 \
                 FROM {table} WHERE resource = $1 AND expires_at > now()"
            ),
            acquire,
            store: table.store_name(),
            table,
            tokens: Arc::new(tokens),
        }
    }

    /// Creates the lease table and the counter table, if missing.
    pub async fn create_if_missing(&self) -> Result<()> {
        self.tokens.create_if_missing().await?;
        let ddl = format!(
            "CREATE TABLE IF NOT EXISTS {} (resource TEXT PRIMARY KEY, owner TEXT NOT NULL, \
             token BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)",
            self.table
        );
        run_ddl(self.tokens.pool(), &self.store, ddl).await
    }

    fn failed(&self, failure: PgFailure, effect: RequestEffect) -> Error {
        failure.into_error(&self.store, effect)
    }

    async fn owner_statement(
        &self,
        sql: &str,
        guard: &LeaseGuard,
        ttl: Option<Ttl>,
    ) -> Result<bool> {
        let query = self
            .tokens
            .session()
            .query(sql)
            .bind(guard.resource().as_str())
            .bind(guard.owner().as_str());
        let query = match ttl {
            Some(ttl) => query.bind(ttl.as_millis() as i64),
            None => query,
        };
        let done = self
            .on_one_connection(RequestEffect::Writes, async |conn| {
                Ok(query.execute(conn).await?)
            })
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Runs `op` on one connection of the token source's pool, as its session talks.
    async fn on_one_connection<T>(
        &self,
        effect: RequestEffect,
        op: impl AsyncFnOnce(&mut PgConnection) -> Result<T, PgFailure>,
    ) -> Result<T> {
        self.tokens
            .session()
            .on_pool(self.tokens.pool(), effect, op)
            .await
            .map_err(|(failure, effect)| self.failed(failure, effect))
    }
}

#[async_trait]
impl Lease for PgLease {
    async fn try_acquire(&self, resource: &ResourceName, ttl: Ttl) -> Result<Option<LeaseGuard>> {
        let request = LeaseRequest::new(resource, ttl);
        let query = self
            .tokens
            .session()
            .query(self.acquire.as_str())
            .bind(resource.as_str())
            .bind(request.owner().as_str())
            .bind(ttl.as_millis() as i64);
        let row = self
            .on_one_connection(RequestEffect::Writes, async |conn| {
                Ok(query.fetch_one(conn).await?)
            })
            .await?;
        let decoded = || -> Result<_, PgFailure> {
            if !row.try_get::<bool, _>(3)? {
                return Err(unbound(self.tokens.table()));
            }
            Ok((
                row.try_get::<bool, _>(0)?,
                row.try_get::<bool, _>(1)?,
                row.try_get::<Option<i64>, _>(2)?,
            ))
        };
        let (free, drew, granted) = decoded().map_err(|e| self.failed(e, RequestEffect::Writes))?;
        match granted {
            Some(token) => {
                let token = FencingToken::from_i64(token).map_err(|e| {
                    self.failed(
                        PgFailure::Corrupt(format!("lease token {token}"), e),
                        RequestEffect::Writes,
                    )
                })?;
                Ok(Some(request.granted(token, self.tokens.clone())))
            }
            None if free && !drew => Err(Error::TokenExhausted {
                resource: resource.clone(),
            }),
            None => Ok(None),
        }
    }

    async fn extend(&self, guard: &mut LeaseGuard, ttl: Ttl) -> Result<()> {
        let requested_at = TokioClock.now();
        if !self.owner_statement(&self.extend, guard, Some(ttl)).await? {
            return Err(guard.lost());
        }
        guard.extended(ttl, requested_at);
        Ok(())
    }

    async fn release(&self, guard: LeaseGuard) -> Result<()> {
        if !self.owner_statement(&self.release, &guard, None).await? {
            return Err(guard.lost());
        }
        Ok(())
    }

    async fn status(&self, resource: &ResourceName) -> Result<Option<LeaseStatus>> {
        let query = self
            .tokens
            .session()
            .query(self.status.as_str())
            .bind(resource.as_str());
        let row = self
            .on_one_connection(RequestEffect::ReadOnly, async |conn| {
                Ok(query.fetch_optional(conn).await?)
            })
            .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let decoded = || -> Result<_, PgFailure> {
            let token: i64 = row.try_get(1)?;
            let token = FencingToken::from_i64(token)
                .map_err(|e| PgFailure::Corrupt(format!("lease token {token}"), e))?;
            let millis: i64 = row.try_get(2)?;
            Ok(LeaseStatus {
                owner: row.try_get(0)?,
                token: Some(token),
                time_left: Duration::from_millis(millis.max(0) as u64),
            })
        };
        decoded()
            .map(Some)
            .map_err(|e| self.failed(e, RequestEffect::ReadOnly))
    }

    fn token_source(&self) -> Arc<dyn TokenSource> {
        self.tokens.clone()
    }
}

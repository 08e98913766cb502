//! How this crate's types talk to PostgreSQL: with named prepared statements (the default), or,
//! behind a pooler in transaction mode, with unnamed ones, each request inside a transaction.

use fencing_core::adapter::RequestEffect;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{Acquire, AssertSqlSafe, PgConnection, Postgres};

use crate::error::PgFailure;

/// The statement mode of one store, lease, token source or floor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Session {
    transaction_pooling: bool,
}

/// A failure, with what the failed request may have done.
pub(crate) type Failed = (PgFailure, RequestEffect);

impl Session {
    /// For a pooler in transaction mode (PgBouncer's `pool_mode = transaction`).
    pub(crate) fn transaction_pooling() -> Self {
        Session {
            transaction_pooling: true,
        }
    }

    /// `sql` as a query, named (prepared once per connection) unless pooling.
    pub(crate) fn query(&self, sql: impl Into<String>) -> Query<'static, Postgres, PgArguments> {
        sqlx::query(AssertSqlSafe(sql.into())).persistent(!self.transaction_pooling)
    }

    /// Runs `op` on one connection from `conn`: as it is, or, when pooling, in a transaction
    /// (a savepoint inside the caller's) that commits when `op` succeeds, so the unnamed
    /// statement is parsed and run on one server connection. A failure to start is a
    /// read-only one; a failure of `op` or of the commit may have had `effect`.
    pub(crate) async fn on_one_connection<'c, A, T>(
        &self,
        conn: A,
        effect: RequestEffect,
        op: impl AsyncFnOnce(&mut PgConnection) -> Result<T, PgFailure>,
    ) -> Result<T, Failed>
    where
        A: Acquire<'c, Database = Postgres>,
    {
        let not_started = |e: sqlx::Error| (PgFailure::from(e), RequestEffect::ReadOnly);
        if self.transaction_pooling {
            let mut tx = conn.begin().await.map_err(not_started)?;
            let value = op(&mut tx).await.map_err(|e| (e, effect))?;
            tx.commit().await.map_err(|e| (e.into(), effect))?;
            Ok(value)
        } else {
            let mut conn = conn.acquire().await.map_err(not_started)?;
            op(&mut conn).await.map_err(|e| (e, effect))
        }
    }
}

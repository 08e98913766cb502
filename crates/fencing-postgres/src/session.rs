//! How this crate's types talk to PostgreSQL: with named prepared statements (the default), or,
//! behind a pooler in transaction mode, with unnamed ones, each request inside a transaction.

use fencing_core::adapter::RequestEffect;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Connection, PgConnection, PgPool, Postgres};

use crate::error::PgFailure;

/// The statement mode of one store, lease, token source or floor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Session {
    transaction_pooling: bool,
}

/// A failure, with what the failed request may have done.
pub(crate) type Failed = (PgFailure, RequestEffect);

/// A connection of a store's own pool for one request, closed instead of returned to the pool
/// when the request's future is dropped before it ends. sqlx 0.9.0 counts a transaction only
/// once the server has answered its `BEGIN`, so a `begin` dropped while that answer is on its
/// way leaves the session inside a transaction that nothing ends; returned to the pool, it
/// would take the next request's writes into that transaction, which never commits.
pub(crate) struct Checkout {
    conn: PoolConnection<Postgres>,
    ended: bool,
}

impl Checkout {
    /// Runs `op` on a connection of `pool`: returned to the pool when `op` ends, closed if
    /// `op` is dropped before.
    pub(crate) async fn run<T>(
        pool: &PgPool,
        op: impl AsyncFnOnce(&mut PgConnection) -> T,
    ) -> Result<T, sqlx::Error> {
        let mut checkout = Checkout {
            conn: pool.acquire().await?,
            ended: false,
        };
        let value = op(&mut checkout.conn).await;
        checkout.ended = true;
        Ok(value)
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.close_on_drop();
        }
    }
}

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

    /// [`Self::run_on`] on a [`Checkout`] of `pool`.
    pub(crate) async fn on_pool<T>(
        &self,
        pool: &PgPool,
        effect: RequestEffect,
        op: impl AsyncFnOnce(&mut PgConnection) -> Result<T, PgFailure>,
    ) -> Result<T, Failed> {
        Checkout::run(pool, async |conn| self.run_on(conn, effect, op).await)
            .await
            .map_err(not_started)?
    }

    /// Runs `op` on `conn`: as it is, or, when pooling, in a transaction (a savepoint inside
    /// the caller's) that commits when `op` succeeds, so the unnamed statement is parsed and
    /// run on one server connection. A failure to start is a read-only one; a failure of `op`
    /// or of the commit may have had `effect`.
    pub(crate) async fn run_on<T>(
        &self,
        conn: &mut PgConnection,
        effect: RequestEffect,
        op: impl AsyncFnOnce(&mut PgConnection) -> Result<T, PgFailure>,
    ) -> Result<T, Failed> {
        if self.transaction_pooling {
            let mut tx = Connection::begin(conn).await.map_err(not_started)?;
            let value = op(&mut tx).await.map_err(|e| (e, effect))?;
            tx.commit().await.map_err(|e| (e.into(), effect))?;
            Ok(value)
        } else {
            op(conn).await.map_err(|e| (e, effect))
        }
    }
}

/// A request that failed before it was sent.
fn not_started(e: sqlx::Error) -> Failed {
    (PgFailure::from(e), RequestEffect::ReadOnly)
}

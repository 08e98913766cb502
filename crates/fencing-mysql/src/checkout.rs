//! A connection of the pool for one request, closed instead of returned when the request's
//! future is dropped before it ends.

use sqlx::pool::PoolConnection;
use sqlx::{MySql, MySqlConnection, MySqlPool};

/// A connection of a pool for one request. A request dropped inside its transaction (a
/// cancelled future, a timeout) would otherwise return a connection whose transaction sqlx
/// rolls back only when the connection is next used, its row locks held until then: every
/// other request on those rows would wait the server's `innodb_lock_wait_timeout` (50 s by
/// default). Closed, the server ends the transaction at once.
pub(crate) struct Checkout {
    conn: PoolConnection<MySql>,
    ended: bool,
}

impl Checkout {
    /// Runs `op` on a connection of `pool`: returned to the pool when `op` succeeds, closed if
    /// it fails (a statement sent in one packet with others may have left a transaction open
    /// behind the one that failed) or is dropped before it ends.
    pub(crate) async fn run<T, E: From<sqlx::Error>>(
        pool: &MySqlPool,
        op: impl AsyncFnOnce(&mut MySqlConnection) -> Result<T, E>,
    ) -> Result<T, E> {
        let mut checkout = Checkout {
            conn: pool.acquire().await?,
            ended: false,
        };
        let value = op(&mut checkout.conn).await;
        checkout.ended = value.is_ok();
        value
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        if !self.ended {
            self.conn.close_on_drop();
        }
    }
}

//! A durable source of epochs for the tokens of a Redis lease.

use async_trait::async_trait;
use fencing_core::adapter::RequestEffect;
use fencing_core::adapter::history::{EpochTry, open_patiently};
use fencing_core::{CounterHistory, EpochSource, FencingToken, ResourceName, Result, TokenSource};
use sqlx::MySqlPool;

use crate::checkout::Checkout;
use crate::error::MySqlFailure;
use crate::ident::MySqlQualifiedName;
use crate::tokens::MySqlTokenSource;

/// Epochs in a table of counters, for the tokens of a Redis lease
/// (`RedisLease::new(conn, Arc::new(MySqlEpochSource::new(pool, table)))`): the rows of a
/// [`MySqlTokenSource`], bound to the server's history the same way, with the opening each
/// epoch was opened for.
///
/// An epoch is opened when a Redis counter is found lost, once per loss however many clients
/// find it at once (they name the loss alike: [`EpochSource::open`] returns the epoch already
/// opened for that opening), and at most once a second for a resource, by the database's
/// clock: an opening that comes sooner waits out the rest of the second. That is the rate a
/// failover of this database raises the epochs by ([`fencing_core::RateBound::EPOCHS`]), so
/// every epoch opened on a lost history lies below the first one opened after it, for a
/// resource whose row the new history kept as for one it lacks. An epoch raised onto a new
/// history (a row the server found on another, or a row it lacks started from a table binding
/// raised onto it less than a second ago) is opened only a second after that raise, so a history
/// that follows within that second (a backup restored just after a restart) raises the row
/// above every epoch this one hands out.
#[derive(Clone, Debug)]
pub struct MySqlEpochSource {
    counters: MySqlTokenSource,
}

impl MySqlEpochSource {
    /// Epochs in `table` (create it with [`Self::create_if_missing`]).
    pub fn new(pool: MySqlPool, table: MySqlQualifiedName) -> Self {
        MySqlEpochSource {
            counters: MySqlTokenSource::new(pool, table).for_epochs(),
        }
    }

    /// The epoch table.
    pub fn table(&self) -> &MySqlQualifiedName {
        self.counters.table()
    }

    /// Creates the epoch table, if missing, as [`MySqlTokenSource::create_if_missing`] does,
    /// with the column of the opening each epoch was opened for.
    pub async fn create_if_missing(&self) -> Result<()> {
        self.counters.create_if_missing().await
    }

    /// The server history the epochs of `resource` are bound to, and the history of the
    /// server answering, as [`MySqlTokenSource::history`].
    pub async fn history(&self, resource: &ResourceName) -> Result<CounterHistory> {
        self.counters.history(resource).await
    }

    /// After a logical dump of the epoch table was restored into a running server, as
    /// [`MySqlTokenSource::after_restore`].
    pub async fn after_restore(&self) -> Result<()> {
        self.counters.after_restore().await
    }

    /// One try at opening, in one transaction.
    async fn try_open(&self, resource: &ResourceName, opening: &str) -> Result<EpochTry> {
        Checkout::run(self.counters.pool(), async |conn| {
            let mut tx = sqlx::Connection::begin(conn).await?;
            let opened = self
                .counters
                .open_locked(&mut tx, resource, opening)
                .await?;
            tx.commit().await?;
            Ok(opened)
        })
        .await
        .map_err(|failure: MySqlFailure| {
            failure.into_error(self.counters.store(), RequestEffect::Writes)
        })
    }
}

#[async_trait]
impl EpochSource for MySqlEpochSource {
    async fn open(&self, resource: &ResourceName, opening: &str) -> Result<FencingToken> {
        open_patiently(resource, self.counters.store(), || {
            self.try_open(resource, opening)
        })
        .await
    }

    async fn current(&self, resource: &ResourceName) -> Result<Option<FencingToken>> {
        self.counters.current(resource).await
    }

    async fn advance_to(
        &self,
        resource: &ResourceName,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        self.counters.advance_to(resource, floor).await
    }
}

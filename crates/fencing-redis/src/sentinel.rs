//! A connection that follows Sentinel's primary across a failover.

use std::fmt;
use std::sync::Arc;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::sync::Mutex;

use crate::error::NOT_PRIMARY;

/// A connection to whichever server the sentinels name as the primary of a service, for a
/// [`crate::RedisLease`] or [`crate::RedisTokenSource`] on a Sentinel-managed deployment.
///
/// It asks the sentinels for the primary when it first needs it, and again after a request
/// that met a server that is gone (the connection broke) or no longer primary (`READONLY`,
/// or a script's refusal to issue a token on a replica). That request fails as it would on
/// any connection (a broken connection is an ambiguous outcome); the next one goes to the
/// primary the sentinels name then. The acquire stays one script, one round trip.
///
/// A failover can promote a replica that had not received the last counter writes: the
/// lease's epoch-prefixed tokens see that the counter now lives on another server history
/// and open a new epoch before issuing ([`crate::RedisTokenSource`]), so no token is issued
/// twice.
///
/// Clones share the sentinels' client and the connection.
#[derive(Clone)]
pub struct RedisSentinelConnection {
    sentinels: Arc<Mutex<SentinelClient>>,
    primary: Arc<Mutex<Option<MultiplexedConnection>>>,
    db: i64,
}

impl fmt::Debug for RedisSentinelConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSentinelConnection")
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl RedisSentinelConnection {
    /// A connection to the primary `sentinels` name (a client built with
    /// `SentinelServerType::Master`), on database `db` (the one its node connection info
    /// selects; 0 unless set). Nothing is sent until the first request.
    pub fn new(sentinels: SentinelClient, db: i64) -> Self {
        RedisSentinelConnection {
            sentinels: Arc::new(Mutex::new(sentinels)),
            primary: Arc::new(Mutex::new(None)),
            db,
        }
    }

    /// A connection to the primary that `sentinels` (their URLs, `redis://HOST:PORT`) monitor
    /// as `service`, on database 0: [`Self::new`] of a client built for that. Nothing is sent
    /// until the first request.
    pub fn to_service(sentinels: &[String], service: &str) -> RedisResult<Self> {
        // A `String`, which both forms of `build` take (its argument's type depends on the
        // redis crate's TLS features).
        let service: String = service.into();
        let client = SentinelClient::build(
            sentinels.to_vec(),
            service,
            None,
            SentinelServerType::Master,
        )?;
        Ok(RedisSentinelConnection::new(client, 0))
    }

    /// The connection to the primary, asking the sentinels for it if there is none.
    async fn primary(&self) -> RedisResult<MultiplexedConnection> {
        let mut primary = self.primary.lock().await;
        if let Some(conn) = &*primary {
            return Ok(conn.clone());
        }
        let conn = self.sentinels.lock().await.get_async_connection().await?;
        *primary = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the connection after `err`, when it says the server is gone or not primary.
    async fn after(&self, err: &RedisError) {
        let not_primary = matches!(err.code(), Some("READONLY" | "MASTERDOWN" | NOT_PRIMARY));
        if not_primary || err.is_io_error() || err.is_connection_dropped() || err.is_timeout() {
            *self.primary.lock().await = None;
        }
    }
}

impl ConnectionLike for RedisSentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.primary().await?;
            let answer = conn.req_packed_command(cmd).await;
            if let Err(err) = &answer {
                self.after(err).await;
            }
            answer
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.primary().await?;
            let answer = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(err) = &answer {
                self.after(err).await;
            }
            answer
        })
    }

    fn get_db(&self) -> i64 {
        self.db
    }
}

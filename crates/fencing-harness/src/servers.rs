//! Which run a worker process belongs to and how it reaches the run's servers: the
//! arguments both worker programs (`worker`, `scale-worker`) take, and their connections to
//! Redis and etcd.

use std::time::Duration;

use crate::plan::LeaseKind;

/// Which worker of which run a worker process is, the lease it takes and the servers it
/// reaches: the arguments both worker programs share.
#[derive(Debug, clap::Args)]
pub struct WorkerOf {
    /// This worker's name in the run (its PostgreSQL application name ends with it).
    #[arg(long)]
    pub name: String,
    /// The run whose stores to settle (the command that started the worker created them).
    #[arg(long)]
    pub run: String,
    /// The lease to take.
    #[arg(long, value_enum)]
    pub lease: LeaseKind,
    /// The lease TTL in milliseconds; the lease is renewed every third of it.
    #[arg(long)]
    pub ttl_ms: u64,
    /// PostgreSQL (the refunds, the PostgreSQL lease unless it has its own, the Redis
    /// lease's epochs).
    #[arg(long)]
    pub database_url: String,
    /// The etcd cluster's client endpoints, comma-separated (the etcd lease only).
    #[arg(long, value_delimiter = ',')]
    pub etcd_endpoints: Vec<String>,
    /// The AWS endpoint (the queue, and the campaign's S3 and DynamoDB).
    #[arg(long)]
    pub aws_endpoint: String,
    /// The gateway, as HOST:PORT.
    #[arg(long)]
    pub gateway: String,
}

/// A connection that reconnects after a Redis restart, once Redis is known to run scripts
/// (the lease is one).
pub async fn redis_connection(url: Option<&str>) -> Result<redis::aio::ConnectionManager, String> {
    let url = url.ok_or("the Redis lease needs --redis-url")?;
    let client = redis::Client::open(url).map_err(|e| format!("Redis URL {url:?}: {e}"))?;
    let mut conn = redis::aio::ConnectionManager::new(client)
        .await
        .map_err(|e| format!("cannot connect to Redis at {url}: {e}"))?;
    let answer: Result<i64, _> = redis::cmd("EVAL")
        .arg("return 1")
        .arg(0)
        .query_async(&mut conn)
        .await;
    match answer {
        Ok(1) => Ok(conn),
        Ok(other) => Err(format!(
            "Redis at {url} ran a script wrongly (answered {other})"
        )),
        Err(err) => Err(format!(
            "Redis at {url} refuses scripts ({err}): the Redis lease takes its lock and token \
             in one Lua script; allow EVAL and EVALSHA for this user (ACL +@scripting) or use \
             another lease"
        )),
    }
}

/// A client of every member, whose requests give up after two seconds rather than wait for a
/// leader that is gone (the batch's writes go to the stores, not to etcd, and carry on).
pub async fn etcd_client(endpoints: &[String]) -> Result<etcd_client::Client, String> {
    if endpoints.is_empty() {
        return Err("the etcd lease needs --etcd-endpoints".to_owned());
    }
    let options = etcd_client::ConnectOptions::new()
        .with_timeout(Duration::from_secs(2))
        .with_connect_timeout(Duration::from_secs(2))
        .with_require_leader(true);
    etcd_client::Client::connect(endpoints, Some(options))
        .await
        .map_err(|e| format!("cannot connect to etcd at {}: {e}", endpoints.join(",")))
}

//! Where the stores are: flags, with the usual environment variables as their defaults.

use std::str::FromStr;
use std::sync::Arc;

use clap::Args;

use fencing_core::{Lease, RateBound, ResourceName, TokenSource};
use fencing_dynamodb::{DynamoLease, DynamoTokenSource};
use fencing_etcd::{EtcdKeys, EtcdLease, EtcdTokenSource};
use fencing_mysql::{MySqlLease, MySqlQualifiedName, MySqlTokenSource};
use fencing_postgres::{PgEpochSource, PgLease, PgQualifiedName, PgTokenSource};
use fencing_redis::{RedisKeys, RedisLease, RedisSentinelConnection, RedisTokenSource};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use sqlx::mysql::MySqlConnectOptions;
use sqlx::postgres::PgConnectOptions;
use sqlx::{MySqlPool, PgPool};

use crate::Backend;
use crate::output::Failure;

/// The environment variable that named the Redis token prefix in 0.1, read when
/// `FENCING_REDIS_TOKEN_PREFIX` and `--redis-token-prefix` are not given.
const OLD_TOKEN_PREFIX_VARIABLE: &str = "FENCING_REDIS_COUNTER_PREFIX";

/// How to reach each store. AWS credentials come from `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` only, never from a flag.
#[derive(Debug, Args)]
pub(crate) struct Settings {
    /// PostgreSQL to talk to.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    /// MySQL or MariaDB to talk to (mysql://USER:PASSWORD@HOST:PORT/DATABASE).
    #[arg(long, env = "MYSQL_URL", global = true, hide_env_values = true)]
    mysql_url: Option<String>,
    /// Redis to talk to.
    #[arg(long, env = "REDIS_URL", global = true, hide_env_values = true)]
    redis_url: Option<String>,
    /// Redis behind Sentinel: the sentinels' URLs, comma-separated (redis://HOST:PORT), in
    /// place of --redis-url (which is then not used); the primary is the server they monitor
    /// as --redis-service.
    #[arg(
        long,
        env = "REDIS_SENTINELS",
        global = true,
        hide_env_values = true,
        value_delimiter = ',',
        requires = "redis_service"
    )]
    redis_sentinels: Vec<String>,
    /// The name the sentinels of --redis-sentinels monitor the primary under.
    #[arg(long, env = "REDIS_SERVICE", global = true, hide_env_values = true)]
    redis_service: Option<String>,
    /// The AWS endpoint (an emulator, a VPC endpoint); the public one for the region if unset.
    #[arg(long, env = "AWS_ENDPOINT_URL", global = true, hide_env_values = true)]
    aws_endpoint: Option<String>,
    /// The AWS region.
    #[arg(
        long,
        env = "AWS_REGION",
        global = true,
        default_value = "us-east-1",
        hide_env_values = true
    )]
    aws_region: String,
    /// The PostgreSQL table of leases (`PgLease`), as SCHEMA.TABLE.
    #[arg(long, global = true, default_value = "public.fencing_leases")]
    pg_lease_table: String,
    /// The PostgreSQL table of counters (`PgTokenSource`), as SCHEMA.TABLE.
    #[arg(long, global = true, default_value = "public.fencing_tokens")]
    pg_token_table: String,
    /// The MySQL table of leases (`MySqlLease`), as DATABASE.TABLE, or TABLE in MYSQL_URL's
    /// database.
    #[arg(long, global = true, default_value = "fencing_leases")]
    mysql_lease_table: String,
    /// The MySQL table of counters (`MySqlTokenSource`), as DATABASE.TABLE, or TABLE in
    /// MYSQL_URL's database.
    #[arg(long, global = true, default_value = "fencing_tokens")]
    mysql_token_table: String,
    /// The DynamoDB table of leases and counters (`DynamoLease`, `DynamoTokenSource`).
    #[arg(long, global = true, default_value = "fencing-leases")]
    dynamodb_table: String,
    /// The PostgreSQL table (SCHEMA.TABLE) of the epochs behind Redis tokens
    /// (`RedisLease::new`); without it, Redis counters are read and raised as they are.
    #[arg(long, global = true)]
    redis_epochs: Option<String>,
    /// Act on Redis counters without --redis-epochs even where they hold epoch-prefixed
    /// tokens (raising one to a fence can then issue a token twice).
    #[arg(long, global = true)]
    pub(crate) may_reissue_tokens: bool,
    /// The prefix of Redis lease keys (`RedisKeys`).
    #[arg(
        long,
        env = "FENCING_REDIS_LOCK_PREFIX",
        global = true,
        hide_env_values = true,
        default_value = "lock:"
    )]
    redis_lock_prefix: String,
    /// The prefix of Redis token keys (`RedisKeys::token_key`; default `fence:`). Its 0.1
    /// names, `--redis-counter-prefix` and `FENCING_REDIS_COUNTER_PREFIX`, still work.
    #[arg(
        long,
        alias = "redis-counter-prefix",
        env = "FENCING_REDIS_TOKEN_PREFIX",
        global = true,
        hide_env_values = true
    )]
    redis_token_prefix: Option<String>,
    /// etcd to talk to: its members' client endpoints, comma-separated (HOST:PORT,HOST:PORT).
    #[arg(long, env = "ETCD_ENDPOINTS", global = true, hide_env_values = true)]
    etcd_endpoints: Option<String>,
    /// The prefix of etcd lock keys (`EtcdKeys`).
    #[arg(long, global = true, default_value = "fencing/lock/")]
    etcd_lock_prefix: String,
    /// The prefix of etcd token keys (`EtcdKeys`).
    #[arg(long, global = true, default_value = "fencing/token/")]
    etcd_token_prefix: String,
}

/// `SCHEMA.TABLE`.
pub(crate) fn qualified(text: &str) -> Result<PgQualifiedName, Failure> {
    let (schema, table) = text.split_once('.').ok_or_else(|| {
        Failure::usage(format!(
            "{text:?} is not SCHEMA.TABLE: write it as public.{text}"
        ))
    })?;
    Ok(PgQualifiedName::new(schema, table)?)
}

/// The configuration builder of the SDK crate `$sdk`, with the settings' region, endpoint,
/// credentials and HTTP stack (the two SDKs' builders share no type).
macro_rules! aws_config {
    ($sdk:ident, $settings:expr) => {{
        use $sdk::config::{BehaviorVersion, Builder, Region};
        let settings: &Settings = $settings;
        let mut config = Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(settings.aws_region.clone()))
            .credentials_provider(settings.aws_credentials()?)
            .http_client(Settings::http_client());
        if let Some(endpoint) = &settings.aws_endpoint {
            config = config.endpoint_url(endpoint);
        }
        config
    }};
}

impl Settings {
    pub(crate) async fn pg_pool(&self) -> Result<PgPool, Failure> {
        let url = self.database_url.as_deref().ok_or_else(|| {
            Failure::usage("no PostgreSQL to talk to: set DATABASE_URL or pass --database-url")
        })?;
        let options = PgConnectOptions::from_str(url).map_err(|e| {
            Failure::usage(format!(
                "DATABASE_URL (or --database-url) is not a PostgreSQL URL ({e}): write it as \
                 postgres://USER@HOST:PORT/DATABASE"
            ))
        })?;
        let tried = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("(the user's database)")
        );
        PgPool::connect_with(options).await.map_err(|e| {
            Failure::service(format!(
                "cannot reach PostgreSQL at {tried} ({e}): check DATABASE_URL and that the \
                 server is up"
            ))
        })
    }

    /// MYSQL_URL's connection options.
    fn mysql_options(&self) -> Result<MySqlConnectOptions, Failure> {
        let url = self.mysql_url.as_deref().ok_or_else(|| {
            Failure::usage("no MySQL to talk to: set MYSQL_URL or pass --mysql-url")
        })?;
        MySqlConnectOptions::from_str(url).map_err(|e| {
            Failure::usage(format!(
                "MYSQL_URL (or --mysql-url) is not a MySQL URL ({e}): write it as \
                 mysql://USER:PASSWORD@HOST:PORT/DATABASE"
            ))
        })
    }

    pub(crate) async fn mysql_pool(&self) -> Result<MySqlPool, Failure> {
        let options = self.mysql_options()?;
        let tried = format!(
            "{}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("(no database)")
        );
        MySqlPool::connect_with(options).await.map_err(|e| {
            Failure::service(format!(
                "cannot reach MySQL at {tried} ({e}): check MYSQL_URL and that the server is up"
            ))
        })
    }

    /// `DATABASE.TABLE`, or `TABLE` in MYSQL_URL's database.
    pub(crate) fn mysql_name(&self, text: &str) -> Result<MySqlQualifiedName, Failure> {
        match text.split_once('.') {
            Some((database, table)) => Ok(MySqlQualifiedName::new(database, table)?),
            None => {
                let options = self.mysql_options()?;
                let database = options.get_database().ok_or_else(|| {
                    Failure::usage(format!(
                        "{text:?} names no database and MYSQL_URL has none: write \
                         DATABASE.{text}"
                    ))
                })?;
                Ok(MySqlQualifiedName::new(database, text)?)
            }
        }
    }

    async fn mysql_tokens(&self) -> Result<MySqlTokenSource, Failure> {
        Ok(MySqlTokenSource::new(
            self.mysql_pool().await?,
            self.mysql_name(&self.mysql_token_table)?,
        ))
    }

    pub(crate) async fn redis(&self) -> Result<RedisConnection, Failure> {
        if let Some(service) = self.redis_service.as_deref()
            && !self.redis_sentinels.is_empty()
        {
            return self.redis_primary(service).await;
        }
        let url = self.redis_url.as_deref().ok_or_else(|| {
            Failure::usage("no Redis to talk to: set REDIS_URL or pass --redis-url")
        })?;
        let client = redis::Client::open(url).map_err(|e| {
            Failure::usage(format!(
                "REDIS_URL (or --redis-url) is not a Redis URL ({e}): write it as \
                 redis://HOST:PORT/, or rediss://HOST:PORT/ for TLS"
            ))
        })?;
        let tried = client.get_connection_info().addr().to_string();
        client
            .get_multiplexed_async_connection()
            .await
            .map(RedisConnection::Direct)
            .map_err(|e| {
                Failure::service(format!(
                    "cannot reach Redis at {tried} ({e}): check REDIS_URL and that the server \
                     is up (for TLS, rediss://, that its certificate is trusted: the system's \
                     authorities, or the file SSL_CERT_FILE names)"
                ))
            })
    }

    /// The primary the sentinels monitor as `service`, asked for (and pinged) now, so that a
    /// deployment out of reach is said before anything else.
    async fn redis_primary(&self, service: &str) -> Result<RedisConnection, Failure> {
        let sentinels = self.redis_sentinels.join(",");
        let mut conn = RedisSentinelConnection::to_service(&self.redis_sentinels, service)
            .map_err(|e| {
                Failure::usage(format!(
                    "REDIS_SENTINELS (or --redis-sentinels) is not a list of Redis URLs ({e}): \
                     write it as redis://HOST:PORT,redis://HOST:PORT"
                ))
            })?;
        conn.req_packed_command(&redis::cmd("PING"))
            .await
            .map_err(|e| {
                Failure::service(format!(
                    "cannot reach the primary the sentinels at {sentinels} monitor as \
                     {service:?} ({e}): check REDIS_SENTINELS, REDIS_SERVICE and that the \
                     sentinels and the primary are up"
                ))
            })?;
        Ok(RedisConnection::Sentinel(conn))
    }

    /// A client of every etcd member named, whose requests give up after five seconds and
    /// never wait for a leader that is not there.
    pub(crate) async fn etcd(&self) -> Result<etcd_client::Client, Failure> {
        let endpoints = self.etcd_endpoints.as_deref().ok_or_else(|| {
            Failure::usage("no etcd to talk to: set ETCD_ENDPOINTS or pass --etcd-endpoints")
        })?;
        let endpoints: Vec<&str> = endpoints.split(',').map(str::trim).collect();
        let options = etcd_client::ConnectOptions::new()
            .with_timeout(std::time::Duration::from_secs(5))
            .with_connect_timeout(std::time::Duration::from_secs(5))
            .with_require_leader(true);
        etcd_client::Client::connect(&endpoints, Some(options))
            .await
            .map_err(|e| {
                Failure::service(format!(
                    "cannot reach etcd at {} ({e}): check ETCD_ENDPOINTS and that the members \
                     are up",
                    endpoints.join(",")
                ))
            })
    }

    /// The etcd key layout the deployment uses.
    pub(crate) fn etcd_keys(&self) -> Result<EtcdKeys, Failure> {
        Ok(EtcdKeys::new(
            self.etcd_lock_prefix.clone(),
            self.etcd_token_prefix.clone(),
        )?)
    }

    /// The Redis key layout the deployment uses.
    pub(crate) fn redis_keys(&self) -> Result<RedisKeys, Failure> {
        let token_prefix = self
            .redis_token_prefix
            .clone()
            .or_else(|| std::env::var(OLD_TOKEN_PREFIX_VARIABLE).ok())
            .unwrap_or_else(|| "fence:".to_owned());
        Ok(RedisKeys::new(
            self.redis_lock_prefix.clone(),
            token_prefix,
        )?)
    }

    /// Whether Redis counters are read and raised without their epochs.
    pub(crate) fn redis_without_epochs(&self) -> bool {
        self.redis_epochs.is_none()
    }

    /// Whether the PostgreSQL counter table is the one the Redis tokens draw their epochs
    /// from (its counters are epochs, not tokens).
    pub(crate) fn pg_counters_are_epochs(&self) -> bool {
        self.redis_epochs.as_deref() == Some(self.pg_token_table.as_str())
    }

    /// Where the lease (`lease`) or counter of `resource` is read, for a report that found
    /// nothing there.
    pub(crate) fn location(
        &self,
        backend: Backend,
        resource: &ResourceName,
        lease: bool,
    ) -> Result<String, Failure> {
        Ok(match backend {
            Backend::Redis => {
                let keys = self.redis_keys()?;
                let key = if lease {
                    keys.lock_key(resource)?
                } else {
                    keys.token_key(resource)?
                };
                format!("Redis key {key}")
            }
            Backend::Postgres => {
                let table = if lease {
                    &self.pg_lease_table
                } else {
                    &self.pg_token_table
                };
                format!("the row {:?} of {table}", resource.as_str())
            }
            Backend::Mysql => {
                let table = if lease {
                    &self.mysql_lease_table
                } else {
                    &self.mysql_token_table
                };
                format!(
                    "the row {:?} of {}",
                    resource.as_str(),
                    self.mysql_name(table)?
                )
            }
            Backend::Dynamodb => format!(
                "the item {:?} of table {}",
                resource.as_str(),
                self.dynamodb_table
            ),
            Backend::Etcd => {
                let keys = self.etcd_keys()?;
                let key = if lease {
                    keys.lock_key(resource)
                } else {
                    keys.token_key(resource)
                };
                format!("etcd key {key}")
            }
        })
    }

    /// A failure of a store, with what was tried where the request never reached it.
    pub(crate) fn failure(&self, err: fencing_core::Error) -> Failure {
        let text = err.to_string();
        let failure = Failure::from(err);
        if !text.contains("the request was not sent") {
            return failure;
        }
        let tried = match &self.aws_endpoint {
            Some(endpoint) => format!("AWS_ENDPOINT_URL {endpoint}"),
            None => format!("the public endpoint of {}", self.aws_region),
        };
        Failure::service(format!(
            "{text} (tried {tried}: check AWS_ENDPOINT_URL and AWS_REGION, and that the service \
             is up)"
        ))
    }

    fn aws_credentials(&self) -> Result<aws_credential_types::Credentials, Failure> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
            (Some(id), Some(secret)) => Ok(aws_credential_types::Credentials::new(
                id,
                secret,
                var("AWS_SESSION_TOKEN"),
                None,
                "environment",
            )),
            _ => Err(Failure::usage(
                "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            )),
        }
    }

    fn http_client() -> aws_sdk_dynamodb::config::SharedHttpClient {
        use aws_smithy_http_client::tls::{Provider, rustls_provider::CryptoMode};
        aws_smithy_http_client::Builder::new()
            .tls_provider(Provider::Rustls(CryptoMode::Ring))
            .build_https()
    }

    fn check_endpoint(&self) -> Result<(), Failure> {
        match &self.aws_endpoint {
            Some(endpoint)
                if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) =>
            {
                Err(Failure::usage(format!(
                    "AWS_ENDPOINT_URL (or --aws-endpoint) {endpoint:?} is not a URL: write it as \
                     http://HOST:PORT"
                )))
            }
            _ => Ok(()),
        }
    }

    pub(crate) fn dynamodb(&self) -> Result<aws_sdk_dynamodb::Client, Failure> {
        self.check_endpoint()?;
        let config = aws_config!(aws_sdk_dynamodb, self);
        Ok(aws_sdk_dynamodb::Client::from_conf(config.build()))
    }

    pub(crate) fn s3(&self) -> Result<aws_sdk_s3::Client, Failure> {
        self.check_endpoint()?;
        let mut config = aws_config!(aws_sdk_s3, self);
        if self.aws_endpoint.is_some() {
            // An emulator or a VPC endpoint has no virtual hosts.
            config = config.force_path_style(true);
        }
        Ok(aws_sdk_s3::Client::from_conf(config.build()))
    }

    async fn pg_tokens(&self) -> Result<PgTokenSource, Failure> {
        let counters = PgTokenSource::new(self.pg_pool().await?, qualified(&self.pg_token_table)?);
        if self.pg_counters_are_epochs() {
            // Read (and raised by hand) as the epochs' own rows, at the rate they count.
            return Ok(counters.with_max_rate(RateBound::EPOCHS.per_second())?);
        }
        Ok(counters)
    }

    /// The PostgreSQL counters of the Redis tokens' epochs in `table`, counting as the
    /// library's Redis deployments do (at most one epoch a second: epochs stay below 2^31).
    async fn epochs(&self, table: &str) -> Result<PgEpochSource, Failure> {
        Ok(PgEpochSource::new(self.pg_pool().await?, qualified(table)?))
    }

    fn dynamo_tokens(&self) -> Result<DynamoTokenSource, Failure> {
        Ok(DynamoTokenSource::new(
            self.dynamodb()?,
            self.dynamodb_table.clone(),
        )?)
    }

    async fn redis_tokens(&self) -> Result<RedisTokenSource<RedisConnection>, Failure> {
        let conn = self.redis().await?;
        Ok(match &self.redis_epochs {
            Some(table) => RedisTokenSource::new(conn, Arc::new(self.epochs(table).await?)),
            None => RedisTokenSource::may_reissue_tokens(conn),
        }
        .with_keys(self.redis_keys()?))
    }

    /// Where the counter of `resource` stands against the server answering, for the kinds
    /// that bind their counters (Redis with its epochs, PostgreSQL, MySQL, DynamoDB); `None` for the
    /// others.
    pub(crate) async fn counter_history(
        &self,
        backend: Backend,
        resource: &fencing_core::ResourceName,
    ) -> Result<Option<fencing_core::CounterHistory>, Failure> {
        let history = match backend {
            Backend::Redis if self.redis_epochs.is_some() => {
                self.redis_tokens().await?.history(resource).await
            }
            Backend::Postgres => self.pg_tokens().await?.history(resource).await,
            Backend::Mysql => self.mysql_tokens().await?.history(resource).await,
            Backend::Dynamodb => self.dynamo_tokens()?.history(resource).await,
            _ => return Ok(None),
        };
        history.map(Some).map_err(|e| self.failure(e))
    }

    pub(crate) async fn lease(&self, backend: Backend) -> Result<Box<dyn Lease>, Failure> {
        Ok(match backend {
            Backend::Redis => {
                let keys = self.redis_keys()?;
                let conn = self.redis().await?;
                match &self.redis_epochs {
                    Some(table) => {
                        let epochs = self.epochs(table).await?;
                        Box::new(RedisLease::new(conn, Arc::new(epochs)).with_keys(keys))
                    }
                    None => Box::new(RedisLease::may_reissue_tokens(conn).with_keys(keys)),
                }
            }
            Backend::Postgres => Box::new(PgLease::new(
                qualified(&self.pg_lease_table)?,
                self.pg_tokens().await?,
            )),
            Backend::Mysql => Box::new(MySqlLease::new(
                self.mysql_name(&self.mysql_lease_table)?,
                self.mysql_tokens().await?,
            )),
            Backend::Dynamodb => Box::new(DynamoLease::new(
                self.dynamodb()?,
                self.dynamodb_table.clone(),
            )?),
            Backend::Etcd => {
                Box::new(EtcdLease::new(self.etcd().await?).with_keys(self.etcd_keys()?))
            }
        })
    }

    pub(crate) async fn tokens(&self, backend: Backend) -> Result<Box<dyn TokenSource>, Failure> {
        Ok(match backend {
            Backend::Redis => Box::new(self.redis_tokens().await?),
            Backend::Postgres => Box::new(self.pg_tokens().await?),
            Backend::Mysql => Box::new(self.mysql_tokens().await?),
            Backend::Dynamodb => Box::new(self.dynamo_tokens()?),
            Backend::Etcd => {
                Box::new(EtcdTokenSource::new(self.etcd().await?).with_keys(self.etcd_keys()?))
            }
        })
    }
}

/// The command's connection to Redis: straight to a server (--redis-url), or to the primary
/// the sentinels name (--redis-sentinels), found again if it moves while the command runs.
#[derive(Clone, Debug)]
pub(crate) enum RedisConnection {
    Direct(MultiplexedConnection),
    Sentinel(RedisSentinelConnection),
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConnection::Direct(conn) => conn.req_packed_command(cmd),
            RedisConnection::Sentinel(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConnection::Direct(conn) => conn.req_packed_commands(pipeline, offset, count),
            RedisConnection::Sentinel(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConnection::Direct(conn) => conn.get_db(),
            RedisConnection::Sentinel(conn) => conn.get_db(),
        }
    }
}

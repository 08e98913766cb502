//! Where one run keeps its data, and how each side reaches it: the campaign creates the
//! stores (as a migration would), the workers build the library's stores over them.
//!
//! A run's refunds and its job's row live in the PostgreSQL schema named after the run, or,
//! on the MySQL lease, in the MariaDB database named after it ([`crate::tables`]), each
//! with a history table filled by a trigger; its ledger is a DynamoDB table; its receipts an S3 bucket with versioning on (so the audit sees
//! every version of every receipt). The job itself is a message on the run's SQS queue, and a
//! row of the `jobs` table whose fence gates the message's deletion.

use std::sync::Arc;

use fencing_core::{EpochSource, Lease, Result};
use fencing_dynamodb::{DynamoLease, DynamoStore, DynamoTable};
use fencing_etcd::{EtcdKeys, EtcdLease};
use fencing_mysql::{MySqlLease, MySqlQualifiedName, MySqlStore, MySqlTable, MySqlTokenSource};
use fencing_postgres::{PgEpochSource, PgLease, PgQualifiedName, PgStore, PgTable, PgTokenSource};
use fencing_redis::{RedisKeys, RedisLease, RedisSentinelConnection};
use fencing_s3::{S3Bucket, S3Store};
use fencing_test_support::aws;
use sqlx::{AssertSqlSafe, MySqlPool, PgPool};

use crate::plan::{LeaseKind, REFUND_CENTS, RunPlan, TeamDatabase};
use crate::queue::{self, JobQueue};
use crate::tables::{self, TeamTable};

/// The merchant every run settles.
pub const MERCHANT: &str = "m_4471";

/// The names of one run's tables, bucket and lease, from its id (lowercase letters, digits
/// and `_`, as PostgreSQL, DynamoDB and S3 all accept once `_` becomes `-` for S3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunNames {
    id: String,
}

impl RunNames {
    /// The names of run `id`.
    ///
    /// # Panics
    ///
    /// On an id with anything but lowercase ASCII letters, digits and `_`, or longer than 40.
    pub fn new(id: &str) -> Self {
        assert!(
            !id.is_empty()
                && id.len() <= 40
                && id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
            "a run id is lowercase letters, digits and _: {id:?}"
        );
        RunNames { id: id.to_owned() }
    }

    /// A fresh id for a run of `seed`.
    pub fn fresh(seed: u64) -> Self {
        let unique = fencing_testkit::unique_name("");
        let suffix: String = unique
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .rev()
            .take(6)
            .collect::<String>()
            .to_ascii_lowercase();
        Self::new(&format!("settle_{seed}_{suffix}"))
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The PostgreSQL schema of the refunds (and of the PostgreSQL leases and counters).
    pub fn schema(&self) -> &str {
        &self.id
    }

    /// The MySQL database of the MySQL lease's leases and counters.
    pub fn mysql_database(&self) -> &str {
        &self.id
    }

    /// The DynamoDB ledger table.
    pub fn ledger_table(&self) -> String {
        format!("{}-ledger", self.id)
    }

    /// The DynamoDB table of leases and counters (the DynamoDB lease kind).
    pub fn dynamo_lease_table(&self) -> String {
        format!("{}-leases", self.id)
    }

    /// The S3 bucket of receipts.
    pub fn receipts_bucket(&self) -> String {
        self.id.replace('_', "-")
    }

    /// The SQS queue the job is put on.
    pub fn job_queue(&self) -> String {
        format!("{}-jobs", self.id)
    }

    /// The lease's resource: the merchant's settlement.
    pub fn resource(&self) -> fencing_core::ResourceName {
        fencing_core::ResourceName::new(format!("settle:{MERCHANT}")).expect("a valid name")
    }

    /// The etcd keys of the lease (the etcd lease kind): under the run's id, so runs on one
    /// cluster never meet.
    pub fn etcd_keys(&self) -> EtcdKeys {
        EtcdKeys::new(format!("{}/lock/", self.id), format!("{}/token/", self.id))
            .expect("distinct, non-empty prefixes")
    }

    /// The Redis keys of the lease (the Redis lease kind): under the run's id, like its
    /// epochs (a table of the run's schema). A counter left by an earlier run on the same
    /// server would otherwise carry epochs this run's table never issued, and after a Redis
    /// restart the run would open an epoch below them and issue a token lower than one
    /// issued before (the history check caught exactly that).
    pub fn redis_keys(&self) -> RedisKeys {
        RedisKeys::new(format!("{}:lock:", self.id), format!("{}:fence:", self.id))
            .expect("distinct prefixes without braces")
    }

    fn qualified(&self, table: &str) -> PgQualifiedName {
        PgQualifiedName::new(&self.id, table).expect("run ids are valid identifiers")
    }

    fn mysql_qualified(&self, table: &str) -> MySqlQualifiedName {
        MySqlQualifiedName::new(&self.id, table).expect("run ids are valid identifiers")
    }
}

/// The clients of one process: its own pool and its own AWS clients.
#[derive(Clone, Debug)]
pub struct Clients {
    /// PostgreSQL.
    pub pool: PgPool,
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// S3.
    pub s3: aws_sdk_s3::Client,
    /// SQS, for the job queue.
    pub sqs: aws_sdk_sqs::Client,
    /// MySQL (MariaDB), in a run that keeps anything there ([`Self::with_mysql`]).
    pub mysql: Option<MySqlPool>,
}

impl Clients {
    /// Connects to PostgreSQL at `database_url` under `application_name` (which is how the
    /// campaign finds a worker's connections to terminate) and builds AWS clients for
    /// `aws_endpoint`.
    pub async fn connect(
        database_url: &str,
        application_name: &str,
        aws_endpoint: &str,
    ) -> std::result::Result<Self, sqlx::Error> {
        Self::connect_with(database_url, application_name, aws_endpoint, 4).await
    }

    /// As [`Self::connect`], with a pool of at most `connections` to PostgreSQL.
    pub async fn connect_with(
        database_url: &str,
        application_name: &str,
        aws_endpoint: &str,
        connections: u32,
    ) -> std::result::Result<Self, sqlx::Error> {
        let options: sqlx::postgres::PgConnectOptions = database_url.parse()?;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_with(options.application_name(application_name))
            .await?;
        Ok(Clients {
            pool,
            dynamodb: aws::dynamodb_client_at(aws_endpoint, aws_sdk_dynamodb::Config::builder()),
            s3: aws::s3_client_at(aws_endpoint, aws_sdk_s3::Config::builder()),
            sqs: queue::client(aws_endpoint),
            mysql: None,
        })
    }

    /// The same clients and a pool of at most four connections to MySQL at `url`, whose
    /// connections use `database` by default when given (a worker's use the run's database:
    /// that is how the campaign finds them to kill).
    pub async fn with_mysql(
        mut self,
        url: &str,
        database: Option<&str>,
    ) -> std::result::Result<Self, sqlx::Error> {
        let mut options: sqlx::mysql::MySqlConnectOptions = url.parse()?;
        if let Some(database) = database {
            options = options.database(database);
        }
        let pool = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_with(options)
            .await?;
        self.mysql = Some(pool);
        Ok(self)
    }

    /// The MySQL pool, which a run on the MySQL lease needs.
    pub fn mysql(&self) -> Result<&MySqlPool> {
        self.mysql.as_ref().ok_or_else(|| {
            fencing_core::Error::from(fencing_core::InvalidInput::new(
                fencing_core::InputKind::StoreSet,
                "a run on the MySQL lease needs MySQL (--mysql-url)",
            ))
        })
    }

    /// The job queue of run `names`, which the campaign created.
    pub async fn job_queue(
        &self,
        names: &RunNames,
    ) -> std::result::Result<JobQueue, Box<dyn std::error::Error + Send + Sync>> {
        let answer = self
            .sqs
            .get_queue_url()
            .queue_name(names.job_queue())
            .send()
            .await?;
        let url = answer.queue_url().ok_or("a queue without a URL")?;
        Ok(JobQueue::at(self.sqs.clone(), url))
    }
}

/// The job's id: one settlement per run.
pub const JOB: &str = "settlement";

/// Creates a run's stores: `refunds` pending refunds of 70.25 EUR and the job's row in
/// PostgreSQL or, on the MySQL lease, in MariaDB (which `clients` must then reach), the ledger table, the receipts bucket (versioned), the lease's own tables, and the
/// job queue with the job on it. `with_fence: false` leaves the fence columns out, as a team
/// that forgot its migration would.
pub async fn create(
    names: &RunNames,
    clients: &Clients,
    plan: &RunPlan,
    with_fence: bool,
) -> std::result::Result<JobQueue, Box<dyn std::error::Error + Send + Sync>> {
    match plan.lease.team_database() {
        TeamDatabase::Postgres => create_pg_tables(names, clients, plan, with_fence).await?,
        TeamDatabase::Mysql => {
            create_mysql_tables(names, clients.mysql()?, plan, with_fence).await?
        }
    }
    DynamoTable::new(names.ledger_table())?
        .create_if_missing(&clients.dynamodb)
        .await?;
    let bucket = names.receipts_bucket();
    clients.s3.create_bucket().bucket(&bucket).send().await?;
    clients
        .s3
        .put_bucket_versioning()
        .bucket(&bucket)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await?;
    create_lease_tables(names, clients, plan.lease).await?;
    JobQueue::create(clients.sqs.clone(), &names.job_queue(), names.id()).await
}

/// The team's tables of run `names` in its PostgreSQL schema, and `plan`'s pending refunds.
async fn create_pg_tables(
    names: &RunNames,
    clients: &Clients,
    plan: &RunPlan,
    with_fence: bool,
) -> std::result::Result<(), sqlx::Error> {
    let ddl = tables::postgres_ddl(names.schema(), with_fence, JOB);
    sqlx::raw_sql(AssertSqlSafe(ddl))
        .execute(&clients.pool)
        .await?;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO \"{}\".refunds (id, merchant, amount_cents) \
         SELECT 'r_' || lpad(n::text, 4, '0'), $1, $2 FROM generate_series(1, $3) AS n",
        names.schema()
    )))
    .bind(MERCHANT)
    .bind(REFUND_CENTS)
    .bind(plan.sizing.refunds as i64)
    .execute(&clients.pool)
    .await
    .map(drop)
}

/// The run's MySQL database (where the MySQL lease keeps its tables too), the team's tables
/// in it, and `plan`'s pending refunds, in one statement (at most 9,999 rows of three values,
/// under a statement's 65,535 placeholders).
async fn create_mysql_tables(
    names: &RunNames,
    pool: &MySqlPool,
    plan: &RunPlan,
    with_fence: bool,
) -> std::result::Result<(), sqlx::Error> {
    let database = names.mysql_database();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE DATABASE IF NOT EXISTS `{database}`"
    )))
    .execute(pool)
    .await?;
    let ddl = tables::mysql_ddl(database, with_fence, JOB);
    sqlx::raw_sql(AssertSqlSafe(ddl)).execute(pool).await?;
    let mut insert = sqlx::QueryBuilder::new(format!(
        "INSERT INTO `{database}`.refunds (id, merchant, amount_cents) "
    ));
    insert.push_values(0..plan.sizing.refunds, |mut row, index| {
        row.push_bind(RunPlan::refund_key(index))
            .push_bind(MERCHANT)
            .push_bind(REFUND_CENTS);
    });
    insert.build().execute(pool).await.map(drop)
}

/// Creates what the lease of `kind` keeps beside the run's stores: its counters in PostgreSQL
/// (the Redis lease's epochs, the PostgreSQL lease's leases and tokens) or its DynamoDB table.
pub async fn create_lease_tables(
    names: &RunNames,
    clients: &Clients,
    kind: LeaseKind,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    match kind {
        LeaseKind::Redis => {
            PgEpochSource::new(clients.pool.clone(), names.qualified("tokens"))
                .create_if_missing()
                .await?
        }
        LeaseKind::Postgres => create_pg_lease(names, &clients.pool).await?,
        LeaseKind::Dynamodb => {
            DynamoLease::new(clients.dynamodb.clone(), names.dynamo_lease_table())?
                .create_if_missing()
                .await?
        }
        // Keys under the run's id need no set-up.
        LeaseKind::Etcd => {}
        // In the run's database, which the team's tables made.
        LeaseKind::Mysql => {
            mysql_lease(names, clients.mysql()?.clone())
                .create_if_missing()
                .await?
        }
    }
    Ok(())
}

/// Creates the PostgreSQL lease's tables of run `names` (its leases and their counters) in
/// the database of `pool`.
pub async fn create_pg_lease(names: &RunNames, pool: &PgPool) -> Result<()> {
    let counters = PgTokenSource::new(pool.clone(), names.qualified("tokens"));
    counters.create_if_missing().await?;
    PgLease::new(names.qualified("leases"), counters)
        .create_if_missing()
        .await
}

/// Drops the MySQL database of run `names` (its tables and the MySQL lease's).
pub async fn drop_mysql_database(
    names: &RunNames,
    pool: &MySqlPool,
) -> std::result::Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS `{}`",
        names.mysql_database()
    )))
    .execute(pool)
    .await
    .map(drop)
}

fn mysql_lease(names: &RunNames, pool: MySqlPool) -> MySqlLease {
    let counters = MySqlTokenSource::new(pool, names.mysql_qualified("tokens"));
    MySqlLease::new(names.mysql_qualified("leases"), counters)
}

/// Drops a run's PostgreSQL schema (the emulator's tables and buckets go with the emulator).
pub async fn drop_schema(names: &RunNames, pool: &PgPool) -> std::result::Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{}\" CASCADE",
        names.schema()
    )))
    .execute(pool)
    .await
    .map(drop)
}

/// Deletes a run's AWS resources: the ledger table, the DynamoDB lease table (that lease kind
/// only), every version of every receipt and the bucket, and the job queue. Without it the
/// emulator keeps every run a campaign ever made, and a long campaign measures that.
pub async fn drop_aws(
    names: &RunNames,
    clients: &Clients,
    lease: LeaseKind,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let dynamodb = &clients.dynamodb;
    dynamodb
        .delete_table()
        .table_name(names.ledger_table())
        .send()
        .await?;
    if lease == LeaseKind::Dynamodb {
        dynamodb
            .delete_table()
            .table_name(names.dynamo_lease_table())
            .send()
            .await?;
    }
    let bucket = names.receipts_bucket();
    loop {
        let page = clients
            .s3
            .list_object_versions()
            .bucket(&bucket)
            .send()
            .await?;
        let versions = page
            .versions()
            .iter()
            .map(|v| (v.key(), v.version_id()))
            .chain(
                page.delete_markers()
                    .iter()
                    .map(|m| (m.key(), m.version_id())),
            );
        let mut deleted = 0;
        for (key, version) in versions {
            clients
                .s3
                .delete_object()
                .bucket(&bucket)
                .set_key(key.map(str::to_owned))
                .set_version_id(version.map(str::to_owned))
                .send()
                .await?;
            deleted += 1;
        }
        if deleted == 0 {
            break;
        }
    }
    clients.s3.delete_bucket().bucket(&bucket).send().await?;
    clients.job_queue(names).await?.delete_queue().await
}

/// The library's stores over a run's data, as a worker uses them.
#[derive(Clone, Debug)]
pub struct RunStores {
    /// Refunds in PostgreSQL or MySQL: key `id`, state `state`, fence `fence`.
    pub refunds: TeamTable,
    /// The ledger in DynamoDB.
    pub ledger: Arc<DynamoStore>,
    /// Receipts in S3.
    pub receipts: Arc<S3Store>,
    /// The job's row, beside the refunds: its fence gates the job message's deletion.
    pub job: TeamTable,
}

impl RunStores {
    /// The stores of run `names` on `lease` through `clients`.
    pub fn new(names: &RunNames, clients: &Clients, lease: LeaseKind) -> Result<Self> {
        let team_table = |table: &str, name: &str| -> Result<TeamTable> {
            Ok(match lease.team_database() {
                TeamDatabase::Postgres => TeamTable::Postgres(Arc::new(
                    PgStore::new(clients.pool.clone(), PgTable::new(names.schema(), table)?)
                        .named(name)?,
                )),
                TeamDatabase::Mysql => TeamTable::Mysql(Arc::new(
                    MySqlStore::new(
                        clients.mysql()?.clone(),
                        MySqlTable::new(names.mysql_database(), table)?,
                    )
                    .named(name)?,
                )),
            })
        };
        Ok(RunStores {
            refunds: team_table("refunds", "refunds")?,
            ledger: Arc::new(
                DynamoStore::new(
                    clients.dynamodb.clone(),
                    DynamoTable::new(names.ledger_table())?,
                )
                .named("ledger")?,
            ),
            receipts: Arc::new(
                S3Store::new(
                    clients.s3.clone(),
                    S3Bucket::new(names.receipts_bucket(), "")?,
                )
                .named("receipts")?,
            ),
            job: team_table("jobs", "job")?,
        })
    }
}

/// The server of a lease kind that keeps its lease outside the run's stores.
#[derive(Clone)]
pub enum LeaseServer {
    /// One Redis, for [`LeaseKind::Redis`].
    Redis(redis::aio::ConnectionManager),
    /// Redis behind Sentinel, for [`LeaseKind::Redis`]: the primary the sentinels name.
    RedisSentinel(RedisSentinelConnection),
    /// A PostgreSQL of the lease's own, for [`LeaseKind::Postgres`] (unless given, the lease
    /// lives in the run's database).
    Postgres(PgPool),
    /// An etcd cluster, for [`LeaseKind::Etcd`] (boxed: a client is a few hundred bytes).
    Etcd(Box<etcd_client::Client>),
}

/// The lease of `kind` for run `names`. The Redis lease takes its epochs from PostgreSQL, so
/// a Redis restart never reissues a token; without `counter_binding` its counter is not bound
/// to the server's history (`RedisLease::may_reissue_tokens`: the failover's control).
///
/// # Panics
///
/// When `kind` needs a server and `server` is not of that kind.
pub fn lease(
    kind: LeaseKind,
    names: &RunNames,
    clients: &Clients,
    server: Option<LeaseServer>,
    counter_binding: bool,
) -> Result<Arc<dyn Lease>> {
    Ok(match (kind, server) {
        (LeaseKind::Redis, Some(LeaseServer::Redis(conn))) => {
            redis_lease(conn, names, clients, counter_binding)
        }
        (LeaseKind::Redis, Some(LeaseServer::RedisSentinel(conn))) => {
            redis_lease(conn, names, clients, counter_binding)
        }
        (LeaseKind::Etcd, Some(LeaseServer::Etcd(client))) => {
            Arc::new(EtcdLease::new(*client).with_keys(names.etcd_keys()))
        }
        (LeaseKind::Postgres, server) => {
            let pool = match server {
                Some(LeaseServer::Postgres(pool)) => pool,
                _ => clients.pool.clone(),
            };
            let counters = PgTokenSource::new(pool, names.qualified("tokens"));
            Arc::new(PgLease::new(names.qualified("leases"), counters))
        }
        (LeaseKind::Dynamodb, _) => Arc::new(DynamoLease::new(
            clients.dynamodb.clone(),
            names.dynamo_lease_table(),
        )?),
        (LeaseKind::Mysql, _) => Arc::new(mysql_lease(names, clients.mysql()?.clone())),
        (kind @ (LeaseKind::Redis | LeaseKind::Etcd), _) => {
            panic!("the {} lease needs its server", kind.name())
        }
    })
}

fn redis_lease<C>(
    conn: C,
    names: &RunNames,
    clients: &Clients,
    counter_binding: bool,
) -> Arc<dyn Lease>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    if counter_binding {
        let epochs: Arc<dyn EpochSource> = Arc::new(PgEpochSource::new(
            clients.pool.clone(),
            names.qualified("tokens"),
        ));
        Arc::new(RedisLease::new(conn, epochs).with_keys(names.redis_keys()))
    } else {
        Arc::new(RedisLease::may_reissue_tokens(conn).with_keys(names.redis_keys()))
    }
}

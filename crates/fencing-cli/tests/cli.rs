//! The `fencing` binary run as a process against the real services, as an operator runs it.

use std::sync::Arc;

use assert_cmd::Command;
use fencing_core::adapter::StoreWrites;
use fencing_core::{FencedWrite, FencingToken, Lease, RecordKey, ResourceName, Ttl};
use fencing_postgres::{PgEpochSource, PgLease, PgQualifiedName, PgStore, PgTable, PgTokenSource};
use fencing_redis::RedisLease;
use fencing_test_support::services::{self, RedisSentinels, RedisServer};
use fencing_testkit::unique_name;
use serde_json::Value;
use sqlx::{AssertSqlSafe, PgPool};

/// The binary with the services' URLs and nothing else from the environment of the tests.
fn fencing() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fencing"));
    command
        .env_clear()
        .env("DATABASE_URL", services::postgres_url())
        .env("REDIS_URL", services::redis_url())
        .env("AWS_ENDPOINT_URL", services::aws_endpoint())
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("ETCD_ENDPOINTS", services::etcd_endpoints().join(","));
    command
}

/// Runs it, expecting `code`, and returns stdout.
fn run(command: &mut Command, code: i32) -> String {
    let output = command.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    );
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout + &stderr
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

struct Schema {
    pool: PgPool,
    name: String,
}

impl Schema {
    async fn new() -> Self {
        let pool = PgPool::connect(&services::postgres_url()).await.unwrap();
        let name = unique_name("cli").replace('-', "_");
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA \"{}\"", name)))
            .execute(&pool)
            .await
            .unwrap();
        Schema { pool, name }
    }

    fn table(&self, table: &str) -> String {
        format!("{}.{table}", self.name)
    }

    /// The counter table `tokens` of this schema, created.
    async fn tokens(&self) -> PgTokenSource {
        let tokens = PgTokenSource::new(
            self.pool.clone(),
            PgQualifiedName::new(&self.name, "tokens").unwrap(),
        );
        tokens.create_if_missing().await.unwrap();
        tokens
    }

    async fn epochs(&self) -> PgEpochSource {
        let epochs = PgEpochSource::new(
            self.pool.clone(),
            PgQualifiedName::new(&self.name, "tokens").unwrap(),
        );
        epochs.create_if_missing().await.unwrap();
        epochs
    }

    async fn execute(&self, sql: String) {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&self.pool)
            .await
            .unwrap();
    }

    async fn drop(self) {
        self.execute(format!("DROP SCHEMA \"{}\" CASCADE", self.name))
            .await;
    }
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

#[tokio::test]
async fn token_current_and_advance_never_lower_a_postgres_counter() {
    let schema = Schema::new().await;
    schema.tokens().await;
    let table = schema.table("tokens");
    let resource = unique_name("settle:m_4471");
    let advance = |to: &str| {
        let mut command = fencing();
        command.args([
            "token",
            "advance",
            &resource,
            "--tokens",
            "postgres",
            "--pg-token-table",
            &table,
            "--to",
            to,
        ]);
        command
    };
    let out = run(&mut advance("40"), 0);
    assert!(out.contains("raised from none issued to 40"), "{out}");
    let out = run(&mut advance("30"), 0);
    assert!(out.contains("already at 40"), "{out}");
    let out = run(
        fencing().args([
            "token",
            "current",
            &resource,
            "--tokens",
            "postgres",
            "--pg-token-table",
            &table,
            "--json",
        ]),
        0,
    );
    assert_eq!(json(&out)["current"], 40);
    let out = run(&mut advance("0"), 2);
    assert!(out.contains("token"), "{out}");
    // Only canonical decimal is a token: none of these may raise the counter.
    for spelled in ["033", "+33", "0033", "4e1", " 41", "41.0", "--to=50"] {
        let out = run(&mut advance(spelled), 2);
        assert!(!out.contains("raised"), "{spelled}: {out}");
    }
    let out = run(&mut advance("41"), 0);
    assert!(out.contains("raised from 40 to 41"), "{out}");
    schema.drop().await;
}

#[tokio::test]
async fn seeding_an_epoch_deployment_without_its_epochs_is_refused_unless_asked_for() {
    let schema = Schema::new().await;
    let epochs = schema.epochs().await;
    let pool = schema.pool.clone();
    let refunds = PgTable::new(&schema.name, "refunds").unwrap();
    refunds.create_if_missing(&pool).await.unwrap();
    // A holder of the library's default Redis lease (epochs from PostgreSQL) wrote a refund.
    let redis = redis::Client::open(services::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let lease = RedisLease::new(redis, Arc::new(epochs));
    let resource = unique_name("settle:m_4471");
    let r = ResourceName::new(resource.clone()).unwrap();
    let guard = lease
        .try_acquire(&r, Ttl::from_secs(30).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(guard.token().get() > 1 << 32, "an epoch-prefixed token");
    PgStore::new(pool.clone(), refunds)
        .write(
            &RecordKey::new("r_815").unwrap(),
            guard.token(),
            &FencedWrite::claim(),
        )
        .await
        .unwrap();
    lease.release(guard).await.unwrap();

    let seed = |extra: &[&str]| {
        let mut command = fencing();
        command
            .args(["seed", &resource, "--tokens", "redis", "--from"])
            .arg(format!("postgres:{}", schema.table("refunds")))
            .args(extra);
        command
    };
    let out = run(&mut seed(&[]), 2);
    assert!(out.contains("needs no seed at all"), "{out}");
    assert!(out.contains("--redis-epochs"), "{out}");
    let out = run(
        fencing().args([
            "token",
            "advance",
            &resource,
            "--tokens",
            "redis",
            "--to",
            "4294967300",
        ]),
        2,
    );
    assert!(out.contains("epoch-prefixed"), "{out}");
    // With the epochs the command acts as the library does; asked for, on the bare counter.
    run(&mut seed(&["--redis-epochs", &schema.table("tokens")]), 0);
    run(&mut seed(&["--may-reissue-tokens"]), 0);
    schema.drop().await;
}

#[tokio::test]
async fn a_deployment_with_its_own_redis_key_prefixes_is_read_where_it_lives() {
    let redis = redis::Client::open(services::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys = fencing_redis::RedisKeys::new("billing:lock:", "billing:fence:").unwrap();
    let lease = RedisLease::may_reissue_tokens(redis).with_keys(keys);
    let resource = unique_name("settle:m_4471");
    let r = ResourceName::new(resource.clone()).unwrap();
    let guard = lease
        .try_acquire(&r, Ttl::from_secs(30).unwrap())
        .await
        .unwrap()
        .unwrap();

    // Without the prefixes: the default keys are empty, and the report says which key it read.
    let out = run(
        fencing().args(["lease", "status", &resource, "--lease", "redis"]),
        0,
    );
    assert!(
        out.contains(&format!(
            "free (no live lease at Redis key lock:{{{resource}}})"
        )),
        "{out}"
    );
    let out = run(
        fencing().args(["token", "current", &resource, "--tokens", "redis"]),
        0,
    );
    assert!(
        out.contains(&format!("nothing at Redis key fence:{{{resource}}}")),
        "{out}"
    );

    // With them, by flag or by environment variable, under today's names and 0.1's.
    for (lock_flag, token_flag) in [
        ("--redis-lock-prefix", "--redis-token-prefix"),
        ("--redis-lock-prefix", "--redis-counter-prefix"),
    ] {
        let out = run(
            fencing()
                .args(["token", "current", &resource, "--tokens", "redis", "--json"])
                .args([lock_flag, "billing:lock:", token_flag, "billing:fence:"]),
            0,
        );
        assert_eq!(
            json(&out)["current"],
            guard.token().get(),
            "{token_flag}: {out}"
        );
    }
    let out = run(
        fencing()
            .env("FENCING_REDIS_LOCK_PREFIX", "billing:lock:")
            .env("FENCING_REDIS_TOKEN_PREFIX", "billing:fence:")
            .args(["token", "current", &resource, "--tokens", "redis", "--json"]),
        0,
    );
    assert_eq!(json(&out)["current"], guard.token().get(), "{out}");
    let out = run(
        fencing().args([
            "lease",
            "status",
            &resource,
            "--lease",
            "redis",
            "--redis-lock-prefix",
            "billing:lock:",
            "--redis-token-prefix",
            "billing:fence:",
            "--json",
        ]),
        0,
    );
    assert_eq!(json(&out)["held"], true, "{out}");
    assert_eq!(json(&out)["token"], guard.token().get(), "{out}");
    let out = run(
        fencing()
            .env("FENCING_REDIS_LOCK_PREFIX", "billing:lock:")
            .env("FENCING_REDIS_COUNTER_PREFIX", "billing:fence:")
            .args(["token", "current", &resource, "--tokens", "redis", "--json"]),
        0,
    );
    assert_eq!(json(&out)["current"], guard.token().get(), "{out}");
    lease.release(guard).await.unwrap();
}

#[tokio::test]
async fn probe_says_what_a_table_with_required_columns_needs_as_a_store_error() {
    let schema = Schema::new().await;
    schema
        .execute(format!(
            "CREATE TABLE \"{0}\".payouts (id text PRIMARY KEY, amount_cents bigint NOT NULL, \
             fence bigint, state text)",
            schema.name
        ))
        .await;
    let spec = format!("postgres:{}", schema.table("payouts"));
    let out = run(fencing().args(["probe", &spec]), 3);
    assert!(out.contains("ERROR"), "{out}");
    assert!(out.contains("store error"), "{out}");
    assert!(
        !out.contains("refused a claim"),
        "a store error is not a refusal: {out}"
    );
    assert!(out.contains("amount_cents"), "{out}");
    assert!(out.contains("give the column a default"), "{out}");
    // With the row made by hand, as the message says, the probe runs.
    schema
        .execute(format!(
            "INSERT INTO \"{0}\".payouts (id, amount_cents) VALUES ('fencing-probe', 0)",
            schema.name
        ))
        .await;
    let out = run(fencing().args(["probe", &spec]), 0);
    assert!(out.contains("ok "), "{out}");
    schema.drop().await;
}

#[tokio::test]
async fn lease_status_names_the_holder_of_every_kind_of_lease() {
    let redis = redis::Client::open(services::redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let schema = Schema::new().await;
    let pg_lease = PgLease::new(
        PgQualifiedName::new(&schema.name, "leases").unwrap(),
        PgTokenSource::new(
            schema.pool.clone(),
            PgQualifiedName::new(&schema.name, "tokens").unwrap(),
        ),
    );
    pg_lease.create_if_missing().await.unwrap();
    let dynamo_table = unique_name("leases");
    let dynamo_lease =
        fencing_dynamodb::DynamoLease::new(aws_dynamodb(), dynamo_table.clone()).unwrap();
    dynamo_lease.create_if_missing().await.unwrap();
    let etcd_run = unique_name("cli");
    let etcd_keys =
        fencing_etcd::EtcdKeys::new(format!("{etcd_run}/lock/"), format!("{etcd_run}/token/"))
            .unwrap();
    let etcd = etcd_client::Client::connect(services::etcd_endpoints(), None)
        .await
        .unwrap();
    let leases: [(&str, Arc<dyn Lease>); 4] = [
        ("redis", Arc::new(RedisLease::may_reissue_tokens(redis))),
        ("postgres", Arc::new(pg_lease)),
        ("dynamodb", Arc::new(dynamo_lease)),
        (
            "etcd",
            Arc::new(fencing_etcd::EtcdLease::new(etcd).with_keys(etcd_keys)),
        ),
    ];
    for (kind, lease) in leases {
        let resource = unique_name("settle:m_4471");
        let status_as = |json: bool| {
            let mut command = fencing();
            command.args([
                "lease",
                "status",
                &resource,
                "--lease",
                kind,
                "--pg-lease-table",
                &schema.table("leases"),
                "--pg-token-table",
                &schema.table("tokens"),
                "--dynamodb-table",
                &dynamo_table,
                "--etcd-lock-prefix",
                &format!("{etcd_run}/lock/"),
                "--etcd-token-prefix",
                &format!("{etcd_run}/token/"),
            ]);
            if json {
                command.arg("--json");
            }
            command
        };
        let status = || status_as(true);
        assert_eq!(json(&run(&mut status(), 0))["held"], false, "{kind}");
        let r = ResourceName::new(resource.clone()).unwrap();
        let guard = lease
            .try_acquire(&r, Ttl::from_secs(30).unwrap())
            .await
            .unwrap()
            .unwrap();
        let held = json(&run(&mut status(), 0));
        assert_eq!(held["held"], true, "{kind}");
        assert_eq!(held["owner"], guard.owner().as_str(), "{kind}");
        assert_eq!(held["token"], guard.token().get(), "{kind}");
        let left = held["time_left_ms"].as_u64().unwrap();
        assert!(left > 20_000 && left <= 30_000, "{kind}: {left}");
        let human = run(&mut status_as(false), 0);
        assert!(
            human.contains("held") && human.contains(guard.owner().as_str()),
            "{human}"
        );
        lease.release(guard).await.unwrap();
        assert_eq!(json(&run(&mut status(), 0))["held"], false, "{kind}");
    }
    schema.drop().await;
}

/// `token current` on etcd reads the highest token issued (the token key's revision or
/// floor), and `token advance` raises the floor, never lowering it.
#[tokio::test]
async fn token_current_and_advance_on_etcd_read_and_raise_the_token_key() {
    let prefix = unique_name("cli");
    let (lock_prefix, token_prefix) = (format!("{prefix}/lock/"), format!("{prefix}/token/"));
    let keys = fencing_etcd::EtcdKeys::new(lock_prefix.clone(), token_prefix.clone()).unwrap();
    let etcd = etcd_client::Client::connect(services::etcd_endpoints(), None)
        .await
        .unwrap();
    let source = fencing_etcd::EtcdTokenSource::new(etcd).with_keys(keys);
    let resource = unique_name("settle:m_4471");
    let tokens = |args: &[&str]| {
        let mut command = fencing();
        command
            .args(["token"])
            .args(args)
            .args([resource.as_str(), "--tokens", "etcd", "--json"])
            .args(["--etcd-lock-prefix", &lock_prefix])
            .args(["--etcd-token-prefix", &token_prefix]);
        command
    };
    assert_eq!(
        json(&run(&mut tokens(&["current"]), 0))["current"],
        Value::Null
    );
    let r = ResourceName::new(resource.clone()).unwrap();
    use fencing_core::TokenSource;
    let issued = source.next(&r).await.unwrap();
    assert_eq!(
        json(&run(&mut tokens(&["current"]), 0))["current"],
        issued.get()
    );
    let floor = issued.get() + 1_000;
    let mut advance = tokens(&["advance"]);
    advance.args(["--to", &floor.to_string()]);
    run(&mut advance, 0);
    assert_eq!(json(&run(&mut tokens(&["current"]), 0))["current"], floor);
    assert!(source.next(&r).await.unwrap().get() > floor);
}

/// `fencing seed RESOURCE` of the counter table `tokens` of `schema`, from the store `spec`.
fn seed_from_postgres(schema: &Schema, resource: &str, spec: &str) -> Command {
    let mut command = fencing();
    command.args(["seed", resource, "--tokens", "postgres", "--pg-token-table"]);
    command.arg(schema.table("tokens")).args(["--from", spec]);
    command
}

#[tokio::test]
async fn seed_raises_a_counter_above_the_highest_fence_in_every_store_given() {
    let schema = Schema::new().await;
    let tokens = schema.tokens().await;
    for (name, fence) in [("refund", 77), ("ledger", 12)] {
        let table = PgTable::new(&schema.name, name).unwrap();
        table.create_if_missing(&schema.pool).await.unwrap();
        PgStore::new(schema.pool.clone(), table)
            .write(
                &RecordKey::new("r_815").unwrap(),
                token(fence),
                &FencedWrite::claim(),
            )
            .await
            .unwrap();
    }
    let resource = unique_name("settle:m_4471");
    // `--from` repeated, or once with several stores: the same command.
    let seed = |repeated: bool| {
        let refund = format!("postgres:{}", schema.table("refund"));
        let mut command = seed_from_postgres(&schema, &resource, &refund);
        if repeated {
            command.arg("--from");
        }
        command.arg(format!("postgres:{}", schema.table("ledger")));
        command
    };
    let out = run(&mut seed(true), 0);
    assert!(out.contains("refund: highest fence 77"), "{out}");
    assert!(out.contains("ledger: highest fence 12"), "{out}");
    assert!(out.contains("raised from none issued to 77"), "{out}");
    let again = json(&run(seed(false).arg("--json"), 0));
    assert_eq!(
        (again["before"].clone(), again["after"].clone()),
        (77.into(), 77.into())
    );
    let r = ResourceName::new(resource.clone()).unwrap();
    use fencing_core::TokenSource;
    assert_eq!(tokens.current(&r).await.unwrap(), Some(token(77)));
    schema.drop().await;
}

/// A table that holds several resources' rows: `where=COLUMN=VALUE` reads the highest fence
/// over the seeded resource's rows alone, where the whole table's would raise its counter to
/// another resource's fence.
#[tokio::test]
async fn seed_reads_only_the_rows_a_where_option_names() {
    let schema = Schema::new().await;
    let tokens = schema.tokens().await;
    schema
        .execute(format!(
            "CREATE TABLE \"{0}\".payouts (id text PRIMARY KEY, merchant text NOT NULL, \
             fence bigint, state text); INSERT INTO \"{0}\".payouts VALUES \
             ('p_1', 'm_4471', 12, 'sent'), ('p_2', 'm_9000', 900, 'sent')",
            schema.name
        ))
        .await;
    let resource = unique_name("settle:m_4471");
    let seed = |spec: String| seed_from_postgres(&schema, &resource, &spec);
    let table = schema.table("payouts");
    let out = run(
        &mut seed(format!("postgres:{table}:where=merchant=m_4471")),
        0,
    );
    assert!(out.contains("highest fence 12"), "{out}");
    let r = ResourceName::new(resource.clone()).unwrap();
    use fencing_core::TokenSource;
    assert_eq!(tokens.current(&r).await.unwrap(), Some(token(12)));
    let out = run(&mut seed(format!("postgres:{table}:where=merchant")), 2);
    assert!(out.contains("where=COLUMN=VALUE"), "{out}");
    assert_eq!(tokens.current(&r).await.unwrap(), Some(token(12)));
    schema.drop().await;
}

/// A probe on a table keyed by uuid: the default probe key does not fit, and the answer says
/// to pass one that does.
#[tokio::test]
async fn probe_on_a_uuid_keyed_table_says_to_pass_a_key() {
    let schema = Schema::new().await;
    schema
        .execute(format!(
            "CREATE TABLE \"{0}\".payouts (id uuid PRIMARY KEY, fence bigint, state text)",
            schema.name
        ))
        .await;
    let spec = format!("postgres:{}", schema.table("payouts"));
    let out = run(fencing().args(["probe", &spec]), 3);
    assert!(out.contains("pass --key"), "{out}");
    let uuid = "7d3c3a0e-4b8e-4f5e-9c1a-2f0d5e6b7a81";
    let out = run(fencing().args(["probe", &spec, "--key", uuid]), 0);
    assert!(out.contains("ok "), "{out}");
    schema.drop().await;
}

#[tokio::test]
async fn probe_passes_fenced_stores_and_names_one_without_a_fence_or_that_skips_it() {
    let schema = Schema::new().await;
    let good = PgTable::new(&schema.name, "good").unwrap();
    good.create_if_missing(&schema.pool).await.unwrap();
    // A table whose fence column was dropped after it was fitted.
    schema
        .execute(format!(
            "CREATE TABLE \"{0}\".dropped (id text PRIMARY KEY, state text); \
             CREATE TABLE \"{0}\".reset (id text PRIMARY KEY, fence bigint NOT NULL DEFAULT 0, state text); \
             CREATE FUNCTION \"{0}\".reset_fence() RETURNS trigger LANGUAGE plpgsql AS \
               $$ BEGIN NEW.fence := 0; RETURN NEW; END $$; \
             CREATE TRIGGER reset BEFORE INSERT OR UPDATE ON \"{0}\".reset \
               FOR EACH ROW EXECUTE FUNCTION \"{0}\".reset_fence()",
            schema.name
        ))
        .await;
    let dynamo = fencing_dynamodb::DynamoTable::new(unique_name("probe")).unwrap();
    dynamo.create_if_missing(&aws_dynamodb()).await.unwrap();
    let bucket = unique_name("probe");
    aws_s3()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();

    let passing = [
        format!("postgres:{}", schema.table("good")),
        format!("dynamodb:{}", dynamo.name()),
        format!("s3:{bucket}/probes/"),
    ];
    for _ in 0..2 {
        let out = run(fencing().arg("probe").args(&passing), 0);
        assert_eq!(out.matches("ok ").count(), 3, "{out}");
    }

    let out = run(
        fencing()
            .args(["probe", "--json"])
            .arg(format!("postgres:{}", schema.table("good")))
            .arg(format!("postgres:{}", schema.table("dropped")))
            .arg(format!("postgres:{}", schema.table("reset"))),
        1,
    );
    let report = json(&out);
    assert_eq!(report["passed"], false);
    let stores = report["stores"].as_array().unwrap();
    assert_eq!(stores[0]["passed"], true);
    assert_eq!(stores[1]["passed"], false);
    assert!(
        stores[1]["error"]
            .as_str()
            .unwrap()
            .contains("no fence column"),
        "{out}"
    );
    assert_eq!(stores[2]["passed"], false);
    assert!(
        stores[2]["detail"]
            .as_str()
            .unwrap()
            .contains("ACCEPTED stale token"),
        "{out}"
    );
    schema.drop().await;
}

#[test]
fn errors_are_sentences_that_say_what_to_do_with_their_exit_codes() {
    let out = run(
        fencing().env_remove("DATABASE_URL").args([
            "token",
            "current",
            "settle:m_4471",
            "--tokens",
            "postgres",
        ]),
        2,
    );
    assert!(
        out.contains("set DATABASE_URL or pass --database-url"),
        "{out}"
    );
    let out = run(
        fencing().env("REDIS_URL", "redis://127.0.0.1:1/").args([
            "lease",
            "status",
            "settle:m_4471",
            "--lease",
            "redis",
        ]),
        3,
    );
    assert!(out.contains("cannot reach Redis"), "{out}");
    let out = run(
        fencing().args([
            "lease",
            "status",
            "settle:\u{200B}m_4471",
            "--lease",
            "redis",
        ]),
        2,
    );
    assert!(out.contains("invalid"), "{out}");
    // Bad usage is exit 2 with the error on stderr, whatever the command.
    for args in [
        &["probe", "cassandra:ks.t"][..],
        &["probe", "bogus:x"],
        &[
            "seed",
            "settle:m_4471",
            "--tokens",
            "postgres",
            "--from",
            "bogus:x",
        ],
        &[
            "--database-url",
            "not-a-url",
            "token",
            "current",
            "r",
            "--tokens",
            "postgres",
        ],
        &[
            "--redis-url",
            "not-a-url",
            "lease",
            "status",
            "r",
            "--lease",
            "redis",
        ],
        &[
            "--aws-endpoint",
            "not-a-url",
            "lease",
            "status",
            "r",
            "--lease",
            "dynamodb",
        ],
        &["lease", "status"],
    ] {
        let output = fencing().args(args).output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8(output.stdout).unwrap(),
            String::from_utf8(output.stderr).unwrap(),
        );
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stdout.is_empty(), "{args:?}: error on stdout: {stdout}");
        assert!(!stderr.is_empty(), "{args:?}");
    }
    let out = run(fencing().args(["probe", "bogus:x"]), 2);
    assert!(out.contains("unknown kind of store"), "{out}");
    // An endpoint nothing listens on: what was tried, and what to check.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let out = run(
        fencing().env("AWS_ENDPOINT_URL", &endpoint).args([
            "lease",
            "status",
            "settle:m_4471",
            "--lease",
            "dynamodb",
        ]),
        3,
    );
    assert!(out.contains("the request was not sent"), "{out}");
    assert!(
        out.contains(&format!("tried AWS_ENDPOINT_URL {endpoint}")),
        "{out}"
    );
    assert!(out.contains("check AWS_ENDPOINT_URL"), "{out}");
}

fn aws_dynamodb() -> aws_sdk_dynamodb::Client {
    fencing_test_support::aws::dynamodb_client(aws_sdk_dynamodb::Config::builder())
}

fn aws_s3() -> aws_sdk_s3::Client {
    fencing_test_support::aws::s3_client(aws_sdk_s3::Config::builder())
}

/// An HTTP proxy in front of a server that drops the `If-Match` header of every request
/// whose path contains `on` (every request for `""`): the server behind it then takes such a
/// conditional replace as a plain put, the defect one S3-compatible server had with
/// `If-Match` on a missing key. One request per connection.
struct IfMatchDropped {
    port: u16,
}

impl IfMatchDropped {
    fn start(upstream: &str, on: &'static str) -> Self {
        let upstream = upstream.trim_start_matches("http://").to_owned();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let upstream = upstream.clone();
                std::thread::spawn(move || Self::forward(client, &upstream, on));
            }
        });
        IfMatchDropped { port }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn forward(mut client: std::net::TcpStream, upstream: &str, on: &str) {
        use std::io::{Read, Write};
        let Some((head, body)) = read_message(&mut client) else {
            return;
        };
        let mut server = std::net::TcpStream::connect(upstream).unwrap();
        let path = head.split(' ').nth(1).unwrap_or_default();
        let drops_if_match = path.contains(on);
        let request = rewrite_head(&head, |name| {
            (drops_if_match && name == "if-match") || name == "connection"
        });
        server.write_all(request.as_bytes()).unwrap();
        server.write_all(&body).unwrap();
        let mut reply = Vec::new();
        let _ = server.read_to_end(&mut reply);
        let split = find_head_end(&reply).unwrap_or(reply.len());
        let reply_head = String::from_utf8_lossy(&reply[..split]).into_owned();
        let response = rewrite_head(&reply_head, |name| name == "connection");
        let _ = client.write_all(response.as_bytes());
        let _ = client.write_all(&reply[(split + 4).min(reply.len())..]);
    }
}

/// The head of an HTTP message without the headers `drop` names (lowercase), closing the
/// connection after it, with its blank line.
fn rewrite_head(head: &str, drop: impl Fn(&str) -> bool) -> String {
    let mut lines = head.split("\r\n");
    let mut out = format!("{}\r\n", lines.next().unwrap_or_default());
    for line in lines {
        let name = line
            .split(':')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if !line.is_empty() && !drop(&name) {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

fn find_head_end(bytes: &[u8]) -> Option<usize> {
    bytes.windows(4).position(|w| w == b"\r\n\r\n")
}

/// One request from `stream`: its head (without the blank line) and its body, by
/// `Content-Length`.
fn read_message(stream: &mut std::net::TcpStream) -> Option<(String, Vec<u8>)> {
    use std::io::Read;
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        if let Some(end) = find_head_end(&buffer) {
            break end;
        }
        let n = stream.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
    let length = head
        .lines()
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = buffer[end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).ok().filter(|n| *n > 0)?;
        body.extend_from_slice(&chunk[..n]);
    }
    Some((head, body))
}

/// `fencing probe` checks an object store's conditional writes first (`object-store:s3://…`
/// and `s3:…` alike): moto with ETag matching passes; the same moto behind a proxy that drops
/// `If-Match` (a server that takes a stale or dangling `If-Match` as a plain put) is reported
/// UNSAFE, exit 1, and nothing of the probe record is written through it.
#[tokio::test]
async fn probe_reports_an_object_store_that_ignores_if_match_as_unsafe() {
    let bucket = unique_name("probe-os");
    aws_s3()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let through = |endpoint: &str| {
        let mut command = fencing();
        command
            .env("AWS_ENDPOINT_URL", endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_CONDITIONAL_PUT", "etag");
        command
    };
    // The same bucket through object_store's S3 backend and through the AWS SDK's client.
    for spec in [
        format!("object-store:s3://{bucket}/probes"),
        format!("s3:{bucket}/probes/"),
    ] {
        let out = run(
            through(&services::aws_endpoint()).arg("probe").arg(&spec),
            0,
        );
        assert!(out.starts_with("ok "), "{out}");
        for (on, defect) in [
            ("", "a stale If-Match accepted"),
            ("-missing", "If-Match on a missing key accepted"),
        ] {
            let proxy = IfMatchDropped::start(&services::aws_endpoint(), on);
            let out = run(
                through(&proxy.endpoint())
                    .args(["probe", "--json", "--key", "r_815"])
                    .arg(&spec),
                1,
            );
            let report = json(&out);
            let detail = report["stores"][0]["detail"].as_str().unwrap_or_default();
            assert!(
                detail.contains("UNSAFE") && detail.contains(defect),
                "{spec}: {out}"
            );
        }
    }
    let listed = aws_s3()
        .list_objects_v2()
        .bucket(&bucket)
        .prefix("probes/")
        .send()
        .await
        .unwrap();
    let keys: Vec<_> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert!(
        !keys.iter().any(|k| k.contains("r_815")),
        "the probe record was written: {keys:?}"
    );
}

#[test]
fn an_object_store_spec_that_is_not_a_url_of_a_known_scheme_is_bad_usage() {
    for spec in ["object-store:not a url", "object-store:ftp://host/prefix"] {
        let out = run(fencing().args(["probe", spec]), 2);
        assert!(out.contains("object-store:"), "{out}");
    }
    let out = run(
        fencing().args([
            "seed",
            "settle:m_4471",
            "--tokens",
            "postgres",
            "--from",
            "object-store:memory:///",
        ]),
        2,
    );
    assert!(out.contains("cannot be read by this command"), "{out}");
}

/// The store shapes teams have: a DynamoDB table with a sort key (named by `sort=`, the probe
/// key naming both parts), a prefix of JSON receipts (`codec=json`: probed and seeded from as
/// JSON, the probe object deleted after, so the prefix holds JSON objects only).
#[tokio::test]
async fn probe_and_seed_take_a_sort_key_and_json_receipts() {
    let table = fencing_dynamodb::DynamoTable::new(unique_name("ledger"))
        .unwrap()
        .with_key_attribute("merchant")
        .unwrap()
        .with_sort_key("payout_id", fencing_dynamodb::DynamoKeyType::String)
        .unwrap();
    table.create_if_missing(&aws_dynamodb()).await.unwrap();
    let bucket = unique_name("receipts");
    aws_s3()
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let receipts = fencing_s3::S3Store::new(
        aws_s3(),
        fencing_s3::S3Bucket::new(&bucket, "receipts/").unwrap(),
    )
    .with_codec(fencing_s3::JsonCodec::new());
    receipts
        .write(
            &RecordKey::new("m_4471/p_815").unwrap(),
            token(41),
            &FencedWrite::claim().set_payload(r#"{"amount_cents":7025}"#),
        )
        .await
        .unwrap();

    // Without `sort=`, the table's key schema does not match: a store failure, not a pass.
    run(
        fencing()
            .arg("probe")
            .arg(format!("dynamodb:{}:key=merchant", table.name())),
        3,
    );
    let stores = [
        format!("dynamodb:{}:key=merchant,sort=payout_id", table.name()),
        format!("s3:{bucket}/receipts/:codec=json"),
    ];
    let out = run(fencing().arg("probe").args(&stores), 0);
    assert_eq!(out.matches("ok ").count(), 2, "{out}");
    let listed = aws_s3()
        .list_objects_v2()
        .bucket(&bucket)
        .send()
        .await
        .unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(
        keys,
        vec!["receipts/m_4471/p_815"],
        "the probe object is gone"
    );
    let bad = run(
        fencing()
            .arg("probe")
            .arg(format!("dynamodb:{}:sort=payout_id/X", table.name())),
        2,
    );
    assert!(bad.contains("not S, N or B"), "{bad}");
    let bad = run(
        fencing().arg("probe").arg(format!("s3:{bucket}:codec=xml")),
        2,
    );
    assert!(bad.contains("json or envelope"), "{bad}");

    let schema = Schema::new().await;
    let tokens = schema.tokens().await;
    let resource = unique_name("settle:m_4471");
    let out = run(
        fencing().args([
            "seed",
            &resource,
            "--tokens",
            "postgres",
            "--pg-token-table",
            &schema.table("tokens"),
            "--from",
            &format!("s3:{bucket}/receipts/:codec=json"),
            "--from",
            &stores[0],
        ]),
        0,
    );
    assert!(out.contains("highest fence 41"), "{out}");
    let r = ResourceName::new(resource.clone()).unwrap();
    use fencing_core::TokenSource;
    assert_eq!(tokens.current(&r).await.unwrap(), Some(token(41)));
    schema.drop().await;
}

/// `--help` shows which variables each setting reads, never a value (set or not), and a
/// PostgreSQL counter that holds the epochs of the Redis tokens says so, and refuses to be
/// raised as if it held tokens.
#[tokio::test]
async fn help_names_variables_without_values_and_an_epoch_counter_says_what_it_is() {
    let help = run(
        fencing()
            .arg("--help")
            .env("AWS_ENDPOINT_URL", "http://secret:1"),
        0,
    );
    assert!(help.contains("[env: AWS_ENDPOINT_URL]"), "{help}");
    assert!(!help.contains("secret") && !help.contains("="), "{help}");

    let schema = Schema::new().await;
    let epochs = schema.tokens().await;
    let resource = unique_name("settle:m_4471");
    let r = ResourceName::new(resource.clone()).unwrap();
    use fencing_core::TokenSource;
    epochs.advance_to(&r, token(3)).await.unwrap();
    let table = schema.table("tokens");
    let args = [
        "--tokens",
        "postgres",
        "--pg-token-table",
        &table,
        "--redis-epochs",
        &table,
    ];
    let out = run(
        fencing().args(["token", "current", &resource]).args(args),
        0,
    );
    assert!(
        out.contains("(postgres epoch counter of the Redis tokens): epoch 3"),
        "{out}"
    );
    let out = run(
        fencing()
            .args(["token", "advance", &resource, "--to", "99"])
            .args(args),
        2,
    );
    assert!(out.contains("--tokens redis --redis-epochs"), "{out}");
    assert_eq!(epochs.current(&r).await.unwrap(), Some(token(3)));
    schema.drop().await;
}

/// Managed Redis with in-transit encryption: `rediss://` to a `redis-server --tls-port` with
/// a certificate of the test's own authority, trusted through SSL_CERT_FILE; without that
/// trust the command fails as a service error that says what to check.
#[tokio::test]
async fn redis_over_tls_is_reached_with_a_trusted_certificate_only() {
    let certificates = fencing_test_support::services::TestCertificates::make();
    let (_server, tls_url) = fencing_test_support::services::RedisServer::start_tls(&certificates);
    let resource = unique_name("settle:m_4471");
    let command = || {
        let mut command = fencing();
        command.env("REDIS_URL", &tls_url).args([
            "token", "advance", &resource, "--tokens", "redis", "--to", "7",
        ]);
        command
    };
    let out = run(command().env("SSL_CERT_FILE", certificates.ca()), 0);
    assert!(out.contains("raised from none issued to 7"), "{out}");
    let out = run(&mut command(), 3);
    assert!(out.contains("SSL_CERT_FILE"), "{out}");
}

/// Redis behind Sentinel: the command asks the sentinels for the primary (the server
/// `REDIS_URL` names is not used), and says what to check when they cannot be reached.
#[tokio::test]
async fn redis_behind_sentinel_is_reached_through_its_sentinels() {
    let primary = RedisServer::start(&[]);
    let sentinels = RedisSentinels::start(primary.port(), 1, 1, "cli-primary");
    let resource = unique_name("settle:m_4471");
    let through_sentinels = |sentinel_urls: &str| {
        let mut command = fencing();
        command
            .env("REDIS_SENTINELS", sentinel_urls)
            .env("REDIS_SERVICE", sentinels.service());
        command
    };
    let out = run(
        through_sentinels(&sentinels.urls().join(",")).args([
            "token", "advance", &resource, "--tokens", "redis", "--to", "7",
        ]),
        0,
    );
    assert!(out.contains("raised from none issued to 7"), "{out}");
    let current_at = |url: String| {
        let out = run(
            fencing()
                .env("REDIS_URL", url)
                .args(["token", "current", &resource, "--tokens", "redis", "--json"]),
            0,
        );
        json(&out)["current"].clone()
    };
    assert_eq!(current_at(primary.url()), 7, "raised on the primary");
    assert_eq!(
        current_at(services::redis_url()),
        Value::Null,
        "not where REDIS_URL is"
    );

    let out = run(
        through_sentinels("redis://127.0.0.1:1/")
            .args(["token", "current", &resource, "--tokens", "redis"]),
        3,
    );
    assert!(out.contains("REDIS_SENTINELS"), "{out}");
    let out = run(
        fencing()
            .env("REDIS_SENTINELS", sentinels.urls().join(","))
            .args(["token", "current", &resource, "--tokens", "redis"]),
        2,
    );
    assert!(out.contains("redis-service"), "{out}");
}

/// `token current` says where a counter stands against the server answering: bound to its
/// history, or to another (as after a failover), in which case the next token jumps past
/// anything that history could have issued.
#[tokio::test]
async fn token_current_names_the_history_a_counter_is_bound_to() {
    let schema = Schema::new().await;
    let tokens = schema.tokens().await;
    let resource = unique_name("settle:m_4471");
    let r = ResourceName::new(resource.clone()).unwrap();
    use fencing_core::TokenSource;
    tokens.next(&r).await.unwrap();
    let table = schema.table("tokens");
    let args = ["--tokens", "postgres", "--pg-token-table", &table];
    let out = run(
        fencing().args(["token", "current", &resource]).args(args),
        0,
    );
    assert!(out.contains("history: bound to this server's"), "{out}");
    schema
        .execute(format!(
            "UPDATE \"{}\".tokens SET history = 'elsewhere' WHERE resource = '{resource}'",
            schema.name
        ))
        .await;
    let out = run(
        fencing().args(["token", "current", &resource]).args(args),
        0,
    );
    assert!(
        out.contains("bound to elsewhere, but this server's is"),
        "{out}"
    );
    let report = json(&run(
        fencing()
            .args(["token", "current", &resource, "--json"])
            .args(args),
        0,
    ));
    assert_eq!(report["history"]["moved"], true);
    let next = tokens.next(&r).await.unwrap();
    assert!(
        next.get() > 1 << 20,
        "jumped by at least a second's worth: {next}"
    );
    let out = run(
        fencing().args(["token", "current", &resource]).args(args),
        0,
    );
    assert!(out.contains("history: bound to this server's"), "{out}");
    schema.drop().await;
}

/// `token current` on DynamoDB counters says which table a counter is bound to: this one, or
/// the one a restore brought it from (whose tokens the next one is raised past).
#[tokio::test]
async fn token_current_names_the_table_a_dynamodb_counter_is_bound_to() {
    use fencing_core::TokenSource;
    let client = aws_dynamodb();
    let table = unique_name("counters");
    let tokens = fencing_dynamodb::DynamoTokenSource::new(client.clone(), &table).unwrap();
    tokens.create_if_missing().await.unwrap();
    let resource = unique_name("settle:m_4471");
    tokens
        .next(&ResourceName::new(resource.clone()).unwrap())
        .await
        .unwrap();
    let args = ["--tokens", "dynamodb", "--dynamodb-table", &table];
    let out = run(
        fencing().args(["token", "current", &resource]).args(args),
        0,
    );
    assert!(out.contains("history: bound to this server's"), "{out}");
    // As a counter restored from another table holds it.
    client
        .update_item()
        .table_name(&table)
        .key(
            "resource",
            aws_sdk_dynamodb::types::AttributeValue::S(resource.clone()),
        )
        .update_expression("SET history = :elsewhere")
        .expression_attribute_values(
            ":elsewhere",
            aws_sdk_dynamodb::types::AttributeValue::S("elsewhere@1".into()),
        )
        .send()
        .await
        .unwrap();
    let report = json(&run(
        fencing()
            .args(["token", "current", &resource, "--json"])
            .args(args),
        0,
    ));
    assert_eq!(report["history"]["moved"], true, "{report}");
    assert_eq!(report["history"]["bound"], "elsewhere@1", "{report}");
}

/// A MySQL database of one test's own, and `MYSQL_URL` for it.
struct MySqlDatabase {
    pool: sqlx::MySqlPool,
    name: String,
    url: String,
}

impl MySqlDatabase {
    async fn new() -> Self {
        let server = services::mysql_url();
        let name = unique_name("cli").replace('-', "_");
        let admin = sqlx::MySqlPool::connect(&server).await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE `{name}`")))
            .execute(&admin)
            .await
            .unwrap();
        let url = format!("{}/{name}", server.rsplit_once('/').unwrap().0);
        let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
        MySqlDatabase { pool, name, url }
    }

    /// `fencing` with MYSQL_URL on this database.
    fn fencing(&self) -> Command {
        let mut command = fencing();
        command.env("MYSQL_URL", &self.url);
        command
    }

    async fn execute(&self, sql: String) {
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&self.pool)
            .await
            .unwrap();
    }

    async fn drop(self) {
        self.execute(format!("DROP DATABASE `{}`", self.name)).await;
    }
}

/// Token current and advance on a MySQL counter (named by its table alone: the URL's
/// database), the history it is bound to, and a seed from a MySQL table's highest fence.
#[tokio::test]
async fn token_advance_and_seed_never_lower_a_mysql_counter() {
    use fencing_core::TokenSource;
    use fencing_mysql::{MySqlQualifiedName, MySqlStore, MySqlTable, MySqlTokenSource};

    let database = MySqlDatabase::new().await;
    let tokens = MySqlTokenSource::new(
        database.pool.clone(),
        MySqlQualifiedName::new(&database.name, "tokens").unwrap(),
    );
    tokens.create_if_missing().await.unwrap();
    let resource = unique_name("settle:m_4471");
    let token_command = |verb: &str, extra: &[&str]| {
        let mut command = database.fencing();
        command
            .args(["token", verb, &resource, "--tokens", "mysql"])
            .args(["--mysql-token-table", "tokens"])
            .args(extra);
        command
    };
    let out = run(&mut token_command("advance", &["--to", "40"]), 0);
    assert!(out.contains("raised from none issued to 40"), "{out}");
    let out = run(&mut token_command("advance", &["--to", "30"]), 0);
    assert!(out.contains("already at 40"), "{out}");
    let out = run(&mut token_command("current", &["--json"]), 0);
    assert_eq!(json(&out)["current"], 40, "{out}");

    let table = MySqlTable::new(&database.name, "refund").unwrap();
    table.create_if_missing(&database.pool).await.unwrap();
    MySqlStore::new(database.pool.clone(), table)
        .write(
            &RecordKey::new("r_815").unwrap(),
            token(77),
            &FencedWrite::claim(),
        )
        .await
        .unwrap();
    let out = run(
        database
            .fencing()
            .args(["seed", &resource, "--tokens", "mysql"])
            .args(["--mysql-token-table", &format!("{}.tokens", database.name)])
            .args(["--from", &format!("mysql:{}.refund", database.name)]),
        0,
    );
    assert!(out.contains("highest fence 77"), "{out}");
    assert!(out.contains("raised from 40 to 77"), "{out}");
    let r = ResourceName::new(resource.clone()).unwrap();
    assert_eq!(tokens.current(&r).await.unwrap(), Some(token(77)));
    let out = run(
        database.fencing().args([
            "seed",
            &resource,
            "--tokens",
            "mysql",
            "--from",
            "mysql:refund",
        ]),
        2,
    );
    assert!(out.contains("DATABASE.TABLE"), "{out}");
    database.drop().await;
}

/// The probe passes a fenced MySQL table and names one without a fence column and one whose
/// trigger resets the fence (a stale token accepted).
#[tokio::test]
async fn probe_passes_a_fenced_mysql_table_and_names_the_ones_that_are_not() {
    use fencing_mysql::MySqlTable;

    let database = MySqlDatabase::new().await;
    MySqlTable::new(&database.name, "good")
        .unwrap()
        .create_if_missing(&database.pool)
        .await
        .unwrap();
    database
        .execute(
            "CREATE TABLE dropped (id VARBINARY(100) PRIMARY KEY, state VARCHAR(64)); \
             CREATE TABLE reset (id VARBINARY(100) PRIMARY KEY, fence BIGINT NOT NULL \
             DEFAULT 0, state VARCHAR(64)); \
             CREATE TRIGGER reset_insert BEFORE INSERT ON reset FOR EACH ROW SET NEW.fence = 0; \
             CREATE TRIGGER reset_update BEFORE UPDATE ON reset FOR EACH ROW SET NEW.fence = 0"
                .to_owned(),
        )
        .await;
    let spec = |table: &str| format!("mysql:{}.{table}", database.name);
    let out = run(database.fencing().arg("probe").arg(spec("good")), 0);
    assert_eq!(out.matches("ok ").count(), 1, "{out}");
    let out = run(
        database.fencing().args(["probe", "--json"]).args([
            spec("good"),
            spec("dropped"),
            spec("reset"),
        ]),
        1,
    );
    let report = json(&out);
    let stores = report["stores"].as_array().unwrap();
    assert_eq!(stores[0]["passed"], true, "{out}");
    assert_eq!(stores[1]["passed"], false, "{out}");
    assert!(
        stores[1]["error"]
            .as_str()
            .unwrap()
            .contains("no fence column"),
        "{out}"
    );
    assert_eq!(stores[2]["passed"], false, "{out}");
    assert!(
        stores[2]["detail"]
            .as_str()
            .unwrap()
            .contains("ACCEPTED stale token"),
        "{out}"
    );
    database.drop().await;
}

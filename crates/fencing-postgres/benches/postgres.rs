//! Fenced writes against unfenced ones on the same PostgreSQL server, in the same run.
//!
//! ```text
//! cargo bench -p fencing-postgres --bench postgres
//! ```
//!
//! Each round times every variant once, in rotating order, over the same 1,200 rows on one
//! connection; the medians of the rounds are reported with their ratio to the unfenced
//! baseline. Nothing here asserts a time: the figures go to docs/benchmarks.md. With
//! `PgTokenSource::next` is measured against the plain counter upsert, token by token. The
//! single writes and the settlements run again on a PostgreSQL 15 and a PostgreSQL 18 of the
//! run's own (the 18 that `scripts/setup` installs), side by side. With
//! `--features fencing-core/metrics` the instrumented variants also record counters (to no
//! recorder, as in an application that installed none).

use std::time::{Duration, Instant};

use fencing_core::{
    BoxError, Fence, FenceCheck, FencedStore, FencedWrite, FencingToken, Lifecycle,
    MemoryTokenSource, Record, RecordKey, ResourceName, SideEffect, State, TokenSource,
    async_trait,
};
use fencing_postgres::{PgIdent, PgStore, PgTable, push_fence_condition};
use fencing_test_support::bench;
use fencing_test_support::services::{LocalPostgres, PgRelease};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool, Postgres, QueryBuilder};

const ROWS: usize = 1200;
const ROUNDS: usize = 9;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = fencing_test_support::services::postgres_url();
    let bench = Bench::on(&url).await;
    println!(
        "PostgreSQL at {url}, {ROWS} rows, {ROUNDS} rounds, one connection, median per round\n"
    );
    bench.updates().await;
    let settlements = bench
        .compare(&[
            "settlement, row-by-row claims",
            "settlement, batch claim (write_together)",
        ])
        .await;
    bench::report(&settlements, ROWS, "row");
    println!();
    bench.pipelined().await;
    tokens(&bench.pool, &bench.schema).await;
    println!();
    let observed = bench
        .compare(&[
            "Fence::write (claim), no subscriber",
            "Fence::write (claim), every event formatted to a discarding subscriber",
        ])
        .await;
    bench::report(&observed, ROWS, "row");
    bench.drop_schema().await;

    // PostgreSQL 18 answers a plain UPDATE with the row as it was (`RETURNING OLD`), which
    // PgStore uses from 18 on; 15 needs a locked sub-select. Both on servers of this run's
    // own with the same settings, one after the other.
    for release in [PgRelease::V15, PgRelease::V18] {
        let server = LocalPostgres::primary_of(release);
        let bench = Bench::on(&server.url("test")).await;
        let version: String = sqlx::query_scalar("SHOW server_version")
            .fetch_one(&bench.pool)
            .await
            .unwrap();
        println!("\nPostgreSQL {version}, a server of this run's own (fsync off):\n");
        bench.updates().await;
        bench.pipelined().await;
        bench.drop_schema().await;
    }
}

/// A token source that has issued `token` for the settlement's resource.
async fn issued(token: FencingToken) -> (MemoryTokenSource, ResourceName) {
    let source = MemoryTokenSource::new();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    source.advance_to(&resource, token).await.unwrap();
    (source, resource)
}

#[derive(Clone)]
struct Bench {
    pool: PgPool,
    schema: String,
    store: PgStore,
    keys: Vec<RecordKey>,
    lifecycle: Lifecycle,
    gateway: Gateway,
}

/// An in-process payment gateway: every refund takes `latency` and nothing is ever found
/// by lookup (no record is in flight when a round starts).
#[derive(Clone)]
struct Gateway {
    latency: Duration,
}

#[async_trait]
impl SideEffect for Gateway {
    type Receipt = ();

    async fn lookup(&self, _: &RecordKey) -> Result<Option<()>, BoxError> {
        Ok(None)
    }

    async fn perform(&self, _: &RecordKey, _: &Record) -> Result<(), BoxError> {
        if !self.latency.is_zero() {
            tokio::time::sleep(self.latency).await;
        }
        Ok(())
    }
}

/// `PgTokenSource::next` (its row bound to the server history, read in the same statement)
/// against the plain counter upsert it was before, alternating token by token, the ratio
/// paired by round.
async fn tokens(pool: &sqlx::PgPool, schema: &str) {
    let table = fencing_postgres::PgQualifiedName::new(schema, "tokens").unwrap();
    let source = fencing_postgres::PgTokenSource::new(pool.clone(), table);
    source.create_if_missing().await.unwrap();
    let plain = format!(
        "CREATE TABLE \"{schema}\".plain_tokens (resource TEXT PRIMARY KEY, value BIGINT NOT NULL)"
    );
    sqlx::raw_sql(AssertSqlSafe(plain))
        .execute(pool)
        .await
        .unwrap();
    let upsert = format!(
        "INSERT INTO \"{schema}\".plain_tokens AS t (resource, value) VALUES ($1, 1) \
         ON CONFLICT (resource) DO UPDATE SET value = t.value + 1 \
         WHERE t.value < {max} RETURNING value",
        max = i64::MAX
    );
    let variants = [
        "the plain counter upsert",
        "PgTokenSource::next (history bound)",
    ];
    println!("Tokens, alternating token by token ({ROWS} per round, {ROUNDS} rounds):\n");
    let rounds = bench::compare_per_item(&variants, ROUNDS, ROWS, async |variant, round, _| {
        let resource = ResourceName::new(format!("t{round}")).unwrap();
        let start = Instant::now();
        if variant == variants[0] {
            let _: i64 = sqlx::query_scalar(AssertSqlSafe(upsert.as_str()))
                .bind(resource.as_str())
                .fetch_one(pool)
                .await
                .unwrap();
        } else {
            source.next(&resource).await.unwrap();
        }
        start.elapsed()
    })
    .await;
    bench::report_paired_ratios(&rounds);
}

impl Bench {
    /// A schema of its own on the server at `url`, with the refunds table and its pending
    /// rows, on one connection.
    async fn on(url: &str) -> Self {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await
            .expect("connect");
        let schema = fencing_testkit::unique_name("bench").replace('-', "_");
        let table = PgTable::refunds(&schema).unwrap();
        table.create_if_missing(&pool).await.unwrap();
        let store = PgStore::new(pool.clone(), table);
        let keys = bench::pending_records(&store, ROWS).await;
        Bench {
            pool,
            schema,
            store,
            keys,
            lifecycle: Lifecycle::default(),
            gateway: Gateway {
                latency: Duration::ZERO,
            },
        }
    }

    async fn drop_schema(&self) {
        let sql = format!("DROP SCHEMA \"{}\" CASCADE", self.schema);
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&self.pool)
            .await
            .unwrap();
    }

    /// One record's write: a plain `UPDATE`, the same with the fence condition, `PgStore`.
    async fn updates(&self) {
        let updates = self
            .compare(&[
                "plain UPDATE",
                "fenced UPDATE (push_fence_condition)",
                "PgStore::write (claim)",
            ])
            .await;
        bench::report(&updates, ROWS, "row");
        println!();
    }

    /// The settlement row by row and pipelined, with an instant gateway and a 5 ms one.
    async fn pipelined(&self) {
        for latency in [Duration::ZERO, Duration::from_millis(5)] {
            println!("gateway latency {latency:?}:\n");
            let bench = Bench {
                gateway: Gateway { latency },
                ..self.clone()
            };
            let pipelined = bench
                .compare(&[
                    "settlement, row-by-row (Fence::run_effect)",
                    "settlement, pipelined (32 in flight, groups of 32)",
                ])
                .await;
            bench::report(&pipelined, ROWS, "refund");
            println!();
        }
    }

    /// Times each named variant once per round, rotating which goes first.
    async fn compare(&self, variants: &[&'static str]) -> Vec<(&'static str, Duration)> {
        bench::compare(variants, ROUNDS, async |variant, round| {
            self.reset().await;
            let token = FencingToken::new(round as u64 + 2).unwrap();
            let start = Instant::now();
            self.run(variant, token).await;
            start.elapsed()
        })
        .await
    }

    /// A claim of every row through a `Fence` (so with its events and, with the `metrics`
    /// feature, its counters).
    async fn fenced_claims(&self, token: FencingToken) {
        let (source, resource) = issued(token).await;
        let fence = Fence::new(&resource, token, &source);
        let claim = self.lifecycle.claim();
        for k in &self.keys {
            fence.write(&self.store, k, &claim).await.unwrap();
        }
    }

    async fn reset(&self) {
        let sql = format!(
            "UPDATE \"{}\".refund SET state = 'pending', fence = 0",
            self.schema
        );
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&self.pool)
            .await
            .unwrap();
    }

    async fn run(&self, variant: &str, token: FencingToken) {
        let sending = self.lifecycle.in_flight().clone();
        match variant {
            "plain UPDATE" => {
                let sql = format!(
                    "UPDATE \"{}\".refund SET state = $2 WHERE id = $1",
                    self.schema
                );
                for k in &self.keys {
                    let done = sqlx::query(AssertSqlSafe(sql.as_str()))
                        .bind(k.as_str())
                        .bind(sending.as_str())
                        .execute(&self.pool)
                        .await
                        .unwrap();
                    assert_eq!(done.rows_affected(), 1);
                }
            }
            "fenced UPDATE (push_fence_condition)" => {
                let fence = PgIdent::new("fence").unwrap();
                for k in &self.keys {
                    let mut q: QueryBuilder<Postgres> = QueryBuilder::new(format!(
                        "UPDATE \"{}\".refund SET state = ",
                        self.schema
                    ));
                    q.push_bind(sending.as_str())
                        .push(", fence = ")
                        .push_bind(token.as_i64());
                    q.push(" WHERE id = ").push_bind(k.as_str());
                    push_fence_condition(&mut q, &fence, FenceCheck::Claim, token);
                    let done = q.build().execute(&self.pool).await.unwrap();
                    assert_eq!(done.rows_affected(), 1);
                }
            }
            "PgStore::write (claim)" => {
                let claim = FencedWrite::claim().set_state(State::clone(&sending));
                for k in &self.keys {
                    self.store.write(k, token, &claim).await.unwrap();
                }
            }
            "Fence::write (claim), no subscriber" => self.fenced_claims(token).await,
            "Fence::write (claim), every event formatted to a discarding subscriber" => {
                let discard = tracing_subscriber::fmt()
                    .with_max_level(tracing::Level::TRACE)
                    .with_writer(std::io::sink)
                    .finish();
                let _default = tracing::subscriber::set_default(discard);
                self.fenced_claims(token).await;
            }
            "settlement, row-by-row claims" => {
                for k in &self.keys {
                    self.store
                        .write(k, token, &self.lifecycle.claim())
                        .await
                        .unwrap();
                    self.store
                        .write(k, token, &self.lifecycle.confirm())
                        .await
                        .unwrap();
                }
            }
            "settlement, row-by-row (Fence::run_effect)" => {
                let (source, resource) = issued(token).await;
                let fence = Fence::new(&resource, token, &source);
                for k in &self.keys {
                    fence
                        .run_effect(&self.store, k, &self.lifecycle, &self.gateway)
                        .await
                        .unwrap();
                }
            }
            "settlement, pipelined (32 in flight, groups of 32)" => {
                let (source, resource) = issued(token).await;
                let fence = Fence::new(&resource, token, &source);
                let settled = fence
                    .pipeline(&self.store, &self.lifecycle, &self.gateway)
                    .concurrency(32)
                    .group_size(32)
                    .run(self.keys.iter().cloned())
                    .await;
                assert_eq!(settled.into_result().unwrap().len(), ROWS);
            }
            "settlement, batch claim (write_together)" => {
                let (source, resource) = issued(token).await;
                let fence = Fence::new(&resource, token, &source);
                let claimed = self
                    .store
                    .write_together(&fence, &self.keys, &self.lifecycle.claim())
                    .await
                    .unwrap();
                assert_eq!(claimed.written.len(), ROWS);
                for written in &claimed.written {
                    self.store
                        .write(&written.record.key, token, &self.lifecycle.confirm())
                        .await
                        .unwrap();
                }
            }
            other => unreachable!("no variant {other}"),
        }
    }
}

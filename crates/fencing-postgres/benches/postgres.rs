//! Fenced writes against unfenced ones on the same PostgreSQL server, in the same run.
//!
//! ```text
//! cargo bench -p fencing-postgres --bench postgres
//! ```
//!
//! Each round times every variant once, in rotating order, over the same 1,200 rows on one
//! connection; the medians of the rounds are reported with their ratio to the unfenced
//! baseline. Nothing here asserts a time: the figures go to docs/benchmarks.md. With
//! `PgTokenSource::next` is measured against the plain counter upsert, token by token. With
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
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool, Postgres, QueryBuilder};

const ROWS: usize = 1200;
const ROUNDS: usize = 9;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = fencing_test_support::services::postgres_url();
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .expect("connect");
    let schema = fencing_testkit::unique_name("bench").replace('-', "_");
    let table = PgTable::refunds(&schema).unwrap();
    table.create_if_missing(&pool).await.unwrap();
    let store = PgStore::new(pool.clone(), table);
    let keys = bench::pending_records(&store, ROWS).await;
    let lifecycle = Lifecycle::default();
    let bench = Bench {
        pool: pool.clone(),
        schema: schema.clone(),
        store,
        keys,
        lifecycle,
        gateway: Gateway {
            latency: Duration::ZERO,
        },
    };

    println!(
        "PostgreSQL at {url}, {ROWS} rows, {ROUNDS} rounds, one connection, median per round\n"
    );
    let updates = bench
        .compare(&[
            "plain UPDATE",
            "fenced UPDATE (push_fence_condition)",
            "PgStore::write (claim)",
        ])
        .await;
    bench::report(&updates, ROWS, "row");
    println!();
    let settlements = bench
        .compare(&[
            "settlement, row-by-row claims",
            "settlement, batch claim (write_together)",
        ])
        .await;
    bench::report(&settlements, ROWS, "row");
    println!();
    for latency in [Duration::ZERO, Duration::from_millis(5)] {
        println!("gateway latency {latency:?}:\n");
        let bench = Bench {
            gateway: Gateway { latency },
            ..bench.clone()
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
    tokens(&pool, &schema).await;
    println!();
    let observed = bench
        .compare(&[
            "Fence::write (claim), no subscriber",
            "Fence::write (claim), every event formatted to a discarding subscriber",
        ])
        .await;
    bench::report(&observed, ROWS, "row");

    sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA \"{schema}\" CASCADE")))
        .execute(&pool)
        .await
        .unwrap();
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

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

use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    FenceCheck, FencedWrite, FencingToken, Holder, Lifecycle, MemoryTokenSource, RecordKey,
    ResourceName, State, TokenSource,
};
use fencing_postgres::{PgIdent, PgStore, PgTable, push_fence_condition};
use fencing_test_support::bench::{self, Gateway, LATENCIES};
use fencing_test_support::services::{LocalPostgres, PgRelease};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool, Postgres, QueryBuilder};

const ROWS: usize = 1200;
const ROUNDS: usize = 9;
const PIPELINED: &str = "settlement, pipelined (32 in flight, groups of 32)";

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
            "Holder::write (claim), no subscriber",
            "Holder::write (claim), every event formatted to a discarding subscriber",
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
        let pipelined = bench.pipelined().await;
        bench.limit(&server, &pipelined).await;
        bench.drop_schema().await;
    }
}

/// The statements a server's log shows executed (`log_min_duration_statement = 0`), each
/// with the parameters its `DETAIL` line gives written in as literals; the bench's own
/// `SET`/`RESET` of that setting left out.
fn logged_statements(log: &str) -> Vec<String> {
    let mut statements: Vec<String> = Vec::new();
    let mut awaiting_parameters = false;
    for line in log.lines() {
        let executed = line
            .split_once(" execute ")
            .and_then(|(_, named)| named.split_once(": "))
            .map(|(_, sql)| sql)
            .or_else(|| line.split_once("  statement: ").map(|(_, sql)| sql));
        if let Some(sql) = executed {
            awaiting_parameters = true;
            if !sql.contains("log_min_duration_statement") {
                statements.push(sql.to_owned());
            }
        } else if let Some((_, parameters)) = line
            .split_once("DETAIL:  Parameters: ")
            // PostgreSQL 15 writes the word in lower case.
            .or_else(|| line.split_once("DETAIL:  parameters: "))
        {
            if std::mem::take(&mut awaiting_parameters) {
                let last = statements
                    .last_mut()
                    .expect("parameters follow a statement");
                let mut values = logged_parameters(parameters);
                // From the highest number down, so $1 never replaces the start of $12.
                values.sort_by_key(|(number, _)| std::cmp::Reverse(*number));
                for (number, literal) in values {
                    *last = last.replace(&format!("${number}"), &literal);
                }
            }
        } else {
            awaiting_parameters = false;
        }
    }
    statements
}

/// `$1 = 'a''b', $2 = NULL` as `[(1, "'a''b'"), (2, "NULL")]`.
fn logged_parameters(mut text: &str) -> Vec<(usize, String)> {
    let mut values = Vec::new();
    while let Some(rest) = text.strip_prefix('$') {
        let (number, rest) = rest.split_once(" = ").expect("$n = value");
        let number: usize = number.parse().expect("a parameter number");
        let (literal, rest) = if let Some(rest) = rest.strip_prefix("NULL") {
            ("NULL".to_owned(), rest)
        } else {
            let body = &rest[1..];
            let mut end = 0;
            let bytes = body.as_bytes();
            loop {
                let quote = end + body[end..].find('\'').expect("a closing quote");
                if bytes.get(quote + 1) == Some(&b'\'') {
                    end = quote + 2;
                } else {
                    end = quote;
                    break;
                }
            }
            (format!("'{}'", &body[..end]), &body[end + 1..])
        };
        values.push((number, literal));
        text = rest.trim_start_matches(", ");
    }
    values
}

/// The mean latency of each command, in milliseconds, from `pgbench -r`'s report.
fn command_latencies(report: &str) -> Vec<f64> {
    report
        .lines()
        .skip_while(|line| !line.starts_with("statement latencies"))
        .skip(1)
        .filter_map(|line| line.split_whitespace().next()?.parse().ok())
        .collect()
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
        let table = PgTable::new(&schema, "refund")
            .and_then(|t| t.with_payload_column("payload"))
            .unwrap();
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

    /// The settlement row by row and pipelined, with an instant gateway and a 5 ms one; the
    /// pipelined run's median at each latency.
    async fn pipelined(&self) -> Vec<(Duration, Duration)> {
        let mut medians = Vec::new();
        for latency in LATENCIES {
            println!("gateway latency {latency:?}:\n");
            let bench = Bench {
                gateway: Gateway { latency },
                ..self.clone()
            };
            let pipelined = bench
                .compare(&["settlement, row-by-row (Holder::run_effect)", PIPELINED])
                .await;
            bench::report(&pipelined, ROWS, "refund");
            println!();
            medians.push((latency, pipelined[1].1));
        }
        medians
    }

    /// The pipelined settlement against the store's own limit on `server`: the statements
    /// one pipelined run sent (read back from the server's log) replayed by `pgbench` with
    /// nothing around them, and, with the slow gateway, its refunds in waves of 32 at its
    /// latency.
    async fn limit(&self, server: &LocalPostgres, pipelined: &[(Duration, Duration)]) {
        let sent = self.statements_of_one_pipelined_run(server).await;
        let reset = format!(
            "UPDATE \"{}\".refund SET state = 'pending', fence = 0;",
            self.schema
        );
        let script = std::iter::once(reset)
            .chain(sent.iter().map(|sql| format!("{sql};")))
            .collect::<Vec<_>>()
            .join("\n");
        let file = std::env::temp_dir().join(format!("{}.pgbench", self.schema));
        std::fs::write(&file, script).unwrap();
        let out = std::process::Command::new(server.release().bin().join("pgbench"))
            .args(["-h", "127.0.0.1", "-p", &server.port().to_string()])
            .args(["-U", "postgres", "-n", "-M", "prepared", "-r"])
            .args(["-t", &ROUNDS.to_string(), "-f"])
            .arg(&file)
            .arg("test")
            .output()
            .expect("pgbench");
        let _ = std::fs::remove_file(&file);
        let report = String::from_utf8_lossy(&out.stdout);
        // Every command's mean latency but the reset's, which opens each transaction.
        let per_command = command_latencies(&report);
        if !out.status.success() || per_command.len() != sent.len() + 1 {
            // Reported, not fatal: the figures after it still run.
            println!(
                "The store's own limit: NOT MEASURED, pgbench answered:\n{report}{}\n",
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let store_time = Duration::from_secs_f64(per_command[1..].iter().sum::<f64>() / 1000.0);
        println!(
            "The store's own limit ({} statements of one pipelined run, pgbench, mean of {ROUNDS}):\n",
            sent.len()
        );
        for (latency, median) in pipelined {
            let waves = ROWS.div_ceil(32) as u32;
            let limit = store_time.max(*latency * waves);
            println!(
                "  gateway {latency:?}: limit {limit:>10.3?}, pipelined {median:>10.3?}: {:.3}x the limit",
                median.as_secs_f64() / limit.as_secs_f64()
            );
        }
        println!();
    }

    /// The statements one pipelined settlement (instant gateway) sends, with their
    /// parameters written in, as the server logged them.
    async fn statements_of_one_pipelined_run(&self, server: &LocalPostgres) -> Vec<String> {
        self.reset().await;
        let mut connection = self.pool.acquire().await.unwrap();
        sqlx::raw_sql("SET log_min_duration_statement = 0")
            .execute(&mut *connection)
            .await
            .unwrap();
        drop(connection);
        let logged_before = std::fs::metadata(server.log()).unwrap().len() as usize;
        self.run(PIPELINED, FencingToken::new(ROUNDS as u64 + 2).unwrap())
            .await;
        let mut connection = self.pool.acquire().await.unwrap();
        sqlx::raw_sql("RESET log_min_duration_statement")
            .execute(&mut *connection)
            .await
            .unwrap();
        let log = std::fs::read_to_string(server.log()).unwrap();
        logged_statements(&log[logged_before..])
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

    /// A claim of every row through a `Holder` (so with its events and, with the `metrics`
    /// feature, its counters).
    async fn fenced_claims(&self, token: FencingToken) {
        let (source, resource) = issued(token).await;
        let holder = Holder::new(&resource, token, &source);
        let claim = self.lifecycle.claim();
        for k in &self.keys {
            holder.write(&self.store, k, &claim).await.unwrap();
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
                let (source, resource) = issued(token).await;
                let holder = Holder::new(&resource, token, &source);
                for k in &self.keys {
                    let mut q: QueryBuilder<Postgres> = QueryBuilder::new(format!(
                        "UPDATE \"{}\".refund SET state = ",
                        self.schema
                    ));
                    q.push_bind(sending.as_str())
                        .push(", fence = ")
                        .push_bind(token.as_i64());
                    q.push(" WHERE id = ").push_bind(k.as_str());
                    push_fence_condition(&mut q, &fence, FenceCheck::Claim, &holder);
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
            "Holder::write (claim), no subscriber" => self.fenced_claims(token).await,
            "Holder::write (claim), every event formatted to a discarding subscriber" => {
                let discard = tracing_subscriber::fmt()
                    .with_max_level(tracing::Level::TRACE)
                    .with_writer(std::io::sink)
                    .finish();
                let _default = tracing::subscriber::set_default(discard);
                self.fenced_claims(token).await;
            }
            settlement => self.settle(settlement, token).await,
        }
    }

    /// The settlement variants: every refund claimed and confirmed, one way or another.
    async fn settle(&self, variant: &str, token: FencingToken) {
        match variant {
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
            "settlement, row-by-row (Holder::run_effect)" => {
                let (source, resource) = issued(token).await;
                let holder = Holder::new(&resource, token, &source);
                for k in &self.keys {
                    holder
                        .run_effect(&self.store, k, &self.lifecycle, &self.gateway)
                        .await
                        .unwrap();
                }
            }
            PIPELINED => {
                let (source, resource) = issued(token).await;
                let holder = Holder::new(&resource, token, &source);
                let settled = holder
                    .pipeline(&self.store, &self.lifecycle, &self.gateway)
                    .concurrency(32)
                    .group_size(32)
                    .run(self.keys.iter().cloned())
                    .await;
                assert_eq!(settled.into_result().unwrap().len(), ROWS);
            }
            "settlement, batch claim (write_together)" => {
                let (source, resource) = issued(token).await;
                let holder = Holder::new(&resource, token, &source);
                let claimed = self
                    .store
                    .write_together(&holder, &self.keys, &self.lifecycle.claim())
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

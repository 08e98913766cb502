//! Fenced writes and tokens against unfenced ones on the same MySQL or MariaDB server, in the
//! same run.
//!
//! ```text
//! cargo bench -p fencing-mysql --bench mysql
//! ```
//!
//! Every variant handles every item of a round in turn (rotating which goes first), over the
//! same 1,200 rows on one connection; each variant's total per round is paired with the
//! baseline's of the same round. Nothing here asserts a time: the figures go to
//! docs/benchmarks.md.

use std::time::{Duration, Instant};

use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{FencingToken, Holder, Lifecycle, ResourceName, TokenSource};
use fencing_mysql::{MySqlQualifiedName, MySqlStore, MySqlTable, MySqlTokenSource};
use fencing_test_support::bench::{self, Gateway, LATENCIES};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, MySqlPool};

const ROWS: usize = 1200;
const ROUNDS: usize = 7;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = fencing_test_support::services::mysql_url();
    let options: MySqlConnectOptions = url.parse().unwrap();
    let database = format!("fencing_bench_{}", std::process::id());
    let admin = MySqlPool::connect_with(options.clone()).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE `{database}`")))
        .execute(&admin)
        .await
        .unwrap();
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .connect_with(options.database(&database))
        .await
        .unwrap();
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&pool)
        .await
        .unwrap();
    println!("{version} at {url}, {ROWS} rows, {ROUNDS} rounds, one connection\n");
    writes(&pool, &database).await;
    println!();
    tokens(&pool, &database).await;
    println!();
    settlement(&pool, &database).await;
    sqlx::raw_sql(AssertSqlSafe(format!("DROP DATABASE `{database}`")))
        .execute(&admin)
        .await
        .unwrap();
}

/// A claim of one pending row, three ways: a plain autocommitted `UPDATE`, the same with the
/// fenced condition, and `MySqlStore::write`.
async fn writes(pool: &MySqlPool, database: &str) {
    let table = MySqlTable::new(database, "refund").unwrap();
    table.create_if_missing(pool).await.unwrap();
    let store = MySqlStore::new(pool.clone(), table);
    let keys = bench::pending_records(&store, ROWS).await;
    let claim = Lifecycle::default().claim();
    let name = format!("`{database}`.`refund`");
    let plain = format!("UPDATE {name} SET fence = ?, state = 'sending' WHERE id = ?");
    let fenced = format!(
        "UPDATE {name} SET fence = ?, state = 'sending' WHERE id = ? AND fence <= ? \
         AND state IN ('pending', 'sending')"
    );
    let variants = [
        "plain autocommitted UPDATE",
        "UPDATE with the fenced condition",
        "MySqlStore::write (claim)",
    ];
    let times = bench::compare_per_item(&variants, ROUNDS, ROWS, async |variant, round, item| {
        let token = FencingToken::new(round as u64 + 2).unwrap();
        let key = &keys[item];
        let started = Instant::now();
        match variant {
            "plain autocommitted UPDATE" => {
                sqlx::query(AssertSqlSafe(plain.clone()))
                    .bind(token.as_i64())
                    .bind(key.as_str())
                    .execute(pool)
                    .await
                    .unwrap();
            }
            "UPDATE with the fenced condition" => {
                let done = sqlx::query(AssertSqlSafe(fenced.clone()))
                    .bind(token.as_i64())
                    .bind(key.as_str())
                    .bind(token.as_i64())
                    .execute(pool)
                    .await
                    .unwrap();
                assert_eq!(done.rows_affected(), 1);
            }
            _ => {
                store.write(key, token, &claim).await.unwrap();
            }
        }
        started.elapsed()
    })
    .await;
    report(&times);
}

/// A token, two ways: the bare one-statement counter and `MySqlTokenSource::next`.
async fn tokens(pool: &MySqlPool, database: &str) {
    let source = MySqlTokenSource::new(
        pool.clone(),
        MySqlQualifiedName::new(database, "tokens").unwrap(),
    );
    source.create_if_missing().await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE `{database}`.bare (resource VARBINARY(200) PRIMARY KEY, value BIGINT NOT NULL)"
    )))
    .execute(pool)
    .await
    .unwrap();
    let resources: Vec<ResourceName> = (0..ROWS)
        .map(|n| ResourceName::new(format!("settle:m_{n:04}")).unwrap())
        .collect();
    for r in &resources {
        source.next(r).await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO `{database}`.bare VALUES (?, 1)"
        )))
        .bind(r.as_str())
        .execute(pool)
        .await
        .unwrap();
    }
    let bare = format!(
        "UPDATE `{database}`.bare SET value = LAST_INSERT_ID(value + 1) WHERE resource = ?"
    );
    let variants = [
        "bare UPDATE … LAST_INSERT_ID(value + 1)",
        "MySqlTokenSource::next",
    ];
    let times = bench::compare_per_item(&variants, ROUNDS, ROWS, async |variant, _, item| {
        let r = &resources[item];
        let started = Instant::now();
        if variant == variants[0] {
            sqlx::query(AssertSqlSafe(bare.clone()))
                .bind(r.as_str())
                .execute(pool)
                .await
                .unwrap();
        } else {
            source.next(r).await.unwrap();
        }
        started.elapsed()
    })
    .await;
    report(&times);
}

const PIPELINED: &str = "settlement, pipelined (32 in flight, groups of 32)";
const ROW_BY_ROW: &str = "settlement, row-by-row (Holder::run_effect)";

/// The whole settlement of 1,200 refunds, every write fenced, row by row and pipelined, with
/// an in-process gateway of no latency and of 5 ms a call; the rows put back to pending
/// before each run.
async fn settlement(pool: &MySqlPool, database: &str) {
    let table = MySqlTable::new(database, "settle").unwrap();
    table.create_if_missing(pool).await.unwrap();
    let store = MySqlStore::new(pool.clone(), table);
    let keys = bench::pending_records(&store, ROWS).await;
    let lifecycle = Lifecycle::default();
    let reset = format!("UPDATE `{database}`.`settle` SET state = 'pending', fence = 0");
    for latency in LATENCIES {
        println!("gateway latency {latency:?}:\n");
        let gateway = Gateway { latency };
        let variants = [ROW_BY_ROW, PIPELINED];
        let medians = bench::compare(&variants, ROUNDS, async |variant, round| {
            sqlx::raw_sql(AssertSqlSafe(reset.clone()))
                .execute(pool)
                .await
                .unwrap();
            let token = FencingToken::new(round as u64 + 2).unwrap();
            let (source, resource) = fencing_testkit::issued_up_to(token.get()).await;
            let holder = Holder::new(&resource, token, &source);
            let started = Instant::now();
            if variant == ROW_BY_ROW {
                for key in &keys {
                    holder
                        .run_effect(&store, key, &lifecycle, &gateway)
                        .await
                        .unwrap();
                }
            } else {
                let settled = holder
                    .pipeline(&store, &lifecycle, &gateway)
                    .concurrency(32)
                    .group_size(32)
                    .run(keys.iter().cloned())
                    .await;
                assert_eq!(settled.into_result().unwrap().len(), ROWS);
            }
            started.elapsed()
        })
        .await;
        bench::report(&medians, ROWS, "refund");
        println!(
            "pipelined / row by row: {:.3}x\n",
            medians[1].1.as_secs_f64() / medians[0].1.as_secs_f64()
        );
    }
}

/// The medians per operation and the paired ratios to the first variant.
fn report(times: &[(&'static str, Vec<Duration>)]) {
    bench::report(&bench::medians(times), ROWS, "operation");
    println!();
    bench::report_paired_ratios(times);
}

//! Faults against a real MariaDB: the worker's connection killed between a claim and its
//! confirm, the server restarted mid-batch, and the worked example's settlement with the
//! refunds in MariaDB and a real pause past a real TTL.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Database;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    BoxError, EffectOutcome, FenceCheck, FencedStore, FencedWrite, FencingToken, Holder, Lifecycle,
    MemoryLease, MemoryTokenSource, Record, RecordKey, ResourceName, Result, SideEffect,
    TokenSource, async_trait,
};
use fencing_mysql::{MySqlStore, MySqlTable};
use fencing_simulation::settlement::{self, GatewayMode, SettlementConfig, What, refund_key};
use fencing_test_support::services::LocalMariaDb;
use fencing_testkit::Fencing;
use fencing_testkit::faults::RecordingEffect;
use sqlx::mysql::MySqlPoolOptions;

/// What is done to the worker's database during the gateway call for one refund.
enum Fault {
    /// `KILL` the one connection of the worker's pool, from `admin`.
    KillTheConnection {
        admin: sqlx::MySqlPool,
        worker: sqlx::MySqlPool,
    },
    /// Kill the server and start it again.
    Restart(Mutex<LocalMariaDb>),
}

/// The recording gateway, which during the call for one refund does its fault to the worker's
/// database: the worker has claimed that refund, and its confirm comes next.
struct FaultDuring {
    fault: Fault,
    during: RecordKey,
    struck: AtomicUsize,
    gateway: RecordingEffect,
}

impl FaultDuring {
    fn new(fault: Fault) -> Self {
        FaultDuring {
            fault,
            during: refund_key(15),
            struck: AtomicUsize::new(0),
            gateway: RecordingEffect::new(),
        }
    }
}

#[async_trait]
impl SideEffect for FaultDuring {
    type Receipt = u32;
    async fn lookup(&self, key: &RecordKey) -> Result<Option<u32>, BoxError> {
        self.gateway.lookup(key).await
    }
    async fn perform(&self, key: &RecordKey, record: &Record) -> Result<u32, BoxError> {
        if *key == self.during {
            match &self.fault {
                Fault::KillTheConnection { admin, worker } => {
                    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
                        .fetch_one(worker)
                        .await?;
                    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("KILL {id}")))
                        .execute(admin)
                        .await?;
                }
                Fault::Restart(server) => {
                    let mut server = server.lock().unwrap();
                    server.kill();
                    server.start();
                }
            }
            self.struck.fetch_add(1, Ordering::SeqCst);
        }
        self.gateway.perform(key, record).await
    }
}

/// Forty pending refunds in `store`, each then settled by one holder through `gateway`:
/// every refund performed once and confirmed under the holder's token.
async fn settle_forty(store: &MySqlStore, gateway: &FaultDuring) {
    let lifecycle = Lifecycle::default();
    let keys: Vec<_> = (1..=40).map(refund_key).collect();
    let create = FencedWrite::claim().set_state(lifecycle.pending().clone());
    for k in &keys {
        store.write(k, FencingToken::MIN, &create).await.unwrap();
    }
    let source = MemoryTokenSource::new();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let token = source.next(&resource).await.unwrap();
    let holder = Holder::new(&resource, token, &source);
    for k in &keys {
        let outcome = holder
            .run_effect(store, k, &lifecycle, gateway)
            .await
            .unwrap();
        assert!(
            matches!(outcome, EffectOutcome::Performed(_)),
            "{k}: {outcome:?}"
        );
    }
    assert_eq!(gateway.gateway.performed().len(), 40);
    assert_eq!(gateway.gateway.perform_calls(), 40, "nothing sent twice");
    assert_eq!(
        gateway.struck.load(Ordering::SeqCst),
        1,
        "the fault struck once"
    );
    for k in &keys {
        let row = store.read(k).await.unwrap().unwrap();
        assert_eq!(row.state.as_ref(), Some(lifecycle.done()), "{k} lost");
        assert_eq!(row.fence, Some(token));
    }
}

/// The worker's one connection is `KILL`ed by the server while the gateway is called for
/// r_15: its confirm meets a dead connection (a lost answer, sent again on a new one under
/// the same token) and nothing is lost or sent twice.
#[tokio::test]
async fn a_connection_killed_between_a_claim_and_its_confirm_loses_nothing_and_sends_nothing_twice()
{
    let database = Database::new().await;
    let worker_pool = MySqlPoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect(&format!(
            "{}/{}",
            fencing_test_support::services::mysql_url()
                .rsplit_once('/')
                .unwrap()
                .0,
            database.name
        ))
        .await
        .unwrap();
    let store = MySqlStore::new(worker_pool.clone(), database.table.clone());
    let gateway = FaultDuring::new(Fault::KillTheConnection {
        admin: database.pool.clone(),
        worker: worker_pool,
    });
    settle_forty(&store, &gateway).await;
    database.drop_database().await;
}

/// The server is killed and started again while the gateway is called for r_15: the
/// worker's confirm meets a connection the restart cut, is sent again on a new one, and
/// nothing is lost or sent twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_mid_batch_loses_nothing_and_sends_nothing_twice() {
    let server = LocalMariaDb::primary();
    let pool = MySqlPoolOptions::new()
        .max_connections(2)
        .connect(&server.url("test"))
        .await
        .unwrap();
    let table = MySqlTable::new("test", "refund").unwrap();
    table.create_if_missing(&pool).await.unwrap();
    let store = MySqlStore::new(pool, table);
    let gateway = FaultDuring::new(Fault::Restart(Mutex::new(server)));
    settle_forty(&store, &gateway).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worked_example_with_refunds_in_mysql() {
    let database = Database::new().await;
    let mut config = SettlementConfig::worked_example(Fencing::On, GatewayMode::Idempotent);
    // Real time, shortened, as the PostgreSQL twin says: a 20 s lease, A stalls at r_815
    // until B has claimed it, B retries from 0.5 s every 200 ms.
    config.ttl = fencing_core::Ttl::from_secs(20).unwrap();
    config.gateway_latency = Duration::ZERO;
    config.workers[0].pauses[0].length = Duration::ZERO;
    config.workers[0].pauses[0].until_taken_over = true;
    config.workers[1].starts_at = Duration::from_millis(500);
    config.workers[1].retry =
        fencing_core::RetryPolicy::new(200, Duration::from_millis(200), Duration::from_millis(200))
            .unwrap();
    let report = settlement::run_on(
        &config,
        settlement_job::Settle,
        Arc::new(MemoryLease::new()),
        Arc::new(database.store()),
    )
    .await;

    let audit = &report.audit;
    assert_eq!(audit.violations(), Vec::<String>::new(), "{audit:?}");
    assert_eq!(audit.rows_sent, 1200);
    assert_eq!(audit.gateway.refunds_created, 1200);
    assert_eq!(audit.stale_writes_accepted, 0);
    assert_eq!(audit.stale_writes_rejected, 1, "{audit:?}");
    let a_refused = report
        .events
        .iter()
        .find(|e| e.worker == "A" && matches!(&e.what, What::Refused { .. }));
    match a_refused.map(|e| &e.what) {
        Some(What::Refused {
            key,
            check,
            token,
            reason,
            ..
        }) => {
            assert_eq!(*key, refund_key(815));
            assert_eq!(*check, FenceCheck::HolderOnly);
            assert_eq!(token.get(), 33);
            assert!(reason.contains("fence is 34"), "{reason}");
        }
        other => panic!("A's stale confirm must be refused by the row: {other:?}"),
    }
    database.drop_database().await;
}

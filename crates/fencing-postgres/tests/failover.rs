//! Failovers, restores and crashes of PostgreSQL, on servers started here from the machine's
//! PostgreSQL 15: an asynchronous standby promoted after its primary died before the standby
//! received the last increments, a base backup restored after tokens were drawn, and a backend
//! crash that the postmaster survives with `synchronous_commit = off`; each also through the
//! shared suite's guarantee that a counter served from behind never reissues. The counter rows
//! are bound to the server history (timeline and postmaster start) that last wrote them, and
//! the table to the history it was last used on; on another, the next token jumps above every
//! increment the lost history could have made, for a counter the new history holds behind as
//! for one it lacks, so no token is issued twice, by `PgTokenSource`, by `PgLease`, or as an
//! epoch of `PgEpochSource`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::{EpochSource, FencingToken, Lease, ResourceName, TokenSource, Ttl};
use fencing_postgres::{PgEpochSource, PgLease, PgQualifiedName, PgTokenSource};
use fencing_test_support::services::LocalPostgres;
use fencing_testkit::conformance::{
    Capabilities, ServedFromBehind, a_counter_served_from_behind_never_reissues,
    a_lease_served_from_behind_never_reissues, through_failures,
};
use sqlx::PgPool;

fn resource(name: &str) -> ResourceName {
    ResourceName::new(name).unwrap()
}

async fn pool(server: &LocalPostgres) -> PgPool {
    PgPool::connect(&server.url("test")).await.unwrap()
}

fn tokens(pool: &PgPool) -> PgTokenSource {
    PgTokenSource::new(
        pool.clone(),
        PgQualifiedName::new("public", "tokens").unwrap(),
    )
}

fn epochs(pool: &PgPool) -> PgEpochSource {
    PgEpochSource::new(
        pool.clone(),
        PgQualifiedName::new("public", "epochs").unwrap(),
    )
}

fn lease(pool: &PgPool) -> PgLease {
    PgLease::new(
        PgQualifiedName::new("public", "leases").unwrap(),
        tokens(pool),
    )
}

/// Waits until `standby` has replayed every row of `table` the primary has.
fn replayed(primary: &LocalPostgres, standby: &LocalPostgres, table: &str) {
    let sql =
        format!("SELECT string_agg(resource || '=' || value, ',' ORDER BY resource) FROM {table}");
    let wanted = primary.psql("test", &sql);
    for _ in 0..100 {
        if standby.psql("test", &sql) == wanted {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the standby never replayed {table}: {wanted}");
}

/// What each source issued, per source and resource.
type Drawn = BTreeMap<(&'static str, String), BTreeSet<FencingToken>>;

/// One token of each source for resource `name`: a `PgTokenSource` token, a `PgLease` token
/// (acquired and released), and an epoch of `PgEpochSource` for a loss no one named before.
async fn draw(pool: &PgPool, name: &str, drawn: &mut Drawn) -> [FencingToken; 3] {
    let r = resource(name);
    let ttl = Ttl::from_millis(200).unwrap();
    let token = tokens(pool).next(&r).await.unwrap();
    let guard = lease(pool)
        .try_acquire(&r, ttl)
        .await
        .unwrap()
        .expect("free");
    let leased = guard.token();
    // Short, so that a release the standby misses ends on its own after the promotion; on a
    // busy machine it may have ended before the release, which is then refused as lost.
    match lease(pool).release(guard).await {
        Ok(()) | Err(fencing_core::Error::LeaseLost { .. }) => {}
        Err(other) => panic!("releasing {r:?}: {other:?}"),
    }
    let opening = fencing_testkit::unique_name("loss");
    let epoch = epochs(pool).open(&r, &opening).await.unwrap();
    let issued = [token, leased, epoch];
    for (source, token) in ["PgTokenSource", "PgLease", "PgEpochSource"]
        .iter()
        .zip(issued)
    {
        let before = drawn.entry((source, name.to_owned())).or_default();
        assert!(before.insert(token), "{source} {name}: {token} twice");
    }
    issued
}

/// Tokens, lease tokens and epochs drawn on the primary for a resource used before the lag;
/// the standby stopped (it lags); more drawn for it, and for a resource first used now, whose
/// rows the standby never receives; the primary killed; the standby started and promoted.
/// Everything drawn after is above everything drawn before, for the resource whose rows are
/// behind as for the one whose rows are missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_promoted_behind_the_counters_never_reissues_a_token_for_kept_or_missing_rows() {
    let mut primary_server = LocalPostgres::primary();
    let primary = pool(&primary_server).await;
    lease(&primary).create_if_missing().await.unwrap();
    epochs(&primary).create_if_missing().await.unwrap();
    let mut standby = LocalPostgres::standby_of(&primary_server);

    let mut drawn = Drawn::new();
    for _ in 0..3 {
        draw(&primary, "kept", &mut drawn).await;
    }
    replayed(&primary_server, &standby, "tokens");
    replayed(&primary_server, &standby, "epochs");
    standby.kill();
    // Drawn on the primary alone: lost with it.
    for _ in 0..2 {
        draw(&primary, "kept", &mut drawn).await;
        draw(&primary, "missing", &mut drawn).await;
    }
    primary.close().await;
    primary_server.kill();
    standby.start();
    standby.promote();

    let promoted = pool(&standby).await;
    let counters = standby.psql(
        "test",
        "SELECT string_agg(resource || '=' || value, ',' ORDER BY resource) FROM tokens \
         WHERE resource <> ''",
    );
    assert_eq!(
        counters, "kept=6",
        "the standby lost the last increments of `kept` (3 tokens and 3 leases) and never had `missing`"
    );
    for name in ["kept", "missing"] {
        let after = draw(&promoted, name, &mut drawn).await;
        for (source, after) in ["PgTokenSource", "PgLease", "PgEpochSource"]
            .iter()
            .zip(after)
        {
            let before = &drawn[&(*source, name.to_owned())];
            let highest_before = before.iter().filter(|t| **t != after).max().unwrap();
            assert!(
                after > *highest_before,
                "{source} {name}: {after} after the promotion is not above {before:?}"
            );
        }
        // Epochs stay small (the rate bound of 1 a second): a Redis token of this epoch fits.
        assert!(after[2].get() < 1 << 31, "epoch {}", after[2]);
    }
    // Then the counters go on by one again.
    let r = resource("missing");
    let last = tokens(&promoted).current(&r).await.unwrap().unwrap();
    assert_eq!(
        tokens(&promoted).next(&r).await.unwrap().get(),
        last.get() + 1
    );
}

/// How many times `server` has said it is ready to accept connections (once per start and once
/// per crash recovery).
fn times_ready(server: &LocalPostgres) -> usize {
    std::fs::read_to_string(server.log())
        .unwrap_or_default()
        .matches("database system is ready to accept connections")
        .count()
}

/// With `synchronous_commit = off` and the WAL writer asleep for seconds, a backend crash that
/// the postmaster survives (crash recovery, same timeline, same start time) loses the commits
/// not yet flushed. A control insert made after the last token is lost (the test waits until a
/// crash has lost one, so the fault is certain); the tokens are not: each token statement
/// makes its own commit durable, so the counter reads what was issued and goes on above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_with_synchronous_commit_off_loses_no_token() {
    let server = LocalPostgres::primary();
    server.psql("test", "ALTER SYSTEM SET synchronous_commit = off");
    server.psql("test", "ALTER SYSTEM SET wal_writer_delay = '10s'");
    server.psql("test", "SELECT pg_reload_conf()");
    server.psql("test", "CREATE TABLE control (n int)");
    let pool = pool(&server).await;
    lease(&pool).create_if_missing().await.unwrap();
    let r = resource("settle:m_4471");
    let mut issued = BTreeSet::new();
    for crash in 1..=5 {
        for _ in 0..3 {
            let token = through_failures(async || tokens(&pool).next(&r).await).await;
            assert!(issued.insert(token), "{token} issued twice: {issued:?}");
        }
        let highest = *issued.last().unwrap();
        // A commit the crash will lose (the WAL writer wakes every 10 s), then the crash.
        server.psql("test", &format!("INSERT INTO control VALUES ({crash})"));
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .unwrap();
        let started = times_ready(&server);
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        // Recovered: the server says it is ready once more.
        for _ in 0..600 {
            if times_ready(&server) > started {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(times_ready(&server) > started, "no crash recovery");
        let counter = through_failures(async || tokens(&pool).current(&r).await).await;
        assert_eq!(
            counter,
            Some(highest),
            "after crash {crash}, the counter does not read the last token issued"
        );
        let lost = server.psql(
            "test",
            &format!("SELECT count(*) FROM control WHERE n = {crash}"),
        );
        if lost == "0" {
            let next = tokens(&pool).next(&r).await.unwrap();
            assert!(next > highest, "{next} after {highest}");
            return;
        }
    }
    panic!("no crash lost the commit made just before it: the fault never struck");
}

/// The sum of every counter in `tokens`: lower after the event than before it shows the
/// deployment really answers from behind.
fn counted(server: &LocalPostgres) -> i64 {
    server
        .psql(
            "test",
            "SELECT coalesce(sum(value), 0) FROM tokens WHERE resource <> ''",
        )
        .parse()
        .unwrap()
}

/// A primary and its asynchronous standby: the copy is the standby, stopped once it has
/// replayed everything; the event the primary killed and the standby started at the
/// primary's port and promoted.
struct StandbyPromotion {
    primary: LocalPostgres,
    standby: LocalPostgres,
}

#[async_trait]
impl ServedFromBehind for StandbyPromotion {
    async fn keep_a_copy(&mut self) {
        self.standby
            .catch_up_with(&self.primary, Duration::from_secs(30))
            .unwrap();
        self.standby.kill();
    }

    async fn serve_the_copy(&mut self) {
        let before = counted(&self.primary);
        self.primary.kill();
        self.standby.take_over_port_of(&self.primary);
        self.standby.start();
        self.standby.promote();
        assert!(counted(&self.standby) < before, "the standby lags");
    }
}

/// A primary and a base backup: the copy is the backup, taken then; the event the primary
/// killed and the backup started at its port. With `restart_after_the_copy`, the primary is
/// also restarted right after the backup (a crash it recovers from: another history, which
/// raises every counter it finds and issues above), so the backup, restored within the same
/// second, raises the same rows as the restarted primary did and must pass what it issued:
/// three histories in a row.
struct BackupRestore {
    primary: LocalPostgres,
    backup: Option<LocalPostgres>,
    restart_after_the_copy: bool,
}

#[async_trait]
impl ServedFromBehind for BackupRestore {
    async fn keep_a_copy(&mut self) {
        self.backup = Some(LocalPostgres::backup_of(&self.primary));
        if self.restart_after_the_copy {
            self.primary.kill();
            self.primary.start();
        }
    }

    async fn serve_the_copy(&mut self) {
        let before = counted(&self.primary);
        self.primary.kill();
        let backup = self.backup.as_mut().expect("a copy kept");
        backup.take_over_port_of(&self.primary);
        backup.start();
        assert!(counted(backup) < before, "the backup is older");
    }
}

/// A primary of its own with the token, lease and epoch tables, and a pool on it.
async fn prepared() -> (LocalPostgres, PgPool) {
    let server = LocalPostgres::primary();
    let pool = pool(&server).await;
    lease(&pool).create_if_missing().await.unwrap();
    (server, pool)
}

/// The shared guarantee, for `PgTokenSource` and `PgLease`, on a standby promoted behind the
/// counters, on a base backup restored after tokens were drawn, and on one restored after the
/// primary restarted and drew more (three histories in a row).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promoted_standbys_and_restored_backups_serve_no_token_twice_to_the_shared_suite() {
    let caps = Capabilities::real_server();
    let standby_promotion = async || {
        let (primary, pool) = prepared().await;
        let standby = LocalPostgres::standby_of(&primary);
        (StandbyPromotion { primary, standby }, pool)
    };
    let (mut failover, pool) = standby_promotion().await;
    a_counter_served_from_behind_never_reissues(&tokens(&pool), &mut failover).await;
    let (mut failover, pool) = standby_promotion().await;
    a_lease_served_from_behind_never_reissues(&lease(&pool), &mut failover, caps).await;

    let backup_restore = async |restart_after_the_copy| {
        let (primary, pool) = prepared().await;
        let backup = None;
        let deployment = BackupRestore {
            primary,
            backup,
            restart_after_the_copy,
        };
        (deployment, pool)
    };
    for restart_after_the_copy in [false, true] {
        let (mut restore, pool) = backup_restore(restart_after_the_copy).await;
        a_counter_served_from_behind_never_reissues(&tokens(&pool), &mut restore).await;
        let (mut restore, pool) = backup_restore(restart_after_the_copy).await;
        a_lease_served_from_behind_never_reissues(&lease(&pool), &mut restore, caps).await;
    }
}

/// A standby given by mistake issues nothing, and a rate bound out of range is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_issues_nothing_and_a_bad_rate_is_refused() {
    let primary_server = LocalPostgres::primary();
    let primary = pool(&primary_server).await;
    tokens(&primary).create_if_missing().await.unwrap();
    let standby = LocalPostgres::standby_of(&primary_server);
    replayed(&primary_server, &standby, "tokens");
    let on_standby = pool(&standby).await;
    let err = tokens(&on_standby).next(&resource("x")).await.unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    for rate in [0, (1 << 32) + 1] {
        assert!(tokens(&primary).with_max_rate(rate).is_err());
    }
}

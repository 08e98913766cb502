//! Failovers and restores of PostgreSQL, on servers started here from the machine's
//! PostgreSQL 15: an asynchronous standby promoted after its primary died before the standby
//! received the last increments, and a base backup restored after tokens were drawn, each
//! also through the shared suite's guarantee that a counter served from behind never reissues. The
//! counter rows are bound to the server history (timeline and postmaster start) that last
//! wrote them; on another, the next token jumps above every increment the lost history could
//! have made, so no token is issued twice, by `PgTokenSource`, by `PgLease`, or as an epoch
//! of Redis tokens.

use std::collections::BTreeSet;
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::{FencingToken, Lease, ResourceName, TokenSource, Ttl};
use fencing_postgres::{PgLease, PgQualifiedName, PgTokenSource};
use fencing_test_support::services::LocalPostgres;
use fencing_testkit::conformance::{
    Capabilities, ServedFromBehind, a_counter_served_from_behind_never_reissues,
    a_lease_served_from_behind_never_reissues,
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

fn epochs(pool: &PgPool) -> PgTokenSource {
    PgTokenSource::epochs(
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

/// Tokens, lease tokens and epochs drawn on the primary; the standby stopped (it lags); more
/// drawn; the primary killed; the standby started and promoted. Everything drawn after is
/// above everything drawn before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_promoted_behind_the_counters_never_reissues_a_token() {
    let mut primary_server = LocalPostgres::primary();
    let primary = pool(&primary_server).await;
    lease(&primary).create_if_missing().await.unwrap();
    epochs(&primary).create_if_missing().await.unwrap();
    let ttl = Ttl::from_millis(200).unwrap();
    let (r_tokens, r_lease, r_epochs) = (resource("tokens"), resource("lease"), resource("epochs"));
    let mut standby = LocalPostgres::standby_of(&primary_server);

    let mut drawn: [BTreeSet<FencingToken>; 3] = Default::default();
    let draw = async |pool: &PgPool, drawn: &mut [BTreeSet<FencingToken>; 3]| {
        drawn[0].insert(tokens(pool).next(&r_tokens).await.unwrap());
        let guard = lease(pool)
            .try_acquire(&r_lease, ttl)
            .await
            .unwrap()
            .unwrap();
        drawn[1].insert(guard.token());
        lease(pool).release(guard).await.unwrap();
        drawn[2].insert(epochs(pool).next(&r_epochs).await.unwrap());
    };
    for _ in 0..3 {
        draw(&primary, &mut drawn).await;
    }
    replayed(&primary_server, &standby, "tokens");
    replayed(&primary_server, &standby, "epochs");
    standby.kill();
    // Drawn on the primary alone: lost with it.
    for _ in 0..2 {
        draw(&primary, &mut drawn).await;
    }
    primary.close().await;
    primary_server.kill();
    standby.start();
    standby.promote();

    let promoted = pool(&standby).await;
    let lost_counter = standby.psql("test", "SELECT value FROM tokens WHERE resource = 'tokens'");
    assert_eq!(
        lost_counter, "3",
        "the standby lost the last two increments"
    );
    let after = [
        tokens(&promoted).next(&r_tokens).await.unwrap(),
        lease(&promoted)
            .try_acquire(&r_lease, ttl)
            .await
            .unwrap()
            .expect("free")
            .token(),
        epochs(&promoted).next(&r_epochs).await.unwrap(),
    ];
    for (what, (before, after)) in ["PgTokenSource", "PgLease", "epochs"]
        .iter()
        .zip(drawn.iter().zip(after))
    {
        assert!(
            after > *before.last().unwrap(),
            "{what}: {after} after the promotion is not above {before:?}"
        );
    }
    // Epochs stay small (the rate bound of 1 a second): a Redis token of this epoch fits.
    assert!(after[2].get() < 1 << 31, "epoch {}", after[2]);
    // Then the counters go on by one again.
    assert_eq!(
        tokens(&promoted).next(&r_tokens).await.unwrap().get(),
        after[0].get() + 1
    );
}

/// The sum of every counter in `tokens`: lower after the event than before it shows the
/// deployment really answers from behind.
fn counted(server: &LocalPostgres) -> i64 {
    server
        .psql("test", "SELECT coalesce(sum(value), 0) FROM tokens")
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
/// killed and the backup started at its port.
struct BackupRestore {
    primary: LocalPostgres,
    backup: Option<LocalPostgres>,
}

#[async_trait]
impl ServedFromBehind for BackupRestore {
    async fn keep_a_copy(&mut self) {
        self.backup = Some(LocalPostgres::backup_of(&self.primary));
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
/// counters and on a base backup restored after tokens were drawn.
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

    let backup_restore = async || {
        let (primary, pool) = prepared().await;
        let backup = None;
        (BackupRestore { primary, backup }, pool)
    };
    let (mut restore, pool) = backup_restore().await;
    a_counter_served_from_behind_never_reissues(&tokens(&pool), &mut restore).await;
    let (mut restore, pool) = backup_restore().await;
    a_lease_served_from_behind_never_reissues(&lease(&pool), &mut restore, caps).await;
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

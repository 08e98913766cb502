//! Failovers and restores of PostgreSQL, on servers started here from the machine's
//! PostgreSQL 15: an asynchronous standby promoted after its primary died before the standby
//! received the last increments, and a base backup restored after tokens were drawn. The
//! counter rows are bound to the server history (timeline and postmaster start) that last
//! wrote them; on another, the next token jumps above every increment the lost history could
//! have made, so no token is issued twice, by `PgTokenSource`, by `PgLease`, or as an epoch
//! of Redis tokens.

use std::collections::BTreeSet;
use std::time::Duration;

use fencing_core::{FencingToken, Lease, ResourceName, TokenSource, Ttl};
use fencing_postgres::{PgLease, PgQualifiedName, PgTokenSource};
use fencing_test_support::services::LocalPostgres;
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

/// A base backup taken, tokens drawn after it, the primary gone, the backup restored and
/// started as the primary: the next token is above every token drawn before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_base_backup_never_reissues_a_token() {
    let mut primary_server = LocalPostgres::primary();
    let primary = pool(&primary_server).await;
    let source = tokens(&primary);
    source.create_if_missing().await.unwrap();
    let r = resource("restored");
    let mut drawn = BTreeSet::new();
    for _ in 0..3 {
        drawn.insert(source.next(&r).await.unwrap());
    }
    let mut restored = LocalPostgres::backup_of(&primary_server);
    for _ in 0..3 {
        drawn.insert(source.next(&r).await.unwrap());
    }
    primary.close().await;
    primary_server.kill();
    restored.start();
    let pool = pool(&restored).await;
    assert_eq!(
        restored.psql(
            "test",
            "SELECT value FROM tokens WHERE resource = 'restored'"
        ),
        "3",
        "the backup's counter is back"
    );
    let next = tokens(&pool).next(&r).await.unwrap();
    assert!(
        next > *drawn.last().unwrap(),
        "{next} after the restore, {drawn:?} before"
    );
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

//! Failovers and restores of MariaDB, on servers started here from the machine's `mariadbd`
//! behind a relay that clients connect to (the deployment's address): an asynchronous replica
//! promoted after its primary died before the replica applied the last increments (another
//! server id, the same start marker, replicated), and a physical backup restored after tokens
//! were drawn (the same server id, another start). The counter rows are bound to the server
//! history that last wrote them, and the table to the history it was last used on; on
//! another, the next token jumps above every increment the lost history could have made, for
//! a counter the new history holds behind as for one it lacks, so no token is issued twice,
//! by `MySqlTokenSource` or by `MySqlLease`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use async_trait::async_trait;
use fencing_core::{EpochSource, FencingToken, Lease, ResourceName, TokenSource, Ttl};
use fencing_mysql::{MySqlEpochSource, MySqlLease, MySqlQualifiedName, MySqlTokenSource};
use fencing_test_support::relay::Relay;
use fencing_test_support::services::LocalMariaDb;
use fencing_testkit::conformance::{
    Capabilities, ServedFromBehind, a_counter_served_from_behind_never_reissues,
    a_lease_served_from_behind_never_reissues, through_failures,
};
use sqlx::MySqlPool;
use sqlx::mysql::MySqlPoolOptions;

fn resource(name: &str) -> ResourceName {
    ResourceName::new(name).unwrap()
}

/// A pool on the deployment's address.
async fn pool(relay: &Relay) -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&format!("mysql://root@127.0.0.1:{}/test", relay.port()))
        .await
        .unwrap()
}

fn tokens(pool: &MySqlPool) -> MySqlTokenSource {
    MySqlTokenSource::new(
        pool.clone(),
        MySqlQualifiedName::new("test", "tokens").unwrap(),
    )
}

fn epochs(pool: &MySqlPool) -> MySqlEpochSource {
    MySqlEpochSource::new(
        pool.clone(),
        MySqlQualifiedName::new("test", "epochs").unwrap(),
    )
}

fn lease(pool: &MySqlPool) -> MySqlLease {
    MySqlLease::new(
        MySqlQualifiedName::new("test", "leases").unwrap(),
        tokens(pool),
    )
}

/// The sum of every counter: lower after the event than before it shows the deployment
/// really answers from behind.
fn counted(server: &LocalMariaDb) -> i64 {
    server
        .sql(
            "test",
            "SELECT COALESCE(SUM(value), 0) FROM tokens WHERE resource <> ''",
        )
        .parse()
        .unwrap()
}

/// What each source issued, per source and resource.
type Drawn = BTreeMap<(&'static str, String), BTreeSet<FencingToken>>;

/// One token of each source for resource `name`, through failures while the deployment
/// comes back: a `MySqlTokenSource` token, a `MySqlLease` token (acquired and released), and
/// an epoch of `MySqlEpochSource` for a loss no one named before.
async fn draw(pool: &MySqlPool, name: &str, drawn: &mut Drawn) -> [FencingToken; 3] {
    let r = resource(name);
    let token = through_failures(async || tokens(pool).next(&r).await).await;
    let leased = through_failures(async || {
        let lease = lease(pool);
        match lease.try_acquire(&r, Ttl::from_secs(60).unwrap()).await {
            Ok(Some(guard)) => {
                let token = guard.token();
                lease
                    .release(guard)
                    .await
                    .map(|()| token)
                    .map_err(|e| e.to_string())
            }
            Ok(None) => Err(format!("{r} is held")),
            Err(err) => Err(err.to_string()),
        }
    })
    .await;
    let opening = fencing_testkit::unique_name("loss");
    let epoch = through_failures(async || epochs(pool).open(&r, &opening).await).await;
    for (source, token) in [
        ("MySqlTokenSource", token),
        ("MySqlLease", leased),
        ("MySqlEpochSource", epoch),
    ] {
        let issued = drawn.entry((source, name.to_owned())).or_default();
        assert!(issued.insert(token), "{source} {name}: {token} twice");
    }
    [token, leased, epoch]
}

/// Tokens and lease tokens drawn on the primary for a resource used before the lag; the
/// replica stopped applying (it lags); more drawn for it, and for a resource first used now,
/// whose rows the replica never receives; the primary killed; the replica promoted and the
/// deployment's address moved to it. Everything drawn after is above everything drawn
/// before, for the resource whose rows are behind, for the one whose rows are missing, and
/// for one whose rows the replica has up to date; and the counters then go on by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_promoted_behind_the_counters_never_reissues_a_token_for_kept_or_missing_rows() {
    let mut primary = LocalMariaDb::primary();
    let replica = LocalMariaDb::replica_of(&primary);
    let relay = Relay::start(primary.port()).unwrap();
    let deployment = pool(&relay).await;
    lease(&deployment).create_if_missing().await.unwrap();
    epochs(&deployment).create_if_missing().await.unwrap();

    let mut drawn = Drawn::new();
    for _ in 0..3 {
        draw(&deployment, "kept", &mut drawn).await;
        draw(&deployment, "current", &mut drawn).await;
    }
    replica
        .catch_up_with(&primary, Duration::from_secs(30))
        .unwrap();
    replica.stop_replicating();
    // Drawn on the primary alone: lost with it.
    for _ in 0..2 {
        draw(&deployment, "kept", &mut drawn).await;
        draw(&deployment, "missing", &mut drawn).await;
    }
    let before = counted(&primary);
    primary.kill();
    replica.promote();
    relay.move_to(replica.port());
    assert!(counted(&replica) < before, "the replica lags");
    assert_eq!(
        replica.sql(
            "test",
            "SELECT GROUP_CONCAT(CONCAT(resource, '=', value) ORDER BY resource) FROM tokens \
             WHERE resource <> ''"
        ),
        "current=6,kept=6",
        "the replica lost the last increments of `kept` (2 tokens and 2 leases) and never had \
         `missing`"
    );

    for name in ["kept", "missing", "current"] {
        let after = draw(&deployment, name, &mut drawn).await;
        for (source, after) in ["MySqlTokenSource", "MySqlLease", "MySqlEpochSource"]
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
    let r = resource("missing");
    let last = tokens(&deployment).current(&r).await.unwrap().unwrap();
    assert_eq!(
        tokens(&deployment).next(&r).await.unwrap().get(),
        last.get() + 1,
        "then the counter goes on by one"
    );
}

/// A primary and its asynchronous replica behind the deployment's address: the copy is the
/// replica, stopped applying once it has applied everything; the event the primary killed,
/// the replica promoted and the address moved to it.
struct ReplicaPromotion {
    primary: LocalMariaDb,
    replica: LocalMariaDb,
    relay: Relay,
}

#[async_trait]
impl ServedFromBehind for ReplicaPromotion {
    async fn keep_a_copy(&mut self) {
        self.replica
            .catch_up_with(&self.primary, Duration::from_secs(30))
            .unwrap();
        self.replica.stop_replicating();
    }

    async fn serve_the_copy(&mut self) {
        let before = counted(&self.primary);
        self.primary.kill();
        self.replica.promote();
        self.relay.move_to(self.replica.port());
        assert!(counted(&self.replica) < before, "the replica lags");
    }
}

/// A primary and a physical backup of it behind the deployment's address: the copy is the
/// backup, taken then; the event the primary killed and the backup started in its place.
struct BackupRestore {
    primary: LocalMariaDb,
    backup: Option<LocalMariaDb>,
    relay: Relay,
}

#[async_trait]
impl ServedFromBehind for BackupRestore {
    async fn keep_a_copy(&mut self) {
        self.backup = Some(LocalMariaDb::backup_of(&mut self.primary));
    }

    async fn serve_the_copy(&mut self) {
        let before = counted(&self.primary);
        self.primary.kill();
        let backup = self.backup.as_mut().expect("a copy kept");
        backup.start();
        self.relay.move_to(backup.port());
        assert!(counted(backup) < before, "the backup is older");
    }
}

/// A primary of its own behind a relay, with the token and lease tables, and a pool on it.
async fn prepared() -> (LocalMariaDb, Relay, MySqlPool) {
    let primary = LocalMariaDb::primary();
    let relay = Relay::start(primary.port()).unwrap();
    let pool = pool(&relay).await;
    lease(&pool).create_if_missing().await.unwrap();
    (primary, relay, pool)
}

/// The shared guarantee, for `MySqlTokenSource` and `MySqlLease`, on a replica promoted behind
/// the counters and on a physical backup restored after tokens were drawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promoted_replicas_and_restored_backups_serve_no_token_twice_to_the_shared_suite() {
    let caps = Capabilities::real_server();
    let replica_promotion = async || {
        let (primary, relay, pool) = prepared().await;
        let replica = LocalMariaDb::replica_of(&primary);
        let deployment = ReplicaPromotion {
            primary,
            replica,
            relay,
        };
        (deployment, pool)
    };
    let (mut failover, pool) = replica_promotion().await;
    a_counter_served_from_behind_never_reissues(&tokens(&pool), &mut failover).await;
    let (mut failover, pool) = replica_promotion().await;
    a_lease_served_from_behind_never_reissues(&lease(&pool), &mut failover, caps).await;

    let backup_restore = async || {
        let (primary, relay, pool) = prepared().await;
        let deployment = BackupRestore {
            primary,
            backup: None,
            relay,
        };
        (deployment, pool)
    };
    let (mut restore, pool) = backup_restore().await;
    a_counter_served_from_behind_never_reissues(&tokens(&pool), &mut restore).await;
    let (mut restore, pool) = backup_restore().await;
    a_lease_served_from_behind_never_reissues(&lease(&pool), &mut restore, caps).await;
}

/// A replica given by mistake issues nothing (it is read-only), and a rate bound out of
/// range is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_issues_nothing_and_a_bad_rate_is_refused() {
    let (primary, _relay, pool) = prepared().await;
    let replica = LocalMariaDb::replica_of(&primary);
    tokens(&pool).next(&resource("x")).await.unwrap();
    replica
        .catch_up_with(&primary, Duration::from_secs(30))
        .unwrap();
    let on_replica = MySqlPool::connect(&replica.url("test")).await.unwrap();
    let err = tokens(&on_replica).next(&resource("x")).await.unwrap_err();
    assert_eq!(
        err.failure(),
        Some(fencing_core::Failure::Unavailable),
        "{err:?}"
    );
    assert!(err.to_string().contains("read-only"), "{err}");
    for rate in [0, (1 << 32) + 1] {
        assert!(tokens(&pool).with_max_rate(rate).is_err());
    }
}

/// A logical dump of the database, taken after some tokens; more drawn; the dump restored
/// into the same running server (tables dropped, created again, their rows put back, the
/// counters with them); `after_restore` called, as the docs ask: the next tokens are above
/// everything drawn before, for a counter the dump holds behind as for one it lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dump_restored_into_a_running_server_reissues_no_token_once_rebound() {
    let (primary, relay, pool) = prepared().await;
    let source = tokens(&pool);
    let (kept, fresh) = (resource("kept"), resource("missing"));
    let mut issued = BTreeSet::new();
    for _ in 0..2 {
        issued.insert(source.next(&kept).await.unwrap());
    }
    let dump = primary.dump("test");
    for _ in 0..3 {
        issued.insert(source.next(&kept).await.unwrap());
        issued.insert(source.next(&fresh).await.unwrap());
    }
    let before = counted(&primary);
    primary.restore("test", &dump);
    assert!(counted(&primary) < before, "the dump is older");
    source.after_restore().await.unwrap();
    source.after_restore().await.unwrap();
    let highest = *issued.last().unwrap();
    for r in [&kept, &fresh] {
        let first = source.next(r).await.unwrap();
        assert!(
            first > highest,
            "{r}: {first} after the restore, {issued:?} before"
        );
        assert_eq!(source.next(r).await.unwrap().get(), first.get() + 1);
    }
    drop(relay);
}

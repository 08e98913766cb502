//! `MySqlEpochSource` on a real MariaDB: one epoch per loss however many clients name it, at
//! most one a second by the database's clock, floors that only raise, an error past the last
//! epoch, and a lost history restored twice within a second.

mod common;

use std::time::Instant;

use common::Database;
use fencing_core::{EpochSource, Error, FencingToken, ResourceName};
use fencing_testkit::conformance::{
    LOST_EPOCH, an_epoch_source_restored_twice_within_a_second_never_reopens,
};

fn resource(name: &str) -> ResourceName {
    ResourceName::new(name).unwrap()
}

/// Sixteen clients name one loss at once: one epoch for all of them; the next loss, named at
/// once after, waits out the second since the first (by the database's clock) and opens the
/// next epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_loss_opens_one_epoch_and_the_next_a_second_later() {
    let database = Database::new().await;
    let epochs = database.epochs().await;
    let r = resource("settle:m_4471");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (epochs, r) = (epochs.clone(), r.clone());
        tasks.spawn(async move { epochs.open(&r, "loss-1").await.unwrap() });
    }
    let opened: std::collections::BTreeSet<_> = tasks.join_all().await.into_iter().collect();
    assert_eq!(opened.len(), 1, "{opened:?}");
    let first = *opened.first().unwrap();
    let written_at: i64 = sqlx::query_scalar("SELECT written_ms FROM epochs WHERE resource = ?")
        .bind(r.as_str())
        .fetch_one(&database.pool)
        .await
        .unwrap();
    let asked = Instant::now();
    let second = epochs.open(&r, "loss-2").await.unwrap();
    assert_eq!(second.get(), first.get() + 1);
    let second_at: i64 = sqlx::query_scalar("SELECT written_ms FROM epochs WHERE resource = ?")
        .bind(r.as_str())
        .fetch_one(&database.pool)
        .await
        .unwrap();
    assert!(
        second_at - written_at >= 1000,
        "opened {} ms after the first by the database's clock (asked after {:?})",
        second_at - written_at,
        asked.elapsed()
    );
    assert_eq!(
        epochs.open(&r, "loss-2").await.unwrap(),
        second,
        "named again"
    );
    assert_eq!(epochs.current(&r).await.unwrap(), Some(second));
    database.drop_database().await;
}

/// A floor raises the epoch and never lowers it; past the last epoch an opening is refused.
#[tokio::test]
async fn a_floor_only_raises_and_past_the_last_epoch_an_opening_is_refused() {
    let database = Database::new().await;
    let epochs = database.epochs().await;
    let r = resource("settle:m_4471");
    let floor = FencingToken::new(40).unwrap();
    assert_eq!(epochs.advance_to(&r, floor).await.unwrap(), floor);
    let lower = FencingToken::new(7).unwrap();
    assert_eq!(epochs.advance_to(&r, lower).await.unwrap(), floor);
    assert_eq!(epochs.open(&r, "loss-1").await.unwrap().get(), 41);
    epochs.advance_to(&r, FencingToken::MAX).await.unwrap();
    let err = epochs.open(&r, "loss-2").await.unwrap_err();
    assert!(matches!(err, Error::TokenExhausted { .. }), "{err:?}");
    database.drop_database().await;
}

/// A copy of a lost history's rows restored into the running server twice, the second time
/// as soon as the first history handed its epochs out: nothing opened twice (the shared
/// guarantee). Before epochs raised onto a history were held for a second, both histories
/// opened the same epoch of the row the copy kept, and of the one it lacked.
#[tokio::test]
async fn a_lost_history_restored_twice_within_a_second_opens_no_epoch_twice() {
    let database = Database::new().await;
    let epochs = database.epochs().await;
    let pool = database.pool.clone();
    let written_ms: i64 =
        sqlx::query_scalar("SELECT CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)")
            .fetch_one(&pool)
            .await
            .unwrap();
    an_epoch_source_restored_twice_within_a_second_never_reopens(&epochs, async |kept| {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query("DELETE FROM epochs")
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO epochs (resource, value, history, written_ms) \
             VALUES ('', 1, 'lost', ?), (?, ?, 'lost', ?)",
        )
        .bind(written_ms)
        .bind(kept.as_str())
        .bind(LOST_EPOCH as i64)
        .bind(written_ms)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
    })
    .await;
    database.drop_database().await;
}

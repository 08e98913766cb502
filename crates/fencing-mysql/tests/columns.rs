//! Columns of a team's own set with the fence, in the statement that checks it: a payouts
//! table as a payments team has it (text ids, a DECIMAL amount, a DATETIME, a reference).

mod common;

use common::Database;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FencedWrite, FencingToken, FoundFence, Holder, InputKind, Lifecycle, MemoryTokenSource,
    RecordKey, State,
};
use fencing_mysql::{MySqlStore, MySqlTable, MySqlValue, MySqlWrite};
use sqlx::{AssertSqlSafe, Row};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn payout_lifecycle() -> Lifecycle {
    let state = |name| State::new(name).unwrap();
    Lifecycle::new(state("queued"), state("sending"), state("paid")).unwrap()
}

const P1: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";
const P2: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";

/// The payouts table as the team has it (no fence column, no unique index on its ids), and
/// its migration run the way a migration tool runs it, twice.
async fn payouts(database: &Database) -> MySqlStore {
    database
        .execute(format!(
            "CREATE TABLE `{0}`.payouts (id VARCHAR(36) COLLATE utf8mb4_bin NOT NULL, \
             merchant VARCHAR(32), amount DECIMAL(12, 2), status VARCHAR(32) DEFAULT 'queued', \
             paid_at DATETIME(6) NULL, gateway_ref VARCHAR(64) NULL); \
             INSERT INTO `{0}`.payouts (id, merchant, amount) VALUES \
             ('{P1}', 'm_4471', 70.25)",
            database.name
        ))
        .await;
    let table = MySqlTable::new(&database.name, "payouts")
        .unwrap()
        .with_key_column("id")
        .unwrap()
        .with_state_column("status")
        .unwrap();
    for _ in 0..2 {
        database.execute(table.migration_sql()).await;
    }
    MySqlStore::new(database.pool.clone(), table)
}

/// The migration added the fence (existing rows with none), its check and a unique index on
/// the ids, once though it ran twice.
#[tokio::test]
async fn the_migration_fits_the_teams_table_once_however_often_it_runs() {
    let database = Database::new().await;
    let _payouts = payouts(&database).await;
    let count = async |sql: String| -> i64 {
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(&database.name)
            .fetch_one(&database.pool)
            .await
            .unwrap()
    };
    let columns = count(
        "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? \
         AND TABLE_NAME = 'payouts' AND COLUMN_NAME = 'fence'"
            .to_owned(),
    );
    assert_eq!(columns.await, 1);
    let unique = count(
        "SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'payouts' AND NON_UNIQUE = 0"
            .to_owned(),
    );
    assert_eq!(unique.await, 1);
    assert_eq!(
        payout(&database, P1).await.1,
        0,
        "an existing row has no fence"
    );
    let negative = sqlx::raw_sql(AssertSqlSafe(format!(
        "UPDATE `{}`.payouts SET fence = -1",
        database.name
    )))
    .execute(&database.pool)
    .await;
    assert!(negative.is_err(), "the check keeps the fence non-negative");
    database.drop_database().await;
}

/// The payout's status, fence, whether it was paid, reference and amount.
async fn payout(database: &Database, id: &str) -> (String, i64, bool, Option<String>, String) {
    let row = sqlx::query(AssertSqlSafe(format!(
        "SELECT status, fence, paid_at IS NOT NULL, gateway_ref, CAST(amount AS CHAR) \
         FROM `{}`.payouts WHERE id = ?",
        database.name
    )))
    .bind(id)
    .fetch_one(&database.pool)
    .await
    .unwrap();
    (
        row.get(0),
        row.get(1),
        row.get::<i64, _>(2) == 1,
        row.get(3),
        row.get(4),
    )
}

/// A confirm that also sets the payout's reference, time and amount: refused for a stale
/// holder (the newer fence named) and for a counter that went back (a regression), applied
/// for the holder, every column in the one statement; a stale holder's confirm inside its
/// own transaction changes none of them.
#[tokio::test]
async fn a_confirm_sets_the_teams_own_columns_with_the_fence_or_changes_none() {
    let database = Database::new().await;
    let payouts = payouts(&database).await;
    let lifecycle = payout_lifecycle();
    payouts
        .write(&key(P1), token(33), &lifecycle.claim())
        .await
        .unwrap();
    let confirm = MySqlWrite::new(lifecycle.confirm())
        .set("paid_at", MySqlValue::Now)
        .unwrap()
        .set("gateway_ref", "re_3Pq81'); DROP TABLE payouts; --")
        .unwrap()
        .set("amount", "70.30")
        .unwrap();
    let (source, resource) = fencing_testkit::issued_up_to(33).await;
    let stale = Holder::new(&resource, token(32), &source);
    let err = payouts
        .write_with(&stale, &key(P1), &confirm)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(33)),
        "{err:?}"
    );
    let behind = MemoryTokenSource::new();
    let err = payouts
        .write_with(
            &Holder::new(&resource, token(32), &behind),
            &key(P1),
            &confirm,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TokenRegression { .. }), "{err:?}");
    assert_eq!(
        payout(&database, P1).await,
        ("sending".into(), 33, false, None, "70.25".into()),
        "refused: nothing changed"
    );
    payouts
        .write_with(
            &Holder::new(&resource, token(33), &source),
            &key(P1),
            &confirm,
        )
        .await
        .unwrap();
    assert_eq!(
        payout(&database, P1).await,
        (
            "paid".into(),
            33,
            true,
            Some("re_3Pq81'); DROP TABLE payouts; --".into()),
            "70.30".into()
        )
    );

    let late = MySqlWrite::new(lifecycle.confirm())
        .set("gateway_ref", "stale")
        .unwrap();
    let mut tx = payouts.pool().begin().await.unwrap();
    let err = payouts
        .write_in(&mut tx, &stale, &key(P1), &late)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    tx.commit().await.unwrap();
    assert_eq!(
        payout(&database, P1).await.3.as_deref(),
        Some("re_3Pq81'); DROP TABLE payouts; --")
    );
    database.drop_database().await;
}

/// A claim that takes any state (not the lifecycle's, which needs the record queued) of a
/// payout the table does not have yet creates it with the columns set.
#[tokio::test]
async fn a_claim_of_a_missing_record_inserts_it_with_the_columns_set() {
    let database = Database::new().await;
    let payouts = payouts(&database).await;
    let (source, resource) = fencing_testkit::issued_up_to(7).await;
    let sending = State::new("sending").unwrap();
    let claim = MySqlWrite::new(FencedWrite::claim().set_state(sending))
        .set("amount", MySqlValue::Int(12))
        .unwrap()
        .set("merchant", "m_4471")
        .unwrap()
        .set("paid_at", MySqlValue::Null)
        .unwrap();
    let written = payouts
        .write_with(&Holder::new(&resource, token(7), &source), &key(P2), &claim)
        .await
        .unwrap();
    assert!(written.previous_fence.is_none(), "{written:?}");
    assert_eq!(
        payout(&database, P2).await,
        ("sending".into(), 7, false, None, "12.00".into())
    );
    let merchant: String = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT merchant FROM `{}`.payouts WHERE id = ?",
        database.name
    )))
    .bind(P2)
    .fetch_one(&database.pool)
    .await
    .unwrap();
    assert_eq!(merchant, "m_4471");
    database.drop_database().await;
}

/// Columns the table does not have, the store's own columns (in any case), one column set
/// twice in two cases, and a payload for a table without a payload column: each refused as
/// bad input before anything is sent.
#[tokio::test]
async fn writes_the_table_cannot_carry_are_refused_before_sending() {
    let database = Database::new().await;
    let payouts = payouts(&database).await;
    let lifecycle = payout_lifecycle();
    let cases = [
        MySqlWrite::new(lifecycle.claim())
            .set("no_such", 1)
            .unwrap(),
        MySqlWrite::new(lifecycle.claim())
            .set("STATUS", "paid")
            .unwrap(),
        MySqlWrite::new(lifecycle.claim()).set("fence", 99).unwrap(),
        MySqlWrite::new(lifecycle.claim())
            .set("gateway_ref", "a")
            .unwrap()
            .set("Gateway_Ref", "b")
            .unwrap(),
        MySqlWrite::new(lifecycle.claim().set_payload(b"x".to_vec())),
    ];
    let (source, resource) = fencing_testkit::issued_up_to(5).await;
    let holder = Holder::new(&resource, token(5), &source);
    for write in &cases {
        let err = payouts
            .write_with(&holder, &key(P1), write)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::Write),
            "{write:?}: {err:?}"
        );
    }
    assert_eq!(
        payout(&database, P1).await,
        ("queued".into(), 0, false, None, "70.25".into()),
        "nothing was written"
    );
    database.drop_database().await;
}

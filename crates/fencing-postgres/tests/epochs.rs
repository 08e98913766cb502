//! `PgEpochSource` on the shared server: a lost history restored twice within a second.

mod common;

use common::Schema;
use fencing_postgres::{PgEpochSource, PgQualifiedName};
use fencing_testkit::conformance::{
    LOST_EPOCH, an_epoch_source_restored_twice_within_a_second_never_reopens,
};
use sqlx::AssertSqlSafe;

/// A copy of a lost history's rows restored into the running server twice, the second time
/// as soon as the first history handed its epochs out: nothing opened twice (the shared
/// guarantee). Before epochs raised onto a history were held for a second, both histories
/// opened the same epoch of the row the copy kept, and of the one it lacked.
#[tokio::test]
async fn a_lost_history_restored_twice_within_a_second_opens_no_epoch_twice() {
    let schema = Schema::new().await;
    let table = PgQualifiedName::new(&schema.name, "epochs").unwrap();
    let epochs = PgEpochSource::new(schema.pool.clone(), table.clone());
    epochs.create_if_missing().await.unwrap();
    let written_at: String = sqlx::query_scalar("SELECT clock_timestamp()::text")
        .fetch_one(&schema.pool)
        .await
        .unwrap();
    let pool = schema.pool.clone();
    an_epoch_source_restored_twice_within_a_second_never_reopens(&epochs, async |kept| {
        let mut tx = pool.begin().await.unwrap();
        sqlx::query(AssertSqlSafe(format!("DELETE FROM {table}")))
            .execute(&mut *tx)
            .await
            .unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {table} (resource, value, history, written_at) \
             VALUES ('', 1, 'lost', $1::timestamptz), ($2, $3, 'lost', $1::timestamptz)"
        )))
        .bind(&written_at)
        .bind(kept.as_str())
        .bind(LOST_EPOCH as i64)
        .execute(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
    })
    .await;
    schema.drop_schema().await;
}

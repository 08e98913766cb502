//! Each key column holds each key apart: a key has one spelling per column type, so two
//! distinct record keys never name one row. Text keys under a collation that ignores trailing
//! spaces, integer keys of every width, and uuids in `BINARY(16)`.

mod common;

use common::Database;
use fencing_core::adapter::StoreWrites;
use fencing_core::{
    Error, Failure, FencedStore, FencedWrite, FencingToken, InputKind, RecordKey, State,
};
use fencing_mysql::{MySqlStore, MySqlTable};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

/// A store on a new table `name` whose key column `id` is `key_type`.
async fn store_on(database: &Database, name: &str, key_type: &str) -> MySqlStore {
    database
        .execute(format!(
            "CREATE TABLE `{name}` (id {key_type} PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0, \
             state VARCHAR(64))"
        ))
        .await;
    MySqlStore::new(
        database.pool.clone(),
        MySqlTable::new(&database.name, name).unwrap(),
    )
}

fn claim() -> FencedWrite {
    FencedWrite::claim().set_state(State::new("sending").unwrap())
}

/// Writes and reads of `keys` are each refused as a bad record key, with nothing written.
async fn refused(store: &MySqlStore, keys: &[&str]) {
    for text in keys {
        let err = store
            .write(&key(text), token(9), &claim())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::RecordKey),
            "{text:?}: {err:?}"
        );
        let err = store.read(&key(text)).await.unwrap_err();
        assert!(matches!(&err, Error::InvalidInput(_)), "{text:?}: {err:?}");
    }
}

/// The fences of the table's rows, by the server, in key order.
async fn fences(database: &Database, name: &str) -> Vec<i64> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT fence FROM `{name}` ORDER BY id"
    )))
    .fetch_all(&database.pool)
    .await
    .unwrap()
}

/// Under `utf8mb4_bin` (MariaDB's PAD SPACE binary collation) `r_1` and `r_1 ` are one row: a
/// key ending in a space is refused there, and nothing is written over `r_1`. Under
/// `utf8mb4_nopad_bin` and in a `VARBINARY` column the two are two rows. (Before, a claim of
/// `r_1 ` took `r_1`'s row over.)
#[tokio::test]
async fn a_key_ending_in_a_space_is_refused_where_the_column_ignores_trailing_spaces() {
    let database = Database::new().await;
    let padded = store_on(
        &database,
        "padded",
        "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    )
    .await;
    padded.write(&key("r_1"), token(3), &claim()).await.unwrap();
    refused(&padded, &["r_1 ", "r_1   "]).await;
    assert_eq!(fences(&database, "padded").await, [3]);
    let fixed = store_on(
        &database,
        "fixed",
        "CHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
    )
    .await;
    refused(&fixed, &["r_1 "]).await;

    for (name, key_type) in [
        (
            "nopad",
            "VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin",
        ),
        ("bytes", "VARBINARY(64)"),
    ] {
        let store = store_on(&database, name, key_type).await;
        store.write(&key("r_1"), token(3), &claim()).await.unwrap();
        store.write(&key("r_1 "), token(9), &claim()).await.unwrap();
        assert_eq!(fences(&database, name).await, [3, 9], "{key_type}");
        let read = store.read(&key("r_1 ")).await.unwrap().unwrap();
        assert_eq!(read.fence, Some(token(9)), "{key_type}");
    }
    database.drop_database().await;
}

/// An integer key column takes each number in canonical decimal only (`007` and `+7` would
/// name the row of `7`), and only within the column's range (`300` in a `TINYINT UNSIGNED`
/// would never be a row of it).
#[tokio::test]
async fn an_integer_key_has_one_spelling_within_its_columns_range() {
    let database = Database::new().await;
    let wide = store_on(&database, "wide", "BIGINT").await;
    wide.write(&key("7"), token(3), &claim()).await.unwrap();
    wide.write(&key("-7"), token(4), &claim()).await.unwrap();
    refused(&wide, &["007", "+7", "-0", "7.0", "9223372036854775808"]).await;
    assert_eq!(fences(&database, "wide").await, [4, 3]);
    // In one request: the key the column cannot take refused on its own, the others written.
    let outcomes = wide
        .write_many(&[key("7"), key("007"), key("8")], token(5), &claim())
        .await
        .unwrap();
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok(), "{outcomes:?}");
    assert!(
        matches!(&outcomes[1], Err(Error::InvalidInput(e)) if e.kind() == InputKind::RecordKey),
        "{outcomes:?}"
    );
    assert_eq!(fences(&database, "wide").await, [4, 5, 5]);

    let narrow = store_on(&database, "narrow", "TINYINT UNSIGNED").await;
    narrow.write(&key("255"), token(3), &claim()).await.unwrap();
    refused(&narrow, &["256", "-1", "300"]).await;
    let signed = store_on(&database, "signed", "SMALLINT").await;
    signed
        .write(&key("-32768"), token(3), &claim())
        .await
        .unwrap();
    refused(&signed, &["32768", "-32769"]).await;
    database.drop_database().await;
}

/// Uuids in `BINARY(16)`: a key is the lower-case hyphenated uuid, the row holds its 16
/// bytes; another spelling is refused. A `BINARY` column of another width (which pads keys
/// with zero bytes, so a row would never be found again) is refused as misconfigured.
#[tokio::test]
async fn uuids_in_binary_16_are_written_as_their_bytes() {
    let database = Database::new().await;
    let uuids = store_on(&database, "uuids", "BINARY(16)").await;
    let p1 = "0f8fad5b-d9cb-469f-a165-70867728950e";
    uuids.write(&key(p1), token(3), &claim()).await.unwrap();
    uuids.write(&key(p1), token(4), &claim()).await.unwrap();
    let stored: String = sqlx::query_scalar("SELECT LOWER(HEX(id)) FROM uuids")
        .fetch_one(&database.pool)
        .await
        .unwrap();
    assert_eq!(stored, p1.replace('-', ""));
    assert_eq!(
        uuids.read(&key(p1)).await.unwrap().unwrap().fence,
        Some(token(4))
    );
    refused(
        &uuids,
        &[
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "0f8fad5bd9cb469fa16570867728950e",
            "r_815",
        ],
    )
    .await;
    assert_eq!(fences(&database, "uuids").await, [4]);
    let p2 = "7c9e6679-7425-40de-944b-e07fc1f90ae7";
    let outcomes = uuids
        .write_many(&[key(p2), key(p1)], token(6), &claim())
        .await
        .unwrap();
    assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");
    assert_eq!(fences(&database, "uuids").await, [6, 6]);

    let short = store_on(&database, "short", "BINARY(8)").await;
    let err = short
        .write(&key("r_1"), token(3), &claim())
        .await
        .unwrap_err();
    assert_eq!(err.failure(), Some(Failure::Misconfigured), "{err:?}");
    assert!(format!("{err:?}").contains("VARBINARY"), "{err:?}");
    assert!(fences(&database, "short").await.is_empty());
    database.drop_database().await;
}

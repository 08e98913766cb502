//! `MySqlStore::write_in`: a fenced write inside the caller's own transaction, committed or
//! rolled back with the caller's statements, on a real MariaDB.

mod common;

use common::Database;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FencedStore, FencedWrite, FencingToken, FoundFence, Holder, InputKind, Lifecycle,
    RecordKey,
};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

/// The pending refund r_815 and a ledger table of the caller's own.
async fn prepared(database: &Database) {
    database
        .store()
        .write(
            &key("r_815"),
            token(1),
            &FencedWrite::claim().set_state(Lifecycle::default().pending().clone()),
        )
        .await
        .unwrap();
    database
        .execute(
            "CREATE TABLE ledger (refund VARCHAR(20) PRIMARY KEY, amount INT NOT NULL)".to_owned(),
        )
        .await;
}

async fn ledger_entries(database: &Database) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM ledger")
        .fetch_one(&database.pool)
        .await
        .unwrap()
}

/// The claim and a ledger entry in one transaction: rolled back, neither is there; committed,
/// both are.
#[tokio::test]
async fn a_write_in_the_callers_transaction_commits_and_rolls_back_with_it() {
    let database = Database::new().await;
    prepared(&database).await;
    let store = database.store();
    let lifecycle = Lifecycle::default();
    let (source, resource) = fencing_testkit::issued_up_to(33).await;
    let holder = Holder::new(&resource, token(33), &source);
    for commit in [false, true] {
        let mut tx = database.pool.begin().await.unwrap();
        let written = store
            .write_in(&mut tx, &holder, &key("r_815"), &lifecycle.claim())
            .await
            .unwrap();
        assert_eq!(written.previous_state.as_ref(), Some(lifecycle.pending()));
        sqlx::query("INSERT INTO ledger VALUES ('r_815', 1200)")
            .execute(&mut *tx)
            .await
            .unwrap();
        if commit {
            tx.commit().await.unwrap();
        } else {
            tx.rollback().await.unwrap();
        }
        let record = store.read(&key("r_815")).await.unwrap().unwrap();
        let (fence, state) = if commit {
            (Some(token(33)), lifecycle.in_flight())
        } else {
            (Some(token(1)), lifecycle.pending())
        };
        assert_eq!((record.fence, record.state.as_ref()), (fence, Some(state)));
        assert_eq!(ledger_entries(&database).await, i64::from(commit));
    }
    database.drop_database().await;
}

/// A holder older than the row's fence is refused inside the transaction, with the fence that
/// refused it, and nothing of the write is in the row; a connection outside a transaction is
/// refused as bad input, nothing written.
#[tokio::test]
async fn a_stale_holder_is_refused_in_a_transaction_and_a_connection_outside_one_is_refused() {
    let database = Database::new().await;
    prepared(&database).await;
    let store = database.store();
    let lifecycle = Lifecycle::default();
    store
        .write(&key("r_815"), token(34), &lifecycle.claim())
        .await
        .unwrap();
    let (source, resource) = fencing_testkit::issued_up_to(34).await;
    let stale = Holder::new(&resource, token(33), &source);
    let mut tx = database.pool.begin().await.unwrap();
    let err = store
        .write_in(&mut tx, &stale, &key("r_815"), &lifecycle.confirm())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { found: FoundFence::Fence(f), .. } if *f == token(34)),
        "{err:?}"
    );
    tx.rollback().await.unwrap();

    let current = Holder::new(&resource, token(34), &source);
    let mut conn = database.pool.acquire().await.unwrap();
    let err = store
        .write_in(&mut conn, &current, &key("r_815"), &lifecycle.confirm())
        .await;
    let err = err.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(input) if input.kind() == InputKind::Write),
        "{err:?}"
    );
    // The connection is the caller's, and still outside a transaction.
    let open: u64 = sqlx::query_scalar("SELECT @@in_transaction")
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(open, 0);
    drop(conn);
    let record = store.read(&key("r_815")).await.unwrap().unwrap();
    assert_eq!(
        record.state.as_ref(),
        Some(lifecycle.in_flight()),
        "not confirmed"
    );
    database.drop_database().await;
}

/// A statement of the caller's own in the write's transaction fails as this store's error
/// (`MySqlStore::sql_failure`): a missing ledger table is `Misconfigured`, naming the store,
/// the driver's error kept as its source; a connection killed under the transaction is
/// `Ambiguous` (the commit may or may not have happened, as far as the caller can tell).
#[tokio::test]
async fn a_statement_of_the_callers_own_fails_as_the_stores_error_with_the_drivers_as_source() {
    let database = Database::new().await;
    prepared(&database).await;
    let store = database.store();
    let lifecycle = Lifecycle::default();
    let (source, resource) = fencing_testkit::issued_up_to(33).await;
    let holder = Holder::new(&resource, token(33), &source);

    let mut tx = database.pool.begin().await.unwrap();
    store
        .write_in(&mut tx, &holder, &key("r_815"), &lifecycle.claim())
        .await
        .unwrap();
    let err = sqlx::query("INSERT INTO no_such_ledger VALUES ('r_815', 1200)")
        .execute(&mut *tx)
        .await
        .map_err(|e| store.sql_failure(e))
        .unwrap_err();
    assert!(matches!(&err, Error::Misconfigured { .. }), "{err:?}");
    assert!(err.to_string().contains(store.name()), "{err}");
    let cause = std::error::Error::source(&err).expect("the driver's error kept");
    assert!(cause.to_string().contains("no_such_ledger"), "{cause}");
    tx.rollback().await.unwrap();

    let mut tx = database.pool.begin().await.unwrap();
    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    database.execute(format!("KILL CONNECTION {id}")).await;
    let err = sqlx::query("INSERT INTO ledger VALUES ('r_815', 1200)")
        .execute(&mut *tx)
        .await
        .map_err(|e| store.sql_failure(e))
        .unwrap_err();
    assert!(err.is_ambiguous(), "{err:?}");
    drop(tx);
    database.drop_database().await;
}

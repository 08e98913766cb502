//! `MySqlStore` on the tables teams have, on a real MariaDB: names quoted verbatim, integer
//! keys, payload columns, take-overs that report what they took over, refusals that change
//! nothing, and tables it cannot fence refused with a typed error before anything is written.

mod common;

use common::Database;
use fencing_core::adapter::StoreWrites;
use fencing_core::{
    Error, Failure, FencedStore, FencedWrite, FencingToken, FoundFence, InputKind, Lifecycle,
    RecordKey,
};
use fencing_mysql::{MySqlStore, MySqlTable};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

/// Rows of `table` in `database`, counted by the server.
async fn rows(database: &Database, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(&database.pool)
        .await
        .unwrap()
}

/// The worked example: A claimed r_815 with token 33 and paused; B took it over with 34 and
/// learnt that it was in flight under 33; A's confirm is refused with the fence that refused
/// it, and the row keeps B's claim.
#[tokio::test]
async fn a_take_over_reports_what_it_took_over_and_the_stale_confirm_changes_nothing() {
    let database = Database::new().await;
    let store = database.store();
    let lifecycle = Lifecycle::default();
    let refund = key("r_815");
    let created = store
        .write(
            &refund,
            token(1),
            &FencedWrite::claim()
                .set_state(lifecycle.pending().clone())
                .set_payload(b"4471:1200".to_vec()),
        )
        .await
        .unwrap();
    assert!(created.created);
    let a = store
        .write(&refund, token(33), &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(a.previous_state.as_ref(), Some(lifecycle.pending()));
    let b = store
        .write(&refund, token(34), &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(b.previous_fence, Some(token(33)));
    assert_eq!(b.previous_state.as_ref(), Some(lifecycle.in_flight()));
    assert_eq!(b.record.payload, b"4471:1200", "the payload stays");

    let err = store
        .write(&refund, token(33), &lifecycle.confirm())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { found: FoundFence::Fence(f), presented, .. }
            if *f == token(34) && *presented == token(33)),
        "{err:?}"
    );
    let record = store.read(&refund).await.unwrap().unwrap();
    assert_eq!(record.fence, Some(token(34)));
    assert_eq!(record.state.as_ref(), Some(lifecycle.in_flight()));
    let done = store
        .write(&refund, token(34), &lifecycle.confirm())
        .await
        .unwrap();
    assert_eq!(done.record.state.as_ref(), Some(lifecycle.done()));
    database.drop_database().await;
}

/// Names with spaces, backticks and capitals, a `BIGINT` key, a `VARBINARY` payload.
#[tokio::test]
async fn quoted_names_and_integer_keys_are_fenced_as_text_keys_are() {
    let database = Database::new().await;
    database
        .execute(
            "CREATE TABLE `Refund ``Ledger``` (`Refund-ID` BIGINT PRIMARY KEY, \
             `Fence` BIGINT NOT NULL DEFAULT 0, `Status` VARCHAR(64), `Body` VARBINARY(100))"
                .to_owned(),
        )
        .await;
    let table = MySqlTable::new(&database.name, "Refund `Ledger`")
        .unwrap()
        .with_key_column("Refund-ID")
        .unwrap()
        .with_fence_column("Fence")
        .unwrap()
        .with_state_column("Status")
        .unwrap()
        .with_payload_column("Body")
        .unwrap();
    let store = MySqlStore::new(database.pool.clone(), table);
    let lifecycle = Lifecycle::default();
    let claim = FencedWrite::claim()
        .set_state(lifecycle.pending().clone())
        .set_payload(b"x".to_vec());
    store.write(&key("815"), token(5), &claim).await.unwrap();
    let record = store.read(&key("815")).await.unwrap().unwrap();
    assert_eq!(
        (record.fence, record.payload.as_slice()),
        (Some(token(5)), &b"x"[..])
    );
    let err = store
        .write(&key("r_815"), token(5), &claim)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(input) if input.kind() == InputKind::RecordKey),
        "{err:?}"
    );
    let err = store
        .write(&key("815"), token(4), &claim)
        .await
        .unwrap_err();
    assert!(err.is_rejection(), "{err:?}");
    assert_eq!(rows(&database, "`Refund ``Ledger```").await, 1);
    database.drop_database().await;
}

/// What the store cannot fence is refused as `Misconfigured`, naming the fix, with nothing
/// written: no such table, a key without a unique index of its own, a key compared without
/// regard to case, a fence that is not a BIGINT; and a payload for a table without a payload
/// column is refused as bad input.
#[tokio::test]
async fn a_table_it_cannot_fence_is_refused_before_anything_is_written() {
    let database = Database::new().await;
    let claim = FencedWrite::claim();
    let cases = [
        ("missing", None, "does not exist"),
        (
            "not_unique",
            Some(
                "CREATE TABLE not_unique (id VARBINARY(50), fence BIGINT NOT NULL DEFAULT 0, state VARCHAR(64), KEY (id))",
            ),
            "must be unique",
        ),
        (
            "folded",
            Some(
                "CREATE TABLE folded (id VARCHAR(50) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0, state VARCHAR(64))",
            ),
            "binary collation",
        ),
        (
            "narrow_fence",
            Some(
                "CREATE TABLE narrow_fence (id VARBINARY(50) PRIMARY KEY, fence INT NOT NULL DEFAULT 0, state VARCHAR(64))",
            ),
            "a fence is a BIGINT",
        ),
        (
            "no_state",
            Some(
                "CREATE TABLE no_state (id VARBINARY(50) PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0)",
            ),
            "no state column",
        ),
    ];
    for (name, ddl, says) in cases {
        if let Some(ddl) = ddl {
            database.execute(ddl.to_owned()).await;
        }
        let store = MySqlStore::new(
            database.pool.clone(),
            MySqlTable::new(&database.name, name).unwrap(),
        );
        let err = store
            .write(&key("r_1"), token(1), &claim)
            .await
            .unwrap_err();
        assert_eq!(
            err.failure(),
            Some(Failure::Misconfigured),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains(says), "{name}: {err}");
        if ddl.is_some() {
            assert_eq!(rows(&database, name).await, 0, "{name}: nothing written");
        }
    }
    let store = MySqlStore::new(
        database.pool.clone(),
        MySqlTable::new(&database.name, "records").unwrap(),
    );
    let err = store
        .write(
            &key("r_1"),
            token(1),
            &claim.clone().set_payload(b"x".to_vec()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(input) if input.kind() == InputKind::Write),
        "{err:?}"
    );
    assert_eq!(rows(&database, "records").await, 0);
    database.drop_database().await;
}

/// A row the library cannot read (a negative fence, a state that is no state name) is
/// reported `Corrupt` and never written over.
#[tokio::test]
async fn an_unreadable_row_is_corrupt_and_never_written_over() {
    let database = Database::new().await;
    database
        .execute(
            "CREATE TABLE raw (id VARBINARY(50) PRIMARY KEY, fence BIGINT NOT NULL, \
             state VARCHAR(100)); INSERT INTO raw VALUES ('negative', -3, 'pending'), \
             ('blank', 1, ''), ('control', 1, CONCAT('a', CHAR(7))), \
             ('long', 1, REPEAT('s', 65))"
                .to_owned(),
        )
        .await;
    let store = MySqlStore::new(
        database.pool.clone(),
        MySqlTable::new(&database.name, "raw").unwrap(),
    );
    for name in ["negative", "blank", "control", "long"] {
        let err = store
            .write(&key(name), token(9), &FencedWrite::claim())
            .await
            .unwrap_err();
        assert_eq!(err.failure(), Some(Failure::Corrupt), "{name}: {err:?}");
        let err = store.read(&key(name)).await.unwrap_err();
        assert_eq!(err.failure(), Some(Failure::Corrupt), "{name}: {err:?}");
    }
    // In one request with a readable row and a missing one: those two written, each
    // unreadable row reported corrupt on its own.
    let keys: Vec<RecordKey> = ["negative", "fresh", "blank", "control", "long"]
        .map(key)
        .to_vec();
    database
        .execute("INSERT INTO raw VALUES ('fine', 2, 'pending')".to_owned())
        .await;
    let mut keys = keys;
    keys.push(key("fine"));
    let outcomes = store
        .write_many(&keys, token(9), &FencedWrite::claim())
        .await
        .unwrap();
    for (key, outcome) in keys.iter().zip(&outcomes) {
        match key.as_str() {
            "fresh" | "fine" => assert!(outcome.is_ok(), "{key}: {outcome:?}"),
            _ => assert_eq!(
                outcome.as_ref().unwrap_err().failure(),
                Some(Failure::Corrupt),
                "{key}: {outcome:?}"
            ),
        }
    }
    let untouched: i64 = sqlx::query_scalar(
        "SELECT CAST(SUM(fence) AS SIGNED) FROM raw WHERE id NOT IN ('fresh', 'fine')",
    )
    .fetch_one(&database.pool)
    .await
    .unwrap();
    assert_eq!(untouched, 0, "-3 + 1 + 1 + 1");
    database.drop_database().await;
}

/// A claim that waits on a row another transaction holds (the earlier holder's claim, not yet
/// committed) reports what that transaction left once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_waiting_on_a_row_being_changed_reports_what_the_change_left() {
    let database = Database::new().await;
    let store = database.store();
    let lifecycle = Lifecycle::default();
    let refund = key("r_815");
    store
        .write(
            &refund,
            token(1),
            &FencedWrite::claim().set_state(lifecycle.pending().clone()),
        )
        .await
        .unwrap();
    let mut earlier = database.pool.begin().await.unwrap();
    sqlx::query("UPDATE records SET fence = 33, state = 'sending' WHERE id = 'r_815'")
        .execute(&mut *earlier)
        .await
        .unwrap();
    let takeover = tokio::spawn({
        let (store, refund, claim) = (store.clone(), refund.clone(), lifecycle.claim());
        async move { store.write(&refund, token(34), &claim).await }
    });
    until_the_locking_read_is_on_the_server(&database).await;
    assert!(!takeover.is_finished(), "the take-over waits for the row");
    earlier.commit().await.unwrap();
    let claimed = takeover.await.unwrap().unwrap();
    assert_eq!(claimed.previous_fence, Some(token(33)));
    assert_eq!(claimed.previous_state.as_ref(), Some(lifecycle.in_flight()));
    database.drop_database().await;
}

/// Returns once the take-over's locking read of the row is running on the server, where the
/// earlier transaction's lock keeps it until that transaction ends (a gate, not a guess at how
/// long the statement takes to get there). The process list, not `INNODB_TRX`: a locking read
/// waiting for its first lock is not listed there yet.
async fn until_the_locking_read_is_on_the_server(database: &Database) {
    for _ in 0..1_000 {
        let running: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST \
             WHERE INFO LIKE CONCAT('%', ?, '%FOR UPDATE')",
        )
        .bind(&database.name)
        .fetch_one(&database.pool)
        .await
        .unwrap();
        if running > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the take-over's locking read did not reach the server within 10 s");
}

/// A role without grants is `PermissionDenied` with the server's error beneath; a closed
/// port is `Unavailable`; neither wrote anything.
#[tokio::test]
async fn each_kind_of_failure_reaches_the_caller_with_its_meaning_and_its_cause() {
    let database = Database::new().await;
    let user = format!("u_{}", &database.name[database.name.len() - 8..]);
    database
        .execute(format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY 'secret'; \
             CREATE USER '{user}'@'localhost' IDENTIFIED BY 'secret'"
        ))
        .await;
    let url = fencing_test_support::services::mysql_url();
    let options: sqlx::mysql::MySqlConnectOptions = url.parse().unwrap();
    let pool = sqlx::MySqlPool::connect_with(
        options
            .clone()
            .username(&user)
            .password("secret")
            .database("information_schema"),
    )
    .await
    .unwrap();
    let store = MySqlStore::new(pool, database.table.clone());
    let err = store
        .write(&key("r_1"), token(1), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert_eq!(err.failure(), Some(Failure::PermissionDenied), "{err:?}");
    assert!(
        std::error::Error::source(&err)
            .is_some_and(|cause| cause.downcast_ref::<sqlx::Error>().is_some()),
        "{err:?}"
    );
    let closed = sqlx::mysql::MySqlPoolOptions::new()
        .acquire_timeout(std::time::Duration::from_secs(1))
        .connect_lazy_with(options.port(1));
    let store = MySqlStore::new(closed, database.table.clone());
    let err = store
        .write(&key("r_1"), token(1), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert_eq!(err.failure(), Some(Failure::Unavailable), "{err:?}");
    assert_eq!(rows(&database, "records").await, 0);
    database
        .execute(format!(
            "DROP USER '{user}'@'%'; DROP USER '{user}'@'localhost'"
        ))
        .await;
    database.drop_database().await;
}

/// The key's unique index dropped after the store read the table, and a second row given the
/// same key: the next write names the fault and changes neither row.
#[tokio::test]
async fn a_key_made_not_unique_after_the_first_write_is_refused_and_no_row_changes() {
    let database = Database::new().await;
    let store = database.store();
    let lifecycle = Lifecycle::default();
    let create = FencedWrite::claim().set_state(lifecycle.pending().clone());
    store.write(&key("r_815"), token(1), &create).await.unwrap();
    database
        .execute(
            "ALTER TABLE records DROP PRIMARY KEY; \
             INSERT INTO records (id, fence, state) VALUES ('r_815', 1, 'pending')"
                .to_owned(),
        )
        .await;
    let err = store
        .write(&key("r_815"), token(34), &lifecycle.claim())
        .await
        .unwrap_err();
    assert_eq!(err.failure(), Some(Failure::Misconfigured), "{err:?}");
    assert!(err.to_string().contains("must be unique"), "{err}");
    let fences: Vec<i64> = sqlx::query_scalar("SELECT fence FROM records")
        .fetch_all(&database.pool)
        .await
        .unwrap();
    assert_eq!(fences, [1, 1], "neither row changed");
    // In one request with another record: refused as a whole, nothing changed.
    store.write(&key("r_816"), token(1), &create).await.unwrap();
    let err = store
        .write_many(&[key("r_816"), key("r_815")], token(34), &lifecycle.claim())
        .await
        .unwrap_err();
    assert_eq!(err.failure(), Some(Failure::Misconfigured), "{err:?}");
    let fences: Vec<i64> = sqlx::query_scalar("SELECT fence FROM records ORDER BY id")
        .fetch_all(&database.pool)
        .await
        .unwrap();
    assert_eq!(fences, [1, 1, 1], "no row changed");
    database.drop_database().await;
}

/// `MAX(fence)` over the whole table, over the rows of one merchant, and over the rows of the
/// merchant a resource names: what `seed_from_floors` raises a counter to.
#[tokio::test]
async fn a_fence_floor_reads_the_highest_fence_of_the_rows_it_is_given() {
    use fencing_core::{FenceFloor, ResourceName};
    use fencing_mysql::MySqlFenceFloor;

    let database = Database::new().await;
    database
        .execute(
            "CREATE TABLE payouts (id VARBINARY(50) PRIMARY KEY, merchant VARCHAR(20), \
             fence BIGINT NOT NULL DEFAULT 0, state VARCHAR(64)); INSERT INTO payouts VALUES \
             ('p_1', 'm_4471', 12, 'sent'), ('p_2', 'm_9000', 900, 'sent'), \
             ('p_3', 'm_4471', 0, 'pending')"
                .to_owned(),
        )
        .await;
    let table = MySqlTable::new(&database.name, "payouts").unwrap();
    let r = ResourceName::new("settle:m_4471").unwrap();
    let whole = MySqlFenceFloor::new(database.pool.clone(), &table);
    assert_eq!(whole.max_fence(&r).await.unwrap(), Some(token(900)));
    let fixed =
        MySqlFenceFloor::filtered(database.pool.clone(), &table, "merchant", "m_4471").unwrap();
    assert_eq!(fixed.max_fence(&r).await.unwrap(), Some(token(12)));
    let derived = MySqlFenceFloor::per_resource(database.pool.clone(), &table, "merchant", |r| {
        r.as_str().trim_start_matches("settle:").to_owned()
    })
    .unwrap();
    assert_eq!(derived.max_fence(&r).await.unwrap(), Some(token(12)));
    let none = ResourceName::new("settle:m_0001").unwrap();
    assert_eq!(derived.max_fence(&none).await.unwrap(), None);
    database.drop_database().await;
}

/// On a table without a payload column a lifecycle's claims and confirms go as one prepared
/// statement (the fence and state found carried back in its answer) and report exactly what
/// the transaction would: a fresh claim, a take-over of a record in flight (the fence and
/// state it took over), a stale confirm refused with the fence that refused it, a fence too
/// large for the statement's answer (the transaction takes the write over), and a key whose
/// index was dropped under twin rows (refused, nothing changed).
#[tokio::test]
async fn writes_that_need_only_the_fence_and_state_back_report_what_they_found() {
    let database = Database::new().await;
    let table = MySqlTable::new(&database.name, "lean").unwrap();
    table.create_if_missing(&database.pool).await.unwrap();
    let store = MySqlStore::new(database.pool.clone(), table);
    let lifecycle = Lifecycle::default();
    let queued = FencedWrite::claim().set_state(lifecycle.pending().clone());
    store.write(&key("r_815"), token(1), &queued).await.unwrap();
    database
        .execute("UPDATE lean SET fence = 0".to_owned())
        .await;

    let first = store
        .write(&key("r_815"), token(33), &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(first.previous_fence, None);
    assert_eq!(first.previous_state.as_ref(), Some(lifecycle.pending()));
    let taken_over = store
        .write(&key("r_815"), token(34), &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(taken_over.previous_fence, Some(token(33)));
    assert_eq!(
        taken_over.previous_state.as_ref(),
        Some(lifecycle.in_flight())
    );
    let err = store
        .write(&key("r_815"), token(33), &lifecycle.confirm())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(34)),
        "{err:?}"
    );
    let confirmed = store
        .write(&key("r_815"), token(34), &lifecycle.confirm())
        .await
        .unwrap();
    assert_eq!(confirmed.record.state.as_ref(), Some(lifecycle.done()));

    let huge = 1u64 << 60;
    store
        .write(&key("r_816"), token(huge), &queued)
        .await
        .unwrap();
    let above = store
        .write(&key("r_816"), token(huge + 5), &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(above.previous_fence, Some(token(huge)));
    assert_eq!(above.previous_state.as_ref(), Some(lifecycle.pending()));
    let rows: Vec<(String, i64, String)> =
        sqlx::query_as("SELECT CAST(id AS CHAR), fence, state FROM lean ORDER BY id")
            .fetch_all(&database.pool)
            .await
            .unwrap();
    assert_eq!(
        rows,
        [
            ("r_815".to_owned(), 34, "sent".to_owned()),
            ("r_816".to_owned(), (huge + 5) as i64, "sending".to_owned())
        ]
    );

    // The key's index dropped after the first write and a twin row added: the statement
    // that reads through that index is refused by the server, and the transaction finds the
    // twins: nothing changes.
    database
        .execute(
            "ALTER TABLE lean DROP PRIMARY KEY; \
             INSERT INTO lean (id, fence, state) VALUES ('r_815', 34, 'sending')"
                .to_owned(),
        )
        .await;
    let err = store
        .write(&key("r_815"), token(40), &lifecycle.claim())
        .await
        .unwrap_err();
    assert_eq!(err.failure(), Some(Failure::Misconfigured), "{err:?}");
    let fences: Vec<i64> = sqlx::query_scalar("SELECT fence FROM lean WHERE id = 'r_815'")
        .fetch_all(&database.pool)
        .await
        .unwrap();
    assert_eq!(fences, [34, 34], "neither row changed");
    database.drop_database().await;
}

/// A store renamed for errors and batches refuses under its new name; a name with a control
/// character is refused as bad input.
#[tokio::test]
async fn a_store_named_for_its_job_refuses_under_that_name() {
    let database = Database::new().await;
    let store = database.store().named("payouts").unwrap();
    assert_eq!(store.name(), "payouts");
    store
        .write(&key("r_815"), token(34), &FencedWrite::claim())
        .await
        .unwrap();
    let err = store
        .write(&key("r_815"), token(33), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { store, .. } if store == "payouts"),
        "{err:?}"
    );
    let err = database.store().named("pay\nouts").unwrap_err();
    assert_eq!(err.kind(), InputKind::StoreSet, "{err:?}");
    database.drop_database().await;
}

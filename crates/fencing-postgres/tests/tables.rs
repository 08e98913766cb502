//! Postgres-specific behaviour: batch claims, the caller's own transaction, the low-level
//! pieces, floors, and bad input refused before any query is sent.

mod common;

use common::Schema;
use std::sync::Arc;
use std::time::Duration;

use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    Error, FenceCheck, FenceFloor, FencedStore, FencedWrite, FencingToken, FoundFence, Holder,
    InputKind, Lifecycle, MemoryTokenSource, RecordKey, ResourceName, State, TokenSource,
};
use fencing_postgres::{PgFenceFloor, PgIdent, PgStore, PgTable, push_fence_condition};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, Postgres, QueryBuilder};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

async fn pending_rows(store: &PgStore, keys: &[RecordKey]) {
    let create = FencedWrite::claim().set_state(Lifecycle::default().pending().clone());
    for k in keys {
        store.write(k, FencingToken::MIN, &create).await.unwrap();
    }
}

#[tokio::test]
async fn batch_claim_takes_every_pending_row_and_skips_the_sent_ones() {
    let schema = Schema::new().await;
    let store = schema.store();
    assert_eq!(store.name(), format!("postgres:{}.records", schema.name));
    let lifecycle = Lifecycle::default();
    let keys: Vec<_> = (1..=20).map(|n| key(&format!("r_{n:03}"))).collect();
    pending_rows(&store, &keys).await;
    let sent = FencedWrite::claim().set_state(lifecycle.done().clone());
    store.write(&keys[3], token(2), &sent).await.unwrap();

    let (source, resource) = fencing_testkit::issued_up_to(33).await;
    let mine = token(33);
    let holder = Holder::new(&resource, mine, &source);
    let mut asked = keys.clone();
    asked.push(key("r_missing"));
    let done = store
        .write_together(&holder, &asked, &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(done.written.len(), 19);
    let claimed: Vec<_> = keys.iter().filter(|k| **k != keys[3]).cloned().collect();
    assert_eq!(done.keys(), claimed, "the keys written, in the order given");
    assert_eq!(
        done.already_done,
        vec![keys[3].clone()],
        "sent: already done"
    );
    assert_eq!(done.skipped.len(), 1);
    assert!(matches!(&done.skipped[0], Error::NotFound { .. }));
    let row = store.read(&keys[0]).await.unwrap().unwrap();
    assert_eq!(
        (row.fence, row.state.as_ref()),
        (Some(mine), Some(lifecycle.in_flight()))
    );

    let confirmed = store
        .write_together(&holder, &done.keys(), &lifecycle.confirm())
        .await
        .unwrap();
    assert_eq!(confirmed.keys(), done.keys());
    schema.drop_schema().await;
}

/// A batch that claims its rows up front goes on, under the default (aborting) mismatch
/// policy, past rows another holder already made done: the lifecycle's claim calls them
/// already done, as `run_effect` does, in the grouped claim, a single write and the caller's
/// transaction alike. A row in a state outside the lifecycle still aborts it.
#[tokio::test]
async fn a_claim_first_batch_goes_on_past_rows_already_done_and_aborts_on_a_mismatch() {
    let schema = Schema::new().await;
    let store = schema.store();
    let lifecycle = Lifecycle::default();
    let keys: Vec<_> = (1..=5).map(|n| key(&format!("p_{n:03}"))).collect();
    pending_rows(&store, &keys).await;
    let in_state = |state: &State| FencedWrite::claim().set_state(state.clone());
    let paid = in_state(lifecycle.done());
    for done in [&keys[1], &keys[3]] {
        store.write(done, FencingToken::MIN, &paid).await.unwrap();
    }
    let batch = fencing_testkit::batch_over(Arc::new(store.clone())).await;

    let claimed = store
        .write_together(&batch.holder(), &keys, &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(claimed.already_done, vec![keys[1].clone(), keys[3].clone()]);
    assert!(claimed.skipped.is_empty(), "{:?}", claimed.skipped);
    assert_eq!(
        claimed.keys(),
        vec![keys[0].clone(), keys[2].clone(), keys[4].clone()]
    );
    let err = batch
        .holder()
        .write(&store, &keys[1], &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::StateMismatch { found: Some(found), .. } if found == lifecycle.done()),
        "{err:?}"
    );
    let mut tx = schema.pool.begin().await.unwrap();
    let err = store
        .write_in(&mut tx, &batch.holder(), &keys[3], &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StateMismatch { .. }), "{err:?}");
    tx.commit().await.unwrap();
    assert_eq!(
        batch.aborted_by(),
        None,
        "already done is no reason to abort"
    );
    assert!(batch.skipped().is_empty(), "nor a mismatch to skip");
    let confirmed = store
        .write_together(&batch.holder(), &claimed.keys(), &lifecycle.confirm())
        .await
        .unwrap();
    assert_eq!(confirmed.keys(), claimed.keys());

    let cancelled = key("p_006");
    store
        .write(
            &cancelled,
            FencingToken::MIN,
            &in_state(&State::new("cancelled").unwrap()),
        )
        .await
        .unwrap();
    let claimed = store
        .write_together(
            &batch.holder(),
            std::slice::from_ref(&cancelled),
            &lifecycle.claim(),
        )
        .await
        .unwrap();
    assert_eq!(claimed.skipped.len(), 1);
    assert_eq!(
        batch.aborted_by(),
        Some((store.name().to_owned(), cancelled))
    );
    let err = batch.finish().await.unwrap_err();
    assert!(matches!(err, Error::BatchAborted { .. }), "{err:?}");
    schema.drop_schema().await;
}

#[tokio::test]
async fn batch_claim_is_all_or_nothing_when_a_newer_holder_fenced_one_row() {
    let schema = Schema::new().await;
    let store = schema.store();
    let lifecycle = Lifecycle::default();
    let keys: Vec<_> = (1..=10).map(|n| key(&format!("r_{n:03}"))).collect();
    pending_rows(&store, &keys).await;
    store
        .write(&keys[7], token(34), &lifecycle.claim())
        .await
        .unwrap();

    let source = MemoryTokenSource::new();
    let resource = ResourceName::new("settle:m_4471").unwrap();
    source.advance_to(&resource, token(34)).await.unwrap();
    let stale = Holder::new(&resource, token(33), &source);
    let err = store
        .write_together(&stale, &keys, &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Fenced { record, found: FoundFence::Fence(f), .. } if *record == keys[7] && *f == token(34)),
        "{err:?}"
    );
    for k in &keys[..7] {
        let row = store.read(k).await.unwrap().unwrap();
        assert_eq!(row.fence, Some(FencingToken::MIN), "{k} must be untouched");
    }

    // With the counter lost, the same refusal is a regression, not a stale holder.
    source.forget_all();
    let err = store
        .write_together(&stale, &keys, &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TokenRegression { .. }), "{err:?}");
    schema.drop_schema().await;
}

#[tokio::test]
async fn fenced_writes_join_the_callers_transaction() {
    let schema = Schema::new().await;
    let store = schema.store();
    let k = key("r_815");
    pending_rows(&store, std::slice::from_ref(&k)).await;
    let lifecycle = Lifecycle::default();

    let (source, resource) = fencing_testkit::issued_up_to(33).await;
    let holder = Holder::new(&resource, token(33), &source);
    let mut tx = schema.pool.begin().await.unwrap();
    store
        .write_in(&mut tx, &holder, &k, &lifecycle.claim())
        .await
        .unwrap();
    let inside = store.read_in(&mut tx, &k).await.unwrap().unwrap();
    assert_eq!(inside.fence, Some(token(33)));
    tx.rollback().await.unwrap();
    let after = store.read(&k).await.unwrap().unwrap();
    assert_eq!(
        after.fence,
        Some(FencingToken::MIN),
        "rolled back with the caller's work"
    );

    let mut tx = schema.pool.begin().await.unwrap();
    store
        .write_in(&mut tx, &holder, &k, &lifecycle.claim())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        store.read(&k).await.unwrap().unwrap().fence,
        Some(token(33))
    );
    schema.drop_schema().await;
}

/// A batch over a `PgStore` admits its clones, which share its pool and table, and refuses a
/// store made apart on the same table, in the caller's transaction as through `Holder::write`.
#[tokio::test]
async fn a_batch_admits_a_clone_of_its_store_and_refuses_one_made_apart() {
    let schema = Schema::new().await;
    let store = schema.store();
    let k = key("r_815");
    pending_rows(&store, std::slice::from_ref(&k)).await;
    let batch = fencing_testkit::batch_over(Arc::new(store.clone())).await;
    let lifecycle = Lifecycle::default();

    let apart = schema.store();
    let mut tx = schema.pool.begin().await.unwrap();
    let err = apart
        .write_in(&mut tx, &batch.holder(), &k, &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::StoreSet),
        "{err:?}"
    );
    let err = batch
        .holder()
        .write(&apart, &k, &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::StoreSet),
        "{err:?}"
    );
    store
        .write_in(&mut tx, &batch.holder(), &k, &lifecycle.claim())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        store.read(&k).await.unwrap().unwrap().fence,
        Some(batch.token())
    );
    batch.finish().await.unwrap();
    schema.drop_schema().await;
}

/// A statement of your own carries a holder's fence, and one that changed no row is explained
/// as a holder's write is: the fence it met (a newer holder's, or one above everything the
/// source issued: a regression), or a missing row, never a missing row called fenced.
#[tokio::test]
async fn the_fence_condition_fits_a_statement_of_your_own() {
    let schema = Schema::new().await;
    let store = schema.store();
    let k = key("r_815");
    pending_rows(&store, std::slice::from_ref(&k)).await;
    store
        .write(&k, token(34), &FencedWrite::claim())
        .await
        .unwrap();

    let fence = PgIdent::new("fence").unwrap();
    let confirm = FencedWrite::holder_only();
    let update = async |holder: &Holder, record: &RecordKey| {
        let mut q: QueryBuilder<Postgres> = QueryBuilder::new(format!(
            "UPDATE \"{}\".records SET state = 'sent' WHERE id = ",
            schema.name
        ));
        q.push_bind(record.as_str().to_owned());
        push_fence_condition(&mut q, &fence, FenceCheck::HolderOnly, holder);
        let done = q.build().execute(&schema.pool).await.unwrap();
        match done.rows_affected() {
            0 => store.explain_unapplied(holder, record, &confirm).await,
            _ => Ok(()),
        }
    };
    let (source, resource) = fencing_testkit::issued_up_to(34).await;
    let stale = Holder::new(&resource, token(33), &source);
    let err = update(&stale, &k).await.unwrap_err();
    assert!(
        matches!(err, Error::Fenced { found: FoundFence::Fence(f), .. } if f == token(34)),
        "{err:?}"
    );
    let err = update(&stale, &key("r_missing")).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    let (behind, resource) = fencing_testkit::issued_up_to(20).await;
    let err = update(&Holder::new(&resource, token(20), &behind), &k)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TokenRegression { .. }), "{err:?}");

    update(&Holder::new(&resource, token(34), &source), &k)
        .await
        .unwrap();
    assert_eq!(
        store
            .read(&k)
            .await
            .unwrap()
            .unwrap()
            .state
            .unwrap()
            .as_str(),
        "sent"
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn the_floor_is_max_fence_over_one_merchants_rows() {
    let schema = Schema::new().await;
    let store = schema.store();
    schema
        .execute(format!(
            "ALTER TABLE \"{}\".records ADD COLUMN merchant_id TEXT NOT NULL DEFAULT 'm_4471'",
            schema.name
        ))
        .await;
    store
        .write(&key("a"), token(33), &FencedWrite::claim())
        .await
        .unwrap();
    store
        .write(&key("b"), token(90), &FencedWrite::claim())
        .await
        .unwrap();
    schema
        .execute(format!(
            "UPDATE \"{}\".records SET merchant_id = 'm_other' WHERE id = 'b'",
            schema.name
        ))
        .await;
    let settle = |m: &str| ResourceName::new(format!("settle:{m}")).unwrap();
    let whole = PgFenceFloor::new(schema.pool.clone(), &schema.table);
    assert_eq!(
        whole.max_fence(&settle("m_4471")).await.unwrap(),
        Some(token(90))
    );
    let shown = format!("{whole:?}");
    assert!(
        shown.starts_with("PgFenceFloor { store: ") && shown.contains("sql: \"SELECT "),
        "{shown}"
    );
    let merchant =
        PgFenceFloor::filtered(schema.pool.clone(), &schema.table, "merchant_id", "m_4471")
            .unwrap();
    assert_eq!(
        merchant.max_fence(&settle("m_other")).await.unwrap(),
        Some(token(33))
    );
    let by_resource = PgFenceFloor::per_resource(
        schema.pool.clone(),
        &schema.table,
        "merchant_id",
        |r: &ResourceName| r.as_str().trim_start_matches("settle:").to_owned(),
    )
    .unwrap();
    assert_eq!(
        by_resource.max_fence(&settle("m_4471")).await.unwrap(),
        Some(token(33))
    );
    assert_eq!(
        by_resource.max_fence(&settle("m_other")).await.unwrap(),
        Some(token(90))
    );
    assert_eq!(
        by_resource.max_fence(&settle("m_none")).await.unwrap(),
        None
    );
    assert!(PgFenceFloor::filtered(schema.pool.clone(), &schema.table, "x\n", "v").is_err());
    schema.drop_schema().await;
}

#[test]
fn what_cannot_be_a_name_is_refused_before_any_query() {
    for (schema, table) in [
        ("", "refund"),
        ("public", ""),
        ("public", &"r".repeat(64)),
        ("public", "ref\0und"),
        ("public", "ref\u{202E}und"),
    ] {
        let err = PgTable::new(schema, table).unwrap_err();
        assert_eq!(err.kind(), InputKind::Identifier, "{schema:?}.{table:?}");
    }
    let table = PgTable::new("public", "refund").unwrap();
    for column in ["", "fence\n", "fen\u{200B}ce"] {
        assert!(table.clone().with_fence_column(column).is_err());
        assert!(table.clone().with_key_column(column).is_err());
        assert!(table.clone().with_state_column(column).is_err());
        assert!(table.clone().with_payload_column(column).is_err());
    }
}

#[tokio::test]
async fn names_postgres_accepts_quoted_work_and_hostile_ones_stay_names() {
    let schema = Schema::new().await;
    schema
        .execute(format!(
            "CREATE TABLE \"{}\".bystander (id int)",
            schema.name
        ))
        .await;
    for name in [
        "billing-v2",
        "LedgerEntries",
        "refund\"; DROP TABLE bystander; --",
        "o'brien\\x",
        "a$fencing0$b",
        // The names PostgreSQL 18's `RETURNING` gives the row before and after an update.
        "old",
        "new",
    ] {
        let (state, payload) = match name {
            "old" | "new" => ("new", "old"),
            _ => ("Sta te", "pay'load"),
        };
        let table = PgTable::new(&schema.name, name)
            .unwrap()
            .with_state_column(state)
            .unwrap()
            .with_payload_column(payload)
            .unwrap();
        table.create_if_missing(&schema.pool).await.unwrap();
        table.add_fence_column(&schema.pool).await.unwrap();
        let store = PgStore::new(schema.pool.clone(), table);
        let write = FencedWrite::claim()
            .set_state(State::new("pending").unwrap())
            .set_payload(b"7025".to_vec());
        store.write(&key("r_1"), token(3), &write).await.unwrap();
        let row = store.read(&key("r_1")).await.unwrap().unwrap();
        assert_eq!(
            (row.fence, row.payload),
            (Some(token(3)), b"7025".to_vec()),
            "{name}"
        );
        let update = FencedWrite::claim()
            .set_state(State::new("sending").unwrap())
            .set_payload(b"7026".to_vec());
        let written = store.write(&key("r_1"), token(4), &update).await.unwrap();
        assert_eq!(written.previous_fence, Some(token(3)), "{name}");
        assert_eq!(written.record.payload, b"7026".to_vec(), "{name}");
    }
    let (count,): (i64,) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT count(*) FROM \"{}\".bystander",
        schema.name
    )))
    .fetch_one(&schema.pool)
    .await
    .expect("the bystander table is still there");
    assert_eq!(count, 0);
    schema.drop_schema().await;
}

/// A pool of `options` with one connection, for a store on the test's table.
async fn store_connected_with(schema: &Schema, options: PgConnectOptions) -> PgStore {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy_with(options);
    PgStore::new(pool, schema.table.clone())
}

#[tokio::test]
async fn each_kind_of_failure_reaches_the_caller_with_its_meaning_and_its_cause() {
    let schema = Schema::new().await;
    let url: PgConnectOptions = fencing_test_support::services::postgres_url()
        .parse()
        .unwrap();
    let claim = FencedWrite::claim().set_state(State::new("sending").unwrap());
    let cause_is_the_drivers = |err: &Error| {
        let mut cause = std::error::Error::source(err);
        while let Some(current) = cause {
            if current.is::<sqlx::Error>() {
                return true;
            }
            cause = current.source();
        }
        false
    };

    // Nothing listens: the request never left.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let unreachable = store_connected_with(&schema, url.clone().port(port)).await;
    let err = unreachable
        .write(&key("r_1"), token(1), &claim)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");

    // A role the table was not granted to.
    let role = format!("{}_reader", schema.name);
    schema
        .execute(format!(
            "CREATE ROLE \"{role}\" LOGIN; GRANT USAGE ON SCHEMA \"{}\" TO \"{role}\"",
            schema.name
        ))
        .await;
    let ungranted = store_connected_with(&schema, url.clone().username(&role)).await;
    let err = ungranted
        .write(&key("r_1"), token(1), &claim)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PermissionDenied { .. }), "{err:?}");
    assert!(cause_is_the_drivers(&err), "{err:?}");
    ungranted.pool().close().await;

    // A row another transaction holds, past the connection's lock_timeout: rolled back whole.
    schema
        .store()
        .write(&key("r_1"), token(1), &claim)
        .await
        .unwrap();
    let mut holding = schema.pool.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT 1 FROM {} WHERE id = 'r_1' FOR UPDATE",
        schema.table.name()
    )))
    .execute(&mut *holding)
    .await
    .unwrap();
    let impatient =
        store_connected_with(&schema, url.clone().options([("lock_timeout", "200ms")])).await;
    let err = impatient
        .write(&key("r_1"), token(2), &claim)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(cause_is_the_drivers(&err), "{err:?}");
    holding.rollback().await.unwrap();
    assert_eq!(
        schema
            .store()
            .read(&key("r_1"))
            .await
            .unwrap()
            .unwrap()
            .fence,
        Some(token(1)),
        "nothing was written"
    );
    impatient.pool().close().await;

    schema.drop_schema().await;
    let admin = sqlx::PgPool::connect_with(url).await.unwrap();
    sqlx::query(AssertSqlSafe(format!("DROP ROLE \"{role}\"")))
        .execute(&admin)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_missing_table_or_fence_column_is_a_clear_error() {
    let schema = Schema::new().await;
    let missing = PgStore::new(
        schema.pool.clone(),
        PgTable::new(&schema.name, "no_such_table").unwrap(),
    );
    let err = missing.read(&key("r_1")).await.unwrap_err();
    assert!(matches!(err, Error::Misconfigured { .. }), "{err:?}");
    assert!(err.to_string().contains("does not exist"), "{err}");

    schema
        .execute(format!(
            "CREATE TABLE \"{}\".legacy (id TEXT PRIMARY KEY, state TEXT)",
            schema.name
        ))
        .await;
    let legacy_table = PgTable::new(&schema.name, "legacy").unwrap();
    let legacy = PgStore::new(schema.pool.clone(), legacy_table.clone());
    let err = legacy
        .write(&key("r_1"), token(1), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("add_fence_column"), "{err}");
    legacy_table.add_fence_column(&schema.pool).await.unwrap();
    legacy
        .write(&key("r_1"), token(1), &FencedWrite::claim())
        .await
        .unwrap();

    let err = legacy
        .write(
            &key("r_1"),
            token(1),
            &FencedWrite::claim().set_payload(b"x".to_vec()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::InvalidInput(_)),
        "no payload column: {err:?}"
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_key_column_that_is_not_unique_is_refused_before_anything_is_written() {
    let schema = Schema::new().await;
    let table = format!("\"{}\".payouts", schema.name);
    schema
        .execute(format!(
            "CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, merchant TEXT NOT NULL, \
             fence BIGINT NOT NULL DEFAULT 0, state TEXT); \
             INSERT INTO {table} (merchant, state) SELECT 'm_4471', 'pending' \
             FROM generate_series(1, 5)"
        ))
        .await;
    let by_merchant = PgTable::new(&schema.name, "payouts")
        .unwrap()
        .with_key_column("merchant")
        .unwrap();
    let store = PgStore::new(schema.pool.clone(), by_merchant.clone());
    let err = store
        .write(&key("m_4471"), token(9), &FencedWrite::claim())
        .await
        .unwrap_err();
    match &err {
        Error::InvalidInput(e) => {
            assert_eq!(e.kind(), InputKind::Identifier);
            assert!(e.detail().contains("CREATE UNIQUE INDEX"), "{err}");
        }
        other => panic!("expected a refused key column, got {other:?}"),
    }
    let untouched: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM {table} WHERE fence = 0 AND state = 'pending'"
    )))
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    assert_eq!(untouched, 5, "nothing written");

    // The index the error asks for makes the same store work (the failed check is not kept).
    schema
        .execute(format!("DELETE FROM {table} WHERE id > 1"))
        .await;
    schema
        .execute(format!(
            "CREATE UNIQUE INDEX merchant_unique ON {table} (merchant)"
        ))
        .await;
    store
        .write(&key("m_4471"), token(9), &FencedWrite::claim())
        .await
        .unwrap();

    // The index dropped later, duplicates back: one record's write still changes no row.
    schema
        .execute(format!(
            "DROP INDEX \"{}\".merchant_unique; \
             INSERT INTO {table} (merchant, state) VALUES ('m_4471', 'pending')",
            schema.name
        ))
        .await;
    let err = store
        .write(
            &key("m_4471"),
            token(10),
            &FencedWrite::claim().set_state(State::new("sending").unwrap()),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Misconfigured { .. }) && err.to_string().contains("must be unique"),
        "{err:?}"
    );
    let states: Vec<(i64, Option<String>)> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT fence, state FROM {table} ORDER BY id"
    )))
    .fetch_all(&schema.pool)
    .await
    .unwrap();
    assert_eq!(
        states,
        [(9, Some("pending".into())), (0, Some("pending".into()))]
    );
    schema.drop_schema().await;
}

async fn inserts_seen(schema: &Schema, seen: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {seen}")))
        .fetch_one(&schema.pool)
        .await
        .unwrap()
}

/// A write names the key's unique index through an insert that inserts nothing, unless that
/// insert would be seen or refused: then it counts the key's rows instead. Either way a write
/// sets off nothing of the team's, and one whose index is gone changes no row.
#[tokio::test]
async fn a_table_that_would_see_or_refuse_an_empty_insert_is_guarded_by_counting_rows() {
    let schema = Schema::new().await;
    let seen = format!("\"{}\".inserts_seen", schema.name);
    let role = format!("{}_updater", schema.name);
    let table = |name: &str| format!("\"{}\".{name}", schema.name);
    schema
        .execute(format!(
            "CREATE TABLE {seen} (what TEXT); \
             CREATE FUNCTION \"{s}\".note_insert() RETURNS trigger LANGUAGE plpgsql AS \
             $$BEGIN INSERT INTO {seen} VALUES (TG_TABLE_NAME); RETURN NULL; END$$; \
             CREATE TABLE {audited} (id TEXT PRIMARY KEY, fence BIGINT, state TEXT); \
             CREATE TRIGGER audit AFTER INSERT ON {audited} \
             FOR EACH STATEMENT EXECUTE FUNCTION \"{s}\".note_insert(); \
             CREATE TABLE {ruled} (id TEXT PRIMARY KEY, fence BIGINT, state TEXT); \
             CREATE RULE audit AS ON INSERT TO {ruled} DO ALSO INSERT INTO {seen} VALUES ('ruled'); \
             CREATE TABLE {deferred} (id TEXT, fence BIGINT, state TEXT, \
             CONSTRAINT deferred_id UNIQUE (id) DEFERRABLE INITIALLY IMMEDIATE); \
             CREATE TABLE {granted} (id TEXT PRIMARY KEY, fence BIGINT, state TEXT); \
             CREATE ROLE \"{role}\" NOLOGIN; GRANT USAGE ON SCHEMA \"{s}\" TO \"{role}\"; \
             GRANT SELECT, UPDATE ON {granted} TO \"{role}\"",
            s = schema.name,
            audited = table("audited"),
            ruled = table("ruled"),
            deferred = table("deferred"),
            granted = table("granted"),
        ))
        .await;
    let updater = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .after_connect({
            let role = role.clone();
            move |conn, _| {
                let set_role = format!("SET ROLE \"{role}\"");
                Box::pin(async move {
                    sqlx::raw_sql(AssertSqlSafe(set_role)).execute(conn).await?;
                    Ok(())
                })
            }
        })
        .connect(&fencing_test_support::services::postgres_url())
        .await
        .unwrap();
    let claim = FencedWrite::claim().set_state(State::new("sending").unwrap());
    for (name, pool, drop_unique) in [
        ("audited", &schema.pool, "DROP CONSTRAINT audited_pkey"),
        ("ruled", &schema.pool, "DROP CONSTRAINT ruled_pkey"),
        ("deferred", &schema.pool, "DROP CONSTRAINT deferred_id"),
        ("granted", &updater, "DROP CONSTRAINT granted_pkey"),
    ] {
        // The test's own inserts set off the trigger and the rule; the store's writes must not.
        schema
            .execute(format!(
                "INSERT INTO {} VALUES ('r_0815', 0, 'pending'); DELETE FROM {seen}",
                table(name)
            ))
            .await;
        let store = PgStore::new(pool.clone(), PgTable::new(&schema.name, name).unwrap());
        let written = store
            .write(&key("r_0815"), token(33), &claim)
            .await
            .unwrap();
        assert_eq!(
            written.previous_state,
            Some(State::new("pending").unwrap()),
            "{name}"
        );
        assert_eq!(
            inserts_seen(&schema, &seen).await,
            0,
            "{name}: the team's insert trigger or rule set off"
        );
        schema
            .execute(format!(
                "ALTER TABLE {t} {drop_unique}; INSERT INTO {t} VALUES ('r_0815', 0, 'pending')",
                t = table(name)
            ))
            .await;
        let err = store
            .write(&key("r_0815"), token(34), &claim)
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("must be unique"),
            "{name}: {err:?}"
        );
        let rows: Vec<(i64, String)> = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT fence, state FROM {} ORDER BY fence",
            table(name)
        )))
        .fetch_all(&schema.pool)
        .await
        .unwrap();
        assert_eq!(
            rows,
            [(0, "pending".to_owned()), (33, "sending".to_owned())],
            "{name}: nothing written over duplicates"
        );
    }
    updater.close().await;
    schema
        .execute(format!("DROP OWNED BY \"{role}\"; DROP ROLE \"{role}\""))
        .await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_corrupt_row_is_refused_inside_the_statement_and_left_as_it_was() {
    let schema = Schema::new().await;
    let table = format!("\"{}\".legacy", schema.name);
    schema
        .execute(format!(
            "CREATE TABLE {table} (id TEXT PRIMARY KEY, fence BIGINT NOT NULL DEFAULT 0, \
             state TEXT); \
             INSERT INTO {table} VALUES ('negative', -7, 'pending'), ('empty', 3, ''), \
             ('control', 3, E'pend\\x01ing'), ('zero-width', 3, E'pend\\u200Bing'), \
             ('bell', 3, E'pend\\x07ing'), ('joiner', 3, E'pend\\u200Ding')"
        ))
        .await;
    let store = PgStore::new(
        schema.pool.clone(),
        PgTable::new(&schema.name, "legacy").unwrap(),
    );
    let sending = FencedWrite::claim().set_state(State::new("sending").unwrap());
    // A character inside a refused range, not only at its ends, is caught too.
    for id in [
        "negative",
        "empty",
        "control",
        "zero-width",
        "bell",
        "joiner",
    ] {
        let before: (i64, Option<String>) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT fence, state FROM {table} WHERE id = $1"
        )))
        .bind(id)
        .fetch_one(&schema.pool)
        .await
        .unwrap();
        for write in [&sending, &FencedWrite::holder_only()] {
            let err = store.write(&key(id), token(9), write).await.unwrap_err();
            assert!(
                matches!(err, Error::Corrupt { .. }) && err.to_string().contains("stored"),
                "{id}: {err:?}"
            );
        }
        let after: (i64, Option<String>) = sqlx::query_as(AssertSqlSafe(format!(
            "SELECT fence, state FROM {table} WHERE id = $1"
        )))
        .bind(id)
        .fetch_one(&schema.pool)
        .await
        .unwrap();
        assert_eq!(
            after, before,
            "{id}: a corrupt row must not be written over"
        );
    }

    // add_fence_column on the same table adds the check that keeps fences from going negative
    // (after the corrupt fence is mended: a check cannot be added over a row that breaks it).
    schema
        .execute(format!(
            "UPDATE {table} SET fence = 0 WHERE id = 'negative'"
        ))
        .await;
    let legacy = PgTable::new(&schema.name, "legacy").unwrap();
    legacy.add_fence_column(&schema.pool).await.unwrap();
    legacy.add_fence_column(&schema.pool).await.unwrap();
    let err = sqlx::raw_sql(AssertSqlSafe(format!(
        "UPDATE {table} SET fence = -1 WHERE id = 'negative'"
    )))
    .execute(&schema.pool)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("nonnegative"), "{err}");
    let created = sqlx::raw_sql(AssertSqlSafe(format!(
        "INSERT INTO \"{}\".records (id, fence) VALUES ('x', -1)",
        schema.name
    )))
    .execute(&schema.pool)
    .await
    .unwrap_err();
    assert!(created.to_string().contains("check"), "{created}");
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_batch_write_naming_one_key_twice_is_refused_before_sending() {
    let schema = Schema::new().await;
    let store = schema.store();
    let keys = [key("r_1"), key("r_2"), key("r_1")];
    pending_rows(&store, &keys[..2]).await;
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let source = MemoryTokenSource::new();
    let holder = Holder::new(&resource, token(5), &source);
    let err = store
        .write_together(&holder, &keys, &Lifecycle::default().claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::RecordKey),
        "{err:?}"
    );
    for k in &keys[..2] {
        let record = store.read(k).await.unwrap().unwrap();
        assert_eq!(record.fence, Some(token(1)), "nothing written");
    }
    schema.drop_schema().await;
}

/// A claim that meets a row another transaction is changing waits for it and reports what
/// that transaction left, not what the claim's snapshot saw: a takeover told "pending" for a
/// row just marked in flight would perform its effect without looking it up.
#[tokio::test]
async fn a_claim_waiting_on_a_row_being_changed_reports_what_the_change_left() {
    let schema = Schema::new().await;
    let store = schema.store();
    let lifecycle = Lifecycle::default();
    let refund = key("r_0815");
    pending_rows(&store, std::slice::from_ref(&refund)).await;

    let (source, resource) = fencing_testkit::issued_up_to(34).await;
    let mut earlier_holder = schema.pool.begin().await.unwrap();
    store
        .write_in(
            &mut earlier_holder,
            &Holder::new(&resource, token(33), &source),
            &refund,
            lifecycle.claim(),
        )
        .await
        .unwrap();
    let takeover = tokio::spawn({
        let store = store.clone();
        let (refund, claim) = (refund.clone(), lifecycle.claim());
        async move { store.write(&refund, token(34), &claim).await }
    });
    // The takeover's statement has taken its snapshot once it waits on the row.
    until_a_statement_waits_on_a_lock(&schema).await;
    assert!(!takeover.is_finished(), "the takeover waits for the row");
    earlier_holder.commit().await.unwrap();

    let claimed = takeover.await.unwrap().unwrap();
    assert_eq!(claimed.previous_fence, Some(token(33)));
    assert_eq!(claimed.previous_state.as_ref(), Some(lifecycle.in_flight()));
    let record = store.read(&refund).await.unwrap().unwrap();
    assert_eq!(record.fence, Some(token(34)));
    schema.drop_schema().await;
}

/// Returns once a statement naming `schema` waits on a lock (a gate, not a guess at how long
/// the statement takes to get there).
async fn until_a_statement_waits_on_a_lock(schema: &Schema) {
    for _ in 0..1_000 {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND position($1 IN query) > 0",
        )
        .bind(&schema.name)
        .fetch_one(&schema.pool)
        .await
        .unwrap();
        if waiting > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!(
        "no statement on {} waited on a lock within 10 s",
        schema.name
    );
}

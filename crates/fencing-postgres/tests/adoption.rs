//! A team's existing schema, as it is: uuid and bigint keys, columns of their own set with the
//! fence, quoted and folded names, the fence added by a migration tool, and the caller's own
//! transaction.

mod common;

use common::Schema;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    EffectOutcome, EffectStart, Error, FencedStore, FencedWrite, FencingToken, FoundFence, Holder,
    InputKind, Lifecycle, RecordKey, State, TokenSource,
};
use fencing_postgres::{PgStore, PgTable, PgValue, PgWrite};
use fencing_testkit::faults::RecordingEffect;
use sqlx::{AssertSqlSafe, Row};

fn key(text: &str) -> RecordKey {
    RecordKey::new(text).unwrap()
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

fn state(name: &str) -> State {
    State::new(name).unwrap()
}

fn payout_lifecycle() -> Lifecycle {
    Lifecycle::new(state("queued"), state("sending"), state("paid")).unwrap()
}

const P1: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";
const P2: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";

/// The payouts table as a payments team has it, without a fence column, and its migration
/// run the way a migration tool runs it: the SQL in a transaction, twice.
async fn payouts(schema: &Schema) -> PgStore {
    schema
        .execute(format!(
            "CREATE TABLE \"{0}\".payouts (id uuid PRIMARY KEY, merchant text, \
             amount_cents bigint, status text DEFAULT 'queued', created_at timestamptz DEFAULT now(), \
             paid_at timestamptz, gateway_ref text); \
             INSERT INTO \"{0}\".payouts (id, merchant, amount_cents) VALUES \
             ('{P1}', 'm_4471', 7025), ('{P2}', 'm_4471', 1200)",
            schema.name
        ))
        .await;
    let table = PgTable::new(&schema.name, "payouts")
        .unwrap()
        .with_state_column("status")
        .unwrap();
    for _ in 0..2 {
        schema
            .execute(format!("BEGIN;\n{}COMMIT;", table.migration_sql()))
            .await;
    }
    PgStore::new(schema.pool.clone(), table)
        .named("payouts")
        .unwrap()
}

#[tokio::test]
async fn a_uuid_keyed_table_takes_fenced_writes_that_set_its_own_columns() {
    let schema = Schema::new().await;
    let payouts = payouts(&schema).await;
    let lifecycle = payout_lifecycle();
    payouts
        .write(&key(P1), token(33), &lifecycle.claim())
        .await
        .unwrap();
    let confirm = PgWrite::new(lifecycle.confirm())
        .set("paid_at", PgValue::Now)
        .unwrap()
        .set("gateway_ref", "re_3Pq81")
        .unwrap()
        .set("amount_cents", 7025)
        .unwrap();
    // On the store's pool under a holder: Holder::write's rules, a refusal explained.
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
    let behind = fencing_core::MemoryTokenSource::new();
    let err = payouts
        .write_with(
            &Holder::new(&resource, token(32), &behind),
            &key(P1),
            &confirm,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TokenRegression { .. }), "{err:?}");
    payouts
        .write_with(
            &Holder::new(&resource, token(33), &source),
            &key(P1),
            &confirm,
        )
        .await
        .unwrap();
    let row = sqlx::query(AssertSqlSafe(format!(
        "SELECT status, fence, paid_at IS NOT NULL, gateway_ref, amount_cents FROM \"{}\".payouts \
         WHERE id = '{P1}'",
        schema.name
    )))
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    assert_eq!(row.get::<String, _>(0), "paid");
    assert_eq!(row.get::<i64, _>(1), 33);
    assert!(row.get::<bool, _>(2));
    assert_eq!(row.get::<String, _>(3), "re_3Pq81");
    assert_eq!(row.get::<i64, _>(4), 7025);

    // A stale holder's confirm with columns changes none of them.
    let stale = PgWrite::new(lifecycle.confirm())
        .set("gateway_ref", "stale")
        .unwrap();
    let (source, resource) = fencing_testkit::issued_up_to(33).await;
    let err = payouts
        .write_in(
            &mut payouts.pool().acquire().await.unwrap(),
            &Holder::new(&resource, token(32), &source),
            &key(P1),
            &stale,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    let r = sqlx::query_scalar::<_, String>(AssertSqlSafe(format!(
        "SELECT gateway_ref FROM \"{}\".payouts WHERE id = '{P1}'",
        schema.name
    )))
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    assert_eq!(r, "re_3Pq81");

    // The same key spelled otherwise is refused before anything is sent.
    let err = payouts
        .write(&key(&P1.to_uppercase()), token(34), &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::RecordKey),
        "{err:?}"
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn the_migration_adds_the_fence_its_check_and_no_second_unique_index() {
    let schema = Schema::new().await;
    let payouts = payouts(&schema).await;
    let count = |sql: String| {
        let pool = schema.pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let table = format!("'\"{}\".payouts'::regclass", schema.name);
    assert_eq!(
        count(format!(
            "SELECT count(*) FROM pg_index WHERE indrelid = {table}"
        ))
        .await,
        1,
        "the primary key already covers id"
    );
    assert_eq!(
        count(format!(
            "SELECT count(*) FROM pg_constraint WHERE conrelid = {table} AND contype = 'c'"
        ))
        .await,
        1
    );
    let err = sqlx::raw_sql(AssertSqlSafe(format!(
        "UPDATE \"{}\".payouts SET fence = -1",
        schema.name
    )))
    .execute(&schema.pool)
    .await
    .unwrap_err();
    assert!(
        err.to_string().contains("fencing_fence_nonnegative"),
        "{err}"
    );
    assert!(
        payouts
            .write(&key(P2), token(1), &payout_lifecycle().claim())
            .await
            .is_ok()
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_bigserial_key_in_a_quoted_mixed_case_table_is_written_by_its_canonical_number() {
    let schema = Schema::new().await;
    schema
        .execute(format!(
            "CREATE TABLE \"{0}\".\"LedgerEntries\" (id bigserial PRIMARY KEY, payout uuid, \
             \"entry-state\" text DEFAULT 'open', fence bigint NOT NULL DEFAULT 0); \
             INSERT INTO \"{0}\".\"LedgerEntries\" (payout) VALUES ('{P1}')",
            schema.name
        ))
        .await;
    let table = PgTable::new(&schema.name, "LedgerEntries")
        .unwrap()
        .with_state_column("entry-state")
        .unwrap();
    let ledger = PgStore::new(schema.pool.clone(), table);
    let post = FencedWrite::claim()
        .when_state_in([state("open")])
        .set_state(state("posted"));
    let written = ledger.write(&key("1"), token(7), &post).await.unwrap();
    assert_eq!(written.previous_state, Some(state("open")));
    for bad in ["01", "+1", "one", "9223372036854775808"] {
        let err = ledger.write(&key(bad), token(7), &post).await.unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::RecordKey),
            "{bad}: {err:?}"
        );
    }
    let err = ledger.write(&key("2"), token(7), &post).await.unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    schema.drop_schema().await;
}

#[tokio::test]
async fn smallint_and_integer_keys_are_written_within_their_range() {
    let schema = Schema::new().await;
    for (table, ty, too_big) in [
        ("small", "smallint", "32768"),
        ("whole", "integer", "2147483648"),
    ] {
        schema
            .execute(format!(
                "CREATE TABLE \"{0}\".{table} (id {ty} PRIMARY KEY, fence bigint NOT NULL \
                 DEFAULT 0, state text); INSERT INTO \"{0}\".{table} (id, state) VALUES \
                 (-7, 'pending')",
                schema.name
            ))
            .await;
        let store = PgStore::new(
            schema.pool.clone(),
            PgTable::new(&schema.name, table).unwrap(),
        );
        let claim = FencedWrite::claim().set_state(state("sending"));
        let written = store.write(&key("-7"), token(33), &claim).await.unwrap();
        assert_eq!(written.previous_state, Some(state("pending")), "{ty}");
        let row = store.read(&key("-7")).await.unwrap().unwrap();
        assert_eq!(
            (row.fence, row.state),
            (Some(token(33)), Some(state("sending")))
        );
        let err = store
            .write(&key(too_big), token(33), &claim)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::RecordKey),
            "{ty} {too_big}: {err:?}"
        );
    }
    schema.drop_schema().await;
}

#[tokio::test]
async fn an_unsupported_key_type_and_a_folded_name_are_explained() {
    let schema = Schema::new().await;
    schema
        .execute(format!(
            "CREATE TABLE \"{0}\".amounts (id numeric PRIMARY KEY, fence bigint NOT NULL DEFAULT 0, \
             state text); CREATE TABLE \"{0}\".MixedUnquoted (id text PRIMARY KEY, \
             fence bigint NOT NULL DEFAULT 0, state text)",
            schema.name
        ))
        .await;
    let amounts = PgStore::new(
        schema.pool.clone(),
        PgTable::new(&schema.name, "amounts").unwrap(),
    );
    let err = amounts
        .write(&key("1"), token(1), &FencedWrite::claim())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::Identifier),
        "{err:?}"
    );
    assert!(err.to_string().contains("numeric"), "{err}");

    let mixed = PgStore::new(
        schema.pool.clone(),
        PgTable::new(&schema.name, "MixedUnquoted").unwrap(),
    );
    let err = mixed
        .write(&key("1"), token(1), &FencedWrite::claim())
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(message.contains("folds"), "{message}");
    assert!(message.contains("mixedunquoted"), "{message}");
    assert!(!message.contains("create_if_missing"), "{message}");

    // The other way round: a table created with quotes ("Refunds"), named here in lower case.
    // The hint names the existing table, and never suggests creating a second one.
    schema
        .execute(format!(
            "CREATE TABLE \"{0}\".\"Refunds\" (id text PRIMARY KEY, fence bigint, state text)",
            schema.name
        ))
        .await;
    let lower = PgStore::new(
        schema.pool.clone(),
        PgTable::new(&schema.name, "refunds").unwrap(),
    );
    let message = lower
        .write(&key("1"), token(1), &FencedWrite::claim())
        .await
        .unwrap_err()
        .to_string();
    assert!(message.contains("\"Refunds\""), "{message}");
    assert!(message.contains("differing only in case"), "{message}");
    assert!(!message.contains("create_if_missing"), "{message}");
    schema.drop_schema().await;
}

#[tokio::test]
async fn writes_the_table_cannot_carry_are_refused_before_sending() {
    let schema = Schema::new().await;
    let payouts = payouts(&schema).await;
    let lifecycle = payout_lifecycle();
    let cases = [
        PgWrite::new(lifecycle.claim()).set("no_such", 1).unwrap(),
        PgWrite::new(lifecycle.claim())
            .set("status", "paid")
            .unwrap(),
        PgWrite::new(lifecycle.claim().set_payload(b"x".to_vec())),
    ];
    let (source, resource) = fencing_testkit::issued_up_to(5).await;
    for write in &cases {
        let err = payouts
            .write_in(
                &mut payouts.pool().acquire().await.unwrap(),
                &Holder::new(&resource, token(5), &source),
                &key(P1),
                write,
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidInput(e) if e.kind() == InputKind::Write),
            "{err:?}"
        );
    }
    assert!(
        PgWrite::new(lifecycle.claim())
            .set("gateway_ref", "a")
            .unwrap()
            .set("gateway_ref", "b")
            .is_err()
    );
    assert!(
        PgWrite::new(lifecycle.claim())
            .set("gateway_ref", "a\0b")
            .is_err()
    );
    let fence = sqlx::query_scalar::<_, i64>(AssertSqlSafe(format!(
        "SELECT max(fence) FROM \"{}\".payouts",
        schema.name
    )))
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    assert_eq!(fence, 0, "nothing was written");
    schema.drop_schema().await;
}

#[tokio::test]
async fn after_a_batch_claim_only_records_in_flight_before_it_are_looked_up() {
    let schema = Schema::new().await;
    let payouts = payouts(&schema).await;
    let lifecycle = payout_lifecycle();
    // P2 was in flight under an older holder.
    payouts
        .write(&key(P2), token(3), &lifecycle.claim())
        .await
        .unwrap();
    let (source, resource) = fencing_testkit::issued_up_to(33).await;
    let mine = token(33);
    let holder = Holder::new(&resource, mine, &source);
    let claimed = payouts
        .write_together(&holder, &[key(P1), key(P2)], &lifecycle.claim())
        .await
        .unwrap();
    assert_eq!(claimed.written[0].record.payload, Vec::<u8>::new());
    let gateway = RecordingEffect::new();
    for written in &claimed.written {
        let outcome = holder
            .run_effect_then(
                &payouts,
                EffectStart::Claimed(written),
                &lifecycle,
                &gateway,
                async |_: &u32| {
                    holder
                        .write(&payouts, &written.record.key, &lifecycle.confirm())
                        .await
                        .map(drop)
                },
            )
            .await
            .unwrap();
        assert!(matches!(outcome, EffectOutcome::Performed(_)));
    }
    assert_eq!(
        gateway.lookups(),
        1,
        "only P2 was in flight before the claim"
    );
    assert_eq!(gateway.perform_calls(), 2);
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_write_in_the_callers_transaction_tells_a_regression_from_a_newer_holder() {
    let schema = Schema::new().await;
    let payouts = payouts(&schema).await;
    let lifecycle = payout_lifecycle();
    // The row carries fence 40, above anything this source has issued: its counter went back.
    payouts
        .write(&key(P1), token(40), &lifecycle.claim())
        .await
        .unwrap();
    let (source, resource) = fencing_testkit::issued_up_to(33).await;
    let mine = token(33);
    let holder = Holder::new(&resource, mine, &source);
    let mut tx = schema.pool.begin().await.unwrap();
    let err = payouts
        .write_in(&mut tx, &holder, &key(P1), &lifecycle.claim())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::TokenRegression { .. }), "{err:?}");
    drop(tx);
    assert!(
        source.current(&resource).await.unwrap() >= Some(token(40)),
        "the source was raised past the fence found"
    );
    // Under a source that did issue 40, the same refusal is a newer holder.
    let err = payouts
        .write_in(
            &mut schema.pool.acquire().await.unwrap(),
            &Holder::new(&resource, mine, &source),
            &key(P1),
            &lifecycle.claim(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced { .. }), "{err:?}");
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_value_its_column_cannot_hold_fails_the_whole_statement_and_writes_nothing() {
    let schema = Schema::new().await;
    let payouts = payouts(&schema).await;
    let lifecycle = payout_lifecycle();
    payouts
        .write(&key(P1), token(7), &lifecycle.claim())
        .await
        .unwrap();
    let confirm = PgWrite::new(lifecycle.confirm())
        .set("gateway_ref", "re_1")
        .unwrap()
        .set("amount_cents", "seventy")
        .unwrap();
    let (source, resource) = fencing_testkit::issued_up_to(7).await;
    let err = payouts
        .write_in(
            &mut payouts.pool().acquire().await.unwrap(),
            &Holder::new(&resource, token(7), &source),
            &key(P1),
            &confirm,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err:?}");
    let row = sqlx::query(AssertSqlSafe(format!(
        "SELECT status, gateway_ref IS NULL, amount_cents FROM \"{}\".payouts WHERE id = '{P1}'",
        schema.name
    )))
    .fetch_one(&schema.pool)
    .await
    .unwrap();
    assert_eq!(
        row.get::<String, _>(0),
        "sending",
        "the confirm did not apply"
    );
    assert!(row.get::<bool, _>(1), "nor did the other column");
    assert_eq!(row.get::<i64, _>(2), 7025);
    schema.drop_schema().await;
}

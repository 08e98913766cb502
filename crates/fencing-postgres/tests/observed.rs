//! Writes made outside `Holder::write` are reported like any fenced write: one in the caller's
//! transaction and a batch write of many rows, each record with its outcome. Alone in its test
//! binary (see `fencing_testkit::events`).

mod common;

use common::Schema;
use fencing_core::adapter::{HolderExt, StoreWrites};
use fencing_core::{
    FencedStore, FencedWrite, FencingToken, Holder, Lifecycle, MemoryTokenSource, RecordKey,
    ResourceName, TokenSource,
};
use fencing_testkit::events::{capture, line};

#[test]
fn writes_in_the_callers_transaction_and_batch_writes_are_reported_per_record() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (store_name, events) = capture(&runtime, async {
        let schema = Schema::new().await;
        let store = schema.store();
        let key = RecordKey::new("r_815").unwrap();
        let lifecycle = Lifecycle::default();
        let source = MemoryTokenSource::new();
        let resource = ResourceName::new("settle:m_4471").unwrap();
        let newer = source
            .advance_to(&resource, FencingToken::new(34).unwrap())
            .await
            .unwrap();
        let create = FencedWrite::claim().set_state(lifecycle.in_flight().clone());
        store.write(&key, newer, &create).await.unwrap();
        let stale = Holder::new(&resource, FencingToken::new(33).unwrap(), &source);
        let mut tx = schema.pool.begin().await.unwrap();
        store
            .write_in(&mut tx, &stale, &key, &lifecycle.confirm())
            .await
            .unwrap_err();
        drop(tx);

        // A batch write of three rows: two pending ones claimed, one already sent skipped.
        let pending = FencedWrite::claim().set_state(lifecycle.pending().clone());
        let done = FencedWrite::claim().set_state(lifecycle.done().clone());
        let keys: Vec<_> = ["r_1", "r_2", "r_3"]
            .map(|k| RecordKey::new(k).unwrap())
            .to_vec();
        store.write(&keys[0], newer, &pending).await.unwrap();
        store.write(&keys[1], newer, &pending).await.unwrap();
        store.write(&keys[2], newer, &done).await.unwrap();
        let holder = Holder::new(&resource, newer, &source);
        let many = store
            .write_together(&holder, &keys, lifecycle.claim())
            .await
            .unwrap();
        assert_eq!(many.written.len(), 2);
        let name = store.name().to_owned();
        schema.drop_schema().await;
        name
    });
    let refused = line(&events, "fenced write refused: a newer holder");
    for field in [
        "WARN".to_owned(),
        format!("store=\"{store_name}\""),
        "token=33".to_owned(),
        "kind=\"holder_only\"".to_owned(),
        "found=34".to_owned(),
    ] {
        assert!(refused.contains(&field), "{field} missing from: {refused}");
    }
    for (record, outcome) in [
        ("r_1", "accepted"),
        ("r_2", "accepted"),
        ("r_3", "state_mismatch"),
    ] {
        let event = events.lines().find(|l| {
            l.contains(&format!("record=\"{record}\""))
                && l.contains("token=34")
                && l.contains("kind=\"claim\"")
                && l.contains(&format!("outcome=\"{outcome}\""))
        });
        assert!(
            event.is_some(),
            "no {outcome} event for the batch write of {record}:\n{events}"
        );
    }
}

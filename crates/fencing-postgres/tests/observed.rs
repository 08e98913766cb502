//! A write in the caller's transaction is reported like any fenced write. Alone in its test
//! binary: `tracing` caches per call site whether anyone listens, and tests running beside it
//! without a subscriber could make it decide nobody does.

mod common;

use std::io;
use std::sync::{Arc, Mutex};

use common::Schema;
use fencing_core::{
    Fence, FencedStore, FencedWrite, FencingToken, Lifecycle, MemoryTokenSource, RecordKey,
    ResourceName, TokenSource,
};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_write_in_the_callers_transaction_is_reported_with_its_outcome() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        // Plain text whatever features the workspace's other crates turn on.
        .with_ansi(false)
        .with_writer({
            let captured = captured.clone();
            move || captured.clone()
        })
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store_name = tracing::subscriber::with_default(subscriber, || {
        runtime.block_on(async {
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
            let stale = Fence::new(&resource, FencingToken::new(33).unwrap(), &source);
            let mut tx = schema.pool.begin().await.unwrap();
            store
                .write_in(&mut *tx, &stale, &key, &lifecycle.confirm())
                .await
                .unwrap_err();
            drop(tx);
            let name = store.name().to_owned();
            schema.drop_schema().await;
            name
        })
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let refused = text
        .lines()
        .find(|l| l.contains("fenced write refused"))
        .unwrap_or_else(|| panic!("no refusal reported:\n{text}"));
    for field in [
        "WARN".to_owned(),
        format!("store=\"{store_name}\""),
        "token=33".to_owned(),
        "kind=\"holder_only\"".to_owned(),
        "found=34".to_owned(),
    ] {
        assert!(refused.contains(&field), "{field} missing from: {refused}");
    }
}

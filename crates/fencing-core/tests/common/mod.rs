//! The scenario both telemetry tests watch. Each test binary watches it alone: `tracing`
//! caches per call site whether anyone listens, and a test running beside it without a
//! subscriber could make it decide nobody does.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::{
    BoxError, FencedBatch, FencedStore, Lease, Lifecycle, MemoryLease, MemoryStore, Record,
    RecordKey, ResourceName, RetryPolicy, SideEffect, Ttl, acquire, async_trait,
};

struct Gateway;

#[async_trait]
impl SideEffect for Gateway {
    type Receipt = ();
    async fn lookup(&self, _: &RecordKey) -> Result<Option<()>, BoxError> {
        Ok(None)
    }
    async fn perform(&self, _: &RecordKey, _: &Record) -> Result<(), BoxError> {
        Ok(())
    }
}

pub(crate) const PAYLOAD: &[u8] = b"SECRET-CARD-4111";

/// Worker A claims r_815 and stalls past its TTL; B takes it over and confirms; A's confirm is
/// refused and its batch aborts.
pub(crate) async fn takeover_and_stale_confirm() {
    let lease: Arc<dyn Lease> = Arc::new(MemoryLease::new());
    let store = MemoryStore::new("refunds");
    let key = RecordKey::new("r_815").unwrap();
    let lifecycle = Lifecycle::default();
    store.insert_unfenced(
        key.clone(),
        Some(lifecycle.pending().clone()),
        PAYLOAD.to_vec(),
    );
    let refunds: Arc<dyn FencedStore> = Arc::new(store);
    let resource = ResourceName::new("settle:m_4471").unwrap();
    let ttl = Ttl::from_secs(30).unwrap();
    let retry = RetryPolicy::once();

    let a = acquire(&*lease, &resource, ttl, &retry).await.unwrap();
    let a = FencedBatch::new(lease.clone(), a, [refunds.clone()]).unwrap();
    a.holder()
        .write(&refunds, &key, &lifecycle.claim())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(31)).await;

    let b = acquire(&*lease, &resource, ttl, &retry).await.unwrap();
    let b = FencedBatch::new(lease.clone(), b, [refunds.clone()]).unwrap();
    b.holder()
        .run_effect(&refunds, &key, &lifecycle, &Gateway)
        .await
        .unwrap();

    a.holder()
        .write(&refunds, &key, &lifecycle.confirm())
        .await
        .unwrap_err();
    a.finish().await.unwrap_err();
    b.finish().await.unwrap();
}

pub(crate) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

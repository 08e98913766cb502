//! The conformance suite every `fencing` adapter runs, and the fault injection it uses.
//!
//! **Not yet stable**: the suite grows with every guarantee the core contracts gain, and its
//! signatures may change between minor versions until 1.0. Pin the version an adapter is
//! tested against.
//!
//! * [`conformance`]: one function per guarantee of the core contracts, generic over the
//!   implementation, so the same suite runs against the in-memory stores, each adapter's
//!   server, and `Box<dyn …>` / `Arc<dyn …>` of either.
//! * [`events`]: the `tracing` events of a run, captured as text.
//! * [`faults`]: a store decorator that loses answers and requests, and a recording side
//!   effect, for every store.
//! * [`cancellation`]: a decorator that turns every call into two await points, and a driver
//!   that drops an operation at each of them in turn.

use std::sync::Arc;

use fencing_core::{
    FencedBatch, FencedStore, FencingToken, Lease, MemoryLease, MemoryTokenSource, ResourceName,
    TokenSource, Ttl,
};

pub mod cancellation;
#[cfg(feature = "conformance")]
pub mod conformance;
pub mod events;
pub mod faults;

/// Whether the suite's writers present their own tokens: the control runs turn the fence off
/// (defined with the simulation, whose runs take it too).
pub use fencing_simulation::Fencing;

/// A name no other test uses, so tests can share one server: `prefix` plus a random suffix.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &fencing_core::OwnerId::random().as_str()[..12]
    )
}

/// A token source that has issued every token up to `n` for `settle:m_4471`, and that
/// resource: what a [`fencing_core::Holder`] with token `n` (or below, for a stale holder)
/// needs in a test that writes without a lease, so that a refusal by a fence up to `n` is a
/// newer holder's, not a counter gone backwards.
pub async fn issued_up_to(n: u64) -> (MemoryTokenSource, ResourceName) {
    let source = MemoryTokenSource::new();
    let resource = ResourceName::new("settle:m_4471").expect("a valid name");
    let token = FencingToken::new(n).expect("a token from 1");
    source
        .advance_to(&resource, token)
        .await
        .expect("a memory counter advances");
    (source, resource)
}

/// A batch over `store` alone, under a fresh in-memory lease of `settle:m_4471` (30 s): what a
/// test of a store's writes in a batch needs when the lease is not what it tests.
pub async fn batch_over(store: Arc<dyn FencedStore>) -> FencedBatch {
    let lease = Arc::new(MemoryLease::new());
    let resource = ResourceName::new("settle:m_4471").expect("a valid name");
    let ttl = Ttl::from_secs(30).expect("a valid TTL");
    let guard = lease
        .try_acquire(&resource, ttl)
        .await
        .expect("a memory lease answers")
        .expect("a fresh lease is free");
    FencedBatch::new(lease, guard, [store]).expect("one store is a valid store set")
}

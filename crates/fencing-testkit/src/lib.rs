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
//! * [`settlement`]: the worked example's settlement as a deterministic simulation in virtual
//!   time (merchant `m_4471`'s 1,200 refunds, workers that pause, a gateway with or without
//!   idempotency keys, and a checker that counts what went wrong), run by the `settlement`
//!   example and the scenario tests.
//! * [`faults`]: a store decorator that loses answers and requests, and a recording side
//!   effect, for every store.
//! * [`cancellation`]: a decorator that turns every call into two await points, and a driver
//!   that drops an operation at each of them in turn.

pub mod cancellation;
pub mod conformance;
pub mod events;
pub mod faults;
pub mod settlement;

/// A name no other test uses, so tests can share one server: `prefix` plus a random suffix.
pub fn unique_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

use fencing_core::{FencingToken, LeaseGuard, MemoryTokenSource, ResourceName, TokenSource};

/// A token source that has issued every token up to `n` for `settle:m_4471`, and that
/// resource: what a [`fencing_core::Fence`] with token `n` (or below, for a stale holder)
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

/// Whether writers present their lease's token, or all present the same one.
///
/// `Off` is what a lease without a fencing token amounts to: every write passes the store's
/// check, and only the TTL stands between two holders. Tests run it to prove that their
/// checkers catch the damage the fence prevents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fencing {
    /// Each write presents its holder's own token.
    On,
    /// Every write presents token 1, so no store can tell holders apart.
    Off,
}

impl Fencing {
    /// The token a holder of `guard` presents.
    pub fn token_for(self, guard: &LeaseGuard) -> FencingToken {
        match self {
            Fencing::On => guard.token(),
            Fencing::Off => FencingToken::MIN,
        }
    }
}

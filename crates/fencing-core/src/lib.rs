//! The core of `fencing`: fencing tokens that every data store checks on every write.
//!
//! A lease with a TTL keeps a crashed worker from blocking a resource forever; it does not
//! stop a worker that paused past its TTL from writing beside the new holder. A
//! [`FencingToken`], issued with every acquisition and rising each time, does, when each
//! store checks it on every write the lease protects:
//!
//! * [`Lease`] acquires a resource for a [`Ttl`] and hands out a [`LeaseGuard`] with a token;
//!   [`LeaseRenewal`] optionally keeps it alive (liveness only: the fence is what is safe).
//! * [`TokenSource`] is the per-resource counter behind the tokens; [`FenceFloor`] and
//!   [`seed_from_floors`] keep it from going backwards.
//! * [`FencedStore`] applies the two kinds of [`FencedWrite`]: a claim (`fence <= token`) and a
//!   holder-only write (`fence == token`).
//! * [`Holder`] presents a token and tells a stale holder ([`Error::Fenced`]) from a counter
//!   that went backwards ([`Error::TokenRegression`]); [`Holder::run_effect`] runs the
//!   claim → side effect → confirm sequence with an idempotency key.
//! * [`FencedBatch`] runs one acquisition across several stores and stops at the first refusal.
//! * [`MemoryLease`], [`MemoryTokenSource`] and [`MemoryStore`] implement every contract in
//!   memory.
//!
//! That is a job's surface. What an adapter author needs besides (compare-and-swap over
//! versions, the object envelope, epochs, the input checks, the clock) is in [`adapter`].

// Bottom-up, one folder per layer, each importing only the ones above it in this list
// (docs/adapters.md, "Layers"): values; contracts; the protocol's pure rules; telemetry; the
// compare-and-swap engine; what a holder writes with; the in-memory implementations; and last
// the adapter author's surface, which only re-exports. Each folder's `mod.rs` lays its own
// modules out the same way.
mod value;

mod contract;

mod protocol;

mod telemetry;

mod cas;

mod holder;

mod memory;

pub mod adapter;

/// The attribute every implementation of this crate's traits needs, a job's [`SideEffect`]
/// included (re-exported so that implementors need no dependency of their own).
pub use async_trait::async_trait;
pub use contract::extras::WriteWith;
pub use contract::guard::{LeaseGuard, OwnerId};
pub use contract::lease::{Lease, LeaseStatus};
pub use contract::store::{FenceCheck, FencedStore, FencedWrite, Record, Written};
pub use contract::token_source::{
    CounterHistory, EpochSource, FenceFloor, RateBound, TokenSource, seed_from_floors,
};
pub use holder::batch::{BatchScope, FencedBatch};
pub use holder::effect::{EffectOutcome, EffectStart, Lifecycle, SideEffect};
pub use holder::latch::MismatchPolicy;
pub use holder::pipeline::{Pipeline, RecordWrites, Settled};
pub use holder::renewal::LeaseRenewal;
pub use holder::retry::{RetryPolicy, acquire};
pub use holder::write::Holder;
pub use memory::{MemoryEpochSource, MemoryLease, MemoryStore, MemoryTokenSource};
pub use value::error::{BoxError, Error, Failure, FoundFence, NoAnswer, Result};
pub use value::input::{InputKind, InvalidInput};
pub use value::name::{RecordKey, ResourceName, State};
pub use value::outcome::{Finished, Mismatch, SkippedRecord};
pub use value::token::FencingToken;
pub use value::ttl::Ttl;

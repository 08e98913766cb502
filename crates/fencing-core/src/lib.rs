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
//! * [`Fence`] presents a token and tells a stale holder ([`Error::Fenced`]) from a counter
//!   that went backwards ([`Error::TokenRegression`]); [`Fence::run_effect`] runs the
//!   claim → side effect → confirm sequence with an idempotency key.
//! * [`FencedBatch`] runs one acquisition across several stores and stops at the first refusal.
//! * [`MemoryLease`], [`MemoryTokenSource`] and [`MemoryStore`] implement every contract in
//!   memory.
//!
//! That is a job's surface. What an adapter author needs besides (compare-and-swap over
//! versions, the object envelope, epochs, the input checks, the clock) is in [`adapter`].

// Bottom-up, each layer importing only the ones above it in this list (docs/adapters.md,
// "Layers"): values; contracts; the protocol's pure rules; telemetry; the fence and its
// neighbours; the effect helper; the batch; the in-memory implementations; and last the
// adapter author's surface, which only re-exports.
mod clock;
mod error;
mod input;
mod name;
mod outcome;
mod random;
mod token;
mod ttl;

mod guard;
mod lease;
mod store;
mod token_source;

mod rules;

mod telemetry;

mod cas;
mod cas_check;
mod codec;
mod envelope;
mod epoch;
mod fence;
mod latch;
mod renewal;
mod retry;

mod effect;

mod batch;

mod pipeline;

mod memory;

pub mod adapter;

/// The attribute every implementation of this crate's traits needs, a job's [`SideEffect`]
/// included (re-exported so that implementors need no dependency of their own).
pub use async_trait::async_trait;
pub use batch::{BatchScope, FencedBatch};
pub use effect::{EffectOutcome, EffectStart, Lifecycle, SideEffect};
pub use error::{BoxError, Error, FoundFence, Result};
pub use fence::Fence;
pub use guard::{LeaseGuard, OwnerId};
pub use input::{InputKind, InvalidInput};
pub use latch::MismatchPolicy;
pub use lease::{Lease, LeaseStatus};
pub use memory::{MemoryLease, MemoryStore, MemoryTokenSource};
pub use name::{RecordKey, ResourceName, State};
pub use outcome::{Finished, Mismatch, SkippedRecord};
pub use pipeline::{Pipeline, RecordWrites, Settled};
pub use renewal::LeaseRenewal;
pub use retry::{RetryPolicy, acquire};
pub use store::{FenceCheck, FencedStore, FencedWrite, Record, Written};
pub use token::FencingToken;
pub use token_source::{CounterHistory, FenceFloor, RateBound, TokenSource, seed_from_floors};
pub use ttl::Ttl;

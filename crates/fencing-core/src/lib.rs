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
//! * [`CasStore`] makes a fenced store of any store that can only swap on a version (an object
//!   store), from its read and its conditional put ([`VersionedStore`]).
//! * [`MemoryLease`], [`MemoryTokenSource`] and [`MemoryStore`] implement every contract in
//!   memory; [`Clock`] lets a whole scenario run in virtual time.

mod batch;
mod cas;
mod clock;
mod effect;
pub mod envelope;
pub mod epoch;
mod error;
mod fence;
mod guard;
mod input;
mod lease;
pub mod memory;
mod name;
mod renewal;
mod retry;
mod store;
mod telemetry;
mod token;
mod token_source;
mod ttl;

/// The attribute every implementation of this crate's traits needs (re-exported so that
/// implementors need no dependency of their own).
pub use async_trait::async_trait;
pub use batch::{FencedBatch, Finished, Mismatch, MismatchPolicy, SkippedRecord, StoreRef};
pub use cas::{CasStore, PutOutcome, Versioned, VersionedStore, WriteId};
pub use clock::{Clock, TokioClock};
pub use effect::{Claim, EffectOutcome, Lifecycle, SideEffect};
pub use error::{BoxError, Error, FoundFence, RequestEffect, Result};
pub use fence::{Fence, is_regression};
pub use guard::{LeaseGuard, OwnerId};
pub use input::{InputKind, InvalidInput, check_store_name, is_refused_char, refused_char_ranges};
pub use lease::{Lease, LeaseStatus};
pub use memory::{MemoryLease, MemoryStore, MemoryTokenSource, MemoryVersionedStore};
pub use name::{RecordKey, ResourceName, State};
pub use renewal::LeaseRenewal;
pub use retry::{RetryPolicy, acquire};
pub use store::{FenceCheck, FencedStore, FencedWrite, Record, RecordOutcomes, Written};
pub use token::FencingToken;
pub use token_source::{FenceFloor, TokenSource, seed_from_floors};
pub use ttl::Ttl;

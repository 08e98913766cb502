//! 0.1's names that 0.2 moved, each kept one release as a deprecated alias where 0.1 had it:
//! code written against 0.1 compiles, with a warning that names where each one is now,
//! instead of an error without a hint. CHANGELOG.md's "Upgrading" lists every change; the
//! names here are the ones a job writes (the prelude's, and `Fence`).
//!
//! A job of 0.1 compiles, warnings allowed:
//!
//! ```
//! #![allow(deprecated)]
//! use fencing::prelude::*;
//! fn claim(fence: &Fence) -> (FencedWrite, State, RetryPolicy, fencing::FencingToken) {
//!     let state: State = State::new("sending").unwrap();
//!     (Lifecycle::default().claim(), state, RetryPolicy::default(), fence.token())
//! }
//! ```
//!
//! and each of those names is a warning (here denied, so an error):
//!
//! ```compile_fail
//! #![deny(deprecated)]
//! use fencing::prelude::*;
//! fn claim(fence: &Fence) -> (FencedWrite, State, RetryPolicy, fencing::FencingToken) {
//!     let state: State = State::new("sending").unwrap();
//!     (Lifecycle::default().claim(), state, RetryPolicy::default(), fence.token())
//! }
//! ```

use fencing_core::{
    FenceFloor, FencingToken, Lease, LeaseGuard, ResourceName, Result, TokenSource, Ttl,
};

/// Deprecated aliases in the prelude of core types that left it for the crate root.
macro_rules! left_the_prelude {
    ($($name:ident => $note:literal,)*) => {$(
        #[doc = concat!("`fencing::", stringify!($name), "`, which 0.1's prelude brought.")]
        #[deprecated(since = "0.2.0", note = $note)]
        pub type $name = fencing_core::$name;
    )*};
}

left_the_prelude! {
    FenceCheck => "left the prelude: `use fencing::FenceCheck;`",
    FencedWrite => "left the prelude: `use fencing::FencedWrite;`",
    FoundFence => "left the prelude: `use fencing::FoundFence;`",
    InputKind => "left the prelude: `use fencing::InputKind;`",
    InvalidInput => "left the prelude: `use fencing::InvalidInput;`",
    LeaseRenewal => "left the prelude: `use fencing::LeaseRenewal;`",
    LeaseStatus => "left the prelude: `use fencing::LeaseStatus;`",
    MemoryTokenSource => "left the prelude: `use fencing::MemoryTokenSource;`",
    Mismatch => "left the prelude: `use fencing::Mismatch;`",
    MismatchPolicy => "left the prelude: `use fencing::MismatchPolicy;`",
    OwnerId => "left the prelude: `use fencing::OwnerId;`",
    RetryPolicy => "left the prelude: `use fencing::RetryPolicy;`",
    SkippedRecord => "left the prelude: `use fencing::SkippedRecord;`",
    State => "left the prelude: `use fencing::State;`",
    Written => "left the prelude: `use fencing::Written;`",
}

/// `fencing::EffectStart`, which 0.1's prelude brought.
#[deprecated(
    since = "0.2.0",
    note = "left the prelude: `use fencing::EffectStart;`"
)]
pub type EffectStart<'a> = fencing_core::EffectStart<'a>;

/// `fencing::Pipeline`, which 0.1's prelude brought.
#[deprecated(since = "0.2.0", note = "left the prelude: `use fencing::Pipeline;`")]
pub type Pipeline<'b, E> = fencing_core::Pipeline<'b, E>;

/// `fencing::Settled`, which 0.1's prelude brought.
#[deprecated(since = "0.2.0", note = "left the prelude: `use fencing::Settled;`")]
pub type Settled<R> = fencing_core::Settled<R>;

/// The handle a holder writes with, as 0.1 named it.
#[deprecated(since = "0.2.0", note = "renamed `Holder` (`use fencing::Holder;`)")]
pub type Fence = fencing_core::Holder;

/// [`fencing_core::acquire`], which 0.1's prelude brought.
#[deprecated(since = "0.2.0", note = "left the prelude: `use fencing::acquire;`")]
pub async fn acquire<L: Lease + ?Sized>(
    lease: &L,
    resource: &ResourceName,
    ttl: Ttl,
    retry: &fencing_core::RetryPolicy,
) -> Result<LeaseGuard> {
    fencing_core::acquire(lease, resource, ttl, retry).await
}

/// [`fencing_core::seed_from_floors`], which 0.1's prelude brought.
#[deprecated(
    since = "0.2.0",
    note = "left the prelude: `use fencing::seed_from_floors;`"
)]
pub async fn seed_from_floors(
    source: &dyn TokenSource,
    resource: &ResourceName,
    floors: &[&dyn FenceFloor],
) -> Result<Option<FencingToken>> {
    fencing_core::seed_from_floors(source, resource, floors).await
}

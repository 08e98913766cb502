//! The worked example's world as a deterministic simulation in virtual time: merchant
//! `m_4471`'s 1,200 refunds, a queue handing the job to workers that pause past their lease,
//! a gateway with or without idempotency keys, and an audit that counts what went wrong. The
//! job itself is the caller's ([`settlement::Job`]): the `settlement` example writes it with
//! the library, `fencing-timeline` draws its runs, and the scenario tests check them, with
//! fences on and, as a control, off ([`Fencing::Off`], a [`SubstitutedLease`]).
//!
//! Not part of the library a job uses: it is how the repository shows and checks what the
//! fence does, on the in-memory stores, in seconds.

use fencing_core::{FencingToken, LeaseGuard};

pub mod settlement;
mod substitute;

pub use substitute::SubstitutedLease;

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

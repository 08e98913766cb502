//! Values: tokens, names, TTLs, errors, the clock. Everything above is built from these;
//! nothing here knows a store or a lease.
//!
//! Laid out bottom-up: a module imports only those of its own group or one above it here.

pub(crate) mod clock;
pub(crate) mod input;
pub(crate) mod random;

pub(crate) mod name;
pub(crate) mod spelling;
pub(crate) mod token;
pub(crate) mod ttl;

pub(crate) mod error;
pub(crate) mod outcome;

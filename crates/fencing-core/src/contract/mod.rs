//! The contracts every backend implements (a lease and its guard, a fenced store, a token
//! source), each with its `# Contract`.
//!
//! Laid out bottom-up: a module imports only those of its own group or one above it here.

pub(crate) mod token_source;

pub(crate) mod guard;

pub(crate) mod lease;
pub(crate) mod store;

pub(crate) mod extras;

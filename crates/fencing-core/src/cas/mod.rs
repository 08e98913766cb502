//! Fenced writes for stores that can only compare and swap a whole object: what an object
//! holds, the envelope that carries the fence inside its body, the codecs, the loop over
//! versions, and the check that a backend's conditional writes are real.
//!
//! Laid out bottom-up: a module imports only those of its own group or one above it here.

pub(crate) mod object;

pub(crate) mod envelope;

pub(crate) mod codec;

pub(crate) mod engine;

pub(crate) mod check;

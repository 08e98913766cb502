//! Fenced writes for stores that can only compare and swap a whole object: the loop over
//! versions, the envelope that carries the fence inside the object, its codecs, and the check
//! that a backend's conditional writes are real.
//!
//! Laid out bottom-up: a module imports only those of its own group or one above it here.

pub(crate) mod engine;

pub(crate) mod envelope;

pub(crate) mod check;
pub(crate) mod codec;

//! What a holder writes with: the holder (its token, checked against the source that issued
//! it), the effect helper, the batch and its latch, the pipeline, and the lease's renewal and
//! retries.
//!
//! Laid out bottom-up: a module imports only those of its own group or one above it here.

pub(crate) mod latch;
pub(crate) mod renewal;
pub(crate) mod retry;

pub(crate) mod write;

pub(crate) mod effect;

pub(crate) mod batch;
pub(crate) mod pipeline;

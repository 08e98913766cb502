//! `fencing`: leases that are actually safe, because every data store checks a fencing token
//! on every write.
//!
//! This facade re-exports [`fencing_core`] (tokens, contracts, in-memory implementations).
//! Store adapters are added behind cargo features as they arrive.

pub use fencing_core::*;

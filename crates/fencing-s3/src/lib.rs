//! S3 for `fencing`: fenced object writes by conditional `PUT`, with the fence inside the
//! object, so the ETag ABA trap cannot lower it.
//!
//! S3 compares ETags, not numbers. [`S3Store`] is the core's compare-and-swap loop
//! ([`fencing_core::adapter::CasStore`]) on S3's two calls: `GetObject` returns the envelope
//! ([`fencing_core::adapter::envelope`]: fence, state, write id, payload) and its ETag; `PutObject` with
//! `If-Match` (or `If-None-Match: *`) stores the next one only if nothing changed in between.
//! Fence and state are mirrored into user metadata (`x-amz-meta-fence`, `x-amz-meta-state`,
//! ASCII-safe) for people browsing the bucket; the body is what counts.
//!
//! * [`S3Bucket`]: the bucket and key prefix, names checked as the service checks them.
//! * [`S3Store`]: the fenced store, and a fenced delete ([`S3Store::delete`]); its bodies are
//!   envelopes unless [`S3Store::with_codec`] names another [`ObjectCodec`] ([`JsonCodec`]:
//!   the team's own JSON object, fence, state and write id as three of its fields).
//! * [`S3FenceFloor`]: the highest fence under a prefix, to seed a token source.
//!
//! Every type takes an `aws_sdk_s3::Client` built by the caller (any endpoint, path-style or
//! virtual-hosted, any credentials and HTTP stack): this crate forces no TLS stack and no
//! `aws-config` on anyone.

mod bucket;
mod error;
mod floor;
mod objects;
mod store;

pub use bucket::{MAX_OBJECT_KEY_BYTES, S3Bucket};
pub use fencing_core::adapter::{EnvelopeCodec, JsonCodec, ObjectCodec};
pub use floor::S3FenceFloor;
pub use store::S3Store;

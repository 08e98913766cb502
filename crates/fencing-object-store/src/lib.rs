//! `object_store` for `fencing`: fenced writes on any backend whose conditional put supports
//! [`object_store::PutMode::Update`] — the in-memory store, S3 (with ETag matching), Azure
//! Blob Storage, Google Cloud Storage — with the fence inside the object.
//!
//! An object store compares versions (an ETag, a generation), never numbers. [`ObjectStoreStore`]
//! is the core's compare-and-swap loop ([`fencing_core::adapter::CasStore`]) on two calls:
//! `get` returns the object's body (an envelope, [`fencing_core::adapter::envelope`]: fence,
//! state, write id, payload; or the team's own JSON with [`ObjectStoreStore::with_codec`]
//! and [`JsonCodec`]) with its ETag and version, and `put` with `PutMode::Update` (or
//! `PutMode::Create` for a new record) stores the next body only if nothing changed in
//! between. Both the ETag and the version `object_store` reports are kept, since backends
//! differ in which one they match on. S3 ([`fencing-s3`](https://docs.rs/fencing-s3)) runs the
//! same loop, with the same codecs and tombstones.
//!
//! * A backend that cannot update conditionally (the local file system answers
//!   `NotImplemented`) is refused with [`fencing_core::Error::NotSupported`] at the first write,
//!   naming the backend; nothing is ever written unconditionally.
//! * [`ObjectStoreStore::delete`] writes a **tombstone** over the record (a conditional
//!   update like any write): readers see no record, and a write that creates the record
//!   again needs a token at least the fence the tombstone keeps.
//! * An object the codec cannot read is never written over: the write fails naming it.
//!
//! The caller builds the `Arc<dyn ObjectStore>` with the backend and its configuration
//! (`docs/guide.md`, "object_store"); this crate enables no backend of its own.

mod error;
mod objects;
mod store;

pub use fencing_core::adapter::{EnvelopeCodec, JsonCodec, ObjectCodec};
pub use store::ObjectStoreStore;

/// The name [`ObjectStoreStore`] had before every adapter's types followed `<Backend><Role>`.
#[deprecated(since = "0.2.0", note = "renamed `ObjectStoreStore`")]
pub type FencedObjectStore = ObjectStoreStore;

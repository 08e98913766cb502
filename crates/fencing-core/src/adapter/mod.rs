//! What an adapter author uses and a job does not: the pieces for writing a fenced store,
//! lease or token source for another backend (docs/adapters.md).
//!
//! * compare-and-swap over versions ([`CasStore`] over a [`VersionedStore`] of bodies), the
//!   check that a store refuses the puts it must ([`check_conditional_writes`]), the object
//!   [`envelope`] and the codecs that keep a record or its tombstone ([`Contents`]) in an
//!   object's body ([`ObjectCodec`]: [`EnvelopeCodec`], [`JsonCodec`]);
//! * epoch-prefixed tokens ([`epoch`]) and counters bound to server histories ([`history`]);
//! * the input checks every name obeys inside a store
//!   ([`is_refused_char`],
//!   [`refused_char_ranges`],
//!   [`check_store_name`], [`check_request_timeout`]);
//! * the writes a store applies under a bare token ([`StoreWrites`], the supertrait of every
//!   `FencedStore`: what an adapter implements and a `Holder` sends);
//! * the rules a store applies that `Holder` does not ([`is_regression`];
//!   `FencedWrite::decide` and `apply` are methods of the write);
//! * the error rule ([`RequestEffect`] and `Failure` for
//!   `Error::failed_request`, [`Explained`] for a driver's error with a message of its own), the writes an adapter makes outside `Holder::write`
//!   ([`HolderExt`]: `write_by`, `run_write`, `run_write_once`, and [`RecordOutcomes`] for
//!   what a write of many records reports), what a lease records on its guards
//!   ([`LeaseRequest`]: the request as it leaves, made a guard once granted;
//!   [`LeaseGuardExt`]: `new`, `extended`, `lost`), the key check of a write of many records
//!   ([`check_distinct`]), which store a store is ([`StoreIdentity`]), the rows a SQL fence
//!   floor reads ([`FloorFilter`]), and the clock a lease's deadline is measured on
//!   ([`Clock`]).

pub mod envelope {
    //! The envelope: how a fenced record is kept in an object store, fence inside the body.
    //!
    //! An object store compares ETags, and an ETag covers the body alone. With the fence only in
    //! metadata, a newer holder that writes a byte-identical body gets the same ETag, and a stale
    //! holder's `If-Match` on that ETag would succeed and lower the fence. The envelope puts the
    //! fence, the state and a per-write id in the body, ahead of the payload, so every write's body
    //! differs from every other's.
    //!
    //! Format version 1 (`docs/envelope.md` says the same for other languages); integers are
    //! unsigned big-endian:
    //!
    //! | offset | size | field |
    //! | ---: | ---: | --- |
    //! | 0 | 4 | magic `FNCE` |
    //! | 4 | 1 | format version, `1` |
    //! | 5 | 1 | flags: bit 0 the record has a fence, bit 1 it has a state, bit 2 it is a tombstone (no state, no payload); other bits 0 |
    //! | 6 | 8 | fence, `1 ..= 2^63 − 1` when flagged, else 0 |
    //! | 14 | 16 | write id |
    //! | 30 | 1 | state length `n`, `0 ..= 64` (0 when not flagged) |
    //! | 31 | `n` | state, UTF-8, a valid state name |
    //! | 31 + `n` | 8 | payload length `m`, equal to the bytes that follow |
    //! | 39 + `n` | `m` | payload |
    //!
    //! A tombstone ([`encode_tombstone`], [`Contents::Tombstone`](crate::adapter::Contents))
    //! is what a fenced delete leaves: the record is gone, its fence stays.
    //!
    //! [`decode_contents`] (and [`decode`], which reads records only) is total: it never panics
    //! and never allocates more than the input it was given.

    pub use crate::cas::envelope::*;
}

pub mod epoch {
    //! Epoch-prefixed tokens: how a counter that can lose its state (Redis without persistence)
    //! still never issues a token twice.
    //!
    //! A token is `epoch · 2^32 + n`. The fast counter holds the whole number and increments it,
    //! one round trip per token. The epoch comes from a durable [`EpochSource`](crate::EpochSource)
    //! (a PostgreSQL table of epochs) and is taken only when the fast counter is found lost
    //! (missing, bound to another server history) or has used up its epoch's `2^32 − 1`
    //! numbers, once per loss however many clients find it. Every epoch taken after a loss is above every
    //! epoch in use before it, so every token issued after the loss is above every token issued
    //! before it — including tokens whose holders have not written anything yet, which no store's
    //! `MAX(fence)` could reveal.
    //!
    //! The price: one durable write per loss of state (and per `2^32 − 1` tokens), and tokens that
    //! are large numbers from the first acquisition on (epoch 1 starts at `2^32 + 1`).

    pub use crate::protocol::epoch::*;
}

pub mod history {
    //! Counters bound to server histories: the rules a durable token or epoch source keeps so
    //! that a failover, a restore or a crash never issues a token twice, for a counter the new
    //! history holds behind as for one it lacks.

    pub use crate::protocol::history::*;
}

pub use crate::cas::check::{ConditionalPutDefect, check_conditional_writes};
pub use crate::cas::codec::{CodecError, EnvelopeCodec, JsonCodec, ObjectCodec, encode_checked};
pub use crate::cas::engine::{
    CasStore, NewObject, PutOutcome, StoredObject, Versioned, VersionedStore,
};
pub use crate::cas::object::{Contents, WriteId};
pub use crate::contract::extras::{Extras, SqlValue};
pub use crate::contract::guard::{LeaseGuardExt, LeaseRequest};
pub use crate::contract::store::{RecordOutcomes, StoreIdentity, StoreWrites, Via, check_distinct};
pub use crate::contract::token_source::FloorFilter;
pub use crate::holder::retry::contention_pause;
pub use crate::holder::write::HolderExt;
pub use crate::memory::MemoryVersionedStore;
#[doc(inline)]
pub use crate::object_store_front;
pub use crate::protocol::rules::is_regression;
pub use crate::value::clock::{Clock, TokioClock};
pub use crate::value::error::{Explained, RequestEffect};
pub use crate::value::input::{
    check_request_timeout, check_store_name, is_refused_char, refused_char_ranges,
};
pub use crate::value::spelling::{canonical_integer, canonical_uuid};
pub use async_trait::async_trait;

/// The front every object store's public type has over its [`CasStore`], written once: each
/// adapter states its own type and adds what is its own (constructor, accessors, its check of
/// conditional writes).
///
/// Gives `$front`, a struct with one field `cas: CasStore<V>`, what every fenced object store
/// has: [`named`](#method.named), [`with_codec`](#method.with_codec), a holder's
/// [`delete`](#method.delete), and the [`FencedStore`](crate::FencedStore) and
/// [`StoreWrites`](crate::adapter::StoreWrites) of its `CasStore`. `V` has
/// `fn named(self, name: String) -> Self` (the same objects under another store name).
///
/// ```ignore
/// pub struct S3Store {
///     cas: CasStore<S3Objects>,
/// }
/// fencing_core::adapter::object_store_front!(S3Store);
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! object_store_front {
    ($front:ident) => {
        impl $front {
            /// The same store under another name in errors and batches, e.g. `receipts`.
            /// Any text without control or format characters.
            pub fn named(self, name: &str) -> ::std::result::Result<Self, $crate::InvalidInput> {
                $crate::adapter::check_store_name(name)?;
                Ok($front {
                    cas: self.cas.map_inner(|objects| objects.named(name.to_owned())),
                })
            }

            /// The same store, each body in `codec`'s format instead of the envelope: with
            /// [`JsonCodec`]($crate::adapter::JsonCodec), the team's own JSON object with the
            /// fence, state and write id as three fields of it. Whatever the codec, a body is
            /// checked to read back as what it holds before it is written, and an object the
            /// codec cannot read is never written over.
            pub fn with_codec(self, codec: impl $crate::adapter::ObjectCodec + 'static) -> Self {
                $front {
                    cas: self.cas.with_codec(codec),
                }
            }

            /// Deletes `key` as its holder: accepted only with `holder`'s token, the
            /// record's fence. This writes a **tombstone** over the record by a conditional
            /// put on the version just read, never a plain delete (with the object gone, a
            /// stale holder's claim could create the record again under its lower token): the
            /// object stays, holding the fence and no record. Readers
            /// ([`FencedStore::read`]($crate::FencedStore::read)) find no record, a write from
            /// a token below the kept fence is refused as stale
            /// ([`Error::Fenced`]($crate::Error::Fenced)), and only a token at least the fence
            /// meets the record absent (a claim may create it again). A lifecycle rule that
            /// expires tombstones gives that protection up for the records it removes.
            /// Returns the record deleted. A refusal is explained and the outcome reported as
            /// [`Holder::write`]($crate::Holder::write)'s; an ambiguous outcome is settled by
            /// reading the tombstone back, not sent again.
            pub async fn delete(
                &self,
                holder: &$crate::Holder,
                key: &$crate::RecordKey,
            ) -> $crate::Result<$crate::Record> {
                use $crate::adapter::HolderExt as _;
                let attempt = self.cas.delete(key, holder.token());
                holder
                    .run_write_once(self, &[key], &$crate::FencedWrite::holder_only(), attempt)
                    .await
            }
        }

        #[$crate::async_trait]
        impl $crate::FencedStore for $front {
            fn name(&self) -> &str {
                $crate::FencedStore::name(&self.cas)
            }

            async fn read(
                &self,
                key: &$crate::RecordKey,
            ) -> $crate::Result<Option<$crate::Record>> {
                $crate::FencedStore::read(&self.cas, key).await
            }
        }

        #[$crate::async_trait]
        impl $crate::adapter::StoreWrites for $front {
            /// A write on a record deleted by a holder of a higher token is refused as stale
            /// ([`Error::Fenced`]($crate::Error::Fenced), the fence the tombstone keeps);
            /// every other token finds the record absent.
            async fn write(
                &self,
                key: &$crate::RecordKey,
                token: $crate::FencingToken,
                write: &$crate::FencedWrite,
            ) -> $crate::Result<$crate::Written> {
                $crate::adapter::StoreWrites::write(&self.cas, key, token, write).await
            }
        }
    };
}

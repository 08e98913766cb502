//! The front every object store's public type has over its [`CasStore`](crate::adapter::CasStore):
//! written once, each adapter states its own type, its versioned store, and what it adds
//! (constructor, accessors, its check of conditional writes).

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

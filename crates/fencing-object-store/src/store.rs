//! An `object_store` backend (under a path prefix) as a fenced store.

use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::adapter::{CasStore, HolderExt, ObjectCodec, StoreWrites, check_store_name};
use fencing_core::{
    FencedStore, FencedWrite, FencingToken, Holder, InvalidInput, Record, RecordKey, Result,
    Written,
};
use object_store::ObjectStore;
use object_store::path::Path;

use crate::objects::Objects;

/// Fenced records as objects of any `object_store` backend, one per record at
/// `<prefix>/<key>`, each body an envelope that carries the fence, the state and a per-write
/// id ahead of the payload ([`fencing_core::adapter::envelope`]), or the team's own JSON
/// object with those as fields ([`Self::with_codec`]).
///
/// A write is [`CasStore`]'s loop: read the object (body, ETag and version) → decide →
/// `put_opts` with `PutMode::Update` on that version (or `PutMode::Create` for a new record)
/// → on a conflict (the backend's `Precondition`, `AlreadyExists`, or `NotFound` on an
/// update) read and decide again. With the fence and a fresh write id inside the body, no two
/// writes leave the same bytes, so a stale holder's update can never land on a newer holder's
/// byte-identical object.
#[derive(Debug)]
pub struct ObjectStoreStore {
    cas: CasStore<Objects>,
}

impl ObjectStoreStore {
    /// The fenced records under `prefix` (the root for none) of `store`, a backend the caller
    /// built with its own configuration. Its conditional updates are first used at the first
    /// write; a backend without them is refused there, before anything is written.
    pub fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        ObjectStoreStore {
            cas: CasStore::new(Objects::new(store, prefix)),
        }
    }

    /// The same store under another name in errors and batches
    /// (`object_store:<backend>/<prefix>` unless renamed), e.g. `receipts`. Any text without
    /// control or format characters.
    pub fn named(self, name: &str) -> Result<Self, InvalidInput> {
        check_store_name(name)?;
        Ok(ObjectStoreStore {
            cas: self.cas.map_inner(|objects| objects.named(name.to_owned())),
        })
    }

    /// The same store, each body in `codec`'s format instead of the envelope: with
    /// [`JsonCodec`](fencing_core::adapter::JsonCodec), the team's own JSON object with the
    /// fence, state and write id as three fields of it. Whatever the codec, a body is checked
    /// to read back as what it holds before it is written, and an object the codec cannot read
    /// is never written over.
    pub fn with_codec(self, codec: impl ObjectCodec + 'static) -> Self {
        ObjectStoreStore {
            cas: self.cas.with_codec(codec),
        }
    }

    /// The backend.
    pub fn object_store(&self) -> &Arc<dyn ObjectStore> {
        self.cas.inner().store()
    }

    /// The path prefix.
    pub fn prefix(&self) -> &Path {
        self.cas.inner().prefix()
    }

    /// Where record `key` lives: `<prefix>/<key>`, the key one path segment (percent-encoded
    /// where `object_store` requires, so a `/` in a key stays inside it).
    pub fn location(&self, key: &RecordKey) -> Path {
        self.cas.inner().location(key)
    }

    /// Checks now what the first write checks: that the backend refuses a create over an
    /// existing object, a stale `If-Match` and an `If-Match` on a missing object, on probe
    /// objects of its own under the prefix (removed after). A backend that takes any of them
    /// as a plain put cannot keep a stale holder out; it is refused here, and at the first
    /// write of a store that was not checked, before anything of a record is written. Once
    /// passed, it is not checked again by this store.
    ///
    /// # Errors
    ///
    /// [`fencing_core::Error::NotSupported`], naming the defect found
    /// ([`fencing_core::adapter::ConditionalPutDefect::of`] tells it apart), or the failure
    /// that kept the check from ending (a backend without conditional updates answers
    /// `NotImplemented`).
    pub async fn check_conditional_writes(&self) -> Result<()> {
        self.cas.inner().check_updates().await
    }

    /// Deletes `key` as its holder: accepted only with `holder`'s token, the record's fence.
    /// This writes a **tombstone** over the record by a conditional update on the version just
    /// read (the object stays, holding the fence and no record): readers
    /// ([`FencedStore::read`]) find no record, a write from a token below the kept fence is
    /// refused as stale ([`fencing_core::Error::Fenced`]), and only a token at least the
    /// fence meets the record absent (a claim may create it again). Returns the record
    /// deleted. A refusal is explained and the outcome reported as [`Holder::write`]'s; an
    /// ambiguous outcome is settled by reading the tombstone back, not sent again.
    pub async fn delete(&self, holder: &Holder, key: &RecordKey) -> Result<Record> {
        let attempt = self.cas.delete(key, holder.token());
        holder
            .run_write_once(self, &[key], &FencedWrite::holder_only(), attempt)
            .await
    }
}

#[async_trait]
impl FencedStore for ObjectStoreStore {
    fn name(&self) -> &str {
        self.cas.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.cas.read(key).await
    }
}

#[async_trait]
impl StoreWrites for ObjectStoreStore {
    /// A write on a record deleted by a holder of a higher token is refused as stale
    /// ([`fencing_core::Error::Fenced`], the fence the tombstone keeps); every other token
    /// finds the record absent.
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.cas.write(key, token, write).await
    }
}

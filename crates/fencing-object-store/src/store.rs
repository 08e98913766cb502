//! An `object_store` backend (under a path prefix) as a fenced store.

use std::sync::Arc;

use fencing_core::adapter::CasStore;
use fencing_core::{RecordKey, Result};
use object_store::ObjectStore;
use object_store::path::Path;

use crate::objects::Objects;

/// Fenced records as objects of any `object_store` backend, one per record at
/// `<prefix>/<key>`, each body an envelope that carries the fence, the state and a per-write
/// id ahead of the payload ([`fencing_core::adapter::envelope`]), or the team's own JSON
/// object with those as fields ([`Self::with_codec`]). Its name in errors is
/// `object_store:<backend>/<prefix>` unless [`Self::named`].
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
}

fencing_core::adapter::object_store_front!(ObjectStoreStore);

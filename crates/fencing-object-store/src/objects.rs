//! The two calls a compare-and-swap store needs, on `object_store`: `get` (body, ETag and
//! version) and `put_opts` with `PutMode::Update` / `PutMode::Create`.

use std::sync::Arc;

use async_trait::async_trait;
use fencing_core::adapter::{
    NewObject, PutOutcome, RequestEffect, StoredObject, VersionedStore, check_conditional_writes,
};
use fencing_core::{Error, RecordKey, Result};
use object_store::path::Path;
use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};
use tokio::sync::OnceCell;

use crate::error::ObjectFailure;

/// Objects under a prefix of an `object_store` backend as a [`VersionedStore`]: the version
/// is the ETag and version the backend reports, both kept.
#[derive(Debug)]
pub(crate) struct Objects {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    name: String,
    /// Set once the backend has shown it updates conditionally.
    updates_checked: OnceCell<()>,
}

impl Objects {
    pub(crate) fn new(store: Arc<dyn ObjectStore>, prefix: Path) -> Self {
        let name = format!("object_store:{store}/{prefix}");
        Objects {
            store,
            prefix,
            name,
            updates_checked: OnceCell::new(),
        }
    }

    /// The same objects under another store name.
    pub(crate) fn named(self, name: String) -> Self {
        Objects { name, ..self }
    }

    /// Before the first write: that the backend refuses the conditional puts it must
    /// ([`check_conditional_writes`], on probe objects of its own under the prefix, removed
    /// after). A backend that creates but cannot update (the local file system) would
    /// otherwise take a record's first write and refuse every later one, and one that takes a
    /// stale or dangling `If-Match` as a plain put would let a stale holder's write land.
    pub(crate) async fn check_updates(&self) -> Result<()> {
        self.updates_checked
            .get_or_try_init(|| async {
                check_conditional_writes(&Unchecked(self), |key: RecordKey| async move {
                    // The probes are this store's own objects: a plain delete is safe.
                    let _ = self.store.delete(&self.location(&key)).await;
                })
                .await
            })
            .await
            .map(drop)
    }

    pub(crate) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub(crate) fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// Where record `key` lives: one path segment under the prefix (a `/` in the key is
    /// percent-encoded, so a key never reaches another record's object).
    pub(crate) fn location(&self, key: &RecordKey) -> Path {
        self.prefix.clone().join(key.as_str())
    }

    fn failed(&self, err: object_store::Error, effect: RequestEffect) -> Error {
        ObjectFailure::Client(err, self.store.to_string()).into_error(&self.name, effect)
    }

    /// The object of `key` and its version, if any.
    async fn find(&self, key: &RecordKey) -> Result<Option<StoredObject<UpdateVersion>>> {
        let location = self.location(key);
        let got = match self.store.get_opts(&location, GetOptions::default()).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(err) => return Err(self.failed(err, RequestEffect::ReadOnly)),
        };
        let version = UpdateVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        if version.e_tag.is_none() && version.version.is_none() {
            return Err(ObjectFailure::NoVersion(format!(
                "{} reported neither an ETag nor a version for {location}: it cannot update \
                 conditionally, and nothing was written",
                self.store
            ))
            .into_error(&self.name, RequestEffect::ReadOnly));
        }
        let body = got
            .bytes()
            .await
            .map_err(|err| self.failed(err, RequestEffect::ReadOnly))?;
        Ok(Some(StoredObject {
            body: body.to_vec(),
            version,
        }))
    }

    /// Puts `object`'s body at `key` in `mode`. No attributes (not even its content type):
    /// some backends (the local file system) refuse a put that has any.
    async fn put_object(
        &self,
        key: &RecordKey,
        object: NewObject<'_>,
        mode: PutMode,
    ) -> Result<PutOutcome<UpdateVersion>> {
        let options = PutOptions {
            mode,
            ..PutOptions::default()
        };
        match self
            .store
            .put_opts(&self.location(key), PutPayload::from(object.body), options)
            .await
        {
            Ok(put) => Ok(PutOutcome::Applied(UpdateVersion {
                e_tag: put.e_tag,
                version: put.version,
            })),
            // The object changed, appeared, or vanished since it was read: 412, and 409 where
            // two conditional writes met (S3) or Azurite answers for Azure's 412.
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. }
                | object_store::Error::NotFound { .. },
            ) => Ok(PutOutcome::Conflict),
            Err(err) => Err(self.failed(err, RequestEffect::Writes)),
        }
    }
}

/// The objects with no check of the backend first: what the check itself writes through.
#[derive(Debug)]
struct Unchecked<'a>(&'a Objects);

#[async_trait]
impl VersionedStore for Objects {
    type Version = UpdateVersion;

    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<UpdateVersion>>> {
        self.find(key).await
    }

    async fn put(
        &self,
        key: &RecordKey,
        object: NewObject<'_>,
        expected: Option<&UpdateVersion>,
    ) -> Result<PutOutcome<UpdateVersion>> {
        self.check_updates().await?;
        Unchecked(self).put(key, object, expected).await
    }
}

#[async_trait]
impl VersionedStore for Unchecked<'_> {
    type Version = UpdateVersion;

    fn name(&self) -> &str {
        &self.0.name
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<UpdateVersion>>> {
        self.0.find(key).await
    }

    async fn put(
        &self,
        key: &RecordKey,
        object: NewObject<'_>,
        expected: Option<&UpdateVersion>,
    ) -> Result<PutOutcome<UpdateVersion>> {
        let mode = match expected {
            Some(version) => PutMode::Update(version.clone()),
            None => PutMode::Create,
        };
        self.0.put_object(key, object, mode).await
    }
}

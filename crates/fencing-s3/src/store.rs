//! An S3 bucket (under a key prefix) as a fenced store.

use aws_sdk_s3::Client;
use fencing_core::adapter::{CasStore, check_conditional_writes};
use fencing_core::{FencingToken, RecordKey, Result};

use crate::bucket::S3Bucket;
use crate::objects::S3Objects;

/// Fenced records as objects, one per record at `<prefix><key>`, each body an envelope that
/// carries the fence, the state and a per-write id ahead of the payload
/// ([`fencing_core::adapter::envelope`]), or the team's own JSON object with those as fields
/// ([`Self::with_codec`]).
///
/// S3 cannot compare numbers, only ETags, so a write is [`CasStore`]'s loop (the same as
/// `fencing-object-store`'s, codecs and tombstones included, the store's name in errors
/// `s3:<bucket>/<prefix>` unless [`Self::named`]): read the object
/// (body and ETag) → decide → put with `If-Match: <etag>` (or `If-None-Match: *` for a new
/// record) → on a conflict (412, 409, or 404 on an `If-Match`) read and decide again. A holder's
/// next write to the same record reuses the ETag its last write returned and skips the read.
/// With the fence inside the body, no two writes leave the same ETag, so a stale holder's
/// `If-Match` can never land on a newer holder's byte-identical object. A delete
/// ([`Self::delete`]) puts a tombstone with `If-Match` on the ETag just read, never a
/// `DeleteObject`; the tombstone is a few dozen bytes with `x-amz-meta-deleted: true`.
#[derive(Debug)]
pub struct S3Store {
    cas: CasStore<S3Objects>,
}

impl S3Store {
    /// The fenced records in `bucket`, through `client` (built by the caller: any endpoint,
    /// path-style or not, credentials and HTTP stack).
    pub fn new(client: Client, bucket: S3Bucket) -> Self {
        S3Store {
            cas: CasStore::new(S3Objects::new(client, bucket)),
        }
    }

    /// The bucket and prefix.
    pub fn bucket(&self) -> &S3Bucket {
        self.cas.inner().bucket()
    }

    /// The client.
    pub fn client(&self) -> &Client {
        self.cas.inner().client()
    }

    /// Checks that the bucket refuses what a fenced store needs refused: a create over an
    /// existing object (`If-None-Match: *`), a stale `If-Match` and an `If-Match` on a
    /// missing key, on probe objects of its own under the prefix (deleted after). An
    /// S3-compatible server that takes any of them as a plain put answers every ordinary
    /// write as a fenced store should, yet lets a stale holder's put land between a newer
    /// holder's read and write: run this at start-up against a server you have not checked
    /// (`fencing probe` does).
    ///
    /// # Errors
    ///
    /// [`fencing_core::Error::NotSupported`], naming the defect found
    /// ([`fencing_core::adapter::ConditionalPutDefect::of`] tells it apart), or the failure
    /// that kept the check from ending.
    pub async fn check_conditional_writes(&self) -> Result<()> {
        let (client, bucket) = (self.client(), self.bucket());
        check_conditional_writes(self.cas.inner(), |key: RecordKey| async move {
            // The probes are this check's own objects: a plain delete is safe.
            if let Ok(object) = bucket.object_key(&key) {
                let _ = client
                    .delete_object()
                    .bucket(bucket.bucket())
                    .key(object)
                    .send()
                    .await;
            }
        })
        .await
    }

    /// The fence `key`'s object holds: its record's, or the one its tombstone keeps.
    pub(crate) async fn fence_of(&self, key: &RecordKey) -> Result<Option<FencingToken>> {
        Ok(self
            .cas
            .get(key)
            .await?
            .and_then(|found| found.contents.fence()))
    }
}

fencing_core::adapter::object_store_front!(S3Store);

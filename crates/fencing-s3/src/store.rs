//! An S3 bucket (under a key prefix) as a fenced store.

use async_trait::async_trait;
use aws_sdk_s3::Client;
use fencing_core::adapter::{
    CasStore, HolderExt, ObjectCodec, StoreWrites, check_conditional_writes, check_store_name,
};
use fencing_core::{
    FencedStore, FencedWrite, FencingToken, Holder, InvalidInput, Record, RecordKey, Result,
    Written,
};

use crate::bucket::S3Bucket;
use crate::objects::S3Objects;

/// Fenced records as objects, one per record at `<prefix><key>`, each body an envelope that
/// carries the fence, the state and a per-write id ahead of the payload
/// ([`fencing_core::adapter::envelope`]), or the team's own JSON object with those as fields
/// ([`Self::with_codec`]).
///
/// S3 cannot compare numbers, only ETags, so a write is [`CasStore`]'s loop (the same as
/// `fencing-object-store`'s, codecs and tombstones included): read the object
/// (body and ETag) → decide → put with `If-Match: <etag>` (or `If-None-Match: *` for a new
/// record) → on a conflict (412, 409, or 404 on an `If-Match`) read and decide again. A holder's
/// next write to the same record reuses the ETag its last write returned and skips the read.
/// With the fence inside the body, no two writes leave the same ETag, so a stale holder's
/// `If-Match` can never land on a newer holder's byte-identical object.
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

    /// The same store under another name in errors and batches (`s3:<bucket>/<prefix>` unless
    /// renamed), e.g. `receipts`. Any text without control or format characters.
    pub fn named(self, name: &str) -> Result<Self, InvalidInput> {
        check_store_name(name)?;
        Ok(S3Store {
            cas: self.cas.map_inner(|objects| objects.named(name.to_owned())),
        })
    }

    /// The same store, each body in `codec`'s format instead of the envelope: with
    /// [`JsonCodec`](crate::JsonCodec), the team's own JSON object with the fence, state and write id as three
    /// fields of it. Whatever the codec, a body is checked to read back as what it holds
    /// before it is written, and an object the codec cannot read is never written over.
    pub fn with_codec(self, codec: impl ObjectCodec + 'static) -> Self {
        S3Store {
            cas: self.cas.with_codec(codec),
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

    /// Deletes `key` as its holder: accepted only with `holder`'s token, the object's fence.
    /// This puts a **tombstone** over the object with `If-Match` on the ETag just read, never
    /// a `DeleteObject`: with the object gone, a stale holder's claim could create the record
    /// again under its lower token. The tombstone keeps the fence (the object stays, a few
    /// dozen bytes, `x-amz-meta-deleted: true`): readers ([`FencedStore::read`]) find no
    /// record, a write from a token below the kept fence is refused as stale
    /// ([`fencing_core::Error::Fenced`]), and only a token at least the fence meets the record
    /// absent (a claim may create it again). A lifecycle rule that expires tombstones gives
    /// that protection up for the records it removes. Returns the record deleted. A refusal
    /// is explained and the outcome reported as [`Holder::write`]'s; an ambiguous outcome is
    /// settled by reading the tombstone back, not sent again.
    pub async fn delete(&self, holder: &Holder, key: &RecordKey) -> Result<Record> {
        let attempt = self.cas.delete(key, holder.token());
        holder
            .run_write_once(self, &[key], &FencedWrite::holder_only(), attempt)
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

#[async_trait]
impl FencedStore for S3Store {
    fn name(&self) -> &str {
        self.cas.name()
    }

    async fn read(&self, key: &RecordKey) -> Result<Option<Record>> {
        self.cas.read(key).await
    }
}

#[async_trait]
impl StoreWrites for S3Store {
    async fn write(
        &self,
        key: &RecordKey,
        token: FencingToken,
        write: &FencedWrite,
    ) -> Result<Written> {
        self.cas.write(key, token, write).await
    }
}

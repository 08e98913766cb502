//! The two calls a compare-and-swap store needs, on S3: `GetObject` (body and ETag) and
//! `PutObject` with `If-Match` / `If-None-Match: *`.

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;

use fencing_core::adapter::{NewObject, PutOutcome, RequestEffect, StoredObject, VersionedStore};
use fencing_core::{Error, RecordKey, Result};

use crate::bucket::S3Bucket;
use crate::error::{S3Failure, request_failed};

/// Objects in a bucket as a [`VersionedStore`]: the version is the ETag. Conditional writes
/// are settled by [`fencing_core::adapter::CasStore`] (it re-reads after a lost answer), never re-sent
/// by the SDK, so this store's client has the SDK's retries off.
#[derive(Clone, Debug)]
pub(crate) struct S3Objects {
    client: Client,
    bucket: S3Bucket,
    name: String,
}

impl S3Objects {
    /// Objects in `bucket` through a copy of `client` with the SDK's own retries turned off
    /// (made once here, rather than a configuration layer on every request).
    pub(crate) fn new(client: Client, bucket: S3Bucket) -> Self {
        let name = bucket.store_name();
        let without_retries = client
            .config()
            .to_builder()
            .retry_config(RetryConfig::disabled())
            .build();
        S3Objects {
            client: Client::from_conf(without_retries),
            bucket,
            name,
        }
    }

    /// The same objects under another store name.
    pub(crate) fn named(self, name: String) -> Self {
        S3Objects { name, ..self }
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn bucket(&self) -> &S3Bucket {
        &self.bucket
    }

    fn failed<E>(
        &self,
        err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
        effect: RequestEffect,
    ) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        request_failed(&self.name, effect, err)
    }
}

/// A conditional request the service refused because the object changed: 412 Precondition
/// Failed, 409 ConditionalRequestConflict (a concurrent conditional write), or 404 on an
/// `If-Match` (the object is gone). A 404 with another code (`NoSuchBucket`) says nothing
/// about the object, so it is a failure, not a conflict.
fn is_conflict<E: ProvideErrorMetadata>(
    err: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> bool {
    let status = err.raw_response().map(|r| r.status().as_u16());
    let code = err.code();
    matches!(status, Some(412 | 409))
        || (status == Some(404) && code.is_none_or(|c| c == "NoSuchKey"))
        || matches!(
            code,
            Some("PreconditionFailed" | "ConditionalRequestConflict" | "NoSuchKey")
        )
}

/// `text` with every byte outside printable ASCII percent-encoded, for user metadata (which
/// S3 carries as HTTP headers): states may be any Unicode.
fn ascii_safe(text: &str) -> String {
    let mut safe = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_graphic() && byte != b'%' || byte == b' ' {
            safe.push(char::from(byte));
        } else {
            safe.push_str(&format!("%{byte:02X}"));
        }
    }
    safe
}

#[async_trait]
impl VersionedStore for S3Objects {
    type Version = String;

    fn name(&self) -> &str {
        &self.name
    }

    async fn get(&self, key: &RecordKey) -> Result<Option<StoredObject<String>>> {
        let object = self.bucket.object_key(key)?;
        let out = match self
            .client
            .get_object()
            .bucket(self.bucket.bucket())
            .key(&object)
            .send()
            .await
        {
            Ok(out) => out,
            Err(err) if err.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Ok(None);
            }
            Err(err) => return Err(self.failed(err, RequestEffect::ReadOnly)),
        };
        let version = out.e_tag().map(str::to_owned).ok_or_else(|| {
            S3Failure::Unexpected(format!("GetObject of {object} returned no ETag"))
                .into_error(&self.name, RequestEffect::ReadOnly)
        })?;
        let body =
            out.body.collect().await.map_err(|e| {
                S3Failure::BodyLost(e).into_error(&self.name, RequestEffect::ReadOnly)
            })?;
        Ok(Some(StoredObject {
            body: body.to_vec(),
            version,
        }))
    }

    /// Puts the body, its content type, and the fence and state as user metadata for people
    /// browsing the bucket (a tombstone: its kept fence, and `deleted: true`).
    async fn put(
        &self,
        key: &RecordKey,
        object: NewObject<'_>,
        expected: Option<&String>,
    ) -> Result<PutOutcome<String>> {
        let object_key = self.bucket.object_key(key)?;
        let state = object.state.map_or_else(String::new, |s| ascii_safe(s));
        let mut request = self
            .client
            .put_object()
            .bucket(self.bucket.bucket())
            .key(&object_key)
            .content_type(object.content_type)
            .metadata(
                "fence",
                object.fence.map_or_else(String::new, |f| f.to_string()),
            )
            .metadata("state", state)
            .body(ByteStream::from(object.body));
        if object.tombstone {
            request = request.metadata("deleted", "true");
        }
        request = match expected {
            Some(etag) => request.if_match(etag),
            None => request.if_none_match("*"),
        };
        match request.send().await {
            Ok(out) => Ok(PutOutcome::Applied(
                out.e_tag().map(str::to_owned).unwrap_or_default(),
            )),
            Err(err) if is_conflict(&err) => Ok(PutOutcome::Conflict),
            Err(err) => Err(self.failed(err, RequestEffect::Writes)),
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_s3::config::http::HttpResponse;
    use aws_sdk_s3::error::ErrorMetadata;
    use aws_sdk_s3::operation::put_object::PutObjectError;
    use aws_sdk_s3::primitives::SdkBody;

    use super::*;

    /// A refused `PutObject` as the SDK gives it: the answer's status, and its error code.
    fn refused(status: u16, code: Option<&str>) -> SdkError<PutObjectError, HttpResponse> {
        let mut meta = ErrorMetadata::builder();
        if let Some(code) = code {
            meta = meta.code(code);
        }
        SdkError::service_error(
            PutObjectError::generic(meta.build()),
            HttpResponse::new(status.try_into().unwrap(), SdkBody::empty()),
        )
    }

    #[test]
    fn only_an_answer_about_the_object_is_a_conflict() {
        for (status, code) in [
            (412, Some("PreconditionFailed")),
            (412, None),
            (409, Some("ConditionalRequestConflict")),
            (409, None),
            (404, Some("NoSuchKey")),
            (404, None),
            (400, Some("PreconditionFailed")),
        ] {
            assert!(is_conflict(&refused(status, code)), "{status} {code:?}");
        }
        for (status, code) in [
            (404, Some("NoSuchBucket")),
            (403, Some("AccessDenied")),
            (500, Some("InternalError")),
            (503, None),
            (400, Some("InvalidRequest")),
        ] {
            assert!(!is_conflict(&refused(status, code)), "{status} {code:?}");
        }
    }

    #[test]
    fn metadata_is_ascii_whatever_the_state() {
        assert_eq!(ascii_safe("sending"), "sending");
        assert_eq!(ascii_safe("en cours"), "en cours");
        assert_eq!(ascii_safe("envoyé"), "envoy%C3%A9");
        assert_eq!(ascii_safe("100%"), "100%25");
    }
}

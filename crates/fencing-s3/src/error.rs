//! This adapter's failures, and how each maps onto the core's meaning-level error. A failure
//! of the SDK's own is given its meaning by `fencing_aws`, shared with DynamoDB.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStreamError;
use fencing_core::adapter::{Explained, RequestEffect};
use fencing_core::{BoxError, Error, Failure, InvalidInput};

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum S3Failure {
    /// The service answered without what the request must return (an object with no ETag).
    Unexpected(String),
    /// An object's body stopped arriving before its end.
    BodyLost(ByteStreamError),
    /// An object under the store's prefix whose key is not a record key: not this library's.
    ForeignKey(String, InvalidInput),
}

impl S3Failure {
    /// The core error for a failed request to `store` with this `effect`.
    pub(crate) fn into_error(self, store: &str, effect: RequestEffect) -> Error {
        let (failure, source): (Failure, BoxError) = match self {
            S3Failure::Unexpected(what) => (Failure::Unexpected, what.into()),
            S3Failure::BodyLost(err) => (Failure::AnswerLost, Box::new(err)),
            S3Failure::ForeignKey(key, why) => {
                let what = format!("object key {key:?} is not a record key: {why}");
                (Failure::Corrupt, Box::new(Explained::new(what, why)))
            }
        };
        Error::failed_request(store, effect, failure, source)
    }
}

/// The core error for a request to `store` that the SDK failed.
pub(crate) fn request_failed<E>(
    store: &str,
    effect: RequestEffect,
    err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    fencing_aws::request_failed(store, effect, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_of_the_adapters_own_has_its_meaning() {
        let why = fencing_core::RecordKey::new("").unwrap_err();
        let foreign = S3Failure::ForeignKey(String::new(), why)
            .into_error("receipts", RequestEffect::ReadOnly);
        assert!(matches!(foreign, Error::Corrupt { .. }), "{foreign:?}");
        let explained = std::error::Error::source(&foreign).unwrap();
        assert!(explained.source().unwrap().is::<InvalidInput>());
        let unexpected = S3Failure::Unexpected("GetObject returned no ETag".into())
            .into_error("receipts", RequestEffect::ReadOnly);
        assert!(
            matches!(unexpected, Error::Backend { .. }),
            "{unexpected:?}"
        );
    }
}

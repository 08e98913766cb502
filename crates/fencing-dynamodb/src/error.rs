//! This adapter's failures, and how each maps onto the core's meaning-level error.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use fencing_core::Error;
use fencing_core::adapter::RequestEffect;

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum DynamoFailure {
    /// A stored value breaks the adapter's format (a fence that is not a token, a state that
    /// is not a `State`, a payload that is not Binary).
    Corrupt(String),
    /// The service answered something the request cannot produce.
    Inconsistent(&'static str),
}

impl DynamoFailure {
    /// The core error for this failure on `store`. Neither is a lost answer.
    pub(crate) fn into_error(self, store: &str, effect: RequestEffect) -> Error {
        let message = match self {
            DynamoFailure::Corrupt(what) => what,
            DynamoFailure::Inconsistent(what) => what.to_owned(),
        };
        Error::failed_request(store, effect, false, message.into())
    }
}

/// A copy of the caller's client with the SDK's own retries off, made once per store, lease or
/// token source. The SDK would re-send a write whose answer was lost and report the refusal
/// its own first attempt causes (a claim finding its own fence, an acquisition finding its own
/// owner); this crate settles a lost answer itself, knowing what the request meant.
pub(crate) fn without_retries(client: &aws_sdk_dynamodb::Client) -> aws_sdk_dynamodb::Client {
    let config = client
        .config()
        .to_builder()
        .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
        .build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

/// The core error for a request to `store` that the SDK failed: which failures may have
/// applied is `fencing_aws::answer_lost`; a missing table is named as such.
pub(crate) fn classify<E>(
    err: SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
    store: &str,
    effect: RequestEffect,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if err.code() == Some("ResourceNotFoundException") {
        let detail = err.message().unwrap_or_default().to_owned();
        return Error::failed_request(
            store,
            effect,
            false,
            format!(
                "{detail}: the table does not exist (DynamoTable::create_if_missing creates it)"
            )
            .into(),
        );
    }
    fencing_aws::request_failed(store, effect, err)
}

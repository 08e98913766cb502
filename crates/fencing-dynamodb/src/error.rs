//! This adapter's failures, and how each maps onto the core's meaning-level error.

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use fencing_core::adapter::{Explained, RequestEffect};
use fencing_core::{BoxError, Error, Failure};

/// What went wrong inside the adapter, before it is given a meaning for the caller.
#[derive(Debug)]
pub(crate) enum DynamoFailure {
    /// A stored value breaks the adapter's format (a fence that is not a token, a state that
    /// is not a `State`, a payload that is not Binary).
    Corrupt(String),
    /// The service answered something the request cannot produce.
    Inconsistent(&'static str),
    /// Other writers changed the item under every round the request may take.
    Contended(&'static str),
    /// A table's key schema is not the one the adapter needs; the message names the fix.
    Schema(String),
    /// A table the adapter created did not become active in time.
    NotActive(String),
    /// A transaction the service cancelled for reasons other than a condition: the codes it
    /// gave, one per item.
    Cancelled(Vec<String>),
    /// A request the SDK could not build from what it was given.
    NotBuilt(aws_sdk_dynamodb::error::BuildError),
}

impl DynamoFailure {
    /// The core error for this failure on `store`. None is a lost answer.
    pub(crate) fn into_error(self, store: &str, effect: RequestEffect) -> Error {
        let (failure, source): (Failure, BoxError) = match self {
            DynamoFailure::Corrupt(what) => (Failure::Corrupt, what.into()),
            DynamoFailure::Inconsistent(what) => (Failure::Unexpected, what.into()),
            DynamoFailure::Contended(what) => (Failure::Unavailable, what.into()),
            DynamoFailure::Schema(what) => (Failure::Misconfigured, what.into()),
            DynamoFailure::NotActive(what) => (Failure::Unavailable, what.into()),
            DynamoFailure::Cancelled(codes) => {
                // A conflict with another transaction or the table's capacity: try again.
                let busy = codes.iter().any(|code| {
                    matches!(
                        code.as_str(),
                        "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
                    )
                });
                let failure = if busy {
                    Failure::Unavailable
                } else {
                    Failure::Unexpected
                };
                let what = format!("the transaction was cancelled, nothing applied: {codes:?}");
                (failure, what.into())
            }
            DynamoFailure::NotBuilt(err) => (Failure::Unexpected, Box::new(err)),
        };
        Error::failed_request(store, effect, failure, source)
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

/// The core error for a request to `store` that the SDK failed: what it means is
/// `fencing_aws::meaning`; a missing table is named as such, with how to create it.
pub(crate) fn classify<E>(
    err: SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>,
    store: &str,
    effect: RequestEffect,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if err.code() == Some("ResourceNotFoundException") {
        let why = format!(
            "{}: the table does not exist (DynamoTable::create_if_missing creates it)",
            err.message().unwrap_or_default()
        );
        let failure = fencing_aws::meaning(&err);
        return Error::failed_request(store, effect, failure, Box::new(Explained::new(why, err)));
    }
    fencing_aws::request_failed(store, effect, err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_of_the_adapters_own_has_its_meaning() {
        let cancelled = |codes: &[&str]| {
            DynamoFailure::Cancelled(codes.iter().map(|c| (*c).to_owned()).collect())
        };
        for (failure, meaning) in [
            (DynamoFailure::Corrupt("fence -3".into()), Failure::Corrupt),
            (DynamoFailure::Inconsistent("odd"), Failure::Unexpected),
            (
                DynamoFailure::Contended("kept changing"),
                Failure::Unavailable,
            ),
            (
                DynamoFailure::Schema("key id + sk".into()),
                Failure::Misconfigured,
            ),
            (
                DynamoFailure::NotActive("60 s".into()),
                Failure::Unavailable,
            ),
            (
                cancelled(&["None", "TransactionConflict"]),
                Failure::Unavailable,
            ),
            (cancelled(&["ValidationError"]), Failure::Unexpected),
        ] {
            let err = failure.into_error("ledger", RequestEffect::Writes);
            assert_eq!(err.failure(), Some(meaning), "{err:?}");
        }
    }
}
